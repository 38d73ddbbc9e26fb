//! The randomized property with object churn: for many seeds, a random schedule of creates,
//! spec updates, deletes, provider status writes, partitions, heals, konnector restarts and
//! hand-overs of the widgets API between the ClusterBinding and a Binding in `default` keeps
//! the §8 invariants after every step (the world checks 1, 2, 3, 5, 7, 8 and 9), and once the faults
//! stop everything converges (§8.4): every live consumer widget has its copy on the provider
//! with the latest spec, every provider status is on the consumer, and no copy of a deleted
//! widget is left. Widgets name a consumer Secret at `spec.config.secretName` (set, changed and
//! dropped as they churn) that a related rule copies up by reference: once converged, exactly
//! the Secrets the live widgets name have a copy on the provider.
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
/// The consumer Secrets widgets may name.
const SECRETS: [&str; 3] = ["pw-1", "pw-2", "pw-3"];

/// What the consumer should end with: name → (size, the Secret it names) (absent: deleted or
/// never created).
type Expected = BTreeMap<String, (i64, Option<String>)>;

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

/// A Secret to name, or none.
fn reference(rng: &mut ChaCha8Rng) -> Option<String> {
    let pick = rng.random_range(0..=SECRETS.len());
    SECRETS.get(pick).map(|s| s.to_string())
}

/// The binding spec of every binding of the property: widgets, and the Secrets they name.
fn binding_spec() -> serde_json::Value {
    json!({"connectionRef": {"name": "acme"}, "apis": [{"name": story::WIDGETS}],
        "relatedResources": [{"group": "", "resource": "secrets", "direction": "FromConsumer",
            "selector": {"references": [{"path": "spec.config.secretName"}]}}]})
}

async fn churn(world: &mut World, rng: &mut ChaCha8Rng, expected: &mut Expected, step: u64) {
    let name = NAMES[rng.random_range(0..NAMES.len())];
    let consumer = world.consumer().admin_client();
    match rng.random_range(0..10) {
        0..=2 if !expected.contains_key(name) => {
            let size = i64::from(rng.random_range(1..100u8));
            let named = reference(rng);
            if consumer
                .create(
                    &widgets(),
                    Some("default"),
                    &widget("default", name, json!({"size": size, "config": {"secretName": named}})),
                    &Default::default(),
                )
                .await
                .is_ok()
            {
                expected.insert(name.to_string(), (size, named));
            }
        }
        3..=4 if expected.contains_key(name) => {
            let size = i64::from(rng.random_range(1..100u8));
            // Half the updates also change (or drop) the Secret the widget names.
            let named = if rng.random_bool(0.5) {
                reference(rng)
            } else {
                expected.get(name).and_then(|(_, n)| n.clone())
            };
            let patch = Patch::Merge(json!({"spec": {"size": size, "config": {"secretName": named}}}));
            if consumer
                .patch(&widgets(), Some("default"), name, &patch, &PatchParams::default())
                .await
                .is_ok()
            {
                expected.insert(name.to_string(), (size, named));
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
    let spec = binding_spec();
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
            Some((size, _)) => {
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
    // Exactly the Secrets the live widgets name have a related copy on the provider.
    let named: std::collections::BTreeSet<&str> = expected.values().filter_map(|(_, n)| n.as_deref()).collect();
    for secret in SECRETS {
        let copy = world.provider_get("acme", &secrets(), Some("default"), secret).await;
        let copied = copy.is_some_and(|c| {
            c.metadata
                .annotations
                .is_some_and(|a| a.contains_key(annotation::RELATED_BINDING))
        });
        if copied != named.contains(secret) {
            return false;
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
    let consumer = world.consumer().admin_client();
    for secret in SECRETS {
        let body = object(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": "default"}, "stringData": {"password": secret}}));
        consumer
            .create(&secrets(), Some("default"), &body, &Default::default())
            .await
            .expect("creating a Secret to name");
    }
    consumer
        .patch(
            &story::cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": binding_spec()})),
            &PatchParams::default(),
        )
        .await
        .expect("adding the related rule");
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
