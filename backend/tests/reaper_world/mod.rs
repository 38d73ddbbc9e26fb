//! The world the reaper tests share: a fake provider with the backend's CRDs and an Export of two
//! APIs, Grants, heartbeat Leases, synced objects, claimed namespaces, and a running reaper whose
//! actions a test reads.

#![allow(dead_code)]

pub mod chart;

use std::sync::Arc;
use std::time::Duration;

use fakeapi::FakeCluster;
use jiff::{SignedDuration, Timestamp};
use kbind_backend::reaper::{Action, Options, Reaper, Target};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams, TokioClock, to_dynamic,
};
use serde_json::{Value, json};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub const SEED: u64 = 14;
pub const TTL: Duration = Duration::from_secs(600);
pub const RENEW_EVERY: Duration = Duration::from_secs(30);
pub const LEASE_NS: &str = "kbind";
/// A consumer that keeps renewing.
pub const LIVE: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
/// A consumer that stopped.
pub const SILENT: &str = "5d0e7a2c-1b3f-4a5e-8c6d-9e0f1a2b3c4d";
/// A consumer of another identity.
pub const OTHER: &str = "9a8b7c6d-5e4f-4a3b-9c2d-1e0f9a8b7c6d";

pub fn res(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
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

pub fn crds() -> ApiResource {
    res(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}
pub fn leases() -> ApiResource {
    res("coordination.k8s.io", "v1", "Lease", "leases")
}
pub fn namespaces() -> ApiResource {
    res("", "v1", "Namespace", "namespaces")
}
pub fn configmaps() -> ApiResource {
    res("", "v1", "ConfigMap", "configmaps")
}
pub fn grants() -> ApiResource {
    ApiResource::erase::<kbind_api::Grant>(&())
}
pub fn exports() -> ApiResource {
    ApiResource::erase::<kbind_api::Export>(&())
}
pub fn widgets() -> ApiResource {
    res("example.org", "v1", "Widget", "widgets")
}
pub fn gadgets() -> ApiResource {
    res("example.org", "v1", "Gadget", "gadgets")
}

pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// The wall time the reaper's clock starts at: a year away from the provider's, to show that
/// only durations it observed itself matter.
pub fn reaper_clock() -> Arc<TokioClock> {
    Arc::new(TokioClock::starting_at(Timestamp::from_second(1_798_761_600).unwrap()))
}

/// A provider with the backend's CRDs, two Export APIs (namespaced widgets, cluster-scoped
/// gadgets), the Export `widgets`, and the lease namespace.
pub async fn provider() -> (FakeCluster, Arc<dyn ClusterClient>) {
    let cluster = FakeCluster::builder("provider").seed(SEED).build();
    let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
    let backend: Vec<Value> = kbind_api::backend_crds()
        .into_iter()
        .map(|mut crd| {
            // The apiserver defaults these; fakeapi's establishing controller compares them.
            let names = &mut crd.spec.names;
            names.list_kind.get_or_insert_with(|| format!("{}List", names.kind));
            names.singular.get_or_insert_with(|| names.kind.to_lowercase());
            serde_json::to_value(to_dynamic(&crd).unwrap()).unwrap()
        })
        .collect();
    install_crds(&admin, &backend).await;
    create_namespace(&admin, LEASE_NS, json!({}), json!({})).await;
    install_export(&admin).await;
    (cluster, admin)
}

/// Creates `all` and waits until each is Established.
pub async fn install_crds(admin: &Arc<dyn ClusterClient>, all: &[Value]) {
    for crd in all {
        admin
            .create(&crds(), None, &object(crd.clone()), &PostParams::default())
            .await
            .unwrap();
    }
    for crd in all {
        let name = crd["metadata"]["name"].as_str().unwrap();
        eventually(&format!("{name} Established"), || async {
            let got = serde_json::to_value(admin.get(&crds(), None, name).await.unwrap()).unwrap();
            got["status"]["conditions"]
                .as_array()
                .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
        })
        .await;
    }
}

/// The exported example APIs and the Export `widgets` offering both.
pub async fn install_export(admin: &Arc<dyn ClusterClient>) {
    install_crds(
        admin,
        &[
            example_crd("Widget", "widgets", "Namespaced"),
            example_crd("Gadget", "gadgets", "Cluster"),
        ],
    )
    .await;
    let export = object(json!({
        "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export",
        "metadata": {"name": "widgets"},
        "spec": {"title": "Widgets", "apis": [{"name": "widgets.example.org"}, {"name": "gadgets.example.org"}]},
    }));
    admin
        .create(&exports(), None, &export, &PostParams::default())
        .await
        .unwrap();
}

pub fn example_crd(kind: &str, plural: &str, scope: &str) -> Value {
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

pub async fn create_namespace(admin: &Arc<dyn ClusterClient>, name: &str, labels: Value, annotations: Value) {
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
pub async fn claimed_namespace(admin: &Arc<dyn ClusterClient>, name: &str, subject: &str) {
    create_namespace(
        admin,
        name,
        json!({"app.kubernetes.io/managed-by": "kbind-backend", "iam.kbind.io/claimed-by": "h"}),
        json!({"iam.kbind.io/claimed-by": subject}),
    )
    .await;
}

/// A Grant as the gateway creates it; returns its name.
pub async fn grant(admin: &Arc<dyn ClusterClient>, subject: &str, consumer: &str, namespaces: &[&str]) -> String {
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

pub async fn grant_exists(admin: &Arc<dyn ClusterClient>, name: &str) -> bool {
    admin.get_opt(&grants(), None, name).await.unwrap().is_some()
}

/// An object as a consumer's konnector syncs it: annotated with the consumer cluster UID.
pub async fn synced(
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
pub async fn alive(admin: &Arc<dyn ClusterClient>, res: &ApiResource, namespace: Option<&str>, name: &str) -> bool {
    admin
        .get_opt(res, namespace, name)
        .await
        .unwrap()
        .is_some_and(|o| o.metadata.deletion_timestamp.is_none())
}

pub fn micro_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string()
}

/// The heartbeat Lease as the issuer pre-creates it.
pub async fn lease(admin: &Arc<dyn ClusterClient>, consumer: &str) {
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
pub async fn renew(admin: &Arc<dyn ClusterClient>, consumer: &str, renew_time: Timestamp) {
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
pub fn heartbeat(
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

pub fn clock_now(clock: &TokioClock) -> Timestamp {
    kbind_cluster::Clock::now(clock)
}

/// A running reaper and what it reports.
pub struct Running {
    pub actions: mpsc::UnboundedReceiver<Action>,
    shutdown: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl Running {
    pub fn start(admin: &Arc<dyn ClusterClient>, opts: Options) -> Self {
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
    pub async fn next(&mut self, limit: Duration) -> Action {
        tokio::time::timeout(limit, self.actions.recv())
            .await
            .unwrap_or_else(|_| panic!("no reaper action within {limit:?} (seed {SEED})"))
            .expect("the reaper is running")
    }

    /// The actions reported so far, without waiting.
    pub fn drain(&mut self) -> Vec<Action> {
        std::iter::from_fn(|| self.actions.try_recv().ok()).collect()
    }

    /// Every action until (and with) the deletion of the Grant `last`.
    pub async fn until_grant(&mut self, last: &str, limit: Duration) -> Vec<Action> {
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

    pub async fn stop(self) {
        self.shutdown.cancel();
        self.task.await.unwrap();
    }
}

pub async fn eventually<F, Fut>(what: &str, mut check: F)
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

pub fn options(reap_objects: bool, report_only: bool) -> Options {
    Options {
        reap_ttl: TTL,
        reap_objects,
        report_only,
    }
}

/// Two consumers of alice (one silent, one live) and one of carol, with synced objects and
/// claimed namespaces; returns the silent consumer's Grant.
pub async fn world_with_objects(admin: &Arc<dyn ClusterClient>) -> String {
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
pub async fn survivors(admin: &Arc<dyn ClusterClient>) -> Vec<String> {
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

pub const EVERYTHING: [&str; 14] = [
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
