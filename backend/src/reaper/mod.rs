//! The reaper: Grants of consumers whose heartbeat Lease stopped being renewed are deleted.
//!
//! It watches the `consumer-<uid>` Leases in the lease namespace and notes, on its own clock,
//! when it saw each one change (a new `resourceVersion`). The `renewTime` the consumer writes
//! is never read: a consumer whose clock is days off still renews, and that is what counts.
//! A Lease unchanged for `--reap-ttl` gets every Grant labelled with its consumer UID deleted,
//! so the issuer revokes through its finalizer. With `--reap-objects` the consumer's synced
//! provider objects and the claimed namespaces no remaining Grant of its identity uses go too;
//! `--reaper-report-only` lists all of that and deletes nothing.
//!
//! The observations live in memory only: a restarted reaper starts every Lease's clock anew,
//! so a restart can delay a reap by up to one TTL, never hasten one.

mod metrics;
mod observe;
mod sweep;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::coordination::v1::Lease;
use kbind_api::consts::backend;
use kbind_cluster::watcher::{Event, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, SharedClock, into_seam_error};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

pub use metrics::Metrics;
pub use sweep::{Action, Target};

use observe::{Observations, Observed};

/// The default `--reap-ttl`: a week, so a consumer switched off over a long weekend keeps its
/// Grants.
pub const DEFAULT_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

/// The shortest `--reap-ttl` that a konnector with default flags (30 s renewals of a 60 s Lease)
/// survives a few missed renewals with; anything shorter is accepted (tests, konnectors that
/// heartbeat faster) with a warning.
pub const SAFE_TTL: Duration = Duration::from_secs(5 * 60);

/// How long after a failed reap it is tried again.
const RETRY: Duration = Duration::from_secs(60);

/// The longest the reaper sleeps without looking at its clock again; bounds how late a reap
/// can be when the injected clock and tokio's timer drift apart.
const MAX_NAP: Duration = Duration::from_secs(60);

/// The reaper's flags.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
// The group id must be unique among the flattened Options of `kbind-backend run`.
#[group(id = "reaper-options")]
#[command(next_help_heading = "Reaper")]
pub struct Options {
    /// How long a consumer's heartbeat Lease may go unchanged, as observed by this reaper, before
    /// the consumer's Grants are deleted (below 5m only with konnectors that renew faster than
    /// every 30 s).
    #[arg(long = "reap-ttl", value_name = "DURATION", default_value = "7d", value_parser = parse_ttl)]
    pub reap_ttl: Duration,

    /// Also delete a reaped consumer's synced provider objects (objects of its Exports' APIs
    /// annotated with its cluster UID) and the namespaces kbind claimed for its identity that no
    /// remaining Grant of that identity uses.
    #[arg(long = "reap-objects")]
    pub reap_objects: bool,

    /// List what the reaper would delete, one log line per deletion, and delete nothing.
    #[arg(long = "reaper-report-only")]
    pub report_only: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            reap_ttl: DEFAULT_TTL,
            reap_objects: false,
            report_only: false,
        }
    }
}

/// Parses `--reap-ttl`: a humantime duration such as `7d`, `36h` or `90m`, not zero.
pub fn parse_ttl(s: &str) -> Result<Duration, String> {
    let ttl = humantime::parse_duration(s).map_err(|e| format!("{e} (expected a duration such as 7d, 36h or 90m)"))?;
    check_ttl(ttl).map_err(|e| e.to_string())?;
    Ok(ttl)
}

fn check_ttl(ttl: Duration) -> Result<(), Error> {
    if ttl.is_zero() {
        return Err(Error::ZeroTtl);
    }
    Ok(())
}

/// Why the reaper stopped or a reap failed.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// `--reap-ttl` is zero, which would reap every consumer at once.
    #[error("--reap-ttl must be longer than zero (the default is 7d)")]
    ZeroTtl,
    /// Reading something a reap needs failed.
    #[error("failed to read {what}")]
    ReadFailed {
        /// What was read.
        what: String,
        /// The provider's answer.
        #[source]
        source: kbind_cluster::Error,
    },
    /// A deletion failed.
    #[error("failed to delete {what}")]
    DeleteFailed {
        /// What was deleted.
        what: String,
        /// The provider's answer.
        #[source]
        source: kbind_cluster::Error,
    },
    /// The Lease watch ended, which the seam's watcher never does.
    #[error("the heartbeat Lease watch ended")]
    WatchEnded,
}

/// Runs the reaper on the Leases in `lease_namespace` (the issuer's `--lease-namespace`) until
/// `shutdown` is cancelled.
pub async fn run(
    client: Arc<dyn ClusterClient>,
    opts: Options,
    lease_namespace: String,
    clock: SharedClock,
    shutdown: CancellationToken,
) -> Result<(), Error> {
    Reaper::new(client, opts, lease_namespace, clock).run(shutdown).await
}

/// A reaper, for callers that want its metrics or its actions; [`run`] is the short form.
pub struct Reaper {
    client: Arc<dyn ClusterClient>,
    opts: Options,
    lease_namespace: String,
    clock: SharedClock,
    metrics: Metrics,
    actions: Option<mpsc::UnboundedSender<Action>>,
}

impl Reaper {
    /// A reaper on the Leases in `lease_namespace`.
    pub fn new(client: Arc<dyn ClusterClient>, opts: Options, lease_namespace: String, clock: SharedClock) -> Self {
        let metrics = Metrics::for_mode(opts.report_only);
        Self {
            client,
            opts,
            lease_namespace,
            clock,
            metrics,
            actions: None,
        }
    }

    /// Its metrics, to register with a scrape's registry.
    pub fn metrics(&self) -> &Metrics {
        &self.metrics
    }

    /// Sends every action (made, or listed in report-only mode) to `sink` as well as the log.
    #[must_use]
    pub fn report_to(mut self, sink: mpsc::UnboundedSender<Action>) -> Self {
        self.actions = Some(sink);
        self
    }

    /// Watches and reaps until `shutdown` is cancelled.
    pub async fn run(self, shutdown: CancellationToken) -> Result<(), Error> {
        check_ttl(self.opts.reap_ttl)?;
        if self.opts.reap_ttl < SAFE_TTL {
            tracing::warn!(
                ttl = %humantime::format_duration(self.opts.reap_ttl),
                "reaper: --reap-ttl is shorter than 5m; a konnector renewing every 30 s that misses a few renewals will be reaped"
            );
        }
        tracing::info!(
            namespace = %self.lease_namespace,
            ttl = %humantime::format_duration(self.opts.reap_ttl),
            reap_objects = self.opts.reap_objects,
            report_only = self.opts.report_only,
            "reaper: watching heartbeat Leases"
        );
        let events = watcher(
            self.client.clone(),
            leases(),
            Some(self.lease_namespace.clone()),
            WatcherConfig::default(),
        );
        let mut events = std::pin::pin!(events);
        let mut obs = Observations::new(self.opts.reap_ttl);
        loop {
            let now = self.clock.now();
            if obs.next_due().is_some_and(|due| due <= now) {
                self.sweep_due(&mut obs).await;
                continue;
            }
            let nap = obs
                .next_due()
                .map(|due| unsigned(now.duration_until(due)))
                .unwrap_or(MAX_NAP)
                .min(MAX_NAP);
            tokio::select! {
                biased;
                () = shutdown.cancelled() => return Ok(()),
                item = events.next() => match item {
                    Some(Ok(event)) => self.apply(&mut obs, event),
                    Some(Err(e)) => tracing::warn!(
                        namespace = %self.lease_namespace,
                        error = %into_seam_error(e),
                        "reaper: watching heartbeat Leases failed; retrying"
                    ),
                    None => return Err(Error::WatchEnded),
                },
                () = tokio::time::sleep(nap) => {}
            }
        }
    }

    /// Notes one watch event.
    fn apply(&self, obs: &mut Observations, event: Event<DynamicObject>) {
        let now = self.clock.now();
        match event {
            Event::Init => obs.relist_started(),
            Event::InitDone => obs.relist_done(),
            Event::InitApply(lease) | Event::Apply(lease) => {
                if let (Some(consumer), Some(version)) =
                    (consumer_of(&lease), lease.metadata.resource_version.as_deref())
                {
                    obs.observe(&consumer, version, now);
                }
            }
            Event::Delete(lease) => {
                if let Some(consumer) = consumer_of(&lease) {
                    obs.forget(&consumer);
                }
            }
        }
        self.metrics.set_leases(obs.len());
    }

    /// Reaps every consumer that is due.
    async fn sweep_due(&self, obs: &mut Observations) {
        let now = self.clock.now();
        for (consumer, observed) in obs.due(now) {
            // The watch may not have delivered a renewal made a moment ago: read the Lease once
            // more before anything is deleted.
            let name = format!("{}{consumer}", backend::LEASE_PREFIX);
            match self.client.get_opt(&leases(), Some(&self.lease_namespace), &name).await {
                Ok(None) => {
                    obs.forget(&consumer);
                    continue;
                }
                Ok(Some(lease)) => {
                    let version = lease.metadata.resource_version.as_deref().unwrap_or_default();
                    if version != observed.version {
                        obs.observe(&consumer, version, self.clock.now());
                        continue;
                    }
                }
                Err(e) => {
                    tracing::warn!(%consumer, error = %e, "reaper: failed to re-read the heartbeat Lease; retrying");
                    self.retry(obs, &consumer);
                    continue;
                }
            }
            match self.reap(&consumer, &observed).await {
                Ok(()) => obs.reaped(&consumer),
                Err(e) => {
                    tracing::warn!(%consumer, error = %e, source = ?std::error::Error::source(&e).map(ToString::to_string), "reaper: reaping failed; retrying");
                    self.retry(obs, &consumer);
                }
            }
        }
    }

    fn retry(&self, obs: &mut Observations, consumer: &str) {
        self.metrics.sweep_failed();
        let at = self
            .clock
            .now()
            .saturating_add(SignedDuration::try_from(RETRY).unwrap_or(SignedDuration::MAX))
            .unwrap_or(Timestamp::MAX);
        obs.retry_at(consumer, at);
    }

    /// Deletes (or lists) what goes for `consumer`, and says so.
    async fn reap(&self, consumer: &str, observed: &Observed) -> Result<(), Error> {
        let planned = sweep::plan(self.client.as_ref(), consumer, self.opts.reap_objects).await?;
        if planned.is_empty() {
            tracing::debug!(%consumer, "reaper: stale heartbeat Lease, nothing left to reap");
            return Ok(());
        }
        let report_only = self.opts.report_only;
        let targets = if report_only {
            planned.into_iter().map(sweep::Planned::into_target).collect()
        } else {
            sweep::execute(self.client.as_ref(), planned).await?
        };
        let mut counts = [0usize; 3];
        for target in targets {
            counts[match target {
                Target::Grant { .. } => 0,
                Target::Object { .. } => 1,
                Target::Namespace { .. } => 2,
            }] += 1;
            self.metrics.deleted(target.kind(), report_only);
            let action = Action {
                consumer: consumer.to_string(),
                target,
                performed: !report_only,
            };
            tracing::info!(%consumer, "reaper: {action}");
            if let Some(sink) = &self.actions {
                // A dropped receiver only means nobody listens any more.
                let _ = sink.send(action);
            }
        }
        self.metrics.consumer_reaped(report_only);
        let idle = self.clock.now().duration_since(observed.changed_at);
        tracing::info!(
            %consumer,
            unchanged_for = %humantime::format_duration(unsigned(idle)),
            grants = counts[0],
            objects = counts[1],
            namespaces = counts[2],
            report_only,
            "reaper: reaped consumer"
        );
        Ok(())
    }
}

/// The Lease resource.
fn leases() -> ApiResource {
    ApiResource::erase::<Lease>(&())
}

/// The consumer cluster UID of a `consumer-<uid>` Lease; `None` for any other Lease (a UID is
/// a UUID, which also keeps it a valid label value for the Grant selector).
fn consumer_of(lease: &DynamicObject) -> Option<String> {
    let uid = lease.metadata.name.as_deref()?.strip_prefix(backend::LEASE_PREFIX)?;
    uuid::Uuid::parse_str(uid).ok()?;
    Some(uid.to_string())
}

fn unsigned(d: SignedDuration) -> Duration {
    Duration::try_from(d).unwrap_or(Duration::ZERO)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        opts: Options,
    }

    #[test]
    fn flags_default_to_a_week_deleting_only_grants() {
        let opts = Cli::try_parse_from(["reaper"]).unwrap().opts;
        assert_eq!(opts, Options::default());
        assert_eq!(opts.reap_ttl, DEFAULT_TTL);
        let opts = Cli::try_parse_from(["reaper", "--reap-ttl=36h", "--reap-objects", "--reaper-report-only"])
            .unwrap()
            .opts;
        assert_eq!(opts.reap_ttl, Duration::from_secs(36 * 3600));
        assert!(opts.reap_objects && opts.report_only);
    }

    #[test]
    fn a_zero_or_unparsable_ttl_is_refused() {
        let err = Cli::try_parse_from(["reaper", "--reap-ttl=0s"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("longer than zero"), "{err}");
        // Short is allowed (the system test's konnectors renew every second).
        let opts = Cli::try_parse_from(["reaper", "--reap-ttl=10s"]).unwrap().opts;
        assert_eq!(opts.reap_ttl, Duration::from_secs(10));
        let err = Cli::try_parse_from(["reaper", "--reap-ttl=soon"])
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("expected a duration"), "{err}");
    }

    #[test]
    fn only_consumer_leases_named_by_a_uuid_are_watched() {
        let lease = |name: &str| DynamicObject::new(name, &leases());
        let uid = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
        assert_eq!(consumer_of(&lease(&format!("consumer-{uid}"))).as_deref(), Some(uid));
        assert_eq!(consumer_of(&lease("consumer-not-a-uid")), None);
        assert_eq!(consumer_of(&lease("kbind-konnector")), None);
    }
}
