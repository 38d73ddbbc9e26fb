//! DESIGN.md §4 "unbind" escape hatch: `core.kbind.io/deletion-policy: Orphan` on a binding or
//! Connection releases everything at once without touching the provider, also when the
//! provider is gone for good (§8.1, §8.2, §8.7 checked by the world after every step).

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, condition, reason};
use kbind_scenarios::apis::widgets;
use kbind_scenarios::world::NAMESPACE;
use serde_json::json;
use story::*;

fn orphan_patch() -> serde_json::Value {
    json!({"metadata": {"annotations": {annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}})
}

#[tokio::test(start_paused = true)]
async fn an_orphaned_cluster_binding_lets_go_at_once_and_leaves_the_provider_alone() {
    let (mut world, _) = bound_world(
        "an_orphaned_cluster_binding_lets_go_at_once_and_leaves_the_provider_alone",
        201,
    )
    .await;
    for name in ["w1", "w2"] {
        create_widget(&world, "default", name, json!({"size": 3})).await;
        wait_for_copy(&mut world, "acme", "default", name).await;
    }
    let writes_before = world.provider("acme").write_log().len();
    world.allow_konnector_delete(&crds(), None, WIDGETS);

    patch_consumer(&world, &cluster_bindings(), None, "acme", orphan_patch()).await;
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the orphaned binding is released", 10, |w| {
            async move { w.consumer_get(&cluster_bindings(), None, "acme").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(10).await;

    for name in ["w1", "w2"] {
        let copy = world.provider_get("acme", &widgets(), Some("default"), name).await;
        assert_eq!(
            at(&copy, "/spec/size"),
            Some(json!(3)),
            "copy {name} stays on the provider"
        );
        assert!(copy.and_then(|c| c.metadata.deletion_timestamp).is_none());
    }
    let deletes: Vec<_> = world
        .provider("acme")
        .write_log()
        .into_iter()
        .filter(|w| w.verb == "delete")
        .collect();
    assert!(deletes.is_empty(), "the provider saw deletes: {deletes:?}");
    let widget_writes = world.provider("acme").write_log()[writes_before..]
        .iter()
        .filter(|w| w.resource.starts_with("widgets."))
        .count();
    assert_eq!(widget_writes, 0, "the provider copies were not touched");
}

#[tokio::test(start_paused = true)]
async fn a_connection_whose_provider_is_gone_for_good_is_deleted_with_orphan() {
    let (mut world, _) = bound_world(
        "a_connection_whose_provider_is_gone_for_good_is_deleted_with_orphan",
        202,
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    world.partition("acme");
    world.steps_for(5).await;

    // Without Orphan the binding waits: its copy must go and the provider is unreachable.
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding reports DeletionBlocked", 120, |w| {
            async move {
                cluster_binding(w, "acme")
                    .await
                    .and_then(|b| b.status)
                    .and_then(|s| conditions::find(&s.conditions, condition::CONNECTED).cloned())
                    .is_some_and(|c| c.reason == reason::DELETION_BLOCKED)
            }
            .boxed()
        })
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(mine.is_some(), "nothing is lost while deletion is blocked");

    // The documented way out: Orphan on the binding and the Connection, then delete the rest.
    world.allow_konnector_delete(&crds(), None, WIDGETS);
    patch_consumer(&world, &cluster_bindings(), None, "acme", orphan_patch()).await;
    patch_consumer(&world, &connections(), None, "acme", orphan_patch()).await;
    world.delete_on_consumer(&connections(), None, "acme").await;
    world.delete_on_consumer(&secrets(), Some(NAMESPACE), "acme").await;
    world
        .run_until_async("binding, Connection and Secret are gone", 60, |w| {
            async move {
                w.consumer_get(&cluster_bindings(), None, "acme").await.is_none()
                    && w.consumer_get(&connections(), None, "acme").await.is_none()
                    && w.consumer_get(&secrets(), Some(NAMESPACE), "acme").await.is_none()
            }
            .boxed()
        })
        .await;
    world
        .run_until_async("the widget's finalizer is released", 60, |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w1").await;
                obj.is_none_or(|o| o.metadata.finalizers.unwrap_or_default().is_empty())
            }
            .boxed()
        })
        .await;
    assert_eq!(
        provider_widget_writes(&world, "acme", "delete"),
        0,
        "the provider was never touched"
    );
}
