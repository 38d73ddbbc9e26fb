//! Links on fakeapi clusters under the Connection reconciler, on a paused clock: engagement,
//! hysteresis through a provider that throttles or fails, `Retry-After`, disengagement once
//! failures outlast the window, a fresh client after a new kubeconfig, and exported CRDs found
//! by their watch.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fakeapi::{ErrorRule, FakeCluster, InjectedError};
use k8s_openapi::api::core::v1::{Namespace, Secret};
use kbind_api::consts::{condition, reason};
use kbind_api::{Connection, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams, SharedClock, TokioClock};
use serde_json::json;
use tokio::time::Instant;

use super::*;
use crate::connection::stores::ConsumerStores;
use crate::context::{Context, EngineConfig};
use crate::remote::{Connector, Credentials, ProviderKubeconfig};

/// Maps `https://<name>.fake` to a provider cluster's admin client and counts connections.
#[derive(Default)]
struct TestConnector {
    clusters: BTreeMap<String, FakeCluster>,
    connects: AtomicUsize,
}

#[async_trait]
impl Connector for TestConnector {
    async fn connect(
        &self,
        kc: &ProviderKubeconfig,
        _: &kbind_cluster::BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        assert!(matches!(kc.credentials, Credentials::Token(_)));
        let host = kc.server.trim_start_matches("https://").trim_end_matches(".fake");
        let cluster = self
            .clusters
            .get(host)
            .ok_or_else(|| Error::Transport(format!("no such host {host}")))?;
        self.connects.fetch_add(1, Ordering::SeqCst);
        // As the konnector's connector does: every request but a watch is given up in time.
        Ok(kbind_cluster::with_request_timeout(
            Arc::new(cluster.admin_client()),
            kbind_cluster::REQUEST_TIMEOUT,
        ))
    }
}

struct Setup {
    ctx: Context,
    consumer: FakeCluster,
    provider: FakeCluster,
    connector: Arc<TestConnector>,
    links: Links,
}

fn kubeconfig(server: &str, token: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n"
    )
}

fn widgets_crd(exported: bool) -> kbind_cluster::DynamicObject {
    let labels = if exported {
        json!({"core.kbind.io/exported": "true"})
    } else {
        json!({})
    };
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org", "labels": labels},
        "spec": {"group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    }))
    .unwrap()
}

/// A consumer with kbind's CRDs, a provider, Secret and Connection `acme` applied, and the
/// Connection reconciler running with `config`.
async fn setup(config: EngineConfig) -> Setup {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let consumer = FakeCluster::builder("consumer").seed(1).clock(clock.clone()).build();
    let provider = FakeCluster::builder("acme").seed(2).clock(clock.clone()).build();
    let admin = consumer.admin_client();
    for mut crd in kbind_api::crds() {
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
        admin.create_typed(&crd).await.unwrap();
    }
    let connections = ApiResource::erase::<Connection>(&());
    let deadline = Instant::now() + Duration::from_secs(10);
    while admin.list(&connections, None, &Default::default()).await.is_err() {
        assert!(Instant::now() < deadline, "the Connection CRD is never served");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kbind"}})).unwrap();
    admin.create_typed(&ns).await.unwrap();
    let connector = Arc::new(TestConnector {
        clusters: BTreeMap::from([("acme".to_string(), provider.clone())]),
        connects: AtomicUsize::new(0),
    });
    let ctx = Context {
        consumer: Arc::new(consumer.admin_client()),
        connector: connector.clone(),
        clock,
        randomness: kbind_cluster::backoff::seeded(2),
        config,
    };
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "acme", "namespace": "kbind"},
        "stringData": {"kubeconfig": kubeconfig("https://acme.fake", "t0ken")},
    }))
    .unwrap();
    admin.create_typed(&secret).await.unwrap();
    let conn: Connection = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "acme"},
        "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "acme", "key": "kubeconfig"}},
    }))
    .unwrap();
    admin.create_typed(&conn).await.unwrap();
    let links = Links::new();
    let (run_ctx, run_links) = (ctx.clone(), links.clone());
    tokio::spawn(async move {
        let (stores, feed) = ConsumerStores::new(&run_ctx);
        tokio::join!(feed, crate::connection::run_shared(run_ctx.clone(), stores, run_links));
    });
    Setup {
        ctx,
        consumer,
        provider,
        connector,
        links,
    }
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(300);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

async fn connection(s: &Setup) -> Connection {
    s.consumer
        .admin_client()
        .get_typed_opt::<Connection>(None, "acme")
        .await
        .unwrap()
        .expect("the Connection")
}

/// The Connection's `Connected` condition: status, reason, message.
async fn connected(s: &Setup) -> Option<(String, String, String)> {
    let conn = connection(s).await;
    let c = conditions::find(conn.conditions(), condition::CONNECTED)?.clone();
    Some((c.status, c.reason, c.message))
}

/// Lease updates the konnector sent the provider so far (refused ones included).
fn lease_updates(s: &Setup) -> usize {
    s.provider
        .request_log()
        .iter()
        .filter(|r| r.verb == "update" && r.resource.starts_with("leases"))
        .count()
}

async fn engaged(config: EngineConfig) -> Setup {
    let s = setup(config).await;
    wait_for("acme is engaged", || s.links.get("acme").is_some()).await;
    s
}

#[tokio::test(start_paused = true)]
async fn a_ready_connection_is_engaged_with_its_pinned_identity() {
    let s = engaged(EngineConfig::default()).await;
    let uid = s.provider.identity_uid();
    assert_eq!(s.links.state("acme"), LinkState::Engaged { uid: uid.clone() });
    let acme = s.links.get("acme").unwrap();
    assert_eq!(acme.identity, uid);
    let conn = connection(&s).await;
    assert_eq!(conn.status.and_then(|st| st.remote_cluster_uid), Some(uid));
    assert_eq!(s.connector.connects.load(Ordering::SeqCst), 1, "one client per link");
}

/// A failed heartbeat does not end the engagement: it stays while failures last less than the
/// window (syncers, caches and watches kept), the Connection says so, and only failures that
/// outlast the window disengage the provider.
#[tokio::test(start_paused = true)]
async fn failed_renewals_keep_the_provider_engaged_until_they_outlast_the_window() {
    let s = engaged(EngineConfig::default()).await;
    let first = s.links.get("acme").unwrap();
    s.provider
        .inject_error(ErrorRule::new(Some("update"), Some("leases"), InjectedError::Internal));
    s.provider
        .inject_error(ErrorRule::new(Some("get"), Some("leases"), InjectedError::Internal));
    s.provider
        .inject_error(ErrorRule::new(Some("get"), Some("namespaces"), InjectedError::Internal));
    wait_for("the link falters", || !s.links.faltering().is_empty()).await;
    let since = Instant::now();
    // Within the window: still engaged, the same engagement, Ready, and the message says so.
    while Instant::now() < since + WINDOW - Duration::from_secs(10) {
        let now = s
            .links
            .get("acme")
            .expect("the provider stays engaged within the window");
        assert!(
            Arc::ptr_eq(&now, &first),
            "the engagement is never rebuilt within the window"
        );
        assert!(!now.is_disengaged());
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    let (status, why, message) = connected(&s).await.unwrap();
    assert_eq!((status.as_str(), why.as_str()), ("True", reason::AS_EXPECTED));
    assert!(
        message.contains("have failed since") && message.contains("HTTP 500"),
        "the condition says what is happening: {message}"
    );
    assert!(conditions::is_true(connection(&s).await.conditions(), condition::READY));
    // Failures outlast the window: disengaged as for any loss.
    wait_for("acme is disengaged", || s.links.get("acme").is_none()).await;
    assert!(first.is_disengaged());
    let mut c = None;
    for _ in 0..100 {
        c = connected(&s).await;
        if c.as_ref().is_some_and(|c| c.0 == "False") {
            break;
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert_eq!(c.map(|c| c.1).as_deref(), Some(reason::PROVIDER_UNREACHABLE));
    assert!(s.links.is_down("acme"));
    // The provider answers again: a fresh engagement.
    s.provider.clear_errors();
    wait_for("acme is engaged again", || s.links.get("acme").is_some()).await;
    assert!(!Arc::ptr_eq(&s.links.get("acme").unwrap(), &first));
}

/// A provider whose renewals fail and then answer again within the window cost only time: the
/// engagement (and every watch on it) is the same one.
#[tokio::test(start_paused = true)]
async fn a_blip_shorter_than_the_window_keeps_the_same_engagement() {
    let s = engaged(EngineConfig::default()).await;
    let first = s.links.get("acme").unwrap();
    s.provider
        .inject_error(ErrorRule::new(None, None, InjectedError::Internal));
    wait_for("the link falters", || !s.links.faltering().is_empty()).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    s.provider.clear_errors();
    wait_for("the link recovers", || s.links.faltering().is_empty()).await;
    assert!(Arc::ptr_eq(&s.links.get("acme").unwrap(), &first));
    assert!(!first.is_disengaged());
    assert_eq!(
        s.links.state("acme"),
        LinkState::Engaged {
            uid: first.identity.clone()
        }
    );
}

/// A 429 says when to come back; the link does not renew before that.
#[tokio::test(start_paused = true)]
async fn a_throttled_renewal_is_retried_only_after_retry_after() {
    let s = engaged(EngineConfig::default()).await;
    s.provider.inject_error(ErrorRule::new(
        Some("update"),
        Some("leases"),
        InjectedError::TooManyRequests {
            retry_after_seconds: 20,
        },
    ));
    let before = lease_updates(&s);
    wait_for("a renewal is throttled", || lease_updates(&s) > before).await;
    let throttled_at = Instant::now();
    let after_first = lease_updates(&s);
    while Instant::now() < throttled_at + Duration::from_secs(19) {
        assert_eq!(
            lease_updates(&s),
            after_first,
            "no renewal before the 20 s the provider asked for"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    wait_for("the renewal is tried again", || lease_updates(&s) > after_first).await;
    assert!(
        s.links.get("acme").is_some(),
        "throttling alone never disengages within the window"
    );
}

/// A new kubeconfig ends the link and engages a fresh client.
#[tokio::test(start_paused = true)]
async fn a_new_kubeconfig_engages_a_fresh_client() {
    let s = engaged(EngineConfig::default()).await;
    let first = s.links.get("acme").unwrap();
    let patch = json!({"stringData": {"kubeconfig": kubeconfig("https://acme.fake", "rotated")}});
    s.consumer
        .admin_client()
        .patch(
            &ApiResource::erase::<Secret>(&()),
            Some("kbind"),
            "acme",
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    wait_for("a new engagement", || {
        s.links.get("acme").is_some_and(|p| !Arc::ptr_eq(&p, &first))
    })
    .await;
    assert!(first.is_disengaged());
    assert_eq!(s.connector.connects.load(Ordering::SeqCst), 2);
}

/// A CRD labelled exported after the Connection is Ready arrives by the
/// watch of exported CRDs, with the rediscovery poll out of the way.
#[tokio::test(start_paused = true)]
async fn a_newly_exported_crd_arrives_by_event_not_by_the_poll() {
    let config = EngineConfig {
        rediscovery_interval: Duration::from_secs(24 * 3600),
        ..EngineConfig::default()
    };
    let s = engaged(config).await;
    let padmin = s.provider.admin_client();
    padmin
        .create(
            &crate::crdpull::crd_resource(),
            None,
            &widgets_crd(true),
            &Default::default(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let conn = connection(&s).await;
        let exported = conn
            .status
            .map(|st| st.exported_apis.iter().any(|a| a.name == "widgets.example.org"))
            .unwrap_or(false);
        if exported {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a newly exported CRD must appear within a minute, not at the next day-long poll"
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // And going: the label removed, the API leaves exportedAPIs by event too.
    padmin
        .patch(
            &crate::crdpull::crd_resource(),
            None,
            "widgets.example.org",
            &Patch::Merge(json!({"metadata": {"labels": {"core.kbind.io/exported": null}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let conn = connection(&s).await;
        if conn.status.is_some_and(|st| st.exported_apis.is_empty()) {
            break;
        }
        assert!(Instant::now() < deadline, "an unexported CRD must leave by event");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The identity pinned on the Connection differs from the provider's: no engagement.
#[tokio::test(start_paused = true)]
async fn a_connection_pinned_to_another_cluster_is_never_engaged() {
    let s = setup(EngineConfig::default()).await;
    s.consumer
        .admin_client()
        .patch_status(
            &ApiResource::erase::<Connection>(&()),
            None,
            "acme",
            &Patch::Merge(json!({"status": {"remoteClusterUID": "someone-else"}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let c = connected(&s).await;
        if c.as_ref().is_some_and(|c| c.1 == reason::CLUSTER_IDENTITY_CHANGED) {
            break;
        }
        assert!(Instant::now() < deadline, "the identity change is reported: {c:?}");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(s.links.get("acme").is_none());
    assert!(matches!(s.links.state("acme"), LinkState::IdentityChanged { .. }));
    assert!(s.links.is_down("acme"));
    let _ = &s.ctx;
}

/// A black-holed provider (accepts, never answers) makes its Connection not
/// Ready within one heartbeat interval (plus its jitter), one window and one second of the hole
/// opening.
#[tokio::test(start_paused = true)]
async fn a_black_holed_provider_is_reported_within_an_interval_and_a_window() {
    let config = EngineConfig::default();
    let bound = config.heartbeat_interval.mul_f64(1.1) + window(config.heartbeat_interval) + LAST_TRY;
    let s = engaged(config).await;
    wait_for("Ready", || true).await;
    let opened = Instant::now();
    s.provider.black_hole();
    let deadline = opened + bound + Duration::from_secs(1);
    loop {
        if connected(&s)
            .await
            .is_some_and(|c| c.0 == "False" && c.1 == reason::PROVIDER_UNREACHABLE)
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a black hole must be reported within {bound:?} of opening (interval + jitter + window)"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(s.links.get("acme").is_none(), "disengaged");
    s.provider.restore();
    wait_for("acme is engaged again", || s.links.get("acme").is_some()).await;
}

/// A faltering link is given up when its failures outlast the window, not at its next retry
/// (here a 429 asks for 100 s, far past the 60 s window).
#[tokio::test(start_paused = true)]
async fn a_faltering_link_is_given_up_at_the_end_of_the_window_not_at_its_next_retry() {
    let s = engaged(EngineConfig::default()).await;
    s.provider.inject_error(ErrorRule::new(
        None,
        None,
        InjectedError::TooManyRequests {
            retry_after_seconds: 100,
        },
    ));
    wait_for("the link falters", || !s.links.faltering().is_empty()).await;
    let faltering = Instant::now();
    wait_for("acme is disengaged", || s.links.get("acme").is_none()).await;
    let took = faltering.elapsed();
    assert!(
        took <= WINDOW + Duration::from_secs(2),
        "given up {took:?} after faltering began: the window is {WINDOW:?}, the retry it asked for 100 s"
    );
}

/// A failed link waits out its backoff: passes woken meanwhile (here by the credential
/// Secret's labels changing every second) send the provider nothing.
#[tokio::test(start_paused = true)]
async fn a_failed_link_retries_on_its_backoff_not_on_every_pass() {
    let s = engaged(EngineConfig::default()).await;
    s.provider.partition();
    wait_for("acme is disengaged", || s.links.get("acme").is_none()).await;
    let before = s.connector.connects.load(Ordering::SeqCst);
    let start = Instant::now();
    for i in 0..60 {
        let patch = json!({"metadata": {"labels": {"touched": i.to_string()}}});
        s.consumer
            .admin_client()
            .patch(
                &ApiResource::erase::<Secret>(&()),
                Some("kbind"),
                "acme",
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    // Every attempt of a failed link builds a fresh client (a failure drops it).
    let attempts = s.connector.connects.load(Ordering::SeqCst) - before;
    // Backoff from 1 s doubling to 15 s, +50 % jitter: about eight attempts in a minute.
    assert!(
        attempts <= 12,
        "{attempts} attempts in {:?} of 60 passes: a failed link must keep to its backoff",
        start.elapsed()
    );
}

#[test]
fn an_unreachable_provider_is_named_by_host_port_and_cause() {
    assert_eq!(
        server_address("https://10.0.0.7:6443/path?x=1").as_deref(),
        Some("10.0.0.7:6443")
    );
    assert_eq!(
        server_address("https://user:pw@provider.example").as_deref(),
        Some("provider.example:443")
    );
    assert_eq!(server_address("http://127.0.0.1").as_deref(), Some("127.0.0.1:80"));
    let refused = classify_at(&Error::Transport("connection refused".into()), Some("127.0.0.1:1"));
    assert_eq!(
        refused,
        Failure::Unreachable("the provider at 127.0.0.1:1 cannot be reached: connection refused; retrying".into())
    );
    let slow = classify_at(&Error::Timeout("timed out".into()), Some("10.0.0.7:6443"));
    assert_eq!(
        slow,
        Failure::Unreachable("a request to the provider at 10.0.0.7:6443 timed out; retrying".into())
    );
}
