//! One syncer's state, which every reconcile of it shares: its spec, both clients, its memos of
//! the provider side, and where it reports.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use kube::runtime::controller::Action;
use parking_lot::Mutex;
use serde_json::Value;

use super::recreate::RecreateThrottle;
use crate::context::Context;
use crate::events::Recorder;
use crate::mapper::{Mapper, ObjectKey};
use crate::provider::EngagedProvider;
use crate::sync::observe::{PendingTriggers, SyncObserver};
use crate::sync::provider_events::{ProviderEchoes, ProviderWatches};
use crate::sync::{ApiSyncerSpec, SharedFindings};

/// Re-check of an object waiting for a terminating provider copy or a deletion.
pub(super) const WAIT: Duration = Duration::from_secs(2);

/// One syncer of one (binding, API): what every reconcile of its objects shares.
pub(crate) struct ApiSyncer {
    pub(super) spec: ApiSyncerSpec,
    pub(super) consumer: Arc<dyn ClusterClient>,
    pub(super) provider: Arc<EngagedProvider>,
    pub(super) mapper: Arc<dyn Mapper>,
    pub(super) recorder: Recorder,
    pub(super) findings: SharedFindings,
    pub(super) pending: Arc<PendingTriggers>,
    pub(super) observer: Arc<dyn SyncObserver>,
    pub(super) clock: kbind_cluster::SharedClock,
    /// Provider namespaces known to exist.
    pub(super) namespaces: Mutex<BTreeSet<String>>,
    /// The provider stores the syncer follows and their events.
    pub(super) watches: ProviderWatches,
    /// Our own provider writes, whose events are echoes.
    pub(super) echoes: ProviderEchoes,
    /// When each copy was last created, so a copy someone keeps deleting is not re-created at
    /// once.
    pub(super) recreates: RecreateThrottle,
    /// Reconciles run at once. Bounded because, unbounded, a first sync of N objects keeps N
    /// reconciles (each a large future holding its objects and requests) alive together, and
    /// the heap they leave behind stays in the process's RSS long after they finished.
    pub(super) workers: u16,
    /// How the consumer watch backs off.
    pub(super) watcher_config: kbind_cluster::watcher::WatcherConfig,
    /// Objects whose last provider call was refused once (a second refusal is reported).
    pub(super) forbidden_once: Mutex<BTreeSet<ObjectKey>>,
    /// The jitter of every requeue.
    pub(super) randomness: kbind_cluster::backoff::SharedRandomness,
    /// Whether the consumer watch's last event was an error (spares a working watch's events
    /// the findings' lock).
    pub(super) consumer_failing: std::sync::atomic::AtomicBool,
}

/// Where a syncer reports what it did and how long it took.
pub(crate) struct Observation {
    /// Synced objects, conflicts and denials (the binding's status).
    pub(crate) findings: SharedFindings,
    /// Changes seen and not yet synced.
    pub(crate) pending: Arc<PendingTriggers>,
    /// Receives the latencies.
    pub(crate) observer: Arc<dyn SyncObserver>,
}

impl ApiSyncer {
    /// The shared state of a syncer for `spec` on `provider`.
    pub(crate) fn new(
        ctx: &Context,
        spec: ApiSyncerSpec,
        provider: Arc<EngagedProvider>,
        mapper: Arc<dyn Mapper>,
        observation: Observation,
    ) -> Arc<Self> {
        let instance = format!("{}-{}", kbind_api::consts::EVENT_COMPONENT, spec.connection);
        Arc::new(Self {
            recorder: Recorder::new(ctx.consumer.clone(), ctx.clock.clone(), &instance),
            consumer: ctx.consumer.clone(),
            clock: ctx.clock.clone(),
            spec,
            provider,
            mapper,
            findings: observation.findings,
            pending: observation.pending,
            observer: observation.observer,
            namespaces: Mutex::new(BTreeSet::new()),
            watches: ProviderWatches::default(),
            echoes: ProviderEchoes::default(),
            recreates: RecreateThrottle::default(),
            workers: ctx.config.sync_workers.max(1),
            watcher_config: ctx.watcher_config(),
            forbidden_once: Mutex::new(BTreeSet::new()),
            randomness: ctx.randomness.clone(),
            consumer_failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    pub(super) fn res(&self) -> &ApiResource {
        &self.spec.resource
    }

    /// `period` of the object `key`, jittered: its waits never line up with a thousand others'.
    pub(super) fn wait(&self, key: &ObjectKey, period: Duration) -> Duration {
        let label = format!("sync/{}/{}/{key}", self.spec.binding.uid, self.spec.api);
        kbind_cluster::backoff::period(self.randomness.as_ref(), &label, period)
    }

    /// Patches the consumer object `key`.
    pub(super) async fn patch_consumer(
        &self,
        key: &ObjectKey,
        patch: Patch<Value>,
    ) -> Result<DynamicObject, kbind_cluster::Error> {
        self.consumer
            .patch(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &patch,
                &PatchParams::default(),
            )
            .await
    }

    /// Patches the status subresource of the consumer object `key`.
    pub(super) async fn patch_consumer_status(
        &self,
        key: &ObjectKey,
        patch: Patch<Value>,
    ) -> Result<DynamicObject, kbind_cluster::Error> {
        self.consumer
            .patch_status(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &patch,
                &PatchParams::default(),
            )
            .await
    }

    /// A requeue of the object `key` after `period`, jittered.
    pub(super) fn requeue(&self, key: &ObjectKey, period: Duration) -> Action {
        Action::requeue(self.wait(key, period))
    }
}
