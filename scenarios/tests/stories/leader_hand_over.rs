//! Stories of two konnector replicas sharing one consumer Lease.

use kbind_scenarios::{ProviderOpts, World, seed_from_env};

/// The resourceVersion of the first Lease write by `user` on the consumer.
fn first_lease_write_by(world: &World, user: &str) -> Option<u64> {
    world
        .consumer()
        .write_log()
        .into_iter()
        .find(|w| w.user == user && w.resource.starts_with("leases.") && w.name == "kbind-konnector")
        .map(|w| w.rv)
}

#[tokio::test(start_paused = true)]
async fn leader_hand_over_has_no_write_from_the_old_leader_after_the_lease_changes_hands() {
    let mut world = World::builder()
        .seed(seed_from_env(7))
        .story("leader_hand_over_has_no_write_from_the_old_leader_after_the_lease_changes_hands")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_replica("a");
    world.run_until("a leads", 10, |w| w.is_leading("a")).await;
    world.start_replica("b");
    world.steps_for(30).await;
    assert!(!world.is_leading("b"), "b waits while a renews");

    world.isolate_replica("a", true);
    world.run_until("a steps down", 15, |w| !w.is_leading("a")).await;
    world.run_until("b leads", 30, |w| w.is_leading("b")).await;
    let handed_over_at = first_lease_write_by(&world, &world.replica_user("b")).expect("b wrote the Lease");
    world.isolate_replica("a", false);
    world.steps_for(40).await;

    let late: Vec<_> = world
        .consumer()
        .write_log()
        .into_iter()
        .filter(|w| w.user == world.replica_user("a") && w.rv > handed_over_at)
        .collect();
    assert!(late.is_empty(), "the old leader wrote after the hand-over: {late:?}");
    assert!(world.is_leading("b") && !world.is_leading("a"));
}

#[tokio::test(start_paused = true)]
async fn crashed_konnector_is_replaced_by_a_standby_after_the_lease_expires() {
    let mut world = World::builder()
        .seed(seed_from_env(8))
        .story("crashed_konnector_is_replaced_by_a_standby_after_the_lease_expires")
        .build()
        .await;
    world.start_replica("a");
    world.run_until("a leads", 10, |w| w.is_leading("a")).await;
    world.start_replica("b");
    world.steps_for(5).await;
    world.crash_replica("a");
    let crashed_at = world.steps();
    world.run_until("b leads", 40, |w| w.is_leading("b")).await;
    assert!(world.steps() - crashed_at >= 13, "b waited out the Lease duration");
}

#[tokio::test(start_paused = true)]
async fn standby_replica_engages_nothing_until_it_leads() {
    let mut world = World::builder()
        .seed(seed_from_env(9))
        .story("standby_replica_engages_nothing_until_it_leads")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_replica("a");
    world
        .run_until("a engages acme", 20, |w| w.registry_of("a").get("acme").is_some())
        .await;
    world.start_replica("b");
    world.steps_for(20).await;
    assert!(world.registry_of("b").engaged().is_empty(), "a standby engages nothing");
    let engaged_by_a = world.registry_of("a").get("acme").unwrap();

    world.crash_replica("a");
    world.steps_for(1).await;
    assert!(
        engaged_by_a.is_disengaged(),
        "a crashed replica's engagement is torn down with it"
    );
    world
        .run_until("b engages acme", 40, |w| w.registry_of("b").get("acme").is_some())
        .await;
    let engaged_by_b = world.registry_of("b").get("acme").unwrap();
    // The Connection reconciler connects on its own too, so compare clients, not connector calls.
    assert!(
        !std::sync::Arc::ptr_eq(&engaged_by_a.client, &engaged_by_b.client),
        "b built its own client"
    );
}
