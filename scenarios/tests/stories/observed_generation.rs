//! contract §4 "status down": `observedGeneration` is translated through
//! `core.kbind.io/consumer-generation` to the consumer generation it answers, across a
//! konnector restart, and a status answering an older generation is not passed off as current
//! (§8.1, §8.2, §8.7 checked by the world after every step).

use crate::story;

use kbind_api::consts::annotation as kbind_annotation;
use kbind_cluster::{ClusterClient, DynamicObject, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use serde_json::{Value, json};
use story::*;

async fn provider_status(world: &World, status: Value) {
    world
        .provider("acme")
        .admin_client()
        .patch_status(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"status": status})),
            &PatchParams::default(),
        )
        .await
        .expect("the provider writes status");
}

async fn copy(world: &World) -> DynamicObject {
    world
        .provider_get("acme", &widgets(), Some("default"), "w1")
        .await
        .expect("the copy")
}

async fn consumer_generation(world: &World) -> i64 {
    world
        .consumer_get(&widgets(), Some("default"), "w1")
        .await
        .and_then(|o| o.metadata.generation)
        .expect("the consumer generation")
}

#[tokio::test(start_paused = true)]
async fn observed_generation_is_translated_across_a_konnector_restart() {
    let (mut world, _) = bound_world("observed_generation_is_translated_across_a_konnector_restart", 701).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    // Provider drift, reverted, moves the provider's generation ahead of the consumer's.
    patch_copy(&world, "acme", "default", "w1", json!({"spec": {"size": 50}})).await;
    world
        .run_until_async(
            "the drift is reverted",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(1)),
        )
        .await;
    let provider_generation = copy(&world).await.metadata.generation.expect("a generation");
    let consumer = consumer_generation(&world).await;
    assert_ne!(provider_generation, consumer, "the two generations differ");

    world.restart_konnector();
    provider_status(
        &world,
        json!({"phase": "Ready", "observedGeneration": provider_generation,
               "conditions": [{"type": "Ready", "status": "True", "observedGeneration": provider_generation}]}),
    )
    .await;
    world
        .run_until_async(
            "the status comes down after the restart",
            120,
            widget_has("default", "w1", "/status/phase", json!("Ready")),
        )
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(at(&mine, "/status/observedGeneration"), Some(json!(consumer)));
    assert_eq!(
        at(&mine, "/status/conditions/0/observedGeneration"),
        Some(json!(consumer))
    );

    // A spec change after the restart is answered with the new consumer generation.
    patch_widget(&world, "default", "w1", json!({"spec": {"size": 2}})).await;
    world
        .run_until_async(
            "the update goes up",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(2)),
        )
        .await;
    let answered = copy(&world).await;
    let consumer = consumer_generation(&world).await;
    assert_eq!(
        annotation(&Some(answered.clone()), kbind_annotation::CONSUMER_GENERATION),
        Some(consumer.to_string())
    );
    provider_status(
        &world,
        json!({"phase": "Updated", "observedGeneration": answered.metadata.generation}),
    )
    .await;
    world
        .run_until_async(
            "the new answer comes down",
            60,
            widget_has("default", "w1", "/status/observedGeneration", json!(consumer)),
        )
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_status_answering_an_older_generation_is_not_copied_as_current() {
    let (mut world, _) = bound_world("a_status_answering_an_older_generation_is_not_copied_as_current", 702).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    let first = copy(&world).await.metadata.generation.expect("a generation");
    provider_status(&world, json!({"phase": "Ready", "observedGeneration": first})).await;
    world
        .run_until_async(
            "the first answer comes down",
            60,
            widget_has("default", "w1", "/status/phase", json!("Ready")),
        )
        .await;
    let answered = consumer_generation(&world).await;

    patch_widget(&world, "default", "w1", json!({"spec": {"size": 2}})).await;
    world
        .run_until_async(
            "the update goes up",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(2)),
        )
        .await;
    // The provider's controller still reports on the previous generation.
    provider_status(&world, json!({"phase": "Reconciling", "observedGeneration": first})).await;
    world.steps_for(20).await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&mine, "/status/observedGeneration"),
        Some(json!(answered)),
        "an old answer does not claim the new generation"
    );
    assert_eq!(
        at(&mine, "/status/phase"),
        Some(json!("Ready")),
        "the old answer is held back"
    );

    let current = copy(&world).await.metadata.generation.expect("a generation");
    provider_status(&world, json!({"phase": "Ready", "observedGeneration": current})).await;
    let now = consumer_generation(&world).await;
    world
        .run_until_async(
            "the current answer comes down",
            60,
            widget_has("default", "w1", "/status/observedGeneration", json!(now)),
        )
        .await;
}
