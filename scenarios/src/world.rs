//! The world: a seeded set of named fake clusters on tokio's paused clock, konnector replicas
//! running the engine against the consumer, fault verbs, and the invariants after every step.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use base64::Engine as _;
use fakeapi::{FakeCluster, UserInfo};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, SharedClock, TokioClock};
use kbind_engine::Links;
use kbind_engine::context::{Context, EngineConfig};
use kbind_engine::engine::Engine;
use kbind_engine::leader::LeaderConfig;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bundle::{self, Credential};
use crate::client::WorldClient;
use crate::connector::FakeConnector;
use crate::invariants::{self, Violation};
use crate::logcap::LogCapture;

/// One world tick.
pub const TICK: Duration = Duration::from_secs(1);
/// The konnector's namespace on the consumer.
pub const NAMESPACE: &str = "kbind";

/// The seed from `KBIND_SEED`, else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("KBIND_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `schedule` once per seed on a fresh paused-clock runtime: `KBIND_SEED` replays one seed,
/// `KBIND_SEEDS=N` runs seeds `0..N`, else `0..default_count`.
pub fn for_each_seed<Fut: std::future::Future<Output = ()>>(default_count: u64, schedule: impl Fn(u64) -> Fut) {
    for_each_seed_scaled(default_count, 1, schedule);
}

/// [`for_each_seed`] for a property whose seed costs several times a usual one: `KBIND_SEEDS=N`
/// runs seeds `0..N/divisor` (at least one), so CI's one `KBIND_SEEDS` keeps its total bounded.
pub fn for_each_seed_scaled<Fut: std::future::Future<Output = ()>>(
    default_count: u64,
    divisor: u64,
    schedule: impl Fn(u64) -> Fut,
) {
    let seeds: Vec<u64> = match std::env::var("KBIND_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => {
            let n = std::env::var("KBIND_SEEDS")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(default_count, |n| (n / divisor.max(1)).max(1));
            (0..n).collect()
        }
    };
    for seed in seeds {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(schedule(seed));
    }
}

/// How a provider cluster is built.
#[derive(Debug, Clone, Default)]
pub struct ProviderOpts {
    /// A CRD-less, kcp-like provider (LogicalCluster `cluster` is its identity).
    pub kcp_like: bool,
}

/// Builds a [`World`].
#[derive(Debug, Clone)]
pub struct WorldBuilder {
    seed: u64,
    story: String,
    consumer: String,
    providers: Vec<(String, ProviderOpts)>,
    shared: Vec<(String, SharedProvider)>,
    leader_election: bool,
    config: EngineConfig,
    log_level: tracing::Level,
    bookmark_interval: Option<Duration>,
}

impl WorldBuilder {
    /// The seed of every random choice in the world.
    pub fn seed(mut self, seed: u64) -> Self {
        self.seed = seed;
        self
    }

    /// The story's name, printed on failure.
    pub fn story(mut self, name: &str) -> Self {
        self.story = name.to_string();
        self
    }

    /// The consumer cluster's name.
    pub fn consumer(mut self, name: &str) -> Self {
        self.consumer = name.to_string();
        self
    }

    /// Adds a plain provider cluster.
    pub fn provider(mut self, name: &str, opts: ProviderOpts) -> Self {
        self.providers.push((name.to_string(), opts));
        self
    }

    /// Adds a provider cluster of another world (a second consumer cluster of one provider).
    pub fn shared_provider(mut self, name: &str, provider: SharedProvider) -> Self {
        self.shared.push((name.to_string(), provider));
        self
    }

    /// Adds a kcp-like provider cluster.
    pub fn kcp_provider(self, name: &str) -> Self {
        self.provider(name, ProviderOpts { kcp_like: true })
    }

    /// The lowest level of log line the world keeps (default: debug). A herd of worlds on one
    /// thread logs into the capture installed last, so a big herd keeps warnings only.
    pub fn log_level(mut self, level: tracing::Level) -> Self {
        self.log_level = level;
        self
    }

    /// How often every cluster of the world sends each open watch a bookmark (fakeapi's
    /// default otherwise): stories of months raise it so virtual time stays cheap.
    pub fn bookmark_interval(mut self, every: Duration) -> Self {
        self.bookmark_interval = Some(every);
        self
    }

    /// The konnector's settings (default: the konnector's defaults).
    pub fn engine_config(mut self, config: EngineConfig) -> Self {
        self.config = config;
        self
    }

    /// Gates konnector replicas behind leader election (on by default).
    pub fn leader_election(mut self, on: bool) -> Self {
        self.leader_election = on;
        self
    }

    /// Creates the clusters (on the current, paused runtime) and installs kbind's CRDs.
    pub async fn build(self) -> World {
        let log = LogCapture::default();
        let log_guard = log.install_at(self.log_level);
        let mut rng = ChaCha8Rng::seed_from_u64(self.seed);
        let clock: SharedClock = Arc::new(TokioClock::fixed());
        let bookmarks = |b: fakeapi::FakeClusterBuilder| match self.bookmark_interval {
            Some(every) => b.bookmark_interval(every),
            None => b,
        };
        let consumer = bookmarks(
            FakeCluster::builder(&self.consumer)
                .seed(rng.next_u64())
                .clock(clock.clone()),
        )
        .build();
        let connector = Arc::new(FakeConnector::default());
        let mut providers = BTreeMap::new();
        for (name, opts) in &self.providers {
            let cluster = bookmarks(
                FakeCluster::builder(name)
                    .seed(rng.next_u64())
                    .clock(clock.clone())
                    .kcp_like(opts.kcp_like),
            )
            .build();
            let ca_pem = fake_ca_pem(name, rng.next_u64());
            connector.register(name, cluster.clone(), ca_pem.clone());
            providers.insert(
                name.clone(),
                Provider {
                    cluster,
                    ca_pem,
                    replacements: Vec::new(),
                },
            );
        }
        for (name, shared) in self.shared {
            connector.register(&name, shared.cluster.clone(), shared.ca_pem.clone());
            providers.insert(
                name,
                Provider {
                    cluster: shared.cluster,
                    ca_pem: shared.ca_pem,
                    replacements: Vec::new(),
                },
            );
        }
        let mut world = World {
            seed: self.seed,
            story: self.story,
            step: 0,
            rng,
            // Its own stream (not drawn from `rng`, so adding it left every seeded world as it was).
            randomness: kbind_cluster::backoff::seeded(self.seed ^ JITTER_STREAM),
            clock,
            consumer,
            providers,
            connector,
            replicas: BTreeMap::new(),
            credentials: Vec::new(),
            story_deleted: BTreeSet::new(),
            notes: Vec::new(),
            leader_election: self.leader_election,
            config: self.config,
            log,
            _log_guard: log_guard,
            checked: std::sync::Mutex::new(Checked::default()),
        };
        world.install_kbind().await;
        world
    }
}

/// The lifetime of a ServiceAccount token a story mints without asking for renewals.
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

/// Salt of the world's jitter stream: a seed of its own, derived from the world's.
const JITTER_STREAM: u64 = 0x6a09_e667_f3bc_c908;

/// A fake self-signed CA certificate, unique per cluster (PEM armour around seeded bytes).
fn fake_ca_pem(name: &str, salt: u64) -> Vec<u8> {
    let body = base64::engine::general_purpose::STANDARD.encode(format!("fake-ca:{name}:{salt:016x}"));
    format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n").into_bytes()
}

/// A provider cluster handed to another world ([`WorldBuilder::shared_provider`]).
#[derive(Debug, Clone)]
pub struct SharedProvider {
    cluster: FakeCluster,
    ca_pem: Vec<u8>,
}

/// A provider cluster of the world.
#[derive(Debug, Clone)]
struct Provider {
    cluster: FakeCluster,
    ca_pem: Vec<u8>,
    /// Every replacement: the provider's resourceVersion then, and the identity it replaced.
    replacements: Vec<(u64, String)>,
}

/// One konnector replica.
struct Replica {
    task: Option<JoinHandle<()>>,
    registry: Links,
    leading: watch::Receiver<bool>,
    cut: Arc<AtomicBool>,
}

/// The world a story runs in.
pub struct World {
    seed: u64,
    story: String,
    step: u64,
    rng: ChaCha8Rng,
    /// The jitter of every konnector's retries and requeues in this world.
    randomness: kbind_cluster::backoff::SharedRandomness,
    clock: SharedClock,
    consumer: FakeCluster,
    providers: BTreeMap<String, Provider>,
    connector: Arc<FakeConnector>,
    replicas: BTreeMap<String, Replica>,
    credentials: Vec<Credential>,
    story_deleted: BTreeSet<(String, String, String)>,
    notes: Vec<String>,
    leader_election: bool,
    config: EngineConfig,
    log: LogCapture,
    _log_guard: tracing::subscriber::DefaultGuard,
    /// Where the previous check left off in each log (invariants 8 and 9 judge one step).
    checked: std::sync::Mutex<Checked>,
}

/// How far the previous invariant check read each log.
#[derive(Debug, Default)]
struct Checked {
    window: invariants::Window,
    reads: invariants::ReadMemory,
    /// How many bytes of the log were scanned for credentials, and for how many secrets.
    log_scanned: usize,
    log_secrets: usize,
}

impl World {
    /// A builder with seed 0, a consumer called `consumer` and leader election on.
    pub fn builder() -> WorldBuilder {
        WorldBuilder {
            seed: 0,
            story: "unnamed story".into(),
            consumer: "consumer".into(),
            providers: Vec::new(),
            shared: Vec::new(),
            leader_election: true,
            config: EngineConfig::default(),
            log_level: tracing::Level::DEBUG,
            bookmark_interval: None,
        }
    }

    /// The seed.
    pub fn seed(&self) -> u64 {
        self.seed
    }

    /// Steps taken so far.
    pub fn steps(&self) -> u64 {
        self.step
    }

    /// The consumer cluster.
    pub fn consumer(&self) -> &FakeCluster {
        &self.consumer
    }

    /// Provider cluster `name`.
    pub fn provider(&self, name: &str) -> &FakeCluster {
        &self.provider_entry(name).cluster
    }

    /// The world's connector (connection counts per provider).
    pub fn connector(&self) -> &FakeConnector {
        &self.connector
    }

    /// The world clock.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// The captured engine log.
    pub fn log(&self) -> &LogCapture {
        &self.log
    }

    fn provider_entry(&self, name: &str) -> &Provider {
        self.providers
            .get(name)
            .unwrap_or_else(|| panic!("the world has no provider {name:?}"))
    }

    fn note(&mut self, what: String) {
        self.notes.push(format!("step {}: {what}", self.step));
    }

    async fn install_kbind(&mut self) {
        let admin = self.consumer.admin_client();
        for mut crd in kbind_api::crds() {
            // kube-apiserver defaults listKind; fakeapi does not yet, and re-establishes for ever.
            crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
            admin.create_typed(&crd).await.expect("installing kbind's CRDs");
        }
        admin
            .create(
                &ns_resource(),
                None,
                &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})),
                &Default::default(),
            )
            .await
            .expect("creating the konnector namespace");
        let connections = ApiResource::erase::<kbind_api::Connection>(&());
        for _ in 0..100 {
            if admin.list(&connections, None, &Default::default()).await.is_ok() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.fail(&Violation {
            invariant: "setup",
            detail: "the Connection CRD is never served".into(),
        });
    }

    // ---- credentials and the bundle ----

    /// A static admin token on `provider` (survives a provider replacement, like a break-glass
    /// token; not revocable).
    pub fn mint_admin_token(&mut self, provider: &str) -> Credential {
        let user = format!("kbind-konnector.{}@{provider}", self.consumer.name());
        self.mint_admin_token_for(provider, &user)
    }

    /// [`Self::mint_admin_token`] authenticating as `user` (tells Connections apart in the
    /// provider's request log).
    pub fn mint_admin_token_for(&mut self, provider: &str, user: &str) -> Credential {
        let token = format!("kbind-admin.{:016x}{:016x}", self.rng.next_u64(), self.rng.next_u64());
        let user = user.to_string();
        self.provider(provider).add_token(
            &token,
            UserInfo {
                name: user.clone(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        );
        let cred = Credential {
            provider: provider.to_string(),
            token,
            user,
            service_account: None,
        };
        self.credentials.push(cred.clone());
        cred
    }

    /// A revocable ServiceAccount token on `provider`, bound to ClusterRole `cluster_role`, for a
    /// year (longer than any story) and without the right to renew itself.
    pub async fn mint_service_account(&mut self, provider: &str, name: &str, cluster_role: &str) -> Credential {
        self.service_account_token(provider, name, cluster_role, YEAR, false)
            .await
    }

    /// An issued token as kbind's issuer makes it: a ServiceAccount token on `provider` for
    /// `lifetime`, bound to ClusterRole `cluster_role`, whose Role in its namespace lets it
    /// create tokens for itself (by name) and nothing else, so the konnector renews it.
    pub async fn mint_issued_token(
        &mut self,
        provider: &str,
        name: &str,
        cluster_role: &str,
        lifetime: Duration,
    ) -> Credential {
        self.service_account_token(provider, name, cluster_role, lifetime, true)
            .await
    }

    async fn service_account_token(
        &mut self,
        provider: &str,
        name: &str,
        cluster_role: &str,
        lifetime: Duration,
        renews_itself: bool,
    ) -> Credential {
        let admin = self.provider(provider).admin_client();
        let _ = admin
            .create(
                &ns_resource(),
                None,
                &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})),
                &Default::default(),
            )
            .await;
        let sa_res = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        admin
            .create(
                &sa_res,
                Some(NAMESPACE),
                &object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}})),
                &Default::default(),
            )
            .await
            .expect("creating the konnector's ServiceAccount");
        let crb = ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&());
        admin
            .create(
                &crb,
                None,
                &object(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": format!("{name}-{cluster_role}")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
                })),
                &Default::default(),
            )
            .await
            .expect("binding the konnector's ClusterRole");
        if renews_itself {
            let self_token = format!("{name}-self-token");
            for obj in [
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": self_token, "namespace": NAMESPACE},
                    "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"], "resourceNames": [name]}],
                }),
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": self_token, "namespace": NAMESPACE},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self_token},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
                }),
            ] {
                let res = match obj["kind"].as_str() {
                    Some("Role") => ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
                    _ => ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
                };
                admin
                    .create(&res, Some(NAMESPACE), &object(obj), &Default::default())
                    .await
                    .expect("letting the ServiceAccount renew its own token");
            }
        }
        let request = json!({"spec": {"expirationSeconds": lifetime.as_secs()}});
        let answer = admin
            .create_subresource(&sa_res, Some(NAMESPACE), name, "token", &request)
            .await
            .expect("minting a ServiceAccount token");
        let token = answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let cred = Credential {
            provider: provider.to_string(),
            token,
            user: format!("system:serviceaccount:{NAMESPACE}:{name}"),
            service_account: Some((NAMESPACE.to_string(), name.to_string())),
        };
        self.credentials.push(cred.clone());
        cred
    }

    /// Provider `name`, to share with a second world (a second consumer of the same provider).
    pub fn share_provider(&self, name: &str) -> SharedProvider {
        let p = self.provider_entry(name);
        SharedProvider {
            cluster: p.cluster.clone(),
            ca_pem: p.ca_pem.clone(),
        }
    }

    /// The CA (PEM) that provider `name`'s server certificate chains to.
    pub fn ca_pem(&self, name: &str) -> &[u8] {
        &self.provider_entry(name).ca_pem
    }

    /// The kubeconfig for `cred`, with the provider's real CA.
    pub fn kubeconfig_for(&self, cred: &Credential) -> String {
        let provider = self.provider_entry(&cred.provider);
        bundle::kubeconfig(
            &FakeConnector::server_url(&cred.provider),
            &provider.ca_pem,
            &cred.token,
        )
    }

    /// Applies the one-apply bundle for Connection `name` to the consumer (as its admin).
    pub async fn apply_bundle(&mut self, name: &str, cred: &Credential, apis: &[&str]) {
        for obj in bundle::bundle(name, NAMESPACE, &self.kubeconfig_for(cred), apis) {
            self.apply_object(obj).await;
        }
        self.note(format!("applied the bundle for {name}"));
    }

    /// Creates one of the bundle's objects (Secret, Connection or ClusterBinding) as the
    /// consumer's admin.
    pub async fn apply_object(&mut self, obj: Value) {
        let res = resource_of(&obj);
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let what = format!(
            "{} {}",
            res.kind,
            obj.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        );
        self.consumer
            .admin_client()
            .create(&res, ns.as_deref(), &object(obj), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("applying {what}: {e}"));
        self.note(format!("applied {what}"));
    }

    /// Connection `name` as the consumer stores it now.
    pub async fn connection(&self, name: &str) -> Option<kbind_api::Connection> {
        self.consumer
            .admin_client()
            .get_typed_opt(None, name)
            .await
            .ok()
            .flatten()
    }

    /// Steps until Connection `name` satisfies `done`, failing the story after `max_steps`.
    pub async fn run_until_connection(
        &mut self,
        name: &str,
        what: &str,
        max_steps: u64,
        done: impl Fn(&kbind_api::Connection) -> bool,
    ) -> kbind_api::Connection {
        for _ in 0..=max_steps {
            if let Some(conn) = self.connection(name).await.filter(|c| done(c)) {
                return conn;
            }
            self.step().await;
        }
        let status = self.connection(name).await.map(|c| c.status);
        self.fail(&Violation {
            invariant: "progress",
            detail: format!("Connection {name} never reached {what} in {max_steps} steps; last status {status:?}"),
        })
    }

    // ---- konnector replicas ----

    /// Starts konnector replica `konnector-0`.
    pub fn start_konnector(&mut self) {
        self.start_replica("konnector-0");
    }

    /// Starts (or restarts) konnector replica `id`.
    pub fn start_replica(&mut self, id: &str) {
        let cut = self
            .replicas
            .get(id)
            .map(|r| r.cut.clone())
            .unwrap_or_else(|| Arc::new(AtomicBool::new(false)));
        let consumer = WorldClient::user(
            self.consumer.client(UserInfo {
                name: replica_user(id),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            }),
            cut.clone(),
        );
        let ctx = Context {
            consumer: Arc::new(consumer),
            connector: self.connector.clone(),
            clock: self.clock.clone(),
            randomness: self.randomness.clone(),
            config: self.config.clone(),
        };
        let leader = self
            .leader_election
            .then(|| LeaderConfig::new(NAMESPACE, "kbind-konnector", id));
        let engine = Engine::builder(ctx).leader_election(leader).build();
        let registry = engine.providers();
        let leading = engine.leading();
        let task = tokio::spawn(async move { engine.run().await });
        self.replicas.insert(
            id.to_string(),
            Replica {
                task: Some(task),
                registry,
                leading,
                cut,
            },
        );
        self.note(format!("started {id}"));
    }

    /// The provider registry of replica `konnector-0`.
    pub fn providers(&self) -> Links {
        self.registry_of("konnector-0")
    }

    /// The provider registry of replica `id`.
    pub fn registry_of(&self, id: &str) -> Links {
        self.replicas
            .get(id)
            .map(|r| r.registry.clone())
            .unwrap_or_else(|| panic!("no konnector replica {id:?}"))
    }

    /// Whether replica `id` is running and leads (a crashed replica's last word does not count).
    pub fn is_leading(&self, id: &str) -> bool {
        self.replicas
            .get(id)
            .is_some_and(|r| r.task.as_ref().is_some_and(|t| !t.is_finished()) && *r.leading.borrow())
    }

    /// The consumer user replica `id` writes as.
    pub fn replica_user(&self, id: &str) -> String {
        replica_user(id)
    }

    // ---- faults ----

    /// Cuts provider `name` off from everyone.
    pub fn partition(&mut self, name: &str) {
        self.provider(name).partition();
        self.note(format!("partitioned {name}"));
    }

    /// Ends the partition of provider `name`.
    pub fn heal(&mut self, name: &str) {
        self.provider(name).heal();
        self.note(format!("healed {name}"));
    }

    /// Makes provider `name` a black hole: nothing is answered and nothing ends (see
    /// `FakeCluster::black_hole`); only the konnector's request timeout notices.
    pub fn black_hole(&mut self, name: &str) {
        self.provider(name).black_hole();
        self.note(format!("black-holed {name}"));
    }

    /// Lifts the black hole of provider `name`.
    pub fn restore(&mut self, name: &str) {
        self.provider(name).restore();
        self.note(format!("restored {name}"));
    }

    /// Replaces provider `name` with a fresh, empty cluster with a new identity (same URL, CA
    /// and static tokens).
    pub fn replace_provider(&mut self, name: &str) {
        let cluster = self.provider(name).clone();
        let rv = cluster.resource_version();
        let old_identity = cluster.identity_uid();
        cluster.replace_with_fresh();
        self.connector.server_rebuilt(name);
        if let Some(p) = self.providers.get_mut(name) {
            p.replacements.push((rv, old_identity));
        }
        self.note(format!("replaced {name} with a fresh cluster"));
    }

    /// Revokes a ServiceAccount credential (deletes the ServiceAccount: its tokens die).
    pub async fn revoke(&mut self, cred: &Credential) {
        let (ns, name) = cred
            .service_account
            .clone()
            .expect("only ServiceAccount credentials can be revoked");
        let sa_res = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        self.provider(&cred.provider)
            .admin_client()
            .delete(&sa_res, Some(&ns), &name, &Default::default())
            .await
            .expect("revoking the ServiceAccount");
        self.note(format!("revoked {} on {}", cred.user, cred.provider));
    }

    /// Points Connection `name`'s Secret at `cred` (possibly another provider), with `ca_pem`
    /// (`None`: the right CA of `cred`'s provider).
    pub async fn swap_secret(&mut self, name: &str, cred: &Credential, ca_pem: Option<&[u8]>) {
        let provider = self.provider_entry(&cred.provider);
        let kubeconfig = bundle::kubeconfig(
            &FakeConnector::server_url(&cred.provider),
            ca_pem.unwrap_or(&provider.ca_pem),
            &cred.token,
        );
        self.consumer
            .admin_client()
            .patch(
                &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
                Some(NAMESPACE),
                name,
                &kbind_cluster::Patch::Merge(json!({"stringData": {"kubeconfig": kubeconfig}})),
                &Default::default(),
            )
            .await
            .expect("swapping the Secret");
        self.note(format!("swapped the Secret of {name} to {}", cred.provider));
    }

    /// Deletes a consumer object as the story (allowed by invariant 1).
    pub async fn delete_on_consumer(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        let resource = qualified(res);
        self.story_deleted
            .insert((resource, namespace.unwrap_or("").to_string(), name.to_string()));
        let _ = self
            .consumer
            .admin_client()
            .delete(res, namespace, name, &Default::default())
            .await;
        self.note(format!("deleted {} {name} on the consumer", res.plural));
    }

    /// Kills replica `konnector-0` without any cleanup.
    pub fn crash_konnector(&mut self) {
        self.crash_replica("konnector-0");
    }

    /// Kills replica `id` without any cleanup (no Lease release).
    pub fn crash_replica(&mut self, id: &str) {
        if let Some(task) = self.replicas.get_mut(id).and_then(|r| r.task.take()) {
            task.abort();
        }
        self.note(format!("crashed {id}"));
    }

    /// Restarts replica `konnector-0` from scratch.
    pub fn restart_konnector(&mut self) {
        self.crash_replica("konnector-0");
        self.start_replica("konnector-0");
    }

    /// Cuts replica `id` off from the consumer (`false` restores it).
    pub fn isolate_replica(&mut self, id: &str, isolated: bool) {
        if let Some(r) = self.replicas.get(id) {
            r.cut.store(isolated, Ordering::SeqCst);
        }
        self.note(format!(
            "{} {id} from the consumer",
            if isolated { "isolated" } else { "reconnected" }
        ));
    }

    // ---- time ----

    /// Advances the paused clock one tick, lets every task settle, then checks the invariants.
    pub async fn step(&mut self) {
        tokio::time::sleep(TICK).await;
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
        self.step += 1;
        if let Some(violation) = self.check_invariants().await {
            self.fail(&violation);
        }
    }

    /// Lets `span` of virtual time pass as one step (every timer due within it fires in order,
    /// as the paused clock advances from one to the next), then checks the invariants. For
    /// stories of months, where a step of [`TICK`] at a time would take forever.
    pub async fn let_pass(&mut self, span: Duration) {
        tokio::time::sleep(span).await;
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
        self.step += 1;
        if let Some(violation) = self.check_invariants().await {
            self.fail(&violation);
        }
    }

    /// Steps `n` times.
    pub async fn steps_for(&mut self, n: u64) {
        for _ in 0..n {
            self.step().await;
        }
    }

    /// Steps until the async check `done` holds, failing the story after `max_steps`.
    pub async fn run_until_async(
        &mut self,
        what: &str,
        max_steps: u64,
        done: impl for<'a> Fn(&'a World) -> futures::future::BoxFuture<'a, bool>,
    ) {
        for _ in 0..=max_steps {
            if done(self).await {
                return;
            }
            self.step().await;
        }
        self.fail(&Violation {
            invariant: "progress",
            detail: format!("not true after {max_steps} steps: {what}"),
        })
    }

    /// Installs `crd` on provider `name` (as its admin) and waits until it is served.
    pub async fn install_provider_crd(&mut self, name: &str, crd: Value) {
        let crd_name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let res = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        self.provider(name)
            .admin_client()
            .create(&res, None, &object(crd), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("installing CRD {crd_name} on {name}: {e}"));
        self.note(format!("installed CRD {crd_name} on {name}"));
    }

    /// Reads one object on the consumer (as its admin); `None` when absent.
    pub async fn consumer_get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Option<DynamicObject> {
        self.consumer
            .admin_client()
            .get_opt(res, namespace, name)
            .await
            .ok()
            .flatten()
    }

    /// Reads one object on provider `provider` (as its admin); `None` when absent.
    pub async fn provider_get(
        &self,
        provider: &str,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<DynamicObject> {
        self.provider(provider)
            .admin_client()
            .get_opt(res, namespace, name)
            .await
            .ok()
            .flatten()
    }

    /// Steps until `done` holds, failing the story after `max_steps`.
    pub async fn run_until(&mut self, what: &str, max_steps: u64, done: impl Fn(&World) -> bool) {
        for _ in 0..max_steps {
            if done(self) {
                return;
            }
            self.step().await;
        }
        if !done(self) {
            self.fail(&Violation {
                invariant: "progress",
                detail: format!("not true after {max_steps} steps: {what}"),
            });
        }
    }

    /// The consumer users of every konnector replica.
    fn konnector_users(&self) -> BTreeSet<String> {
        self.replicas.keys().map(|id| replica_user(id)).collect()
    }

    /// The provider users the konnector writes as (every credential minted in the world).
    fn konnector_provider_users(&self) -> BTreeSet<String> {
        self.credentials.iter().map(|c| c.user.clone()).collect()
    }

    /// The first broken invariant, if any (invariants 8 and 9 judge what happened since the
    /// previous check).
    pub async fn check_invariants(&self) -> Option<Violation> {
        let consumer = invariants::Logs::of(&self.consumer);
        let providers: Vec<invariants::Logs> = self
            .providers
            .values()
            .map(|p| invariants::Logs::of(&p.cluster))
            .collect();
        let konnector_users = self.konnector_users();
        let provider_users = self.konnector_provider_users();
        let consumer_uid = self.consumer.identity_uid();
        let (window, requests, stepwise) = {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            let mut window = checked.window.clone();
            window.consumer_to = self.consumer.resource_version();
            checked.window = invariants::Window {
                consumer_from: window.consumer_to,
                consumer_to: window.consumer_to,
                provider_writes_from: providers.iter().map(|p| (p.name.clone(), p.writes.len())).collect(),
                consumer_writes_from: consumer.writes.len(),
            };
            let clusters: Vec<&FakeCluster> = self.providers.values().map(|p| &p.cluster).collect();
            let requests = invariants::new_requests(&self.consumer, &clusters, &mut checked.reads);
            let reads = invariants::deletions_rest_on_complete_reads(
                self.consumer.name(),
                &requests,
                &konnector_users,
                &provider_users,
                &mut checked.reads,
            );
            (window, requests, reads)
        };
        let crd_verdicts = invariants::crd_delete_verdicts(&consumer, &konnector_users);
        if let Some(v) =
            invariants::nothing_deleted_on_consumer(&consumer, &konnector_users, &self.story_deleted, &crd_verdicts)
        {
            return Some(v);
        }
        // §8.2 binds a Connection pinned to the identity that was replaced; one that first met
        // the provider after the replacement pinned the new identity, legitimately.
        let pinned = self.pinned_identities().await;
        for ((name, provider), logs) in self.providers.iter().zip(&providers) {
            let users: BTreeSet<String> = self
                .credentials
                .iter()
                .filter(|c| &c.provider == name)
                .map(|c| c.user.clone())
                .collect();
            for (rv, old) in provider.replacements.iter().filter(|(_, old)| pinned.contains(old)) {
                if let Some(v) = invariants::no_write_after_identity_change(name, logs, *rv, &users) {
                    return Some(Violation {
                        detail: format!("{} (the Connection is pinned to {old})", v.detail),
                        ..v
                    });
                }
            }
        }
        for (name, logs) in self.providers.keys().zip(&providers) {
            if let Some(v) = invariants::no_write_to_foreign_copies(name, logs, &provider_users, &consumer_uid) {
                return Some(v);
            }
        }
        if let Some(v) = invariants::no_overwrite_of_foreign_crds(&consumer, &konnector_users) {
            return Some(v);
        }
        if let Some(v) = invariants::related_copies_keep_their_owner("the consumer", &consumer, &konnector_users, true)
        {
            return Some(v);
        }
        for (name, logs) in self.providers.keys().zip(&providers) {
            if let Some(v) = invariants::related_copies_keep_their_owner(name, logs, &provider_users, false) {
                return Some(v);
            }
        }
        if let Some(v) = invariants::deleted_objects_leave_no_copies(&consumer, &providers, &consumer_uid) {
            return Some(v);
        }
        if let Some(v) = invariants::unbind_keeps_served_copies(
            &consumer,
            &providers,
            &konnector_users,
            &provider_users,
            &consumer_uid,
            &window,
            &requests,
        ) {
            return Some(v);
        }
        if let Some(v) = stepwise {
            return Some(v);
        }
        let mut secrets: Vec<String> = self.credentials.iter().map(|c| c.token.clone()).collect();
        secrets.extend(invariants::credential_material(&consumer));
        // Events, statuses and the log only grow: scan what was added since the previous check
        // (the log from a little before, so a secret written across the boundary is still
        // whole), or all of it when the set of secrets changed.
        let (after_rv, from) = {
            let checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            if checked.log_secrets == secrets.len() {
                let longest = secrets.iter().map(String::len).max().unwrap_or(0);
                (window.consumer_from, checked.log_scanned.saturating_sub(longest))
            } else {
                (0, 0)
            }
        };
        let surfaces = invariants::consumer_surfaces(&consumer, after_rv);
        let (text, len) = self.log.text_from(from);
        {
            let mut checked = self.checked.lock().unwrap_or_else(|p| p.into_inner());
            checked.log_scanned = len;
            checked.log_secrets = secrets.len();
        }
        // Tokens the providers issued (the konnector's own renewals among them) exist only since
        // they were minted, within the text scanned since the previous check.
        let issued: Vec<String> = self
            .providers
            .values()
            .flat_map(|p| p.cluster.issued_tokens())
            .collect();
        invariants::no_credentials_in("consumer events or Connection or binding status", &surfaces, &secrets)
            .or_else(|| invariants::no_credentials_in("the konnector log", &text, &secrets))
            .or_else(|| {
                invariants::no_credentials_in("consumer events or Connection or binding status", &surfaces, &issued)
            })
            .or_else(|| invariants::no_credentials_in("the konnector log", &text, &issued))
    }

    /// The `remoteClusterUID`s the consumer's Connections are pinned to.
    async fn pinned_identities(&self) -> BTreeSet<String> {
        let connections = ApiResource::erase::<kbind_api::Connection>(&());
        let Ok(list) = self
            .consumer
            .admin_client()
            .list(&connections, None, &Default::default())
            .await
        else {
            return BTreeSet::new();
        };
        list.items
            .iter()
            .filter_map(|c| c.data.pointer("/status/remoteClusterUID").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// Fails the story with everything needed to reproduce it.
    pub fn fail(&self, violation: &Violation) -> ! {
        let mut report = format!(
            "\nstory {:?} failed at step {} (seed {}): {} {}\nreproduce: KBIND_SEED={} cargo test -p kbind-scenarios {}\n\nlast story steps:\n",
            self.story,
            self.step,
            self.seed,
            violation.invariant,
            violation.detail,
            self.seed,
            self.story.replace(' ', "_"),
        );
        for note in self.notes.iter().rev().take(15).rev() {
            report.push_str(&format!("  {note}\n"));
        }
        report.push_str("last consumer writes:\n");
        for w in self.consumer.write_log().iter().rev().take(15).rev() {
            report.push_str(&format!(
                "  rv {} {} {} {} {}/{}\n",
                w.rv, w.user, w.verb, w.resource, w.namespace, w.name
            ));
        }
        report.push_str("last log lines:\n");
        for line in self.log.tail(20) {
            report.push_str(&format!("  {line}\n"));
        }
        panic!("{report}");
    }

    /// Records that the konnector may delete this consumer object because of something the
    /// story did (e.g. the consumer CRD removed on unbind), so §8.1 does not count it.
    pub fn allow_konnector_delete(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        let resource = qualified(res);
        self.story_deleted
            .insert((resource, namespace.unwrap_or("").to_string(), name.to_string()));
        self.note(format!("allowed the konnector to delete {} {name}", res.plural));
    }
}

/// The resource as fakeapi's write log names it: `plural.group`, or `plural` for the core group.
fn qualified(res: &ApiResource) -> String {
    if res.group.is_empty() {
        res.plural.clone()
    } else {
        format!("{}.{}", res.plural, res.group)
    }
}

fn replica_user(id: &str) -> String {
    format!("system:serviceaccount:{NAMESPACE}:{id}")
}

fn ns_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a world object is a valid object")
}

/// The resource of one of the bundle's objects.
fn resource_of(obj: &Value) -> ApiResource {
    match obj.get("kind").and_then(Value::as_str) {
        Some("Secret") => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        Some("Connection") => ApiResource::erase::<kbind_api::Connection>(&()),
        Some("ClusterBinding") => ApiResource::erase::<kbind_api::ClusterBinding>(&()),
        other => panic!("the bundle has an unexpected kind {other:?}"),
    }
}
