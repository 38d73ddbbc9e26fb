//! With a resync (rediscovery) interval of "forever", every status check still passes: changes
//! travel through watches, and the slow resync is only a backstop (contract §4 "reads and
//! events"). Also proves a huge `--resync` is accepted without overflowing a timer.

use std::time::Duration;

use futures::FutureExt;
use kbind_api::consts::condition;
use kbind_api::{ClusterBinding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use kbind_engine::context::EngineConfig;
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

/// A century: longer than any run, short of overflowing an `Instant`.
const FOREVER: Duration = Duration::from_secs(100 * 365 * 24 * 3600);
/// Watch-driven changes arrive within a few steps; a resync would take a century.
const PROMPTLY: u64 = 15;

fn at(obj: &Option<DynamicObject>, pointer: &str) -> Option<Value> {
    obj.as_ref().and_then(|o| o.data.pointer(pointer).cloned())
}

async fn binding_ready(world: &World) -> bool {
    let b: Option<ClusterBinding> = world
        .consumer()
        .admin_client()
        .get_typed_opt(None, "acme")
        .await
        .ok()
        .flatten();
    b.and_then(|b| b.status)
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

async fn provider_status(world: &World, phase: &str) {
    world
        .provider("acme")
        .admin_client()
        .patch_status(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"status": {"phase": phase}})),
            &PatchParams::default(),
        )
        .await
        .expect("the provider reports status");
}

async fn consumer_phase_is(world: &mut World, phase: &'static str) {
    world
        .run_until_async(&format!("status {phase} comes down"), PROMPTLY, move |w| {
            async move {
                at(
                    &w.consumer_get(&widgets(), Some("default"), "w1").await,
                    "/status/phase",
                ) == Some(json!(phase))
            }
            .boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn with_a_resync_of_forever_every_change_still_arrives_promptly() {
    let config = EngineConfig {
        rediscovery_interval: FOREVER,
        ..EngineConfig::default()
    };
    let mut world = World::builder()
        .seed(seed_from_env(41))
        .story("with_a_resync_of_forever_every_change_still_arrives_promptly")
        .provider("acme", ProviderOpts::default())
        .engine_config(config)
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_konnector();
    world
        .run_until_async("the binding is Ready", 120, |w| binding_ready(w).boxed())
        .await;
    world
        .consumer()
        .admin_client()
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w1", json!({"size": 1})),
            &Default::default(),
        )
        .await
        .expect("creating a widget");
    world
        .run_until_async("the copy arrives", PROMPTLY, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("default"), "w1")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;
    provider_status(&world, "Provisioning").await;
    consumer_phase_is(&mut world, "Provisioning").await;

    // Ten quiet minutes, then changes on both sides still travel at once.
    world.steps_for(600).await;
    provider_status(&world, "Ready").await;
    consumer_phase_is(&mut world, "Ready").await;
    world
        .consumer()
        .admin_client()
        .patch(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"spec": {"size": 9}})),
            &PatchParams::default(),
        )
        .await
        .expect("updating the widget");
    world
        .run_until_async("the update arrives", PROMPTLY, |w| {
            async move {
                at(
                    &w.provider_get("acme", &widgets(), Some("default"), "w1").await,
                    "/spec/size",
                ) == Some(json!(9))
            }
            .boxed()
        })
        .await;
    assert!(binding_ready(&world).await, "the binding stays Ready");
}
