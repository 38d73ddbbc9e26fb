//! One related-resources syncer: a (binding, kind, direction) over watch caches on both sides.
//! An event of a source or a copy converges just that object; a relist, a change of the
//! namespaces in use or the backstop converges the whole set from the stores. Writes are the
//! ones of a pass ([`super::copy_to`], [`super::delete_copy`]); the stores only decide whether
//! a write is needed, so a converged binding asks the servers nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use kbind_api::{RelatedKind, RelatedResourceDirection, RelatedResourceSelector};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::sync::{Notify, watch};
use tokio::time::Instant;

use super::copy::{self, Owner, Verdict};
use super::kinds::{self, Unresolved};
use super::namespaces::{ApiNamespaces, InUse, InstanceNamespaces};
use super::references::{ApiReferences, ReferenceIndexes, Referenced};
use super::watches::{SideEvent, SideStores};
use super::{
    Outcome, RelatedReport, Side, Sides, copy_to, delete_copy, describe, is_source, key_of, sides_of, still_selected,
};
use crate::context::Context;
use crate::provider::{EngagedProvider, ProviderCache};
use crate::sync::{BindingKind, BindingRef};

/// Retry of one object after a failure, a missing namespace or a target that changed under us.
pub(crate) const RETRY: Duration = Duration::from_secs(10);
/// Retry of one object after the provider refused it.
const DENIED_RETRY: Duration = Duration::from_secs(30);
/// Events folded into one converge step before the work starts.
const BATCH: usize = 256;

type Key = (String, String);

/// Everything one related syncer is about; a change restarts it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RelatedSyncerSpec {
    /// The binding.
    pub binding: BindingRef,
    /// The kind, as group and resource.
    pub kind: RelatedKind,
    /// The version the rules ask for (the source side's preferred one when `None`).
    pub version: Option<String>,
    /// Up or down.
    pub direction: RelatedResourceDirection,
    /// The rules' selectors of this kind and direction (at least one).
    pub selectors: Vec<RelatedResourceSelector>,
    /// `conflictPolicy: Adopt` (provider targets only).
    pub adopt: bool,
    /// Who the copies belong to.
    pub owner: Owner,
    /// A ClusterBinding's bound APIs, whose instances put namespaces in use.
    pub apis: Vec<String>,
    /// The bound APIs whose consumer objects hold references (every API of the binding when
    /// some rule has `references`, none otherwise).
    pub reference_apis: Vec<String>,
    /// The reference paths of the rules, sorted and unique.
    pub references: Vec<String>,
    /// Some rule asks for the copy's status to come back onto the original.
    pub sync_status: bool,
}

/// What a syncer's latest state says, for the binding's status.
#[derive(Debug, Clone, Default)]
pub(crate) struct RelatedFindings {
    /// Whether a first full converge ran (until then nothing is known).
    pub converged: bool,
    copied: BTreeSet<Key>,
    conflicts: BTreeMap<Key, &'static str>,
    denied: BTreeMap<Key, String>,
    /// Refused lists (per-namespace watches the credentials may not open).
    refused: BTreeSet<String>,
    /// Consumer requests the konnector's own RBAC refused (lists, status writes).
    consumer_refused: BTreeSet<String>,
    /// Why the kind cannot be synced now (not served, cluster-scoped).
    unserved: Option<String>,
    /// How the binding names the kind in conflicts (`resource` or `resource.group`).
    pub(crate) name: String,
    /// Lists or watches that keep failing, in words.
    failing: BTreeSet<String>,
    /// Copies of this binding in the target stores.
    owned: BTreeSet<Key>,
    removed: usize,
}

impl RelatedFindings {
    /// What a restarted syncer starts from: the last one's findings, which stand until its
    /// first converge replaces them (so a rule edit or a re-engagement does not blank the
    /// binding's conflicts for a moment), as not converged yet.
    pub(crate) fn carried_over(&self) -> Self {
        Self {
            converged: false,
            ..self.clone()
        }
    }

    fn forget(&mut self, key: &Key) {
        self.copied.remove(key);
        self.conflicts.remove(key);
        self.denied.remove(key);
    }

    /// What the binding's status shows of it (a change of this wakes the binding).
    fn visible(&self) -> Visible {
        (
            self.copied.len(),
            self.conflicts.iter().map(|(k, r)| (k.clone(), *r)).collect(),
            self.denied_set(),
            self.failing.clone(),
            (self.unserved.clone(), self.consumer_refused.clone()),
        )
    }

    fn denied_set(&self) -> BTreeSet<String> {
        self.denied.values().chain(&self.refused).cloned().collect()
    }

    /// Adds this syncer's part to `report`.
    pub(crate) fn add_to(&self, report: &mut RelatedReport, denied: &mut BTreeSet<String>) {
        report.copied += self.copied.len();
        report.conflicts.extend(
            self.conflicts
                .iter()
                .map(|(k, r)| (format!("{} {}/{}", self.name, k.0, k.1), r.to_string())),
        );
        report.unserved.extend(self.unserved.iter().cloned());
        report.consumer_denied.extend(self.consumer_refused.iter().cloned());
        denied.extend(self.denied_set());
        report.removed += self.removed;
        report.failing.extend(self.failing.iter().cloned());
        // Until the first converge it is unknown whether copies exist: count one.
        report.owned += if self.converged { self.owned.len() } else { 1 };
    }
}

/// What of a tally the binding's status shows: copies, conflicts, refusals, failing watches.
type Visible = (
    usize,
    Vec<(Key, &'static str)>,
    BTreeSet<String>,
    BTreeSet<String>,
    (Option<String>, BTreeSet<String>),
);

/// The tally a syncer and the registry share.
pub(crate) type SharedRelatedFindings = Arc<Mutex<RelatedFindings>>;

/// Called with a binding whose related report changed in what its status shows.
pub type ChangeHook = Arc<dyn Fn(&BindingRef) + Send + Sync>;

/// What a syncer needs from the registry around it.
pub(crate) struct Environment {
    pub ctx: Context,
    pub consumer_cache: Arc<ProviderCache>,
    pub instances: Arc<InstanceNamespaces>,
    pub references: Arc<ReferenceIndexes>,
    /// Whether the binding still exists with this UID and is not being deleted.
    pub live: Arc<dyn Fn(&BindingRef) -> bool + Send + Sync>,
    /// Called when what the binding's status shows of this syncer changed.
    pub changed: ChangeHook,
}

/// Where a syncer's namespaces come from.
enum Scope {
    /// A Binding: its own namespace.
    Own(String),
    /// A ClusterBinding: every namespace holding instances of its APIs.
    InUse {
        /// APIs whose index runs.
        indexes: BTreeMap<String, Arc<ApiNamespaces>>,
        receivers: Vec<watch::Receiver<InUse>>,
        /// APIs without an index yet, asked again on a poke or the backstop: `false` when the
        /// consumer has no CRD of it (no instances), `true` when reading the CRD failed (the
        /// namespaces are unknown, so nothing is collected).
        unresolved: BTreeMap<String, bool>,
    },
}

/// The namespaces of a syncer now and the objects the bound objects reference, and whether
/// both are complete.
struct Namespaces {
    set: BTreeSet<String>,
    referenced: BTreeSet<Key>,
    complete: bool,
}

impl Scope {
    fn current(&self, own_namespace: &str) -> Namespaces {
        let (set, complete): (BTreeSet<String>, bool) = match self {
            Scope::Own(ns) => (BTreeSet::from([ns.clone()]), true),
            Scope::InUse {
                indexes, unresolved, ..
            } => {
                let states: Vec<InUse> = indexes.values().map(|i| i.current()).collect();
                (
                    states.iter().flat_map(|s| s.namespaces.iter().cloned()).collect(),
                    states.iter().all(|s| s.synced) && !unresolved.values().any(|failed| *failed),
                )
            }
        };
        // The konnector's own namespace holds provider credentials: never a source or a target.
        let set = set.into_iter().filter(|ns| ns != own_namespace).collect();
        Namespaces {
            set,
            referenced: BTreeSet::new(),
            complete,
        }
    }

    /// Starts the indexes of APIs not resolved yet; whether one started.
    async fn resolve(&mut self, instances: &InstanceNamespaces) -> bool {
        let Scope::InUse {
            indexes,
            receivers,
            unresolved,
        } = self
        else {
            return false;
        };
        let mut started = false;
        for (api, _) in std::mem::take(unresolved) {
            match instances.index(&api).await {
                Ok(Some(index)) => {
                    receivers.push(index.subscribe());
                    indexes.insert(api, index);
                    started = true;
                }
                Ok(None) => {
                    unresolved.insert(api, false);
                }
                Err(e) => {
                    tracing::warn!(api = %api, error = %e, "namespaces in use not known yet; asking again later");
                    unresolved.insert(api, true);
                }
            }
        }
        started
    }

    /// Resolves when the namespaces of some API changed.
    async fn changed(&mut self) {
        let Scope::InUse { receivers, .. } = self else {
            return std::future::pending().await;
        };
        if receivers.is_empty() {
            return std::future::pending().await;
        }
        let changes = receivers.iter_mut().map(|rx| Box::pin(rx.changed()));
        let (result, _, _) = futures::future::select_all(changes).await;
        if result.is_err() {
            // The index went (it cannot while held, but never spin on a closed channel).
            std::future::pending::<()>().await;
        }
    }
}

/// The reference indexes a syncer follows: one per bound API over the rules' paths.
struct Refs {
    paths: Vec<String>,
    indexes: BTreeMap<String, Arc<ApiReferences>>,
    receivers: Vec<watch::Receiver<Referenced>>,
    /// APIs without an index yet: `false` when the consumer has no CRD of it, `true` when
    /// reading it failed (the references are unknown, so nothing is collected).
    unresolved: BTreeMap<String, bool>,
}

impl Refs {
    fn new(apis: &[String], paths: &[String]) -> Self {
        Self {
            paths: paths.to_vec(),
            indexes: BTreeMap::new(),
            receivers: Vec::new(),
            unresolved: if paths.is_empty() {
                BTreeMap::new()
            } else {
                apis.iter().map(|api| (api.clone(), true)).collect()
            },
        }
    }

    /// Every referenced object now, and whether every index has listed.
    fn current(&self) -> (BTreeSet<Key>, bool) {
        let states: Vec<Referenced> = self.indexes.values().map(|i| i.current()).collect();
        (
            states.iter().flat_map(|s| s.keys.iter().cloned()).collect(),
            states.iter().all(|s| s.synced) && !self.unresolved.values().any(|failed| *failed),
        )
    }

    /// Starts the indexes of APIs not resolved yet; whether one started.
    async fn resolve(&mut self, indexes: &ReferenceIndexes) -> bool {
        let mut started = false;
        for (api, _) in std::mem::take(&mut self.unresolved) {
            match indexes.index(&api, &self.paths).await {
                Ok(Some(index)) => {
                    self.receivers.push(index.subscribe());
                    self.indexes.insert(api, index);
                    started = true;
                }
                Ok(None) => {
                    self.unresolved.insert(api, false);
                }
                Err(e) => {
                    tracing::warn!(api = %api, error = %e, "references not known yet; asking again later");
                    self.unresolved.insert(api, true);
                }
            }
        }
        started
    }

    /// Resolves when what some index references changed.
    async fn changed(&mut self) {
        if self.receivers.is_empty() {
            return std::future::pending().await;
        }
        let changes = self.receivers.iter_mut().map(|rx| Box::pin(rx.changed()));
        let (result, _, _) = futures::future::select_all(changes).await;
        if result.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// What the next converge step covers.
#[derive(Debug, Default)]
struct Todo {
    everything: bool,
    keys: BTreeSet<Key>,
}

impl Todo {
    fn add(&mut self, event: SideEvent) -> bool {
        match event {
            SideEvent::Object(obj) => {
                self.keys.insert(key_of(&obj));
            }
            SideEvent::Everything => self.everything = true,
            // Nothing to look at: the pass after it records how the stores follow their sides.
            SideEvent::Health => {}
            SideEvent::Closed => return false,
        }
        true
    }
}

/// One running syncer's state.
pub(crate) struct Syncer {
    spec: RelatedSyncerSpec,
    env: Arc<Environment>,
    provider: Arc<EngagedProvider>,
    tally: SharedRelatedFindings,
    /// Poked by every `ensure` of the binding: look for APIs that were unresolved.
    poke: Arc<Notify>,
    res: ApiResource,
    /// Objects to look at again, and when.
    retries: Mutex<BTreeMap<Key, Instant>>,
    /// Statuses written onto originals that the source store may not show yet (echo
    /// suppression: the same status is not written twice while the store catches up).
    statuses: Mutex<BTreeMap<Key, Value>>,
    /// Whether the kind serves `status` on the side of the originals and of the copies.
    status_served: (bool, bool),
}

impl Syncer {
    pub(crate) fn new(
        spec: RelatedSyncerSpec,
        env: Arc<Environment>,
        provider: Arc<EngagedProvider>,
        tally: SharedRelatedFindings,
        poke: Arc<Notify>,
    ) -> Self {
        tally.lock().name = spec.kind.to_string();
        // Until [`Syncer::resolve`] knows the version: named for jitter keys and messages only.
        let res = kinds::builtin(&spec.kind, None).unwrap_or_else(|| ApiResource {
            group: spec.kind.group.clone(),
            version: String::new(),
            api_version: String::new(),
            kind: String::new(),
            plural: spec.kind.resource.clone(),
        });
        Self {
            res,
            spec,
            env,
            provider,
            tally,
            poke,
            retries: Mutex::new(BTreeMap::new()),
            statuses: Mutex::new(BTreeMap::new()),
            status_served: (false, false),
        }
    }

    /// Resolves the kind until both sides serve it (reporting why not meanwhile); `false` when
    /// the syncer should stop (the binding went, the provider was disengaged).
    async fn resolve(&mut self) -> bool {
        let (source_side, target_side) = sides_of(self.spec.direction);
        let interval = self.env.ctx.config.rediscovery_interval.max(Duration::from_secs(1));
        loop {
            if !(self.env.live)(&self.spec.binding) || self.provider.is_disengaged() {
                return false;
            }
            let found = kinds::resolve(
                &self.spec.kind,
                self.spec.version.as_deref(),
                (source_side, self.reader(source_side)),
                (target_side, self.reader(target_side)),
            )
            .await;
            let why = match found {
                Ok(resolved) if self.spec.sync_status && !(resolved.source_status && resolved.target_status) => {
                    Unresolved::NotServed(format!(
                        "{} has no status subresource on both sides; syncStatus needs one",
                        self.spec.kind
                    ))
                }
                Ok(resolved) => {
                    self.res = resolved.res;
                    self.status_served = (resolved.source_status, resolved.target_status);
                    let changed = self.tally.lock().unserved.take().is_some();
                    if changed {
                        (self.env.changed)(&self.spec.binding);
                    }
                    return true;
                }
                Err(why) => why,
            };
            let wait = match &why {
                Unresolved::NotServed(message) | Unresolved::Failed(message) => {
                    let changed = {
                        let mut tally = self.tally.lock();
                        let changed = tally.unserved.as_ref() != Some(message);
                        tally.unserved = Some(message.clone());
                        tally.converged = true;
                        changed
                    };
                    if changed {
                        tracing::info!(binding = %self.spec.binding.name, reason = %message, "related kind not synced");
                        (self.env.changed)(&self.spec.binding);
                    }
                    match why {
                        Unresolved::NotServed(_) => interval,
                        Unresolved::Failed(_) => RETRY,
                    }
                }
            };
            // A CRD may come: look again on the binding's next pass (at most every RETRY) or
            // on the backstop.
            let deadline = Instant::now() + self.env.ctx.jitter(&self.label(None), wait);
            tokio::select! {
                biased;
                () = self.poke.notified() => {}
                () = tokio::time::sleep_until(deadline) => {}
            }
            tokio::time::sleep(self.env.ctx.jitter(&self.label(None), RETRY).min(RETRY)).await;
        }
    }

    fn cache(&self, side: Side) -> &ProviderCache {
        match side {
            Side::Consumer => &self.env.consumer_cache,
            Side::Provider => &self.provider.cache,
        }
    }

    fn sides(&self) -> Sides<'_> {
        Sides {
            consumer: self.env.ctx.consumer.as_ref(),
            provider: Some(self.provider.as_ref()),
        }
    }

    /// This syncer (with `key`, one of its objects) as a jitter key.
    fn label(&self, key: Option<&Key>) -> String {
        let (ns, name) = key.map_or(("", ""), |(ns, name)| (ns.as_str(), name.as_str()));
        format!("related/{}/{}/{ns}/{name}", self.spec.binding.uid, self.res.plural)
    }

    fn reader(&self, side: Side) -> &dyn ClusterClient {
        match side {
            Side::Consumer => self.env.ctx.consumer.as_ref(),
            Side::Provider => self.provider.reader.as_ref(),
        }
    }

    fn selectors(&self) -> Vec<&RelatedResourceSelector> {
        self.spec.selectors.iter().collect()
    }

    /// Runs until the binding goes, the provider is disengaged or the future is dropped.
    pub(crate) async fn run(mut self) {
        if !self.resolve().await {
            return;
        }
        let (source_side, target_side) = sides_of(self.spec.direction);
        let mut refs = Refs::new(&self.spec.reference_apis, &self.spec.references);
        refs.resolve(&self.env.references).await;
        let mut last_refs: (BTreeSet<Key>, bool) = (BTreeSet::new(), false);
        let mut scope = match (&self.spec.binding.kind, &self.spec.binding.namespace) {
            (BindingKind::Namespaced, Some(ns)) => Scope::Own(ns.clone()),
            _ => Scope::InUse {
                indexes: BTreeMap::new(),
                receivers: Vec::new(),
                // Unknown until the first resolve: nothing is collected before it.
                unresolved: self.spec.apis.iter().map(|api| (api.clone(), true)).collect(),
            },
        };
        scope.resolve(&self.env.instances).await;
        let mut source = SideStores::open(
            self.cache(source_side),
            self.reader(source_side),
            &self.res,
            source_side,
        )
        .await;
        let mut target = SideStores::open(
            self.cache(target_side),
            self.reader(target_side),
            &self.res,
            target_side,
        )
        .await;
        let interval = self.env.ctx.config.rediscovery_interval.max(Duration::from_secs(1));
        let mut backstop = Instant::now() + self.env.ctx.jitter(&self.label(None), interval);
        let mut todo = Todo {
            everything: true,
            ..Todo::default()
        };
        loop {
            if !(self.env.live)(&self.spec.binding) || self.provider.is_disengaged() {
                return;
            }
            let mut namespaces = scope.current(&self.env.ctx.config.namespace);
            let (referenced, refs_complete) = refs.current();
            if refs_complete && !last_refs.1 {
                // Copies left alone while the references were unknown may go now.
                todo.everything = true;
            }
            todo.keys.extend(referenced.symmetric_difference(&last_refs.0).cloned());
            last_refs = (referenced.clone(), refs_complete);
            namespaces.referenced = referenced;
            namespaces.complete &= refs_complete;
            source
                .follow(self.cache(source_side), self.reader(source_side), &namespaces.set)
                .await;
            target
                .follow(self.cache(target_side), self.reader(target_side), &namespaces.set)
                .await;
            let before = self.tally.lock().visible();
            self.step(&source, &target, &namespaces, std::mem::take(&mut todo))
                .await;
            let after = {
                let mut tally = self.tally.lock();
                let (provider_stores, consumer_stores) = if source_side == Side::Provider {
                    (&source, &target)
                } else {
                    (&target, &source)
                };
                tally.refused = provider_stores.denied();
                let status_refused = tally
                    .consumer_refused
                    .iter()
                    .filter(|d| d.ends_with("/status"))
                    .cloned()
                    .collect::<BTreeSet<_>>();
                tally.consumer_refused = consumer_stores.denied().into_iter().chain(status_refused).collect();
                let grace = crate::link::window(self.env.ctx.config.heartbeat_interval);
                tally.failing = source.failing(grace).into_iter().chain(target.failing(grace)).collect();
                tally.visible()
            };
            if before != after {
                (self.env.changed)(&self.spec.binding);
            }
            // Wait for the next reason to look, then fold in whatever else is ready.
            let retry_at = self.retries.lock().values().min().copied();
            // Biased: a fixed order of branches keeps a paused-clock world deterministic.
            tokio::select! {
                biased;
                event = source.next() => if !todo.add(event) { return },
                event = target.next() => if !todo.add(event) { return },
                () = scope.changed() => todo.everything = true,
                () = refs.changed() => {}
                () = self.poke.notified() => {
                    todo.everything = scope.resolve(&self.env.instances).await;
                    todo.everything |= refs.resolve(&self.env.references).await;
                }
                () = tokio::time::sleep_until(backstop) => {
                    backstop = Instant::now() + self.env.ctx.jitter(&self.label(None), interval);
                    source.retry_refused();
                    target.retry_refused();
                    scope.resolve(&self.env.instances).await;
                    refs.resolve(&self.env.references).await;
                    todo.everything = true;
                }
                () = sleep_until_opt(retry_at) => {
                    let now = Instant::now();
                    let mut retries = self.retries.lock();
                    let due: Vec<Key> = retries.iter().filter(|(_, at)| **at <= now).map(|(k, _)| k.clone()).collect();
                    for key in due {
                        retries.remove(&key);
                        todo.keys.insert(key);
                    }
                }
            }
            for _ in 0..BATCH {
                let ready = futures::FutureExt::now_or_never(async {
                    tokio::select! {
                        biased;
                        event = source.next() => event,
                        event = target.next() => event,
                    }
                });
                match ready {
                    Some(event) => {
                        if !todo.add(event) {
                            return;
                        }
                    }
                    None => break,
                }
            }
        }
    }

    /// Converges what `todo` names, or everything this syncer is about.
    async fn step(&self, source: &SideStores, target: &SideStores, namespaces: &Namespaces, todo: Todo) {
        let keys = if todo.everything {
            let mut keys = self.everything(source, target, namespaces);
            keys.extend(todo.keys);
            keys
        } else {
            todo.keys
        };
        for key in keys {
            if !(self.env.live)(&self.spec.binding) || self.provider.is_disengaged() {
                return;
            }
            self.converge(source, target, namespaces, &key).await;
        }
        if todo.everything {
            self.tally.lock().converged = true;
        }
    }

    /// Every key this syncer is about: selected sources in namespaces in use, this binding's
    /// copies, and whatever the tally still remembers.
    fn everything(&self, source: &SideStores, target: &SideStores, namespaces: &Namespaces) -> BTreeSet<Key> {
        let selectors = self.selectors();
        let mut keys: BTreeSet<Key> = source
            .objects()
            .iter()
            .filter(|o| {
                namespaces
                    .set
                    .contains(o.metadata.namespace.as_deref().unwrap_or_default())
            })
            .filter(|o| is_source(o, &selectors, &namespaces.referenced))
            .map(|o| key_of(o))
            .collect();
        keys.extend(
            target
                .objects()
                .iter()
                .filter(|o| copy::is_ours(o, &self.spec.owner))
                .map(|o| key_of(o)),
        );
        let tally = self.tally.lock();
        keys.extend(tally.copied.iter().cloned());
        keys.extend(tally.conflicts.keys().cloned());
        keys.extend(tally.denied.keys().cloned());
        keys.extend(tally.owned.iter().cloned());
        keys.extend(self.retries.lock().keys().cloned());
        keys
    }

    /// Whether a copy at `ns` is within this binding's reach: a Binding's copies are in its
    /// namespace only.
    fn in_reach(&self, ns: &str) -> bool {
        self.spec.binding.namespace.as_deref().is_none_or(|own| own == ns)
    }

    /// Converges one object: copies its selected source, or collects our copy nothing selects.
    async fn converge(&self, source: &SideStores, target: &SideStores, namespaces: &Namespaces, key: &Key) {
        let selectors = self.selectors();
        let in_use = namespaces.set.contains(&key.0);
        let selected = in_use
            .then(|| source.get(key))
            .flatten()
            .filter(|o| is_source(o, &selectors, &namespaces.referenced));
        let cached = target.get(key).filter(|_| self.in_reach(&key.0));
        let ours = cached.as_ref().filter(|t| copy::is_ours(t, &self.spec.owner));
        {
            let mut tally = self.tally.lock();
            if ours.is_some() {
                tally.owned.insert(key.clone());
            } else {
                tally.owned.remove(key);
            }
        }
        match selected {
            Some(src) => {
                self.copy(target, key, &src, cached.as_deref()).await;
                if self.spec.sync_status
                    && let Some(copy) = ours
                {
                    self.status_back(source.side(), key, &src, copy).await;
                }
            }
            None => {
                self.tally.lock().forget(key);
                let Some(copy) = ours else {
                    self.retries.lock().remove(key);
                    return;
                };
                // Only a complete picture may say "not selected any more" (§8.9): every
                // namespace in use known, and the sources of this one listed.
                if !namespaces.complete || (in_use && !source.synced(&key.0)) {
                    return;
                }
                if copy.metadata.deletion_timestamp.is_some() {
                    return;
                }
                // A consumer copy stays while the binding still selects it (§8.1).
                if target.side() == Side::Consumer
                    && still_selected(&namespaces.set, copy, &selectors, &namespaces.referenced)
                {
                    return;
                }
                self.collect(target.side(), key).await;
            }
        }
    }

    /// Copies `src`: nothing to do when the cached target is our current copy or someone
    /// else's; otherwise the write path of a pass (a fresh read, the verdict, an apply).
    async fn copy(&self, target: &SideStores, key: &Key, src: &DynamicObject, cached: Option<&DynamicObject>) {
        let side = target.side();
        let adopt = self.spec.adopt && side == Side::Provider;
        if target.synced(&key.0) {
            let body = copy::apply_body(&self.res, src, &self.spec.owner, None);
            let known = match (copy::classify(cached, &self.spec.owner, adopt), cached) {
                (Verdict::Update { precondition: None }, Some(live)) if copy::up_to_date(&self.res, live, &body) => {
                    Some(Outcome::Current)
                }
                (Verdict::Conflict(reason), _) => Some(Outcome::Conflict(reason)),
                _ => None,
            };
            if let Some(outcome) = known {
                self.record(key, outcome);
                return;
            }
        }
        match copy_to(&self.sides(), &self.spec.owner, adopt, &self.res, side, src).await {
            Ok(outcome) => self.record(key, outcome),
            Err(e) => {
                tracing::warn!(binding = %self.spec.binding.name, error = %e, "related copy not converged; retrying");
                self.tally.lock().forget(key);
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), RETRY),
                );
            }
        }
    }

    /// `syncStatus`: writes the status of our copy onto the original (on `side`), when the copy
    /// has one and the original shows another. The original's status subresource is ours to
    /// write then; what we wrote is remembered until the source store shows it, so an event of
    /// the original that only echoes our write writes nothing.
    async fn status_back(&self, side: Side, key: &Key, original: &DynamicObject, copy: &DynamicObject) {
        let Some(status) = copy.data.get("status").filter(|s| !s.is_null()) else {
            return;
        };
        {
            let mut written = self.statuses.lock();
            if original.data.get("status") == Some(status) {
                written.remove(key);
                return;
            }
            if written.get(key) == Some(status) {
                return;
            }
        }
        let Some(writer) = self.sides().writer(side) else {
            return;
        };
        let uid = original.metadata.uid.clone().unwrap_or_default();
        let patch = json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/status", "value": status},
        ]);
        let Ok(patch) = serde_json::from_value::<json_patch::Patch>(patch) else {
            return;
        };
        let refused = format!("patch {}/status", self.tally_name());
        match writer
            .patch_status(
                &self.res,
                Some(&key.0),
                &key.1,
                &Patch::Json(patch),
                &PatchParams::default(),
            )
            .await
        {
            Ok(_) => {
                self.statuses.lock().insert(key.clone(), status.clone());
                if side == Side::Consumer && self.tally.lock().consumer_refused.remove(&refused) {
                    (self.env.changed)(&self.spec.binding);
                }
            }
            Err(e) if e.is_forbidden() => {
                let newly = if side == Side::Consumer {
                    self.tally.lock().consumer_refused.insert(refused)
                } else {
                    self.tally.lock().denied.insert(key.clone(), refused).is_none()
                };
                if newly {
                    (self.env.changed)(&self.spec.binding);
                }
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), DENIED_RETRY),
                );
            }
            // The original went or was re-created: its own event brings it back here.
            Err(e)
                if e.is_not_found()
                    || matches!(
                        e,
                        kbind_cluster::Error::Invalid { .. } | kbind_cluster::Error::Conflict { .. }
                    ) => {}
            Err(e) => {
                tracing::warn!(binding = %self.spec.binding.name, object = %describe(&self.res, key), %side, error = %crate::cause::http_cause(&e), "status of a related copy not written back; retrying");
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), RETRY),
                );
            }
        }
    }

    fn tally_name(&self) -> String {
        self.spec.kind.to_string()
    }

    fn record(&self, key: &Key, outcome: Outcome) {
        let mut tally = self.tally.lock();
        tally.forget(key);
        match outcome {
            Outcome::Current => {
                tally.copied.insert(key.clone());
                self.retries.lock().remove(key);
            }
            Outcome::Conflict(reason) => {
                tally.conflicts.insert(key.clone(), reason);
                self.retries.lock().remove(key);
            }
            Outcome::Denied(denied) => {
                tally.denied.insert(key.clone(), denied);
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), DENIED_RETRY),
                );
            }
            Outcome::Later => {
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), RETRY),
                );
            }
        }
    }

    /// Deletes our copy at `key` on `side`.
    async fn collect(&self, side: Side, key: &Key) {
        let sides = self.sides();
        let Some(writer) = sides.writer(side) else {
            return;
        };
        match delete_copy(writer, &self.res, side, key).await {
            Ok(gone) => {
                if gone {
                    tracing::info!(binding = %self.spec.binding.name, object = %describe(&self.res, key), %side, "removed a related copy nothing selects any more");
                    let mut tally = self.tally.lock();
                    tally.removed += 1;
                    tally.owned.remove(key);
                }
                self.retries.lock().remove(key);
            }
            Err(e) => {
                tracing::warn!(binding = %self.spec.binding.name, error = %e, "related copy not collected; retrying");
                self.retries.lock().insert(
                    key.clone(),
                    Instant::now() + self.env.ctx.jitter(&self.label(Some(key)), RETRY),
                );
            }
        }
    }
}

async fn sleep_until_opt(at: Option<Instant>) {
    match at {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}
