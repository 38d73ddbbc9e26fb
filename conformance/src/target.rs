//! What a conformance case runs against: a [`Target`] cluster, its optional fake-only
//! [`FaultControl`], and the in-process implementation over fakeapi.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use fakeapi::{ErrorRule, FakeCluster, HistoryEvent, UserInfo, WriteRecord};
use kbind_cluster::ClusterClient;
use serde::Serialize;

/// The plain authenticated users every target knows (members of no special group); real
/// apiserver targets pre-register them by token.
pub const USERS: &[&str] = &["alice", "bob", "carol"];

/// How a target reaches its cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum TargetKind {
    /// fakeapi in the test's own process, through its in-process client.
    InProcess,
    /// fakeapi behind its HTTP surface, through the kube client.
    Http,
    /// A real kube-apiserver (with kube-controller-manager), through the kube client.
    RealApiserver,
}

impl TargetKind {
    /// The kebab-case name used in messages and the differences JSON.
    pub fn as_str(self) -> &'static str {
        match self {
            TargetKind::InProcess => "in-process",
            TargetKind::Http => "http",
            TargetKind::RealApiserver => "real-apiserver",
        }
    }
}

/// A cluster the conformance cases run against.
pub trait Target: Send + Sync {
    /// A short name for messages (e.g. `fakeapi-in-process`).
    fn name(&self) -> &str;

    /// A client acting as the cluster administrator.
    fn admin(&self) -> Arc<dyn ClusterClient>;

    /// A client acting as plain authenticated user `name`, one of [`USERS`].
    fn user(&self, name: &str) -> Arc<dyn ClusterClient>;

    /// Fake-only fault switches; `None` on targets that cannot be steered (cases needing them skip).
    fn faults(&self) -> Option<Arc<dyn FaultControl>>;

    /// How the target reaches its cluster.
    fn kind(&self) -> TargetKind;

    /// An administrator client on a kcp-like sibling cluster (one serving LogicalCluster
    /// `cluster`), where the target can make one.
    fn kcp_like(&self) -> Option<Arc<dyn ClusterClient>> {
        None
    }

    /// An administrator `kube::Client` for raw HTTP (what the seam cannot send, such as
    /// protobuf); `None` where the target has none (cases needing it skip).
    fn admin_http(&self) -> Option<kube::Client> {
        None
    }

    /// Why this target cannot run (e.g. real binaries missing); every case then skips.
    fn unavailable(&self) -> Option<String> {
        None
    }

    /// How long asynchronous effects (controllers, caches) may take on this target.
    fn patience(&self) -> Duration {
        match self.kind() {
            TargetKind::InProcess | TargetKind::Http => Duration::from_secs(5),
            TargetKind::RealApiserver => Duration::from_secs(60),
        }
    }
}

/// Fault switches of a fake cluster (see `fakeapi::FakeCluster`).
pub trait FaultControl: Send + Sync {
    /// Cuts the cluster off: requests fail with transport errors and open watches end.
    fn partition(&self);
    /// Ends a partition.
    fn heal(&self);
    /// Adds latency (on the tokio clock) before every answer; `None` removes it.
    fn set_latency(&self, latency: Option<Duration>);
    /// How many requests are waiting out the latency right now.
    fn delayed_requests(&self) -> usize;
    /// Injects an error into matching requests.
    fn inject_error(&self, rule: ErrorRule);
    /// Removes every injected error.
    fn clear_errors(&self);
    /// Ends every open watch.
    fn drop_watches(&self);
    /// Forgets the event history so older resourceVersions are 410 Gone.
    fn compact(&self);
    /// Swaps in a fresh, empty cluster with a new identity behind the same clients.
    fn replace_with_fresh(&self);
    /// Turns the garbage collector on or off.
    fn set_garbage_collector(&self, on: bool);
    /// The UID identifying the cluster.
    fn identity_uid(&self) -> String;
    /// The current resourceVersion.
    fn resource_version(&self) -> u64;
    /// The retained event history.
    fn event_log(&self) -> Vec<HistoryEvent>;
    /// Every successful write so far.
    fn write_log(&self) -> Vec<WriteRecord>;
}

/// The in-process target: a fresh fakeapi cluster reached through its in-process client.
pub struct InProcessTarget {
    cluster: FakeCluster,
    kcp: OnceLock<FakeCluster>,
    seed: u64,
}

impl InProcessTarget {
    /// A target over a new fake cluster seeded with `seed` (needs a tokio runtime).
    pub fn new(seed: u64) -> Self {
        // Short bookmark interval: real time runs the suite, and bookmark cases must not wait a minute.
        let cluster = FakeCluster::builder("conformance")
            .seed(seed)
            .bookmark_interval(Duration::from_millis(500))
            .build();
        Self {
            cluster,
            kcp: OnceLock::new(),
            seed,
        }
    }

    /// The fake cluster behind the target.
    pub fn cluster(&self) -> &FakeCluster {
        &self.cluster
    }
}

impl Target for InProcessTarget {
    fn name(&self) -> &str {
        "fakeapi-in-process"
    }

    fn admin(&self) -> Arc<dyn ClusterClient> {
        Arc::new(self.cluster.admin_client())
    }

    fn user(&self, name: &str) -> Arc<dyn ClusterClient> {
        Arc::new(self.cluster.client(UserInfo::user(name)))
    }

    fn faults(&self) -> Option<Arc<dyn FaultControl>> {
        Some(Arc::new(self.cluster.clone()))
    }

    fn kind(&self) -> TargetKind {
        TargetKind::InProcess
    }

    /// The cluster's HTTP router as a tower service, without sockets.
    fn admin_http(&self) -> Option<kube::Client> {
        let token = format!("raw-http-admin-{}", self.seed);
        self.cluster.add_token(&token, UserInfo::admin());
        let header = http::HeaderValue::from_str(&format!("Bearer {token}")).ok()?;
        let service = tower::ServiceBuilder::new()
            .map_request(move |mut req: http::Request<kube::client::Body>| {
                req.headers_mut().insert(http::header::AUTHORIZATION, header.clone());
                // The field manager of a write defaults to the user agent, as kube-apiserver's.
                req.headers_mut().insert(
                    http::header::USER_AGENT,
                    http::HeaderValue::from_static("kbind-conformance"),
                );
                req
            })
            .service(fakeapi::http::router(self.cluster.clone()));
        Some(kube::Client::new(service, "default"))
    }

    fn kcp_like(&self) -> Option<Arc<dyn ClusterClient>> {
        let kcp = self.kcp.get_or_init(|| {
            FakeCluster::builder("conformance-kcp")
                .seed(self.seed.wrapping_add(1))
                .kcp_like(true)
                .build()
        });
        Some(Arc::new(kcp.admin_client()))
    }
}

impl FaultControl for FakeCluster {
    fn partition(&self) {
        FakeCluster::partition(self);
    }

    fn heal(&self) {
        FakeCluster::heal(self);
    }

    fn set_latency(&self, latency: Option<Duration>) {
        FakeCluster::set_latency(self, latency);
    }

    fn delayed_requests(&self) -> usize {
        FakeCluster::delayed_requests(self)
    }

    fn inject_error(&self, rule: ErrorRule) {
        FakeCluster::inject_error(self, rule);
    }

    fn clear_errors(&self) {
        FakeCluster::clear_errors(self);
    }

    fn drop_watches(&self) {
        FakeCluster::drop_watches(self);
    }

    fn compact(&self) {
        FakeCluster::compact(self);
    }

    fn replace_with_fresh(&self) {
        FakeCluster::replace_with_fresh(self);
    }

    fn set_garbage_collector(&self, on: bool) {
        FakeCluster::set_garbage_collector(self, on);
    }

    fn identity_uid(&self) -> String {
        FakeCluster::identity_uid(self)
    }

    fn resource_version(&self) -> u64 {
        FakeCluster::resource_version(self)
    }

    fn event_log(&self) -> Vec<HistoryEvent> {
        FakeCluster::event_log(self)
    }

    fn write_log(&self) -> Vec<WriteRecord> {
        FakeCluster::write_log(self)
    }
}

/// Run (2): fakeapi served over HTTPS on loopback (its generated CA verified), reached
/// through `kube::Client` and the seam's kube implementation.
pub struct HttpTarget {
    inner: InProcessTarget,
    configs: std::collections::BTreeMap<String, kube::Config>,
    kcp_config: Option<kube::Config>,
    _servers: Vec<fakeapi::serve::RunningServer>,
}

impl HttpTarget {
    /// Serves a new fake cluster (and its kcp-like sibling) over HTTPS with the admin and
    /// [`USERS`] as token users.
    pub async fn start(seed: u64) -> Result<Self, String> {
        let inner = InProcessTarget::new(seed);
        let mut options = fakeapi::serve::ClusterServeOptions::default();
        for user in USERS {
            let spec = fakeapi::serve::UserSpec::new(user, &format!("{user}-{seed}-token"), vec![])
                .map_err(|e| e.to_string())?;
            options.users.push(spec);
        }
        let server = fakeapi::serve::serve_cluster(inner.cluster.clone(), options)
            .await
            .map_err(|e| e.to_string())?;
        let mut configs = std::collections::BTreeMap::new();
        let admin = server.admin_kubeconfig().ok_or("no admin kubeconfig")?;
        configs.insert("admin".to_string(), kube_config(&admin).await?);
        for user in USERS {
            let kc = server
                .user_kubeconfig(user)
                .ok_or_else(|| format!("no kubeconfig for {user}"))?;
            configs.insert(user.to_string(), kube_config(&kc).await?);
        }
        let kcp = FakeCluster::builder("conformance-kcp")
            .seed(seed.wrapping_add(1))
            .kcp_like(true)
            .build();
        let kcp_server = fakeapi::serve::serve_cluster(kcp.clone(), fakeapi::serve::ClusterServeOptions::default())
            .await
            .map_err(|e| e.to_string())?;
        let kcp_config = kube_config(&kcp_server.admin_kubeconfig().ok_or("no kcp kubeconfig")?).await?;
        let _ = inner.kcp.set(kcp);
        Ok(Self {
            inner,
            configs,
            kcp_config: Some(kcp_config),
            _servers: vec![server, kcp_server],
        })
    }

    fn client_for(config: &kube::Config) -> Arc<dyn ClusterClient> {
        Arc::new(
            kbind_cluster::KubeClusterClient::from_config(config.clone())
                .unwrap_or_else(|e| panic!("kube client: {e}")),
        )
    }
}

async fn kube_config(yaml: &str) -> Result<kube::Config, String> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(yaml).map_err(|e| e.to_string())?;
    kube::Config::from_custom_kubeconfig(kubeconfig, &kube::config::KubeConfigOptions::default())
        .await
        .map_err(|e| e.to_string())
}

impl Target for HttpTarget {
    fn name(&self) -> &str {
        "fakeapi-https"
    }

    fn admin(&self) -> Arc<dyn ClusterClient> {
        Self::client_for(&self.configs["admin"])
    }

    fn user(&self, name: &str) -> Arc<dyn ClusterClient> {
        let config = self
            .configs
            .get(name)
            .unwrap_or_else(|| panic!("no kubeconfig for {name}"));
        Self::client_for(config)
    }

    fn faults(&self) -> Option<Arc<dyn FaultControl>> {
        Some(Arc::new(self.inner.cluster.clone()))
    }

    fn kind(&self) -> TargetKind {
        TargetKind::Http
    }

    fn admin_http(&self) -> Option<kube::Client> {
        kube::Client::try_from(self.configs["admin"].clone()).ok()
    }

    fn kcp_like(&self) -> Option<Arc<dyn ClusterClient>> {
        self.kcp_config.as_ref().map(Self::client_for)
    }
}
