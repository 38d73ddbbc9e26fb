//! The syncer's consumer finalizer: added (with the label naming the serving Connection) before
//! the first write of a copy, and on deletion released only after the provider copy is gone.

use kbind_api::consts::finalizer;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;

use super::state::{ApiSyncer, WAIT};
use crate::finalizers;
use crate::mapper::ObjectKey;
use crate::sync::meta;
use crate::sync::{SyncError, lock};

impl ApiSyncer {
    /// Deletion: the provider copy goes first (if ours and not orphaned), then our finalizer.
    pub(super) async fn finalize(
        &self,
        obj: &DynamicObject,
        key: &ObjectKey,
        target: &ObjectKey,
    ) -> Result<Action, SyncError> {
        if !meta::has_finalizer(obj) {
            return Ok(Action::await_change());
        }
        if crate::planted::planted(crate::planted::Plant::ReleaseFinalizerBeforeProviderDelete) {
            release_finalizer(self.consumer.as_ref(), self.res(), obj, key).await?;
        }
        if !meta::is_orphan(obj) {
            let object_uid = obj.metadata.uid.as_deref().unwrap_or_default();
            if let Some(copy) = self.read_target(target).await?
                && meta::is_ours(&copy, &self.spec.consumer_cluster_uid, object_uid)
            {
                if copy.metadata.deletion_timestamp.is_some() {
                    return Ok(self.requeue(key, WAIT));
                }
                let remaining = self
                    .provider
                    .client
                    .delete(
                        self.res(),
                        target.namespace.as_deref(),
                        &target.name,
                        &meta::delete_exactly(&copy),
                    )
                    .await;
                match remaining {
                    Ok(None) | Err(kbind_cluster::Error::NotFound { .. }) => {}
                    // Replaced or changed since the read: look again before deleting anything.
                    Ok(Some(_)) | Err(kbind_cluster::Error::Conflict { .. }) => return Ok(self.requeue(key, WAIT)),
                    Err(source) => {
                        return Err(SyncError::ProviderWriteFailed {
                            step: "delete",
                            object: target.clone(),
                            source,
                        });
                    }
                }
            }
        }
        release_finalizer(self.consumer.as_ref(), self.res(), obj, key).await?;
        lock(&self.findings).forget(key);
        Ok(Action::await_change())
    }

    pub(super) async fn add_finalizer(&self, obj: &DynamicObject, key: &ObjectKey) -> Result<DynamicObject, SyncError> {
        // The label says which Connection serves the object (several may serve one API).
        let mut patch = finalizers::guarded_patch(&obj.metadata, finalizers::with(&obj.metadata, finalizer::SYNCER));
        meta::mark_connection(&mut patch["metadata"], &self.spec.connection);
        let updated =
            self.patch_consumer(key, Patch::Merge(patch))
                .await
                .map_err(|source| SyncError::ConsumerWriteFailed {
                    step: "add the finalizer to",
                    object: key.clone(),
                    source,
                })?;
        self.pending
            .own_write(key.clone(), updated.metadata.resource_version.clone());
        Ok(updated)
    }
}

/// Removes our finalizer from a consumer object (a stale resourceVersion fails and retries).
pub(crate) async fn release_finalizer(
    consumer: &dyn ClusterClient,
    res: &ApiResource,
    obj: &DynamicObject,
    key: &ObjectKey,
) -> Result<(), SyncError> {
    // The Connection label goes with the finalizer: nothing serves the object any more.
    let mut patch = finalizers::guarded_patch(&obj.metadata, finalizers::without(&obj.metadata, finalizer::SYNCER));
    meta::unmark_connection(&mut patch["metadata"], obj);
    match consumer
        .patch(
            res,
            key.namespace.as_deref(),
            &key.name,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
    {
        Ok(_) | Err(kbind_cluster::Error::NotFound { .. }) => Ok(()),
        Err(source) => Err(SyncError::ConsumerWriteFailed {
            step: "release the finalizer of",
            object: key.clone(),
            source,
        }),
    }
}
