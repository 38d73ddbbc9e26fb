//! JSON merge patch, JSON patch, and strategic merge patch.

use kbind_cluster::{Error, Patch, PostParams};
use serde_json::{Value, json};

use crate::check;
use crate::support::{CaseError, CaseResult, Context, Scope, WidgetCrd, config_map, expect_err, object, res, widget};
use crate::target::Target;

/// A merge patch sets fields, removes those set to null, and leaves the rest.
pub async fn merge_patch_sets_and_removes(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "merge");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &config_map("cm", json!({"a": "1", "b": "2"}))?,
            &PostParams::default(),
        )
        .await?;
        let patch = Patch::Merge(json!({"data": {"a": null, "c": "3"}, "metadata": {"labels": {"l": "v"}}}));
        let cm = c
            .patch(&res::config_maps(), Some(&ns), "cm", &patch, &Default::default())
            .await?;
        check!(
            cm.data["data"] == json!({"b": "2", "c": "3"}),
            "patched data: {:?}",
            cm.data["data"]
        );
        check!(
            cm.metadata.labels.as_ref().and_then(|l| l.get("l")).map(String::as_str) == Some("v"),
            "labels: {:?}",
            cm.metadata.labels
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

fn json_patch(ops: Value) -> CaseResult<Patch<Value>> {
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| CaseError::failed(format!("bad JSON patch: {e}")))?;
    Ok(Patch::Json(patch))
}

/// A JSON patch applies its operations in order; a failed `test` is 422 and changes nothing.
pub async fn json_patch_applies_and_failed_test_is_invalid(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "jsonpatch");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &config_map("cm", json!({"a": "1", "b": "2"}))?,
            &PostParams::default(),
        )
        .await?;
        let ops = json_patch(json!([
            {"op": "test", "path": "/data/a", "value": "1"},
            {"op": "replace", "path": "/data/a", "value": "9"},
            {"op": "add", "path": "/data/n", "value": "new"},
            {"op": "remove", "path": "/data/b"},
        ]))?;
        let cm = c
            .patch(&res::config_maps(), Some(&ns), "cm", &ops, &Default::default())
            .await
            .ctx("JSON patch")?;
        check!(
            cm.data["data"] == json!({"a": "9", "n": "new"}),
            "patched data: {:?}",
            cm.data["data"]
        );
        let failing = json_patch(json!([
            {"op": "test", "path": "/data/a", "value": "nope"},
            {"op": "replace", "path": "/data/a", "value": "x"},
        ]))?;
        let err = expect_err(
            c.patch(&res::config_maps(), Some(&ns), "cm", &failing, &Default::default())
                .await,
            "failed test op",
        )?;
        check!(
            matches!(err, Error::Invalid { .. }),
            "failed test op: expected 422, got {err:?}"
        );
        let cm = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(
            cm.data["data"]["a"] == "9",
            "a failed JSON patch changed the object: {:?}",
            cm.data["data"]
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A strategic merge patch merges a Deployment's containers by name.
pub async fn strategic_merge_patch_merges_containers_by_name(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "smp");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let deployment = object(json!({
            "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": {"app": "d"}},
                "template": {
                    "metadata": {"labels": {"app": "d"}},
                    "spec": {"containers": [
                        {"name": "app", "image": "app:1", "env": [{"name": "A", "value": "1"}]},
                        {"name": "sidecar", "image": "side:1"},
                    ]},
                },
            },
        }))?;
        c.create(&res::deployments(), Some(&ns), &deployment, &PostParams::default())
            .await?;
        let patch = Patch::Strategic(json!({"spec": {"template": {"spec": {"containers": [
            {"name": "sidecar", "image": "side:2"},
            {"name": "app", "env": [{"name": "B", "value": "2"}]},
        ]}}}}));
        let d = c
            .patch(&res::deployments(), Some(&ns), "d", &patch, &Default::default())
            .await
            .ctx("strategic merge patch")?;
        let containers = d
            .data
            .pointer("/spec/template/spec/containers")
            .and_then(Value::as_array)
            .ctx("containers")?;
        let find = |name: &str| containers.iter().find(|c| c["name"] == name);
        let app = find("app").ctx("container app")?;
        let sidecar = find("sidecar").ctx("container sidecar")?;
        check!(containers.len() == 2, "containers: {containers:?}");
        check!(app["image"] == "app:1", "app image: {:?}", app["image"]);
        check!(sidecar["image"] == "side:2", "sidecar image: {:?}", sidecar["image"]);
        let env: Vec<&Value> = app["env"]
            .as_array()
            .ctx("app env")?
            .iter()
            .map(|e| &e["name"])
            .collect();
        // apimachinery's normalizeElementOrder puts patch items not on the server before the
        // server-only ones, so the added B comes first.
        check!(env == [&json!("B"), &json!("A")], "env merged by name: {env:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Custom resources do not accept strategic merge patch: 415.
pub async fn strategic_merge_patch_on_custom_resource_is_415(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "smpcr");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(false)).await?;
        c.create(
            &widgets,
            Some(&ns),
            &widget(&group, "w", json!({"size": 1}))?,
            &PostParams::default(),
        )
        .await?;
        let patch = Patch::Strategic(json!({"spec": {"size": 2}}));
        let err = expect_err(
            c.patch(&widgets, Some(&ns), "w", &patch, &Default::default()).await,
            "strategic patch on a CR",
        )?;
        check!(err.code() == 415, "expected 415 Unsupported Media Type, got {err:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}
