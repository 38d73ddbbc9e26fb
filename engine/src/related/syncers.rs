//! The set of related-resource syncers of the engine, one per (binding, kind, direction) with
//! rules, and the one-shot sweeps that collect the copies of a kind and direction without
//! rules. The binding reconciler calls [`RelatedSyncers::ensure`] on every pass (it returns at
//! once) and shows [`RelatedSyncers::report`]; a change of what the status shows calls the hook
//! of [`RelatedSyncers::on_change`], at most once a second per binding.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kbind_api::{Binding, ClusterBinding, ConflictPolicy, RelatedKind, RelatedResource, RelatedResourceDirection};
use kube::runtime::reflector::{ObjectRef, Store};
use parking_lot::Mutex;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::copy::Owner;
use super::namespaces::InstanceNamespaces;
use super::references::ReferenceIndexes;
use super::syncer::{self, ChangeHook, Environment, RelatedSyncerSpec, SharedRelatedFindings, Syncer};
use super::{DIRECTIONS, RelatedError, RelatedReport, Sides, delete_copy, key_of, kinds_of, list_copies, sides_of};
use crate::context::Context;
use crate::provider::{EngagedProvider, ProviderCache};
use crate::sync::{BindingKind, BindingRef};

/// The least time between two change notifications of one binding while copies churn.
const NOTIFY_INTERVAL: Duration = Duration::from_secs(1);

/// What one binding asks of related resources.
#[derive(Debug, Clone, PartialEq)]
pub struct RelatedSpec {
    /// The binding (its UID marks the copies).
    pub binding: BindingRef,
    /// `spec.apis` by name (`<plural>.<group>`): a ClusterBinding copies in the namespaces
    /// holding instances of these.
    pub apis: Vec<String>,
    /// `spec.relatedResources`.
    pub rules: Vec<RelatedResource>,
    /// `spec.conflictPolicy`.
    pub policy: ConflictPolicy,
    /// The consumer cluster's UID (`status.localClusterUID` of the Connection).
    pub consumer_cluster_uid: String,
}

/// A kind and a direction, as a map key.
type Lane = (RelatedKind, &'static str);

fn lane(kind: &RelatedKind, direction: RelatedResourceDirection) -> Lane {
    let direction = match direction {
        RelatedResourceDirection::FromConsumer => "FromConsumer",
        RelatedResourceDirection::FromProvider => "FromProvider",
    };
    (kind.clone(), direction)
}

/// One running syncer; dropping it stops the task.
struct Running {
    spec: RelatedSyncerSpec,
    provider: Arc<EngagedProvider>,
    tally: SharedRelatedFindings,
    poke: Arc<Notify>,
    task: JoinHandle<()>,
}

impl Drop for Running {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What a sweep found out.
#[derive(Debug, Default)]
struct SweepState {
    /// A list found none of the binding's copies left (or may not see any).
    done: bool,
    removed: usize,
}

/// One sweep; dropping it stops the task.
struct Sweep {
    provider: Arc<EngagedProvider>,
    state: Arc<Mutex<SweepState>>,
    task: JoinHandle<()>,
}

impl Drop for Sweep {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Whether a binding still exists with its UID and is not being deleted, from the binding
/// reconciler's stores: a syncer of a binding on its way out stops before it writes again, so it
/// never re-creates a copy the unbind removes.
#[derive(Clone)]
struct Liveness {
    cluster_bindings: Store<ClusterBinding>,
    bindings: Store<Binding>,
}

impl Liveness {
    fn live(&self, b: &BindingRef) -> bool {
        let meta = match (&b.kind, &b.namespace) {
            (BindingKind::Namespaced, Some(ns)) => self
                .bindings
                .get(&ObjectRef::new(&b.name).within(ns))
                .map(|o| o.metadata.clone()),
            _ => self
                .cluster_bindings
                .get(&ObjectRef::new(&b.name))
                .map(|o| o.metadata.clone()),
        };
        meta.is_some_and(|m| m.uid.as_deref() == Some(b.uid.as_str()) && m.deletion_timestamp.is_none())
    }
}

/// The hook and the coalescing of change notifications.
#[derive(Default)]
struct Notifier {
    hook: Option<ChangeHook>,
    last: BTreeMap<BindingRef, Instant>,
    scheduled: BTreeSet<BindingRef>,
}

type SharedNotifier = Arc<Mutex<Notifier>>;

fn notify(notifier: &SharedNotifier, binding: &BindingRef) {
    let mut n = notifier.lock();
    let Some(hook) = n.hook.clone() else { return };
    if n.scheduled.contains(binding) {
        return;
    }
    let now = Instant::now();
    match n.last.get(binding).map(|at| *at + NOTIFY_INTERVAL) {
        Some(next) if next > now => {
            // One notification per interval: the later changes ride on this one.
            n.scheduled.insert(binding.clone());
            let (notifier, binding) = (notifier.clone(), binding.clone());
            tokio::spawn(async move {
                tokio::time::sleep_until(next).await;
                {
                    let mut n = notifier.lock();
                    n.scheduled.remove(&binding);
                    n.last.insert(binding.clone(), Instant::now());
                }
                hook(&binding);
            });
        }
        _ => {
            n.last.insert(binding.clone(), now);
            drop(n);
            hook(binding);
        }
    }
}

struct Inner {
    env: Arc<Environment>,
    notifier: SharedNotifier,
    running: Mutex<BTreeMap<(BindingRef, Lane), Running>>,
    sweeps: Mutex<BTreeMap<(BindingRef, Lane), Sweep>>,
    /// Bindings ensured since the start: the first ensure also sweeps the lanes without rules
    /// (copies of rules removed while no konnector ran).
    seen: Mutex<BTreeSet<BindingRef>>,
}

/// The engine's related-resource syncers; clones share them. Dropping the last clone stops
/// every syncer, sweep and watch (nothing is deleted anywhere).
#[derive(Clone)]
pub struct RelatedSyncers {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for RelatedSyncers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let running: Vec<(BindingRef, Lane)> = self.inner.running.lock().keys().cloned().collect();
        f.debug_struct("RelatedSyncers").field("running", &running).finish()
    }
}

impl RelatedSyncers {
    /// No syncers yet; the binding stores tell whether a binding is still there (a syncer of a
    /// deleted binding stops by itself).
    pub fn new(ctx: Context, cluster_bindings: Store<ClusterBinding>, bindings: Store<Binding>) -> Self {
        let liveness = Liveness {
            cluster_bindings,
            bindings,
        };
        let notifier = SharedNotifier::default();
        let changed = {
            let notifier = notifier.clone();
            Arc::new(move |b: &BindingRef| notify(&notifier, b))
        };
        let env = Environment {
            consumer_cache: Arc::new(
                ProviderCache::new(ctx.consumer.clone(), &ctx.randomness).with_watch_timeout(ctx.config.watch_timeout),
            ),
            instances: Arc::new(InstanceNamespaces::new(ctx.consumer.clone(), ctx.watcher_config())),
            references: Arc::new(ReferenceIndexes::new(ctx.consumer.clone(), ctx.watcher_config())),
            live: Arc::new(move |b: &BindingRef| liveness.live(b)),
            changed,
            ctx,
        };
        Self {
            inner: Arc::new(Inner {
                env: Arc::new(env),
                notifier,
                running: Mutex::new(BTreeMap::new()),
                sweeps: Mutex::new(BTreeMap::new()),
                seen: Mutex::new(BTreeSet::new()),
            }),
        }
    }

    /// Calls `hook` with a binding whenever what its status shows of related resources (copied
    /// count, conflicts, denials) changed; at most once a second per binding while copies churn.
    pub fn on_change(&self, hook: ChangeHook) {
        self.inner.notifier.lock().hook = Some(hook);
    }

    /// Makes the syncers of `spec` run on `provider`: starts the missing ones, restarts those
    /// whose spec or engagement changed, stops those of rules that went (and sweeps their
    /// copies). Returns at once; the work happens in the syncers' tasks.
    pub fn ensure(&self, spec: RelatedSpec, provider: Arc<EngagedProvider>) {
        let binding = spec.binding.clone();
        self.forget_others(&binding);
        let first = self.inner.seen.lock().insert(binding.clone());
        let owner = Owner {
            binding_uid: binding.uid.clone(),
            consumer_cluster_uid: spec.consumer_cluster_uid.clone(),
        };
        // The kinds of the rules, the built-in ones, and those this binding ran or swept before
        // (a removed rule's copies are collected).
        let mut all_kinds: BTreeSet<RelatedKind> = kinds_of(&spec.rules).into_iter().collect();
        all_kinds.extend(
            self.inner
                .running
                .lock()
                .keys()
                .chain(self.inner.sweeps.lock().keys())
                .filter(|(b, _)| *b == binding)
                .map(|(_, (kind, _))| kind.clone()),
        );
        for kind in all_kinds {
            for direction in DIRECTIONS {
                let key = (binding.clone(), lane(&kind, direction));
                let rules: Vec<&RelatedResource> = spec
                    .rules
                    .iter()
                    .filter(|r| r.kind() == kind && r.direction == direction)
                    .collect();
                let selectors: Vec<_> = rules.iter().map(|r| r.selector.clone()).collect();
                let references: BTreeSet<String> = rules
                    .iter()
                    .flat_map(|r| r.selector.references.iter().map(|p| p.path.clone()))
                    .collect();
                if selectors.is_empty() {
                    let stopped = self.inner.running.lock().remove(&key).is_some();
                    self.ensure_sweep(key, &owner, kind.clone(), direction, &provider, first || stopped);
                    continue;
                }
                self.inner.sweeps.lock().remove(&key);
                let syncer_spec = RelatedSyncerSpec {
                    binding: binding.clone(),
                    kind: kind.clone(),
                    direction,
                    selectors,
                    adopt: spec.policy == ConflictPolicy::Adopt,
                    owner: owner.clone(),
                    apis: if binding.kind == BindingKind::Cluster {
                        spec.apis.clone()
                    } else {
                        Vec::new()
                    },
                    reference_apis: if references.is_empty() {
                        Vec::new()
                    } else {
                        spec.apis.clone()
                    },
                    references: references.into_iter().collect(),
                    version: rules.iter().find_map(|r| r.version.clone()),
                    sync_status: rules.iter().any(|r| r.sync_status),
                };
                self.ensure_syncer(key, syncer_spec, &provider);
            }
        }
    }

    fn ensure_syncer(&self, key: (BindingRef, Lane), spec: RelatedSyncerSpec, provider: &Arc<EngagedProvider>) {
        let mut running = self.inner.running.lock();
        if let Some(current) = running.get(&key)
            && current.spec == spec
            && Arc::ptr_eq(&current.provider, provider)
            && !provider.is_disengaged()
            && !current.task.is_finished()
        {
            // An API without a consumer CRD before may have one now.
            current.poke.notify_one();
            return;
        }
        let tally = SharedRelatedFindings::new(Mutex::new(
            running
                .get(&key)
                .map(|previous| previous.tally.lock().carried_over())
                .unwrap_or_default(),
        ));
        let poke = Arc::new(Notify::new());
        let task = tokio::spawn(
            Syncer::new(
                spec.clone(),
                self.inner.env.clone(),
                provider.clone(),
                tally.clone(),
                poke.clone(),
            )
            .run(),
        );
        // Replacing drops (and so stops) the previous syncer of this key.
        running.insert(
            key,
            Running {
                spec,
                provider: provider.clone(),
                tally,
                poke,
                task,
            },
        );
    }

    /// Starts a sweep of a lane without rules when `needed`, or again when one ended unfinished
    /// (its provider went).
    fn ensure_sweep(
        &self,
        key: (BindingRef, Lane),
        owner: &Owner,
        kind: RelatedKind,
        direction: RelatedResourceDirection,
        provider: &Arc<EngagedProvider>,
        needed: bool,
    ) {
        let mut sweeps = self.inner.sweeps.lock();
        let restart = sweeps.get(&key).is_some_and(|s| {
            let done = s.state.lock().done;
            !done && (s.task.is_finished() || !Arc::ptr_eq(&s.provider, provider))
        });
        if !needed && !restart {
            return;
        }
        let state = Arc::new(Mutex::new(SweepState::default()));
        let task = tokio::spawn(sweep(
            self.inner.env.clone(),
            provider.clone(),
            key.0.clone(),
            owner.clone(),
            kind,
            direction,
            state.clone(),
        ));
        sweeps.insert(
            key,
            Sweep {
                provider: provider.clone(),
                state,
                task,
            },
        );
    }

    /// Stops what runs for another binding of the same name (a re-created one) or for bindings
    /// that are gone.
    fn forget_others(&self, binding: &BindingRef) {
        let live = &self.inner.env.live;
        let stale = |b: &BindingRef| {
            (b.kind == binding.kind
                && b.namespace == binding.namespace
                && b.name == binding.name
                && b.uid != binding.uid)
                || !live(b)
        };
        self.inner.running.lock().retain(|(b, _), _| !stale(b));
        self.inner.sweeps.lock().retain(|(b, _), _| !stale(b));
        self.inner.seen.lock().retain(|b| !stale(b));
        self.inner.notifier.lock().last.retain(|b, _| !stale(b));
    }

    /// What the syncers and sweeps of `binding` know now: copies in place, conflicts, refusals,
    /// removed copies, and the copies of this binding seen on both sides (a syncer before its
    /// first converge and an unfinished sweep count one each: unknown).
    pub fn report(&self, binding: &BindingRef) -> RelatedReport {
        let mut report = RelatedReport::default();
        let mut denied = BTreeSet::new();
        for ((b, _), running) in self.inner.running.lock().iter() {
            if b == binding {
                running.tally.lock().add_to(&mut report, &mut denied);
            }
        }
        for ((b, _), sweep) in self.inner.sweeps.lock().iter() {
            if b == binding {
                let state = sweep.state.lock();
                report.removed += state.removed;
                report.owned += usize::from(!state.done);
            }
        }
        report.conflicts.sort();
        report.denied = denied.into_iter().collect();
        report
    }

    /// Stops every syncer and sweep of `binding` (nothing is deleted anywhere).
    pub fn stop(&self, binding: &BindingRef) {
        self.inner.running.lock().retain(|(b, _), _| b != binding);
        self.inner.sweeps.lock().retain(|(b, _), _| b != binding);
        self.inner.seen.lock().remove(binding);
        let mut n = self.inner.notifier.lock();
        n.last.remove(binding);
    }
}

/// Collects the copies of one lane without rules: lists the binding's copies on the target side
/// and deletes them (no rule selects them any more), until a list finds none. A list the
/// credentials may not make finds none (a binding without rules must not need the verb).
async fn sweep(
    env: Arc<Environment>,
    provider: Arc<EngagedProvider>,
    binding: BindingRef,
    owner: Owner,
    kind: RelatedKind,
    direction: RelatedResourceDirection,
    state: Arc<Mutex<SweepState>>,
) {
    let (_, side) = sides_of(direction);
    let sides = Sides {
        consumer: env.ctx.consumer.as_ref(),
        provider: Some(provider.as_ref()),
    };
    let (Some(reader), Some(writer)) = (sides.reader(side), sides.writer(side)) else {
        return;
    };
    let res = loop {
        if !(env.live)(&binding) || provider.is_disengaged() {
            return;
        }
        match super::kinds::resolve_on(&kind, reader).await {
            Ok(Some(res)) => break res,
            // Not served there: no copy of it can exist.
            Ok(None) => {
                state.lock().done = true;
                return;
            }
            Err(why) => {
                tracing::warn!(binding = %binding.name, reason = %why, "related copies of removed rules not collected; retrying");
                tokio::time::sleep(env.ctx.jitter(&format!("related-sweep/{}", binding.uid), syncer::RETRY)).await;
            }
        }
    };
    loop {
        if !(env.live)(&binding) || provider.is_disengaged() {
            return;
        }
        let copies = match list_copies(reader, &res, side, &binding, &BTreeSet::new(), &owner).await {
            Ok(copies) => copies,
            Err(RelatedError::ListFailed { source, .. }) if source.is_forbidden() => Vec::new(),
            Err(e) => {
                tracing::warn!(binding = %binding.name, error = %e, "related copies of removed rules not collected; retrying");
                tokio::time::sleep(env.ctx.jitter(&format!("related-sweep/{}", binding.uid), syncer::RETRY)).await;
                continue;
            }
        };
        if copies.is_empty() {
            state.lock().done = true;
            return;
        }
        for copy in copies {
            if copy.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let key = key_of(&copy);
            match delete_copy(writer, &res, side, &key).await {
                Ok(true) => {
                    tracing::info!(binding = %binding.name, object = %super::describe(&res, &key), %side, "removed a related copy nothing selects any more");
                    state.lock().removed += 1;
                }
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(binding = %binding.name, error = %e, "related copy of a removed rule not collected; retrying");
                }
            }
        }
        // Look again: terminating copies go in their own time, and a list must find none.
        tokio::time::sleep(env.ctx.jitter(&format!("related-sweep/{}", binding.uid), syncer::RETRY)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    fn binding(name: &str) -> BindingRef {
        BindingRef {
            kind: BindingKind::Cluster,
            namespace: None,
            name: name.into(),
            uid: format!("{name}-uid"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn notifications_come_at_most_once_a_second_per_binding() {
        let notifier = SharedNotifier::default();
        let calls = Arc::new(Mutex::new(Vec::<String>::new()));
        let seen = calls.clone();
        notifier.lock().hook = Some(Arc::new(move |b: &BindingRef| seen.lock().push(b.name.clone())));
        let count = |name: &str| calls.lock().iter().filter(|n| *n == name).count();

        for _ in 0..5 {
            notify(&notifier, &binding("a"));
        }
        notify(&notifier, &binding("b"));
        assert_eq!(
            (count("a"), count("b")),
            (1, 1),
            "the first change of each goes at once"
        );

        tokio::time::sleep(Duration::from_millis(500)).await;
        notify(&notifier, &binding("a"));
        assert_eq!(count("a"), 1, "later changes within the second wait");
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert_eq!(count("a"), 2, "and ride on one notification when the second is over");
        tokio::time::sleep(Duration::from_secs(5)).await;
        assert_eq!(count("a"), 2, "nothing more without a change");
    }

    #[test]
    fn without_a_hook_nothing_is_queued() {
        let notifier = SharedNotifier::default();
        notify(&notifier, &binding("a"));
        assert!(notifier.lock().last.is_empty());
        let calls = Arc::new(AtomicUsize::new(0));
        let seen = calls.clone();
        notifier.lock().hook = Some(Arc::new(move |_: &BindingRef| {
            seen.fetch_add(1, Ordering::SeqCst);
        }));
        notify(&notifier, &binding("a"));
        assert_eq!(calls.load(Ordering::SeqCst), 1);
    }
}
