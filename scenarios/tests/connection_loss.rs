//! DESIGN.md §4 "connection loss": the provider is disengaged, its syncers stop, nothing is
//! deleted anywhere, consumer objects get `status-stale` (once), and after recovery changes
//! made on both sides meanwhile converge and the mark goes.

use futures::FutureExt;
use kbind_api::consts::annotation;
use kbind_api::{ClusterBinding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

fn at(obj: &Option<DynamicObject>, pointer: &str) -> Option<Value> {
    serde_json::to_value(obj.as_ref()?).ok()?.pointer(pointer).cloned()
}

fn stale_pointer() -> String {
    format!("/metadata/annotations/{}", annotation::STATUS_STALE.replace('/', "~1"))
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
        .is_some_and(|s| conditions::is_true(&s.conditions, kbind_api::consts::condition::READY))
}

#[tokio::test(start_paused = true)]
async fn a_partition_marks_status_stale_loses_nothing_and_both_sides_converge_after_heal() {
    let mut world = World::builder()
        .seed(seed_from_env(23))
        .story("a_partition_marks_status_stale_loses_nothing_and_both_sides_converge_after_heal")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_konnector();
    world
        .run_until_async("the binding is Ready", 120, |w| binding_ready(w).boxed())
        .await;
    let consumer = world.consumer().admin_client();
    consumer
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w1", json!({"size": 1})),
            &Default::default(),
        )
        .await
        .expect("creating a widget");
    consumer
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w2", json!({"size": 2})),
            &Default::default(),
        )
        .await
        .expect("creating a second widget");
    world
        .run_until_async("the copies are on the provider", 60, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("default"), "w1")
                    .await
                    .is_some()
                    && w.provider_get("acme", &widgets(), Some("default"), "w2")
                        .await
                        .is_some()
            }
            .boxed()
        })
        .await;

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
