//! No needless writes and no needless reads: a konnector that restarts cleanly,
//! sees a metadata-only change of its credential Secret, or just idles, writes nothing to the
//! objects it syncs and asks the servers no more as it holds more objects; a real outage still
//! marks them `status-stale` (the guard that the quiet is not deafness).
//!
//! What the konnector may write on the consumer while nothing changes, stated once: Events
//! (`events`, `events.events.k8s.io`), its leader Lease (`leases.coordination.k8s.io`), and the
//! status of its Connections (the heartbeat). Nothing else, and never a synced object.

use std::collections::BTreeMap;

use futures::FutureExt;
use kbind_api::consts::annotation;
use kbind_cluster::{ClusterClient, ListParams, Patch, PatchParams};
use kbind_scenarios::apis::{widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::json;

use crate::story;

use story::{binding_ready, bound_world, create_widget, secrets};

/// What a quiet konnector may write on the consumer: (resource, subresource).
const ALLOWED_QUIET_WRITES: &[(&str, &str)] = &[
    ("events.", ""),
    ("events.events.k8s.io", ""),
    ("leases.coordination.k8s.io", ""),
    ("connections.kbind.io", "status"),
];

/// A bound world with `n` widgets in namespace `default`, every one copied to the provider and
/// settled (the syncers' first passes done).
async fn synced_world(name: &str, seed: u64, n: usize) -> World {
    let (mut world, _cred) = bound_world(name, seed).await;
    create_and_copy_widgets(&mut world, n, 600).await;
    world
}

/// Creates `n` widgets in namespace `default`, waits (at most `steps`) until every one is copied
/// to the provider, then lets every first pass (status down, the binding's report) finish.
async fn create_and_copy_widgets(world: &mut World, n: usize, steps: u64) {
    for i in 0..n {
        create_widget(world, "default", &format!("w{i:04}"), json!({"size": 1})).await;
    }
    let provider = world.provider("acme").admin_client();
    world
        .run_until_async(
            &format!("all {n} widgets are copied to the provider"),
            steps,
            move |_| {
                let provider = provider.clone();
                async move {
                    provider
                        .list(&widgets(), Some("default"), &ListParams::default())
                        .await
                        .is_ok_and(|l| l.items.len() == n)
                }
                .boxed()
            },
        )
        .await;
    world.steps_for(60).await;
}

/// The konnector's consumer writes since write-log position `from`, by (resource, subresource).
fn konnector_writes(world: &World, from: usize) -> BTreeMap<(String, String), usize> {
    writes_by(world, "konnector-0", from)
}

/// Replica `id`'s consumer writes since write-log position `from`, by (resource, subresource).
fn writes_by(world: &World, id: &str, from: usize) -> BTreeMap<(String, String), usize> {
    let user = world.replica_user(id);
    let mut counts = BTreeMap::new();
    for w in world.consumer().write_log().into_iter().skip(from) {
        if w.user == user {
            *counts.entry((w.resource, w.subresource)).or_insert(0) += 1;
        }
    }
    counts
}

/// Fails unless every write in `writes` is one a quiet konnector may make.
fn assert_quiet(world: &World, what: &str, writes: &BTreeMap<(String, String), usize>) {
    let loud: Vec<String> = writes
        .iter()
        .filter(|((res, sub), _)| !ALLOWED_QUIET_WRITES.contains(&(res.as_str(), sub.as_str())))
        .map(|((res, sub), n)| {
            format!(
                "{n} × {res}{}",
                if sub.is_empty() {
                    String::new()
                } else {
                    format!("/{sub}")
                }
            )
        })
        .collect();
    assert!(
        loud.is_empty(),
        "seed {}: {what} made needless consumer writes: {}",
        world.seed(),
        loud.join(", ")
    );
}

/// How many widgets on the consumer carry `status-stale`.
async fn stale_widgets(world: &World) -> usize {
    world
        .consumer()
        .admin_client()
        .list(&widgets(), Some("default"), &ListParams::default())
        .await
        .map(|l| {
            l.items
                .iter()
                .filter(|o| {
                    o.metadata
                        .annotations
                        .as_ref()
                        .is_some_and(|a| a.contains_key(annotation::STATUS_STALE))
                })
                .count()
        })
        .unwrap_or(0)
}

/// Waits until konnector-0 has engaged `acme` again and its binding is Ready.
async fn wait_engaged(world: &mut World) {
    world
        .run_until_async("the provider is engaged and the binding Ready", 120, |w| {
            async move { w.providers().get("acme").is_some() && binding_ready(w, "acme").await }.boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_clean_restart_of_a_konnector_with_a_thousand_synced_objects_writes_none_of_them() {
    let mut world = synced_world(
        "a_clean_restart_of_a_konnector_with_a_thousand_synced_objects_writes_none_of_them",
        131,
        1000,
    )
    .await;
    let from = world.consumer().write_log().len();
    world.restart_konnector();
    wait_engaged(&mut world).await;
    world.steps_for(120).await;
    let writes = konnector_writes(&world, from);
    assert_quiet(&world, "a clean restart", &writes);
    assert_eq!(
        stale_widgets(&world).await,
        0,
        "seed {}: no widget is marked",
        world.seed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_metadata_only_change_of_the_credential_secret_neither_disengages_nor_writes() {
    let mut world = synced_world(
        "a_metadata_only_change_of_the_credential_secret_neither_disengages_nor_writes",
        137,
        1000,
    )
    .await;
    let engaged_before = world.providers().get("acme").expect("the provider is engaged");
    let from = world.consumer().write_log().len();
    world
        .consumer()
        .admin_client()
        .patch(
            &secrets(),
            Some(kbind_scenarios::world::NAMESPACE),
            "acme",
            &Patch::Merge(json!({"metadata": {
                "labels": {"example.org/touched": "yes"},
                "annotations": {"example.org/note": "rotated nothing"},
            }})),
            &PatchParams::default(),
        )
        .await
        .expect("labelling the credential Secret");
    world.steps_for(120).await;
    let engaged_after = world.providers().get("acme").expect("the provider stays engaged");
    assert!(
        std::sync::Arc::ptr_eq(&engaged_before, &engaged_after),
        "seed {}: a metadata-only Secret change re-engaged the provider",
        world.seed()
    );
    let writes = konnector_writes(&world, from);
    assert_quiet(&world, "a metadata-only Secret change", &writes);
    assert_eq!(
        stale_widgets(&world).await,
        0,
        "seed {}: no widget is marked",
        world.seed()
    );
}

#[tokio::test(start_paused = true)]
async fn a_real_outage_still_marks_every_synced_object_stale_and_recovery_clears_it() {
    let n = 200;
    let mut world = synced_world(
        "a_real_outage_still_marks_every_synced_object_stale_and_recovery_clears_it",
        139,
        n,
    )
    .await;
    world.partition("acme");
    world
        .run_until_async("every widget is marked status-stale", 180, move |w| {
            async move { stale_widgets(w).await == n }.boxed()
        })
        .await;
    world.heal("acme");
    world
        .run_until_async("the marks go after recovery", 180, |w| {
            async move { stale_widgets(w).await == 0 }.boxed()
        })
        .await;
}

/// The konnector's requests on both clusters since positions `from` (consumer, provider), by
/// `"<cluster> <verb> <resource>"`; `per_object` keeps or drops the requests that name one
/// synced widget (the syncers' resync, counted by the second story below).
fn requests_since(world: &World, from: (usize, usize), per_object: bool) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    let logs = [
        ("consumer", world.consumer().request_log_from(from.0)),
        ("provider", world.provider("acme").request_log_from(from.1)),
    ];
    for (cluster, log) in logs {
        // The world's own reads (invariant checks) are the admin's, not the konnector's.
        for r in log.into_iter().filter(|r| r.user != "admin") {
            if !per_object && r.resource == "widgets.example.org" && !r.name.is_empty() {
                continue;
            }
            *counts
                .entry(format!("{cluster} {} {}", r.verb, r.resource))
                .or_insert(0) += 1;
        }
    }
    counts
}

fn positions(world: &World) -> (usize, usize) {
    (
        world.consumer().request_log().len(),
        world.provider("acme").request_log().len(),
    )
}

/// What ten idle minutes of a konnector holding `n` synced objects asked of both clusters.
struct Idle {
    seed: u64,
    engaged: BTreeMap<String, usize>,
    down: BTreeMap<String, usize>,
}

/// Ten idle minutes while engaged, then ten more while the provider is partitioned (counted
/// once every object was marked).
async fn idle_requests(n: usize, per_object: bool) -> Idle {
    let mut world = synced_world(&format!("idle_requests_do_not_grow_with_objects_{n}"), 149, n).await;
    let from = positions(&world);
    world.steps_for(600).await;
    let engaged = requests_since(&world, from, per_object);
    world.partition("acme");
    world
        .run_until_async("every widget is marked status-stale", 180, move |w| {
            async move { stale_widgets(w).await == n }.boxed()
        })
        .await;
    let from = positions(&world);
    world.steps_for(600).await;
    let down = requests_since(&world, from, per_object);
    Idle {
        seed: world.seed(),
        engaged,
        down,
    }
}

fn total(counts: &BTreeMap<String, usize>, filter: impl Fn(&str) -> bool) -> usize {
    counts.iter().filter(|(k, _)| filter(k)).map(|(_, n)| n).sum()
}

fn assert_flat(small: &Idle, large: &Idle) {
    let seed = small.seed;
    println!(
        "seed {seed}\nengaged, 100 objects: {:#?}\nengaged, 1000 objects: {:#?}",
        small.engaged, large.engaged
    );
    println!(
        "down, 100 objects: {:#?}\ndown, 1000 objects: {:#?}",
        small.down, large.down
    );
    assert!(
        flat(&small.engaged, &large.engaged),
        "seed {seed}: idle requests while engaged grow with the number of objects"
    );
    assert!(
        flat(&small.down, &large.down),
        "seed {seed}: idle requests while disengaged grow with the number of objects"
    );
}

/// Whether two request counts are the same but for jitter: every kind of request made by
/// both, each count within one of the other. Timers are jittered (a herd of konnectors must
/// not fire in step), and the two worlds draw their jitter in a different order, so a
/// ten-minute heartbeat may renew once more in one of them; growth with ten times the objects
/// is far more than one.
fn flat(small: &BTreeMap<String, usize>, large: &BTreeMap<String, usize>) -> bool {
    small.keys().eq(large.keys())
        && small
            .iter()
            .all(|(key, n)| large.get(key).is_some_and(|m| n.abs_diff(*m) <= 1))
}

#[tokio::test(start_paused = true)]
async fn ten_idle_minutes_of_bindings_and_connections_cost_the_same_with_a_hundred_or_a_thousand_objects() {
    let small = idle_requests(100, false).await;
    let large = idle_requests(1000, false).await;
    assert_flat(&small, &large);
    let seed = small.seed;
    // Healthy: no binding pass lists the instances (no stale sweep once swept, no namespaces
    // for related resources the binding does not have) and no related copies are listed.
    let engaged_lists = total(&large.engaged, |k| {
        k.starts_with("consumer list ")
            && ["widgets.example.org", "secrets.", "configmaps."]
                .iter()
                .any(|r| k.ends_with(r))
    });
    assert_eq!(
        engaged_lists, 0,
        "seed {seed}: healthy binding passes list instances or copies"
    );
    // A healthy binding is woken by changes, not a timer: its only passes are the resync
    // backstop (60 s in this world), each reading the API's consumer CRD once; the provider CRD
    // comes from its watch and is never read by a pass.
    let crd_reads = |cluster: &str| {
        large
            .engaged
            .get(&format!("{cluster} get customresourcedefinitions.apiextensions.k8s.io"))
            .copied()
            .unwrap_or(0)
    };
    assert_eq!(
        crd_reads("provider"),
        0,
        "seed {seed}: provider CRD reads in ten idle minutes (its watch holds it)"
    );
    assert!(
        crd_reads("consumer") <= 10,
        "seed {seed}: {} consumer CRD reads in ten idle minutes: more passes than the 60 s backstop",
        crd_reads("consumer")
    );
    // While disengaged the binding backs off to the resync interval (2, 4, … 256, 300 s): at
    // most a dozen passes, each listing the widgets once, in ten minutes, not one every 2 s.
    let widget_lists = total(&large.down, |k| k == "consumer list widgets.example.org");
    assert!(
        widget_lists <= 12,
        "seed {seed}: {widget_lists} consumer lists of widgets in ten disengaged minutes"
    );
}

#[tokio::test(start_paused = true)]
async fn ten_idle_minutes_cost_the_same_requests_with_a_hundred_or_a_thousand_objects() {
    let small = idle_requests(100, true).await;
    let large = idle_requests(1000, true).await;
    assert_flat(&small, &large);
}

#[tokio::test(start_paused = true)]
async fn one_watch_of_connections_and_of_secrets_and_one_provider_client_per_engagement() {
    let (mut world, _cred) = bound_world(
        "one_watch_of_connections_and_of_secrets_and_one_provider_client_per_engagement",
        151,
    )
    .await;
    let from = positions(&world);
    let connects = world.connector().connects("acme");
    world.restart_konnector();
    wait_engaged(&mut world).await;
    let engaged_at = positions(&world);
    world.steps_for(60).await;
    let user = world.replica_user("konnector-0");
    let consumer = world.consumer().request_log_from(from.0);
    let count = |verb: &str, plural: &str| {
        consumer
            .iter()
            .filter(|r| r.user == user && r.verb == verb && r.resource.split('.').next() == Some(plural))
            .count()
    };
    let seed = world.seed();
    println!(
        "seed {seed}: consumer watches: connections {}, secrets {}; lists: connections {}, secrets {}",
        count("watch", "connections"),
        count("watch", "secrets"),
        count("list", "connections"),
        count("list", "secrets")
    );
    assert_eq!(
        count("watch", "connections"),
        1,
        "seed {seed}: one watch of Connections"
    );
    assert_eq!(count("watch", "secrets"), 1, "seed {seed}: one watch of Secrets");
    assert_eq!(
        world.connector().connects("acme") - connects,
        1,
        "seed {seed}: one provider client for the Connection reconciler and the engager"
    );
    let identity_reads = |log: Vec<fakeapi::faults::RequestRecord>| {
        log.iter()
            .filter(|r| r.verb == "get" && r.resource.starts_with("namespaces.") && r.name == "kube-system")
            .count()
    };
    let before_engaged = identity_reads(
        world
            .provider("acme")
            .request_log_from(from.1)
            .into_iter()
            .take(engaged_at.1 - from.1)
            .collect(),
    );
    println!("seed {seed}: provider identity reads until engaged: {before_engaged}");
    assert_eq!(
        before_engaged, 1,
        "seed {seed}: one identity read until the provider is engaged (the engager reads none of its own)"
    );
}

#[tokio::test(start_paused = true)]
async fn a_leader_hand_over_writes_none_of_the_synced_objects() {
    let n = 200;
    let mut world = World::builder()
        .seed(seed_from_env(157))
        .story("a_leader_hand_over_writes_none_of_the_synced_objects")
        .provider("acme", ProviderOpts::default())
        .leader_election(true)
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_replica("a");
    world
        .run_until_async("a leads and the binding is Ready", 120, |w| {
            async move { w.is_leading("a") && binding_ready(w, "acme").await }.boxed()
        })
        .await;
    create_and_copy_widgets(&mut world, n, 300).await;
    world.start_replica("b");
    world.steps_for(10).await;
    let from = world.consumer().write_log().len();
    world.crash_replica("a");
    world
        .run_until_async("b leads and has engaged the provider", 120, |w| {
            async move { w.is_leading("b") && w.registry_of("b").get("acme").is_some() }.boxed()
        })
        .await;
    world.steps_for(120).await;
    let writes = writes_by(&world, "b", from);
    assert_quiet(&world, "a leader hand-over", &writes);
    assert_eq!(
        stale_widgets(&world).await,
        0,
        "seed {}: no widget is marked",
        world.seed()
    );
}

/// The request budget of a new object: once the provider cache has listed, the copy
/// costs the provider one write, an apply that can only create (it carries a resourceVersion
/// no object has), and no classifying read, since the cache already says nothing is there. The
/// copy carries only our Apply entry, so no apply hands the fields over and no patch drops a
/// create's entry (three writes before). A copy that appeared unseen still meets a refused
/// first write (`write_races.rs`).
#[tokio::test(start_paused = true)]
async fn a_new_object_costs_the_provider_one_write_and_no_read() {
    let mut world = synced_world("a_new_object_costs_the_provider_one_write_and_no_read", 151, 1).await;
    let seed = world.seed();
    let from = positions(&world);
    create_widget(&world, "default", "newcomer", json!({"size": 2})).await;
    let copy = story::wait_for_copy(&mut world, "acme", "default", "newcomer").await;
    world.steps_for(30).await;
    assert_eq!(
        konnector_requests_on(&world.provider("acme").request_log_from(from.1), "newcomer"),
        BTreeMap::from([("patch".to_string(), 1)]),
        "seed {seed}: the konnector's provider requests on a new object's copy"
    );
    let entries: Vec<_> = copy
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| (e.manager.clone(), e.operation.clone()))
        .collect();
    assert_eq!(
        entries,
        vec![(Some("kbind-konnector".to_string()), Some("Apply".to_string()))],
        "seed {seed}: the new copy's field owners"
    );
}

/// The konnector's requests on one object's copy (provider) or the object itself (consumer)
/// since `from`, by verb.
fn konnector_requests_on(log: &[fakeapi::RequestRecord], name: &str) -> BTreeMap<String, usize> {
    let mut counts = BTreeMap::new();
    for r in log
        .iter()
        .filter(|r| r.user != "admin" && r.resource == "widgets.example.org" && r.name == name)
    {
        *counts.entry(r.verb.clone()).or_insert(0) += 1;
    }
    counts
}

/// The request budget of a spec change: the copy is known to be ours (the cache holds
/// it, or our own latest write), so the change costs the provider one apply, guarded by that
/// copy's resourceVersion, and no read; a copy that changed unseen answers the guard with a
/// Conflict and is read then (`write_races.rs`).
#[tokio::test(start_paused = true)]
async fn a_spec_change_costs_the_provider_one_apply_and_no_read() {
    let mut world = synced_world("a_spec_change_costs_the_provider_one_apply_and_no_read", 152, 1).await;
    let seed = world.seed();
    let from = positions(&world);
    story::patch_widget(&world, "default", "w0000", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the change reaches the copy",
            120,
            story::copy_has("acme", "default", "w0000", "/spec/size", json!(7)),
        )
        .await;
    world.steps_for(30).await;
    assert_eq!(
        konnector_requests_on(&world.provider("acme").request_log_from(from.1), "w0000"),
        BTreeMap::from([("patch".to_string(), 1)]),
        "seed {seed}: the konnector's provider requests for one spec change"
    );
}

/// The request budget on the consumer: a new object whose provider controller answers
/// at once costs the consumer two writes, the finalizer and one status. (The race that wrote
/// the status twice, a reconcile started by our finalizer patch's echo reading a store without
/// our status, depends on timing this world does not reproduce; the unit test
/// `our_status_is_in_flight_until_its_echo_or_someone_elses_write` pins its fix.)
#[tokio::test(start_paused = true)]
async fn a_new_object_and_its_status_cost_the_consumer_two_writes() {
    let mut world = synced_world("a_new_object_and_its_status_cost_the_consumer_two_writes", 153, 1).await;
    let seed = world.seed();
    let from = positions(&world);
    create_widget(&world, "default", "newcomer", json!({"size": 2})).await;
    story::wait_for_copy(&mut world, "acme", "default", "newcomer").await;
    story::patch_copy_status(&world, "acme", "default", "newcomer", json!({"phase": "Ready"})).await;
    world
        .run_until_async(
            "the status comes down",
            120,
            story::widget_has("default", "newcomer", "/status/phase", json!("Ready")),
        )
        .await;
    world.steps_for(30).await;
    let on_consumer = konnector_requests_on(&world.consumer().request_log_from(from.0), "newcomer");
    assert_eq!(
        on_consumer.get("patch"),
        Some(&2),
        "seed {seed}: the konnector's consumer writes on a new object with a status (finalizer, status): {on_consumer:?}"
    );
}
