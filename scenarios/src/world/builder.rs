//! Building a world: its seed, clusters and konnector settings, and kbind's CRDs installed.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use fakeapi::FakeCluster;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, SharedClock, TokioClock};
use kbind_engine::context::EngineConfig;
use rand::{RngCore, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use super::{NAMESPACE, Provider, SharedProvider, World, checks::Checked, ns_resource, object};
use crate::connector::FakeConnector;
use crate::invariants::Violation;
use crate::logcap::LogCapture;

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
            checked: parking_lot::Mutex::new(Checked::default()),
        };
        world.install_kbind().await;
        world
    }
}

/// Salt of the world's jitter stream: a seed of its own, derived from the world's.
const JITTER_STREAM: u64 = 0x6a09_e667_f3bc_c908;

/// A fake self-signed CA certificate, unique per cluster (PEM armour around seeded bytes).
fn fake_ca_pem(name: &str, salt: u64) -> Vec<u8> {
    let body = base64::engine::general_purpose::STANDARD.encode(format!("fake-ca:{name}:{salt:016x}"));
    format!("-----BEGIN CERTIFICATE-----\n{body}\n-----END CERTIFICATE-----\n").into_bytes()
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
}
