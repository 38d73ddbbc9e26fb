//! contract §4 "deletion" and "unbind": Orphan keeps the copy, an out-of-band delete is
//! repaired, a terminating copy is waited for, a partition delays deletion without losing
//! anything, and the whole bundle deleted in any order converges (§8.1, §8.2, §8.7 checked by
//! the world after every step).

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation};
use kbind_cluster::ClusterClient;
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use kbind_scenarios::world::NAMESPACE;
use serde_json::json;
use story::*;

/// A finalizer a provider-side controller holds on the copy.
const PROVIDER_FINALIZER: &str = "example.org/cleanup";

async fn copy_uid(world: &World, ns: &str, name: &str) -> Option<String> {
    world
        .provider_get("acme", &widgets(), Some(ns), name)
        .await
        .and_then(|c| c.metadata.uid)
}

async fn hold_copy_with_finalizer(world: &World, name: &str) {
    patch_copy(
        world,
        "acme",
        "default",
        name,
        json!({"metadata": {"finalizers": [PROVIDER_FINALIZER]}}),
    )
    .await;
}

async fn release_provider_finalizer(world: &World, name: &str) {
    patch_copy(world, "acme", "default", name, json!({"metadata": {"finalizers": []}})).await;
}

async fn delete_copy_on_provider(world: &World, name: &str) {
    world
        .provider("acme")
        .admin_client()
        .delete(&widgets(), Some("default"), name, &Default::default())
        .await
        .expect("deleting the copy out of band");
}

#[tokio::test(start_paused = true)]
async fn an_object_annotated_orphan_leaves_its_provider_copy_behind() {
    let (mut world, _) = bound_world("an_object_annotated_orphan_leaves_its_provider_copy_behind", 101).await;
    create_widget(&world, "default", "w1", json!({"size": 2})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    patch_widget(
        &world,
        "default",
        "w1",
        json!({"metadata": {"annotations": {annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}}),
    )
    .await;
    world.steps_for(3).await;

    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world
        .run_until_async(
            "the consumer delete completes",
            60,
            consumer_widget_gone("default", "w1"),
        )
        .await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&copy, "/spec/size"),
        Some(json!(2)),
        "the orphaned copy stays as it was"
    );
    assert!(copy.and_then(|c| c.metadata.deletion_timestamp).is_none());
    assert_eq!(
        provider_widget_writes(&world, "acme", "delete"),
        0,
        "nothing deleted on the provider"
    );
}

#[tokio::test(start_paused = true)]
async fn a_copy_deleted_out_of_band_is_created_again() {
    let (mut world, _) = bound_world("a_copy_deleted_out_of_band_is_created_again", 102).await;
    create_widget(&world, "default", "w1", json!({"size": 4})).await;
    let first = wait_for_copy(&mut world, "acme", "default", "w1").await;

    delete_copy_on_provider(&world, "w1").await;
    let old_uid = first.metadata.uid.clone();
    world
        .run_until_async("a new copy replaces the deleted one", 60, move |w| {
            let old_uid = old_uid.clone();
            async move {
                let uid = copy_uid(w, "default", "w1").await;
                uid.is_some() && uid != old_uid
            }
            .boxed()
        })
        .await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(at(&copy, "/spec/size"), Some(json!(4)));
    assert!(world.consumer_get(&widgets(), Some("default"), "w1").await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_terminating_copy_is_waited_for_then_created_again() {
    let (mut world, _) = bound_world("a_terminating_copy_is_waited_for_then_created_again", 103).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    let first = wait_for_copy(&mut world, "acme", "default", "w1").await;
    hold_copy_with_finalizer(&world, "w1").await;
    delete_copy_on_provider(&world, "w1").await;

    for _ in 0..20 {
        world.step().await;
        let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
        let copy = copy.expect("the terminating copy is still there");
        assert_eq!(copy.metadata.uid, first.metadata.uid, "not replaced while terminating");
        assert!(copy.metadata.deletion_timestamp.is_some());
    }

    release_provider_finalizer(&world, "w1").await;
    let old_uid = first.metadata.uid.clone();
    world
        .run_until_async("a fresh copy follows once the old one is gone", 60, move |w| {
            let old_uid = old_uid.clone();
            async move {
                let uid = copy_uid(w, "default", "w1").await;
                uid.is_some() && uid != old_uid
            }
            .boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_consumer_delete_waits_for_a_terminating_copy_and_completes_when_it_goes() {
    let (mut world, _) = bound_world(
        "a_consumer_delete_waits_for_a_terminating_copy_and_completes_when_it_goes",
        104,
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    hold_copy_with_finalizer(&world, "w1").await;
    world.steps_for(2).await;

    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world
        .run_until_async("the copy is terminating", 30, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("default"), "w1")
                    .await
                    .is_some_and(|c| c.metadata.deletion_timestamp.is_some())
            }
            .boxed()
        })
        .await;
    world.steps_for(20).await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(
        mine.is_some_and(|o| o.metadata.deletion_timestamp.is_some()),
        "the consumer object waits, terminating, for its copy"
    );

    release_provider_finalizer(&world, "w1").await;
    world
        .run_until_async(
            "the consumer delete completes",
            60,
            consumer_widget_gone("default", "w1"),
        )
        .await;
    world.steps_for(10).await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_none(),
        "the copy is not created again"
    );
}

#[tokio::test(start_paused = true)]
async fn a_delete_during_a_partition_waits_and_completes_after_heal() {
    let (mut world, _) = bound_world("a_delete_during_a_partition_waits_and_completes_after_heal", 105).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    world.partition("acme");
    world.steps_for(3).await;
    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world.steps_for(60).await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(
        mine.is_some_and(|o| o.metadata.deletion_timestamp.is_some()),
        "the consumer object waits for the provider"
    );
    assert_eq!(
        provider_widget_writes(&world, "acme", "delete"),
        0,
        "nothing reached the partitioned provider"
    );

    world.heal("acme");
    world
        .run_until_async("the copy goes once healed", 120, copy_gone("acme", "default", "w1"))
        .await;
    world
        .run_until_async(
            "the consumer delete completes",
            60,
            consumer_widget_gone("default", "w1"),
        )
        .await;
}

/// A piece of the one-apply bundle.
#[derive(Debug, Clone, Copy)]
enum Piece {
    Binding,
    Connection,
    Secret,
}

async fn delete_piece(world: &mut World, piece: Piece) {
    match piece {
        Piece::Binding => world.delete_on_consumer(&cluster_bindings(), None, "acme").await,
        Piece::Connection => world.delete_on_consumer(&connections(), None, "acme").await,
        Piece::Secret => world.delete_on_consumer(&secrets(), Some(NAMESPACE), "acme").await,
    }
}

/// `kubectl delete -f bundle.yaml` with the documents in `order`: everything converges.
async fn the_bundle_deleted_in(order: [Piece; 3], seed: u64) {
    let story = format!("the_bundle_deleted_in_order_{order:?}");
    let (mut world, _) = bound_world(&story, seed).await;
    for name in ["w1", "w2"] {
        create_widget(&world, "default", name, json!({"size": 1})).await;
        wait_for_copy(&mut world, "acme", "default", name).await;
    }
    world.allow_konnector_delete(&crds(), None, WIDGETS);

    for piece in order {
        delete_piece(&mut world, piece).await;
    }
    world
        .run_until_async("the provider copies are drained", 120, |w| {
            async move { copy_gone("acme", "default", "w1")(w).await && copy_gone("acme", "default", "w2")(w).await }
                .boxed()
        })
        .await;
    world
        .run_until_async("the binding, Connection, Secret and CRD are gone", 120, |w| {
            async move {
                w.consumer_get(&cluster_bindings(), None, "acme").await.is_none()
                    && w.consumer_get(&connections(), None, "acme").await.is_none()
                    && w.consumer_get(&secrets(), Some(NAMESPACE), "acme").await.is_none()
                    && w.consumer_get(&crds(), None, WIDGETS).await.is_none()
            }
            .boxed()
        })
        .await;
    assert!(
        world.consumer_get(&widgets(), Some("default"), "w1").await.is_none(),
        "the instances went with their CRD"
    );
    // Nothing is re-created afterwards.
    world.steps_for(10).await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_binding_connection_secret_converges() {
    the_bundle_deleted_in([Piece::Binding, Piece::Connection, Piece::Secret], 111).await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_binding_secret_connection_converges() {
    the_bundle_deleted_in([Piece::Binding, Piece::Secret, Piece::Connection], 112).await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_connection_binding_secret_converges() {
    the_bundle_deleted_in([Piece::Connection, Piece::Binding, Piece::Secret], 113).await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_connection_secret_binding_converges() {
    the_bundle_deleted_in([Piece::Connection, Piece::Secret, Piece::Binding], 114).await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_secret_binding_connection_converges() {
    the_bundle_deleted_in([Piece::Secret, Piece::Binding, Piece::Connection], 115).await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_secret_connection_binding_converges() {
    the_bundle_deleted_in([Piece::Secret, Piece::Connection, Piece::Binding], 116).await;
}
