//! The randomized property with object churn: for many seeds, a random schedule of creates,
//! spec updates, deletes, provider status writes, partitions, heals, konnector restarts and
//! hand-overs of the widgets API between the ClusterBinding and a Binding in `default` keeps
//! the §8 invariants after every step (the world checks 1, 2, 3, 5, 7, 8 and 9), and once the faults
//! stop everything converges (§8.4): every live consumer widget has its copy on the provider
//! with the latest spec, every provider status is on the consumer, and no copy of a deleted
//! widget is left.
//!
//! `KBIND_SEEDS=N` runs N seeds (default 200; CI runs 1,000, `.ci/run`); `KBIND_SEED=S` runs only seed S.

use crate::story;

use std::collections::BTreeMap;

use futures::FutureExt;
use kbind_api::consts::annotation;
use kbind_cluster::{ApiResource, ClusterClient, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::{widget, widgets};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

const STEPS: u64 = 25;
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// What the consumer should end with: name → size (absent: deleted or never created).
type Expected = BTreeMap<String, i64>;

async fn churn(world: &mut World, rng: &mut ChaCha8Rng, expected: &mut Expected, step: u64) {
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let consumer = world.consumer().admin_client();
    match rng.random_range(0..10) {
        0..=2 if !expected.contains_key(name) => {
            let size = i64::from(rng.random_range(1..100u8));
            if consumer
                .create(
                    &widgets(),
                    Some("default"),
                    &widget("default", name, json!({"size": size})),
                    &Default::default(),
                )
                .await
                .is_ok()
            {
                expected.insert(name.to_string(), size);
            }
        }
        3..=4 if expected.contains_key(name) => {
            let size = i64::from(rng.random_range(1..100u8));
            let patch = Patch::Merge(json!({"spec": {"size": size}}));
            if consumer
                .patch(&widgets(), Some("default"), name, &patch, &PatchParams::default())
                .await
                .is_ok()
            {
                expected.insert(name.to_string(), size);
            }
        }
        5 if expected.contains_key(name) => {
            world.delete_on_consumer(&widgets(), Some("default"), name).await;
            expected.remove(name);
        }
        6 => {
            // The provider's controller reports on whatever copy it has.
            let status = Patch::Merge(json!({"status": {"phase": format!("seen-{step}")}}));
            let _ = world
                .provider("acme")
                .admin_client()
                .patch_status(&widgets(), Some("default"), name, &status, &PatchParams::default())
                .await;
        }
        7 => world.partition("acme"),
        8 => world.heal("acme"),
        9 if rng.random_bool(0.3) => world.restart_konnector(),
        _ => {}
    }
}

/// The Binding resource.
fn bindings() -> ApiResource {
    ApiResource::erase::<kbind_api::Binding>(&())
}

/// Hands the widgets API over between ClusterBinding `acme` and Binding `default/acme` (every
/// widget lives in `default`, so either serves them all): the new binding is created, then the
/// old one deleted at once, before the new one has done anything. Invariant 8 holds the
/// konnector to keeping every copy (with its UID) and the consumer CRD through it.
async fn hand_over(world: &mut World) {
    let consumer = world.consumer().admin_client();
    let cluster_binding = world.consumer_get(&story::cluster_bindings(), None, "acme").await;
    let binding = world.consumer_get(&bindings(), Some("default"), "acme").await;
    let spec = json!({"connectionRef": {"name": "acme"}, "apis": [{"name": story::WIDGETS}]});
    match (cluster_binding, binding) {
        (Some(_), None) => {
            let obj = json!({
                "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
                "metadata": {"name": "acme", "namespace": "default"}, "spec": spec,
            });
            if consumer
                .create(&bindings(), Some("default"), &object(obj), &Default::default())
                .await
                .is_ok()
            {
                world.delete_on_consumer(&story::cluster_bindings(), None, "acme").await;
            }
        }
        (None, Some(_)) => {
            let obj = json!({
                "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
                "metadata": {"name": "acme"}, "spec": spec,
            });
            if consumer
                .create(&story::cluster_bindings(), None, &object(obj), &Default::default())
                .await
                .is_ok()
            {
                world.delete_on_consumer(&bindings(), Some("default"), "acme").await;
            }
        }
        // The previous hand-over is still draining: wait for it.
        _ => {}
    }
}

fn object(value: serde_json::Value) -> kbind_cluster::DynamicObject {
    serde_json::from_value(value).expect("a binding is a valid object")
}

async fn converged(world: &World, expected: &Expected) -> bool {
    for name in NAMES {
        let copy = world.provider_get("acme", &widgets(), Some("default"), name).await;
        let mine = world.consumer_get(&widgets(), Some("default"), name).await;
        match expected.get(name) {
            Some(size) => {
                let copy_size = copy
                    .as_ref()
                    .and_then(|c| c.data.pointer("/spec/size"))
                    .and_then(|v| v.as_i64());
                if copy_size != Some(*size) {
                    return false;
                }
                // A provider status, if any, is on the consumer.
                let provider_phase = copy.as_ref().and_then(|c| c.data.pointer("/status/phase")).cloned();
                let consumer_phase = mine.as_ref().and_then(|c| c.data.pointer("/status/phase")).cloned();
                if provider_phase.is_some() && provider_phase != consumer_phase {
                    return false;
                }
            }
            None => {
                // A deleted widget has left nothing of ours behind on either side.
                if mine.is_some() || copy.is_some() {
                    return false;
                }
            }
        }
    }
    true
}

async fn run_schedule(seed: u64) {
    // Bindings in `default` may use the Connection, so the API can be handed over.
    let (mut world, _cred) = story::bound_world_with("seeded_sync_schedules_converge", seed, |objects| {
        objects[1]["metadata"]["annotations"] = json!({annotation::BINDING_NAMESPACES: "default"});
    })
    .await;
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_5cc5);
    let mut expected = Expected::new();
    for step in 0..STEPS {
        churn(&mut world, &mut rng, &mut expected, step).await;
        if rng.random_bool(0.1) {
            hand_over(&mut world).await;
        }
        world.step().await;
    }
    world.heal("acme");
    let expected_now = expected.clone();
    world
        .run_until_async("every change converged after the faults stopped", 400, move |w| {
            let expected = expected_now.clone();
            async move { converged(w, &expected).await }.boxed()
        })
        .await;
}

#[test]
fn seeded_sync_schedules_converge_and_keep_the_invariants() {
    kbind_scenarios::world::for_each_seed(200, run_schedule);
}
