//! contract §4 "provider-side changes": an API that stops being exported (label removed, CRD
//! deleted) stops its syncer with a per-API `APINotExported` condition, and nothing on the
//! consumer is deleted because of it (§8.1 is also checked by the world after every step).

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{label as kbind_label, reason};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use serde_json::json;
use story::*;

/// The consumer CRD, w1 and its finalizer are all still there, untouched.
/// A world with widget `default/w1` synced to `acme`, and the consumer CRD's resourceVersion.
async fn synced_world(story: &str, seed: u64) -> (World, Option<String>) {
    let (mut world, _) = bound_world(story, seed).await;
    create_widget(&world, "default", "w1", json!({"size": 3})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    let crd_rv = world
        .consumer_get(&crds(), None, WIDGETS)
        .await
        .and_then(|c| c.metadata.resource_version);
    (world, crd_rv)
}

/// Sets (or with `null` removes) the exported label of the provider's widgets CRD.
async fn set_exported_label(world: &World, value: serde_json::Value, what: &str) {
    world
        .provider("acme")
        .admin_client()
        .patch(
            &crds(),
            None,
            WIDGETS,
            &Patch::Merge(json!({"metadata": {"labels": {kbind_label::EXPORTED: value}}})),
            &PatchParams::default(),
        )
        .await
        .expect(what);
}

async fn consumer_side_intact(world: &World, crd_rv: &Option<String>) {
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    assert!(crd.is_some(), "the consumer CRD stays");
    assert_eq!(
        crd.and_then(|c| c.metadata.resource_version),
        *crd_rv,
        "the consumer CRD is not rewritten"
    );
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    let mine = mine.expect("the consumer object stays");
    assert!(mine.metadata.deletion_timestamp.is_none());
    assert_eq!(at(&Some(mine), "/spec/size"), Some(json!(3)));
}

/// After the API stopped being exported: a new consumer object and a spec change go nowhere.
async fn syncing_has_stopped(world: &mut World) {
    let provider_writes =
        provider_widget_writes(world, "acme", "patch") + provider_widget_writes(world, "acme", "create");
    create_widget(world, "default", "w2", json!({"size": 1})).await;
    world.steps_for(30).await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w2")
            .await
            .is_none(),
        "nothing is synced once the API is not exported"
    );
    assert_eq!(
        provider_widget_writes(world, "acme", "patch") + provider_widget_writes(world, "acme", "create"),
        provider_writes,
        "no widget writes reach the provider"
    );
}

#[tokio::test(start_paused = true)]
async fn removing_the_exported_label_stops_syncing_and_deletes_nothing() {
    let (mut world, crd_rv) = synced_world("removing_the_exported_label_stops_syncing_and_deletes_nothing", 501).await;

    set_exported_label(&world, json!(null), "removing the exported label").await;
    world
        .run_until_async(
            "the binding reports APINotExported",
            150,
            api_reason_is("acme", WIDGETS, reason::API_NOT_EXPORTED),
        )
        .await;
    syncing_has_stopped(&mut world).await;
    consumer_side_intact(&world, &crd_rv).await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_some(),
        "the provider copy is not deleted either"
    );

    // Exported again: syncing resumes where it stopped.
    set_exported_label(&world, json!("true"), "labelling the CRD again").await;
    wait_for_copy(&mut world, "acme", "default", "w2").await;
}

#[tokio::test(start_paused = true)]
async fn deleting_the_provider_crd_stops_syncing_and_deletes_nothing() {
    let (mut world, crd_rv) = synced_world("deleting_the_provider_crd_stops_syncing_and_deletes_nothing", 502).await;

    world
        .provider("acme")
        .admin_client()
        .delete(&crds(), None, WIDGETS, &Default::default())
        .await
        .expect("deleting the provider CRD");
    world
        .run_until_async(
            "the binding reports APINotExported",
            150,
            api_reason_is("acme", WIDGETS, reason::API_NOT_EXPORTED),
        )
        .await;
    world
        .run_until_async("the provider CRD is gone", 60, |w| {
            async move { w.provider_get("acme", &crds(), None, WIDGETS).await.is_none() }.boxed()
        })
        .await;
    syncing_has_stopped(&mut world).await;
    consumer_side_intact(&world, &crd_rv).await;
}
