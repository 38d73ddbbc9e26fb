//! Stories driven by the real Connection reconciler (status conditions, heartbeat Lease):
//! partition and heal, heartbeat only while connected, revoked credentials.

use crate::common;

use kbind_cluster::ApiResource;

fn heartbeat_writes(world: &kbind_scenarios::World, user: &str) -> usize {
    world
        .provider("acme")
        .write_log()
        .iter()
        .filter(|w| w.user == user && w.resource.starts_with("leases."))
        .count()
}

#[tokio::test(start_paused = true)]
async fn partitioned_provider_is_disengaged_and_reengaged_with_a_fresh_client() {
    let (mut world, _cred) =
        common::connected_world("partitioned_provider_is_disengaged_and_reengaged_with_a_fresh_client").await;
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    let first = world.providers().get("acme").unwrap();
    let _ = first.cache.store(&common::configmaps());
    world.partition("acme");
    world
        .run_until("acme is disengaged", 120, |w| w.providers().get("acme").is_none())
        .await;
    assert!(first.cache.watched().is_empty(), "no caches survive a disengage");
    world.heal("acme");
    world
        .run_until("acme is engaged again", 120, |w| w.providers().get("acme").is_some())
        .await;
    let second = world.providers().get("acme").unwrap();
    assert!(!std::sync::Arc::ptr_eq(&first, &second));
    assert!(first.is_disengaged(), "the dead cluster's client is closed");
    // The Connection reconciler connects on its own, so count clients, not connector calls.
    assert!(
        !std::sync::Arc::ptr_eq(&first.client, &second.client),
        "recovery builds a fresh client"
    );
}

#[tokio::test(start_paused = true)]
async fn heartbeat_lease_is_renewed_only_while_connected() {
    let (mut world, cred) = common::connected_world("heartbeat_lease_is_renewed_only_while_connected").await;
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    world.steps_for(70).await;
    assert!(
        heartbeat_writes(&world, &cred.user) >= 2,
        "the Lease is renewed while connected"
    );
    world.replace_provider("acme");
    world
        .run_until("acme is disengaged", 120, |w| w.providers().get("acme").is_none())
        .await;
    let after = heartbeat_writes(&world, &cred.user);
    world.steps_for(120).await;
    assert_eq!(
        heartbeat_writes(&world, &cred.user),
        after,
        "no heartbeat while not connected"
    );
}

#[tokio::test(start_paused = true)]
async fn revoked_credentials_disengage_without_deleting_anything() {
    let mut world = kbind_scenarios::World::builder()
        .seed(kbind_scenarios::seed_from_env(5))
        .story("revoked_credentials_disengage_without_deleting_anything")
        .provider("acme", Default::default())
        .build()
        .await;
    let cred = world
        .mint_service_account("acme", "kbind-konnector", "cluster-admin")
        .await;
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_konnector();
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    world.revoke(&cred).await;
    world
        .run_until("acme is disengaged", 120, |w| w.providers().get("acme").is_none())
        .await;
    let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    let kept =
        kbind_cluster::ClusterClientExt::get_opt(&world.consumer().admin_client(), &secrets, Some("kbind"), "acme")
            .await;
    assert!(matches!(kept, Ok(Some(_))), "the Secret stays");
}

#[tokio::test(start_paused = true)]
async fn rotated_credentials_are_used_at_once_and_the_old_client_is_never_reused() {
    let mut world = kbind_scenarios::World::builder()
        .seed(kbind_scenarios::seed_from_env(6))
        .story("rotated_credentials_are_used_at_once_and_the_old_client_is_never_reused")
        .provider("acme", Default::default())
        .build()
        .await;
    let old = world
        .mint_service_account("acme", "konnector-2025", "cluster-admin")
        .await;
    world.apply_bundle("acme", &old, &["widgets.example.org"]).await;
    world.start_konnector();
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    let first = world.providers().get("acme").unwrap();

    // The provider's platform team rotates: a new ServiceAccount, the Secret updated, the old one revoked.
    let new = world
        .mint_service_account("acme", "konnector-2026", "cluster-admin")
        .await;
    world.swap_secret("acme", &new, None).await;
    world.revoke(&old).await;
    world
        .run_until("acme is engaged with the rotated Secret", 120, |w| {
            w.providers()
                .get("acme")
                .is_some_and(|p| !std::sync::Arc::ptr_eq(&p, &first))
        })
        .await;
    let engaged = world.providers().get("acme").unwrap();
    engaged
        .client
        .create(
            &common::configmaps(),
            Some("default"),
            &common::configmap("after-rotation"),
            &Default::default(),
        )
        .await
        .expect("the engaged client writes with the rotated credentials");
    let author = world
        .provider("acme")
        .write_log()
        .into_iter()
        .find(|w| w.name == "after-rotation")
        .map(|w| w.user);
    assert_eq!(author, Some(new.user.clone()), "the write used the rotated credentials");
}
