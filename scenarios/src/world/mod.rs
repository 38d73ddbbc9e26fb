//! The world: a seeded set of named fake clusters on tokio's paused clock, konnector replicas
//! running the engine against the consumer, fault verbs, and the invariants after every step.

mod builder;
mod checks;
mod credentials;
mod faults;
mod objects;
mod replicas;
mod seeds;
mod time;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use fakeapi::FakeCluster;
use kbind_cluster::{ApiResource, DynamicObject, SharedClock};
use kbind_engine::Links;
use kbind_engine::context::EngineConfig;
use rand_chacha::ChaCha8Rng;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::bundle::Credential;
use crate::connector::FakeConnector;
use crate::logcap::LogCapture;

pub use builder::{ProviderOpts, WorldBuilder};
use checks::Checked;
pub use seeds::{for_each_seed, for_each_seed_scaled, seed_from_env};

/// One world tick.
pub const TICK: Duration = Duration::from_secs(1);
/// The konnector's namespace on the consumer.
pub const NAMESPACE: &str = "kbind";

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
    checked: parking_lot::Mutex<Checked>,
}

impl World {
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
