//! Leader election on a fakeapi consumer, on tokio's paused clock.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fakeapi::{ErrorRule, FakeCluster, InjectedError, UserInfo};
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use kbind_cluster::{ClusterClient, ClusterClientExt, SharedClock, TokioClock};
use serde_json::json;

use super::*;
use crate::context::EngineConfig;
use crate::remote::{Connector, ProviderKubeconfig};

struct NoProviders;

#[async_trait]
impl Connector for NoProviders {
    async fn connect(
        &self,
        _: &ProviderKubeconfig,
        _: &kbind_cluster::BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, kbind_cluster::Error> {
        Err(kbind_cluster::Error::Transport("no providers in this test".into()))
    }
}

async fn consumer() -> (FakeCluster, SharedClock) {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let consumer = FakeCluster::builder("consumer").seed(7).clock(clock.clone()).build();
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kbind"}})).unwrap();
    consumer.admin_client().create_typed(&ns).await.unwrap();
    (consumer, clock)
}

/// A cluster admin client of `consumer` named `name`.
fn admin_named(consumer: &FakeCluster, name: &str) -> fakeapi::FakeClient {
    consumer.client(UserInfo {
        name: name.into(),
        groups: vec!["system:masters".into()],
    })
}

fn replica(consumer: &FakeCluster, clock: &SharedClock, name: &str) -> LeaderElector {
    replica_on(Arc::new(admin_named(consumer, name)), clock, name)
}

/// A replica whose requests go through `consumer` (a wrapped client, for faults fakeapi lacks).
fn replica_on(consumer: Arc<dyn ClusterClient>, clock: &SharedClock, name: &str) -> LeaderElector {
    let ctx = Context {
        consumer,
        connector: Arc::new(NoProviders),
        clock: clock.clone(),
        randomness: kbind_cluster::backoff::seeded(1),
        config: EngineConfig::default(),
    };
    LeaderElector::new(ctx, LeaderConfig::new("kbind", "kbind-konnector", name))
}

/// Gated work that writes a ConfigMap every second and counts its writes.
fn writer(consumer: &FakeCluster, name: &str, count: Arc<AtomicU64>) -> impl Future<Output = ()> + use<> {
    let client = admin_named(consumer, name);
    async move {
        loop {
            let n = count.fetch_add(1, Ordering::SeqCst);
            let cm: ConfigMap = serde_json::from_value(json!({
                "metadata": {"name": format!("{}-{n}", client_name(&client)), "namespace": "kbind"},
            }))
            .unwrap();
            let _ = client.create_typed(&cm).await;
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

fn client_name(client: &fakeapi::FakeClient) -> String {
    format!("{:p}", client.cluster())
        .chars()
        .filter(char::is_ascii_alphanumeric)
        .collect()
}

async fn lease(consumer: &FakeCluster) -> Option<LeaseSpec> {
    let res = lease_resource();
    let obj = consumer
        .admin_client()
        .get_opt(&res, Some("kbind"), "kbind-konnector")
        .await
        .unwrap()?;
    kbind_cluster::from_dynamic::<Lease>(obj).unwrap().spec
}

async fn wait_for(what: &str, rx: &mut watch::Receiver<bool>, value: bool, within: Duration) -> Duration {
    let start = Instant::now();
    tokio::time::timeout(within, rx.wait_for(|v| *v == value))
        .await
        .unwrap_or_else(|_| panic!("timed out waiting until {what}"))
        .unwrap();
    start.elapsed()
}

#[tokio::test(start_paused = true)]
async fn single_replica_acquires_and_renews_the_lease() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let mut leading = a.leading();
    tokio::spawn(a.run(std::future::pending(), |_| std::future::pending()));
    wait_for("a leads", &mut leading, true, Duration::from_secs(5)).await;
    let first = lease(&consumer).await.unwrap();
    assert_eq!(first.holder_identity.as_deref(), Some("a"));
    assert_eq!(first.lease_duration_seconds, Some(15));
    assert_eq!(first.lease_transitions, Some(0));
    tokio::time::sleep(Duration::from_secs(10)).await;
    let later = lease(&consumer).await.unwrap();
    assert!(later.renew_time.unwrap().0 > first.renew_time.unwrap().0);
    assert_eq!(later.acquire_time, first.acquire_time);
}

#[tokio::test(start_paused = true)]
async fn second_replica_waits_while_the_lease_is_renewed() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let b = replica(&consumer, &clock, "b");
    let mut a_leads = a.leading();
    let b_leads = b.leading();
    tokio::spawn(a.run(std::future::pending(), |_| std::future::pending()));
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    tokio::spawn(b.run(std::future::pending(), |_| std::future::pending()));
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(!*b_leads.borrow());
    assert!(*a_leads.borrow());
}

#[tokio::test(start_paused = true)]
async fn crashed_leader_is_replaced_after_the_lease_duration() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let b = replica(&consumer, &clock, "b");
    let mut a_leads = a.leading();
    let mut b_leads = b.leading();
    let a_task = tokio::spawn(a.run(std::future::pending(), |_| std::future::pending()));
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    tokio::spawn(b.run(std::future::pending(), |_| std::future::pending()));
    tokio::time::sleep(Duration::from_secs(3)).await;
    a_task.abort();
    let took = wait_for("b takes over", &mut b_leads, true, Duration::from_secs(30)).await;
    assert!(
        took >= Duration::from_secs(13),
        "b must wait out the lease, took {took:?}"
    );
    let spec = lease(&consumer).await.unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("b"));
    assert_eq!(spec.lease_transitions, Some(1));
}

/// Runs `replica` with work that never ends until the returned sender shuts it down.
fn campaign_until_stopped(replica: LeaderElector) -> (tokio::sync::oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(replica.run(
        async {
            let _ = stopped.await;
        },
        |_| std::future::pending(),
    ));
    (stop, task)
}

#[tokio::test(start_paused = true)]
async fn shutdown_releases_the_lease_for_a_prompt_takeover() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let b = replica(&consumer, &clock, "b");
    let mut a_leads = a.leading();
    let mut b_leads = b.leading();
    let (stop, a_task) = campaign_until_stopped(a);
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    tokio::spawn(b.run(std::future::pending(), |_| std::future::pending()));
    tokio::time::sleep(Duration::from_secs(5)).await;
    stop.send(()).unwrap();
    a_task.await.unwrap();
    assert_eq!(lease(&consumer).await.unwrap().holder_identity, None);
    let took = wait_for("b takes over", &mut b_leads, true, Duration::from_secs(30)).await;
    assert!(
        took <= Duration::from_secs(3),
        "a released lease is taken at once, took {took:?}"
    );
}

/// A renewal cancelled by the shutdown can still land between the release's read and its write
/// (its request was already on the wire): the release reads again instead of giving up.
#[tokio::test(start_paused = true)]
async fn a_release_that_meets_a_late_renewal_still_releases() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let mut a_leads = a.leading();
    let (stop, a_task) = campaign_until_stopped(a);
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    consumer.interlope(fakeapi::Interloper {
        verb: Some("update".into()),
        resource: "leases".into(),
        namespace: Some("kbind".into()),
        name: "kbind-konnector".into(),
        object: json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": "kbind-konnector", "namespace": "kbind"},
            "spec": {"holderIdentity": "a", "leaseDurationSeconds": 15},
        }),
    });
    stop.send(()).unwrap();
    a_task.await.unwrap();
    assert_eq!(
        lease(&consumer).await.unwrap().holder_identity,
        None,
        "the Lease was not released"
    );
}

#[tokio::test(start_paused = true)]
async fn leader_that_cannot_renew_stops_its_work_within_the_renew_deadline() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let mut a_leads = a.leading();
    let writes = Arc::new(AtomicU64::new(0));
    let gated = {
        let consumer = consumer.clone();
        let writes = writes.clone();
        move |_| writer(&consumer, "a-work", writes.clone())
    };
    tokio::spawn(a.run(std::future::pending(), gated));
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert!(writes.load(Ordering::SeqCst) >= 4, "the gated work runs while leading");
    let renewed = lease(&consumer).await.unwrap().renew_time.unwrap().0;
    consumer.inject_error(ErrorRule::new(Some("update"), Some("leases"), InjectedError::Internal));
    let stepped_down_after = wait_for("a steps down", &mut a_leads, false, Duration::from_secs(30)).await;
    assert!(stepped_down_after <= Duration::from_secs(10));
    let at_step_down = writes.load(Ordering::SeqCst);
    let step_down_time = clock.now();
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(
        writes.load(Ordering::SeqCst),
        at_step_down,
        "no gated write after stepping down"
    );
    let lease_expiry = renewed + jiff::SignedDuration::from_secs(15);
    assert!(
        step_down_time < lease_expiry,
        "work must stop before the Lease can change hands"
    );
}

#[tokio::test(start_paused = true)]
async fn lost_write_race_is_not_leadership() {
    let (consumer, clock) = consumer().await;
    let mut a = replica(&consumer, &clock, "a");
    assert_eq!(a.try_acquire_or_renew().await, Attempt::Held);
    let mut stale = kbind_cluster::from_dynamic::<Lease>(
        consumer
            .admin_client()
            .get(&lease_resource(), Some("kbind"), "kbind-konnector")
            .await
            .unwrap(),
    )
    .unwrap();
    // A renewal at the same instant would be a no-op update that keeps the resourceVersion.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(a.try_acquire_or_renew().await, Attempt::Held);
    stale.spec.as_mut().unwrap().holder_identity = Some("b".into());
    let mut b = replica(&consumer, &clock, "b");
    assert_eq!(
        b.replace(&stale).await,
        Attempt::HeldByAnother,
        "a stale resourceVersion is a 409"
    );
}

#[tokio::test(start_paused = true)]
async fn the_renew_deadline_counts_from_before_the_acquiring_request() {
    let (consumer, clock) = consumer().await;
    // Every request takes 2 s: the acquiring get + create take 4 s.
    consumer.set_latency(Some(Duration::from_secs(2)));
    let a = replica(&consumer, &clock, "a");
    let config = a.config.clone();
    let mut a_leads = a.leading();
    tokio::spawn(a.run(std::future::pending(), |_| std::future::pending()));
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(10)).await;
    consumer.inject_error(ErrorRule::new(Some("update"), Some("leases"), InjectedError::Internal));
    wait_for("a steps down", &mut a_leads, false, Duration::from_secs(60)).await;
    let stepped_down = clock.now();
    consumer.set_latency(None);
    let written = lease(&consumer).await.unwrap().renew_time.unwrap().0;
    let deadline = written + jiff::SignedDuration::try_from(config.renew_deadline).unwrap();
    assert!(
        stepped_down <= deadline,
        "stepped down at {stepped_down}, after the renew deadline {deadline} of the renewTime it wrote ({written})"
    );
}

#[tokio::test(start_paused = true)]
async fn an_acquire_that_hangs_is_abandoned_instead_of_writing_a_stale_lease() {
    let (consumer, clock) = consumer().await;
    // The consumer hangs for a minute on every request, then recovers.
    consumer.set_latency(Some(Duration::from_secs(60)));
    let a = replica(&consumer, &clock, "a");
    let config = a.config.clone();
    let mut a_leads = a.leading();
    tokio::spawn(a.run(std::future::pending(), |_| std::future::pending()));
    tokio::time::sleep(Duration::from_secs(30)).await;
    consumer.set_latency(None);
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(300)).await;
    let led_at = clock.now();
    let written = lease(&consumer).await.unwrap().renew_time.unwrap().0;
    let age = led_at.duration_since(written);
    assert!(
        age < jiff::SignedDuration::try_from(config.lease_duration).unwrap(),
        "leading on a Lease whose renewTime is {age:?} old: others may already hold it"
    );
    assert!(
        age <= jiff::SignedDuration::try_from(config.request_timeout()).unwrap(),
        "the acquiring request is bounded by the request timeout, took {age:?}"
    );
}

/// The fake consumer, except that the first write lands and its answer never comes back.
#[derive(Clone)]
struct FirstAnswerLost {
    consumer: Arc<dyn ClusterClient>,
    lost: Arc<std::sync::atomic::AtomicBool>,
}

#[async_trait]
impl kbind_cluster::Layer for FirstAnswerLost {
    async fn route(&self, _: kbind_cluster::Request<'_>) -> kbind_cluster::Result<Arc<dyn ClusterClient>> {
        Ok(self.consumer.clone())
    }

    async fn write_answered(&self) {
        if !self.lost.swap(true, Ordering::SeqCst) {
            std::future::pending::<()>().await;
        }
    }
}

/// A shutdown that cuts off the acquiring create after it landed (its answer still on the way)
/// leaves no Lease naming this replica: the konnector's in-process test met exactly this.
#[tokio::test(start_paused = true)]
async fn shutdown_while_the_acquiring_create_is_unanswered_still_releases() {
    let (consumer, clock) = consumer().await;
    let answer_lost = FirstAnswerLost {
        consumer: Arc::new(admin_named(&consumer, "a")),
        lost: Arc::default(),
    };
    let a = replica_on(Arc::new(answer_lost), &clock, "a");
    let request_timeout = a.config.request_timeout();
    let (stop, a_task) = campaign_until_stopped(a);
    let landed = tokio::time::timeout(request_timeout, async {
        loop {
            if let Some(spec) = lease(&consumer).await {
                return spec;
            }
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the acquiring create lands");
    assert_eq!(landed.holder_identity.as_deref(), Some("a"));
    stop.send(()).unwrap();
    a_task.await.unwrap();
    assert_eq!(
        lease(&consumer).await.unwrap().holder_identity,
        None,
        "the Lease still names a replica that has stopped"
    );
}

/// Releasing on the way out must not hold the shutdown when the consumer stops answering.
#[tokio::test(start_paused = true)]
async fn a_shutdown_against_a_consumer_that_does_not_answer_ends_within_the_request_timeout() {
    let (consumer, clock) = consumer().await;
    let a = replica(&consumer, &clock, "a");
    let request_timeout = a.config.request_timeout();
    let mut a_leads = a.leading();
    let (stop, a_task) = campaign_until_stopped(a);
    wait_for("a leads", &mut a_leads, true, Duration::from_secs(5)).await;
    consumer.set_latency(Some(Duration::from_secs(600)));
    stop.send(()).unwrap();
    let stopping = Instant::now();
    a_task.await.unwrap();
    let took = stopping.elapsed();
    assert!(
        took <= request_timeout,
        "the shutdown waited {took:?} on a consumer that does not answer"
    );
}
