//! One benchmark world: a provider and a consumer cluster (fakeapi served over HTTPS in this
//! process, or two real kube-apiservers from kbind-testenv), the benchmark's APIs exported on the
//! provider and bound on the consumer through one Connection per provider identity, optionally a
//! [`FaultProxy`] in front of the provider, and the `konnector run` binary as a child process.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use fakeapi::serve::{ClusterServeOptions, RunningServer, Token, UserSpec, serve_cluster};
use fakeapi::{FakeCluster, RequestRecord};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Secret, ServiceAccount};
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, KubeClusterClient, Patch, PatchParams, WatchEvent,
    WatchParams,
};
use kbind_testenv::{FaultProxy, TestEnv, User};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::measure::{self, free_loopback_addr, wait_for};

/// The API group of the benchmark's resources.
pub const GROUP: &str = "bench.kbind.io";
/// The konnector's user on the consumer (fake backend), so its requests stand apart.
pub const KONNECTOR_USER: &str = "kbind-konnector";
/// Where the benchmark's objects live, on both sides.
pub const NAMESPACE: &str = "default";
/// How long setting up a world may take (real apiservers on shared cores are slow to start).
pub const SETUP_DEADLINE: Duration = Duration::from_secs(300);
/// Where the provider's ServiceAccounts live (real backend).
const PROVIDER_ACCOUNTS: &str = "kbind-consumers";

/// Which servers a world runs against.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Backend {
    /// fakeapi served over HTTPS in this process: the figure is about our code.
    Fake,
    /// Two real kube-apiservers (kbind-testenv): the figure is about Kubernetes.
    Real,
}

impl Backend {
    /// Whether this backend can run here: the real one needs the kube binaries (an error when
    /// `KBIND_REQUIRE_REAL_K8S=1` and they are missing, `Ok(false)` otherwise).
    pub fn available(self) -> anyhow::Result<bool> {
        match self {
            Backend::Fake => Ok(true),
            Backend::Real => match TestEnv::binaries() {
                Ok(_) => Ok(true),
                Err(missing) if kbind_testenv::required() => Err(anyhow!(missing).context("KBIND_REQUIRE_REAL_K8S=1")),
                Err(_) => Ok(false),
            },
        }
    }
}

/// The shape of a world.
#[derive(Debug, Clone, Copy)]
pub struct Layout {
    /// Real or fake servers.
    pub backend: Backend,
    /// Connections (each with its own provider identity and one ClusterBinding).
    pub connections: usize,
    /// APIs per Connection (distinct CRDs: one consumer CRD has one source).
    pub apis: usize,
    /// Whether the konnector reaches the provider through a [`FaultProxy`].
    pub proxy: bool,
}

impl Layout {
    /// One Connection with one API: the shape of every workload but scale-out.
    pub fn single(backend: Backend, proxy: bool) -> Self {
        Layout {
            backend,
            connections: 1,
            apis: 1,
            proxy,
        }
    }
}

/// The `a`th API of Connection `c`.
pub fn api(layout: &Layout, c: usize, a: usize) -> ApiResource {
    let k = c * layout.apis + a;
    ApiResource {
        group: GROUP.into(),
        version: "v1".into(),
        api_version: format!("{GROUP}/v1"),
        kind: format!("Item{k}"),
        plural: format!("items{k}"),
    }
}

/// The exported CRD of `res`: spec `size`, `color`, `payload` and `passwordSecretRef.name` (the
/// related workload's reference to a Secret); status `phase`, `observedGeneration`.
pub fn crd(res: &ApiResource) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{}.{GROUP}", res.plural), "labels": {kbind_api::consts::label::EXPORTED: kbind_api::consts::TRUE}},
        "spec": {
            "group": GROUP, "scope": "Namespaced",
            "names": {"plural": res.plural, "singular": res.kind.to_lowercase(), "kind": res.kind, "listKind": format!("{}List", res.kind)},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {
                        "size": {"type": "integer"}, "color": {"type": "string"}, "payload": {"type": "string"},
                        "passwordSecretRef": {"type": "object", "properties": {"name": {"type": "string"}}}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "observedGeneration": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

/// An object of `res` named `name` whose spec is about `spec_bytes` of JSON.
pub fn item(res: &ApiResource, name: &str, index: usize, spec_bytes: usize) -> anyhow::Result<DynamicObject> {
    let payload = "x".repeat(spec_bytes.saturating_sub(40));
    object(json!({"apiVersion": res.api_version, "kind": res.kind,
                  "metadata": {"name": name, "namespace": NAMESPACE},
                  "spec": {"size": index, "color": "blue", "payload": payload}}))
}

/// The name of the `i`th object.
pub fn item_name(i: usize) -> String {
    format!("o-{i:06}")
}

/// A `DynamicObject` from JSON.
pub fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building an object")
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// What the provider grants each Connection's identity: the benchmark's group, CRD reads for
/// discovery, its heartbeat Lease and namespaces (as `fakeapi::sample::provider_rbac` does).
fn provider_rbac(subjects: Vec<Value>) -> [(ApiResource, Value); 2] {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kbind-bench-konnector"},
        "rules": [
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [GROUP], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kbind-bench-konnector"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kbind-bench-konnector"},
        "subjects": subjects,
    });
    [(erase::<ClusterRole>(), role), (erase::<ClusterRoleBinding>(), binding)]
}

/// The name of Connection `c`'s provider identity.
fn identity(c: usize) -> String {
    format!("consumer-{c}")
}

/// What only one backend has.
enum Servers {
    Fake {
        provider: FakeCluster,
        consumer: FakeCluster,
        provider_server: RunningServer,
        consumer_server: RunningServer,
    },
    Real {
        // Boxed: the environment is large and a world holds one or the other.
        env: Box<TestEnv>,
        provider_admin: kube::Client,
        consumer_admin: kube::Client,
    },
}

/// A running `konnector run` child.
struct Child {
    process: tokio::process::Child,
    pid: u32,
    metrics: SocketAddr,
}

/// The konnector binary measured and the flags it runs with beyond the harness's own.
#[derive(Debug, Clone)]
pub struct Konnector {
    /// The binary.
    pub binary: std::path::PathBuf,
    /// Extra `konnector run` flags (`--sync-workers=64`), recorded in every run's machine facts.
    pub args: Vec<String>,
}

/// A provider and a consumer with the benchmark's APIs exported and bound.
pub struct World {
    /// The shape it was built with.
    pub layout: Layout,
    /// The load generator's client of the provider (admin).
    pub provider: Arc<dyn ClusterClient>,
    /// The load generator's client of the consumer (admin).
    pub consumer: Arc<dyn ClusterClient>,
    /// The provider admin's configuration, for plain `kube::Client`s (the ceiling).
    pub provider_config: kube::Config,
    /// The consumer admin's configuration.
    pub consumer_config: kube::Config,
    /// The proxy between the konnector and the provider, when the layout asks for one.
    pub proxy: Option<FaultProxy>,
    konnector: Option<Child>,
    konnector_kubeconfig: PathBuf,
    servers: Servers,
    controllers: Vec<tokio::task::JoinHandle<()>>,
    dir: tempfile::TempDir,
}

impl World {
    /// Starts the servers and prepares both sides; the konnector is not started.
    pub async fn start(layout: Layout) -> anyhow::Result<Self> {
        let dir = tempfile::tempdir().context("a temporary folder")?;
        let konnector_kubeconfig = dir.path().join("consumer.kubeconfig");
        let (servers, provider, consumer, provider_kubeconfigs, proxy) = match layout.backend {
            Backend::Fake => start_fake(&layout, &konnector_kubeconfig).await?,
            Backend::Real => start_real(&layout, &konnector_kubeconfig).await?,
        };
        let (provider_config, consumer_config) = match &servers {
            Servers::Fake {
                provider_server,
                consumer_server,
                ..
            } => (
                config_of(
                    &provider_server
                        .admin_kubeconfig()
                        .ok_or_else(|| anyhow!("no admin kubeconfig"))?,
                )
                .await?,
                config_of(
                    &consumer_server
                        .admin_kubeconfig()
                        .ok_or_else(|| anyhow!("no admin kubeconfig"))?,
                )
                .await?,
            ),
            Servers::Real { env, .. } => (
                env.cluster(0).config(User::Admin).await?,
                env.cluster(1).config(User::Admin).await?,
            ),
        };
        let world = Self {
            layout,
            provider,
            consumer,
            provider_config,
            consumer_config,
            proxy,
            konnector: None,
            konnector_kubeconfig,
            servers,
            controllers: Vec::new(),
            dir,
        };
        world.prepare_consumer(&provider_kubeconfigs).await?;
        Ok(world)
    }

    /// The `a`th API of Connection `c`.
    pub fn api(&self, c: usize, a: usize) -> ApiResource {
        api(&self.layout, c, a)
    }

    /// Every API, Connection by Connection.
    pub fn apis(&self) -> Vec<ApiResource> {
        (0..self.layout.connections)
            .flat_map(|c| (0..self.layout.apis).map(move |a| (c, a)))
            .map(|(c, a)| self.api(c, a))
            .collect()
    }

    async fn prepare_consumer(&self, provider_kubeconfigs: &[String]) -> anyhow::Result<()> {
        for crd in kbind_api::crds() {
            self.consumer
                .create_typed(&crd)
                .await
                .context("creating kbind's CRDs")?;
        }
        create(
            &*self.consumer,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kbind"}}),
        )
        .await?;
        for res in [erase::<kbind_api::Connection>(), erase::<kbind_api::ClusterBinding>()] {
            self.wait_served(&res).await?;
        }
        for (c, kubeconfig) in provider_kubeconfigs.iter().enumerate() {
            let name = format!("p{c}");
            let apis: Vec<Value> = (0..self.layout.apis)
                .map(|a| json!({"name": format!("{}.{GROUP}", self.api(c, a).plural)}))
                .collect();
            create(
                &*self.consumer,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": "kbind"},
                                           "stringData": {"kubeconfig": kubeconfig}}),
            )
            .await?;
            create(&*self.consumer, json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": name},
                                           "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": name, "key": "kubeconfig"}}})).await?;
            create(&*self.consumer, json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": format!("b{c}")},
                                           "spec": {"connectionRef": {"name": name}, "apis": apis}})).await?;
        }
        Ok(())
    }

    /// Starts `konnector run` and waits until every binding is Ready and every API is served on
    /// the consumer.
    pub async fn start_konnector(&mut self, konnector: &Konnector) -> anyhow::Result<()> {
        let binary = &konnector.binary;
        if self.konnector.is_some() {
            bail!("the konnector already runs");
        }
        let log = std::fs::File::create(self.dir.path().join("konnector.log")).context("creating the log file")?;
        let metrics = free_loopback_addr()?;
        let process = tokio::process::Command::new(binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&self.konnector_kubeconfig)
            .arg(format!("--metrics-addr={metrics}"))
            .args(["--leader-elect=false", "--health-addr=127.0.0.1:0", "--log-level=warn"])
            .args(&konnector.args)
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = process.id().ok_or_else(|| anyhow!("the konnector exited at once"))?;
        self.konnector = Some(Child { process, pid, metrics });
        for c in 0..self.layout.connections {
            let binding = format!("b{c}");
            wait_for(&format!("ClusterBinding {binding} Ready"), SETUP_DEADLINE, async || {
                ready(&*self.consumer, &erase::<kbind_api::ClusterBinding>(), &binding).await
            })
            .await
            .map_err(|e| self.with_log(e))?;
        }
        for res in self.apis() {
            self.wait_served(&res).await?;
        }
        Ok(())
    }

    /// Waits until the consumer lists `res` (its CRD established and served).
    async fn wait_served(&self, res: &ApiResource) -> anyhow::Result<()> {
        wait_for(
            &format!("{} served on the consumer", res.plural),
            SETUP_DEADLINE,
            async || {
                self.consumer
                    .list(res, None, &Default::default())
                    .await
                    .ok()
                    .map(|_| ())
            },
        )
        .await
    }

    /// Stops the konnector (SIGKILL: nothing is cleaned up on either side).
    pub async fn stop_konnector(&mut self) -> anyhow::Result<()> {
        if let Some(mut child) = self.konnector.take() {
            child.process.kill().await.context("stopping the konnector")?;
        }
        Ok(())
    }

    fn child(&self) -> anyhow::Result<&Child> {
        self.konnector
            .as_ref()
            .ok_or_else(|| anyhow!("the konnector is not running"))
    }

    /// The konnector's `VmRSS` and `VmHWM`, KiB.
    pub fn konnector_memory_kib(&self) -> anyhow::Result<(u64, u64)> {
        measure::memory_kib(self.child()?.pid)
    }

    /// The konnector's CPU time so far, seconds.
    pub fn konnector_cpu_seconds(&self) -> anyhow::Result<f64> {
        measure::cpu_seconds(self.child()?.pid)
    }

    /// The konnector's `/metrics` text.
    pub async fn konnector_metrics(&self) -> anyhow::Result<String> {
        measure::scrape(self.child()?.metrics).await
    }

    /// Fails, with the tail of its log, when the konnector has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        let exited = match self.konnector.as_mut() {
            Some(child) => child.process.try_wait()?,
            None => bail!("the konnector is not running"),
        };
        match exited {
            Some(status) => Err(self.with_log(anyhow!("the konnector exited: {status}"))),
            None => Ok(()),
        }
    }

    fn with_log(&self, error: anyhow::Error) -> anyhow::Error {
        let log = std::fs::read_to_string(self.dir.path().join("konnector.log")).unwrap_or_default();
        let tail: Vec<&str> = log.lines().rev().take(20).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        error.context(format!("konnector log tail:\n{}", tail.join("\n")))
    }

    /// Creates objects `from..to` of `res` on the consumer with `concurrency` requests in flight.
    pub async fn create_items(
        &self,
        res: &ApiResource,
        range: std::ops::Range<usize>,
        spec_bytes: usize,
        concurrency: usize,
    ) -> anyhow::Result<()> {
        self.create_made(res, range, concurrency, |i| item(res, &item_name(i), i, spec_bytes))
            .await
    }

    /// Creates `make(i)` for each `i` of `range` as `res` on the consumer with `concurrency`
    /// requests in flight.
    pub async fn create_made(
        &self,
        res: &ApiResource,
        range: std::ops::Range<usize>,
        concurrency: usize,
        make: impl Fn(usize) -> anyhow::Result<DynamicObject>,
    ) -> anyhow::Result<()> {
        let consumer = self.consumer.clone();
        let make = &make;
        futures::stream::iter(range)
            .map(|i| {
                let consumer = consumer.clone();
                async move {
                    let obj = make(i)?;
                    let name = obj.metadata.name.clone().unwrap_or_default();
                    consumer
                        .create(res, Some(NAMESPACE), &obj, &Default::default())
                        .await
                        .with_context(|| format!("creating {} {name}", res.kind))?;
                    anyhow::Ok(())
                }
            })
            .buffer_unordered(concurrency.max(1))
            .collect::<Vec<_>>()
            .await
            .into_iter()
            .collect()
    }

    /// Plays the provider's controllers: every copy without a `status.phase` gets `phase: Ready`
    /// for its generation, as soon as its watch event arrives (changes after that are the
    /// workloads' own).
    pub fn start_provider_controllers(&mut self) {
        for res in self.apis() {
            self.controllers
                .push(tokio::spawn(status_controller(self.provider.clone(), res)));
        }
    }

    /// Lets every Connection's provider identity write Secrets (the related workload's copies):
    /// one more rule in the benchmark's provider ClusterRole.
    pub async fn allow_provider_secrets(&self) -> anyhow::Result<()> {
        let roles = erase::<ClusterRole>();
        let role = self
            .provider
            .get_opt(&roles, None, "kbind-bench-konnector")
            .await
            .context("reading the benchmark's provider ClusterRole")?
            .ok_or_else(|| anyhow!("no ClusterRole kbind-bench-konnector on the provider"))?;
        let mut rules = role
            .data
            .get("rules")
            .and_then(Value::as_array)
            .cloned()
            .unwrap_or_default();
        rules.push(json!({"apiGroups": [""], "resources": ["secrets"],
                          "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}));
        self.provider
            .patch(
                &roles,
                None,
                "kbind-bench-konnector",
                &Patch::Merge(json!({"rules": rules})),
                &PatchParams::default(),
            )
            .await
            .context("granting Secrets to the konnector on the provider")?;
        Ok(())
    }

    /// Counts on one side: objects of `res`, and those whose status has a phase.
    pub async fn count(client: &dyn ClusterClient, res: &ApiResource) -> Option<(usize, usize)> {
        let list = client.list(res, Some(NAMESPACE), &Default::default()).await.ok()?;
        let with_status = list
            .items
            .iter()
            .filter(|o| o.data.pointer("/status/phase").is_some())
            .count();
        Some((list.items.len(), with_status))
    }

    /// A mark where a window of [`World::requests_since`] starts.
    pub async fn request_mark(&self) -> anyhow::Result<RequestMark> {
        Ok(match &self.servers {
            Servers::Fake { provider, consumer, .. } => {
                RequestMark::Fake(provider.request_log().len(), consumer.request_log().len())
            }
            Servers::Real {
                provider_admin,
                consumer_admin,
                ..
            } => RequestMark::Real(
                apiserver_counts(provider_admin).await?,
                apiserver_counts(consumer_admin).await?,
            ),
        })
    }

    /// Requests to each side since `mark`: the konnector's own on fakeapi (its users in the
    /// request log); on real servers every request the apiserver counted (`apiserver_request_total`),
    /// which includes the controller-manager's: compare against a window without the konnector.
    pub async fn requests_since(&self, mark: &RequestMark) -> anyhow::Result<Requests> {
        Ok(match (&self.servers, mark) {
            (Servers::Fake { provider, consumer, .. }, RequestMark::Fake(p, c)) => Requests {
                provider: Side::of_log(&provider.request_log_from(*p)),
                consumer: Side::of_log(&consumer.request_log_from(*c)),
            },
            (
                Servers::Real {
                    provider_admin,
                    consumer_admin,
                    ..
                },
                RequestMark::Real(p, c),
            ) => Requests {
                provider: apiserver_counts(provider_admin).await?.since(p),
                consumer: apiserver_counts(consumer_admin).await?.since(c),
            },
            _ => bail!("a request mark of another backend"),
        })
    }

    /// Stops the konnector, the controllers and the servers.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        for task in &self.controllers {
            task.abort();
        }
        self.stop_konnector().await?;
        if let Servers::Fake {
            provider_server,
            consumer_server,
            ..
        } = self.servers
        {
            provider_server.shutdown().await;
            consumer_server.shutdown().await;
        }
        Ok(())
    }
}

/// Where a request window starts: log positions (fake) or the apiservers' counters (real).
pub enum RequestMark {
    /// Lengths of the provider's and the consumer's request logs.
    Fake(usize, usize),
    /// The provider's and the consumer's counters.
    Real(Side, Side),
}

/// Requests to both sides in a window.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Requests {
    /// To the provider.
    pub provider: Side,
    /// To the consumer.
    pub consumer: Side,
}

/// Requests to one side.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Side {
    /// Every request, watches included.
    pub all: f64,
    /// Watch requests (each one an opened or reopened watch).
    pub watches_opened: f64,
    /// Watches open at the end of the window (real: the apiserver's gauge; fake: not known).
    pub watches_open: Option<f64>,
    /// Counts by `verb resource` (fake only: the request log names them).
    pub by_kind: BTreeMap<String, u64>,
}

impl Side {
    fn of_log(log: &[RequestRecord]) -> Self {
        let admin = fakeapi::rbac::UserInfo::admin().name;
        let mut side = Self::default();
        for r in log.iter().filter(|r| r.user != admin) {
            side.all += 1.0;
            if r.verb == "watch" {
                side.watches_opened += 1.0;
            }
            *side.by_kind.entry(format!("{} {}", r.verb, r.resource)).or_default() += 1;
        }
        side
    }

    fn since(self, before: &Side) -> Self {
        Self {
            all: self.all - before.all,
            watches_opened: self.watches_opened - before.watches_opened,
            watches_open: self.watches_open,
            by_kind: BTreeMap::new(),
        }
    }
}

/// The apiserver's request counters and open watches, from its `/metrics`.
async fn apiserver_counts(client: &kube::Client) -> anyhow::Result<Side> {
    let request = http::Request::get("/metrics")
        .body(Vec::new())
        .context("a metrics request")?;
    let text = client
        .request_text(request)
        .await
        .context("reading the apiserver's /metrics")?;
    Ok(Side {
        all: measure::metric_sum(&text, "apiserver_request_total", &[]),
        watches_opened: measure::metric_sum(&text, "apiserver_request_total", &["verb=\"WATCH\""]),
        watches_open: Some(measure::metric_sum(
            &text,
            "apiserver_longrunning_requests",
            &["verb=\"WATCH\""],
        )),
        by_kind: BTreeMap::new(),
    })
}

async fn create(client: &dyn ClusterClient, value: Value) -> anyhow::Result<()> {
    let kind = value["kind"].as_str().unwrap_or_default().to_string();
    let res = match kind.as_str() {
        "Namespace" => erase::<Namespace>(),
        "Secret" => erase::<Secret>(),
        "ServiceAccount" => erase::<ServiceAccount>(),
        "CustomResourceDefinition" => erase::<CustomResourceDefinition>(),
        "Connection" => erase::<kbind_api::Connection>(),
        "ClusterBinding" => erase::<kbind_api::ClusterBinding>(),
        other => bail!("the benchmark does not create {other}"),
    };
    let namespace = value
        .pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .map(str::to_string);
    client
        .create(&res, namespace.as_deref(), &object(value)?, &Default::default())
        .await
        .with_context(|| format!("creating a {kind}"))?;
    Ok(())
}

async fn ready(client: &dyn ClusterClient, res: &ApiResource, name: &str) -> Option<()> {
    let obj = client.get_opt(res, None, name).await.ok()??;
    let conditions = obj.data.pointer("/status/conditions")?.as_array()?;
    conditions
        .iter()
        .any(|c| c["type"] == "Ready" && c["status"] == "True")
        .then_some(())
}

async fn config_of(kubeconfig: &str) -> anyhow::Result<kube::Config> {
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).context("parsing a kubeconfig")?;
    kube::Config::from_custom_kubeconfig(parsed, &Default::default())
        .await
        .context("a client configuration from a kubeconfig")
}

/// The provider's exported CRDs and RBAC, created by its admin.
async fn prepare_provider(provider: &dyn ClusterClient, layout: &Layout, subjects: Vec<Value>) -> anyhow::Result<()> {
    for c in 0..layout.connections {
        for a in 0..layout.apis {
            create(provider, crd(&api(layout, c, a))).await?;
        }
    }
    for (res, rbac) in provider_rbac(subjects) {
        provider
            .create(&res, None, &object(rbac)?, &Default::default())
            .await
            .context("creating RBAC")?;
    }
    for c in 0..layout.connections {
        for a in 0..layout.apis {
            let res = api(layout, c, a);
            wait_for(
                &format!("{} served on the provider", res.plural),
                SETUP_DEADLINE,
                async || provider.list(&res, None, &Default::default()).await.ok().map(|_| ()),
            )
            .await?;
        }
    }
    Ok(())
}

type Started = (
    Servers,
    Arc<dyn ClusterClient>,
    Arc<dyn ClusterClient>,
    Vec<String>,
    Option<FaultProxy>,
);

async fn start_fake(layout: &Layout, konnector_kubeconfig: &Path) -> anyhow::Result<Started> {
    let random = || Token::random().map_err(|_| anyhow!("no randomness for a token"));
    let provider_cluster = FakeCluster::builder("provider").build();
    let consumer_cluster = FakeCluster::builder("consumer").build();
    let mut provider_options = ClusterServeOptions::default();
    let mut tokens = Vec::new();
    for c in 0..layout.connections {
        let token = random()?;
        tokens.push(token.expose().to_string());
        provider_options = provider_options.user(UserSpec {
            name: identity(c),
            token,
            groups: Vec::new(),
        });
    }
    let provider_server = serve_cluster(provider_cluster.clone(), provider_options)
        .await
        .context("serving the provider")?;
    // The konnector is the consumer's admin under its own name, so the request log tells its
    // requests from the load generator's.
    let konnector_token = random()?;
    let konnector_token_text = konnector_token.expose().to_string();
    let consumer_server = serve_cluster(
        consumer_cluster.clone(),
        ClusterServeOptions::default().user(UserSpec {
            name: KONNECTOR_USER.into(),
            token: konnector_token,
            groups: vec![fakeapi::rbac::SYSTEM_MASTERS.into()],
        }),
    )
    .await
    .context("serving the consumer")?;
    if provider_server.url().starts_with("http:") || consumer_server.url().starts_with("http:") {
        bail!("the fake clusters must be served over HTTPS, as real ones are");
    }
    std::fs::write(
        konnector_kubeconfig,
        consumer_server.kubeconfig(&konnector_token_text, KONNECTOR_USER),
    )
    .context("writing the konnector's kubeconfig")?;
    let provider: Arc<dyn ClusterClient> = Arc::new(provider_cluster.admin_client());
    let consumer: Arc<dyn ClusterClient> = Arc::new(consumer_cluster.admin_client());
    let subjects = (0..layout.connections)
        .map(|c| json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": identity(c)}))
        .collect();
    prepare_provider(&*provider, layout, subjects).await?;
    let proxy = match layout.proxy {
        true => Some(
            FaultProxy::start(provider_server.addr())
                .await
                .context("starting the proxy")?,
        ),
        false => None,
    };
    let kubeconfigs = tokens
        .iter()
        .enumerate()
        .map(|(c, token)| {
            let text = provider_server.kubeconfig(token, &identity(c));
            match &proxy {
                Some(proxy) => text.replace(provider_server.url(), &proxy.server()),
                None => text,
            }
        })
        .collect();
    let servers = Servers::Fake {
        provider: provider_cluster,
        consumer: consumer_cluster,
        provider_server,
        consumer_server,
    };
    Ok((servers, provider, consumer, kubeconfigs, proxy))
}

async fn start_real(layout: &Layout, konnector_kubeconfig: &Path) -> anyhow::Result<Started> {
    let env = TestEnv::start(2).await.context("starting two real clusters")?;
    let provider_admin = env.cluster(0).client(User::Admin).await?;
    let consumer_admin = env.cluster(1).client(User::Admin).await?;
    let provider: Arc<dyn ClusterClient> = Arc::new(KubeClusterClient::new(provider_admin.clone()));
    let consumer: Arc<dyn ClusterClient> = Arc::new(KubeClusterClient::new(consumer_admin.clone()));
    // The konnector is the consumer's admin: the chart's narrower ServiceAccount costs nothing
    // per request, and the provider side keeps one least-privilege identity per Connection.
    std::fs::copy(env.cluster(1).kubeconfig_path(User::Admin), konnector_kubeconfig)
        .context("copying the consumer's kubeconfig")?;
    create(
        &*provider,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": PROVIDER_ACCOUNTS}}),
    )
    .await?;
    for c in 0..layout.connections {
        create(
            &*provider,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                                  "metadata": {"name": identity(c), "namespace": PROVIDER_ACCOUNTS}}),
        )
        .await?;
    }
    let subjects = (0..layout.connections)
        .map(|c| json!({"kind": "ServiceAccount", "name": identity(c), "namespace": PROVIDER_ACCOUNTS}))
        .collect();
    prepare_provider(&*provider, layout, subjects).await?;
    let upstream: SocketAddr = env
        .cluster(0)
        .server()
        .trim_start_matches("https://")
        .parse()
        .context("the provider's address")?;
    let proxy = match layout.proxy {
        true => Some(FaultProxy::start(upstream).await.context("starting the proxy")?),
        false => None,
    };
    let server = proxy
        .as_ref()
        .map_or_else(|| env.cluster(0).server(), FaultProxy::server);
    let ca_path = env
        .cluster(0)
        .kubeconfig(User::Admin)
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref())
        .and_then(|c| c.certificate_authority.clone())
        .ok_or_else(|| anyhow!("the harness names no CA file"))?;
    let ca = k8s_openapi::ByteString(std::fs::read(ca_path).context("reading the provider's CA")?);
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(provider_admin.clone(), PROVIDER_ACCOUNTS);
    let mut kubeconfigs = Vec::new();
    for c in 0..layout.connections {
        let request = k8s_openapi::api::authentication::v1::TokenRequest {
            spec: k8s_openapi::api::authentication::v1::TokenRequestSpec {
                expiration_seconds: Some(24 * 3600),
                ..Default::default()
            },
            ..Default::default()
        };
        let minted = accounts
            .create_token_request(&identity(c), &Default::default(), &request)
            .await
            .context("minting a ServiceAccount token")?;
        let token = minted
            .status
            .ok_or_else(|| anyhow!("a TokenRequest without a status"))?
            .token;
        let kubeconfig = json!({
            "apiVersion": "v1", "kind": "Config",
            "clusters": [{"name": "provider", "cluster": {"server": server, "certificate-authority-data": ca}}],
            "users": [{"name": identity(c), "user": {"token": token}}],
            "contexts": [{"name": identity(c), "context": {"cluster": "provider", "user": identity(c)}}],
            "current-context": identity(c),
        });
        kubeconfigs.push(serde_json::to_string_pretty(&kubeconfig).context("encoding a kubeconfig")?);
    }
    let servers = Servers::Real {
        env: Box::new(env),
        provider_admin,
        consumer_admin,
    };
    Ok((servers, provider, consumer, kubeconfigs, proxy))
}

/// Watches the copies of `res` on the provider and gives each one without a phase `Ready`.
async fn status_controller(provider: Arc<dyn ClusterClient>, res: ApiResource) {
    // As a real controller's work queue does: one status write per copy (by UID, so a copy
    // deleted and made again is answered again), however many events it sends before the
    // write lands. Answering every event instead cost up to three writes per new copy, and the
    // benchmark measured this controller.
    let answered: Answered = Arc::default();
    let limit = Arc::new(tokio::sync::Semaphore::new(16));
    loop {
        let Ok(list) = provider.list(&res, Some(NAMESPACE), &Default::default()).await else {
            tokio::time::sleep(Duration::from_millis(200)).await;
            continue;
        };
        for obj in list.items {
            answer(&provider, &res, obj, &limit, &answered).await;
        }
        let rv = list.metadata.resource_version.unwrap_or_default();
        let Ok(mut stream) = provider
            .watch(&res, Some(NAMESPACE), &WatchParams::default(), &rv)
            .await
        else {
            continue;
        };
        while let Some(Ok(event)) = stream.next().await {
            if let WatchEvent::Added(obj) | WatchEvent::Modified(obj) = event {
                answer(&provider, &res, obj, &limit, &answered).await;
            }
        }
    }
}

/// The UIDs of the copies the status controller has written a status to.
type Answered = Arc<parking_lot::Mutex<std::collections::HashSet<String>>>;

async fn answer(
    provider: &Arc<dyn ClusterClient>,
    res: &ApiResource,
    obj: DynamicObject,
    limit: &Arc<tokio::sync::Semaphore>,
    answered: &Answered,
) {
    if obj.data.pointer("/status/phase").is_some() {
        return;
    }
    let uid = obj.metadata.uid.clone().unwrap_or_default();
    if !answered.lock().insert(uid.clone()) {
        return;
    }
    let Ok(permit) = limit.clone().acquire_owned().await else {
        return;
    };
    let (provider, res, answered) = (provider.clone(), res.clone(), answered.clone());
    tokio::spawn(async move {
        // No observedGeneration: the konnector holds a status that answers an older generation,
        // and the workloads' later spec changes would leave it older.
        let status = json!({"status": {"phase": "Ready"}});
        let name = obj.metadata.name.unwrap_or_default();
        // A copy deleted meanwhile, or a conflict with a workload's own status change: the
        // workload's value wins, nothing to retry. Any other failure is answered at the copy's
        // next event.
        let written = provider
            .patch_status(
                &res,
                Some(NAMESPACE),
                &name,
                &Patch::Merge(status),
                &PatchParams::default(),
            )
            .await;
        if written.is_err() {
            answered.lock().remove(&uid);
        }
        drop(permit);
    });
}

impl World {
    /// Waits until each of `apis` holds `per_api` objects on the provider and as many with a
    /// status on the consumer (every copy made, every status back); polls every `every`.
    pub async fn wait_synced(
        &self,
        apis: &[ApiResource],
        per_api: usize,
        deadline: Duration,
        every: Duration,
    ) -> anyhow::Result<()> {
        let start = std::time::Instant::now();
        let mut last;
        loop {
            let mut copies = 0;
            let mut statuses = 0;
            for res in apis {
                let (provider, _) = Self::count(&*self.provider, res).await.unwrap_or_default();
                let (_, consumer_status) = Self::count(&*self.consumer, res).await.unwrap_or_default();
                copies += provider.min(per_api);
                statuses += consumer_status.min(per_api);
            }
            last = (copies, statuses);
            if copies == per_api * apis.len() && statuses == per_api * apis.len() {
                return Ok(());
            }
            if start.elapsed() >= deadline {
                break;
            }
            tokio::time::sleep(every).await;
        }
        bail!(
            "not synced within {}s: {} of {} copies, {} statuses back",
            deadline.as_secs(),
            last.0,
            per_api * apis.len(),
            last.1
        )
    }

    /// The JSON size of every object of `apis` on one side, as the konnector's caches would
    /// hold them before any trimming.
    pub async fn json_bytes(client: &dyn ClusterClient, apis: &[ApiResource]) -> anyhow::Result<u64> {
        let mut bytes = 0;
        for res in apis {
            let list = client
                .list(res, Some(NAMESPACE), &Default::default())
                .await
                .context("listing objects")?;
            for item in &list.items {
                bytes += serde_json::to_vec(item).context("encoding an object")?.len() as u64;
            }
        }
        Ok(bytes)
    }
}
