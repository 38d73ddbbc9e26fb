//! contract §4 "reads and events": provider changes reach the syncer as events of the shared
//! provider cache, not by a periodic poll. With tokio's clock paused, time only moves when every
//! task waits on a timer, so "the change came down while the logical clock advanced less than a
//! second" means no once-a-second timer was needed to notice it.

#[path = "stories/story/mod.rs"]
mod story;

use std::time::Duration;

use futures::FutureExt;
use futures::future::BoxFuture;
use kbind_cluster::{ClusterClient, DeleteParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use serde_json::json;
use story::{at, bound_world, create_widget, wait_for_copy};

/// The interval of a once-a-second poll of the provider stores; a change noticed within less
/// logical time than this was not waiting for such a poll.
const OLD_POLL: Duration = Duration::from_secs(1);
/// How finely the story looks while it waits (logical time).
const LOOK_EVERY: Duration = Duration::from_millis(10);

/// Waits (in `LOOK_EVERY` slices of the paused clock, never a whole world step) until `done`
/// holds, and returns how much logical time that took; fails the story at `OLD_POLL`.
async fn logical_time_until(
    world: &World,
    what: &str,
    done: impl for<'a> Fn(&'a World) -> BoxFuture<'a, bool>,
) -> Duration {
    let start = tokio::time::Instant::now();
    loop {
        if done(world).await {
            return start.elapsed();
        }
        let elapsed = start.elapsed();
        assert!(
            elapsed < OLD_POLL,
            "seed {}: {what} took {elapsed:?} of logical time, not less than the old poll interval {OLD_POLL:?}",
            world.seed()
        );
        tokio::time::sleep(LOOK_EVERY).await;
    }
}

/// A world with `default/w1` synced to `acme` and every task settled.
async fn synced_world(story: &str, seed: u64) -> World {
    let (mut world, _cred) = bound_world(story, seed).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    world.steps_for(5).await;
    world
}

async fn invariants_hold(world: &World) {
    if let Some(violation) = world.check_invariants().await {
        world.fail(&violation);
    }
}

#[tokio::test(start_paused = true)]
async fn a_provider_status_change_comes_down_without_waiting_for_a_poll() {
    let mut world = synced_world("a_provider_status_change_comes_down_without_waiting_for_a_poll", 1301).await;
    for phase in ["Ready", "Degraded", "Ready again"] {
        story::patch_copy_status(&world, "acme", "default", "w1", json!({"phase": phase})).await;
        let took = logical_time_until(&world, &format!("status phase {phase:?} coming down"), |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w1").await;
                at(&obj, "/status/phase") == Some(json!(phase))
            }
            .boxed()
        })
        .await;
        tracing::info!(?took, phase, "status came down");
        invariants_hold(&world).await;
        // A whole step between changes: the next change starts at an arbitrary poll phase.
        world.step().await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_provider_copy_deleted_by_someone_else_is_noticed_without_waiting_for_a_poll() {
    let mut world = synced_world(
        "a_provider_copy_deleted_by_someone_else_is_noticed_without_waiting_for_a_poll",
        1302,
    )
    .await;
    let old = world
        .provider_get("acme", &widgets(), Some("default"), "w1")
        .await
        .expect("the copy is there");
    let old_uid = old.metadata.uid.clone();
    // The provider team deletes the copy; the consumer object still asks for it.
    world
        .provider("acme")
        .admin_client()
        .delete(&widgets(), Some("default"), "w1", &DeleteParams::default())
        .await
        .expect("the provider admin deletes the copy");
    let took = logical_time_until(&world, "the deleted copy being made again", |w| {
        let old_uid = old_uid.clone();
        async move {
            let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
            copy.is_some_and(|c| c.metadata.uid != old_uid)
        }
        .boxed()
    })
    .await;
    tracing::info!(?took, "the copy was made again");
    invariants_hold(&world).await;
    world.steps_for(2).await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&copy, "/spec/size"),
        Some(json!(1)),
        "the copy is the consumer's spec again"
    );
}

/// Provider requests naming one widget (reads and writes of single objects) since `from`.
fn per_object_widget_requests(world: &World, from: usize) -> Vec<String> {
    world
        .provider("acme")
        .request_log_from(from)
        .iter()
        .filter(|r| r.resource.starts_with("widgets.") && !r.name.is_empty())
        .map(|r| format!("{} {}/{}", r.verb, r.namespace, r.name))
        .collect()
}

/// Consumer writes of widgets since `from` (the write log's length then).
fn consumer_widget_writes(world: &World, from: usize) -> Vec<String> {
    world
        .consumer()
        .write_log()
        .iter()
        .skip(from)
        .filter(|w| w.resource.starts_with("widgets."))
        .map(|w| format!("{} {}/{} {}", w.verb, w.namespace, w.name, w.subresource))
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_resync_after_a_restart_with_everything_in_sync_makes_no_per_object_request_or_write() {
    let (mut world, _cred) = bound_world(
        "a_resync_after_a_restart_with_everything_in_sync_makes_no_per_object_request_or_write",
        1303,
    )
    .await;
    let names: Vec<String> = (0..5).map(|i| format!("w{i}")).collect();
    for name in &names {
        create_widget(&world, "default", name, json!({"size": 1})).await;
    }
    for name in &names {
        wait_for_copy(&mut world, "acme", "default", name).await;
    }
    story::patch_copy_status(&world, "acme", "default", "w0", json!({"phase": "Ready"})).await;
    world
        .run_until_async("the status of w0 comes down", 30, |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w0").await;
                at(&obj, "/status/phase") == Some(json!("Ready"))
            }
            .boxed()
        })
        .await;
    world.steps_for(10).await;

    let writes = world.consumer().write_log().len();
    let requests = world.provider("acme").request_log().len();
    // The restarted konnector engages, starts the syncer and reconciles every object, then,
    // past the 5-minute backstop, reconciles every object again: the cache shows each copy
    // current both times.
    world.restart_konnector();
    world.steps_for(330).await;
    assert_eq!(
        per_object_widget_requests(&world, requests),
        Vec::<String>::new(),
        "seed {}: the copies are current in the cache; neither the restart nor the resync makes a provider request naming one",
        world.seed()
    );
    assert_eq!(
        consumer_widget_writes(&world, writes),
        Vec::<String>::new(),
        "seed {}: finalizers and status are already there; neither the restart nor the resync writes the consumer",
        world.seed()
    );
    // Still syncing: a spec change goes up.
    story::patch_widget(&world, "default", "w3", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the spec change of w3 goes up",
            10,
            story::copy_has("acme", "default", "w3", "/spec/size", json!(7)),
        )
        .await;
}

/// A provider that deletes every copy as soon as it sees one (a garbage collector following an
/// owner reference, a policy controller) meets at most one create a second, not one per delete
/// event: a once-a-second poll would bound this by itself, events alone do not.
#[tokio::test(start_paused = true)]
async fn a_provider_that_deletes_every_copy_meets_at_most_one_create_a_second() {
    let world = synced_world(
        "a_provider_that_deletes_every_copy_meets_at_most_one_create_a_second",
        1304,
    )
    .await;
    let admin = world.provider("acme").admin_client();
    let from = world.provider("acme").request_log().len();
    // Two seconds of logical time, looking every 10 ms.
    let looks = 200;
    let mut deletes = 0;
    for _ in 0..looks {
        if world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_some()
            && admin
                .delete(&widgets(), Some("default"), "w1", &DeleteParams::default())
                .await
                .is_ok()
        {
            deletes += 1;
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
    let creates = world
        .provider("acme")
        .request_log_from(from)
        .iter()
        .filter(|r| r.user != "admin" && r.verb == "create" && r.resource.starts_with("widgets."))
        .count();
    assert!(
        deletes >= 2,
        "seed {}: the copy was made again after a delete ({deletes} deletes)",
        world.seed()
    );
    assert!(
        creates <= 3,
        "seed {}: {creates} creates of one copy in 2 s of logical time ({deletes} deletes): at most one a second",
        world.seed()
    );
}
