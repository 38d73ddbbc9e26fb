//! Unbind: delete the provider copies a binding's objects own, then release their finalizers
//! (contract §4 "unbind"); the orphan escape hatch releases everything without the provider.

use std::collections::BTreeSet;
use std::sync::Arc;

use kbind_cluster::{ClusterClient, ClusterClientExt, DeleteParams, DynamicObject};

use super::meta;
use super::syncer::release_finalizer;
use super::{ApiSyncerSpec, SyncError, Syncers};
use crate::context::Context;
use crate::mapper::{Mapper, ObjectKey};
use crate::provider::EngagedProvider;

/// What one drain pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Drained {
    /// Consumer objects whose finalizer was released.
    pub released: usize,
    /// Provider copies deleted (gone by the end of the pass).
    pub deleted: usize,
    /// Consumer objects still waiting for their provider copy to go.
    pub waiting: usize,
}

impl Drained {
    /// Whether every finalizer of this syncer is released.
    pub fn is_complete(&self) -> bool {
        self.waiting == 0
    }
}

/// What happened to one provider copy.
enum CopyFate {
    /// Nothing of ours is (any longer) on the provider.
    Gone { deleted: bool },
    /// Still there (terminating or just asked to go).
    Pending,
}

impl Syncers {
    /// [`Syncers::drain`], leaving alone (copy and finalizer) every object in `keep`: the
    /// namespaces another live binding serves, so a hand-over keeps every copy with its UID.
    /// Only objects served through the spec's Connection are touched (their label names it; an
    /// unlabelled one only when `unlabelled_ours`): another Connection may serve other namespaces
    /// of the same API.
    pub async fn drain_keeping(
        &self,
        spec: &ApiSyncerSpec,
        provider: Option<Arc<EngagedProvider>>,
        orphan: bool,
        keep: &BTreeSet<String>,
        unlabelled_ours: bool,
    ) -> Result<Drained, SyncError> {
        self.stop(&spec.key());
        let scope = Scope { keep, unlabelled_ours };
        drain_except(
            &self.ctx,
            self.mapper.as_ref(),
            spec,
            provider.as_deref(),
            orphan,
            scope,
        )
        .await
    }
}

pub(super) async fn drain(
    ctx: &Context,
    mapper: &dyn Mapper,
    spec: &ApiSyncerSpec,
    provider: Option<&EngagedProvider>,
    orphan: bool,
) -> Result<Drained, SyncError> {
    let scope = Scope {
        keep: &BTreeSet::new(),
        unlabelled_ours: true,
    };
    drain_except(ctx, mapper, spec, provider, orphan, scope).await
}

/// Which consumer objects a drain may touch.
#[derive(Clone, Copy)]
struct Scope<'a> {
    /// Namespaces another live binding of the same Connection serves.
    keep: &'a BTreeSet<String>,
    /// Whether objects without a Connection label are this Connection's.
    unlabelled_ours: bool,
}

async fn drain_except(
    ctx: &Context,
    mapper: &dyn Mapper,
    spec: &ApiSyncerSpec,
    provider: Option<&EngagedProvider>,
    orphan: bool,
    scope: Scope<'_>,
) -> Result<Drained, SyncError> {
    let res = &spec.resource;
    let objects = ctx
        .consumer
        .list(res, spec.namespace.as_deref(), &Default::default())
        .await
        .map_err(|source| SyncError::ConsumerReadFailed {
            what: spec.api.clone(),
            source,
        })?;
    let mut drained = Drained::default();
    let mut blocked = 0;
    let kept = |o: &DynamicObject| {
        o.metadata.namespace.as_ref().is_some_and(|ns| scope.keep.contains(ns))
            || !meta::served_through(o, &spec.connection, scope.unlabelled_ours)
    };
    for obj in objects.items.iter().filter(|o| meta::has_finalizer(o) && !kept(o)) {
        let Some(key) = ObjectKey::of(obj) else { continue };
        if !orphan && !meta::is_orphan(obj) {
            let Some(provider) = provider else {
                blocked += 1;
                continue;
            };
            let target = mapper.to_provider(res, &key);
            match delete_copy(provider, spec, obj, &target).await? {
                CopyFate::Pending => {
                    drained.waiting += 1;
                    continue;
                }
                CopyFate::Gone { deleted } => drained.deleted += usize::from(deleted),
            }
        }
        release_finalizer(ctx.consumer.as_ref(), res, obj, &key).await?;
        drained.released += 1;
    }
    if blocked > 0 {
        return Err(SyncError::ProviderUnavailable {
            waiting: blocked + drained.waiting,
        });
    }
    Ok(drained)
}

/// Deletes the provider copy of `obj` if it carries our markers for it.
async fn delete_copy(
    provider: &EngagedProvider,
    spec: &ApiSyncerSpec,
    obj: &DynamicObject,
    target: &ObjectKey,
) -> Result<CopyFate, SyncError> {
    let res = &spec.resource;
    let live = provider
        .reader
        .get_opt(res, target.namespace.as_deref(), &target.name)
        .await
        .map_err(|source| SyncError::ProviderReadFailed {
            object: target.clone(),
            source,
        })?;
    let object_uid = obj.metadata.uid.as_deref().unwrap_or_default();
    let Some(copy) = live.filter(|c| meta::is_ours(c, &spec.consumer_cluster_uid, object_uid)) else {
        return Ok(CopyFate::Gone { deleted: false });
    };
    if copy.metadata.deletion_timestamp.is_some() {
        return Ok(CopyFate::Pending);
    }
    let client: &dyn ClusterClient = provider.client.as_ref();
    let exactly_this_copy: DeleteParams = meta::delete_exactly(&copy);
    match client
        .delete(res, target.namespace.as_deref(), &target.name, &exactly_this_copy)
        .await
    {
        Ok(None) => Ok(CopyFate::Gone { deleted: true }),
        Err(kbind_cluster::Error::NotFound { .. }) => Ok(CopyFate::Gone { deleted: false }),
        // Replaced or changed since the read: the next pass looks again.
        Ok(Some(_)) | Err(kbind_cluster::Error::Conflict { .. }) => Ok(CopyFate::Pending),
        Err(source) => Err(SyncError::ProviderWriteFailed {
            step: "delete",
            object: target.clone(),
            source,
        }),
    }
}
