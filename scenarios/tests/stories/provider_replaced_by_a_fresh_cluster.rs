//! Story: the provider behind a Connection is rebuilt (same URL, CA and token, new identity).
//! No write may reach the new cluster (§8 invariant 2), even before anyone flips Ready.

use crate::common;

#[tokio::test(start_paused = true)]
async fn provider_replaced_by_a_fresh_cluster_gets_no_write() {
    let (mut world, _cred) = common::connected_world("provider_replaced_by_a_fresh_cluster_gets_no_write").await;
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    let acme = world.providers().get("acme").unwrap();
    // A syncer's cache: its watch restarting is how the guard learns something happened.
    let _store = acme.cache.store(&common::configmaps());
    acme.client
        .create(
            &common::configmaps(),
            Some("default"),
            &common::configmap("before"),
            &Default::default(),
        )
        .await
        .expect("writes reach the pinned provider");
    world.steps_for(3).await;

    world.replace_provider("acme");
    world.steps_for(5).await;
    let attempt = acme
        .client
        .create(
            &common::configmaps(),
            Some("default"),
            &common::configmap("after"),
            &Default::default(),
        )
        .await;
    // The world's invariant check (§8.2) fails the story if the write got through.
    world.steps_for(2).await;
    assert!(attempt.is_err(), "a write to a replaced provider must be refused");
    assert!(
        matches!(
            acme.guard().identity_state(),
            kbind_engine::provider::IdentityState::Changed { .. }
        ),
        "the guard knows the identity changed"
    );
}
