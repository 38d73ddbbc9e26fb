//! CustomResourceDefinitions: serving after Established (discovery, REST, OpenAPI v3),
//! structural pruning, defaults, int-or-string, preserved unknown fields, validation, CEL,
//! and cleanup of instances.

use kbind_cluster::{ClusterClientExt, DeleteParams, DynamicObject, Error, PostParams};
use serde_json::{Value, json};

use crate::check;
use crate::support::{CaseError, CaseResult, Context, Scope, WidgetCrd, eventually, expect_err, res, widget};
use crate::target::Target;

/// `io.kbind.conformance.x` for `x.conformance.kbind.io`: how kube-apiserver names a group's
/// OpenAPI v3 schemas.
fn reversed(group: &str) -> String {
    group.split('.').rev().collect::<Vec<_>>().join(".")
}

/// An Established CRD is served: discovery lists it, REST works, OpenAPI v3 describes it.
pub async fn crd_served_after_established(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "crdserve");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {"size": {"type": "integer"}}});
        let widgets = s.widget_crd(&WidgetCrd::with_spec(spec, true)).await?;
        let crd = c.get(&res::crds(), None, &format!("widgets.{group}")).await?;
        check!(
            crd.data["status"]["acceptedNames"]["kind"] == "Widget",
            "acceptedNames: {:?}",
            crd.data["status"]["acceptedNames"]
        );
        check!(
            crd.data["status"]["storedVersions"] == json!(["v1"]),
            "storedVersions: {:?}",
            crd.data["status"]["storedVersions"]
        );
        eventually(s.patience(), "Widgets in discovery", async || {
            let discovery = c.discovery().await?;
            let found = discovery.find(&group, "widgets").ctx("widgets in discovery")?;
            check!(
                found.kind == "Widget" && found.namespaced && found.version == "v1",
                "discovered {found:?}"
            );
            check!(found.has_status(), "discovery lacks widgets/status: {found:?}");
            Ok(())
        })
        .await?;
        let created = c
            .create(
                &widgets,
                Some(&ns),
                &widget(&group, "w", json!({"size": 1}))?,
                &PostParams::default(),
            )
            .await?;
        check!(created.data["spec"]["size"] == 1, "created widget: {:?}", created.data);
        let got = c.get(&widgets, Some(&ns), "w").await?;
        check!(got.metadata.uid == created.metadata.uid, "get returned another object");
        let key = format!("{}.v1.Widget", reversed(&group));
        eventually(s.patience(), "Widget in OpenAPI v3", async || {
            let doc = c.openapi_v3(&group, "v1").await?;
            let schema = doc
                .pointer("/components/schemas")
                .and_then(|s| s.get(&key))
                .ctx(format!("schema {key}"))?;
            let gvk = json!([{"group": group, "version": "v1", "kind": "Widget"}]);
            check!(
                schema["x-kubernetes-group-version-kind"] == gvk,
                "{key} gvk: {:?}",
                schema["x-kubernetes-group-version-kind"]
            );
            check!(
                schema.pointer("/properties/spec/properties/size/type") == Some(&json!("integer")),
                "{key}: {schema}"
            );
            Ok(())
        })
        .await
    }
    .await;
    s.finish(result).await
}

async fn create_widget(
    s: &Scope<'_>,
    ns: &str,
    spec_schema: Value,
    body: Value,
) -> CaseResult<(kbind_cluster::ApiResource, DynamicObject)> {
    let widgets = s.widget_crd(&WidgetCrd::with_spec(spec_schema, false)).await?;
    let body = crate::support::object(body)?;
    let created = s
        .admin
        .create(&widgets, Some(ns), &body, &PostParams::default())
        .await
        .ctx("create widget")?;
    Ok((widgets, created))
}

/// Fields the structural schema does not know are dropped on write.
pub async fn crd_prunes_unknown_fields(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "prune");
    let result = async {
        let ns = s.namespace("a").await?;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {"size": {"type": "integer"}, "inner": {"type": "object", "properties": {"a": {"type": "string"}}}}});
        let body = json!({
            "apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 1, "junk": "x", "inner": {"a": "kept", "b": "dropped"}},
            "extra": 1,
        });
        let (widgets, created) = create_widget(&s, &ns, spec, body).await?;
        check!(created.data["spec"] == json!({"size": 1, "inner": {"a": "kept"}}), "spec not pruned: {:?}", created.data["spec"]);
        check!(created.data.get("extra").is_none(), "unknown top-level field kept: {:?}", created.data);
        let stored = s.admin.get(&widgets, Some(&ns), "w").await?;
        check!(stored.data["spec"] == created.data["spec"], "stored spec differs: {:?}", stored.data["spec"]);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Schema defaults fill missing fields on create and update, nested under defaulted objects.
pub async fn crd_applies_defaults(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "defaults");
    let result = async {
        let ns = s.namespace("a").await?;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {
            "size": {"type": "integer", "default": 3},
            "mode": {"type": "string", "default": "fast"},
            "nested": {"type": "object", "default": {}, "properties": {"level": {"type": "integer", "default": 1}}},
        }});
        let (widgets, created) = create_widget(
            &s,
            &ns,
            spec,
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"}, "spec": {}}),
        )
        .await?;
        let want = json!({"size": 3, "mode": "fast", "nested": {"level": 1}});
        check!(
            created.data["spec"] == want,
            "defaulted spec on create: {:?}",
            created.data["spec"]
        );
        let mut update = created.clone();
        update.data["spec"] = json!({"mode": "slow"});
        let updated = s
            .admin
            .replace(&widgets, Some(&ns), "w", &update, &PostParams::default())
            .await?;
        let want = json!({"size": 3, "mode": "slow", "nested": {"level": 1}});
        check!(
            updated.data["spec"] == want,
            "defaulted spec on update: {:?}",
            updated.data["spec"]
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// An int-or-string field keeps integers as integers and strings as strings, and refuses the rest.
pub async fn crd_accepts_int_or_string(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "intstr");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {"port": {
            "x-kubernetes-int-or-string": true,
            "anyOf": [{"type": "integer"}, {"type": "string"}],
        }}});
        let widgets = s.widget_crd(&WidgetCrd::with_spec(spec, false)).await?;
        let pp = PostParams::default();
        let number = c
            .create(&widgets, Some(&ns), &widget(&group, "num", json!({"port": 8080}))?, &pp)
            .await?;
        check!(
            number.data["spec"]["port"] == json!(8080),
            "integer port: {:?}",
            number.data["spec"]
        );
        let name = c
            .create(
                &widgets,
                Some(&ns),
                &widget(&group, "name", json!({"port": "http"}))?,
                &pp,
            )
            .await?;
        check!(
            name.data["spec"]["port"] == json!("http"),
            "string port: {:?}",
            name.data["spec"]
        );
        let err = expect_err(
            c.create(
                &widgets,
                Some(&ns),
                &widget(&group, "bool", json!({"port": true}))?,
                &pp,
            )
            .await,
            "boolean port",
        )?;
        check!(
            matches!(err, Error::Invalid { .. }),
            "boolean port: expected 422, got {err:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// `x-kubernetes-preserve-unknown-fields` keeps arbitrary content below it, and only there.
pub async fn crd_preserves_unknown_fields_where_marked(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "preserve");
    let result = async {
        let ns = s.namespace("a").await?;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {
            "size": {"type": "integer"},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        }});
        let free = json!({"any": {"deep": [1, "two", {"three": true}]}, "n": 1.5});
        let body = json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"},
            "spec": {"size": 1, "extra": free, "junk": 1}});
        let (_, created) = create_widget(&s, &ns, spec, body).await?;
        check!(
            created.data["spec"]["extra"] == free,
            "preserved content changed: {:?}",
            created.data["spec"]["extra"]
        );
        check!(
            created.data["spec"].get("junk").is_none(),
            "unknown field outside the preserved subtree kept"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

fn invalid_fields(err: &Error) -> Option<Vec<String>> {
    match err {
        Error::Invalid { causes, .. } => Some(causes.iter().map(|c| c.field.clone()).collect()),
        _ => None,
    }
}

/// Type, range, length, enum and required violations are 422 with one cause per field.
pub async fn crd_validates_types(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "validate");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let spec = json!({"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "minimum": 0},
            "name": {"type": "string", "maxLength": 5},
            "mode": {"type": "string", "enum": ["a", "b"]},
        }});
        let widgets = s.widget_crd(&WidgetCrd::with_spec(spec, false)).await?;
        let pp = PostParams::default();
        let err = expect_err(
            c.create(&widgets, Some(&ns), &widget(&group, "t", json!({"size": "big"}))?, &pp)
                .await,
            "string size",
        )?;
        let fields =
            invalid_fields(&err).ok_or_else(|| CaseError::failed(format!("string size: expected 422, got {err:?}")))?;
        check!(
            fields.iter().any(|f| f == "spec.size"),
            "string size: causes {fields:?}"
        );
        let bad = json!({"size": -1, "name": "toolong", "mode": "c"});
        let err = expect_err(
            c.create(&widgets, Some(&ns), &widget(&group, "r", bad)?, &pp).await,
            "out-of-range fields",
        )?;
        let fields = invalid_fields(&err)
            .ok_or_else(|| CaseError::failed(format!("out-of-range: expected 422, got {err:?}")))?;
        for want in ["spec.size", "spec.name", "spec.mode"] {
            check!(
                fields.iter().any(|f| f == want),
                "out-of-range: no cause for {want}: {fields:?}"
            );
        }
        let err = expect_err(
            c.create(&widgets, Some(&ns), &widget(&group, "m", json!({"mode": "a"}))?, &pp)
                .await,
            "missing size",
        )?;
        let fields = invalid_fields(&err)
            .ok_or_else(|| CaseError::failed(format!("missing size: expected 422, got {err:?}")))?;
        check!(
            fields.iter().any(|f| f == "spec.size"),
            "missing size: causes {fields:?}"
        );
        let ok = c
            .create(
                &widgets,
                Some(&ns),
                &widget(&group, "ok", json!({"size": 0, "name": "five5", "mode": "b"}))?,
                &pp,
            )
            .await;
        check!(ok.is_ok(), "a valid widget was refused: {ok:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A CEL `self == oldSelf` rule makes a field immutable (422 with the rule's message).
pub async fn crd_cel_rule_keeps_field_immutable(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "cel");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let spec = json!({"type": "object", "properties": {
            "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "id is immutable"}]},
            "size": {"type": "integer"},
        }});
        let widgets = s.widget_crd(&WidgetCrd::with_spec(spec, false)).await?;
        let pp = PostParams::default();
        let w = c.create(&widgets, Some(&ns), &widget(&group, "w", json!({"id": "a", "size": 1}))?, &pp).await?;
        let mut resized = w.clone();
        resized.data["spec"]["size"] = json!(2);
        let w = c.replace(&widgets, Some(&ns), "w", &resized, &pp).await.ctx("update leaving id alone")?;
        let mut renamed = w.clone();
        renamed.data["spec"]["id"] = json!("b");
        let err = expect_err(c.replace(&widgets, Some(&ns), "w", &renamed, &pp).await, "changing an immutable id")?;
        let on_id = matches!(&err, Error::Invalid { causes, .. }
            if causes.iter().any(|c| c.field == "spec.id" && c.message.contains("id is immutable")));
        check!(on_id, "expected 422 on spec.id with the rule's message, got {err:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Deleting a CRD deletes its instances and stops serving it; a re-created CRD starts empty.
pub async fn deleting_crd_removes_instances(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "crddel");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let crd = WidgetCrd::open(false);
        let widgets = s.widget_crd(&crd).await?;
        for name in ["w1", "w2"] {
            c.create(
                &widgets,
                Some(&ns),
                &widget(&group, name, json!({}))?,
                &PostParams::default(),
            )
            .await?;
        }
        let crd_name = format!("widgets.{group}");
        c.delete(&res::crds(), None, &crd_name, &DeleteParams::default())
            .await?;
        eventually(s.patience(), "CRD gone", async || {
            let gone = c.get_opt(&res::crds(), None, &crd_name).await?;
            check!(gone.is_none(), "CRD still there");
            Ok(())
        })
        .await?;
        eventually(s.patience(), "Widgets no longer served", async || {
            let err = expect_err(
                c.list(&widgets, Some(&ns), &Default::default()).await,
                "list after CRD deletion",
            )?;
            // kube-apiserver answers a removed resource's path with a plain `404 page not found`
            // (NotServed); fakeapi with a NotFound Status. Both are a 404 that is never "absent"
            // by accident: NotServed does not release a finalizer.
            check!(err.code() == 404, "expected 404, got {err:?}");
            Ok(())
        })
        .await?;
        let widgets = s.widget_crd(&crd).await?;
        let list = c.list(&widgets, Some(&ns), &Default::default()).await?;
        check!(
            list.items.is_empty(),
            "instances survived their CRD: {:?}",
            list.items.iter().map(|o| &o.metadata.name).collect::<Vec<_>>()
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}
