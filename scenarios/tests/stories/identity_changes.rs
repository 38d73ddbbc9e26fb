//! Stories of contract §2 "Identity": a Secret repointed at another provider, a provider
//! rebuilt behind the same URL while a write is in flight, and a kcp-like provider pinned by its
//! LogicalCluster. Each ends with `ClusterIdentityChanged` (or the right pin) and zero writes to
//! the cluster that is not the pinned one.

use crate::common;

use kbind_api::consts::{condition, reason};
use kbind_api::{Connection, conditions};
use kbind_cluster::ClusterClientExt;
use kbind_scenarios::{ProviderOpts, World, seed_from_env};

fn identity_changed(conn: &Connection) -> bool {
    conn.status.as_ref().is_some_and(|s| {
        conditions::find(&s.conditions, condition::CONNECTED)
            .is_some_and(|c| c.status == "False" && c.reason == reason::CLUSTER_IDENTITY_CHANGED)
            && !conditions::is_true(&s.conditions, condition::READY)
    })
}

fn is_ready(conn: &Connection) -> bool {
    conn.status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

#[tokio::test(start_paused = true)]
async fn a_secret_repointed_at_another_provider_changes_identity_and_nothing_is_written_there() {
    let mut world = World::builder()
        .seed(seed_from_env(11))
        .story("a_secret_repointed_at_another_provider_changes_identity_and_nothing_is_written_there")
        .provider("acme", ProviderOpts::default())
        .provider("globex", ProviderOpts::default())
        .build()
        .await;
    let acme = world.mint_admin_token("acme");
    let globex = world.mint_admin_token("globex");
    world.apply_bundle("acme", &acme, &["widgets.example.org"]).await;
    world.start_konnector();
    let pinned = world.run_until_connection("acme", "Ready", 60, is_ready).await;
    let acme_uid = world.provider("acme").identity_uid();
    assert_eq!(
        pinned.status.as_ref().and_then(|s| s.remote_cluster_uid.clone()),
        Some(acme_uid.clone())
    );

    world.swap_secret("acme", &globex, None).await;
    let conn = world
        .run_until_connection("acme", "ClusterIdentityChanged", 60, identity_changed)
        .await;
    world
        .run_until("acme is disengaged", 30, |w| w.providers().get("acme").is_none())
        .await;
    world.steps_for(90).await;
    let status = conn.status.unwrap_or_default();
    assert_eq!(status.remote_cluster_uid, Some(acme_uid), "the pin never moves");
    let writes: Vec<_> = world
        .provider("globex")
        .write_log()
        .into_iter()
        .filter(|w| w.user == globex.user)
        .collect();
    assert!(
        writes.is_empty(),
        "the konnector wrote to a cluster it is not pinned to: {writes:?}"
    );
    assert!(
        world.providers().get("acme").is_none(),
        "never engaged on the wrong cluster"
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_rebuilt_while_a_write_is_in_flight_gets_no_write() {
    let (mut world, _cred) =
        common::connected_world("a_provider_rebuilt_while_a_write_is_in_flight_gets_no_write").await;
    world.run_until_connection("acme", "Ready", 60, is_ready).await;
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    let engaged = world.providers().get("acme").expect("engaged");
    world
        .provider("acme")
        .set_latency(Some(std::time::Duration::from_secs(3)));
    let client = engaged.client.clone();
    let write = tokio::spawn(async move {
        client
            .create(
                &common::configmaps(),
                Some("default"),
                &common::configmap("in-flight"),
                &Default::default(),
            )
            .await
    });
    world.step().await;
    world.replace_provider("acme");
    world
        .run_until("the in-flight write returns", 30, |_| write.is_finished())
        .await;
    let result = write.await.expect("the write task");
    assert!(
        result.is_err(),
        "a write sent to the old cluster never lands on the rebuilt one"
    );
    world.provider("acme").set_latency(None);
    // The world checks §8.2 on every step: nothing the konnector sends reaches the new cluster.
    world
        .run_until_connection("acme", "ClusterIdentityChanged", 60, identity_changed)
        .await;
    world.steps_for(60).await;
    let kept = world
        .consumer()
        .admin_client()
        .get_typed_opt::<Connection>(None, "acme")
        .await
        .expect("reading the Connection");
    assert!(
        kept.is_some_and(|c| identity_changed(&c)),
        "the Connection stays refused"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kcp_like_provider_is_pinned_by_its_logical_cluster() {
    let mut world = World::builder()
        .seed(seed_from_env(13))
        .story("a_kcp_like_provider_is_pinned_by_its_logical_cluster")
        .kcp_provider("kcp")
        .build()
        .await;
    let cred = world.mint_admin_token("kcp");
    world.apply_bundle("kcp", &cred, &["widgets.example.org"]).await;
    world.start_konnector();
    let conn = world.run_until_connection("kcp", "Ready", 60, is_ready).await;
    let logical_cluster = world
        .provider("kcp")
        .admin_client()
        .get_opt(&kbind_cluster::identity::logical_cluster_resource(), None, "cluster")
        .await
        .expect("reading LogicalCluster cluster")
        .and_then(|lc| lc.metadata.uid)
        .expect("a kcp-like provider has LogicalCluster cluster");
    let kube_system = world
        .provider("kcp")
        .admin_client()
        .get_opt(&kbind_cluster::identity::namespace_resource(), None, "kube-system")
        .await
        .ok()
        .flatten()
        .and_then(|ns| ns.metadata.uid);
    let pinned = conn.status.and_then(|s| s.remote_cluster_uid);
    assert_eq!(
        pinned.as_deref(),
        Some(logical_cluster.as_str()),
        "pinned to the LogicalCluster"
    );
    assert_ne!(pinned, kube_system, "not to kube-system");
    world
        .run_until("kcp is engaged", 30, |w| w.providers().get("kcp").is_some())
        .await;
}

/// Connections to one provider share its heartbeat Lease: one renews, the others read it back.
/// A rebuilt provider breaks both proofs, so each Connection reads the identity again and
/// refuses the new cluster, the one that only reads as well as the one that renews.
#[tokio::test(start_paused = true)]
async fn a_provider_rebuilt_under_two_connections_that_share_its_heartbeat_is_refused_by_both() {
    let mut world = World::builder()
        .seed(seed_from_env(12))
        .story("a_provider_rebuilt_under_two_connections_that_share_its_heartbeat_is_refused_by_both")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world
        .install_provider_crd(
            "acme",
            kbind_scenarios::apis::exported_crd("gadgets", "Gadget", "Namespaced"),
        )
        .await;
    let first = world.mint_admin_token_for("acme", "kbind-konnector.first");
    let second = world.mint_admin_token_for("acme", "kbind-konnector.second");
    world.apply_bundle("first", &first, &["widgets.example.org"]).await;
    world.apply_bundle("second", &second, &["gadgets.example.org"]).await;
    world.start_konnector();
    world.run_until_connection("first", "Ready", 60, is_ready).await;
    world.run_until_connection("second", "Ready", 60, is_ready).await;
    // Two heartbeat rounds, so one Connection renews and the other reads back.
    world.steps_for(70).await;
    let reads_back = world
        .provider("acme")
        .request_log()
        .iter()
        .filter(|r| r.verb == "get" && r.resource == "leases.coordination.k8s.io")
        .count();
    assert!(reads_back > 0, "neither Connection read the shared Lease back");

    let replaced_at = world.provider("acme").resource_version();
    world.replace_provider("acme");
    // The world checks §8.2 on every step: nothing the konnector sends reaches the new cluster.
    for name in ["first", "second"] {
        world
            .run_until_connection(name, "ClusterIdentityChanged", 90, identity_changed)
            .await;
    }
    world
        .run_until("both are disengaged", 30, |w| w.providers().engaged().is_empty())
        .await;
    world.steps_for(60).await;
    let writes: Vec<_> = world
        .provider("acme")
        .write_log()
        .into_iter()
        .filter(|w| w.rv > replaced_at && (w.user == first.user || w.user == second.user))
        .collect();
    assert!(
        writes.is_empty(),
        "the konnector wrote to the rebuilt provider: {writes:?}"
    );
}
