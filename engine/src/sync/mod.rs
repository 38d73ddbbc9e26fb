//! Per-(binding, GVR) syncers: consumer instances up to the provider with server-side apply,
//! provider status down, conflicts classified before the first write, deletion through the
//! `core.kbind.io/syncer` finalizer, and drain on unbind (contract §4).
//!
//! Machinery: consumer objects come from the seam's watcher through a kube-runtime reflector
//! into `Controller::for_stream_with`; provider changes come from the engaged provider's
//! shared cache (one watch per GVR per Connection), mapped back through the [`Mapper`].
//!
//! Left out for now: `status-stale` annotations while a provider is disengaged, related
//! resources, and per-namespace watches when a cluster-wide watch is forbidden.

mod drain;
mod meta;
mod observe;
mod provider_events;
mod syncer;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kbind_api::ConflictPolicy;
use kbind_cluster::ApiResource;
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use crate::context::Context;
use crate::mapper::{Mapper, ObjectKey};
use crate::provider::EngagedProvider;

pub use drain::Drained;
pub use observe::{NoObserver, SyncObserver};

/// Which kind of binding a syncer serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum BindingKind {
    /// A ClusterBinding: every instance.
    Cluster,
    /// A Binding: instances in its namespace only.
    Namespaced,
}

/// The binding a syncer works for.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BindingRef {
    /// ClusterBinding or Binding.
    pub kind: BindingKind,
    /// The Binding's namespace (`None` for a ClusterBinding).
    pub namespace: Option<String>,
    /// The binding's name.
    pub name: String,
    /// The binding's UID.
    pub uid: String,
}

/// Everything one API syncer needs to know.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiSyncerSpec {
    /// The Connection's name.
    pub connection: String,
    /// The binding.
    pub binding: BindingRef,
    /// `<plural>.<group>`.
    pub api: String,
    /// The GVR, the same on both sides.
    pub resource: ApiResource,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// For a Binding: the only namespace synced.
    pub namespace: Option<String>,
    /// What to do with an unmarked provider object in the way.
    pub conflict_policy: ConflictPolicy,
    /// The consumer cluster's UID (`status.localClusterUID`), stamped on provider copies.
    pub consumer_cluster_uid: String,
    /// Whether the consumer CRD serves a status subresource (no status sync without one).
    pub status_subresource: bool,
}

/// Identifies a syncer: one per (Connection, binding, API).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SyncerKey {
    /// The Connection's name.
    pub connection: String,
    /// ClusterBinding or Binding.
    pub binding_kind: BindingKind,
    /// The Binding's namespace.
    pub binding_namespace: Option<String>,
    /// The binding's name.
    pub binding_name: String,
    /// `<plural>.<group>`.
    pub api: String,
}

impl ApiSyncerSpec {
    /// The key of the syncer running this spec.
    pub fn key(&self) -> SyncerKey {
        SyncerKey {
            connection: self.connection.clone(),
            binding_kind: self.binding.kind,
            binding_namespace: self.binding.namespace.clone(),
            binding_name: self.binding.name.clone(),
            api: self.api.clone(),
        }
    }
}

/// What a syncer has seen so far, for the binding's status.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SyncerReport {
    /// Consumer objects left alone, with the conflict reason.
    pub conflicts: BTreeMap<ObjectKey, String>,
    /// Forbidden provider operations, as `"<verb> <resource>"`.
    pub denied: BTreeSet<String>,
    /// Consumer objects whose provider copy was written successfully.
    pub synced: usize,
    /// Consumer objects triggered by a change and not yet picked up by a reconcile.
    pub queued: usize,
    /// Whether it follows both sides now.
    pub following: Following,
}

/// How a syncer follows its two sides: each has listed once, and its list and watch work.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Following {
    /// The consumer watch has listed once.
    pub consumer_listed: bool,
    /// Every provider store the syncer follows has listed once.
    pub provider_listed: bool,
    /// The consumer watch's failure, while it fails.
    pub consumer_failure: Option<crate::provider::WatchFailure>,
    /// A followed provider store's failure, while it fails.
    pub provider_failure: Option<crate::provider::WatchFailure>,
    /// How long a side that has listed may fail before it is reported
    /// ([`crate::provider::WatchFailure::reportable`]).
    pub grace: std::time::Duration,
}

/// Why a syncer does not follow both sides now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lag {
    /// A side has not listed yet; nothing failed (so far).
    Listing(String),
    /// A side's list or watch fails: the verb, resource, side and cause in words.
    Failing(String),
}

impl Following {
    /// What keeps the syncer of `api` from following both sides, if anything (a failure once it
    /// is [`crate::provider::WatchFailure::reportable`]).
    pub fn lag(&self, api: &str) -> Option<Lag> {
        let sides = [
            ("consumer", self.consumer_listed, &self.consumer_failure),
            ("provider", self.provider_listed, &self.provider_failure),
        ];
        for (side, listed, failure) in sides {
            if let Some(f) = failure
                && f.reportable(listed, self.grace)
            {
                // No count in the words: they would rewrite the status at every retry.
                return Some(Lag::Failing(format!(
                    "{} {api} on the {side} failed: {}; it is retried, and changes made on the provider are not seen until it works",
                    f.verb, f.cause
                )));
            }
        }
        for (side, listed, _) in sides {
            if !listed {
                return Some(Lag::Listing(format!(
                    "waiting for the first list of {api} on the {side}"
                )));
            }
        }
        None
    }
}

/// Errors of the sync module.
#[derive(Debug, thiserror::Error)]
pub enum SyncError {
    /// A consumer read or list failed.
    #[error("failed to read {what} on the consumer")]
    ConsumerReadFailed {
        /// What was read.
        what: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// A consumer write failed.
    #[error("failed to {step} {object} on the consumer")]
    ConsumerWriteFailed {
        /// The step that failed.
        step: &'static str,
        /// The consumer object.
        object: ObjectKey,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// A provider read failed (the message carries the HTTP cause, never the server's text).
    #[error("failed to read {object} on the provider ({})", crate::cause::http_cause(.source))]
    ProviderReadFailed {
        /// The provider object.
        object: ObjectKey,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// A provider write failed (the message carries the HTTP cause, never the server's text).
    #[error("failed to {step} {object} on the provider ({})", crate::cause::http_cause(.source))]
    ProviderWriteFailed {
        /// The step that failed.
        step: &'static str,
        /// The provider object.
        object: ObjectKey,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// Provider copies must be deleted but no provider is engaged (`DeletionBlocked`).
    #[error("failed to drain: the provider is not engaged and {waiting} copies must be deleted")]
    ProviderUnavailable {
        /// Objects still holding the finalizer.
        waiting: usize,
    },
}

impl SyncError {
    /// The cluster's answer behind this error, if one came.
    pub fn cause(&self) -> Option<&kbind_cluster::Error> {
        match self {
            SyncError::ConsumerReadFailed { source, .. }
            | SyncError::ConsumerWriteFailed { source, .. }
            | SyncError::ProviderReadFailed { source, .. }
            | SyncError::ProviderWriteFailed { source, .. } => Some(source),
            SyncError::ProviderUnavailable { .. } => None,
        }
    }

    /// The provider's answer, when a provider read or write failed.
    pub fn provider_error(&self) -> Option<&kbind_cluster::Error> {
        match self {
            SyncError::ProviderReadFailed { source, .. } | SyncError::ProviderWriteFailed { source, .. } => {
                Some(source)
            }
            _ => None,
        }
    }

    /// `"<verb> <resource>"` when a provider call was forbidden.
    pub fn denied(&self) -> Option<String> {
        match self.provider_error()? {
            kbind_cluster::Error::Forbidden { verb, resource, .. } => Some(format!("{verb} {resource}")),
            _ => None,
        }
    }
}

/// What one syncer has found so far (conflicts, denials, synced objects, how it follows both
/// sides): the mutable form of its [`SyncerReport`].
#[derive(Debug, Default)]
struct Findings {
    conflicts: BTreeMap<ObjectKey, String>,
    /// Per consumer object, so one object's denial does not hide another's success.
    denied: BTreeMap<ObjectKey, String>,
    synced: BTreeSet<ObjectKey>,
    following: Following,
}

impl Findings {
    fn report(&self) -> SyncerReport {
        SyncerReport {
            conflicts: self.conflicts.clone(),
            denied: self.denied.values().cloned().collect(),
            synced: self.synced.len(),
            queued: 0,
            following: self.following.clone(),
        }
    }

    fn forget(&mut self, key: &ObjectKey) {
        self.conflicts.remove(key);
        self.denied.remove(key);
        self.synced.remove(key);
    }
}

/// What of a syncer's findings the binding's status shows: the conflict count, the refused
/// verbs, and whether (and why not) the syncer follows both sides.
type Shown = (usize, BTreeSet<String>, Option<Lag>);

impl Findings {
    fn shown(&self) -> Shown {
        (
            self.conflicts.len(),
            self.denied.values().cloned().collect(),
            self.following.lag(""),
        )
    }
}

/// One syncer's findings and who to tell when what its binding shows changes.
#[derive(Clone)]
struct SharedFindings {
    findings: Arc<Mutex<Findings>>,
    key: SyncerKey,
    changes: broadcast::Sender<SyncerKey>,
}

/// Locked findings that, when released, tell the binding if what its status shows changed
/// (so a healthy binding is reconciled on a change, not on a timer).
struct FindingsGuard<'a> {
    guard: parking_lot::MutexGuard<'a, Findings>,
    shown: Shown,
    owner: &'a SharedFindings,
}

impl std::ops::Deref for FindingsGuard<'_> {
    type Target = Findings;
    fn deref(&self) -> &Findings {
        &self.guard
    }
}

impl std::ops::DerefMut for FindingsGuard<'_> {
    fn deref_mut(&mut self) -> &mut Findings {
        &mut self.guard
    }
}

impl Drop for FindingsGuard<'_> {
    fn drop(&mut self) {
        if self.guard.shown() != self.shown {
            // No binding controller listening (a syncer run alone) is fine.
            let _ = self.owner.changes.send(self.owner.key.clone());
        }
    }
}

fn lock(findings: &SharedFindings) -> FindingsGuard<'_> {
    let guard = findings.findings.lock();
    let shown = guard.shown();
    FindingsGuard {
        guard,
        shown,
        owner: findings,
    }
}

/// Report changes a binding controller may fall behind by before it misses some (the resync
/// backstop then catches up).
const REPORT_CHANGES: usize = 1024;

/// One running syncer; dropping it stops the task.
struct Running {
    spec: ApiSyncerSpec,
    provider: Arc<EngagedProvider>,
    findings: SharedFindings,
    pending: Arc<observe::PendingTriggers>,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The set of running syncers; clones share it.
#[derive(Clone)]
pub struct Syncers {
    ctx: Context,
    mapper: Arc<dyn Mapper>,
    observer: Arc<dyn SyncObserver>,
    running: Arc<Mutex<BTreeMap<SyncerKey, Running>>>,
    report_changes: broadcast::Sender<SyncerKey>,
}

impl std::fmt::Debug for Syncers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Syncers").field("running", &self.keys()).finish()
    }
}

impl Syncers {
    /// No syncers yet; `mapper` maps every key.
    pub fn new(ctx: Context, mapper: Arc<dyn Mapper>) -> Self {
        Self {
            ctx,
            mapper,
            observer: Arc::new(NoObserver),
            running: Arc::new(Mutex::new(BTreeMap::new())),
            report_changes: broadcast::channel(REPORT_CHANGES).0,
        }
    }

    /// The mapper every syncer maps keys with.
    pub(crate) fn mapper(&self) -> &dyn Mapper {
        self.mapper.as_ref()
    }

    /// Reports sync latencies of the syncers started from now on to `observer`.
    #[must_use]
    pub fn with_observer(mut self, observer: Arc<dyn SyncObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// Starts the syncer of `spec`, keeps it if it already runs the same spec on the same
    /// engagement, restarts it otherwise. Returns whether a syncer was (re)started.
    pub fn ensure(&self, spec: ApiSyncerSpec, provider: Arc<EngagedProvider>) -> bool {
        let key = spec.key();
        let mut running = self.running.lock();
        if let Some(current) = running.get(&key)
            && current.spec == spec
            && Arc::ptr_eq(&current.provider, &provider)
            && !provider.is_disengaged()
            && !current.task.is_finished()
        {
            return false;
        }
        let grace = crate::link::window(self.ctx.config.heartbeat_interval);
        let findings = SharedFindings {
            findings: Arc::new(Mutex::new(Findings {
                following: Following {
                    grace,
                    ..Following::default()
                },
                ..Findings::default()
            })),
            key: key.clone(),
            changes: self.report_changes.clone(),
        };
        let pending = Arc::new(observe::PendingTriggers::default());
        let task = tokio::spawn(syncer::run(syncer::ApiSyncer::new(
            &self.ctx,
            spec.clone(),
            provider.clone(),
            self.mapper.clone(),
            syncer::Observation {
                findings: findings.clone(),
                pending: pending.clone(),
                observer: self.observer.clone(),
            },
        )));
        // Replacing drops (and so stops) the previous syncer of this key.
        running.insert(
            key,
            Running {
                spec,
                provider,
                findings,
                pending,
                task,
            },
        );
        true
    }

    /// Stops one syncer (nothing is deleted anywhere).
    pub fn stop(&self, key: &SyncerKey) {
        self.running.lock().remove(key);
    }

    /// Stops every syncer of a Connection (nothing is deleted anywhere).
    pub fn stop_connection(&self, connection: &str) {
        self.running.lock().retain(|k, _| k.connection != connection);
    }

    /// The keys of syncers whose report changed in what a binding's status shows (conflicts,
    /// refused verbs), from now on.
    pub fn report_changes(&self) -> broadcast::Receiver<SyncerKey> {
        self.report_changes.subscribe()
    }

    /// Keys of the running syncers, sorted.
    pub fn keys(&self) -> Vec<SyncerKey> {
        self.running.lock().keys().cloned().collect()
    }

    /// What the syncer of `key` has seen, if it runs.
    pub fn report(&self, key: &SyncerKey) -> Option<SyncerReport> {
        self.running.lock().get(key).map(|r| SyncerReport {
            queued: r.pending.depth(),
            ..lock(&r.findings).report()
        })
    }

    /// Unbinds: stops the syncer, deletes the provider copies we own (unless the object or
    /// `orphan` says Orphan) and releases our finalizers. With `orphan` the provider is never
    /// touched. Call again until [`Drained::is_complete`].
    pub async fn drain(
        &self,
        spec: &ApiSyncerSpec,
        provider: Option<Arc<EngagedProvider>>,
        orphan: bool,
    ) -> Result<Drained, SyncError> {
        self.stop(&spec.key());
        drain::drain(&self.ctx, self.mapper.as_ref(), spec, provider.as_deref(), orphan).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forbidden_provider_writes_name_verb_and_resource() {
        let err = SyncError::ProviderWriteFailed {
            step: "apply",
            object: ObjectKey::namespaced("a", "w"),
            source: kbind_cluster::Error::forbidden("u", "patch", "widgets", "example.org", Some("a"), Some("w")),
        };
        assert_eq!(err.denied().as_deref(), Some("patch widgets.example.org"));
        let consumer = SyncError::ConsumerWriteFailed {
            step: "patch",
            object: ObjectKey::namespaced("a", "w"),
            source: kbind_cluster::Error::forbidden("u", "patch", "widgets", "example.org", Some("a"), Some("w")),
        };
        assert_eq!(consumer.denied(), None, "only provider denials are reported");
    }

    #[test]
    fn findings_report_each_denial_once() {
        let mut findings = Findings::default();
        findings
            .denied
            .insert(ObjectKey::namespaced("b", "w1"), "patch widgets.example.org".into());
        findings
            .denied
            .insert(ObjectKey::namespaced("b", "w2"), "patch widgets.example.org".into());
        findings.synced.insert(ObjectKey::namespaced("a", "w"));
        let report = findings.report();
        assert_eq!(report.denied.len(), 1);
        assert_eq!(report.synced, 1);
        findings.forget(&ObjectKey::namespaced("a", "w"));
        assert_eq!(findings.report().synced, 0);
    }
}
