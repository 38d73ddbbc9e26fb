//! Server-side apply: managedFields ownership, list-map merge, removal of dropped fields,
//! conflicts and force.

use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, Error, PostParams};
use serde_json::{Value, json};

use crate::check;
use crate::support::{CaseResult, Context, Scope, WidgetCrd, eventually, expect_err, object, res, to_json, widget};
use crate::target::Target;

fn applied_config_map(name: &str, data: Value) -> Value {
    json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data})
}

/// Whether `manager` owns the field at `path` (e.g. `["f:data", "f:x"]`) with `operation`.
fn owns(obj: &DynamicObject, manager: &str, operation: &str, path: &[&str]) -> bool {
    obj.metadata.managed_fields.iter().flatten().any(|entry| {
        entry.manager.as_deref() == Some(manager)
            && entry.operation.as_deref() == Some(operation)
            && entry.fields_v1.as_ref().is_some_and(|f| {
                let pointer: String = path.iter().map(|p| format!("/{p}")).collect();
                f.0.pointer(&pointer).is_some()
            })
    })
}

fn managers(obj: &DynamicObject) -> Vec<(Option<String>, Option<String>)> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| (e.manager.clone(), e.operation.clone()))
        .collect()
}

async fn apply_cm(
    c: &dyn ClusterClient,
    ns: &str,
    data: Value,
    manager: &str,
    force: bool,
) -> kbind_cluster::Result<DynamicObject> {
    c.apply(
        &res::config_maps(),
        Some(ns),
        "cm",
        applied_config_map("cm", data),
        manager,
        force,
    )
    .await
}

/// Apply creates a missing object and records its manager (Apply); a plain update records Update.
pub async fn apply_creates_and_records_manager(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssanew");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let created = apply_cm(c.as_ref(), &ns, json!({"x": "1"}), "conformance-a", false)
            .await
            .ctx("apply creates")?;
        check!(created.data["data"]["x"] == "1", "applied data: {:?}", created.data);
        check!(created.metadata.uid.is_some(), "applied object has no uid");
        check!(
            owns(&created, "conformance-a", "Apply", &["f:data", "f:x"]),
            "managedFields do not give data.x to conformance-a: {:?}",
            created.metadata.managed_fields
        );
        let mut updated = created.clone();
        updated.data["data"]["y"] = json!("2");
        let params = PostParams {
            field_manager: Some("conformance-u".into()),
            ..PostParams::default()
        };
        let updated = c
            .replace(&res::config_maps(), Some(&ns), "cm", &updated, &params)
            .await?;
        check!(
            owns(&updated, "conformance-u", "Update", &["f:data", "f:y"]),
            "managedFields do not give data.y to conformance-u: {:?}",
            updated.metadata.managed_fields
        );
        check!(
            owns(&updated, "conformance-a", "Apply", &["f:data", "f:x"]),
            "an update took data.x from its applier: {:?}",
            managers(&updated)
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Two appliers of one list-map (keyed by name) each keep their own entries.
pub async fn apply_merges_list_maps_by_key(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssamap");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let spec_schema = json!({
            "type": "object",
            "properties": {"ports": {
                "type": "array",
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["name"],
                "items": {"type": "object", "required": ["name"], "properties": {
                    "name": {"type": "string"}, "port": {"type": "integer"},
                }},
            }},
        });
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::with_spec(spec_schema, false)).await?;
        let body = |ports: Value| json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": "w"}, "spec": {"ports": ports}});
        c.apply(&widgets, Some(&ns), "w", body(json!([{"name": "http", "port": 80}])), "conformance-a", false).await?;
        c.apply(&widgets, Some(&ns), "w", body(json!([{"name": "https", "port": 443}])), "conformance-b", false).await?;
        let w = c
            .apply(&widgets, Some(&ns), "w", body(json!([{"name": "http", "port": 8080}])), "conformance-a", false)
            .await?;
        let mut ports: Vec<(String, i64)> = w.data["spec"]["ports"]
            .as_array()
            .ctx("spec.ports")?
            .iter()
            .map(|p| (p["name"].as_str().unwrap_or("").to_string(), p["port"].as_i64().unwrap_or(0)))
            .collect();
        ports.sort();
        check!(
            ports == [("http".to_string(), 8080), ("https".to_string(), 443)],
            "merged ports: {ports:?}"
        );
        let key = r#"k:{"name":"https"}"#;
        check!(owns(&w, "conformance-b", "Apply", &["f:spec", "f:ports", key]), "https entry not owned by b: {:?}", w.metadata.managed_fields);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A field the applier drops from its next apply is removed, unless another manager owns it.
pub async fn apply_removes_fields_dropped_from_reapply(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssadrop");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        apply_cm(c.as_ref(), &ns, json!({"x": "1", "y": "1"}), "conformance-a", false).await?;
        c.apply(
            &res::config_maps(),
            Some(&ns),
            "cm",
            applied_config_map("cm", json!({"z": "1"})),
            "conformance-b",
            false,
        )
        .await?;
        let cm = apply_cm(c.as_ref(), &ns, json!({"x": "1"}), "conformance-a", false).await?;
        let data = cm.data["data"].as_object().ctx("data")?;
        let mut keys: Vec<&str> = data.keys().map(String::as_str).collect();
        keys.sort_unstable();
        check!(keys == ["x", "z"], "after re-apply without y: {keys:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Applying a value another manager owns is a 409 naming the field and the owner.
pub async fn apply_conflict_is_409_with_causes(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssaconf");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        apply_cm(c.as_ref(), &ns, json!({"x": "1"}), "conformance-a", false).await?;
        let err = expect_err(
            apply_cm(c.as_ref(), &ns, json!({"x": "2"}), "conformance-b", false).await,
            "conflicting apply",
        )?;
        let Error::Conflict { causes, message } = &err else {
            return Err(crate::CaseError::failed(format!(
                "conflicting apply: expected 409, got {err:?}"
            )));
        };
        check!(
            causes
                .iter()
                .any(|c| c.reason == "FieldManagerConflict" && c.field == ".data.x"),
            "causes do not name .data.x: {causes:?}"
        );
        check!(
            message.contains("conformance-a"),
            "conflict message does not name the owner: {message}"
        );
        let cm = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(
            cm.data["data"]["x"] == "1",
            "a refused apply changed the object: {:?}",
            cm.data
        );
        let same = apply_cm(c.as_ref(), &ns, json!({"x": "1"}), "conformance-b", false).await;
        check!(
            same.is_ok(),
            "applying the same value as the owner is shared ownership, not a conflict: {same:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A forced apply takes the value and the field's ownership.
pub async fn apply_force_transfers_ownership(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssaforce");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        apply_cm(c.as_ref(), &ns, json!({"x": "1", "keep": "a"}), "conformance-a", false).await?;
        let cm = apply_cm(c.as_ref(), &ns, json!({"x": "2"}), "conformance-b", true)
            .await
            .ctx("forced apply")?;
        check!(
            cm.data["data"]["x"] == "2",
            "forced apply lost its value: {:?}",
            cm.data
        );
        check!(
            owns(&cm, "conformance-b", "Apply", &["f:data", "f:x"]),
            "b does not own data.x: {:?}",
            cm.metadata.managed_fields
        );
        check!(
            !owns(&cm, "conformance-a", "Apply", &["f:data", "f:x"]),
            "a still owns data.x: {:?}",
            cm.metadata.managed_fields
        );
        check!(
            owns(&cm, "conformance-a", "Apply", &["f:data", "f:keep"]),
            "a lost data.keep: {:?}",
            cm.metadata.managed_fields
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// An apply that names a UID: the live object's applies; another object's is 422 (`metadata.uid`
/// is immutable) and changes nothing; a missing object's is 409 and creates nothing. (kbind's
/// apply after its create names the created copy this way.)
pub async fn apply_with_a_uid_lands_only_on_that_object(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssauid");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let cm = apply_cm(c.as_ref(), &ns, json!({"x": "1"}), "conformance-a", false).await?;
        let uid = cm.metadata.uid.clone().unwrap_or_default();
        let with_uid = |name: &str, uid: &str, x: &str| {
            let mut body = applied_config_map(name, json!({"x": x}));
            body["metadata"]["uid"] = json!(uid);
            body
        };
        let same = c
            .apply(
                &res::config_maps(),
                Some(&ns),
                "cm",
                with_uid("cm", &uid, "2"),
                "conformance-a",
                true,
            )
            .await
            .ctx("apply naming the live object's uid")?;
        check!(
            same.data["data"]["x"] == "2",
            "apply with the right uid lost its value: {:?}",
            same.data
        );
        let other = "00000000-0000-0000-0000-000000000001";
        let err = expect_err(
            c.apply(
                &res::config_maps(),
                Some(&ns),
                "cm",
                with_uid("cm", other, "3"),
                "conformance-a",
                true,
            )
            .await,
            "apply naming another uid",
        )?;
        check!(
            matches!(&err, Error::Invalid { causes, .. } if causes.iter().any(|c| c.field == "metadata.uid")),
            "another uid: expected 422 on metadata.uid, got {err:?}"
        );
        let now = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(
            now.data["data"]["x"] == "2",
            "a refused apply changed the object: {:?}",
            now.data
        );
        let err = expect_err(
            c.apply(
                &res::config_maps(),
                Some(&ns),
                "gone",
                with_uid("gone", &uid, "1"),
                "conformance-a",
                true,
            )
            .await,
            "apply naming a uid where nothing is",
        )?;
        check!(err.is_conflict(), "uid of a missing object: expected 409, got {err:?}");
        check!(
            c.get_opt(&res::config_maps(), Some(&ns), "gone").await?.is_none(),
            "an apply naming a uid created an object"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A resourceVersion no stored object has: etcd revisions are counted up from 1 in a u64.
const UNMATCHABLE_RV: &str = "18446744073709551615";

/// An apply whose `metadata.resourceVersion` no object has can only create: where nothing is it
/// creates the object with one entry, its manager's Apply; where anything is (someone else's
/// object or the manager's own) it is 409 and changes nothing; and creating asks RBAC for
/// `create` besides `patch`. A later apply of the same manager then prunes what it dropped and
/// leaves other managers' fields alone, as after any first apply. (kbind's first write of a
/// provider copy. A create carrying an Apply entry in `metadata.managedFields` would not do: the
/// create's own Update entry takes every field from it and the Apply entry is gone.)
pub async fn apply_with_an_unmatchable_resource_version_only_creates(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "ssaonly");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(true)).await?;
        let body = |name: &str, spec: Value| {
            json!({"apiVersion": format!("{group}/v1"), "kind": "Widget",
                "metadata": {"name": name, "resourceVersion": UNMATCHABLE_RV, "labels": {"app": "web"}},
                "spec": spec})
        };
        let created = c
            .apply(
                &widgets,
                Some(&ns),
                "w",
                body("w", json!({"size": 1, "drop": {"x": 1}})),
                "conformance-a",
                true,
            )
            .await
            .ctx("an apply with an unmatchable resourceVersion where nothing is")?;
        check!(
            managers(&created) == vec![(Some("conformance-a".to_string()), Some("Apply".to_string()))],
            "the created object's managers: {:?}",
            created.metadata.managed_fields
        );
        check!(
            owns(&created, "conformance-a", "Apply", &["f:spec", "f:drop", "f:x"]),
            "the apply's fields: {:?}",
            created.metadata.managed_fields
        );
        let err = expect_err(
            c.apply(
                &widgets,
                Some(&ns),
                "w",
                body("w", json!({"size": 2})),
                "conformance-a",
                true,
            )
            .await,
            "the same apply where the object now is",
        )?;
        check!(err.is_conflict(), "an existing object: expected 409, got {err:?}");
        let theirs = c
            .create(
                &widgets,
                Some(&ns),
                &widget(&group, "theirs", json!({"size": 9}))?,
                &PostParams::default(),
            )
            .await?;
        let err = expect_err(
            c.apply(
                &widgets,
                Some(&ns),
                "theirs",
                body("theirs", json!({"size": 2})),
                "conformance-a",
                true,
            )
            .await,
            "the apply where someone else's object is",
        )?;
        check!(err.is_conflict(), "someone else's object: expected 409, got {err:?}");
        for (name, before) in [("w", &created), ("theirs", &theirs)] {
            let now = c.get(&widgets, Some(&ns), name).await?;
            check!(
                now.metadata.resource_version == before.metadata.resource_version,
                "a refused apply changed {name}: {:?}",
                now.data
            );
        }
        // Another manager sets a field of its own and drifts ours; the next forced apply reverts
        // the drift, prunes what it no longer sets and keeps the other manager's field, and an
        // unforced one after it meets no conflict.
        let drifted = json!({"spec": {"size": 5, "other": 1}});
        c.patch(
            &widgets,
            Some(&ns),
            "w",
            &kbind_cluster::Patch::Merge(drifted),
            &kbind_cluster::PatchParams {
                field_manager: Some("conformance-b".into()),
                ..Default::default()
            },
        )
        .await?;
        let mut again = body("w", json!({"size": 1}));
        again["metadata"]["uid"] = json!(created.metadata.uid);
        if let Some(meta) = again["metadata"].as_object_mut() {
            meta.remove("resourceVersion");
        }
        let applied = c
            .apply(&widgets, Some(&ns), "w", again.clone(), "conformance-a", true)
            .await
            .ctx("the next apply")?;
        check!(
            applied.data["spec"] == json!({"size": 1, "other": 1}),
            "after the next apply: {:?}",
            applied.data["spec"]
        );
        c.apply(&widgets, Some(&ns), "w", again, "conformance-a", false)
            .await
            .ctx("the same apply, unforced")?;
        // A create that carries an Apply entry keeps none of it: the create's Update entry has all.
        let mut carried = to_json(&widget(&group, "carried", json!({"size": 1}))?);
        carried["metadata"]["managedFields"] = json!([{
            "manager": "conformance-a", "operation": "Apply", "apiVersion": format!("{group}/v1"),
            "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {"f:size": {}}},
        }]);
        let carried = c
            .create(
                &widgets,
                Some(&ns),
                &object(carried)?,
                &PostParams {
                    field_manager: Some("conformance-a".into()),
                    ..Default::default()
                },
            )
            .await?;
        check!(
            managers(&carried) == vec![(Some("conformance-a".to_string()), Some("Update".to_string()))],
            "a create carrying an Apply entry: {:?}",
            carried.metadata.managed_fields
        );
        // Creating by apply needs `create`: a user who may only patch gets 403 naming it.
        let role = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "patcher"},
            "rules": [{"apiGroups": [group], "resources": ["widgets"], "verbs": ["get", "list", "patch"]}],
        }))?;
        c.create(&res::roles(), Some(&ns), &role, &PostParams::default())
            .await?;
        let binding = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "patcher"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "patcher"},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}],
        }))?;
        c.create(&res::role_bindings(), Some(&ns), &binding, &PostParams::default())
            .await?;
        let bob = t.user("bob");
        eventually(s.patience(), "bob may get widgets", async || {
            bob.get(&widgets, Some(&ns), "w").await.map(|_| ()).ctx("bob gets w")
        })
        .await?;
        let err = expect_err(
            bob.apply(
                &widgets,
                Some(&ns),
                "new",
                body("new", json!({"size": 1})),
                "conformance-a",
                true,
            )
            .await,
            "an apply that creates, by a user who may only patch",
        )?;
        check!(
            matches!(&err, Error::Forbidden { verb, .. } if verb == "create"),
            "expected 403 naming create, got {err:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}
