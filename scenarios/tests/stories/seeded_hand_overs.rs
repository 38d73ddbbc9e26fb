//! The randomized hand-over property (contract §4 "unbind", §8.8): for many seeds, a random
//! sequence of creating and deleting ClusterBindings and Bindings of one API across several
//! namespaces (the Connection allows Bindings everywhere) never deletes or re-creates a provider
//! copy while some binding serves its namespace, and everything converges at the end.
//!
//! `KBIND_SEEDS=N` runs N seeds (default 20); `KBIND_SEED=S` replays seed S. A failure names the
//! seed, the step and the action sequence so far. Most of a seed's cost is the world's set-up
//! and its per-step invariant checks, not this schedule.

use std::collections::{BTreeMap, BTreeSet};

use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::binding_kit::*;
use crate::story::*;

const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const ACTIONS: usize = 8;
/// Steps a created binding gets to be seen (its first status) before the story fails.
const SEEN_WITHIN: u64 = 20;

/// One binding of the pool: `None` namespace for a ClusterBinding.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    namespace: Option<&'static str>,
    name: &'static str,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace {
            None => write!(f, "ClusterBinding/{}", self.name),
            Some(ns) => write!(f, "Binding/{ns}/{}", self.name),
        }
    }
}

fn pool() -> Vec<Slot> {
    let mut slots = vec![
        Slot {
            namespace: None,
            name: "acme",
        },
        Slot {
            namespace: None,
            name: "acme-2",
        },
    ];
    for ns in NAMESPACES {
        for name in ["w1", "w2"] {
            slots.push(Slot {
                namespace: Some(ns),
                name,
            });
        }
    }
    slots
}

/// The model: which slots are live (created, seen by the konnector, not deleted).
struct Model {
    live: BTreeSet<Slot>,
    /// Copy UIDs recorded while their namespace is served.
    uids: BTreeMap<&'static str, String>,
    history: Vec<String>,
    seed: u64,
}

impl Model {
    fn served(&self, ns: &str) -> bool {
        self.live.iter().any(|s| s.namespace.is_none_or(|n| n == ns))
    }

    fn fail(&self, world: &World, what: String) -> ! {
        panic!(
            "seed {} step {}: {what}\nreproduce: KBIND_SEED={} cargo test -p kbind-scenarios --test stories seeded_hand_overs\nactions: {:?}",
            self.seed,
            world.steps(),
            self.seed,
            self.history
        )
    }

    /// Steps once, then checks the property: a served namespace keeps its copy and its UID.
    async fn step(&mut self, world: &mut World) {
        world.step().await;
        for ns in NAMESPACES {
            if !self.served(ns) {
                // Nobody serves it: it may be drained.
                self.uids.remove(ns);
                continue;
            }
            let uid = copy_uid(world, ns, "w").await;
            match (self.uids.get(ns), uid) {
                (Some(before), Some(now)) if *before != now => self.fail(
                    world,
                    format!("the copy in {ns} was re-created while served ({before} → {now})"),
                ),
                (Some(before), None) => {
                    self.fail(world, format!("the copy in {ns} ({before}) was deleted while served"))
                }
                (None, Some(now)) if adopted(world, ns).await => {
                    self.uids.insert(ns, now);
                }
                _ => {}
            }
        }
    }
}

/// Whether a syncer has taken widget `ns/w` (its finalizer is on), so its copy is current.
async fn adopted(world: &World, ns: &str) -> bool {
    widget_finalizers(world, ns, "w").await.is_some_and(|f| !f.is_empty())
}

async fn create_slot(world: &World, slot: &Slot) {
    match slot.namespace {
        Some(ns) => create_binding(world, ns, slot.name, &[WIDGETS]).await,
        None => create_cluster_binding(world, slot.name).await,
    }
}

/// The slot as the consumer stores it: `Some(has_status, deleting)`, `None` when gone.
async fn slot_state(world: &World, slot: &Slot) -> Option<(bool, bool)> {
    let res = if slot.namespace.is_some() {
        bindings()
    } else {
        cluster_bindings()
    };
    let obj = world.consumer_get(&res, slot.namespace, slot.name).await?;
    let seen = obj
        .data
        .pointer("/status/conditions")
        .is_some_and(|c| c.as_array().is_some_and(|a| !a.is_empty()));
    Some((seen, obj.metadata.deletion_timestamp.is_some()))
}

async fn run_schedule(seed: u64) {
    let story = "seeded_hand_overs_keep_every_served_copy";
    let (mut world, _) = bound_world_with(story, seed, |objects| allow_binding_namespaces(objects, "*")).await;
    for ns in NAMESPACES {
        create_widget(&world, ns, "w", json!({"size": 1})).await;
    }
    let mut model = Model {
        live: BTreeSet::from([Slot {
            namespace: None,
            name: "acme",
        }]),
        uids: BTreeMap::new(),
        history: Vec::new(),
        seed,
    };
    let slots = pool();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x4a4d_0fe5);
    for _ in 0..ACTIONS {
        let slot = slots[rng.random_range(0..slots.len())].clone();
        match slot_state(&world, &slot).await {
            None => {
                model.history.push(format!("create {slot}"));
                create_slot(&world, &slot).await;
                let mut waited = 0;
                while slot_state(&world, &slot).await.is_none_or(|(seen, _)| !seen) {
                    waited += 1;
                    if waited > SEEN_WITHIN {
                        model.fail(&world, format!("{slot} was never reconciled"));
                    }
                    model.step(&mut world).await;
                }
                model.live.insert(slot);
            }
            // Always keep one binding, so the API (and its CRD) stays in use.
            Some((_, false)) if model.live.len() > 1 && model.live.contains(&slot) => {
                model.history.push(format!("delete {slot}"));
                model.live.remove(&slot);
                let res = if slot.namespace.is_some() {
                    bindings()
                } else {
                    cluster_bindings()
                };
                world.delete_on_consumer(&res, slot.namespace, slot.name).await;
            }
            _ => model.history.push(format!("skip {slot}")),
        }
        for _ in 0..rng.random_range(1..4) {
            model.step(&mut world).await;
        }
    }

    // Convergence: every deleted binding is released, every served namespace has a current copy.
    for ns in NAMESPACES {
        let _ = patch_widget(&world, ns, "w", json!({"spec": {"size": 9}})).await;
    }
    for _ in 0..60 {
        let mut done = true;
        for slot in &slots {
            let state = slot_state(&world, slot).await;
            done &= if model.live.contains(slot) {
                state.is_some()
            } else {
                state.is_none()
            };
        }
        for ns in NAMESPACES.into_iter().filter(|ns| model.served(ns)) {
            let copy = world.provider_get("acme", &widgets(), Some(ns), "w").await;
            done &= at(&copy, "/spec/size") == Some(json!(9));
        }
        if done {
            return;
        }
        model.step(&mut world).await;
    }
    model.fail(&world, "the bindings and copies did not converge".into());
}

#[test]
fn seeded_hand_overs_keep_every_served_copy() {
    kbind_scenarios::world::for_each_seed(20, run_schedule);
}
