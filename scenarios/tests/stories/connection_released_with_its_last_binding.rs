//! A deleted Connection waits for its bindings (`DrainingBindings`) and is
//! released on the event of its last binding going away, not on a periodic requeue. Asserted on
//! the paused clock's virtual time, which is deterministic.

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{condition, reason};
use serde_json::json;
use story::*;

/// How much virtual time the Connection may take after its last binding is gone: a couple of
/// world steps (one second each), well under any requeue interval.
const RELEASE_BOUND: std::time::Duration = std::time::Duration::from_secs(2);

#[tokio::test(start_paused = true)]
async fn a_deleted_connection_goes_with_its_last_binding() {
    let (mut world, _) = bound_world("a_deleted_connection_goes_with_its_last_binding", 2421).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    // The Connection goes first and waits for its binding.
    world.delete_on_consumer(&connections(), None, "acme").await;
    world
        .run_until_connection("acme", "Ready=False/DrainingBindings", 30, |c| {
            c.status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, condition::READY))
                .is_some_and(|r| r.reason == reason::DRAINING_BINDINGS)
        })
        .await;
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding is gone", 60, |w| {
            async move { w.consumer_get(&cluster_bindings(), None, "acme").await.is_none() }.boxed()
        })
        .await;
    let binding_gone = tokio::time::Instant::now();
    world
        .run_until_async("the Connection is gone", 30, |w| {
            async move { w.consumer_get(&connections(), None, "acme").await.is_none() }.boxed()
        })
        .await;
    let waited = tokio::time::Instant::now() - binding_gone;
    assert!(
        waited <= RELEASE_BOUND,
        "the Connection went {waited:?} (virtual) after its last binding, not on the binding's event"
    );
    assert!(
        world
            .provider_get("acme", &kbind_scenarios::apis::widgets(), Some("default"), "w1")
            .await
            .is_none(),
        "the unbind drained the copy"
    );
}
