//! A fake cluster: its builder, its store and fault switches, identity, users and tokens.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kbind_cluster::{SharedClock, TokioClock, clock::format_time};
use parking_lot::{Mutex, MutexGuard};
use rand::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tokio::sync::watch;

use crate::faults::{ErrorRule, FaultState, Interloper};
use crate::rbac::UserInfo;
use crate::registry::{GroupResource, Registry};
use crate::store::{EventType, HistoryEvent, State, WriteRecord};
use crate::{controllers, meta};

/// How many events of each resource a cluster keeps for watches to resume from, unless told
/// otherwise (kube-apiserver keeps a watch cache per resource too).
pub const DEFAULT_HISTORY: usize = 10_000;

/// Builds a [`FakeCluster`].
#[derive(Debug, Clone)]
pub struct FakeClusterBuilder {
    name: String,
    seed: u64,
    clock: Option<SharedClock>,
    garbage_collector: bool,
    root_ca_publisher: bool,
    kcp_like: bool,
    history_limit: usize,
    bookmark_interval: Duration,
}

impl FakeClusterBuilder {
    /// The seed of the cluster's only randomness (uids, generated names, tokens).
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The clock timestamps come from (default: [`TokioClock::fixed`]).
    pub fn clock(mut self, clock: SharedClock) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Whether ownerReference garbage collection runs (default on; off mimics a bare apiserver).
    pub fn garbage_collector(mut self, on: bool) -> Self {
        self.garbage_collector = on;
        self
    }

    /// Whether every namespace gets ConfigMap `kube-root-ca.crt` (default on, as
    /// kube-controller-manager does; off mimics a controller-manager without that controller).
    pub fn root_ca_publisher(mut self, on: bool) -> Self {
        self.root_ca_publisher = on;
        self
    }

    /// Serve kcp's LogicalCluster and create LogicalCluster `cluster` (the identity object).
    pub fn kcp_like(mut self, on: bool) -> Self {
        self.kcp_like = on;
        self
    }

    /// How many events of each resource the watch history keeps.
    pub fn history_limit(mut self, events: usize) -> Self {
        self.history_limit = events.max(1);
        self
    }

    /// How long an idle watch waits before sending a bookmark.
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = every;
        self
    }

    /// Starts the cluster (and its controllers, on the current tokio runtime).
    pub fn build(self) -> FakeCluster {
        let clock = self.clock.clone().unwrap_or_else(|| Arc::new(TokioClock::fixed()));
        let rng = ChaCha8Rng::seed_from_u64(self.seed);
        let state = State::new(Registry::new(self.kcp_like), rng, self.history_limit, 0);
        let (changed, _) = watch::channel(0);
        let inner = Arc::new(Inner {
            name: self.name,
            state: Mutex::new(state),
            faults: Mutex::new(FaultState::default()),
            changed,
            clock,
            garbage_collector: std::sync::atomic::AtomicBool::new(self.garbage_collector),
            root_ca_publisher: self.root_ca_publisher,
            kcp_like: self.kcp_like,
            bookmark_interval: self.bookmark_interval,
            tokens: Mutex::new(BTreeMap::new()),
            requests: Mutex::new(Vec::new()),
            incarnation: std::sync::atomic::AtomicU64::new(0),
            delayed: std::sync::atomic::AtomicUsize::new(0),
            swallowed: std::sync::atomic::AtomicUsize::new(0),
            stall: Arc::default(),
        });
        let cluster = FakeCluster { inner };
        cluster.bootstrap();
        controllers::spawn(Arc::downgrade(&cluster.inner));
        cluster
    }
}

/// A bearer token the cluster accepts.
#[derive(Debug, Clone)]
pub(crate) struct Token {
    /// Who it authenticates.
    pub user: UserInfo,
    /// For a ServiceAccount token: the account's uid (the token dies with the account).
    pub service_account: Option<String>,
    /// For a TokenRequest token: when it stops being accepted.
    pub expires: Option<jiff::Timestamp>,
}

pub(crate) struct Inner {
    pub(crate) name: String,
    pub(crate) state: Mutex<State>,
    pub(crate) faults: Mutex<FaultState>,
    /// Carries the latest resourceVersion; every change (and every watch epoch) is sent here.
    pub(crate) changed: watch::Sender<u64>,
    pub(crate) clock: SharedClock,
    pub(crate) garbage_collector: std::sync::atomic::AtomicBool,
    pub(crate) root_ca_publisher: bool,
    pub(crate) kcp_like: bool,
    pub(crate) bookmark_interval: Duration,
    /// Bearer tokens: who each authenticates, for how long, and whose ServiceAccount it is.
    pub(crate) tokens: Mutex<BTreeMap<String, Token>>,
    /// Bumped by `replace_with_fresh`: a request sent to an earlier incarnation never lands
    /// on the fresh cluster (its connection is reset, as with a rebuilt server).
    pub(crate) incarnation: std::sync::atomic::AtomicU64,
    /// Requests waiting out the latency fault right now, counted down also when the client
    /// goes away mid-wait (the handler is dropped).
    pub(crate) delayed: std::sync::atomic::AtomicUsize,
    /// Requests sent into the black hole that the caller has not given up yet.
    pub(crate) swallowed: std::sync::atomic::AtomicUsize,
    /// Stalls the served connections while the cluster is black-holed.
    pub(crate) stall: Arc<crate::serve::stall::StallSwitch>,
    /// Every request the fault gate answered, in order.
    pub(crate) requests: Mutex<Vec<crate::faults::RequestRecord>>,
}

impl Inner {
    /// The cluster's store.
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock()
    }

    /// The fault switches.
    pub(crate) fn faults(&self) -> MutexGuard<'_, FaultState> {
        self.faults.lock()
    }

    pub(crate) fn now(&self) -> String {
        format_time(self.clock.now())
    }

    pub(crate) fn notify(&self, rv: u64) {
        self.changed.send_replace(rv);
    }

    /// Writes `object` as a system component (no RBAC, no faults), with a new resourceVersion.
    pub(crate) fn system_write(
        &self,
        state: &mut State,
        gr: &GroupResource,
        mut object: Value,
        kind: EventType,
        user: &str,
        verb: &str,
    ) {
        let rv = state.next_rv();
        meta::set(&mut object, "resourceVersion", Some(json!(rv.to_string())));
        let record = WriteRecord {
            rv,
            user: user.to_string(),
            verb: verb.to_string(),
            resource: gr.qualified(),
            subresource: String::new(),
            namespace: meta::namespace(&object).unwrap_or("").to_string(),
            name: meta::name(&object).unwrap_or("").to_string(),
        };
        state.put(gr, object, kind);
        state.write_log.push(record);
    }
}

/// An in-process fake Kubernetes API server; clones share the same cluster.
#[derive(Clone)]
pub struct FakeCluster {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for FakeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("FakeCluster").field("name", &self.inner.name).finish()
    }
}

impl FakeCluster {
    /// A builder for a cluster called `name` (the name appears in errors and logs only).
    pub fn builder(name: &str) -> FakeClusterBuilder {
        FakeClusterBuilder {
            name: name.to_string(),
            seed: 0,
            clock: None,
            garbage_collector: true,
            root_ca_publisher: true,
            kcp_like: false,
            history_limit: DEFAULT_HISTORY,
            bookmark_interval: Duration::from_secs(60),
        }
    }

    /// The cluster's name.
    pub fn name(&self) -> &str {
        &self.inner.name
    }

    /// The UID that identifies this cluster (LogicalCluster `cluster` on kcp-like, else `kube-system`).
    pub fn identity_uid(&self) -> String {
        let state = self.inner.lock();
        let (gr, name) = if self.inner.kcp_like {
            (GroupResource::new("core.kcp.io", "logicalclusters"), "cluster")
        } else {
            (GroupResource::new("", "namespaces"), "kube-system")
        };
        state
            .get(&gr, &(String::new(), name.to_string()))
            .and_then(|o| meta::uid(o).map(str::to_string))
            .unwrap_or_default()
    }

    /// The current resourceVersion.
    pub fn resource_version(&self) -> u64 {
        self.inner.lock().rv
    }

    /// Every successful write so far.
    pub fn write_log(&self) -> Vec<WriteRecord> {
        self.inner.lock().write_log.clone()
    }

    /// Every request so far, admitted or refused, in the order they were answered.
    pub fn request_log(&self) -> Vec<crate::faults::RequestRecord> {
        self.inner.requests.lock().clone()
    }

    /// The requests after the first `from` (what a check after every step reads).
    pub fn request_log_from(&self, from: usize) -> Vec<crate::faults::RequestRecord> {
        let log = self.inner.requests.lock();
        log.get(from..).map(<[_]>::to_vec).unwrap_or_default()
    }

    /// The retained event history (what a determinism check compares).
    pub fn event_log(&self) -> Vec<HistoryEvent> {
        self.inner.lock().all_history()
    }

    /// Turns garbage collection of ownerReferences on or off.
    pub fn set_garbage_collector(&self, on: bool) {
        self.inner
            .garbage_collector
            .store(on, std::sync::atomic::Ordering::SeqCst);
        let rv = self.resource_version();
        self.inner.notify(rv);
    }

    /// Registers a bearer token for `user` (used by the HTTP surface).
    pub fn add_token(&self, token: &str, user: UserInfo) {
        self.inner.tokens.lock().insert(
            token.to_string(),
            Token {
                user,
                service_account: None,
                expires: None,
            },
        );
    }

    /// The user a bearer token authenticates, if any: ServiceAccount tokens die with their SA,
    /// and a TokenRequest token at its expiry (on the cluster's clock).
    pub fn authenticate(&self, token: &str) -> Option<UserInfo> {
        let found = self.inner.tokens.lock().get(token).cloned()?;
        if found.expires.is_some_and(|at| self.inner.clock.now() >= at) {
            return None;
        }
        match found.service_account {
            Some(uid) => self.inner.lock().find_uid(&uid).map(|_| found.user),
            None => Some(found.user),
        }
    }

    /// Every TokenRequest token this cluster issued and still remembers (expired ones are
    /// forgotten when the next is issued): what a story checks never leaks.
    pub fn issued_tokens(&self) -> Vec<String> {
        self.inner
            .tokens
            .lock()
            .iter()
            .filter(|(_, t)| t.expires.is_some())
            .map(|(token, _)| token.clone())
            .collect()
    }

    // ---- faults ----

    /// Cuts the cluster off: every request fails as unreachable and open watches end.
    pub fn partition(&self) {
        self.inner.faults().partitioned = true;
        self.drop_watches();
    }

    /// Ends a partition.
    pub fn heal(&self) {
        self.inner.faults().partitioned = false;
    }

    /// Whether the cluster is partitioned.
    pub fn is_partitioned(&self) -> bool {
        self.inner.faults().partitioned
    }

    /// Makes the cluster a black hole: it accepts, never answers and drops nothing visibly.
    /// A request sent from now on pends until its caller gives up (never answered, even once
    /// the hole is lifted: the answer is lost); open watches deliver nothing but do not end;
    /// served connections, open and new, stall in both directions without a FIN or RST, so
    /// HTTP/2 pings go unanswered. Only a client's own deadlines notice.
    pub fn black_hole(&self) {
        self.inner.faults().black_holed = true;
        self.inner.stall.set(true);
    }

    /// Lifts the black hole: new requests are answered, open watches and served connections
    /// go on where they stopped (requests sent into the hole stay unanswered).
    pub fn restore(&self) {
        self.inner.faults().black_holed = false;
        self.inner.stall.set(false);
        // Wakes the watches waiting the hole out.
        let rv = self.resource_version();
        self.inner.notify(rv);
    }

    /// Whether the cluster is a black hole.
    pub fn is_black_holed(&self) -> bool {
        self.inner.faults().black_holed
    }

    /// How many in-process requests are pending in the black hole now (one whose caller gave
    /// up is no longer counted): lets a test see a request swallowed without timing.
    pub fn requests_in_black_hole(&self) -> usize {
        self.inner.swallowed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Adds `latency` (on the tokio clock) before every answer; `None` removes it.
    pub fn set_latency(&self, latency: Option<Duration>) {
        self.inner.faults().latency = latency;
    }

    /// How many requests are waiting out the latency fault right now (one whose client gave
    /// up is no longer counted): lets a test see a request held, and released, without timing.
    pub fn delayed_requests(&self) -> usize {
        self.inner.delayed.load(std::sync::atomic::Ordering::SeqCst)
    }

    /// Injects an error into matching requests.
    pub fn inject_error(&self, rule: ErrorRule) {
        self.inner.faults().errors.push(rule);
    }

    /// Removes every injected error.
    pub fn clear_errors(&self) {
        self.inner.faults().errors.clear();
    }

    /// Makes discovery unable (`true`) or able again to read `group_version` (`v1`,
    /// `batch/v1`), as an unavailable aggregated APIService would.
    pub fn set_undiscoverable(&self, group_version: &str, undiscoverable: bool) {
        let mut faults = self.inner.faults();
        if undiscoverable {
            faults.undiscoverable.insert(group_version.to_string());
        } else {
            faults.undiscoverable.remove(group_version);
        }
    }

    /// Lets another client's write land just before the next matching request (used once).
    pub fn interlope(&self, interloper: Interloper) {
        self.inner.faults().interlopers.push(interloper);
    }

    /// Ends every open watch (as a dropped connection would); clients must re-watch.
    pub fn drop_watches(&self) {
        let rv = {
            let mut state = self.inner.lock();
            state.watch_epoch += 1;
            state.rv
        };
        self.inner.notify(rv);
    }

    /// Forgets the event history: resuming from any older resourceVersion gets 410 Gone.
    pub fn compact(&self) {
        let rv = {
            let mut state = self.inner.lock();
            state.compact();
            state.rv
        };
        self.inner.notify(rv);
    }

    /// Replaces the cluster with a fresh, empty one that has a new identity, behind the same
    /// handle (resourceVersions keep increasing so no client sees time run backwards).
    pub fn replace_with_fresh(&self) {
        {
            let mut state = self.inner.lock();
            let rng = state.rng.clone();
            let write_log = std::mem::take(&mut state.write_log);
            let (rv, epoch) = (state.rv, state.watch_epoch);
            *state = State::new(Registry::new(self.inner.kcp_like), rng, state.history_limit, rv);
            state.write_log = write_log;
            state.watch_epoch = epoch + 1;
            self.inner.incarnation.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        }
        self.inner
            .tokens
            .lock()
            .retain(|_, token| token.service_account.is_none());
        self.bootstrap();
    }

    /// Creates what every cluster starts with: the system namespaces, the bootstrap RBAC
    /// policy and, on kcp-like clusters, LogicalCluster `cluster`.
    fn bootstrap(&self) {
        let now = self.inner.now();
        let mut state = self.inner.lock();
        let ns_gr = GroupResource::new("", "namespaces");
        for name in ["default", "kube-system", "kube-public", "kube-node-lease"] {
            let uid = state.new_uid();
            let ns = json!({
                "apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": name, "uid": uid, "creationTimestamp": now,
                             "labels": {"kubernetes.io/metadata.name": name}},
                "spec": {"finalizers": ["kubernetes"]},
                "status": {"phase": "Active"},
            });
            self.inner
                .system_write(&mut state, &ns_gr, ns, EventType::Added, "system:apiserver", "create");
        }
        if self.inner.kcp_like {
            let uid = state.new_uid();
            let lc = json!({
                "apiVersion": "core.kcp.io/v1alpha1", "kind": "LogicalCluster",
                "metadata": {"name": "cluster", "uid": uid, "creationTimestamp": now},
                "spec": {}, "status": {"phase": "Ready"},
            });
            let gr = GroupResource::new("core.kcp.io", "logicalclusters");
            self.inner
                .system_write(&mut state, &gr, lc, EventType::Added, "system:apiserver", "create");
        }
        for (gr, obj) in crate::bootstrap::rbac_objects() {
            let mut obj = obj;
            let uid = state.new_uid();
            meta::set(&mut obj, "uid", Some(json!(uid)));
            meta::set(&mut obj, "creationTimestamp", Some(json!(now)));
            self.inner
                .system_write(&mut state, &gr, obj, EventType::Added, "system:apiserver", "create");
        }
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
    }
}

/// The current faults, for inspection.
pub fn faults_of(cluster: &FakeCluster) -> FaultState {
    cluster.inner.faults().clone()
}
