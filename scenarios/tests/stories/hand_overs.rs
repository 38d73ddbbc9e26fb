//! contract §4 "unbind" and §8.8: deleting one binding never deletes or re-creates a provider
//! copy that another binding still serves. A hand-over between a ClusterBinding and Bindings of
//! the same API, in any direction, keeps every copy with its UID; only what nobody serves any
//! more is drained, and a Binding in a namespace the Connection does not allow serves nothing.

use futures::FutureExt;
use kbind_scenarios::World;
use serde_json::json;

use crate::binding_kit::*;
use crate::story::*;

/// Widgets in team-a, team-b and team-c, their copies on the provider.
async fn widgets_in_three_namespaces(world: &mut World) {
    for ns in ["team-a", "team-b", "team-c"] {
        create_widget(world, ns, "w", json!({"size": 1})).await;
        wait_for_copy(world, "acme", ns, "w").await;
    }
}

#[tokio::test(start_paused = true)]
async fn deleting_a_cluster_binding_hands_the_namespaces_of_bindings_over_with_their_copies() {
    let (mut world, _) = bound_world_with(
        "deleting_a_cluster_binding_hands_the_namespaces_of_bindings_over_with_their_copies",
        301,
        |objects| allow_binding_namespaces(objects, "team-a,team-b"),
    )
    .await;
    widgets_in_three_namespaces(&mut world).await;
    create_binding(&world, "team-a", "widgets", &[WIDGETS]).await;
    // team-c is not allowed by the Connection: that Binding serves nothing.
    create_binding(&world, "team-c", "widgets", &[WIDGETS]).await;
    world.steps_for(5).await;
    let kept = copy_uids(&world, &[("team-a", "w")]).await;

    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the ClusterBinding is released", 60, |w| {
            async move { cluster_binding(w, "acme").await.is_none() }.boxed()
        })
        .await;
    assert_copies_kept(&world, &kept).await;
    // Nobody serves team-b and team-c any more: those copies are drained.
    for ns in ["team-b", "team-c"] {
        world
            .run_until_async(&format!("the copy in {ns} is drained"), 30, copy_gone("acme", ns, "w"))
            .await;
    }
    assert!(widgets_crd_present(&world).await, "a Binding still uses the API");
    assert_eq!(
        widget_finalizers(&world, "team-a", "w").await.map(|f| f.len()),
        Some(1),
        "the Binding's object keeps its finalizer"
    );

    // The Binding serves team-a from now on, on the same copy.
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the Binding syncs team-a",
            60,
            copy_has("acme", "team-a", "w", "/spec/size", json!(7)),
        )
        .await;
    steps_keeping(&mut world, 5, &kept).await;
}

#[tokio::test(start_paused = true)]
async fn a_binding_hands_its_namespace_over_to_a_later_cluster_binding_with_its_copies() {
    let mut world = connected_for_bindings(
        "a_binding_hands_its_namespace_over_to_a_later_cluster_binding_with_its_copies",
        302,
    )
    .await;
    create_binding(&world, "team-a", "widgets", &[WIDGETS]).await;
    world
        .run_until_async("the Binding is Ready", 120, binding_is_ready("team-a", "widgets"))
        .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "team-a", "w").await;
    let first = copy_uids(&world, &[("team-a", "w")]).await;

    create_cluster_binding(&world, "acme").await;
    world
        .run_until_async("the ClusterBinding is Ready", 60, |w| binding_ready(w, "acme").boxed())
        .await;
    create_widget(&world, "team-b", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "team-b", "w").await;
    steps_keeping(&mut world, 3, &first).await;
    let kept = copy_uids(&world, &[("team-a", "w"), ("team-b", "w")]).await;

    world.delete_on_consumer(&bindings(), Some("team-a"), "widgets").await;
    world
        .run_until_async("the Binding is released", 60, |w| {
            async move { binding(w, "team-a", "widgets").await.is_none() }.boxed()
        })
        .await;
    steps_keeping(&mut world, 10, &kept).await;
    assert!(
        widgets_crd_present(&world).await,
        "the ClusterBinding still uses the API"
    );
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 5}})).await;
    world
        .run_until_async(
            "the ClusterBinding syncs team-a",
            60,
            copy_has("acme", "team-a", "w", "/spec/size", json!(5)),
        )
        .await;
    assert_copies_kept(&world, &kept).await;
}

#[tokio::test(start_paused = true)]
async fn deleting_one_of_two_bindings_of_a_namespace_hands_over_to_the_other() {
    let mut world = connected_for_bindings(
        "deleting_one_of_two_bindings_of_a_namespace_hands_over_to_the_other",
        303,
    )
    .await;
    create_binding(&world, "team-a", "first", &[WIDGETS]).await;
    world
        .run_until_async("the first Binding is Ready", 120, binding_is_ready("team-a", "first"))
        .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "team-a", "w").await;
    world.steps_for(2).await;
    create_binding(&world, "team-a", "second", &[WIDGETS]).await;
    world
        .run_until_async("the second Binding is Ready", 60, binding_is_ready("team-a", "second"))
        .await;
    let kept = copy_uids(&world, &[("team-a", "w")]).await;

    world.delete_on_consumer(&bindings(), Some("team-a"), "first").await;
    world
        .run_until_async("the first Binding is released", 60, |w| {
            async move { binding(w, "team-a", "first").await.is_none() }.boxed()
        })
        .await;
    steps_keeping(&mut world, 10, &kept).await;
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 4}})).await;
    world
        .run_until_async(
            "the second Binding syncs team-a",
            60,
            copy_has("acme", "team-a", "w", "/spec/size", json!(4)),
        )
        .await;
    assert_copies_kept(&world, &kept).await;
    assert!(
        widgets_crd_present(&world).await,
        "the second Binding still uses the API"
    );
}
