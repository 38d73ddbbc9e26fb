//! The randomized property: for many seeds, a random schedule of faults (partitions, heals,
//! provider replacement, Secret swaps, replica crashes, restarts and isolation) with a
//! syncer-like writer on every engaged provider keeps the §8 invariants after every step.
//!
//! `KBIND_SEEDS=N` runs N seeds (default 200; CI runs 1,000, `.ci/run`); `KBIND_SEED=S` runs
//! only seed S. The real Connection reconciler drives every transition (pinning, refusals,
//! heartbeat, Ready).

use crate::common;

use kbind_scenarios::{ProviderOpts, World};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

const STEPS: u64 = 30;
const PROVIDERS: [&str; 2] = ["acme", "kcp"];
const REPLICAS: [&str; 2] = ["a", "b"];

async fn run_schedule(seed: u64) {
    let mut world = World::builder()
        .seed(seed)
        .story("seeded_fault_schedules_keep_the_invariants")
        .provider("acme", ProviderOpts::default())
        .kcp_provider("kcp")
        .build()
        .await;
    let mut creds = Vec::new();
    for name in PROVIDERS {
        let cred = world.mint_admin_token(name);
        world.apply_bundle(name, &cred, &["widgets.example.org"]).await;
        creds.push(cred);
    }
    for id in REPLICAS {
        world.start_replica(id);
    }
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x5eed_fa17);
    let mut crashed = [false; 2];
    for step in 0..STEPS {
        let p = rng.random_range(0..PROVIDERS.len());
        let r = rng.random_range(0..REPLICAS.len());
        match rng.random_range(0..10) {
            0 => world.partition(PROVIDERS[p]),
            1 => world.heal(PROVIDERS[p]),
            2 if step > STEPS / 2 => world.replace_provider(PROVIDERS[p]),
            3 => world.swap_secret(PROVIDERS[p], &creds[p], Some(b"untrusted")).await,
            4 => world.swap_secret(PROVIDERS[p], &creds[p], None).await,
            5 if !crashed[r] => {
                world.crash_replica(REPLICAS[r]);
                crashed[r] = true;
            }
            6 if crashed[r] => {
                world.start_replica(REPLICAS[r]);
                crashed[r] = false;
            }
            7 => world.isolate_replica(REPLICAS[r], rng.random_bool(0.5)),
            _ => {}
        }
        // A syncer's write through every engaged provider of every replica.
        for id in REPLICAS {
            if crashed[REPLICAS.iter().position(|x| *x == id).unwrap_or(0)] {
                continue;
            }
            for name in PROVIDERS {
                if let Some(provider) = world.registry_of(id).get(name) {
                    let cm = common::configmap(&format!("probe-{id}-{step}"));
                    let _ = provider
                        .client
                        .create(&common::configmaps(), Some("default"), &cm, &Default::default())
                        .await;
                }
            }
        }
        world.step().await;
    }
    let leaders = REPLICAS.iter().filter(|id| world.is_leading(id)).count();
    assert!(leaders <= 1, "seed {seed}: two replicas lead at once");
}

#[test]
fn seeded_fault_schedules_keep_the_invariants() {
    kbind_scenarios::world::for_each_seed(200, run_schedule);
}
