//! The heartbeat Lease on the provider (DESIGN.md §2): `consumer-<localClusterUID>` in the
//! lease namespace, holder = localClusterUID, 60 s duration, labelled managed.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kbind_api::consts::{TRUE, annotation, label, lease, lease_name};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, PostParams, Result};
use serde_json::{Value, json};

/// The `coordination.k8s.io/v1` Lease resource.
pub(crate) fn lease_resource() -> ApiResource {
    ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    }
}

fn micro_time(now: Timestamp) -> Value {
    serde_json::to_value(MicroTime(now)).unwrap_or(Value::Null)
}

fn object(value: Value) -> Result<DynamicObject> {
    serde_json::from_value(value).map_err(|e| Error::Decode(e.to_string()))
}

/// What the last renewal left: the Lease exactly as the provider returned it.
pub(crate) type Renewed = DynamicObject;

/// Renews the Lease `last` that this link wrote before, with one update carrying its
/// resourceVersion. `Ok(Some(..))`: the provider still holds exactly what we wrote last, which
/// only the cluster we verified can (a replaced or rebuilt provider answers 404 or 409), so the
/// pinned identity stands without another read. `Ok(None)`: that continuity is broken; nothing
/// was written, and the caller reads the identity before [`renew`].
pub(crate) async fn renew_unbroken(
    provider: &dyn ClusterClient,
    namespace: &str,
    local_uid: &str,
    now: Timestamp,
    last: &Renewed,
) -> Result<Option<Renewed>> {
    let mut next = last.clone();
    stamp(&mut next, local_uid, now);
    let name = lease_name(local_uid);
    match provider
        .replace(&lease_resource(), Some(namespace), &name, &next, &ours())
        .await
    {
        Ok(renewed) => Ok(Some(renewed)),
        Err(Error::NotFound { .. }) => Ok(None),
        Err(e) if e.is_conflict() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Renews (or creates) the heartbeat Lease of consumer `local_uid` at `now`. An existing Lease
/// is updated with get+update only, so credentials limited to those verbs suffice.
pub(crate) async fn renew(
    provider: &dyn ClusterClient,
    namespace: &str,
    local_uid: &str,
    now: Timestamp,
) -> Result<Renewed> {
    let res = lease_resource();
    let name = lease_name(local_uid);
    match provider.get_opt(&res, Some(namespace), &name).await? {
        Some(mut existing) => {
            stamp(&mut existing, local_uid, now);
            provider.replace(&res, Some(namespace), &name, &existing, &ours()).await
        }
        None => create(provider, namespace, &name, local_uid, now).await,
    }
}

/// Sets what a renewal writes: the managed label, holder, duration and renew time.
fn stamp(lease: &mut DynamicObject, local_uid: &str, now: Timestamp) {
    let labels = lease.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(label::MANAGED.to_string(), TRUE.to_string());
    let spec = lease
        .data
        .as_object_mut()
        .map(|d| d.entry("spec").or_insert_with(|| json!({})));
    if let Some(Value::Object(spec)) = spec {
        spec.insert("holderIdentity".into(), json!(local_uid));
        spec.insert("leaseDurationSeconds".into(), json!(lease::DURATION_SECONDS));
        spec.insert("renewTime".into(), micro_time(now));
    }
}

async fn create(
    provider: &dyn ClusterClient,
    namespace: &str,
    name: &str,
    local_uid: &str,
    now: Timestamp,
) -> Result<Renewed> {
    let lease = object(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": {label::MANAGED: TRUE}},
        "spec": {
            "holderIdentity": local_uid,
            "leaseDurationSeconds": lease::DURATION_SECONDS,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
        },
    }))?;
    let res = lease_resource();
    match provider.create(&res, Some(namespace), &lease, &ours()).await {
        Ok(created) => Ok(created),
        // The lease namespace is missing: create it (managed, like every namespace we create).
        Err(Error::NotFound { .. }) => {
            create_namespace(provider, namespace, local_uid).await?;
            provider.create(&res, Some(namespace), &lease, &ours()).await
        }
        Err(e) => Err(e),
    }
}

async fn create_namespace(provider: &dyn ClusterClient, namespace: &str, local_uid: &str) -> Result<()> {
    let ns = object(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {label::MANAGED: TRUE},
            "annotations": {annotation::CONSUMER_CLUSTER_UID: local_uid},
        },
    }))?;
    match provider
        .create(&kbind_cluster::identity::namespace_resource(), None, &ns, &ours())
        .await
    {
        Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes named for the konnector, so `managedFields` on the provider say who keeps the heartbeat
/// (an unnamed write shows as manager `unknown` on a real apiserver).
fn ours() -> PostParams {
    PostParams {
        field_manager: Some(kbind_api::consts::field_manager::KONNECTOR.to_string()),
        ..PostParams::default()
    }
}
