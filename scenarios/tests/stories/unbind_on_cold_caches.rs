//! contract §8.9: every deletion rests on a complete, synced read. A konnector (re)started
//! while a ClusterBinding is being deleted and a Binding serves some of its objects deletes
//! nothing of the Binding's until its Binding cache has synced, however slow that list is.

use fakeapi::{ErrorRule, InjectedError};
use futures::FutureExt;
use serde_json::json;

use crate::binding_kit::*;
use crate::story::*;

#[tokio::test(start_paused = true)]
async fn a_restarted_konnector_takes_no_unbind_decision_before_its_binding_cache_syncs() {
    let (mut world, _) = bound_world_with(
        "a_restarted_konnector_takes_no_unbind_decision_before_its_binding_cache_syncs",
        321,
        |objects| allow_binding_namespaces(objects, "*"),
    )
    .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    create_widget(&world, "team-b", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "team-a", "w").await;
    wait_for_copy(&mut world, "acme", "team-b", "w").await;
    create_binding(&world, "team-a", "widgets", &[WIDGETS]).await;
    world.steps_for(5).await;
    let kept = copy_uids(&world, &[("team-a", "w")]).await;

    // The ClusterBinding is deleted while the konnector is down; it restarts with a consumer
    // whose Binding list keeps failing for a while.
    world.crash_konnector();
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .consumer()
        .inject_error(ErrorRule::new(Some("list"), Some("bindings"), InjectedError::Internal));
    world.start_konnector();
    steps_keeping(&mut world, 30, &kept).await;
    assert!(
        cluster_binding(&world, "acme").await.is_some(),
        "no unbind decision before the Binding cache syncs"
    );
    assert!(widgets_crd_present(&world).await);

    world.consumer().clear_errors();
    world
        .run_until_async("the ClusterBinding is released", 60, |w| {
            async move { cluster_binding(w, "acme").await.is_none() }.boxed()
        })
        .await;
    world
        .run_until_async(
            "team-b, served by nobody now, is drained",
            30,
            copy_gone("acme", "team-b", "w"),
        )
        .await;
    steps_keeping(&mut world, 5, &kept).await;
    assert!(widgets_crd_present(&world).await, "the Binding still uses the API");
}
