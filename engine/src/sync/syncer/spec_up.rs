//! Spec up: the provider copy classified (contract §4 "conflicts") and written by server-side
//! apply, in passes that never take over an object someone else made since it was read.

use std::sync::Arc;
use std::time::Duration;

use kbind_cluster::{ClusterClientExt, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use tokio::time::Instant;

use super::state::{ApiSyncer, WAIT};
use crate::mapper::ObjectKey;
use crate::sync::SyncError;
use crate::sync::meta::{self, Verdict};

/// How long a reconcile waits for a provider store's first list before it reads the provider
/// directly instead.
const CACHE_SYNC_WAIT: Duration = Duration::from_secs(10);
/// Passes of one write of a copy: the first, one after losing the race to create it or after
/// its apply met a copy changed since (with the copy the cache knows by then), and a last one
/// that reads the copy afresh.
const WRITE_PASSES: usize = 4;
/// The resourceVersion precondition of an apply that creates a copy: no stored object can have
/// it (resourceVersions on kube-apiserver are etcd revisions, counted up from 1 in a u64), so
/// the apply is refused with a Conflict whenever anything is at the name, and creates when
/// nothing is (the precondition is not checked on create). Checked on kube-apiserver v1.35 by
/// the conformance case `apply_with_an_unmatchable_resource_version_only_creates`.
const CREATE_ONLY: &str = "18446744073709551615";
/// Re-check of a conflicted object (provider changes re-trigger it sooner).
const CONFLICT_RECHECK: Duration = Duration::from_secs(60);

/// What writing the copy came to.
pub(super) enum Written {
    /// The copy as the provider holds it after our write.
    Copy(Box<DynamicObject>),
    /// Not written (conflict, terminating copy, a lost race): what the reconcile answers.
    Not(Action),
}

impl ApiSyncer {
    /// Classifies the provider target and writes the copy where that is allowed (contract §4
    /// "conflicts"). A target that was absent is created by an apply that can only create
    /// ([`CREATE_ONLY`]), never by a plain forced apply: an object someone else made since the
    /// read answers Conflict and is classified again, so it is never taken over.
    pub(super) async fn write_copy(
        &self,
        obj: &DynamicObject,
        key: &ObjectKey,
        target: &ObjectKey,
        since: Option<Instant>,
    ) -> Result<Written, SyncError> {
        if let Some(current) = self.current_copy(obj, target).await {
            return Ok(Written::Copy(Box::new(current)));
        }
        // A later pass classifies what won the race against our creating apply or changed the
        // copy before our apply; the last one always from a fresh read.
        let mut refused: Option<String> = None;
        for pass in 0..WRITE_PASSES {
            // A copy known to be ours (our latest write, or the cache) skips the read: the apply
            // carries that copy's resourceVersion, so a copy that changed since (even into
            // someone else's) only answers Conflict, and the next pass looks again. After a
            // Conflict the copy the apply was refused at is not known any more; the cache has
            // often heard of the change by then (a provider controller answering our create).
            let mut known_rv = None;
            let mut known_uid = None;
            let live = if pass == 0 && self.cache_says_absent(target) {
                None
            } else if pass + 1 < WRITE_PASSES
                && let Some(known) = self.known_ours(obj, target, refused.as_deref())
            {
                known_rv = known.metadata.resource_version.clone();
                known_uid = known.metadata.uid.clone();
                Some(known)
            } else {
                self.read_target(target).await?
            };
            let verdict = meta::classify(
                live.as_ref(),
                obj,
                &self.spec.consumer_cluster_uid,
                &self.spec.conflict_policy,
            );
            let creating = verdict == Verdict::Create;
            let precondition = match verdict {
                Verdict::Terminating => {
                    // The change still waits for the old copy to go: measured until it is applied.
                    if let Some(since) = since {
                        self.pending.retry(key.clone(), since);
                    }
                    return Ok(Written::Not(self.requeue(key, WAIT)));
                }
                Verdict::Conflict(why) => {
                    self.signal_conflict(obj, key, target, why).await?;
                    return Ok(Written::Not(self.requeue(key, CONFLICT_RECHECK)));
                }
                Verdict::Create => None,
                Verdict::Update { precondition } => precondition.or(known_rv),
            };
            if creating && let Some(wait) = self.recreates.wait(target) {
                if let Some(since) = since {
                    self.pending.retry(key.clone(), since);
                }
                return Ok(Written::Not(self.requeue(key, wait)));
            }
            self.clear_conflict(obj, key).await?;
            self.ensure_namespace(target).await?;
            let mut body = meta::apply_body(
                self.res(),
                obj,
                target,
                &self.spec.consumer_cluster_uid,
                precondition.as_deref(),
            );
            // A new copy is one apply that may only create: it carries a resourceVersion no
            // stored object has, so an object someone made since we looked (or one terminating)
            // answers Conflict and the next pass reads and classifies it. kube-apiserver checks
            // that precondition against an object that is there and ignores it when the apply
            // creates; the copy then carries only our Apply entry, with nothing to hand over
            // and no create entry to drop (docs/decisions.md, "a new copy is one write").
            if creating && !crate::planted::planted(crate::planted::Plant::FirstWriteForcedApply) {
                body["metadata"]["resourceVersion"] = json!(CREATE_ONLY);
            }
            // An update names the copy known without reading by its UID: an apply to a name
            // where nothing is any more would create the copy (with or without a
            // resourceVersion), skipping the wait before re-creating a copy someone keeps
            // deleting. Named, it answers Conflict, and the next pass reads.
            let guard_uid = if creating { None } else { known_uid };
            if let Some(uid) = &guard_uid {
                body["metadata"]["uid"] = json!(uid);
            }
            let applied = self
                .provider
                .client
                .apply(
                    self.res(),
                    target.namespace.as_deref(),
                    &target.name,
                    body,
                    kbind_api::consts::field_manager::KONNECTOR,
                    true,
                )
                .await;
            let copy = match applied {
                Ok(copy) => copy,
                // Something is there after all: the next pass reads it and classifies it (the
                // loop's end waits when the passes are used up).
                Err(kbind_cluster::Error::Conflict { .. }) if creating => {
                    tracing::info!(
                        object = %target,
                        "the provider object appeared before our create; classifying it again"
                    );
                    refused = None;
                    continue;
                }
                // The copy changed or went since the copy the precondition came from. Look at
                // it again now rather than fail and wait out an error retry.
                Err(e)
                    if (precondition.is_some() || guard_uid.is_some())
                        && pass + 1 < WRITE_PASSES
                        && is_changed_since(&e) =>
                {
                    refused = precondition;
                    continue;
                }
                Err(source) => {
                    let step = if creating { "create" } else { "apply" };
                    return Err(self.write_failed(step, target, source));
                }
            };
            let replaced = if creating {
                None
            } else {
                live.as_ref().and_then(|l| l.metadata.resource_version.clone())
            };
            self.remember(target, &copy, replaced);
            // A copy created by an older konnector (or the Go one) still carries its create's
            // entry; checked after every apply, so a pass that lost the race to another writer
            // heals later.
            return Ok(Written::Copy(Box::new(self.drop_create_entry(target, copy).await?)));
        }
        Ok(Written::Not(self.requeue(key, WAIT)))
    }

    /// The known copy ([`ApiSyncer::known_ours`]) when it shows there is nothing to write: the store has listed, and the
    /// copy is ours for this object, not terminating, carries no create entry still to remove
    /// and has exactly the labels, annotations and spec an apply would set (so nothing to add
    /// and nothing to prune). Anything else goes the careful way: a fresh read, classified, then
    /// written with its preconditions. Skipping a write decides nothing irreversible, so a
    /// slightly old cache can only delay a write until the copy's own event comes.
    async fn current_copy(&self, obj: &DynamicObject, target: &ObjectKey) -> Option<DynamicObject> {
        let store = self.watches.store_for(target.namespace.as_deref())?;
        if !store.wait_synced(CACHE_SYNC_WAIT).await {
            return None;
        }
        let known = self.known_ours(obj, target, None)?;
        // The lean cache keeps managedFields only when our create's entry is still to remove.
        if known.metadata.managed_fields.is_some() {
            return None;
        }
        let body = meta::apply_body(self.res(), obj, target, &self.spec.consumer_cluster_uid, None);
        is_current(&body, &known).then_some(known)
    }

    /// Remembers our write of `copy` at `target`, which replaced the copy at resourceVersion
    /// `replaced` (`None`: it created it), until the cache hears of it.
    fn remember(&self, target: &ObjectKey, copy: &DynamicObject, replaced: Option<String>) {
        let cached = self
            .watches
            .store_for(target.namespace.as_deref())
            .and_then(|store| store.get(target.namespace.as_deref(), &target.name))
            .and_then(|c| c.metadata.resource_version.clone());
        self.echoes.own_copy(target.clone(), copy, replaced, cached.as_deref());
    }

    /// The copy at `target` as our latest write left it or else as the listed cache holds it,
    /// unless an apply was just `refused` at its resourceVersion; only when it is ours to
    /// update (not foreign, not terminating: those always get a fresh read).
    fn known_ours(&self, obj: &DynamicObject, target: &ObjectKey, refused: Option<&str>) -> Option<DynamicObject> {
        let fresh =
            |copy: &Arc<DynamicObject>| refused.is_none() || copy.metadata.resource_version.as_deref() != refused;
        let store = self.watches.store_for(target.namespace.as_deref())?;
        if !store.is_synced() {
            return None;
        }
        let cached = store.get(target.namespace.as_deref(), &target.name);
        let cached_rv = cached.as_ref().and_then(|c| c.metadata.resource_version.as_deref());
        let latest = self.echoes.latest(target, cached_rv);
        let known = latest.filter(fresh).or(cached.filter(fresh))?;
        let verdict = meta::classify(
            Some(&known),
            obj,
            &self.spec.consumer_cluster_uid,
            &self.spec.conflict_policy,
        );
        (verdict == Verdict::Update { precondition: None }).then(|| (*known).clone())
    }

    /// Whether the listed provider store holds nothing at `target`, so the classifying read can
    /// be skipped: what it would find is at most an object that appeared since the store last
    /// heard, and the creating apply that follows ([`CREATE_ONLY`]) is refused by that one,
    /// which the second pass then reads and classifies. Not trusted for a copy we created
    /// lately, whose event may still be on its way (the read finds it and the reconcile goes on
    /// instead of waiting out the [`super::recreate`] interval).
    fn cache_says_absent(&self, target: &ObjectKey) -> bool {
        let Some(store) = self.watches.store_for(target.namespace.as_deref()) else {
            return false;
        };
        if !store.is_synced() || store.get(target.namespace.as_deref(), &target.name).is_some() {
            return false;
        }
        !self.recreates.created_lately(target)
    }

    /// Removes the `Update` entry our create left in the copy's managedFields. kube-apiserver
    /// keeps it beside the apply's entry (both managers set the same values, so both own the
    /// fields), and a field the consumer later removes would stay owned by it and never be
    /// pruned. The patch is guarded by the copy's resourceVersion; a copy that changed since is
    /// left for the next pass; a copy without that entry needs nothing.
    async fn drop_create_entry(&self, target: &ObjectKey, copy: DynamicObject) -> Result<DynamicObject, SyncError> {
        let manager = kbind_api::consts::field_manager::KONNECTOR;
        let Some(index) = copy.metadata.managed_fields.iter().flatten().position(|entry| {
            entry.manager.as_deref() == Some(manager)
                && entry.operation.as_deref() == Some("Update")
                && entry.subresource.is_none()
        }) else {
            return Ok(copy);
        };
        let rv = copy.metadata.resource_version.clone().unwrap_or_default();
        let patch: json_patch::Patch = serde_json::from_value(serde_json::json!([
            {"op": "test", "path": "/metadata/resourceVersion", "value": rv},
            {"op": "remove", "path": format!("/metadata/managedFields/{index}")},
        ]))
        .map_err(|e| self.write_failed("patch", target, kbind_cluster::Error::Decode(e.to_string())))?;
        let params = PatchParams {
            field_manager: Some(manager.to_string()),
            ..PatchParams::default()
        };
        match self
            .provider
            .client
            .patch(
                self.res(),
                target.namespace.as_deref(),
                &target.name,
                &Patch::Json(patch),
                &params,
            )
            .await
        {
            Ok(patched) => {
                self.remember(target, &patched, copy.metadata.resource_version.clone());
                Ok(patched)
            }
            // Changed since our apply (the next pass re-applies) or a test that failed: keep ours.
            Err(kbind_cluster::Error::Conflict { .. } | kbind_cluster::Error::Invalid { .. }) => Ok(copy),
            Err(source) => Err(self.write_failed("patch", target, source)),
        }
    }

    /// A failed write of the copy.
    fn write_failed(&self, step: &'static str, target: &ObjectKey, source: kbind_cluster::Error) -> SyncError {
        // The namespace may have been deleted out of band since it was last seen: the retry
        // looks again (and re-creates it) instead of trusting the memo for ever.
        self.forget_namespace(target);
        SyncError::ProviderWriteFailed {
            step,
            object: target.clone(),
            source,
        }
    }

    pub(super) async fn read_target(&self, target: &ObjectKey) -> Result<Option<DynamicObject>, SyncError> {
        self.provider
            .reader
            .get_opt(self.res(), target.namespace.as_deref(), &target.name)
            .await
            .map_err(|source| SyncError::ProviderReadFailed {
                object: target.clone(),
                source,
            })
    }
}

/// Whether a guarded apply was refused because its copy changed or went: a failed
/// resourceVersion precondition (409), or a UID that no longer names the object there (422 on
/// `metadata.uid`; 409 when nothing is there).
fn is_changed_since(error: &kbind_cluster::Error) -> bool {
    match error {
        kbind_cluster::Error::Conflict { .. } => true,
        kbind_cluster::Error::Invalid { causes, .. } => causes.iter().any(|c| c.field == "metadata.uid"),
        _ => false,
    }
}

/// Whether `copy` holds exactly what the apply `body` sets in the fields kbind writes.
fn is_current(body: &Value, copy: &DynamicObject) -> bool {
    let strings = |map: Option<&std::collections::BTreeMap<String, String>>| -> Value {
        Value::Object(
            map.into_iter()
                .flatten()
                .map(|(k, v)| (k.clone(), Value::String(v.clone())))
                .collect(),
        )
    };
    let metadata = &body["metadata"];
    metadata.get("ownerReferences").is_none()
        && metadata["labels"] == strings(copy.metadata.labels.as_ref())
        && metadata["annotations"] == strings(copy.metadata.annotations.as_ref())
        && body.get("spec") == copy.data.get("spec")
}
