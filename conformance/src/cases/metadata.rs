//! Object metadata as kube-apiserver stores it: empty `labels`, `annotations` and `finalizers`
//! are omitted (Go's `omitempty` on ObjectMeta), whichever write emptied them.

use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PostParams};
use serde_json::{Value, json};

use crate::cases::versions::release_finalizers;
use crate::check;
use crate::support::{CaseError, CaseResult, Scope, WidgetCrd, object, res};
use crate::target::Target;

const HOLD: &str = "conformance.kbind.io/hold";

/// The metadata fields this case is about that `obj` carries although they are empty.
fn empty_fields(obj: &DynamicObject) -> Vec<&'static str> {
    let m = &obj.metadata;
    let mut out = Vec::new();
    if m.labels.as_ref().is_some_and(|l| l.is_empty()) {
        out.push("labels");
    }
    if m.annotations.as_ref().is_some_and(|a| a.is_empty()) {
        out.push("annotations");
    }
    if m.finalizers.as_ref().is_some_and(|f| f.is_empty()) {
        out.push("finalizers");
    }
    out
}

/// Fails unless `obj` (what a write returned) and a fresh read both lack `field` entirely.
async fn check_omitted(
    c: &dyn ClusterClient,
    resource: &ApiResource,
    ns: &str,
    obj: &DynamicObject,
    field: &str,
    after: &str,
) -> CaseResult {
    let name = obj.metadata.name.clone().unwrap_or_default();
    let read = c.get(resource, Some(ns), &name).await?;
    for (what, o) in [("the write's answer", obj), ("a read", &read)] {
        let meta = serde_json::to_value(&o.metadata).unwrap_or(Value::Null);
        let empty = empty_fields(o);
        check!(
            empty.is_empty(),
            "{} {name}, after {after}: {what} carries empty {empty:?}, kube-apiserver omits them: {meta}",
            resource.kind
        );
        check!(
            meta.get(field).is_none(),
            "{} {name}, after {after}: {what} still has metadata.{field}: {meta}",
            resource.kind
        );
    }
    Ok(())
}

/// A JSON patch from test-authored operations.
fn json_patch(ops: Value) -> CaseResult<Patch<Value>> {
    let patch: json_patch::Patch =
        serde_json::from_value(ops).map_err(|e| CaseError::failed(format!("bad JSON patch: {e}")))?;
    Ok(Patch::Json(patch))
}

/// Each way a write can leave a list or map empty, on one resource: created empty, the last
/// label removed by a merge patch, the last finalizer by a JSON patch, the annotations by a
/// replace, and an apply that drops its manager's only label.
async fn omitted_on(
    c: &dyn ClusterClient,
    resource: &ApiResource,
    ns: &str,
    body: impl Fn(&str, Value) -> CaseResult<DynamicObject>,
) -> CaseResult {
    let pp = PostParams::default();
    let created = c
        .create(
            resource,
            Some(ns),
            &body("empty", json!({"labels": {}, "annotations": {}, "finalizers": []}))?,
            &pp,
        )
        .await?;
    for field in ["labels", "annotations", "finalizers"] {
        check_omitted(c, resource, ns, &created, field, "a create with it empty").await?;
    }

    let full = json!({"labels": {"a": "1"}, "annotations": {"n": "v"}, "finalizers": [HOLD]});
    c.create(resource, Some(ns), &body("full", full)?, &pp).await?;
    let result: CaseResult = async {
        let patch = Patch::Merge(json!({"metadata": {"labels": {"a": null}}}));
        let patched = c.patch(resource, Some(ns), "full", &patch, &Default::default()).await?;
        check_omitted(
            c,
            resource,
            ns,
            &patched,
            "labels",
            "a merge patch removing the last label",
        )
        .await?;

        let patch = json_patch(json!([{"op": "remove", "path": "/metadata/finalizers/0"}]))?;
        let patched = c.patch(resource, Some(ns), "full", &patch, &Default::default()).await?;
        check_omitted(
            c,
            resource,
            ns,
            &patched,
            "finalizers",
            "a JSON patch removing the last finalizer",
        )
        .await?;

        let mut replaced = c.get(resource, Some(ns), "full").await?;
        replaced.metadata.annotations = Some(Default::default());
        let replaced = c.replace(resource, Some(ns), "full", &replaced, &pp).await?;
        check_omitted(
            c,
            resource,
            ns,
            &replaced,
            "annotations",
            "a replace with empty annotations",
        )
        .await?;
        Ok(())
    }
    .await;
    // A failure above may leave the finalizer: release it so the namespace can go.
    release_finalizers(c, resource, ns, "full").await?;
    result?;

    let applied = |labels: Value| {
        let mut obj = body("applied", json!({}))?;
        obj.metadata.labels = serde_json::from_value(labels).map_err(|e| CaseError::failed(e.to_string()))?;
        serde_json::to_value(&obj).map_err(|e| CaseError::failed(e.to_string()))
    };
    c.apply(
        resource,
        Some(ns),
        "applied",
        applied(json!({"s": "1"}))?,
        "conformance-m",
        false,
    )
    .await?;
    let reapplied = c
        .apply(
            resource,
            Some(ns),
            "applied",
            applied(Value::Null)?,
            "conformance-m",
            false,
        )
        .await?;
    check_omitted(
        c,
        resource,
        ns,
        &reapplied,
        "labels",
        "an apply dropping its only label",
    )
    .await
}

/// Empty `labels`, `annotations` and `finalizers` are never stored, on a built-in kind and on a
/// custom resource: created empty, emptied by a merge patch, a JSON patch, a replace or an apply.
pub async fn empty_labels_annotations_and_finalizers_are_omitted(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "emptymeta");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = s.admin.as_ref();
        omitted_on(c, &res::config_maps(), &ns, |name, meta| {
            let mut meta = meta;
            meta["name"] = json!(name);
            object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"k": "v"}}))
        })
        .await?;
        let widgets = s.widget_crd(&WidgetCrd::open(true)).await?;
        let api_version = widgets.api_version.clone();
        omitted_on(c, &widgets, &ns, |name, meta| {
            let mut meta = meta;
            meta["name"] = json!(name);
            object(json!({"apiVersion": api_version, "kind": "Widget", "metadata": meta, "spec": {"size": 1}}))
        })
        .await
    }
    .await;
    s.finish(result).await
}
