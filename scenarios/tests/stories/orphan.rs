//! contract §4 "unbind" escape hatch: `core.kbind.io/deletion-policy: Orphan` on a binding or
//! Connection releases everything at once and deletes nothing on either side, also when the
//! provider is gone for good: provider copies, the consumer CRD, consumer objects and related
//! copies in both directions all stay (§8.8; §8.1, §8.2, §8.7 checked after every step).

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, condition, reason};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use kbind_scenarios::world::NAMESPACE;
use serde_json::json;
use story::*;

fn orphan_patch() -> serde_json::Value {
    json!({"metadata": {"annotations": {annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}})
}

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// A Secret copied up (`FromConsumer`) and a ConfigMap copied down (`FromProvider`) in `default`.
async fn related_copies_both_ways(world: &mut World) {
    let secret: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-creds", "namespace": "default"}, "stringData": {"password": "p"}}))
    .expect("a Secret");
    world
        .consumer()
        .admin_client()
        .create(&secrets(), Some("default"), &secret, &Default::default())
        .await
        .expect("creating the consumer Secret");
    let cm: DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "endpoints", "namespace": "default"}, "data": {"url": "https://db.acme"}}))
    .expect("a ConfigMap");
    world
        .provider("acme")
        .admin_client()
        .create(&configmaps(), Some("default"), &cm, &Default::default())
        .await
        .expect("creating the provider ConfigMap");
    world
        .consumer()
        .admin_client()
        .patch(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["db-creds"]}},
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .expect("adding related resources");
    world
        .run_until_async("the related copies are in place both ways", 60, |w| {
            async move {
                w.provider_get("acme", &secrets(), Some("default"), "db-creds")
                    .await
                    .is_some()
                    && w.consumer_get(&configmaps(), Some("default"), "endpoints")
                        .await
                        .is_some()
            }
            .boxed()
        })
        .await;
}

/// Everything the Orphan release must leave: the consumer CRD, the consumer widgets (released),
/// their provider copies, and the related copies on both sides.
async fn assert_nothing_deleted(world: &World, widget_names: &[&str], related: bool) {
    assert!(
        world.consumer_get(&crds(), None, WIDGETS).await.is_some(),
        "Orphan keeps the consumer CRD (removing it deletes every instance)"
    );
    for name in widget_names {
        let mine = world.consumer_get(&widgets(), Some("default"), name).await;
        assert!(mine.is_some(), "Orphan keeps consumer widget {name}");
        assert!(
            mine.and_then(|m| m.metadata.finalizers).unwrap_or_default().is_empty(),
            "Orphan releases the finalizer of {name}"
        );
        let copy = world.provider_get("acme", &widgets(), Some("default"), name).await;
        assert!(copy.is_some(), "Orphan keeps the provider copy of {name}");
    }
    if related {
        assert!(
            world
                .provider_get("acme", &secrets(), Some("default"), "db-creds")
                .await
                .is_some(),
            "Orphan keeps the FromConsumer copy on the provider"
        );
        assert!(
            world
                .consumer_get(&configmaps(), Some("default"), "endpoints")
                .await
                .is_some(),
            "Orphan keeps the FromProvider copy on the consumer"
        );
    }
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
    related_copies_both_ways(&mut world).await;
    let writes_before = world.provider("acme").write_log().len();

    patch_consumer(&world, &cluster_bindings(), None, "acme", orphan_patch()).await;
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the orphaned binding is released", 10, |w| {
            async move { w.consumer_get(&cluster_bindings(), None, "acme").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(10).await;
    assert_nothing_deleted(&world, &["w1", "w2"], true).await;

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
    world.heal("acme");
    world.steps_for(5).await;
    assert_nothing_deleted(&world, &["w1"], false).await;
}
