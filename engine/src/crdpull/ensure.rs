//! Writing a pulled CRD into the consumer: create it, or update it when it is ours, the update
//! policy allows it and the change is compatible or accepted.
//!
//! Choices recorded here:
//! - Writes are `replace` with the `resourceVersion` just read (optimistic concurrency), not
//!   server-side apply. The whole consumer spec is derived from the provider, so partial field
//!   ownership buys nothing, while a replace removes dropped properties and versions without
//!   depending on who owns them; the precondition guarantees nothing that changed after our
//!   read and classification (a user removing the managed label, accepting another hash) is
//!   overwritten: the write fails with `Conflict` and the caller retries from a fresh read.
//!   Labels, annotations, finalizers and owner references set by others are kept.
//! - A destructive change is accepted by a user setting the annotation
//!   `core.kbind.io/accept-schema-hash: <the new schema hash>` on the consumer CRD (the hash
//!   is the one named by the `SchemaUpdateBlocked` message). Naming the hash, rather than a
//!   boolean, means an acceptance never carries over to a later, different destructive change.
//! - Versions listed in the existing CRD's `status.storedVersions` that the desired spec drops
//!   are kept as `served: false, storage: false`: kube-apiserver refuses an update that removes
//!   a stored version, and objects stored in it stay readable under the new storage version
//!   because conversion is `None`.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kbind_api::UpdatePolicy;
use kbind_api::consts::{annotation, field_manager};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, PostParams, from_dynamic, to_dynamic,
};

use super::{UpdateKind, annotation_of, classify_update, is_managed};

/// What [`ensure_consumer_crd`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CrdOutcome {
    /// The consumer CRD did not exist and was created.
    Created,
    /// The consumer CRD was ours and was updated.
    Updated,
    /// The consumer CRD already had the desired schema.
    Unchanged,
    /// A CRD of that name exists without kbind's managed label; it is never written.
    NotManaged,
    /// The CRD is kbind's but was pulled through the named other Connection (empty when the
    /// annotation is missing).
    OtherConnection(String),
    /// A destructive change is held until a user accepts it; the message says what it removes.
    Blocked(String),
    /// `updatePolicy: Once` and the CRD exists: provider changes are not followed.
    Held,
}

/// The CustomResourceDefinition resource.
pub fn crd_resource() -> ApiResource {
    ApiResource::erase::<CustomResourceDefinition>(&())
}

/// Creates or updates the consumer CRD `desired` (as built by
/// [`super::consumer_crd_from_provider`] or [`crate::openapi::crd_from_openapi`]), guarded by
/// ownership, `update` policy and the acceptance annotation described in the module docs.
pub async fn ensure_consumer_crd(
    consumer: &dyn ClusterClient,
    desired: CustomResourceDefinition,
    update: UpdatePolicy,
) -> Result<CrdOutcome, Error> {
    Ok(ensure_and_keep(consumer, desired, update).await?.0)
}

/// [`ensure_consumer_crd`], also returning the consumer CRD as this call left it (read or
/// written), so a caller that goes on to look at it does not read it a second time.
pub async fn ensure_and_keep(
    consumer: &dyn ClusterClient,
    desired: CustomResourceDefinition,
    update: UpdatePolicy,
) -> Result<(CrdOutcome, DynamicObject), Error> {
    let name = desired.metadata.name.clone().unwrap_or_default();
    let params = PostParams {
        field_manager: Some(field_manager::KONNECTOR.to_string()),
        ..PostParams::default()
    };
    let Some(raw) = consumer.get_opt(&crd_resource(), None, &name).await? else {
        let created = consumer
            .create(&crd_resource(), None, &to_dynamic(&desired)?, &params)
            .await?;
        return Ok((CrdOutcome::Created, created));
    };
    let existing: CustomResourceDefinition = from_dynamic(raw.clone())?;
    if !is_managed(&existing) {
        return Ok((CrdOutcome::NotManaged, raw));
    }
    let ours = annotation_of(&desired, annotation::CONNECTION);
    let theirs = annotation_of(&existing, annotation::CONNECTION);
    if theirs != ours {
        return Ok((CrdOutcome::OtherConnection(theirs.unwrap_or_default().to_string()), raw));
    }
    let kind = classify_update(&existing, &desired);
    if kind == UpdateKind::Unchanged {
        return Ok((CrdOutcome::Unchanged, raw));
    }
    if update == UpdatePolicy::Once {
        return Ok((CrdOutcome::Held, raw));
    }
    if let UpdateKind::Destructive(message) = kind {
        let hash = annotation_of(&desired, annotation::SCHEMA_HASH);
        if hash.is_none() || annotation_of(&existing, annotation::ACCEPT_SCHEMA_HASH) != hash {
            let message = format!(
                "{message}; set annotation {}: {} on CustomResourceDefinition {name} to accept",
                annotation::ACCEPT_SCHEMA_HASH,
                hash.unwrap_or_default()
            );
            return Ok((CrdOutcome::Blocked(message), raw));
        }
    }
    let replacement = replacement(existing, desired);
    let replaced = consumer
        .replace(&crd_resource(), None, &name, &to_dynamic(&replacement)?, &params)
        .await?;
    Ok((CrdOutcome::Updated, replaced))
}

/// `desired` over `existing`: others' metadata kept, ours set, the read resourceVersion as the
/// precondition, and still-stored versions kept unserved.
fn replacement(existing: CustomResourceDefinition, desired: CustomResourceDefinition) -> CustomResourceDefinition {
    let mut metadata = existing.metadata;
    metadata.managed_fields = None;
    for (mine, theirs) in [
        (desired.metadata.labels, &mut metadata.labels),
        (desired.metadata.annotations, &mut metadata.annotations),
    ] {
        theirs
            .get_or_insert_with(Default::default)
            .extend(mine.unwrap_or_default());
    }
    let mut spec = desired.spec;
    let stored = existing.status.and_then(|s| s.stored_versions).unwrap_or_default();
    for old in existing.spec.versions {
        let still_stored = stored.contains(&old.name);
        if still_stored && !spec.versions.iter().any(|v| v.name == old.name) {
            spec.versions.push(CustomResourceDefinitionVersion {
                served: false,
                storage: false,
                ..old
            });
        }
    }
    CustomResourceDefinition {
        metadata,
        spec,
        status: None,
    }
}
