//! Turbulence costs only time, on real kube-apiservers. The `konnector` binary under the chart's
//! least-privilege RBAC, with TokenRequest-minted provider credentials, driven and checked only through the
//! Kubernetes API (and its own `/metrics` and log), with short timings through its flags
//! (`--heartbeat-interval 5s`, so failed provider requests are forgiven for a 10 s window — 15 s and 30 s in the
//! restart story —, and `--provider-request-timeout 3s`).
//!
//! - A claim that lasts: a refused Binding whose Connection, and then the serving side's, is partitioned
//!   and healed never takes the namespace over; the serving Binding keeps its `claimedAt`, its objects keep
//!   syncing and deleting. The twin of scenarios/tests/stories/claims.rs's first story.
//! - Throttled by API Priority and Fairness: the provider answers the konnector's requests 429
//!   with a `Retry-After` (`kbind_testenv::Throttle`). Shorter than the window, the provider stays engaged (the
//!   Connection and the binding never leave Ready, the Connection says its requests fail meanwhile); longer, it
//!   becomes `ProviderUnreachable` and recovers once the throttle is lifted.
//! - A black hole, over HTTP/2 and over HTTP/1.1 (`--disable-http2-serving`): `ProviderUnreachable`
//!   within one heartbeat interval (+10 % jitter), one window and a second of the hole opening, then Ready again once it
//!   closes. The fakeapi twin with short intervals is in e2e.rs.
//! - A kube-apiserver restart under churn with two providers: every consumer object ends on the right
//!   provider with its latest spec, nothing on the wrong one, no takeover, claims unchanged, and no copy of an
//!   object left untouched is written again.
//!
//! Skips like real_stories.rs without the Go-built binaries or helm, unless `KBIND_REQUIRE_REAL_K8S=1` /
//! `KBIND_REQUIRE_HELM=1`. The tests take turns (one lock). Each prints its measured times and the konnectors'
//! link timeline (engagements, failed requests, recoveries) relative to the fault.
//!
//! What real servers did differently from the fake world:
//! - APF: a PriorityLevelConfiguration with no concurrency (`nominalConcurrencyShares: 0`, nothing to lend or
//!   borrow, `Reject`) throttles nothing on its own: the apiserver still runs a level's request when none of
//!   that level is executing, so one client's requests one at a time all pass. The throttle therefore holds one
//!   request of that level open (kbind-testenv's throttle.rs). Its 429s carry a plain-text body, not a Status,
//!   and a `Retry-After` that starts at 1 s and grows with the rejections (2 s within a second of probing; up to
//!   32 s); the konnector reads it from the header and waits that long.
//! - HTTP/1.1: `GODEBUG=http2server=0` does not turn HTTP/2 off in kube-apiserver (it puts `h2` into its TLS
//!   config itself); `--disable-http2-serving` does. Checked with the konnector's own
//!   transport (the answer's version) and by the connections it holds through the proxy: 1 on HTTP/2, 4 on
//!   HTTP/1.1 (a watch each).
//! - Black hole: `ProviderUnreachable` within the bound (each run prints its time); Ready and synced within a
//!   second of it closing.
//! - A restarted kube-apiserver is ready again seconds after a kill. It serves requests for a moment (between
//!   "Serving securely" and "Caches are synced" in its log) before its informers have synced, and RBAC answers
//!   them 403. A create whose answer the kill lost is retried against a provider cache that has not seen it
//!   yet ("the provider object appeared before our create; classifying it again") until it converges, with no
//!   duplicate.
//! - Right after a CRD is Established the consumer's apiserver may answer "storage is (re)initializing" (a
//!   WARN "binding reconcile failed", retried); fakeapi serves a new CRD at once.

mod child;
mod real;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kbind_api::consts::{BINDING_NAMESPACES_ALL, annotation as kbind_annotation, condition, label, reason};
use kbind_cluster::{WatchEvent, WatchParams};
use kbind_testenv::ClusterOptions;
use parking_lot::Mutex;
use real::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

const API: &str = "widgets.example.org";
const PROVIDERS: [&str; 2] = ["acme", "beta"];

/// The konnector's heartbeat in these stories, and so the hysteresis window (twice it).
const HEARTBEAT: Duration = Duration::from_secs(5);
/// The flags that give the konnector [`HEARTBEAT`] and a 3 s provider request timeout.
const SHORT_TIMINGS: [&str; 2] = ["--heartbeat-interval=5s", "--provider-request-timeout=3s"];

fn window() -> Duration {
    HEARTBEAT * 2
}

/// The documented bound on noticing a provider that stopped answering: the next heartbeat (one interval plus
/// its 10 % jitter) and one window of retries.
fn unreachable_bound() -> Duration {
    HEARTBEAT.mul_f64(1.1) + window() + Duration::from_secs(1)
}

/// `", past the bound"` when `measured` is past the documented `bound` (plus 2 s for polling and status writes),
/// for the printed measurements: not an assertion (the machine is shared), but what to look at.
fn against(measured: Duration, bound: Duration) -> &'static str {
    if measured > bound + Duration::from_secs(2) {
        ", past the bound"
    } else {
        ""
    }
}

/// What a test allows for the documented bound: a generous multiple, as the machine is shared with builds and
/// other apiservers. The measured time is printed.
fn generous(bound: Duration) -> Duration {
    bound * 4 + Duration::from_secs(10)
}

fn connections() -> ApiResource {
    erase::<kbind_api::Connection>()
}

fn bindings() -> ApiResource {
    erase::<kbind_api::Binding>()
}

fn cluster_bindings() -> ApiResource {
    erase::<kbind_api::ClusterBinding>()
}

fn namespaces() -> ApiResource {
    erase::<k8s_openapi::api::core::v1::Namespace>()
}

fn condition_of(obj: &DynamicObject, type_: &str) -> Option<Condition> {
    conditions(obj).into_iter().find(|c| c.type_ == type_)
}

/// The per-API `Synced` condition of widgets on a binding: status, reason and message.
fn synced(binding: &DynamicObject) -> Option<(String, String, String)> {
    let apis = binding.data.pointer("/status/boundAPIs")?.as_array()?;
    let api = apis.iter().find(|a| a["name"] == API)?;
    let c = api["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == condition::SYNCED)?;
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("reason"), field("message")))
}

/// `status.boundAPIs[widgets].claimedAt` of a binding.
fn claimed_at(binding: &DynamicObject) -> Option<String> {
    let apis = binding.data.pointer("/status/boundAPIs")?.as_array()?;
    let api = apis.iter().find(|a| a["name"] == API)?;
    api["claimedAt"].as_str().map(str::to_string)
}

/// The `core.kbind.io/connection` label of a consumer object.
fn connection_label(obj: &DynamicObject) -> Option<&str> {
    obj.metadata.labels.as_ref()?.get(label::CONNECTION).map(String::as_str)
}

/// A Connection as a recorder sees it: `Ready`, and `Connected` with its reason and whether its message says
/// provider requests are failing.
fn connection_summary(conn: &DynamicObject) -> String {
    let ready = condition_of(conn, condition::READY).map_or("-".into(), |c| c.status);
    let connected = condition_of(conn, condition::CONNECTED);
    let faltering = connected
        .as_ref()
        .is_some_and(|c| c.message.contains("provider requests have failed since"));
    let connected = connected.map_or("-".into(), |c| format!("{}/{}", c.status, c.reason));
    let denied = condition_of(conn, condition::PERMISSION_DENIED)
        .filter(|c| c.status == "True")
        .map_or(String::new(), |c| format!(" PermissionDenied={}", c.reason));
    format!(
        "Ready={ready} Connected={connected}{}{denied}",
        if faltering { " faltering" } else { "" }
    )
}

/// A binding as a recorder sees it: `Ready` and the widgets API's `Synced`, each with its reason.
fn binding_summary(binding: &DynamicObject) -> String {
    let ready = condition_of(binding, condition::READY).map_or("-".into(), |c| format!("{}/{}", c.status, c.reason));
    let synced = synced(binding).map_or("-".into(), |(s, r, _)| format!("{s}/{r}"));
    format!("Ready={ready} Synced={synced}")
}

/// Polls `check` until it returns `Some`, or fails after `limit` with `what` and the konnectors' log.
async fn eventually_within<T>(
    what: &str,
    limit: Duration,
    lines: &Lines,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> T {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < limit,
            "timed out after {limit:?} waiting for {what}; konnector log:\n{}",
            dump(lines)
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Every state of the objects of one resource that a watch on the consumer saw, summarised, from its start until
/// it is dropped: what "never left Ready" is checked against (a watch sees every write; a poll may miss a short
/// one).
struct Recorder {
    seen: Arc<Mutex<Vec<(String, String)>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Recorder {
    async fn start(client: &KubeClusterClient, res: ApiResource, summary: fn(&DynamicObject) -> String) -> Self {
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let record = {
            let seen = seen.clone();
            move |obj: &DynamicObject, what: String| {
                let name = obj.metadata.name.clone().unwrap_or_default();
                let name = match &obj.metadata.namespace {
                    Some(ns) => format!("{ns}/{name}"),
                    None => name,
                };
                let mut seen = seen.lock();
                let last = seen.iter().rev().find(|(n, _)| *n == name).map(|(_, s)| s.clone());
                if last.as_ref() != Some(&what) {
                    seen.push((name, what));
                }
            }
        };
        let list = client.list(&res, None, &Default::default()).await.unwrap();
        for obj in &list.items {
            record(obj, summary(obj));
        }
        let mut version = list.metadata.resource_version.unwrap_or_default();
        let client = client.clone();
        let task = tokio::spawn(async move {
            loop {
                let params = WatchParams::default();
                if let Ok(mut events) = client.watch(&res, None, &params, &version).await {
                    while let Some(Ok(event)) = events.next().await {
                        match event {
                            WatchEvent::Added(obj) | WatchEvent::Modified(obj) => {
                                version = obj.metadata.resource_version.clone().unwrap_or_default();
                                record(&obj, summary(&obj));
                            }
                            WatchEvent::Deleted(obj) => {
                                version = obj.metadata.resource_version.clone().unwrap_or_default();
                                record(&obj, "deleted".into());
                            }
                            WatchEvent::Bookmark(b) => version = b.metadata.resource_version,
                            WatchEvent::Error(_) => break,
                        }
                    }
                }
                // The watch ended (a timeout, a compaction): a list records where things stand and goes on.
                tokio::time::sleep(POLL).await;
                if let Ok(list) = client.list(&res, None, &Default::default()).await {
                    for obj in &list.items {
                        record(obj, summary(obj));
                    }
                    version = list.metadata.resource_version.unwrap_or_default();
                }
            }
        });
        Self { seen, task }
    }

    /// What was seen of `name` (`namespace/name` when namespaced), in order, each state once per change.
    fn of(&self, name: &str) -> Vec<String> {
        self.seen
            .lock()
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, s)| s.clone())
            .collect()
    }
}

impl Drop for Recorder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A plain HTTP/1.1 GET of the konnector's `/metrics`: the body of a 200 answer.
async fn scrape(konnector: &Konnector) -> Option<String> {
    let addr = konnector.metrics;
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the series `series` (name and labels) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Whether a konnector logged `message` (its JSON `message` field).
fn logged(lines: &Lines, message: &str) -> bool {
    lines
        .lock()
        .iter()
        .filter_map(|l| l.split_once("] "))
        .filter_map(|(_, text)| serde_json::from_str::<Value>(text).ok())
        .any(|json| json["message"] == message)
}

/// Prints the konnectors' log lines about provider links (engagement, failed requests, recovery) with their
/// time since `since`, the timeline behind each story's measured times, then how often each warning and error
/// was logged.
fn timeline(story: &str, lines: &Lines, since: jiff::Timestamp) {
    const LINK: [&str; 5] = [
        "engaged provider",
        "disengaged provider",
        "a provider request failed; the provider stays engaged",
        "the provider link failed",
        "the provider answers again; it stayed engaged",
    ];
    let mut warnings = BTreeMap::<String, usize>::new();
    for line in lines.lock().iter() {
        let Some((_, text)) = line.split_once("] ") else {
            continue;
        };
        let Ok(json) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let message = json["message"].as_str().unwrap_or_default();
        let level = json["level"].as_str().unwrap_or_default();
        if level == "WARN" || level == "ERROR" {
            let detail = json["error"].as_str().unwrap_or_default();
            *warnings.entry(format!("{level} {message}: {detail}")).or_default() += 1;
        }
        if LINK.contains(&message) {
            let at = json["timestamp"]
                .as_str()
                .and_then(|t| t.parse::<jiff::Timestamp>().ok())
                .map_or("?".into(), |t| {
                    format!("{:+.1}s", t.duration_since(since).as_secs_f64())
                });
            eprintln!(
                "{story}: {at} {} {message} {} {}",
                json["connection"].as_str().unwrap_or_default(),
                json["error"].as_str().unwrap_or_default(),
                json["reason"].as_str().unwrap_or_default()
            );
        }
    }
    for (what, count) in warnings {
        eprintln!("{story}: {count}x {what}");
    }
}

/// The HTTP version the konnector's own transport (`KubeClusterClient`, HTTP/2 offered by ALPN) gets from the
/// server a provider kubeconfig names.
async fn negotiated_version(provider_kubeconfig: &str) -> http::Version {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(provider_kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    let client = KubeClusterClient::from_config(config).unwrap();
    let request = http::Request::get("/version")
        .body(kube::client::Body::from(Vec::<u8>::new()))
        .unwrap();
    let response = client.client().send(request).await.unwrap();
    assert!(response.status().is_success(), "GET /version: {}", response.status());
    response.version()
}

// ---------------------------------------------------------------------------------------------------------------
// Two providers, acme and beta, for one consumer.

/// The provider admin's part for one consumer: export widgets, a ServiceAccount bound to the demo's
/// least-privilege ClusterRole, and an inline kubeconfig naming `server` with its TokenRequest-minted token.
async fn prepare(cluster: &Cluster, server: &str, lines: &Lines) -> String {
    let admin = client_as(cluster, User::Admin).await;
    create(&admin, widgets_crd()).await;
    create(&admin, namespace(PROVIDER_ACCOUNTS)).await;
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "consumer-1", "namespace": PROVIDER_ACCOUNTS}}),
    )
    .await;
    for (res, mut rbac) in provider_rbac() {
        if rbac["kind"] == "ClusterRoleBinding" {
            rbac["subjects"] = json!([provider_subject(1)]);
        }
        admin
            .create(&res, None, &object(rbac), &PostParams::default())
            .await
            .unwrap();
    }
    served(&admin, &widgets(), lines).await;
    let token = service_account_token(cluster, PROVIDER_ACCOUNTS, "consumer-1").await;
    inline_kubeconfig_at(cluster, server, "consumer-1", &token)
}

/// Two providers (acme = cluster 0, beta = 1) and a consumer (2) with the chart installed, a Secret and a
/// Connection per provider, namespaces team-a and team-b; no binding and no konnector yet.
struct Providers {
    // Why this order: fields drop in order, so the clients and proxies go before the servers.
    consumer: Consumer,
    acme: KubeClusterClient,
    beta: KubeClusterClient,
    /// acme's and beta's proxies, when the Connections go through [`FaultProxy`]s.
    proxies: Vec<FaultProxy>,
    lines: Lines,
    _dir: tempfile::TempDir,
    env: TestEnv,
    started: std::time::Instant,
    name: &'static str,
}

impl Providers {
    /// Starts the clusters; acme's Connection may bind in `acme_namespaces` (the `binding-namespaces`
    /// annotation), beta's anywhere. With `behind_proxies` each Connection names a [`FaultProxy`].
    async fn start(name: &'static str, behind_proxies: bool, acme_namespaces: &str) -> Option<Self> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let env = TestEnv::start_or_skip(3).await.unwrap()?;
        eprintln!("{name}: 3 clusters ready in {:.1?}", env.startup_time());
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        let mut proxies = Vec::new();
        let mut kubeconfigs = Vec::new();
        for index in 0..2 {
            let cluster = env.cluster(index);
            let server = if behind_proxies {
                let proxy = FaultProxy::start(apiserver_addr(cluster)).await.unwrap();
                let server = proxy.server();
                proxies.push(proxy);
                server
            } else {
                cluster.server()
            };
            kubeconfigs.push(prepare(cluster, &server, &lines).await);
        }
        let consumer = Consumer::install_chart(env.cluster(2), &chart, dir.path(), &lines).await;
        for ns in ["team-a", "team-b"] {
            create(&consumer.admin, namespace(ns)).await;
        }
        for (provider, kubeconfig) in PROVIDERS.into_iter().zip(kubeconfigs) {
            let allowed = if provider == "acme" {
                acme_namespaces
            } else {
                BINDING_NAMESPACES_ALL
            };
            create(
                &consumer.admin,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": provider, "namespace": NAMESPACE},
                       "stringData": {"kubeconfig": kubeconfig}}),
            )
            .await;
            create(
                &consumer.admin,
                json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
                       "metadata": {"name": provider,
                                    "annotations": {kbind_annotation::BINDING_NAMESPACES: allowed}},
                       "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": provider, "key": "kubeconfig"}}}),
            )
            .await;
        }
        let acme = client_as(env.cluster(0), User::Admin).await;
        let beta = client_as(env.cluster(1), User::Admin).await;
        Some(Self {
            consumer,
            acme,
            beta,
            proxies,
            lines,
            _dir: dir,
            env,
            started,
            name,
        })
    }

    /// Starts a konnector with `extra` flags and waits until both Connections are Ready.
    async fn konnector(&self, identity: &str, extra: &[&str]) -> Konnector {
        let konnector = Konnector::start(&self.consumer.kubeconfig, identity, extra, self.lines.clone()).await;
        for provider in PROVIDERS {
            self.wait_connection(provider, true).await;
        }
        konnector
    }

    fn provider(&self, provider: &str) -> &KubeClusterClient {
        match provider {
            "acme" => &self.acme,
            "beta" => &self.beta,
            other => panic!("no provider {other}"),
        }
    }

    fn proxy(&self, provider: &str) -> &FaultProxy {
        let index = PROVIDERS.iter().position(|p| *p == provider).expect("a provider");
        &self.proxies[index]
    }

    async fn connection(&self, name: &str) -> Option<DynamicObject> {
        self.consumer.admin.get_opt(&connections(), None, name).await.ok()?
    }

    /// Waits until Connection `name` is Ready (`ready`) or `Ready=False`.
    async fn wait_connection(&self, name: &str, ready: bool) {
        let want = if ready { "True" } else { "False" };
        eventually(&format!("Connection {name} Ready={want}"), &self.lines, async || {
            let conn = self.connection(name).await?;
            has_condition(&conn, condition::READY, want).then_some(())
        })
        .await;
    }

    /// Sets Connection `name`'s `binding-namespaces` annotation.
    async fn allow(&self, name: &str, namespaces: &str) {
        self.consumer
            .admin
            .patch(
                &connections(),
                None,
                name,
                &Patch::Merge(json!({"metadata": {"annotations": {kbind_annotation::BINDING_NAMESPACES: namespaces}}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
    }

    /// Creates Binding `ns/name` of widgets through `connection`.
    async fn bind(&self, connection: &str, ns: &str, name: &str) {
        create(
            &self.consumer.admin,
            json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
                   "metadata": {"name": name, "namespace": ns},
                   "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}}),
        )
        .await;
    }

    async fn binding(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.consumer.admin.get_opt(&bindings(), Some(ns), name).await.ok()?
    }

    /// Waits until the widgets `Synced` condition of Binding `ns/name` has `reason`; its message.
    async fn wait_synced_reason(&self, ns: &str, name: &str, reason: &str) -> String {
        eventually(
            &format!("{ns}/{name}: Synced reason {reason}"),
            &self.lines,
            async || {
                let (_, r, message) = synced(&self.binding(ns, name).await?)?;
                (r == reason).then_some(message)
            },
        )
        .await
    }

    /// Waits until Binding `ns/name` is `Ready=True` and its widgets `Synced=True`.
    async fn wait_serving(&self, ns: &str, name: &str) {
        eventually(&format!("{ns}/{name} serving widgets"), &self.lines, async || {
            let b = self.binding(ns, name).await?;
            let (status, _, _) = synced(&b)?;
            (status == "True" && has_condition(&b, condition::READY, "True")).then_some(())
        })
        .await;
    }

    async fn create_widget(&self, ns: &str, name: &str, size: i64) -> DynamicObject {
        let mut w = widget(name, size);
        w["metadata"]["namespace"] = json!(ns);
        create(&self.consumer.admin, w).await
    }

    async fn widget(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.consumer.admin.get_opt(&widgets(), Some(ns), name).await.unwrap()
    }

    /// Waits for `provider`'s copy of `ns/name`.
    async fn copy(&self, provider: &str, ns: &str, name: &str) -> DynamicObject {
        eventually(&format!("{ns}/{name} on {provider}"), &self.lines, async || {
            self.provider(provider).get_opt(&widgets(), Some(ns), name).await.ok()?
        })
        .await
    }

    /// The widgets of `ns` on `client` by name, `None` if the list fails.
    async fn widgets_in(client: &KubeClusterClient, ns: &str) -> Option<BTreeMap<String, DynamicObject>> {
        let list = client.list(&widgets(), Some(ns), &Default::default()).await.ok()?;
        Some(
            list.items
                .into_iter()
                .map(|w| (w.metadata.name.clone().unwrap_or_default(), w))
                .collect(),
        )
    }

    /// Resizes consumer widget `ns/name` and waits until `provider`'s copy has the new size.
    async fn resize_and_wait(&self, provider: &str, ns: &str, name: &str, size: i64) {
        self.consumer
            .admin
            .patch(
                &widgets(),
                Some(ns),
                name,
                &Patch::Merge(json!({"spec": {"size": size}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        let copies = self.provider(provider);
        eventually(&format!("{ns}/{name} resized on {provider}"), &self.lines, async || {
            let copy = copies.get_opt(&widgets(), Some(ns), name).await.ok()??;
            (copy.data.pointer("/spec/size") == Some(&json!(size))).then_some(())
        })
        .await;
    }

    /// Partitions `provider`'s proxy until its Connection is not Ready, then heals it until it is again.
    async fn blink(&self, provider: &str) {
        let proxy = self.proxy(provider);
        proxy.partition();
        let cut = std::time::Instant::now();
        self.wait_connection(provider, false).await;
        let down = cut.elapsed();
        proxy.heal();
        let healed = std::time::Instant::now();
        self.wait_connection(provider, true).await;
        eprintln!(
            "{}: {provider} not Ready {down:.1?} after the partition (documented bound {:.1?}{}), Ready {:.1?} after \
             the heal",
            self.name,
            unreachable_bound(),
            against(down, unreachable_bound()),
            healed.elapsed()
        );
    }
}

impl Drop for Providers {
    fn drop(&mut self) {
        eprintln!("{}: finished in {:.1?}", self.name, self.started.elapsed());
    }
}

// ---------------------------------------------------------------------------------------------------------------
// 1. A claim that lasts.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_binding_whose_connection_blinks_never_takes_over_on_real_servers() {
    let _turn = SERIAL.lock().await;
    let Some(world) = Providers::start("claim_lasts", true, "team-z").await else {
        return;
    };
    let lines = world.lines.clone();
    let _konnector = world.konnector("claims", &SHORT_TIMINGS).await;

    // acme may not bind team-a yet: its Binding, created first, is refused.
    world.bind("acme", "team-a", "widgets-us").await;
    world
        .wait_synced_reason("team-a", "widgets-us", reason::NAMESPACE_NOT_ALLOWED)
        .await;
    // beta binds team-a and serves it; a widget syncs there.
    world.bind("beta", "team-a", "widgets-eu").await;
    world.wait_serving("team-a", "widgets-eu").await;
    served(&world.consumer.admin, &widgets(), &lines).await;
    let w = world.create_widget("team-a", "w", 1).await;
    world.copy("beta", "team-a", "w").await;
    let claim = claimed_at(&world.binding("team-a", "widgets-eu").await.unwrap());
    assert!(claim.is_some(), "the serving binding records its claim");
    // acme is allowed team-a: its older Binding is refused, the claim stands.
    world.allow("acme", BINDING_NAMESPACES_ALL).await;
    let message = world
        .wait_synced_reason("team-a", "widgets-us", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    assert!(message.contains("\"beta\""), "the refusal names beta: {message}");
    assert_eq!(claimed_at(&world.binding("team-a", "widgets-us").await.unwrap()), None);

    // Both sides blink, the refused one first, while a watch records every state of both Bindings.
    let recorder = Recorder::start(&world.consumer.admin, bindings(), binding_summary).await;
    let blinked_at = jiff::Timestamp::now();
    world.blink("acme").await;
    world.blink("beta").await;
    world.wait_serving("team-a", "widgets-eu").await;

    // Nothing moved: widgets-us is refused, widgets-eu serves with the same claim, w is beta's and syncs.
    let us = world.binding("team-a", "widgets-us").await.unwrap();
    assert_eq!(
        synced(&us).map(|s| s.1).as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "the refused binding never takes over"
    );
    assert_eq!(claimed_at(&us), None, "the refused binding claims nothing");
    let eu = world.binding("team-a", "widgets-eu").await.unwrap();
    assert_eq!(synced(&eu).map(|s| s.0).as_deref(), Some("True"));
    assert_eq!(claimed_at(&eu), claim, "the claim is unchanged");
    let states = recorder.of("team-a/widgets-us");
    eprintln!("claim_lasts: widgets-us through both blinks: {states:?}");
    eprintln!(
        "claim_lasts: widgets-eu through both blinks: {:?}",
        recorder.of("team-a/widgets-eu")
    );
    assert!(
        states.iter().all(|s| !s.contains("Synced=True")),
        "widgets-us never served team-a: {states:?}"
    );
    let mine = world.widget("team-a", "w").await.unwrap();
    assert_eq!(connection_label(&mine), Some("beta"), "w names beta");
    assert_eq!(mine.metadata.uid, w.metadata.uid, "w is the same consumer object");
    assert!(
        Providers::widgets_in(&world.acme, "team-a").await.unwrap().is_empty(),
        "acme has no widget in team-a"
    );
    assert!(
        world
            .acme
            .get_opt(&namespaces(), None, "team-a")
            .await
            .unwrap()
            .is_none(),
        "nothing was ever written to team-a on acme (its namespace was never made)"
    );

    world.resize_and_wait("beta", "team-a", "w", 7).await;
    world
        .consumer
        .admin
        .delete(&widgets(), Some("team-a"), "w", &DeleteParams::default())
        .await
        .unwrap();
    eventually("deleting w completes", &lines, async || {
        let mine = world
            .consumer
            .admin
            .get_opt(&widgets(), Some("team-a"), "w")
            .await
            .ok()?;
        mine.is_none().then_some(())
    })
    .await;
    assert!(
        world
            .beta
            .get_opt(&widgets(), Some("team-a"), "w")
            .await
            .unwrap()
            .is_none(),
        "beta's copy went with it"
    );
    assert!(Providers::widgets_in(&world.acme, "team-a").await.unwrap().is_empty());
    timeline("claim_lasts", &lines, blinked_at);
}

// ---------------------------------------------------------------------------------------------------------------
// 2. Throttled by API Priority and Fairness.

/// The konnector's ServiceAccount on the provider, as a FlowSchema subject.
fn flow_subject() -> Value {
    json!({"kind": "ServiceAccount", "serviceAccount": {"namespace": PROVIDER_ACCOUNTS, "name": "consumer-1"}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_provider_stays_engaged_within_the_window_and_is_given_up_after_it() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("throttle", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let konnector = Konnector::start(&consumer.kubeconfig, "throttle", &SHORT_TIMINGS, lines.clone()).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("w", 1).await;
    world.copy_where("the copy on the provider", "w", |_| true).await;
    let conn_states = Recorder::start(&consumer.admin, connections(), connection_summary).await;
    let binding_states = Recorder::start(&consumer.admin, cluster_bindings(), binding_summary).await;

    // A throttle shorter than the window: the provider stays engaged.
    let throttle = world
        .provider_cluster()
        .throttle("konnector", vec![flow_subject()])
        .await
        .unwrap();
    let throttled_at = std::time::Instant::now();
    let first_throttle = jiff::Timestamp::now();
    eprintln!("throttle: in force, Retry-After {:?}", throttle.retry_after());
    consumer.resize_widget("w", 2).await;
    let message = eventually_within(
        "the Connection to say its requests fail",
        generous(HEARTBEAT.mul_f64(1.1)),
        &lines,
        async || {
            let conn = consumer.admin.get_opt(&connections(), None, "provider").await.ok()??;
            let connected = condition_of(&conn, condition::CONNECTED)?;
            connected
                .message
                .contains("provider requests have failed since")
                .then_some(connected.message)
        },
    )
    .await;
    let faltering_after = throttled_at.elapsed();
    eprintln!("throttle: faltering {faltering_after:.1?} after the throttle: {message}");
    assert!(message.contains("throttles"), "the cause is named: {message}");
    // Held until a retry failed too (two failures in a row), well inside the window.
    eventually_within("a second failed request", window(), &lines, async || {
        let text = scrape(&konnector).await?;
        let failures = sample(&text, "kbind_provider_failed_requests{connection=\"provider\"}")?;
        (failures >= 2.0).then_some(())
    })
    .await;
    throttle.lift().await.unwrap();
    let held = throttled_at.elapsed();
    eventually_within(
        "the Connection to say it is connected again",
        generous(window()),
        &lines,
        async || {
            let conn = consumer.admin.get_opt(&connections(), None, "provider").await.ok()??;
            let connected = condition_of(&conn, condition::CONNECTED)?;
            (connected.status == "True" && !connected.message.contains("have failed since")).then_some(())
        },
    )
    .await;
    eprintln!(
        "throttle: held {held:.1?} ({:.1?} of it faltering); connected again {:.1?} after the lift",
        held - faltering_after,
        throttled_at.elapsed() - held
    );
    world
        .copy_where("the resize made during the throttle", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(2))
        })
        .await;
    consumer.resize_widget("w", 3).await;
    world
        .copy_where("a resize after the throttle", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(3))
        })
        .await;
    let conn_seen = conn_states.of("provider");
    let binding_seen = binding_states.of("widgets");
    eprintln!("throttle: the Connection went through {conn_seen:?}");
    eprintln!("throttle: the ClusterBinding went through {binding_seen:?}");
    assert!(
        conn_seen.iter().all(|s| s.starts_with("Ready=True")),
        "the Connection never left Ready: {conn_seen:?}"
    );
    assert!(
        conn_seen.iter().any(|s| s.ends_with("faltering")),
        "the Connection said its requests failed: {conn_seen:?}"
    );
    assert!(
        binding_seen.iter().all(|s| s.starts_with("Ready=True")),
        "the binding never left Ready: {binding_seen:?}"
    );
    assert!(logged(&lines, "a provider request failed; the provider stays engaged"));
    assert!(logged(&lines, "the provider answers again; it stayed engaged"));
    drop(conn_states);

    // A throttle longer than the window: the provider is given up, and taken back once it answers.
    let throttle = world
        .provider_cluster()
        .throttle("konnector", vec![flow_subject()])
        .await
        .unwrap();
    let throttled_at = std::time::Instant::now();
    eventually_within(
        "Connected=False/ProviderUnreachable",
        generous(unreachable_bound()),
        &lines,
        async || {
            let conn = consumer.admin.get_opt(&connections(), None, "provider").await.ok()??;
            let connected = condition_of(&conn, condition::CONNECTED)?;
            (connected.status == "False" && connected.reason == reason::PROVIDER_UNREACHABLE).then_some(())
        },
    )
    .await;
    let given_up = throttled_at.elapsed();
    eprintln!(
        "throttle: ProviderUnreachable {given_up:.1?} after a longer throttle (documented bound {:.1?}{})",
        unreachable_bound(),
        against(given_up, unreachable_bound())
    );
    consumer.resize_widget("w", 4).await;
    throttle.lift().await.unwrap();
    let lifted = std::time::Instant::now();
    consumer.wait_ready(&lines).await;
    world
        .copy_where("the resize made while given up", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(4))
        })
        .await;
    eprintln!("throttle: Ready and synced {:.1?} after the lift", lifted.elapsed());
    consumer.resize_widget("w", 5).await;
    world
        .copy_where("a resize after recovery", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(5))
        })
        .await;
    timeline("throttle", &lines, first_throttle);
}

// ---------------------------------------------------------------------------------------------------------------
// 3. A black hole, over HTTP/2 and over HTTP/1.1.

/// The provider behind a proxy that turns into a black hole: `ProviderUnreachable` within the documented bound of
/// the hole opening (a generous multiple is the test's deadline; the time is printed), Ready again once it closes.
async fn black_hole_story(name: &'static str, provider: ClusterOptions, version: http::Version) {
    let _turn = SERIAL.lock().await;
    let Some((world, proxy)) = World::start_behind_proxy_with(name, &["Fail"], provider).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = Konnector::start(&consumer.kubeconfig, name, &SHORT_TIMINGS, lines.clone()).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("w", 1).await;
    world.copy_where("the copy on the provider", "w", |_| true).await;
    let open = proxy.open_connections();
    let negotiated = negotiated_version(&world.provider_kubeconfigs[0]).await;
    eprintln!("{name}: the konnector's transport gets {negotiated:?}; it holds {open} connection(s) to the provider");
    assert_eq!(negotiated, version, "the provider speaks the protocol under test");
    if version == http::Version::HTTP_11 {
        // Each open watch holds a connection of its own on HTTP/1.1 (on HTTP/2 they share one).
        assert!(open > 1, "HTTP/1.1: a connection per watch, found {open}");
    }

    proxy.black_hole();
    let opened = std::time::Instant::now();
    let opened_at = jiff::Timestamp::now();
    eventually_within(
        "Connected=False/ProviderUnreachable",
        generous(unreachable_bound()),
        &lines,
        async || {
            let conn = consumer.admin.get_opt(&connections(), None, "provider").await.ok()??;
            let connected = condition_of(&conn, condition::CONNECTED)?;
            (connected.status == "False" && connected.reason == reason::PROVIDER_UNREACHABLE).then_some(())
        },
    )
    .await;
    let noticed = opened.elapsed();
    eprintln!(
        "{name}: ProviderUnreachable {noticed:.1?} after the black hole opened (documented bound {:.1?}{})",
        unreachable_bound(),
        against(noticed, unreachable_bound())
    );
    consumer.resize_widget("w", 2).await;

    proxy.lift_black_hole();
    let lifted = std::time::Instant::now();
    consumer.wait_ready(&lines).await;
    world
        .copy_where("the resize made in the black hole", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(2))
        })
        .await;
    eprintln!(
        "{name}: Ready and synced {:.1?} after the hole closed",
        lifted.elapsed()
    );
    consumer.resize_widget("w", 3).await;
    world
        .copy_where("a resize after recovery", "w", |c| {
            c.data.pointer("/spec/size") == Some(&json!(3))
        })
        .await;
    timeline(name, &lines, opened_at);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_provider_over_http2_is_unreachable_within_the_bound_and_recovers() {
    black_hole_story("black_hole_h2", ClusterOptions::default(), http::Version::HTTP_2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_provider_over_http1_is_unreachable_within_the_bound_and_recovers() {
    black_hole_story(
        "black_hole_http1",
        ClusterOptions::default().http1_only(),
        http::Version::HTTP_11,
    )
    .await;
}

// ---------------------------------------------------------------------------------------------------------------
// 4. A kube-apiserver restart under churn with two providers.

/// What the churn did: the consumer widgets it left (namespace/name → size) and how many changes it made.
#[derive(Default)]
struct Churned {
    live: BTreeMap<(String, String), i64>,
}

/// Creates, resizes and deletes widgets `c-N` in team-a and team-b on the consumer until `stop`, one change at a
/// time; `made` counts them.
async fn churn(consumer: KubeClusterClient, stop: Arc<AtomicBool>, made: Arc<AtomicUsize>) -> Churned {
    let mut churned = Churned::default();
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let ns = if n.is_multiple_of(2) { "team-a" } else { "team-b" };
        let mine: Vec<String> = churned
            .live
            .keys()
            .filter(|(namespace, _)| namespace == ns)
            .map(|(_, name)| name.clone())
            .collect();
        // A fixed rotation: two creates, a resize, a create, a delete, a resize.
        match (n / 2) % 6 {
            2 | 5 if !mine.is_empty() => {
                let name = &mine[n % mine.len()];
                let size = n as i64;
                consumer
                    .patch(
                        &widgets(),
                        Some(ns),
                        name,
                        &Patch::Merge(json!({"spec": {"size": size}})),
                        &PatchParams::default(),
                    )
                    .await
                    .unwrap_or_else(|e| panic!("resizing {ns}/{name}: {e}"));
                churned.live.insert((ns.to_string(), name.clone()), size);
            }
            4 if !mine.is_empty() => {
                let name = &mine[n % mine.len()];
                consumer
                    .delete(&widgets(), Some(ns), name, &DeleteParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("deleting {ns}/{name}: {e}"));
                churned.live.remove(&(ns.to_string(), name.clone()));
            }
            _ => {
                let name = format!("c-{n}");
                let mut w = widget(&name, n as i64);
                w["metadata"]["namespace"] = json!(ns);
                consumer
                    .create(&widgets(), Some(ns), &object(w), &PostParams::default())
                    .await
                    .unwrap_or_else(|e| panic!("creating {ns}/{name}: {e}"));
                churned.live.insert((ns.to_string(), name), n as i64);
            }
        }
        made.fetch_add(1, Ordering::SeqCst);
        // Pacing, not synchronisation: the churn spreads over the restart instead of ending before it.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    churned
}

/// A provider copy as far as "written again" can tell: resourceVersion, generation and its managedFields.
fn fingerprint(copy: &DynamicObject) -> (Option<String>, Option<i64>, Value) {
    (
        copy.metadata.resource_version.clone(),
        copy.metadata.generation,
        serde_json::to_value(&copy.metadata.managed_fields).unwrap(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_apiserver_restarted_under_churn_loses_nothing_and_moves_nothing() {
    let _turn = SERIAL.lock().await;
    let Some(mut world) = Providers::start("restart_under_churn", false, BINDING_NAMESPACES_ALL).await else {
        return;
    };
    let lines = world.lines.clone();
    // A 15 s heartbeat: a 30 s window, far longer than a restart takes even on a loaded machine.
    let heartbeat = Duration::from_secs(15);
    let _konnector = world
        .konnector(
            "restart",
            &["--heartbeat-interval=15s", "--provider-request-timeout=3s"],
        )
        .await;
    world.bind("acme", "team-a", "widgets").await;
    world.wait_serving("team-a", "widgets").await;
    world.bind("beta", "team-b", "widgets").await;
    world.wait_serving("team-b", "widgets").await;
    // A rival for team-a through beta, refused: it must still be refused after acme's restart.
    world.bind("beta", "team-a", "widgets-rival").await;
    world
        .wait_synced_reason("team-a", "widgets-rival", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    served(&world.consumer.admin, &widgets(), &lines).await;
    let home = [("team-a", "acme"), ("team-b", "beta")];

    // Widgets the churn never touches, and what their copies look like before the restart.
    for (ns, _) in home {
        for i in 0..4 {
            world.create_widget(ns, &format!("u-{i}"), i).await;
        }
    }
    let mut untouched = BTreeMap::new();
    for (ns, provider) in home {
        for i in 0..4 {
            let name = format!("u-{i}");
            let copy = world.copy(provider, ns, &name).await;
            untouched.insert((ns, name), fingerprint(&copy));
        }
    }
    // Settled: the copies do not change any more before the restart (a late write is not the restart's).
    eventually("the untouched copies settled", &lines, async || {
        for ((ns, name), before) in &untouched {
            let provider = if *ns == "team-a" { &world.acme } else { &world.beta };
            let copy = provider.get_opt(&widgets(), Some(ns), name).await.ok()??;
            if &fingerprint(&copy) != before {
                return None;
            }
        }
        Some(())
    })
    .await;
    let claims: Vec<Option<String>> = {
        let mut claims = Vec::new();
        for (ns, _) in home {
            claims.push(claimed_at(&world.binding(ns, "widgets").await.unwrap()));
        }
        claims
    };
    assert!(
        claims.iter().all(Option::is_some),
        "both bindings hold claims: {claims:?}"
    );
    let conn_states = Recorder::start(&world.consumer.admin, connections(), connection_summary).await;
    let binding_states = Recorder::start(&world.consumer.admin, bindings(), binding_summary).await;

    let stop = Arc::new(AtomicBool::new(false));
    let made = Arc::new(AtomicUsize::new(0));
    let churning = tokio::spawn(churn(world.consumer.admin.clone(), stop.clone(), made.clone()));
    eventually("the churn under way", &lines, async || {
        (made.load(Ordering::SeqCst) >= 20).then_some(())
    })
    .await;
    // The restart: killed, and started again once the konnector noticed (acme's requests fail), so the link's
    // faltering path is taken whatever the heartbeat's phase.
    let restarted = std::time::Instant::now();
    let restarted_at = jiff::Timestamp::now();
    world.env.stop_apiserver(0).unwrap();
    eventually_within(
        "acme's Connection to say its requests fail",
        generous(heartbeat.mul_f64(1.1)),
        &lines,
        async || {
            let conn = world.connection("acme").await?;
            let connected = condition_of(&conn, condition::CONNECTED)?;
            connected
                .message
                .contains("provider requests have failed since")
                .then_some(())
        },
    )
    .await;
    let noticed = restarted.elapsed();
    world.env.start_apiserver(0).await.unwrap();
    let gap = restarted.elapsed();
    let after = made.load(Ordering::SeqCst);
    eventually("the churn going on after the restart", &lines, async || {
        (made.load(Ordering::SeqCst) >= after + 20).then_some(())
    })
    .await;
    stop.store(true, Ordering::SeqCst);
    let churned = churning.await.unwrap();
    eprintln!(
        "restart: the konnector noticed {noticed:.1?} after the kill, acme's apiserver ready again {gap:.1?} after \
         it; {} changes, {} churned widgets left",
        made.load(Ordering::SeqCst),
        churned.live.len()
    );

    // Converged: on each provider exactly its namespace's live widgets (untouched and churned) with their latest
    // spec, nothing of the other namespace, and on the consumer nothing left terminating.
    let converged = std::time::Instant::now();
    eventually(
        "every widget on its provider with its latest spec",
        &lines,
        async || {
            for (ns, provider) in home {
                let mut want: BTreeMap<String, i64> = churned
                    .live
                    .iter()
                    .filter(|((namespace, _), _)| namespace == ns)
                    .map(|((_, name), size)| (name.clone(), *size))
                    .collect();
                for i in 0..4 {
                    want.insert(format!("u-{i}"), i);
                }
                let mine = Providers::widgets_in(&world.consumer.admin, ns).await?;
                let copies = Providers::widgets_in(world.provider(provider), ns).await?;
                let other = if provider == "acme" { &world.beta } else { &world.acme };
                let strays = Providers::widgets_in(other, ns).await?;
                let sizes = |objects: &BTreeMap<String, DynamicObject>| -> BTreeMap<String, i64> {
                    objects
                        .iter()
                        .filter_map(|(n, o)| Some((n.clone(), o.data.pointer("/spec/size")?.as_i64()?)))
                        .collect()
                };
                let settled = sizes(&mine) == want
                    && sizes(&copies) == want
                    && strays.is_empty()
                    && mine.values().all(|o| o.metadata.deletion_timestamp.is_none());
                if !settled {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    eprintln!("restart: converged {:.1?} after the churn stopped", converged.elapsed());
    let conn_seen = conn_states.of("acme");
    eprintln!("restart: acme's Connection went through {conn_seen:?}");
    let binding_seen = binding_states.of("team-a/widgets");
    eprintln!("restart: team-a/widgets went through {binding_seen:?}");

    // Nothing moved: each namespace is still served by its binding with the same claim, the rival is refused,
    // every consumer widget names its provider's Connection.
    for ((ns, provider), claim) in home.iter().zip(&claims) {
        world.wait_serving(ns, "widgets").await;
        let binding = world.binding(ns, "widgets").await.unwrap();
        assert_eq!(&claimed_at(&binding), claim, "{ns}: the claim is unchanged");
        for (name, mine) in Providers::widgets_in(&world.consumer.admin, ns).await.unwrap() {
            assert_eq!(connection_label(&mine), Some(*provider), "{ns}/{name} names {provider}");
        }
    }
    let rival = world.binding("team-a", "widgets-rival").await.unwrap();
    assert_eq!(
        synced(&rival).map(|s| s.1).as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "no takeover of team-a by the rival"
    );
    assert_eq!(claimed_at(&rival), None);
    // No copy of an untouched widget was written again, on the restarted provider or the other.
    let mut rewritten = Vec::new();
    for ((ns, name), before) in &untouched {
        let provider = if *ns == "team-a" { &world.acme } else { &world.beta };
        let copy = provider.get_opt(&widgets(), Some(ns), name).await.unwrap().unwrap();
        let now = fingerprint(&copy);
        if &now != before {
            rewritten.push(format!("{ns}/{name}: before {before:?}, after {now:?}"));
        }
    }
    timeline("restart", &lines, restarted_at);
    assert!(
        rewritten.is_empty(),
        "copies of untouched widgets were written again:\n{}",
        rewritten.join("\n")
    );
    // A kube-apiserver that has just started serves requests a moment (~0.3 s measured) before its informers have
    // synced, and RBAC denies them: 403. That must cost only time too: no disengage, no Ready=False, whenever a
    // request lands in that moment.
    let disengaged = lines.lock().iter().any(|l| {
        l.split_once("] ")
            .and_then(|(_, text)| serde_json::from_str::<Value>(text).ok())
            .is_some_and(|json| json["message"] == "disengaged provider" && json["connection"] == "acme")
    });
    let all_ready = |states: &[String]| states.iter().all(|s| s.starts_with("Ready=True"));
    assert!(
        gap >= heartbeat || (!disengaged && all_ready(&conn_seen) && all_ready(&binding_seen)),
        "a restart shorter than the window keeps acme engaged and its Connection and Binding Ready: restarted in \
         {gap:.1?} (window {:.0?}); disengaged: {disengaged}; acme's Connection went through {conn_seen:?}; \
         team-a/widgets through {binding_seen:?}",
        heartbeat * 2
    );
}
