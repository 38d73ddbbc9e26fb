//! One syncer: a kube-runtime controller over the consumer objects of one GVR, triggered
//! also by the change events of the provider's shared cache, reconciling each object up and
//! its status down.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kbind_api::consts::{TRUE, annotation, finalizer, label, reason};
use kbind_cluster::watcher::{Event, WatchStreamExt, WatcherError, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, store::Writer};
use serde_json::{Value, json};
use tokio::time::Instant;

use super::meta::{self, Verdict};
use super::observe::{PendingTriggers, SyncObserver};
use super::provider_events::{ProviderChange, ProviderEchoes, ProviderWatches};
use super::{SharedTally, SyncError, SyncerSpec, lock};
use crate::context::Context;
use crate::events::{EventType, Recorder};
use crate::mapper::{Mapper, ObjectKey};
use crate::provider::EngagedProvider;

/// Slow backstop resync of every object (provider changes arrive as events).
const RESYNC: Duration = Duration::from_secs(300);
/// How long a reconcile waits for a provider store's first list before it reads the provider
/// directly instead.
const CACHE_SYNC_WAIT: Duration = Duration::from_secs(10);
/// Least time between two creates of the same copy. Provider deletes arrive as events, so a
/// provider that deletes every copy we make (a garbage collector, a policy controller) would
/// otherwise meet a create per event as fast as the network allows.
const RECREATE_INTERVAL: Duration = Duration::from_secs(1);
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
/// Re-check of an object waiting for a terminating provider copy or a deletion.
const WAIT: Duration = Duration::from_secs(2);
/// Re-check of a conflicted object (provider changes re-trigger it sooner).
const CONFLICT_RECHECK: Duration = Duration::from_secs(60);
/// Retry after a forbidden provider call.
const DENIED_RETRY: Duration = Duration::from_secs(30);
/// Retry after any other failure.
const ERROR_RETRY: Duration = Duration::from_secs(5);
/// The condition kbind writes into a conflicted object's `status.conditions`.
const SYNCED_CONDITION: &str = "Synced";
/// The step of a failed status write (its retry must not measure the spec-up again).
const STATUS_STEP: &str = "write the status of";

/// What writing the copy came to.
enum Written {
    /// The copy as the provider holds it after our write.
    Copy(Box<DynamicObject>),
    /// Not written (conflict, terminating copy, a lost race): what the reconcile answers.
    Not(Action),
}

/// What every reconcile of one syncer shares.
pub(crate) struct Shared {
    spec: SyncerSpec,
    consumer: Arc<dyn ClusterClient>,
    provider: Arc<EngagedProvider>,
    mapper: Arc<dyn Mapper>,
    recorder: Recorder,
    tally: SharedTally,
    pending: Arc<PendingTriggers>,
    observer: Arc<dyn SyncObserver>,
    clock: kbind_cluster::SharedClock,
    /// Provider namespaces known to exist.
    namespaces: Mutex<BTreeSet<String>>,
    /// The provider stores the syncer follows and their events.
    watches: ProviderWatches,
    /// Our own provider writes, whose events are echoes.
    echoes: ProviderEchoes,
    /// When each copy was last created, kept for [`RECREATE_INTERVAL`].
    created: Mutex<BTreeMap<ObjectKey, Instant>>,
    /// Reconciles run at once. Bounded because, unbounded, a first sync of N objects keeps N
    /// reconciles (each a large future holding its objects and requests) alive together, and
    /// the heap they leave behind stays in the process's RSS long after they finished.
    workers: u16,
    /// How the consumer watch backs off.
    watcher_config: kbind_cluster::watcher::WatcherConfig,
    /// Objects whose last provider call was refused once (a second refusal is reported).
    forbidden_once: Mutex<BTreeSet<ObjectKey>>,
    /// The jitter of every requeue.
    randomness: kbind_cluster::backoff::SharedRandomness,
    /// Whether the consumer watch's last event was an error (spares a working watch's events
    /// the tally's lock).
    consumer_failing: std::sync::atomic::AtomicBool,
}

/// Where a syncer reports what it did and how long it took.
pub(crate) struct Observation {
    /// Synced objects, conflicts and denials (the binding's status).
    pub(crate) tally: SharedTally,
    /// Changes seen and not yet synced.
    pub(crate) pending: Arc<PendingTriggers>,
    /// Receives the latencies.
    pub(crate) observer: Arc<dyn SyncObserver>,
}

impl Shared {
    /// The shared state of a syncer for `spec` on `provider`.
    pub(crate) fn new(
        ctx: &Context,
        spec: SyncerSpec,
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
            tally: observation.tally,
            pending: observation.pending,
            observer: observation.observer,
            namespaces: Mutex::new(BTreeSet::new()),
            watches: ProviderWatches::default(),
            echoes: ProviderEchoes::default(),
            created: Mutex::new(BTreeMap::new()),
            workers: ctx.config.sync_workers.max(1),
            watcher_config: ctx.watcher_config(),
            forbidden_once: Mutex::new(BTreeSet::new()),
            randomness: ctx.randomness.clone(),
            consumer_failing: std::sync::atomic::AtomicBool::new(false),
        })
    }

    fn res(&self) -> &ApiResource {
        &self.spec.resource
    }

    /// `period` of the object `key`, jittered: its waits never line up with a thousand others'.
    fn wait(&self, key: &ObjectKey, period: Duration) -> Duration {
        let label = format!("sync/{}/{}/{key}", self.spec.binding.uid, self.spec.api);
        kbind_cluster::backoff::period(self.randomness.as_ref(), &label, period)
    }

    /// A requeue of the object `key` after `period`, jittered.
    fn requeue(&self, key: &ObjectKey, period: Duration) -> Action {
        Action::requeue(self.wait(key, period))
    }
}

/// Runs the syncer until the future is dropped.
pub(crate) async fn run(shared: Arc<Shared>) {
    let res = shared.spec.resource.clone();
    let writer: Writer<DynamicObject> = Writer::new(res.clone());
    let store = writer.as_reader();
    let pending = shared.pending.clone();
    let consumer_events = into_store(
        writer,
        watcher(
            shared.consumer.clone(),
            res.clone(),
            shared.spec.namespace.clone(),
            shared.watcher_config.clone().on_watch_open({
                let shared = shared.clone();
                move || shared.consumer_watch_opened()
            }),
        ),
    )
    .inspect(move |event| note_consumer_event(&pending, event))
    .inspect({
        let shared = shared.clone();
        move |event| shared.note_consumer_health(event)
    })
    .applied_objects();
    shared.choose_watches().await;
    shared.note_provider_health();
    let provider_changes = shared.watches.changes();
    let trigger_shared = shared.clone();
    let consumers = store.clone();
    let triggers = provider_changes
        .flat_map(move |change| futures::stream::iter(trigger_shared.consumers_to_look_at(&consumers, change)));
    Controller::for_stream_with(consumer_events, store, res)
        .with_config(Config::default().concurrency(shared.workers))
        .reconcile_on(triggers)
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "syncer controller event");
            }
        })
        .await;
}

/// The consumer watch through the syncer's store. The store is the syncer's own (one per binding
/// scope); what no decision reads is dropped as in the provider cache, and before the store
/// copies the object: leaned after the reflector, the store kept every managedFields entry (each
/// event deep-copied with them) and only the copy passed on, which nothing keeps, was lean.
fn into_store(
    writer: Writer<DynamicObject>,
    events: impl futures::Stream<Item = Result<Event<DynamicObject>, WatcherError>>,
) -> impl futures::Stream<Item = Result<Event<DynamicObject>, WatcherError>> {
    reflector::reflector(writer, events.modify(crate::provider::lean))
}

/// A consumer watch event: an applied object waits for a reconcile, a deleted one never will.
fn note_consumer_event(pending: &PendingTriggers, event: &Result<Event<DynamicObject>, WatcherError>) {
    match event {
        Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
            if let Some(key) = ObjectKey::of(obj) {
                pending.consumer_event(key, obj.metadata.resource_version.as_deref());
            }
        }
        Ok(Event::Delete(obj)) => {
            if let Some(key) = ObjectKey::of(obj) {
                pending.forget(&key);
            }
        }
        Ok(Event::Init | Event::InitDone) | Err(_) => {}
    }
}

/// What is left of [`RECREATE_INTERVAL`] since `target` was last created, if anything.
fn recreate_left(created: &BTreeMap<ObjectKey, Instant>, target: &ObjectKey, now: Instant) -> Option<Duration> {
    let at = created.get(target)?;
    RECREATE_INTERVAL
        .checked_sub(now.duration_since(*at))
        .filter(|left| !left.is_zero())
}

/// The consumer object a provider object is the image of, within the syncer's scope.
fn consumer_ref(
    mapper: &dyn Mapper,
    res: &ApiResource,
    scope: Option<&str>,
    copy: &DynamicObject,
) -> Option<ObjectRef<DynamicObject>> {
    let key = mapper.to_consumer(res, &ObjectKey::of(copy)?)?;
    if scope.is_some() && key.namespace.as_deref() != scope {
        return None;
    }
    let r = ObjectRef::new_with(&key.name, res.clone());
    Some(match &key.namespace {
        Some(ns) => r.within(ns),
        None => r,
    })
}

fn error_policy(obj: Arc<DynamicObject>, error: &SyncError, shared: Arc<Shared>) -> Action {
    tracing::info!(object = ?ObjectKey::of(&obj), error = %error, "sync failed; retrying");
    // A throttled provider (429) says when to come back; never sooner than it asked.
    let asked = error.cause().and_then(kbind_cluster::backoff::retry_after);
    let wait = match ObjectKey::of(&obj) {
        Some(key) => shared.wait(&key, ERROR_RETRY),
        None => ERROR_RETRY,
    };
    Action::requeue(kbind_cluster::backoff::after_asked(wait, asked))
}

/// Reconciles one consumer object.
async fn reconcile(obj: Arc<DynamicObject>, shared: Arc<Shared>) -> Result<Action, SyncError> {
    let Some(key) = ObjectKey::of(&obj) else {
        return Ok(Action::await_change());
    };
    let since = shared.pending.pick_up(&key);
    let result = shared.sync(&obj, &key, since).await;
    if let (Err(e), Some(since)) = (&result, since)
        && !matches!(e, SyncError::ConsumerWriteFailed { step: STATUS_STEP, .. })
    {
        shared.pending.retry(key.clone(), since);
    }
    match result {
        // A first 403 may be a restarting apiserver whose RBAC caches have not synced yet
        // (it answers 403 for a moment): tried again soon, reported only if it repeats.
        Err(e)
            if e.denied().is_some()
                && shared
                    .forbidden_once
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .insert(key.clone()) =>
        {
            tracing::debug!(object = %key, error = %e, "provider call forbidden once; trying again before reporting it");
            Ok(Action::requeue(shared.wait(&key, ERROR_RETRY)))
        }
        Err(e) if let Some(denied) = e.denied() => {
            tracing::info!(object = %key, denied = %denied, "provider call forbidden");
            let mut tally = lock(&shared.tally);
            tally.denied.insert(key.clone(), denied);
            tally.synced.remove(&key);
            Ok(Action::requeue(shared.wait(&key, DENIED_RETRY)))
        }
        other => {
            if other.is_ok() {
                shared
                    .forbidden_once
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&key);
            }
            other
        }
    }
}

impl Shared {
    /// Follows the cluster-wide watch when the credentials may list the GVR everywhere, else
    /// one watch per namespace in use (added as objects are synced).
    async fn choose_watches(&self) {
        let probe = kbind_cluster::ListParams::default().limit(1);
        let refused = matches!(
            self.provider.reader.list(self.res(), None, &probe).await,
            Err(kbind_cluster::Error::Forbidden { .. })
        );
        if refused {
            tracing::info!(api = %self.spec.api, "cluster-wide watch forbidden; watching per namespace in use");
            self.watches.set_per_namespace();
        } else {
            let _ = self.watches.follow(&self.provider.cache, self.res(), None);
        }
    }

    /// In per-namespace mode, makes sure `namespace` is watched.
    fn follow_namespace(&self, namespace: Option<&str>) {
        if self
            .watches
            .follow_namespace(&self.provider.cache, self.res(), namespace)
        {
            self.note_provider_health();
        }
    }

    /// Records how the followed provider stores follow the provider (the binding's status shows
    /// it; the tally tells the binding when that changes).
    fn note_provider_health(&self) {
        let (listed, failure) = self.watches.health();
        let mut tally = lock(&self.tally);
        tally.following.provider_listed = listed;
        tally.following.provider_failure = failure;
    }

    /// A consumer watch opened: a failure before it is over.
    fn consumer_watch_opened(&self) {
        if self.consumer_failing.swap(false, std::sync::atomic::Ordering::SeqCst) {
            lock(&self.tally).following.consumer_failure = None;
        }
    }

    /// Records what a consumer watch event says of the watch: listed, failing, or working.
    fn note_consumer_health(&self, event: &Result<Event<DynamicObject>, WatcherError>) {
        use std::sync::atomic::Ordering;
        let failing = event.is_err();
        let was_failing = self.consumer_failing.swap(failing, Ordering::SeqCst);
        if !failing && !was_failing && !matches!(event, Ok(Event::InitDone)) {
            return;
        }
        let mut tally = lock(&self.tally);
        let following = &mut tally.following;
        match event {
            Err(e) => {
                let verb = match e {
                    WatcherError::InitialListFailed(_) => "list",
                    _ => "watch",
                };
                following.consumer_failure = Some(crate::provider::WatchFailure::new(
                    verb,
                    kbind_cluster::watcher::describe(e),
                    following.consumer_failure.as_ref(),
                ));
            }
            Ok(event) => {
                following.consumer_failure = None;
                if matches!(event, Event::InitDone) {
                    following.consumer_listed = true;
                }
            }
        }
    }

    /// The consumer objects a provider change concerns. The controller only reconciles
    /// objects in its store; a trigger for another one would wait in the queue for ever.
    fn consumers_to_look_at(
        &self,
        consumers: &reflector::Store<DynamicObject>,
        change: ProviderChange,
    ) -> Vec<ObjectRef<DynamicObject>> {
        match change {
            ProviderChange::Health => {
                self.note_provider_health();
                Vec::new()
            }
            ProviderChange::Object(copy) => self.consumer_of(consumers, &copy).into_iter().collect(),
            // Missed events or a relist: the copies that changed, and the objects whose copy
            // is not in the store (it may have gone without an event we heard). An unchanged
            // copy costs nothing, and the own-write bookkeeping stays: its echoes are known.
            ProviderChange::Missed { changed } => {
                // A relist may be a followed store's first.
                self.note_provider_health();
                let mut refs: Vec<ObjectRef<DynamicObject>> = changed
                    .iter()
                    .filter_map(|copy| self.consumer_of(consumers, copy))
                    .collect();
                for obj in consumers.state() {
                    let Some(key) = ObjectKey::of(&obj) else {
                        continue;
                    };
                    let target = self.mapper.to_provider(self.res(), &key);
                    let absent = self
                        .watches
                        .store_for(target.namespace.as_deref())
                        .is_some_and(|store| {
                            store.is_synced() && store.get(target.namespace.as_deref(), &target.name).is_none()
                        });
                    if absent {
                        refs.push(ObjectRef::from_obj_with(obj.as_ref(), self.res().clone()));
                    }
                }
                refs
            }
        }
    }

    /// The consumer object of provider `copy` if this syncer holds it; a change that is not an
    /// echo of our own write is measured from now.
    fn consumer_of(
        &self,
        consumers: &reflector::Store<DynamicObject>,
        copy: &DynamicObject,
    ) -> Option<ObjectRef<DynamicObject>> {
        let r = consumer_ref(self.mapper.as_ref(), self.res(), self.spec.namespace.as_deref(), copy)?;
        consumers.get(&r)?;
        let echo = ObjectKey::of(copy)
            .is_some_and(|target| self.echoes.is_echo(target, copy.metadata.resource_version.as_deref()));
        if !echo {
            self.pending.trigger(ObjectKey {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            });
        }
        Some(r)
    }

    /// Syncs one object; `since` is when its unprocessed change was first seen (`None` for a
    /// resync), the start of the latencies reported to the observer.
    async fn sync(&self, obj: &DynamicObject, key: &ObjectKey, since: Option<Instant>) -> Result<Action, SyncError> {
        let connection = self.spec.connection.as_str();
        // Held by another Connection's syncer (a namespace hand-over not finished): its drain
        // releases it first; touching it here would leave its provider copy behind.
        if meta::has_finalizer(obj) && meta::labelled_for(obj, connection) == Some(false) {
            tracing::debug!(object = %key, held_by = ?meta::holder_of(obj), "served through another Connection; left alone");
            return Ok(Action::await_change());
        }
        let target = self.mapper.to_provider(self.res(), key);
        self.follow_namespace(target.namespace.as_deref());
        if obj.metadata.deletion_timestamp.is_some() {
            return self.finalize(obj, key, &target).await;
        }
        let owned;
        let obj = if meta::has_finalizer(obj) && meta::labelled_for(obj, connection) == Some(true) {
            obj
        } else {
            owned = self.add_finalizer(obj, key).await?;
            &owned
        };
        let copy = match self.write_copy(obj, key, &target, since).await? {
            Written::Copy(copy) => *copy,
            Written::Not(action) => return Ok(action),
        };
        if let Some(since) = since {
            self.observer.spec_up(&self.spec.api, since.elapsed());
        }
        {
            let mut tally = lock(&self.tally);
            tally.denied.remove(key);
            tally.synced.insert(key.clone());
        }
        if self.status_down(obj, key, &copy).await?
            && let Some(since) = since
        {
            self.observer.status_down(&self.spec.api, since.elapsed());
        }
        Ok(self.requeue(key, RESYNC))
    }

    /// Classifies the provider target and writes the copy where that is allowed (DESIGN.md §4
    /// "conflicts"). A target that was absent is created by an apply that can only create
    /// ([`CREATE_ONLY`]), never by a plain forced apply: an object someone else made since the
    /// read answers Conflict and is classified again, so it is never taken over.
    async fn write_copy(
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
            if creating && let Some(wait) = self.recreate_wait(target) {
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

    /// The known copy ([`Shared::known_ours`]) when it shows there is nothing to write: the store has listed, and the
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
    /// instead of waiting out [`RECREATE_INTERVAL`]).
    fn cache_says_absent(&self, target: &ObjectKey) -> bool {
        let Some(store) = self.watches.store_for(target.namespace.as_deref()) else {
            return false;
        };
        if !store.is_synced() || store.get(target.namespace.as_deref(), &target.name).is_some() {
            return false;
        }
        let created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        recreate_left(&created, target, Instant::now()).is_none()
    }

    /// How long a create of `target` must wait: `None` unless the copy was created less than
    /// [`RECREATE_INTERVAL`] ago (then deleted by someone else). Records this create otherwise.
    fn recreate_wait(&self, target: &ObjectKey) -> Option<Duration> {
        let now = Instant::now();
        let mut created = self.created.lock().unwrap_or_else(|p| p.into_inner());
        // Pruned only when large: a first sync creates many copies within one interval.
        if created.len() > 1024 {
            created.retain(|_, at| now.duration_since(*at) < RECREATE_INTERVAL);
        }
        if let Some(left) = recreate_left(&created, target, now) {
            return Some(left);
        }
        created.insert(target.clone(), now);
        None
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

    async fn read_target(&self, target: &ObjectKey) -> Result<Option<DynamicObject>, SyncError> {
        self.provider
            .reader
            .get_opt(self.res(), target.namespace.as_deref(), &target.name)
            .await
            .map_err(|source| SyncError::ProviderReadFailed {
                object: target.clone(),
                source,
            })
    }

    /// Deletion: the provider copy goes first (if ours and not orphaned), then our finalizer.
    async fn finalize(&self, obj: &DynamicObject, key: &ObjectKey, target: &ObjectKey) -> Result<Action, SyncError> {
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
        lock(&self.tally).forget(key);
        Ok(Action::await_change())
    }

    async fn add_finalizer(&self, obj: &DynamicObject, key: &ObjectKey) -> Result<DynamicObject, SyncError> {
        let mut finalizers = obj.metadata.finalizers.clone().unwrap_or_default();
        if !meta::has_finalizer(obj) {
            finalizers.push(finalizer::SYNCER.to_string());
        }
        // The label says which Connection serves the object (several may serve one API).
        let mut patch = json!({"metadata": {
            "finalizers": finalizers,
            "resourceVersion": obj.metadata.resource_version,
        }});
        meta::mark_connection(&mut patch["metadata"], &self.spec.connection);
        let updated = self
            .consumer
            .patch(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
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

    /// Creates a missing provider namespace (labelled managed, with our cluster UID).
    async fn ensure_namespace(&self, target: &ObjectKey) -> Result<(), SyncError> {
        let Some(ns) = target.namespace.as_deref() else {
            return Ok(());
        };
        if self.namespaces.lock().unwrap_or_else(|p| p.into_inner()).contains(ns) {
            return Ok(());
        }
        let namespaces = namespace_resource();
        let ns_key = ObjectKey::cluster(ns);
        match self.provider.reader.get_opt(&namespaces, None, ns).await {
            // A terminating namespace is not remembered: once it is gone it is created again.
            Ok(Some(found)) if found.metadata.deletion_timestamp.is_some() => return Ok(()),
            Ok(Some(_)) => {}
            // Without read access the apply itself tells whether the namespace exists.
            Err(kbind_cluster::Error::Forbidden { .. }) => return Ok(()),
            Err(source) => {
                return Err(SyncError::ProviderReadFailed { object: ns_key, source });
            }
            Ok(None) => {
                let body: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns,
                        "labels": {label::MANAGED: TRUE},
                        "annotations": {annotation::CONSUMER_CLUSTER_UID: self.spec.consumer_cluster_uid}},
                }))
                .map_err(|e| SyncError::ProviderWriteFailed {
                    step: "create",
                    object: ns_key.clone(),
                    source: kbind_cluster::Error::Decode(e.to_string()),
                })?;
                match self
                    .provider
                    .client
                    .create(&namespaces, None, &body, &PostParams::default())
                    .await
                {
                    Ok(_) | Err(kbind_cluster::Error::AlreadyExists { .. }) => {}
                    Err(source) => {
                        return Err(SyncError::ProviderWriteFailed {
                            step: "create",
                            object: ns_key,
                            source,
                        });
                    }
                }
            }
        }
        self.namespaces
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(ns.to_string());
        Ok(())
    }

    /// Forgets that `target`'s provider namespace exists.
    fn forget_namespace(&self, target: &ObjectKey) {
        if let Some(ns) = &target.namespace {
            self.namespaces.lock().unwrap_or_else(|p| p.into_inner()).remove(ns);
        }
    }

    /// Provider status down, translated; skipped without a consumer status subresource.
    /// Returns whether the consumer status was written.
    async fn status_down(&self, obj: &DynamicObject, key: &ObjectKey, copy: &DynamicObject) -> Result<bool, SyncError> {
        if !self.spec.status_subresource {
            return Ok(false);
        }
        let Some(status) = super::status::translated_status(copy) else {
            return Ok(false);
        };
        // The store may not have caught up with our own last write of this very status.
        if obj.data.get("status") == Some(&status) || self.pending.status_in_flight(key, &status) {
            return Ok(false);
        }
        // The whole status in one JSON patch, guarded by the object's UID and not by its
        // resourceVersion: the konnector is the status's only writer and runs one reconcile per
        // object at a time, so a replace guarded by a version the store may not have caught up
        // with (our own finalizer patch, a user's spec change) only failed and cost another
        // round trip and another pass.
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/status", "value": &status},
        ]))
        .map_err(|e| SyncError::ConsumerWriteFailed {
            step: STATUS_STEP,
            object: key.clone(),
            source: kbind_cluster::Error::Decode(e.to_string()),
        })?;
        match self
            .consumer
            .patch_status(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &Patch::Json(patch),
                &PatchParams::default(),
            )
            .await
        {
            Ok(written) => {
                self.pending
                    .own_status(key.clone(), written.metadata.resource_version, status);
                Ok(true)
            }
            // The object moved on; its own change event brings a fresh reconcile.
            Err(kbind_cluster::Error::Conflict { .. }) => Ok(false),
            Err(source) => Err(SyncError::ConsumerWriteFailed {
                step: STATUS_STEP,
                object: key.clone(),
                source,
            }),
        }
    }

    /// Conflict signals: the annotation, a Warning Event and a status condition (the last two
    /// once per new reason), and the report.
    async fn signal_conflict(
        &self,
        obj: &DynamicObject,
        key: &ObjectKey,
        target: &ObjectKey,
        why: &'static str,
    ) -> Result<(), SyncError> {
        {
            let mut tally = lock(&self.tally);
            tally.conflicts.insert(key.clone(), why.to_string());
            tally.synced.remove(key);
        }
        if meta::conflict_of(obj) == Some(why) {
            return Ok(());
        }
        self.set_conflict_annotation(key, Some(why)).await?;
        let note = match why {
            reason::FOREIGN_OBJECT_EXISTS => {
                format!("provider object {target} exists without kbind markers; conflictPolicy Fail leaves it alone")
            }
            _ => format!("provider object {target} belongs to another consumer object or cluster; left alone"),
        };
        if let Err(e) = self
            .recorder
            .publish(self.res(), obj, EventType::Warning, why, "Sync", &note)
            .await
        {
            tracing::debug!(object = %key, error = %e, "could not record the conflict event");
        }
        self.conflict_condition(obj, key, why, &note).await;
        Ok(())
    }

    async fn clear_conflict(&self, obj: &DynamicObject, key: &ObjectKey) -> Result<(), SyncError> {
        lock(&self.tally).conflicts.remove(key);
        if meta::conflict_of(obj).is_some() {
            self.set_conflict_annotation(key, None).await?;
        }
        Ok(())
    }

    async fn set_conflict_annotation(&self, key: &ObjectKey, why: Option<&str>) -> Result<(), SyncError> {
        let patch = json!({"metadata": {"annotations": {annotation::CONFLICT: why}}});
        self.consumer
            .patch(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
            .map(|_| ())
            .map_err(|source| SyncError::ConsumerWriteFailed {
                step: "annotate the conflict on",
                object: key.clone(),
                source,
            })
    }

    /// Best effort: a `Synced=False` condition in `status.conditions` (a schema without one
    /// prunes it; no status subresource means no status writes at all).
    async fn conflict_condition(&self, obj: &DynamicObject, key: &ObjectKey, why: &str, note: &str) {
        if !self.spec.status_subresource {
            return;
        }
        let mut conditions: Vec<Value> = obj
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter(|c| c.get("type").and_then(Value::as_str) != Some(SYNCED_CONDITION))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        conditions.push(json!({
            "type": SYNCED_CONDITION, "status": "False", "reason": why, "message": note,
            "lastTransitionTime": kbind_cluster::clock::format_time(self.clock.now()),
            "observedGeneration": obj.metadata.generation,
        }));
        let patch = json!({"status": {"conditions": conditions}});
        if let Err(e) = self
            .consumer
            .patch_status(
                self.res(),
                key.namespace.as_deref(),
                &key.name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
        {
            tracing::debug!(object = %key, error = %e, "could not write the conflict condition");
        }
    }
}

/// Removes our finalizer from a consumer object (a stale resourceVersion fails and retries).
pub(crate) async fn release_finalizer(
    consumer: &dyn ClusterClient,
    res: &ApiResource,
    obj: &DynamicObject,
    key: &ObjectKey,
) -> Result<(), SyncError> {
    let finalizers: Vec<String> = obj
        .metadata
        .finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != finalizer::SYNCER)
        .cloned()
        .collect();
    // The Connection label goes with the finalizer: nothing serves the object any more.
    let mut patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": obj.metadata.resource_version}});
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

/// The core Namespace resource.
fn namespace_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn widget(ns: &str, name: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}))
        .unwrap()
    }

    #[tokio::test]
    async fn the_consumer_store_keeps_lean_objects() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let mut obj = widget("a", "w", "1");
        obj.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:size": {}}}))),
            ..Default::default()
        }]);
        obj.metadata.annotations = Some(
            [
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    "{}".to_string(),
                ),
                ("note".to_string(), "keep".to_string()),
            ]
            .into(),
        );
        let writer = Writer::new(widgets());
        let store = writer.as_reader();
        let passed: Vec<_> = into_store(writer, futures::stream::iter([Ok(Event::Apply(obj))]))
            .collect()
            .await;
        assert_eq!(passed.len(), 1, "the event goes on to the controller");
        let kept = store
            .get(&ObjectRef::new_with("w", widgets()).within("a"))
            .expect("the object is in the store");
        assert!(
            kept.metadata.managed_fields.is_none(),
            "{:?}",
            kept.metadata.managed_fields
        );
        assert_eq!(
            kept.metadata.annotations,
            Some([("note".to_string(), "keep".to_string())].into()),
            "the last-applied copy is dropped, the rest kept"
        );
    }

    #[test]
    fn provider_objects_outside_a_binding_namespace_trigger_nothing() {
        let w = widget("a", "w", "1");
        let r = consumer_ref(&crate::mapper::Identity, &widgets(), Some("a"), &w).unwrap();
        assert_eq!((r.name.as_str(), r.namespace.as_deref()), ("w", Some("a")));
        assert!(consumer_ref(&crate::mapper::Identity, &widgets(), Some("b"), &w).is_none());
        assert!(consumer_ref(&crate::mapper::Identity, &widgets(), None, &w).is_some());
    }
}
