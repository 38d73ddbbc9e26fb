//! Engagement tests on fakeapi clusters, with the Connection status written by hand (the
//! reconciler's part) so each provider transition is driven exactly.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use fakeapi::FakeCluster;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Secret};
use kbind_api::Connection;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams, SharedClock, TokioClock};
use serde_json::json;

use super::*;
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
    async fn connect(&self, kc: &ProviderKubeconfig) -> Result<Arc<dyn ClusterClient>, kbind_cluster::Error> {
        assert!(kc.credentials == Credentials::Token("t0ken".into()));
        let host = kc.server.trim_start_matches("https://").trim_end_matches(".fake");
        let cluster = self
            .clusters
            .get(host)
            .ok_or_else(|| kbind_cluster::Error::Transport(format!("no such host {host}")))?;
        self.connects.fetch_add(1, Ordering::SeqCst);
        Ok(Arc::new(cluster.admin_client()))
    }
}

struct Setup {
    ctx: Context,
    consumer: FakeCluster,
    provider: FakeCluster,
    connector: Arc<TestConnector>,
}

fn kubeconfig(server: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: {server}\nusers:\n- name: u\n  user:\n    token: t0ken\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n"
    )
}

async fn setup() -> Setup {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let consumer = FakeCluster::builder("consumer").seed(1).clock(clock.clone()).build();
    let provider = FakeCluster::builder("acme").seed(2).clock(clock.clone()).build();
    let admin = consumer.admin_client();
    for mut crd in kbind_api::crds() {
        // kube-apiserver defaults listKind; fakeapi does not yet and would re-establish for ever.
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
        admin.create_typed(&crd).await.unwrap();
    }
    let connections = ApiResource::erase::<Connection>(&());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while admin.list(&connections, None, &Default::default()).await.is_err() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the Connection CRD is never served"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": "kbind"}})).unwrap();
    admin.create_typed(&ns).await.unwrap();
    let connector = Arc::new(TestConnector {
        clusters: BTreeMap::from([("acme".to_string(), provider.clone())]),
        connects: AtomicUsize::new(0),
    });
    let ctx = Context {
        consumer: Arc::new(consumer.client(fakeapi::UserInfo {
            name: "kbind-konnector".into(),
            groups: vec!["system:masters".into()],
        })),
        connector: connector.clone(),
        clock,
        randomness: kbind_cluster::backoff::seeded(2),
        config: EngineConfig::default(),
    };
    Setup {
        ctx,
        consumer,
        provider,
        connector,
    }
}

async fn apply_bundle(consumer: &FakeCluster, server: &str) {
    let admin = consumer.admin_client();
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": "acme", "namespace": "kbind"},
        "stringData": {"kubeconfig": kubeconfig(server)},
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
}

/// Writes what the Connection reconciler would: Ready and the pinned identity.
async fn set_ready(consumer: &FakeCluster, ready: bool, uid: &str) {
    let status = if ready { "True" } else { "False" };
    let patch = json!({"status": {
        "remoteClusterUID": uid,
        "conditions": [{"type": "Ready", "status": status, "reason": if ready { "AsExpected" } else { "ProviderUnreachable" },
                        "message": "", "lastTransitionTime": "2026-01-01T00:00:00Z"}],
    }});
    consumer
        .admin_client()
        .patch_status(
            &ApiResource::erase::<Connection>(&()),
            None,
            "acme",
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .unwrap();
}

/// The bundle applied, the provider loop running, the Connection Ready with the provider's
/// identity pinned, and provider `acme` engaged.
async fn engaged(s: &Setup) -> ProviderRegistry {
    apply_bundle(&s.consumer, "https://acme.fake").await;
    let registry = ProviderRegistry::new();
    tokio::spawn(run(s.ctx.clone(), registry.clone()));
    set_ready(&s.consumer, true, &s.provider.identity_uid()).await;
    wait_for("acme is engaged", || registry.get("acme").is_some()).await;
    registry
}

async fn wait_for(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while !done() {
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn configmap(name: &str) -> DynamicObject {
    kbind_cluster::to_dynamic(
        &serde_json::from_value::<ConfigMap>(json!({
            "metadata": {"name": name, "namespace": "default"}, "data": {"a": "b"},
        }))
        .unwrap(),
    )
    .unwrap()
}

fn configmaps() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}

#[tokio::test(start_paused = true)]
async fn ready_connection_is_engaged_with_its_pinned_identity() {
    let s = setup().await;
    apply_bundle(&s.consumer, "https://acme.fake").await;
    let registry = ProviderRegistry::new();
    let mut changes = registry.changes();
    tokio::spawn(run(s.ctx.clone(), registry.clone()));
    tokio::time::sleep(Duration::from_secs(10)).await;
    assert!(
        registry.engaged().is_empty(),
        "a Connection without Ready must not be engaged"
    );

    set_ready(&s.consumer, true, &s.provider.identity_uid()).await;
    wait_for("acme is engaged", || registry.get("acme").is_some()).await;
    assert!(changes.has_changed().unwrap());
    changes.mark_unchanged();
    let acme = registry.get("acme").unwrap();
    assert_eq!(acme.identity, s.provider.identity_uid());
    let created = acme
        .client
        .create(&configmaps(), Some("default"), &configmap("w"), &Default::default())
        .await
        .unwrap();
    assert_eq!(created.metadata.name.as_deref(), Some("w"));
    let store = acme.cache.store(&configmaps());
    wait_for("the cache holds the configmap", || {
        store.state().iter().any(|o| o.metadata.name.as_deref() == Some("w"))
    })
    .await;
    assert_eq!(acme.cache.watched(), vec!["/v1/configmaps".to_string()]);
}

#[tokio::test(start_paused = true)]
async fn connection_with_wrong_pinned_identity_is_not_engaged() {
    let s = setup().await;
    apply_bundle(&s.consumer, "https://acme.fake").await;
    let registry = ProviderRegistry::new();
    tokio::spawn(run(s.ctx.clone(), registry.clone()));
    set_ready(&s.consumer, true, "some-other-cluster").await;
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(registry.engaged().is_empty());
    assert!(
        s.connector.connects.load(Ordering::SeqCst) >= 1,
        "engagement was attempted"
    );
}

#[tokio::test(start_paused = true)]
async fn not_ready_disengages_and_recovery_builds_a_fresh_client() {
    let s = setup().await;
    let registry = engaged(&s).await;
    let uid = s.provider.identity_uid();
    let first = registry.get("acme").unwrap();
    first.cache.store(&configmaps());
    let connects_before = s.connector.connects.load(Ordering::SeqCst);

    set_ready(&s.consumer, false, &uid).await;
    wait_for("acme is disengaged", || registry.get("acme").is_none()).await;
    assert!(first.is_disengaged());
    assert!(first.cache.watched().is_empty(), "disengage stops every watch");
    let refused = first
        .client
        .create(&configmaps(), Some("default"), &configmap("late"), &Default::default())
        .await;
    assert!(refused.is_err(), "a disengaged client must not write");
    assert!(s.provider.write_log().iter().all(|w| w.name != "late"));

    set_ready(&s.consumer, true, &uid).await;
    wait_for("acme is engaged again", || registry.get("acme").is_some()).await;
    let second = registry.get("acme").unwrap();
    assert!(!Arc::ptr_eq(&first, &second));
    assert_eq!(
        s.connector.connects.load(Ordering::SeqCst),
        connects_before + 1,
        "recovery must connect afresh"
    );
    assert!(
        second.cache.watched().is_empty(),
        "a fresh engagement starts with no caches"
    );
}

#[tokio::test(start_paused = true)]
async fn deleted_connection_is_disengaged_and_nothing_is_deleted() {
    let s = setup().await;
    let registry = engaged(&s).await;
    s.consumer
        .admin_client()
        .delete(
            &ApiResource::erase::<Connection>(&()),
            None,
            "acme",
            &Default::default(),
        )
        .await
        .unwrap();
    wait_for("acme is disengaged", || registry.get("acme").is_none()).await;
    let deletes_by_konnector = |c: &FakeCluster| {
        c.write_log()
            .iter()
            .filter(|w| w.verb == "delete" && w.user != "admin")
            .count()
    };
    assert_eq!(deletes_by_konnector(&s.consumer), 0);
    assert_eq!(deletes_by_konnector(&s.provider), 0);
}

#[tokio::test(start_paused = true)]
async fn swapped_secret_reengages_with_the_new_kubeconfig() {
    let s = setup().await;
    let registry = engaged(&s).await;
    let first = registry.get("acme").unwrap();
    let patch = json!({"stringData": {"kubeconfig": kubeconfig("https://elsewhere.fake")}});
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
    wait_for("the old engagement ends", || first.is_disengaged()).await;
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert!(
        registry.get("acme").is_none(),
        "an unreachable new server is not engaged"
    );
}

#[tokio::test(start_paused = true)]
async fn guarded_client_refuses_writes_after_identity_swap() {
    let s = setup().await;
    let raw: Arc<dyn ClusterClient> = Arc::new(s.provider.admin_client());
    let guarded = GuardedClient::new(raw, &s.provider.identity_uid());
    guarded
        .create(
            &configmaps(),
            Some("default"),
            &configmap("before"),
            &Default::default(),
        )
        .await
        .unwrap();
    s.provider.replace_with_fresh();
    // Nothing has told the guard yet (no transport error, no watch restart): a watch restart
    // is what reveals it.
    let _ = guarded.watch(&configmaps(), None, &Default::default(), "0").await;
    let _ = guarded.watch(&configmaps(), None, &Default::default(), "0").await;
    let writes_before = s.provider.write_log().len();
    let refused = guarded
        .create(&configmaps(), Some("default"), &configmap("after"), &Default::default())
        .await;
    assert!(refused.is_err(), "no write may reach a cluster with another identity");
    assert_eq!(s.provider.write_log().len(), writes_before);
    assert!(matches!(guarded.identity_state(), IdentityState::Changed { .. }));
}

#[tokio::test(start_paused = true)]
async fn guarded_client_reverifies_after_a_transport_error() {
    let s = setup().await;
    let raw: Arc<dyn ClusterClient> = Arc::new(s.provider.admin_client());
    let guarded = GuardedClient::new(raw, &s.provider.identity_uid());
    s.provider.partition();
    assert!(guarded.get(&configmaps(), Some("default"), "x").await.is_err());
    assert_eq!(guarded.identity_state(), IdentityState::Unverified);
    s.provider.heal();
    guarded
        .create(&configmaps(), Some("default"), &configmap("x"), &Default::default())
        .await
        .unwrap();
    assert_eq!(guarded.identity_state(), IdentityState::Verified);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_connection_draining_its_bindings_stays_engaged() {
    let s = setup().await;
    let registry = engaged(&s).await;
    let uid = s.provider.identity_uid();
    let engaged = registry.get("acme").unwrap();
    let admin = s.consumer.admin_client();
    let connections = ApiResource::erase::<Connection>(&());
    let finalizer = json!({"metadata": {"finalizers": ["core.kbind.io/cleanup"]}});
    admin
        .patch(
            &connections,
            None,
            "acme",
            &Patch::Merge(finalizer),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    admin
        .delete(&connections, None, "acme", &Default::default())
        .await
        .unwrap();
    // What the Connection reconciler writes while the bindings drain.
    let draining = json!({"status": {"remoteClusterUID": uid, "conditions": [
        {"type": "Connected", "status": "True", "reason": "AsExpected", "message": "",
         "lastTransitionTime": "2026-01-01T00:00:00Z"},
        {"type": "Ready", "status": "False", "reason": "DrainingBindings", "message": "waiting for 1 binding(s)",
         "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    admin
        .patch_status(
            &connections,
            None,
            "acme",
            &Patch::Merge(draining),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let still = registry.get("acme").expect("the bindings still need the provider");
    assert!(Arc::ptr_eq(&engaged, &still) && !still.is_disengaged());

    // Once the Connection is gone, so is the engagement.
    let release = json!({"metadata": {"finalizers": null}});
    admin
        .patch(
            &connections,
            None,
            "acme",
            &Patch::Merge(release),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    wait_for("acme is disengaged", || registry.get("acme").is_none()).await;
}

#[tokio::test(start_paused = true)]
async fn the_link_is_engaged_only_while_ready_and_a_disengage_drops_it() {
    let s = setup().await;
    assert_eq!(ProviderRegistry::new().link_state("acme"), LinkState::Unlinked);
    let registry = engaged(&s).await;
    let uid = s.provider.identity_uid();
    assert_eq!(registry.link_state("acme"), LinkState::Engaged { uid: uid.clone() });
    set_ready(&s.consumer, false, &uid).await;
    wait_for("acme is disengaged", || registry.get("acme").is_none()).await;
    // Recovery connects afresh: the disengaged link's client is gone with it.
    assert_eq!(registry.link_state("acme"), LinkState::Unlinked);
}
