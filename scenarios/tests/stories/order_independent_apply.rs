//! Story of contract §1: the bundle's three objects applied in every order, with the konnector
//! running between them, converge on the same Ready, pinned, engaged Connection and a Ready
//! ClusterBinding; a missing piece
//! is a condition that resolves, never a failure, and nothing is deleted along the way.

use futures::FutureExt;
use kbind_api::consts::{condition, reason};
use kbind_api::{Connection, conditions};
use kbind_cluster::ClusterClientExt;
use kbind_scenarios::{ProviderOpts, World, bundle, seed_from_env};
use rand::{Rng, SeedableRng};

/// Every order of three items.
const ORDERS: [[usize; 3]; 6] = [[0, 1, 2], [0, 2, 1], [1, 0, 2], [1, 2, 0], [2, 0, 1], [2, 1, 0]];
const KINDS: [&str; 3] = ["Secret", "Connection", "ClusterBinding"];

fn is_ready(conn: &Connection) -> bool {
    conn.status
        .as_ref()
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

async fn apply_in_order(order: [usize; 3], seed: u64) {
    let names: Vec<&str> = order.iter().map(|i| KINDS[*i]).collect();
    let story = format!("bundle_applied_in_order_{}", names.join("_"));
    let mut world = World::builder()
        .seed(seed)
        .story(&story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world
        .install_provider_crd("acme", kbind_scenarios::apis::widgets_crd())
        .await;
    let cred = world.mint_admin_token("acme");
    let objects = bundle::bundle("acme", "kbind", &world.kubeconfig_for(&cred), &["widgets.example.org"]);
    world.start_konnector();
    let mut rng = rand_chacha::ChaCha8Rng::seed_from_u64(seed);
    let mut applied = Vec::new();
    for i in order {
        world.apply_object(objects[i].clone()).await;
        applied.push(KINDS[i]);
        // The konnector sees each partial state for a while (a seeded number of steps).
        let pause = rng.random_range(0..20);
        world.steps_for(pause).await;
        if applied.contains(&"Secret") {
            continue;
        }
        // A Connection before its Secret is not Ready, and its SecretValid says why.
        if let Some(conn) = world.connection("acme").await {
            assert!(!is_ready(&conn), "{story}: Ready without a Secret");
            let secret_valid = conn
                .status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, condition::SECRET_VALID));
            if let Some(c) = secret_valid {
                assert_eq!(
                    (c.status.as_str(), c.reason.as_str()),
                    ("False", reason::SECRET_NOT_FOUND),
                    "{story}"
                );
            }
        }
    }
    let conn = world.run_until_connection("acme", "Ready", 90, is_ready).await;
    let status = conn.status.unwrap_or_default();
    assert_eq!(
        status.remote_cluster_uid,
        Some(world.provider("acme").identity_uid()),
        "{story}: pinned to acme"
    );
    assert_eq!(
        status.local_cluster_uid,
        Some(world.consumer().identity_uid()),
        "{story}"
    );
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| {
            async move {
                let b: Option<kbind_api::ClusterBinding> = w
                    .consumer()
                    .admin_client()
                    .get_typed_opt(None, "acme")
                    .await
                    .ok()
                    .flatten();
                b.and_then(|b| b.status)
                    .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
            }
            .boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_bundle_converges_in_every_order() {
    let seed = seed_from_env(17);
    for order in ORDERS {
        apply_in_order(order, seed).await;
    }
}
