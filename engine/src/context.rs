//! What every reconciler of the engine shares: the consumer cluster, how to reach providers,
//! the clock, and the konnector's settings.

use std::sync::Arc;
use std::time::Duration;

use kbind_cluster::backoff::{self, Backoff, SharedRandomness};
use kbind_cluster::watcher::{BackoffPolicy, WatcherConfig};
use kbind_cluster::{ClusterClient, SharedClock};

use crate::remote::Connector;

/// The konnector's settings that the engine needs.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The konnector's own namespace on the consumer (Connection Secrets must live here).
    pub namespace: String,
    /// The provider namespace of the heartbeat Lease.
    pub lease_namespace: String,
    /// How often the heartbeat Lease is renewed while connected.
    pub heartbeat_interval: Duration,
    /// How often a Ready Connection re-runs discovery, and the backstop pass of every binding
    /// and related-resource syncer (everything else is driven by watches).
    pub rediscovery_interval: Duration,
    /// Development only: accept plain `http://` and `insecure-skip-tls-verify` providers.
    pub allow_insecure_providers: bool,
    /// Reconciles each syncer (one per binding and API) runs at once.
    pub sync_workers: u16,
    /// When in its lifetime an issued token is renewed, as a fraction in `(0, 1)` (moved
    /// earlier by up to `link::renew::RENEW_JITTER` of that).
    pub credential_renew_fraction: f64,
    /// How long each watch runs before it is renewed (its server-side `timeoutSeconds`, whole
    /// seconds); [`DEFAULT_WATCH_TIMEOUT`] like kube-runtime. Deterministic stories of months
    /// raise it so virtual time stays cheap; a konnector keeps the default.
    pub watch_timeout: Duration,
}

/// The default of [`EngineConfig::watch_timeout`]: 290 s, as kube-runtime's watcher.
pub const DEFAULT_WATCH_TIMEOUT: Duration = Duration::from_secs(290);

/// The default of [`EngineConfig::credential_renew_fraction`]: two thirds, so a day-long token
/// leaves at least eight hours to renew it in (a konnector restarted, a provider down).
pub const DEFAULT_CREDENTIAL_RENEW_FRACTION: f64 = 2.0 / 3.0;

/// The watches the engine runs: client-go's reflector backoff (800 ms doubling to 30 s) with
/// jitter from `randomness`, so a herd of konnectors that lost one provider spreads its
/// relists while a seeded world replays exactly; each renewed after `timeout`.
pub(crate) fn watcher_config(randomness: &SharedRandomness, timeout: Duration) -> WatcherConfig {
    WatcherConfig::default()
        .backoff(BackoffPolicy::Jittered {
            initial: WATCH_BACKOFF_INITIAL,
            max: WATCH_BACKOFF_MAX,
            randomness: randomness.clone(),
        })
        .timeout(u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1))
}

/// First delay of a failed watch's retry.
const WATCH_BACKOFF_INITIAL: std::time::Duration = std::time::Duration::from_millis(800);
/// Largest delay of a failed watch's retry (before jitter).
const WATCH_BACKOFF_MAX: std::time::Duration = std::time::Duration::from_secs(30);

/// The default of [`EngineConfig::sync_workers`]; `BENCHMARKS.md` has the measurements behind it.
pub const DEFAULT_SYNC_WORKERS: u16 = 16;

impl Default for EngineConfig {
    fn default() -> Self {
        Self {
            namespace: kbind_api::consts::DEFAULT_NAMESPACE.to_string(),
            lease_namespace: kbind_api::consts::lease::NAMESPACE.to_string(),
            heartbeat_interval: Duration::from_secs(kbind_api::consts::lease::RENEW_INTERVAL_SECONDS),
            rediscovery_interval: Duration::from_secs(60),
            allow_insecure_providers: false,
            sync_workers: DEFAULT_SYNC_WORKERS,
            credential_renew_fraction: DEFAULT_CREDENTIAL_RENEW_FRACTION,
            watch_timeout: DEFAULT_WATCH_TIMEOUT,
        }
    }
}

/// The shared context of the engine's reconcilers.
#[derive(Clone)]
pub struct Context {
    /// The consumer cluster (the konnector's own credentials).
    pub consumer: Arc<dyn ClusterClient>,
    /// Builds provider clients from validated kubeconfigs.
    pub connector: Arc<dyn Connector>,
    /// Every timestamp and timer.
    pub clock: SharedClock,
    /// The jitter of every retry, backoff and requeue (seeded in deterministic worlds, from
    /// the OS in a konnector).
    pub randomness: SharedRandomness,
    /// Settings.
    pub config: EngineConfig,
}

impl Context {
    /// A periodic wait of `period` of the actor or object `key`, with its jitter (see
    /// [`backoff::period`]).
    pub fn jitter(&self, key: &str, period: std::time::Duration) -> std::time::Duration {
        backoff::period(self.randomness.as_ref(), key, period)
    }

    /// How every watch of the engine lists, watches and backs off (see [`watcher_config`]).
    pub(crate) fn watcher_config(&self) -> WatcherConfig {
        watcher_config(&self.randomness, self.config.watch_timeout)
    }

    /// A jittered exponential backoff from `initial` up to `max` for the actor `key` (its
    /// jitter a stream of its own).
    pub fn backoff(&self, key: &str, initial: std::time::Duration, max: std::time::Duration) -> Backoff {
        Backoff::new(initial, max, self.randomness.fork(key))
    }
}
