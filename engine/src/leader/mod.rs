//! Leader election through a `coordination.k8s.io/v1` Lease on the consumer (client-go's
//! protocol): whatever it gates runs only while this replica holds the Lease, and stops before
//! another replica can take it over.

use std::future::Future;
use std::time::Duration;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kbind_cluster::{ApiResource, ClusterClientExt, Error, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

use crate::context::Context;

/// Leader election settings (client-go's defaults: 15 s lease, 10 s renew deadline, 2 s retry).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderConfig {
    /// Namespace of the Lease on the consumer.
    pub namespace: String,
    /// Name of the Lease.
    pub name: String,
    /// This replica's `holderIdentity`.
    pub identity: String,
    /// `leaseDurationSeconds`: how long others wait after the last observed renewal.
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down; must be shorter than
    /// `lease_duration` so it stops before anyone may take over.
    pub renew_deadline: Duration,
    /// Wait between acquire and renew attempts.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Settings with client-go's default timings for replica `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> Self {
        Self {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }

    /// How long one acquire or renew attempt may take: half the renew deadline, so a hung
    /// request leaves room for another attempt before stepping down, and a write that lands late
    /// can never carry a renewTime older than the deadline allows.
    pub fn request_timeout(&self) -> Duration {
        self.renew_deadline / 2
    }
}

/// What the elector last saw of someone else's Lease record, and when (on the local clock:
/// expiry is judged by observation, never by the holder's written renewTime, so clock skew
/// between replicas cannot cut a leader short).
#[derive(Debug, Clone, PartialEq)]
struct Observed {
    resource_version: Option<String>,
    holder: Option<String>,
    duration: Duration,
    at: Instant,
}

/// Runs leader election for one replica.
pub struct LeaderElector {
    ctx: Context,
    config: LeaderConfig,
    leading: watch::Sender<bool>,
    observed: Option<Observed>,
}

/// The outcome of one acquire-or-renew attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Attempt {
    /// The Lease is ours (acquired or renewed).
    Held,
    /// Someone else holds an unexpired Lease, or we lost a write race.
    HeldByAnother,
    /// The consumer did not answer.
    Failed,
}

fn lease_resource() -> ApiResource {
    ApiResource::erase::<Lease>(&())
}

impl LeaderElector {
    /// An elector for `config`.
    pub fn new(ctx: Context, config: LeaderConfig) -> Self {
        Self {
            ctx,
            config,
            leading: watch::channel(false).0,
            observed: None,
        }
    }

    /// A signal that is `true` while this replica leads.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Campaigns for ever: while leading, runs `on_elected(leading)`; the future is dropped as
    /// soon as the renew deadline passes without a renewal. When `shutdown` resolves, the
    /// gated work is dropped and a held Lease is released so another replica takes over at once.
    pub async fn run<F, Fut>(mut self, shutdown: impl Future<Output = ()>, mut on_elected: F)
    where
        F: FnMut(watch::Receiver<bool>) -> Fut,
        Fut: Future<Output = ()>,
    {
        tokio::pin!(shutdown);
        loop {
            let acquired = tokio::select! {
                at = self.acquire() => at,
                _ = &mut shutdown => {
                    // An attempt cut off here may have landed without its answer reaching us:
                    // the release reads the Lease and gives it up only if it names us.
                    self.release().await;
                    return;
                }
            };
            tracing::info!(lease = %self.config.name, identity = %self.config.identity, "became leader");
            self.leading.send_replace(true);
            let gated = on_elected(self.leading.subscribe());
            let stop = tokio::select! {
                _ = gated => Stop::WorkEnded,
                _ = self.keep_renewing(acquired) => Stop::Lost,
                _ = &mut shutdown => Stop::Shutdown,
            };
            // The gated future is dropped here, before anything else can happen.
            self.leading.send_replace(false);
            match stop {
                Stop::Lost => tracing::warn!(lease = %self.config.name, "lost leadership; stopped gated work"),
                Stop::WorkEnded | Stop::Shutdown => {
                    self.release().await;
                    return;
                }
            }
        }
    }

    /// Retries until the Lease is ours; returns when the successful attempt started (the
    /// renewTime it wrote), which is where the renew deadline counts from.
    async fn acquire(&mut self) -> Instant {
        loop {
            // Taken before the request: the renewTime written cannot precede it, while a time
            // taken after would stretch the first term by the request's latency.
            let started = Instant::now();
            let attempt = tokio::time::timeout(self.config.request_timeout(), self.try_acquire_or_renew()).await;
            if matches!(attempt, Ok(Attempt::Held)) {
                return started;
            }
            tokio::time::sleep(
                self.ctx
                    .jitter(&format!("leader/{}", self.config.identity), self.config.retry_period),
            )
            .await;
        }
    }

    /// Renews every retry period from the renewal at `last_renewal`; returns when no renewal
    /// succeeded within the renew deadline.
    async fn keep_renewing(&mut self, mut last_renewal: Instant) {
        loop {
            // Not jittered, as client-go renews: the renew deadline counts whole periods, and a
            // leader's renewals meet nobody else's (only a herd of candidates needs spreading).
            tokio::time::sleep(self.config.retry_period).await;
            let deadline = last_renewal + self.config.renew_deadline;
            // Counted from before the request: the written renewTime cannot precede it, so
            // stepping down at this deadline is strictly before anyone may take over.
            let started = Instant::now();
            let bound = deadline.min(started + self.config.request_timeout());
            let attempt = tokio::time::timeout_at(bound, self.try_acquire_or_renew()).await;
            match attempt {
                Ok(Attempt::Held) => last_renewal = started,
                Ok(Attempt::HeldByAnother) => return,
                // A failed or timed-out attempt is retried while the deadline allows.
                Ok(Attempt::Failed) | Err(_) if Instant::now() < deadline => {}
                Ok(Attempt::Failed) | Err(_) => return,
            }
        }
    }

    /// One round of client-go's `tryAcquireOrRenew`.
    async fn try_acquire_or_renew(&mut self) -> Attempt {
        let res = lease_resource();
        let ns = Some(self.config.namespace.as_str());
        let now = MicroTime(self.ctx.clock.now());
        let current = match self.ctx.consumer.get_opt(&res, ns, &self.config.name).await {
            Ok(current) => current,
            Err(e) => {
                tracing::debug!(error = %e, "failed to read the leader Lease");
                return Attempt::Failed;
            }
        };
        let Some(current) = current else {
            return self.create(now).await;
        };
        let Ok(mut lease) = kbind_cluster::from_dynamic::<Lease>(current) else {
            return Attempt::Failed;
        };
        let spec = lease.spec.clone().unwrap_or_default();
        let holder = spec.holder_identity.clone().filter(|h| !h.is_empty());
        let ours = holder.as_deref() == Some(self.config.identity.as_str());
        if !ours && holder.is_some() && !self.observed_expired(&lease, &spec) {
            return Attempt::HeldByAnother;
        }
        let duration = self.config.lease_duration.as_secs() as i32;
        let mut next = LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(duration),
            renew_time: Some(now.clone()),
            acquire_time: spec.acquire_time.clone(),
            lease_transitions: spec.lease_transitions,
            ..spec
        };
        if !ours {
            next.acquire_time = Some(now);
            next.lease_transitions = Some(spec_transitions(&lease) + 1);
        }
        lease.spec = Some(next);
        self.replace(&lease).await
    }

    /// Whether the other holder's record has gone unrenewed for its duration, as observed here.
    fn observed_expired(&mut self, lease: &Lease, spec: &LeaseSpec) -> bool {
        let seen = Observed {
            resource_version: lease.metadata.resource_version.clone(),
            holder: spec.holder_identity.clone(),
            duration: Duration::from_secs(spec.lease_duration_seconds.unwrap_or(0).max(0) as u64),
            at: Instant::now(),
        };
        match &self.observed {
            Some(prev) if prev.resource_version == seen.resource_version && prev.holder == seen.holder => {
                Instant::now() > prev.at + prev.duration
            }
            _ => {
                self.observed = Some(seen);
                false
            }
        }
    }

    async fn create(&mut self, now: MicroTime) -> Attempt {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(self.config.name.clone()),
                namespace: Some(self.config.namespace.clone()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(self.config.identity.clone()),
                lease_duration_seconds: Some(self.config.lease_duration.as_secs() as i32),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..LeaseSpec::default()
            }),
        };
        match self.ctx.consumer.create_typed(&lease).await {
            Ok(_) => Attempt::Held,
            Err(Error::AlreadyExists { .. }) => Attempt::HeldByAnother,
            Err(e) => {
                tracing::debug!(error = %e, "failed to create the leader Lease");
                Attempt::Failed
            }
        }
    }

    /// Replaces the Lease with its resourceVersion as a precondition: 409 means another replica
    /// wrote it first, and it wins.
    async fn replace(&mut self, lease: &Lease) -> Attempt {
        let Ok(obj) = kbind_cluster::to_dynamic(lease) else {
            return Attempt::Failed;
        };
        let ns = Some(self.config.namespace.as_str());
        match self
            .ctx
            .consumer
            .replace(&lease_resource(), ns, &self.config.name, &obj, &PostParams::default())
            .await
        {
            Ok(_) => Attempt::Held,
            Err(Error::Conflict { .. }) => Attempt::HeldByAnother,
            Err(e) => {
                tracing::debug!(error = %e, "failed to write the leader Lease");
                Attempt::Failed
            }
        }
    }

    /// Gives the Lease up within one request timeout; an apiserver that does not answer by
    /// then leaves the Lease to expire rather than holding the shutdown.
    async fn release(&mut self) {
        let bound = self.config.request_timeout();
        if tokio::time::timeout(bound, self.try_release()).await.is_err() {
            tracing::warn!(lease = %self.config.name, "the apiserver did not answer the release; the Lease expires instead");
        }
    }

    /// Gives the Lease up (client-go's `ReleaseOnCancel`): empty holder, one-second duration.
    async fn try_release(&mut self) {
        // A renewal cancelled by the shutdown may still land after this read (its request was
        // already sent), so a conflict means "read again", not "someone else holds it".
        for _ in 0..RELEASE_ATTEMPTS {
            let res = lease_resource();
            let ns = Some(self.config.namespace.as_str());
            let Ok(Some(current)) = self.ctx.consumer.get_opt(&res, ns, &self.config.name).await else {
                return;
            };
            let Ok(mut lease) = kbind_cluster::from_dynamic::<Lease>(current) else {
                return;
            };
            let spec = lease.spec.clone().unwrap_or_default();
            if spec.holder_identity.as_deref() != Some(self.config.identity.as_str()) {
                return;
            }
            let now = MicroTime(self.ctx.clock.now());
            lease.spec = Some(LeaseSpec {
                holder_identity: None,
                lease_duration_seconds: Some(1),
                renew_time: Some(now.clone()),
                acquire_time: Some(now),
                ..spec
            });
            match self.replace(&lease).await {
                Attempt::Held => {
                    tracing::info!(lease = %self.config.name, "released leadership");
                    return;
                }
                Attempt::HeldByAnother => continue,
                Attempt::Failed => return,
            }
        }
    }
}

/// How often a release re-reads the Lease after a conflict before leaving it to expire.
const RELEASE_ATTEMPTS: usize = 3;

/// Why a term of leadership ended.
enum Stop {
    WorkEnded,
    Lost,
    Shutdown,
}

fn spec_transitions(lease: &Lease) -> i32 {
    lease.spec.as_ref().and_then(|s| s.lease_transitions).unwrap_or(0)
}

#[cfg(test)]
mod tests;
