//! End to end through the binaries: two `fakeapi serve` processes (provider, consumer) and the
//! `konnector` binary as child processes, driven only through the Kubernetes API and `/metrics`.
//! The black-hole stories put a `kbind_testenv::FaultProxy` in front of the provider (served over
//! HTTP/2, and with `--http1-only`).
//!
//! The fakeapi binary lives in another package, so Cargo gives this test no `CARGO_BIN_EXE_fakeapi`;
//! it is looked up next to the konnector binary and built with `cargo build -p fakeapi --bin fakeapi`
//! when missing.

mod child;

use child::*;
use fakeapi::sample::{provider_rbac, widgets, widgets_crd};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, KubeClusterClient, Patch, PatchParams,
};
use kbind_testenv::FaultProxy;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const KONNECTOR_USER: &str = "kbind-konnector";

/// The fakeapi binary, built once per test run if it is not there yet.
fn fakeapi_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            if let Some(path) = std::env::var_os("CARGO_BIN_EXE_fakeapi") {
                return path.into();
            }
            let path = Path::new(env!("CARGO_BIN_EXE_konnector")).with_file_name("fakeapi");
            if !path.exists() {
                let mut build = std::process::Command::new(env!("CARGO"));
                build.args(["build", "-p", "fakeapi", "--bin", "fakeapi"]);
                if !cfg!(debug_assertions) {
                    build.arg("--release");
                }
                let status = build.status().expect("cargo runs");
                assert!(status.success(), "cargo build -p fakeapi failed");
            }
            assert!(path.exists(), "no fakeapi binary at {}", path.display());
            path
        })
        .clone()
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn widget(name: &str, size: i64) -> DynamicObject {
    object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
                  "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size, "color": "blue"}}))
}

/// Starts `fakeapi serve` (with `extra` flags) and waits for its admin kubeconfig (written atomically once it
/// listens).
async fn serve(dir: &Path, name: &str, users: &[String], extra: &[&str]) -> (Child, PathBuf) {
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    let mut command = Command::new(fakeapi_binary());
    command
        .args(["serve", "--addr", "127.0.0.1:0", "--name", name, "--kubeconfig"])
        .arg(&kubeconfig)
        .args(extra);
    for user in users {
        command.arg("--user").arg(user);
    }
    let child = command
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("fakeapi starts");
    let none = Lines::default();
    eventually(&format!("fakeapi {name} to write its kubeconfig"), &none, async || {
        kubeconfig.exists().then_some(())
    })
    .await;
    (child, kubeconfig)
}

async fn client(kubeconfig: &Path) -> KubeClusterClient {
    let text = std::fs::read_to_string(kubeconfig).unwrap();
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    KubeClusterClient::from_config(config).unwrap()
}

/// A provider and a consumer fakeapi process, the provider's API exported, kbind installed on
/// the consumer and the one-apply bundle applied; no konnector yet.
struct World {
    _dir: tempfile::TempDir,
    provider: KubeClusterClient,
    consumer: KubeClusterClient,
    consumer_kubeconfig: PathBuf,
    /// The provider kubeconfig in the bundle (naming the proxy when there is one).
    konnector_kubeconfig: String,
    lines: Lines,
    _servers: [Child; 2],
}

impl World {
    async fn new() -> Self {
        Self::build(&[], false).await.0
    }

    /// Like [`World::new`], but the provider is served with `provider_flags` and the konnector's provider
    /// kubeconfig names a [`FaultProxy`] in front of it; the test's own provider client goes straight there.
    async fn behind_proxy(provider_flags: &[&str]) -> (Self, FaultProxy) {
        let (world, proxy) = Self::build(provider_flags, true).await;
        (world, proxy.expect("asked for a proxy"))
    }

    async fn build(provider_flags: &[&str], behind_proxy: bool) -> (Self, Option<FaultProxy>) {
        let dir = tempfile::tempdir().unwrap();
        let token = uuid::Uuid::new_v4().simple().to_string();
        let (provider_process, provider_kubeconfig) = serve(
            dir.path(),
            "provider",
            &[format!("{KONNECTOR_USER}:{token}")],
            provider_flags,
        )
        .await;
        let (consumer_process, consumer_kubeconfig) = serve(dir.path(), "consumer", &[], &[]).await;
        let provider = client(&provider_kubeconfig).await;
        let consumer = client(&consumer_kubeconfig).await;
        let mut world = Self {
            provider,
            consumer,
            consumer_kubeconfig,
            konnector_kubeconfig: String::new(),
            lines: Lines::default(),
            _servers: [provider_process, consumer_process],
            _dir: dir,
        };
        world.export_widgets().await;
        world.install_kbind().await;
        let mut konnector_kubeconfig =
            std::fs::read_to_string(format!("{}.{KONNECTOR_USER}", provider_kubeconfig.display())).unwrap();
        let mut proxy = None;
        if behind_proxy {
            let mut kubeconfig = kube::config::Kubeconfig::from_yaml(&konnector_kubeconfig).unwrap();
            let cluster = kubeconfig.clusters[0].cluster.as_mut().unwrap();
            let upstream: SocketAddr = cluster
                .server
                .as_deref()
                .and_then(|s| s.strip_prefix("https://"))
                .and_then(|a| a.parse().ok())
                .expect("fakeapi serves https://127.0.0.1:<port>");
            let started = FaultProxy::start(upstream).await.unwrap();
            cluster.server = Some(started.server());
            // JSON is YAML, and the konnector reads either.
            konnector_kubeconfig = serde_json::to_string(&kubeconfig).unwrap();
            proxy = Some(started);
        }
        world.apply_bundle(&konnector_kubeconfig).await;
        world.konnector_kubeconfig = konnector_kubeconfig;
        (world, proxy)
    }

    async fn export_widgets(&self) {
        self.provider
            .create(
                &erase::<CustomResourceDefinition>(),
                None,
                &object(widgets_crd()),
                &Default::default(),
            )
            .await
            .unwrap();
        for (res, obj) in provider_rbac() {
            self.provider
                .create(&res, None, &object(obj), &Default::default())
                .await
                .unwrap();
        }
        let provider = &self.provider;
        eventually("widgets served on the provider", &self.lines, async || {
            provider
                .list(&widgets(), None, &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
    }

    async fn install_kbind(&self) {
        for crd in kbind_api::crds() {
            self.consumer.create_typed(&crd).await.unwrap();
        }
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kbind"}});
        self.consumer
            .create(
                &erase::<k8s_openapi::api::core::v1::Namespace>(),
                None,
                &object(namespace),
                &Default::default(),
            )
            .await
            .unwrap();
        let consumer = &self.consumer;
        eventually("kbind's CRDs served on the consumer", &self.lines, async || {
            consumer
                .list(&erase::<kbind_api::Connection>(), None, &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
    }

    async fn apply_bundle(&self, konnector_kubeconfig: &str) {
        let secret = json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider", "namespace": "kbind"},
                            "stringData": {"kubeconfig": konnector_kubeconfig}});
        let connection = json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": "provider"},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "provider", "key": "kubeconfig"}}});
        let binding = json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": "widgets"},
            "spec": {"connectionRef": {"name": "provider"}, "apis": [{"name": "widgets.example.org"}]}});
        let default = Default::default();
        let c = &self.consumer;
        c.create(
            &erase::<k8s_openapi::api::core::v1::Secret>(),
            Some("kbind"),
            &object(secret),
            &default,
        )
        .await
        .unwrap();
        c.create(&erase::<kbind_api::Connection>(), None, &object(connection), &default)
            .await
            .unwrap();
        c.create(&erase::<kbind_api::ClusterBinding>(), None, &object(binding), &default)
            .await
            .unwrap();
    }

    /// Starts `konnector run` against the consumer with leader election on as `identity`.
    async fn konnector(&self, identity: &str, extra: &[&str]) -> Konnector {
        Konnector::start(&self.consumer_kubeconfig, identity, extra, self.lines.clone()).await
    }

    /// Waits until the Connection and the ClusterBinding are Ready and the consumer serves widgets.
    async fn wait_ready(&self) {
        for (res, name) in [
            (erase::<kbind_api::Connection>(), "provider"),
            (erase::<kbind_api::ClusterBinding>(), "widgets"),
        ] {
            eventually(&format!("{} {name} Ready", res.kind), &self.lines, async || {
                ready(&self.consumer, &res, name).await.then_some(())
            })
            .await;
        }
        eventually("widgets served on the consumer", &self.lines, async || {
            self.consumer
                .list(&widgets(), None, &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
    }

    async fn create_widget(&self, name: &str, size: i64) -> DynamicObject {
        self.consumer
            .create(&widgets(), Some("default"), &widget(name, size), &Default::default())
            .await
            .unwrap()
    }

    async fn resize_widget(&self, name: &str, size: i64) {
        self.consumer
            .patch(
                &widgets(),
                Some("default"),
                name,
                &Patch::Merge(json!({"spec": {"size": size}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
    }

    async fn delete_widget(&self, name: &str) {
        self.consumer
            .delete(&widgets(), Some("default"), name, &DeleteParams::default())
            .await
            .unwrap();
    }

    /// Widgets in `default` by name, `None` if the list fails.
    async fn widgets_on(client: &KubeClusterClient) -> Option<BTreeMap<String, DynamicObject>> {
        let list = client
            .list(&widgets(), Some("default"), &Default::default())
            .await
            .ok()?;
        Some(
            list.items
                .into_iter()
                .map(|w| (w.metadata.name.clone().unwrap_or_default(), w))
                .collect(),
        )
    }

    async fn lease_holder(&self) -> Option<String> {
        let lease: Lease = self
            .consumer
            .get_typed_opt(Some("kbind"), "kbind-konnector")
            .await
            .ok()??;
        lease.spec?.holder_identity
    }
}

async fn ready(client: &KubeClusterClient, res: &ApiResource, name: &str) -> bool {
    let Ok(Some(obj)) = client.get_opt(res, None, name).await else {
        return false;
    };
    let conditions: Vec<Condition> = obj
        .data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    conditions.iter().any(|c| c.type_ == "Ready" && c.status == "True")
}

impl Konnector {
    async fn scrape(&self) -> Option<String> {
        get(self.metrics, "/metrics").await
    }
}

/// A plain HTTP/1.1 GET of `path`: the body of a 200 answer.
async fn get(addr: SocketAddr, path: &str) -> Option<String> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

fn spec(obj: &DynamicObject) -> &Value {
    &obj.data["spec"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poc_flow_spec_up_status_down_update_and_delete() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let _konnector = world.konnector("poc", &[]).await;
    world.wait_ready().await;

    let created = world.create_widget("hello", 3).await;
    let copy = eventually("the copy on the provider", &lines, async || {
        world
            .provider
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?
    })
    .await;
    assert_eq!(spec(&copy), &json!({"size": 3, "color": "blue"}));
    let annotations = copy.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("core.kbind.io/consumer-object-uid"),
        created.metadata.uid.as_ref(),
        "the copy names its consumer object"
    );

    // The test plays the provider's controller.
    let report = |phase: &str, generation: i64| {
        Patch::Merge(json!({"status": {"phase": phase, "observedGeneration": generation}}))
    };
    let generation = copy.metadata.generation.unwrap();
    world
        .provider
        .patch_status(
            &widgets(),
            Some("default"),
            "hello",
            &report("Ready", generation),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("status phase=Ready on the consumer", &lines, async || {
        let obj = world
            .consumer
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()??;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await;

    world.resize_widget("hello", 5).await;
    let updated = eventually("the new size on the provider", &lines, async || {
        let obj = world
            .provider
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()??;
        (obj.data.pointer("/spec/size") == Some(&json!(5))).then_some(obj)
    })
    .await;
    world
        .provider
        .patch_status(
            &widgets(),
            Some("default"),
            "hello",
            &report("Resized", updated.metadata.generation.unwrap()),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("status phase=Resized on the consumer", &lines, async || {
        let obj = world
            .consumer
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()??;
        (obj.data.pointer("/status/phase") == Some(&json!("Resized"))).then_some(())
    })
    .await;

    world.delete_widget("hello").await;
    eventually("the copy and the consumer object gone", &lines, async || {
        let copy = world
            .provider
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?;
        let original = world
            .consumer
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?;
        (copy.is_none() && original.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_konnector_killed_while_syncing_converges_after_restart_without_losing_or_duplicating() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let konnector = world.konnector("restarting", &[]).await;
    world.wait_ready().await;

    let names: Vec<String> = (0..20).map(|i| format!("w-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        world.create_widget(name, i as i64).await;
    }
    let synced_at_kill = eventually("the first copies on the provider", &lines, async || {
        let copies = World::widgets_on(&world.provider).await?;
        (!copies.is_empty()).then_some(copies.len())
    })
    .await;
    konnector.kill_hard().await;
    eprintln!("killed with {synced_at_kill} of 20 copies on the provider");

    // While it is down: five updated, five deleted (those it had finalized stay terminating).
    for name in &names[..5] {
        world.resize_widget(name, 100).await;
    }
    for name in &names[15..] {
        world.delete_widget(name).await;
    }
    let _konnector = world.konnector("restarting", &[]).await;

    let surviving = &names[..15];
    eventually(
        "the provider to hold exactly the 15 survivors with the latest spec",
        &lines,
        async || {
            let copies = World::widgets_on(&world.provider).await?;
            let originals = World::widgets_on(&world.consumer).await?;
            let converged = copies.keys().eq(surviving.iter())
                && originals.keys().eq(surviving.iter())
                && originals.values().all(|o| o.metadata.deletion_timestamp.is_none())
                && surviving.iter().all(|n| spec(&copies[n]) == spec(&originals[n]));
            converged.then_some(())
        },
    )
    .await;
    let originals = World::widgets_on(&world.consumer).await.unwrap();
    for (i, name) in surviving.iter().enumerate() {
        let want = if i < 5 { 100 } else { i as i64 };
        assert_eq!(
            originals[name].data.pointer("/spec/size"),
            Some(&json!(want)),
            "{name} on the consumer (killed with {synced_at_kill} of 20 copied)"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_hands_the_lease_to_the_second_konnector_which_syncs() {
    let world = World::new().await;
    let lines = world.lines.clone();
    // A Lease that only expires after a minute: a prompt takeover means the first released it.
    let timing = ["--lease-duration=60s", "--renew-deadline=40s", "--retry-period=1s"];
    let first = world.konnector("first", &timing).await;
    eventually("the first konnector to lead", &lines, async || {
        (world.lease_holder().await.as_deref() == Some("first")).then_some(())
    })
    .await;
    world.wait_ready().await;
    let second = world.konnector("second", &timing).await;
    eventually("the second konnector to report it follows", &lines, async || {
        let text = second.scrape().await?;
        text.lines().any(|l| l == "kbind_leader 0").then_some(())
    })
    .await;
    assert_eq!(world.lease_holder().await.as_deref(), Some("first"));

    let terminated = tokio::time::Instant::now();
    assert_eq!(first.terminate(&lines).await, Some(0), "log:\n{}", dump(&lines));
    eventually("the second konnector to hold the Lease", &lines, async || {
        (world.lease_holder().await.as_deref() == Some("second")).then_some(())
    })
    .await;
    let handover = terminated.elapsed();
    assert!(
        handover < Duration::from_secs(30),
        "took {handover:?}: the Lease was not released on shutdown"
    );

    world.create_widget("after-handover", 7).await;
    eventually("the second konnector to sync a new widget", &lines, async || {
        let copy = world
            .provider
            .get_opt(&widgets(), Some("default"), "after-handover")
            .await
            .ok()??;
        (spec(&copy) == &json!({"size": 7, "color": "blue"})).then_some(())
    })
    .await;
    eventually("kbind_leader 1 on the second konnector", &lines, async || {
        let text = second.scrape().await?;
        text.lines().any(|l| l == "kbind_leader 1").then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_the_synced_widgets() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let konnector = world.konnector("metrics", &[]).await;
    world.wait_ready().await;

    let synced = async |count: usize| {
        let want = format!("kbind_objects_synced{{api=\"widgets.example.org\"}} {count}");
        eventually(&format!("{want} and {count} copies"), &lines, async || {
            let text = konnector.scrape().await?;
            let copies = World::widgets_on(&world.provider).await?;
            (text.lines().any(|l| l == want) && copies.len() == count).then_some(())
        })
        .await;
    };
    for i in 0..5 {
        world.create_widget(&format!("m-{i}"), i).await;
    }
    synced(5).await;
    let text = konnector.scrape().await.expect("a scrape");
    let spec_up = sample(&text, "kbind_spec_up_seconds_count{api=\"widgets.example.org\"}");
    assert!(
        spec_up.is_some_and(|n| n >= 5.0),
        "a spec-up latency per new widget:\n{text}"
    );
    // The syncer reads a new widget's provider copy before creating it: a 404 from the provider.
    let not_found = sample(&text, "kbind_api_errors_total{cluster=\"provider\",code=\"404\"}");
    assert!(not_found.is_some_and(|n| n >= 1.0), "provider 404s counted:\n{text}");
    eventually("an empty sync queue", &lines, async || {
        let text = konnector.scrape().await?;
        (sample(&text, "kbind_queue_depth{api=\"widgets.example.org\"}") == Some(0.0)).then_some(())
    })
    .await;

    // A status written on the provider comes down, and its latency is measured.
    let status_down = "kbind_status_down_seconds_count{api=\"widgets.example.org\"}";
    let before = sample(&text, status_down).unwrap_or(0.0);
    world
        .provider
        .patch_status(
            &widgets(),
            Some("default"),
            "m-2",
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
            &PatchParams::default(),
        )
        .await
        .expect("a provider status write");
    eventually("a status-down latency", &lines, async || {
        let text = konnector.scrape().await?;
        (sample(&text, status_down)? > before).then_some(())
    })
    .await;

    world.delete_widget("m-0").await;
    world.delete_widget("m-1").await;
    synced(3).await;
    let text = konnector.scrape().await.expect("a scrape");
    assert!(
        sample(&text, "kbind_spec_up_seconds_count{api=\"widgets.example.org\"}") >= spec_up,
        "histograms outlive scrapes and deletions:\n{text}"
    );
}

/// The value of the series `series` (name and labels) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// The konnector's heartbeat in the black-hole stories: short, so they stay quick in every `cargo test`.
const BLACK_HOLE_HEARTBEAT: Duration = Duration::from_secs(2);

/// The HTTP version the konnector's own transport (`KubeClusterClient`, HTTP/2 offered by ALPN) gets from the
/// server `kubeconfig` names.
async fn negotiated_version(kubeconfig: &str) -> http::Version {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap();
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

/// On `fakeapi serve` behind a [`FaultProxy`] (the real-server twin is real_turbulence.rs): a
/// provider that stops answering without closing anything is `ProviderUnreachable` within one heartbeat interval
/// (+10 % jitter) and one window (two intervals) of the hole opening, and Ready again once it closes. The deadline
/// is a generous multiple of that bound; the measured time is printed.
async fn black_hole_story(name: &str, provider_flags: &[&str], version: http::Version) {
    let (world, proxy) = World::behind_proxy(provider_flags).await;
    let lines = world.lines.clone();
    let _konnector = world
        .konnector(name, &["--heartbeat-interval=2s", "--provider-request-timeout=1s"])
        .await;
    world.wait_ready().await;
    world.create_widget("w", 1).await;
    let copy_has = async |size: i64| {
        eventually(&format!("size {size} on the provider"), &lines, async || {
            let copy = world.provider.get_opt(&widgets(), Some("default"), "w").await.ok()??;
            (copy.data.pointer("/spec/size") == Some(&json!(size))).then_some(())
        })
        .await
    };
    copy_has(1).await;
    let open = proxy.open_connections();
    let negotiated = negotiated_version(&world.konnector_kubeconfig).await;
    eprintln!("{name}: the konnector's transport gets {negotiated:?}; it holds {open} connection(s) to the provider");
    assert_eq!(negotiated, version, "the provider speaks the protocol under test");
    if version == http::Version::HTTP_11 {
        // Each open watch holds a connection of its own on HTTP/1.1 (on HTTP/2 they share one).
        assert!(open > 1, "HTTP/1.1: a connection per watch, found {open}");
    }

    // One heartbeat interval (+10 % jitter), one window and the last try's second.
    let bound = BLACK_HOLE_HEARTBEAT.mul_f64(1.1) + BLACK_HOLE_HEARTBEAT * 2 + Duration::from_secs(1);
    let deadline = bound * 4 + Duration::from_secs(10);
    proxy.black_hole();
    let opened = tokio::time::Instant::now();
    let connection = erase::<kbind_api::Connection>();
    loop {
        let conn = world
            .consumer
            .get_opt(&connection, None, "provider")
            .await
            .ok()
            .flatten();
        let conditions: Vec<Condition> = conn
            .and_then(|c| c.data.pointer("/status/conditions").cloned())
            .and_then(|c| serde_json::from_value(c).ok())
            .unwrap_or_default();
        let unreachable = conditions
            .iter()
            .any(|c| c.type_ == "Connected" && c.status == "False" && c.reason == "ProviderUnreachable");
        if unreachable {
            break;
        }
        assert!(
            opened.elapsed() < deadline,
            "{name}: not ProviderUnreachable {deadline:?} after the hole opened (bound {bound:?}); log:\n{}",
            dump(&lines)
        );
        tokio::time::sleep(POLL).await;
    }
    let noticed = opened.elapsed();
    // Not an assertion (the suite shares the machine), but what to look at.
    let exceeded = if noticed > bound + Duration::from_secs(1) {
        ", past the bound"
    } else {
        ""
    };
    eprintln!(
        "{name}: ProviderUnreachable {noticed:.1?} after the black hole opened (documented bound {bound:.1?}{exceeded})"
    );
    world.resize_widget("w", 2).await;
    proxy.lift_black_hole();
    let lifted = tokio::time::Instant::now();
    world.wait_ready().await;
    copy_has(2).await;
    eprintln!(
        "{name}: Ready and synced {:.1?} after the hole closed",
        lifted.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_provider_over_http2_is_unreachable_within_an_interval_and_a_window() {
    black_hole_story("black_hole_h2", &[], http::Version::HTTP_2).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_black_holed_provider_over_http1_is_unreachable_within_an_interval_and_a_window() {
    black_hole_story("black_hole_http1", &["--http1-only"], http::Version::HTTP_11).await;
}

fn events_k8s_io() -> ApiResource {
    ApiResource {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        api_version: "events.k8s.io/v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

/// Waits for the Connection's `Connected` message to contain every one of `words`, and for a
/// `ProviderUnreachable` Event whose note does, and for a log line that does.
async fn wait_unreachable(world: &World, words: &[&str]) {
    let what = format!("Connected=False naming {words:?}");
    let message = eventually(&what, &world.lines, async || {
        let conn = world
            .consumer
            .get_opt(&erase::<kbind_api::Connection>(), None, "provider")
            .await
            .ok()??;
        let connected: Vec<Condition> =
            serde_json::from_value(conn.data.pointer("/status/conditions")?.clone()).ok()?;
        let c = connected.into_iter().find(|c| c.type_ == "Connected")?;
        (c.status == "False" && c.reason == "ProviderUnreachable" && words.iter().all(|w| c.message.contains(w)))
            .then_some(c.message)
    })
    .await;
    eprintln!("Connected: {message}");
    eventually(
        &format!("a ProviderUnreachable Event naming {words:?}"),
        &world.lines,
        async || {
            let events = world
                .consumer
                .list(&events_k8s_io(), None, &Default::default())
                .await
                .ok()?;
            events
                .items
                .iter()
                .any(|e| {
                    e.data["reason"] == "ProviderUnreachable"
                        && e.data["note"]
                            .as_str()
                            .is_some_and(|n| words.iter().all(|w| n.contains(w)))
                })
                .then_some(())
        },
    )
    .await;
    eventually(&format!("a log line naming {words:?}"), &world.lines, async || {
        world
            .lines
            .lock()
            .iter()
            .any(|l| words.iter().all(|w| l.contains(w)))
            .then_some(())
    })
    .await;
}

/// Starts a world whose bundle's provider kubeconfig is `edit`ed (before any konnector ran), then
/// a konnector, and waits until the condition, an Event and the log name every one of `words`
/// (from the address `edit` returns); the token reaches none of them.
async fn unreachable_story(edit: impl FnOnce(&mut kube::config::Cluster, &World) -> String, words: &[&str]) {
    let world = World::new().await;
    let mut kubeconfig = kube::config::Kubeconfig::from_yaml(&world.konnector_kubeconfig).unwrap();
    let address = edit(kubeconfig.clusters[0].cluster.as_mut().unwrap(), &world);
    let text = serde_json::to_string(&kubeconfig).unwrap();
    world
        .consumer
        .patch(
            &erase::<k8s_openapi::api::core::v1::Secret>(),
            Some("kbind"),
            "provider",
            &Patch::Merge(json!({"data": null, "stringData": {"kubeconfig": text}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let token = serde_json::from_str::<Value>(&text).unwrap()["users"][0]["user"]["token"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(token.len() > 8, "the bundle's kubeconfig has a token");
    let _konnector = world.konnector("causes", &[]).await;
    let mut all = vec![address.as_str()];
    all.extend(words);
    wait_unreachable(&world, &all).await;
    assert!(!dump(&world.lines).contains(&token), "the token reached the log");
}

/// A closed port and a server with another CA read differently: the condition, the Event and
/// the log name host:port and the cause, and never the token.
#[tokio::test]
async fn a_closed_port_is_named_with_its_address_and_connection_refused() {
    unreachable_story(
        |cluster, _| {
            // Bound then dropped: nothing listens there any more.
            let closed = std::net::TcpListener::bind("127.0.0.1:0")
                .unwrap()
                .local_addr()
                .unwrap();
            cluster.server = Some(format!("https://{closed}"));
            closed.to_string()
        },
        &["connection refused"],
    )
    .await;
}

/// The provider's own address, but the consumer's CA: the provider's certificate is signed by a
/// CA the kubeconfig does not trust.
#[tokio::test]
async fn a_server_with_another_ca_is_named_with_its_address_and_the_tls_cause() {
    unreachable_story(
        |cluster, world| {
            let consumer = std::fs::read_to_string(&world.consumer_kubeconfig).unwrap();
            let consumer = kube::config::Kubeconfig::from_yaml(&consumer).unwrap();
            cluster.certificate_authority_data = consumer.clusters[0]
                .cluster
                .as_ref()
                .unwrap()
                .certificate_authority_data
                .clone();
            cluster
                .server
                .as_deref()
                .and_then(|s| s.strip_prefix("https://"))
                .unwrap()
                .to_string()
        },
        &["TLS: certificate signed by unknown authority", "UnknownIssuer"],
    )
    .await;
}
