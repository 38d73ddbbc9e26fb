//! The `core.kbind.io/cleanup` finalizer on Connections and their Secrets, and what a deleted
//! Connection does before letting go: wait for its bindings, or release at once when marked
//! `deletion-policy: Orphan`. The provider is never touched here.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_api::conditions::{self, ConditionStatus};
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, condition, finalizer, reason};
use kbind_api::{Binding, ClusterBinding, Connection};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, ListParams, Patch, PatchParams, Result,
};
use kube::ResourceExt;

use super::{connection_resource, secret_resource};
use crate::finalizers;

/// Whether `meta` carries the cleanup finalizer.
pub(crate) fn has_cleanup(meta: &kube::api::ObjectMeta) -> bool {
    finalizers::has(meta, finalizer::CLEANUP)
}

/// Whether the Connection asks to be released without touching the provider.
pub(crate) fn is_orphan(conn: &Connection) -> bool {
    conn.annotations().get(annotation::DELETION_POLICY).map(String::as_str) == Some(DELETION_POLICY_ORPHAN)
}

/// Writes `list` as the finalizers of `obj`, guarded by the resourceVersion it was computed from.
async fn set_finalizers(
    client: &dyn ClusterClient,
    res: &ApiResource,
    obj: &DynamicObject,
    list: Vec<String>,
) -> Result<()> {
    client
        .patch(
            res,
            obj.metadata.namespace.as_deref(),
            &obj.name_any(),
            &Patch::Merge(finalizers::guarded_patch(&obj.metadata, list)),
            &PatchParams::default(),
        )
        .await
        .map(|_| ())
}

/// Adds the cleanup finalizer to `obj` unless it has it or is terminating.
pub(crate) async fn ensure_cleanup(client: &dyn ClusterClient, res: &ApiResource, obj: &DynamicObject) -> Result<()> {
    if has_cleanup(&obj.metadata) || obj.metadata.deletion_timestamp.is_some() {
        return Ok(());
    }
    set_finalizers(client, res, obj, finalizers::with(&obj.metadata, finalizer::CLEANUP)).await
}

/// Removes the cleanup finalizer from the object, read fresh; a missing object is fine.
pub(crate) async fn remove_cleanup(
    client: &dyn ClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Result<()> {
    let Some(obj) = client.get_opt(res, namespace, name).await? else {
        return Ok(());
    };
    if !has_cleanup(&obj.metadata) {
        return Ok(());
    }
    set_finalizers(
        client,
        res,
        &obj,
        finalizers::without(&obj.metadata, finalizer::CLEANUP),
    )
    .await
}

/// One binding a deleted Connection waits for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Waiting {
    /// `ClusterBinding <name>` or `Binding <namespace>/<name>`.
    pub binding: String,
    /// The binding's own `Ready` message when its deletion is blocked (`DeletionBlocked`, or
    /// `Forbidden` for a refused verb).
    pub blocked: Option<String>,
}

/// The ClusterBindings and Bindings that name this Connection (none when their CRDs are not
/// served on the consumer).
pub(crate) async fn bindings_referencing(consumer: &dyn ClusterClient, connection: &str) -> Result<Vec<Waiting>> {
    let mut waiting = Vec::new();
    for res in [
        ApiResource::erase::<ClusterBinding>(&()),
        ApiResource::erase::<Binding>(&()),
    ] {
        match consumer.list(&res, None, &ListParams::default()).await {
            Ok(list) => waiting.extend(
                list.items
                    .iter()
                    .filter(|b| b.data.pointer("/spec/connectionRef/name").and_then(|v| v.as_str()) == Some(connection))
                    .map(waiting_on),
            ),
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    Ok(waiting)
}

fn waiting_on(b: &DynamicObject) -> Waiting {
    let binding = match b.metadata.namespace.as_deref() {
        Some(ns) => format!("Binding {ns}/{}", b.name_any()),
        None => format!("ClusterBinding {}", b.name_any()),
    };
    let blocked = b.metadata.deletion_timestamp.as_ref().and_then(|_| {
        let conds: Vec<Condition> = serde_json::from_value(b.data.pointer("/status/conditions")?.clone()).ok()?;
        let ready = conditions::find(&conds, condition::READY)?;
        let is_blocked = ready.status == ConditionStatus::False.as_str()
            && matches!(ready.reason.as_str(), reason::DELETION_BLOCKED | reason::FORBIDDEN);
        is_blocked.then(|| ready.message.clone())
    });
    Waiting { binding, blocked }
}

/// Releases the Secret's finalizer unless another Connection still references it. The caller
/// serialises this across Connections, so two Connections deleted together cannot each leave
/// it to the other.
pub(crate) async fn release_secret_if_last(consumer: &dyn ClusterClient, conn: &Connection) -> Result<()> {
    let secret_ref = &conn.spec.kubeconfig_secret_ref;
    let others = consumer
        .list(&connection_resource(), None, &ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|c| c.name_any() != conn.name_any())
        .filter(|c| {
            c.data
                .pointer("/spec/kubeconfigSecretRef/namespace")
                .and_then(|v| v.as_str())
                == Some(secret_ref.namespace.as_str())
                && c.data
                    .pointer("/spec/kubeconfigSecretRef/name")
                    .and_then(|v| v.as_str())
                    == Some(secret_ref.name.as_str())
        })
        .count();
    if others > 0 {
        return Ok(());
    }
    remove_cleanup(
        consumer,
        &secret_resource(),
        Some(&secret_ref.namespace),
        &secret_ref.name,
    )
    .await
}
