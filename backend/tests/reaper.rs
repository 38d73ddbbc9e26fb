//! The reaper on an in-process fake provider and tokio's paused clock: renewals are observed on
//! the reaper's own clock, a silent consumer is reaped after exactly the TTL, a skewed one that
//! renews is kept, report-only deletes nothing, and `--reap-objects` decides whether anything but
//! Grants goes.

use std::sync::Arc;
use std::time::Duration;

use fakeapi::{ErrorRule, FakeCluster, InjectedError};
use jiff::{SignedDuration, Timestamp};
use kbind_backend::reaper::{Action, Options, Reaper, Target};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams, TokioClock, to_dynamic,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

const SEED: u64 = 14;
const TTL: Duration = Duration::from_secs(600);
const RENEW_EVERY: Duration = Duration::from_secs(30);
const LEASE_NS: &str = "kbind";
/// A consumer that keeps renewing.
const LIVE: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
/// A consumer that stopped.
const SILENT: &str = "5d0e7a2c-1b3f-4a5e-8c6d-9e0f1a2b3c4d";
/// A consumer of another identity.
const OTHER: &str = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";

fn res(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn crds() -> ApiResource {
    res(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}
fn leases() -> ApiResource {
    res("coordination.k8s.io", "v1", "Lease", "leases")
}
fn namespaces() -> ApiResource {
    res("", "v1", "Namespace", "namespaces")
}
fn configmaps() -> ApiResource {
    res("", "v1", "ConfigMap", "configmaps")
}
fn grants() -> ApiResource {
    ApiResource::erase::<kbind_api::Grant>(&())
}
fn exports() -> ApiResource {
    ApiResource::erase::<kbind_api::Export>(&())
}
fn widgets() -> ApiResource {
    res("example.org", "v1", "Widget", "widgets")
}
fn gadgets() -> ApiResource {
    res("example.org", "v1", "Gadget", "gadgets")
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// The wall time the reaper's clock starts at: a year away from the provider's, to show that
/// only durations it observed itself matter.
fn reaper_clock() -> Arc<TokioClock> {
    Arc::new(TokioClock::starting_at(Timestamp::from_second(1_798_761_600).unwrap()))
}

/// A provider with the backend's CRDs, two Export APIs (namespaced widgets, cluster-scoped
/// gadgets), the Export `widgets`, and the lease namespace.
async fn provider() -> (FakeCluster, Arc<dyn ClusterClient>) {
    let cluster = FakeCluster::builder("provider").seed(SEED).build();
    let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
    let mut all: Vec<Value> = kbind_api::backend_crds()
        .into_iter()
        .map(|mut crd| {
            // The apiserver defaults these; fakeapi's establishing controller compares them.
            let names = &mut crd.spec.names;
            names.list_kind.get_or_insert_with(|| format!("{}List", names.kind));
            names.singular.get_or_insert_with(|| names.kind.to_lowercase());
            serde_json::to_value(to_dynamic(&crd).unwrap()).unwrap()
        })
        .collect();
    all.push(example_crd("Widget", "widgets", "Namespaced"));
    all.push(example_crd("Gadget", "gadgets", "Cluster"));
    for crd in &all {
        admin
            .create(&crds(), None, &object(crd.clone()), &PostParams::default())
            .await
            .unwrap();
    }
    for crd in &all {
        let name = crd["metadata"]["name"].as_str().unwrap();
        eventually(&format!("{name} Established"), || async {
            let got = serde_json::to_value(admin.get(&crds(), None, name).await.unwrap()).unwrap();
            got["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
        })
        .await;
    }
    create_namespace(&admin, LEASE_NS, json!({}), json!({})).await;
    let export = object(json!({
        "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export",
        "metadata": {"name": "widgets"},
        "spec": {"title": "Widgets", "apis": [{"name": "widgets.example.org"}, {"name": "gadgets.example.org"}]},
    }));
    admin
        .create(&exports(), None, &export, &PostParams::default())
        .await
        .unwrap();
    (cluster, admin)
}

fn example_crd(kind: &str, plural: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.org"), "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": scope,
            "names": {"kind": kind, "plural": plural, "singular": kind.to_lowercase(), "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    })
}

async fn create_namespace(admin: &Arc<dyn ClusterClient>, name: &str, labels: Value, annotations: Value) {
    let ns = object(json!({
        "apiVersion": "v1", "kind": "Namespace",
        "metadata": {"name": name, "labels": labels, "annotations": annotations},
    }));
    admin
        .create(&namespaces(), None, &ns, &PostParams::default())
        .await
        .unwrap();
}

/// A namespace the issuer created and claimed for `subject`.
async fn claimed_namespace(admin: &Arc<dyn ClusterClient>, name: &str, subject: &str) {
    create_namespace(
        admin,
        name,
        json!({"app.kubernetes.io/managed-by": "kbind-backend", "iam.kbind.io/claimed-by": "h"}),
        json!({"iam.kbind.io/claimed-by": subject}),
    )
    .await;
}

/// A Grant as the gateway creates it; returns its name.
async fn grant(admin: &Arc<dyn ClusterClient>, subject: &str, consumer: &str, namespaces: &[&str]) -> String {
    let name = kbind_api::grant_name(subject, "widgets", consumer);
    let grant = object(json!({
        "apiVersion": "iam.kbind.io/v1alpha1", "kind": "Grant",
        "metadata": {"name": name, "labels": {
            "iam.kbind.io/grant": name,
            "iam.kbind.io/export": "widgets",
            "iam.kbind.io/consumer-cluster-uid": consumer,
        }},
        "spec": {
            "identity": {"subject": subject}, "export": "widgets",
            "consumerClusterUID": consumer, "namespaces": namespaces,
        },
    }));
    admin
        .create(&grants(), None, &grant, &PostParams::default())
        .await
        .unwrap();
    name
}

async fn grant_exists(admin: &Arc<dyn ClusterClient>, name: &str) -> bool {
    admin.get_opt(&grants(), None, name).await.unwrap().is_some()
}

/// An object as a consumer's konnector syncs it: annotated with the consumer cluster UID.
async fn synced(
    admin: &Arc<dyn ClusterClient>,
    res: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    consumer: &str,
) {
    let mut metadata = json!({"name": name, "annotations": {
        "core.kbind.io/consumer-cluster-uid": consumer,
        "core.kbind.io/consumer-object-uid": "c0ffee00-0000-4000-8000-000000000000",
    }, "labels": {"core.kbind.io/managed": "true"}});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    let obj = object(json!({"apiVersion": res.api_version, "kind": res.kind, "metadata": metadata, "spec": {}}));
    admin
        .create(res, namespace, &obj, &PostParams::default())
        .await
        .unwrap();
}

/// Whether the object is still there and not being deleted.
async fn alive(admin: &Arc<dyn ClusterClient>, res: &ApiResource, namespace: Option<&str>, name: &str) -> bool {
    admin
        .get_opt(res, namespace, name)
        .await
        .unwrap()
        .is_some_and(|o| o.metadata.deletion_timestamp.is_none())
}

fn micro_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// The heartbeat Lease as the issuer pre-creates it.
async fn lease(admin: &Arc<dyn ClusterClient>, consumer: &str) {
    let obj = object(json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"namespace": LEASE_NS, "name": format!("consumer-{consumer}"), "labels": {"core.kbind.io/managed": "true"}},
        "spec": {"holderIdentity": consumer, "leaseDurationSeconds": 60},
    }));
    admin
        .create(&leases(), Some(LEASE_NS), &obj, &PostParams::default())
        .await
        .unwrap();
}

/// One renewal, writing `renew_time` as the consumer's clock reads it.
async fn renew(admin: &Arc<dyn ClusterClient>, consumer: &str, renew_time: Timestamp) {
    let patch = json!({"spec": {"renewTime": micro_time(renew_time)}});
    admin
        .patch(
            &leases(),
            Some(LEASE_NS),
            &format!("consumer-{consumer}"),
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .unwrap();
}

/// A konnector heartbeat: renews every 30 s, writing a clock `skew` away from the provider's.
fn heartbeat(
    admin: Arc<dyn ClusterClient>,
    consumer: &'static str,
    skew: SignedDuration,
) -> tokio::task::JoinHandle<()> {
    tokio::spawn(async move {
        let clock = TokioClock::fixed();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            renew(&admin, consumer, clock_now(&clock).checked_add(skew).unwrap()).await;
        }
    })
}

fn clock_now(clock: &TokioClock) -> Timestamp {
    kbind_cluster::Clock::now(clock)
}

/// A running reaper and what it reports.
struct Running {
    actions: mpsc::UnboundedReceiver<Action>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    fn start(admin: &Arc<dyn ClusterClient>, opts: Options) -> Self {
        let (tx, actions) = mpsc::unbounded_channel();
        let shutdown = CancellationToken::new();
        let reaper = Reaper::new(admin.clone(), opts, LEASE_NS.to_string(), reaper_clock()).report_to(tx);
        let token = shutdown.clone();
        let task = tokio::spawn(async move { reaper.run(token).await.unwrap() });
        Self {
            actions,
            shutdown,
            task,
        }
    }

    /// The next action, failing after `limit` of (paused) time.
    async fn next(&mut self, limit: Duration) -> Action {
        tokio::time::timeout(limit, self.actions.recv())
            .await
            .unwrap_or_else(|_| panic!("no reaper action within {limit:?} (seed {SEED})"))
            .expect("the reaper is running")
    }

    /// The actions reported so far, without waiting.
    fn drain(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.actions.try_recv().ok()).collect()
    }

    /// Every action until (and with) the deletion of the Grant `last`.
    async fn until_grant(&mut self, last: &str, limit: Duration) -> Vec<Action> {
        let mut seen = Vec::new();
        loop {
            let action = self.next(limit).await;
            let done = action.target == Target::Grant { name: last.to_string() };
            seen.push(action);
            if done {
                return seen;
            }
        }
    }

    async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

async fn eventually<F, Fut>(what: &str, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what} (seed {SEED})"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn options(reap_objects: bool, report_only: bool) -> Options {
    Options {
        reap_ttl: TTL,
        reap_objects,
        report_only,
    }
}

#[tokio::test(start_paused = true)]
async fn a_renewing_consumer_is_never_reaped_and_a_silent_one_is_reaped_after_exactly_the_ttl() {
    let (_cluster, admin) = provider().await;
    let live = grant(&admin, "token:alice", LIVE, &[]).await;
    let silent = grant(&admin, "token:bob", SILENT, &[]).await;
    let other = grant(&admin, "token:carol", OTHER, &[]).await;
    lease(&admin, LIVE).await;
    lease(&admin, SILENT).await;
    lease(&admin, OTHER).await;
    let beat = heartbeat(admin.clone(), LIVE, SignedDuration::ZERO);
    let beat_other = heartbeat(admin.clone(), OTHER, SignedDuration::ZERO);
    let mut reaper = Running::start(&admin, options(false, false));

    // The silent consumer renews once more after a while; its TTL runs from that write.
    tokio::time::sleep(Duration::from_secs(95)).await;
    renew(&admin, SILENT, Timestamp::from_second(1_767_225_695).unwrap()).await;
    let last_write = tokio::time::Instant::now();

    let action = reaper.next(2 * TTL).await;
    let idle = tokio::time::Instant::now() - last_write;
    assert_eq!(
        action,
        Action {
            consumer: SILENT.into(),
            target: Target::Grant { name: silent.clone() },
            performed: true
        }
    );
    assert_eq!(
        action.to_string(),
        format!("deleted Grant {silent} of consumer {SILENT}")
    );
    assert!(
        idle >= TTL && idle < TTL + Duration::from_secs(1),
        "reaped {idle:?} after the last renewal; the TTL is {TTL:?}"
    );
    assert!(!grant_exists(&admin, &silent).await);

    // Many TTLs later the renewing consumers still have their Grants and nothing else happened.
    tokio::time::sleep(10 * TTL).await;
    assert!(grant_exists(&admin, &live).await);
    assert!(grant_exists(&admin, &other).await);
    assert_eq!(reaper.drain(), []);
    // The reaper deletes no Lease: that is the issuer's revocation.
    assert!(alive(&admin, &leases(), Some(LEASE_NS), &format!("consumer-{SILENT}")).await);

    // A consumer that stops later is reaped a TTL after its last renewal too.
    beat_other.abort();
    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: other.clone() });
    assert!(grant_exists(&admin, &live).await);
    beat.abort();
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_skewed_clock_neither_kills_a_renewing_consumer_nor_saves_a_silent_one() {
    let (_cluster, admin) = provider().await;
    let behind = grant(&admin, "token:alice", LIVE, &[]).await;
    let ahead = grant(&admin, "token:bob", SILENT, &[]).await;
    lease(&admin, LIVE).await;
    lease(&admin, SILENT).await;
    // Thirty days behind: every written renewTime is far older than the TTL.
    let beat = heartbeat(admin.clone(), LIVE, SignedDuration::from_hours(-30 * 24));
    // A year ahead, written once: a renewTime in the future does not keep a silent consumer.
    renew(&admin, SILENT, Timestamp::from_second(1_798_761_600).unwrap()).await;
    let mut reaper = Running::start(&admin, options(false, false));

    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: ahead.clone() });
    tokio::time::sleep(5 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert!(grant_exists(&admin, &behind).await);
    assert!(!grant_exists(&admin, &ahead).await);
    beat.abort();
    reaper.stop().await;
}

/// Two consumers of alice (one silent, one live) and one of carol, with synced objects and
/// claimed namespaces; returns the silent consumer's Grant.
async fn world_with_objects(admin: &Arc<dyn ClusterClient>) -> String {
    claimed_namespace(admin, "team-silent", "token:alice").await;
    claimed_namespace(admin, "team-live", "token:alice").await;
    claimed_namespace(admin, "shared", "token:alice").await;
    claimed_namespace(admin, "carols", "token:carol").await;
    // Listed in the silent Grant, but kbind did not create it.
    create_namespace(admin, "legacy", json!({}), json!({})).await;
    let silent = grant(admin, "token:alice", SILENT, &["team-silent", "shared", "legacy"]).await;
    grant(admin, "token:alice", LIVE, &["team-live", "shared"]).await;
    grant(admin, "token:carol", OTHER, &["carols"]).await;
    for consumer in [LIVE, SILENT, OTHER] {
        lease(admin, consumer).await;
    }
    synced(admin, &widgets(), Some("team-silent"), "w1", SILENT).await;
    synced(admin, &widgets(), Some("shared"), "w2", SILENT).await;
    synced(admin, &widgets(), Some("shared"), "w3", LIVE).await;
    synced(admin, &widgets(), Some("team-live"), "w4", LIVE).await;
    synced(admin, &widgets(), Some("carols"), "w5", OTHER).await;
    synced(admin, &widgets(), Some("legacy"), "w6", SILENT).await;
    synced(admin, &gadgets(), None, "g-silent", SILENT).await;
    synced(admin, &gadgets(), None, "g-live", LIVE).await;
    // Not an API of the Export: never the reaper's, whatever its annotation says.
    synced(admin, &configmaps(), Some("team-live"), "c1", SILENT).await;
    silent
}

/// What of [`world_with_objects`] is still there (and not terminating).
async fn survivors(admin: &Arc<dyn ClusterClient>) -> Vec<String> {
    let mut alive_names = Vec::new();
    let objects: [(ApiResource, Option<&str>, &str); 9] = [
        (widgets(), Some("team-silent"), "w1"),
        (widgets(), Some("shared"), "w2"),
        (widgets(), Some("shared"), "w3"),
        (widgets(), Some("team-live"), "w4"),
        (widgets(), Some("carols"), "w5"),
        (widgets(), Some("legacy"), "w6"),
        (gadgets(), None, "g-silent"),
        (gadgets(), None, "g-live"),
        (configmaps(), Some("team-live"), "c1"),
    ];
    for (res, ns, name) in objects {
        if alive(admin, &res, ns, name).await {
            alive_names.push(name.to_string());
        }
    }
    for ns in ["team-silent", "team-live", "shared", "carols", "legacy"] {
        if alive(admin, &namespaces(), None, ns).await {
            alive_names.push(format!("ns/{ns}"));
        }
    }
    alive_names
}

const EVERYTHING: [&str; 14] = [
    "w1",
    "w2",
    "w3",
    "w4",
    "w5",
    "w6",
    "g-silent",
    "g-live",
    "c1",
    "ns/team-silent",
    "ns/team-live",
    "ns/shared",
    "ns/carols",
    "ns/legacy",
];

#[tokio::test(start_paused = true)]
async fn with_reap_objects_the_consumers_synced_objects_and_unused_claimed_namespaces_go() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(true, false));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    let mut targets: Vec<String> = actions.iter().map(|a| a.target.to_string()).collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            format!("Grant {silent}"),
            "Namespace team-silent".to_string(),
            "gadgets.example.org g-silent".to_string(),
            "widgets.example.org legacy/w6".to_string(),
            "widgets.example.org shared/w2".to_string(),
            "widgets.example.org team-silent/w1".to_string(),
        ]
    );
    assert!(actions.iter().all(|a| a.performed && a.consumer == SILENT));
    // The Grant goes last: it is how a sweep interrupted halfway finds the rest again.
    assert_eq!(actions.last().unwrap().target, Target::Grant { name: silent.clone() });
    assert!(!grant_exists(&admin, &silent).await);
    // Kept: the other consumers' objects, `shared` (still used by alice's live Grant), `legacy`
    // (kbind did not create it), and the ConfigMap (not an API of the Export).
    eventually("the silent consumer's objects to go", || async {
        survivors(&admin).await
            == [
                "w3",
                "w4",
                "w5",
                "g-live",
                "c1",
                "ns/team-live",
                "ns/shared",
                "ns/carols",
                "ns/legacy",
            ]
    })
    .await;
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_reap_objects_only_grants_are_deleted() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(false, false));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(!grant_exists(&admin, &silent).await);
    tokio::time::sleep(2 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert_eq!(survivors(&admin).await, EVERYTHING);
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn report_only_lists_every_deletion_once_and_deletes_nothing() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(true, true));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert_eq!(actions.len(), 6, "{actions:?}");
    assert!(actions.iter().all(|a| !a.performed && a.consumer == SILENT));
    assert!(
        actions
            .iter()
            .any(|a| a.to_string() == format!("would delete Grant {silent} of consumer {SILENT}")),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| a.target
        == Target::Namespace {
            name: "team-silent".into()
        }));
    // Reported once, not again every TTL while the Lease stays silent.
    tokio::time::sleep(3 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert!(grant_exists(&admin, &silent).await);
    assert_eq!(survivors(&admin).await, EVERYTHING);
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reaped_consumer_that_binds_again_and_renews_is_watched_afresh() {
    let (_cluster, admin) = provider().await;
    let first = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    let mut reaper = Running::start(&admin, options(false, false));
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name: first.clone() });

    // Re-bound long after: the stale Lease alone does not reap the new Grant...
    tokio::time::sleep(3 * TTL).await;
    let again = grant(&admin, "token:alice", SILENT, &[]).await;
    tokio::time::sleep(3 * TTL).await;
    assert!(grant_exists(&admin, &again).await);
    // ...its konnector renewing and then stopping does, a TTL after the last renewal.
    renew(&admin, SILENT, Timestamp::from_second(1_767_230_000).unwrap()).await;
    let renewed = tokio::time::Instant::now();
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name: again });
    assert!(tokio::time::Instant::now() - renewed >= TTL);
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_the_broken_watch_missed_is_seen_before_anything_is_deleted() {
    let (cluster, admin) = provider().await;
    let name = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    let mut reaper = Running::start(&admin, options(false, false));
    tokio::time::sleep(Duration::from_secs(60)).await;

    // The watch breaks and stays broken; the consumer renews shortly before the TTL is up.
    cluster.inject_error(ErrorRule::new(Some("watch"), Some("leases"), InjectedError::Internal));
    cluster.drop_watches();
    tokio::time::sleep(TTL - Duration::from_secs(120)).await;
    renew(&admin, SILENT, Timestamp::from_second(1_767_226_200).unwrap()).await;
    let renewed = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        grant_exists(&admin, &name).await,
        "reaped although the Lease was renewed"
    );
    assert_eq!(reaper.drain(), []);

    // The renewal the reaper read itself starts the next TTL.
    cluster.clear_errors();
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name });
    assert!(tokio::time::Instant::now() - renewed >= TTL);
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reap_the_provider_refuses_is_retried_until_it_succeeds() {
    let (cluster, admin) = provider().await;
    let name = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    cluster.inject_error(ErrorRule::new(Some("delete"), Some("grants"), InjectedError::Forbidden).times(3));
    let mut reaper = Running::start(&admin, options(false, false));
    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: name.clone() });
    assert!(!grant_exists(&admin, &name).await);
    reaper.stop().await;
}
