//! contract §4 "connection loss": the provider is disengaged, its syncers stop, nothing is
//! deleted anywhere, consumer objects get `status-stale` (once), and after recovery changes
//! made on both sides meanwhile converge and the mark goes.

use futures::FutureExt;
use kbind_api::consts::annotation;
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::widgets;
use serde_json::json;

use crate::story;

use story::{at, bound_world, create_widget, meta_key, wait_for_copy};

fn stale_pointer() -> String {
    meta_key("annotations", annotation::STATUS_STALE)
}

#[tokio::test(start_paused = true)]
async fn a_partition_marks_status_stale_loses_nothing_and_both_sides_converge_after_heal() {
    let (mut world, _cred) = bound_world(
        "a_partition_marks_status_stale_loses_nothing_and_both_sides_converge_after_heal",
        23,
    )
    .await;
    let consumer = world.consumer().admin_client();
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create_widget(&world, "default", "w2", json!({"size": 2})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    wait_for_copy(&mut world, "acme", "default", "w2").await;

    world.partition("acme");
    world
        .run_until_async("the consumer object is marked status-stale", 120, |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w1").await;
                at(&obj, &stale_pointer()).is_some()
            }
            .boxed()
        })
        .await;
    // A delete while disconnected waits, says why, and loses nothing.
    world.delete_on_consumer(&widgets(), Some("default"), "w2").await;
    world
        .run_until_async("w2's deletion is reported as DeletionBlocked", 60, |w| {
            async move {
                let events = w
                    .consumer()
                    .admin_client()
                    .list(
                        &kbind_engine::events::event_resource(),
                        Some("default"),
                        &Default::default(),
                    )
                    .await;
                events.is_ok_and(|l| {
                    l.items.iter().any(|e| {
                        e.data.get("reason") == Some(&json!("DeletionBlocked"))
                            && e.data.pointer("/regarding/name") == Some(&json!("w2"))
                    })
                })
            }
            .boxed()
        })
        .await;
    assert!(
        world.consumer_get(&widgets(), Some("default"), "w2").await.is_some(),
        "the deletion waits for the provider to come back"
    );
    let first_mark = at(
        &world.consumer_get(&widgets(), Some("default"), "w1").await,
        &stale_pointer(),
    );
    // Both sides change while disconnected.
    consumer
        .patch(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"spec": {"size": 7}})),
            &PatchParams::default(),
        )
        .await
        .expect("the consumer edits during the partition");
    let provider_admin = world.provider("acme").admin_client();
    world.provider("acme").heal();
    provider_admin
        .patch_status(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"status": {"phase": "Degraded"}})),
            &PatchParams::default(),
        )
        .await
        .expect("the provider reports status during the partition");
    world.provider("acme").partition();
    world.steps_for(60).await;
    let still = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&still, &stale_pointer()),
        first_mark,
        "marked once per outage, not refreshed every pass"
    );
    assert_eq!(at(&still, "/spec/size"), Some(json!(7)), "the consumer edit is kept");

    world.heal("acme");
    world
        .run_until_async("both sides converge and the mark goes", 180, |w| {
            async move {
                let mine = w.consumer_get(&widgets(), Some("default"), "w1").await;
                let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                at(&copy, "/spec/size") == Some(json!(7))
                    && at(&mine, "/status/phase") == Some(json!("Degraded"))
                    && at(&mine, &stale_pointer()).is_none()
                    && w.consumer_get(&widgets(), Some("default"), "w2").await.is_none()
                    && w.provider_get("acme", &widgets(), Some("default"), "w2")
                        .await
                        .is_none()
            }
            .boxed()
        })
        .await;
}

/// A provider that stops answering without closing anything (a black hole: no
/// error comes back and no watch ends) is noticed through the request timeout alone, handled
/// as a lost connection, and recovered from once it answers again.
#[tokio::test(start_paused = true)]
async fn a_black_holed_provider_is_noticed_by_the_request_timeout_and_recovered_from() {
    let (mut world, _cred) = bound_world(
        "a_black_holed_provider_is_noticed_by_the_request_timeout_and_recovered_from",
        29,
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    world.black_hole("acme");
    world
        .run_until_async("the consumer object is marked status-stale", 240, |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w1").await;
                at(&obj, &stale_pointer()).is_some()
            }
            .boxed()
        })
        .await;
    world
        .consumer()
        .admin_client()
        .patch(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"spec": {"size": 7}})),
            &PatchParams::default(),
        )
        .await
        .expect("the consumer edits while the provider is a black hole");

    world.restore("acme");
    world
        .run_until_async("the edit reaches the provider and the mark goes", 240, |w| {
            async move {
                let mine = w.consumer_get(&widgets(), Some("default"), "w1").await;
                let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                at(&copy, "/spec/size") == Some(json!(7)) && at(&mine, &stale_pointer()).is_none()
            }
            .boxed()
        })
        .await;
}
