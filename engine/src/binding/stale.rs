//! `core.kbind.io/status-stale` (contract §3, §4 "connection loss"): while a binding's provider
//! is disengaged its consumer objects say since when their status has not been refreshed; the
//! annotation goes once the syncer runs again. Each object is annotated once per outage (the
//! rate limit): the timestamp marks when staleness was first seen, not the latest check.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::consts::{annotation, field_manager, finalizer, reason};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::events::{EventType, Recorder};

fn is_stale(obj: &DynamicObject) -> bool {
    obj.metadata
        .annotations
        .as_ref()
        .is_some_and(|a| a.contains_key(annotation::STATUS_STALE))
}

async fn annotate(
    consumer: &dyn ClusterClient,
    res: &ApiResource,
    obj: &DynamicObject,
    value: Value,
) -> kbind_cluster::Result<bool> {
    let params = PatchParams {
        field_manager: Some(field_manager::KONNECTOR.to_string()),
        ..PatchParams::default()
    };
    let patch = json!({"metadata": {
        "resourceVersion": obj.metadata.resource_version,
        "annotations": {annotation::STATUS_STALE: value},
    }});
    let name = obj.metadata.name.clone().unwrap_or_default();
    match consumer
        .patch(
            res,
            obj.metadata.namespace.as_deref(),
            &name,
            &Patch::Merge(patch),
            &params,
        )
        .await
    {
        // Changed or gone meanwhile: the next reconcile looks again.
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(false),
        other => other.map(|_| true),
    }
}

/// Marks every object of `res` in scope that is not marked yet, and tells every object whose
/// deletion waits for the provider why (a `DeletionBlocked` Warning Event, counted in a series).
pub(crate) async fn mark(
    consumer: &dyn ClusterClient,
    recorder: &Recorder,
    res: &ApiResource,
    namespace: Option<&str>,
    now: &Time,
) -> kbind_cluster::Result<usize> {
    let list = consumer.list(res, namespace, &Default::default()).await?;
    let since = kbind_cluster::clock::format_time(now.0);
    let mut marked = 0;
    for obj in &list.items {
        if !is_stale(obj) {
            annotate(consumer, res, obj, json!(since)).await?;
            marked += 1;
        }
        if obj.metadata.deletion_timestamp.is_some() && crate::finalizers::has(&obj.metadata, finalizer::SYNCER) {
            let note = "the provider is not reachable: the provider copy is deleted, and this object released, once \
                        it is back (nothing is lost); annotate core.kbind.io/deletion-policy=Orphan to keep the copy";
            if let Err(e) = recorder
                .publish(res, obj, EventType::Warning, reason::DELETION_BLOCKED, "Delete", note)
                .await
            {
                tracing::debug!(error = %e, "DeletionBlocked event not recorded");
            }
        }
    }
    Ok(marked)
}

/// Removes the mark from every object of `res` in scope; `true` when no object of the list
/// still carries it (one that changed meanwhile is left for the next sweep).
pub(crate) async fn clear(
    consumer: &dyn ClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
) -> kbind_cluster::Result<bool> {
    let list = match consumer.list(res, namespace, &Default::default()).await {
        Ok(list) => list,
        // Not served yet (a CRD just created): no object to carry a mark.
        Err(e) if e.is_not_found() => return Ok(true),
        Err(e) => return Err(e),
    };
    let mut complete = true;
    for obj in list.items.iter().filter(|o| is_stale(o)) {
        complete &= annotate(consumer, res, obj, Value::Null).await?;
    }
    Ok(complete)
}
