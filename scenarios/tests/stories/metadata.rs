//! contract §4 "spec up": what metadata goes up. Owner references, finalizers and the
//! markers of helm, Argo CD, kubectl, Flux and `app.kubernetes.io/managed-by` never reach the
//! provider copy; other labels and annotations do; and with the provider's garbage collector
//! on nothing is collected there (§8.1, §8.2, §8.7 checked by the world after every step).

use crate::story;

use futures::FutureExt;
use kbind_api::consts::label as kbind_label;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
use kbind_scenarios::World;
use kbind_scenarios::apis::{widget, widgets};
use serde_json::json;
use std::collections::BTreeMap;
use story::*;

const TOOL_LABELS: &[&str] = &["app.kubernetes.io/managed-by", "helm.sh/chart"];
const TOOL_ANNOTATIONS: &[&str] = &[
    "meta.helm.sh/release-name",
    "meta.helm.sh/release-namespace",
    "argocd.argoproj.io/tracking-id",
    "argocd.argoproj.io/sync-wave",
    "kubectl.kubernetes.io/last-applied-configuration",
    "kustomize.toolkit.fluxcd.io/name",
    "helm.toolkit.fluxcd.io/name",
];

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// A consumer widget carrying every kind of tool metadata, owned by ConfigMap `owner`.
async fn decorated_widget(world: &World, owner_uid: &str) -> DynamicObject {
    let mut obj = widget("default", "w1", json!({"size": 2}));
    obj.metadata.labels = Some(BTreeMap::from([
        ("app".to_string(), "web".to_string()),
        ("app.kubernetes.io/name".to_string(), "web".to_string()),
        ("app.kubernetes.io/managed-by".to_string(), "Helm".to_string()),
        ("helm.sh/chart".to_string(), "web-1.0.0".to_string()),
    ]));
    obj.metadata.annotations = Some(BTreeMap::from([
        ("note".to_string(), "keep me".to_string()),
        ("meta.helm.sh/release-name".to_string(), "web".to_string()),
        ("meta.helm.sh/release-namespace".to_string(), "default".to_string()),
        (
            "argocd.argoproj.io/tracking-id".to_string(),
            "web:example.org/Widget:default/w1".to_string(),
        ),
        ("argocd.argoproj.io/sync-wave".to_string(), "1".to_string()),
        (
            "kubectl.kubernetes.io/last-applied-configuration".to_string(),
            "{\"spec\":{\"size\":2}}".to_string(),
        ),
        ("kustomize.toolkit.fluxcd.io/name".to_string(), "apps".to_string()),
        ("helm.toolkit.fluxcd.io/name".to_string(), "web".to_string()),
    ]));
    obj.metadata.finalizers = Some(vec!["example.org/keep".to_string()]);
    obj.metadata.owner_references = Some(vec![
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid,
            "controller": true, "blockOwnerDeletion": true,
        }))
        .expect("an owner reference"),
    ]);
    create_widget_object(world, obj).await
}

async fn owner_configmap(world: &World) -> String {
    let cm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "default"},
    }))
    .expect("a ConfigMap");
    world
        .consumer()
        .admin_client()
        .create(&configmaps(), Some("default"), &cm, &Default::default())
        .await
        .expect("creating the owner ConfigMap")
        .metadata
        .uid
        .unwrap_or_default()
}

#[tokio::test(start_paused = true)]
async fn tool_markers_owner_references_and_finalizers_stay_on_the_consumer() {
    let (mut world, _) = bound_world("tool_markers_owner_references_and_finalizers_stay_on_the_consumer", 401).await;
    ensure_namespace(&world.consumer().admin_client(), "default").await;
    let owner = owner_configmap(&world).await;
    decorated_widget(&world, &owner).await;
    let live = wait_for_copy(&mut world, "acme", "default", "w1").await;
    let copy = Some(live.clone());

    assert_eq!(label(&copy, "app").as_deref(), Some("web"));
    assert_eq!(label(&copy, "app.kubernetes.io/name").as_deref(), Some("web"));
    assert_eq!(label(&copy, kbind_label::MANAGED).as_deref(), Some("true"));
    assert_eq!(annotation(&copy, "note").as_deref(), Some("keep me"));
    for key in TOOL_LABELS {
        assert_eq!(label(&copy, key), None, "label {key} must not go up");
    }
    for key in TOOL_ANNOTATIONS {
        assert_eq!(annotation(&copy, key), None, "annotation {key} must not go up");
    }
    assert!(
        live.metadata.owner_references.unwrap_or_default().is_empty(),
        "no ownerReferences go up"
    );
    assert!(
        live.metadata.finalizers.unwrap_or_default().is_empty(),
        "no finalizers go up"
    );
}

#[tokio::test(start_paused = true)]
async fn label_changes_follow_and_removed_labels_leave_the_copy() {
    let (mut world, _) = bound_world("label_changes_follow_and_removed_labels_leave_the_copy", 402).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    patch_widget(
        &world,
        "default",
        "w1",
        json!({"metadata": {"labels": {"tier": "gold", "argocd.argoproj.io/instance": "apps"}}}),
    )
    .await;
    world
        .run_until_async(
            "the new label goes up",
            60,
            copy_has("acme", "default", "w1", &meta_key("labels", "tier"), json!("gold")),
        )
        .await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(label(&copy, "argocd.argoproj.io/instance"), None);

    patch_widget(&world, "default", "w1", json!({"metadata": {"labels": {"tier": null}}})).await;
    world
        .run_until_async("the removed label leaves the copy", 60, |w| {
            async move {
                let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                copy.is_some() && label(&copy, "tier").is_none()
            }
            .boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn the_provider_garbage_collector_collects_nothing() {
    let (mut world, _) = bound_world("the_provider_garbage_collector_collects_nothing", 403).await;
    world.provider("acme").set_garbage_collector(true);
    world.consumer().set_garbage_collector(true);
    ensure_namespace(&world.consumer().admin_client(), "default").await;
    let owner = owner_configmap(&world).await;
    decorated_widget(&world, &owner).await;
    let copy = wait_for_copy(&mut world, "acme", "default", "w1").await;

    world.steps_for(60).await;
    let now = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        now.and_then(|c| c.metadata.uid),
        copy.metadata.uid,
        "the copy is still the same object"
    );
    let collected: Vec<_> = world
        .provider("acme")
        .write_log()
        .into_iter()
        .filter(|w| w.verb == "delete" && w.user.contains("garbage-collector"))
        .collect();
    assert!(
        collected.is_empty(),
        "the provider's garbage collector deleted {collected:?}"
    );

    // Deleting the consumer object removes the copy; the foreign finalizer holds only the
    // consumer object, until its owner (the story) lets go.
    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world
        .run_until_async("the copy is removed", 60, copy_gone("acme", "default", "w1"))
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(
        mine.and_then(|o| o.metadata.finalizers),
        Some(vec!["example.org/keep".to_string()]),
        "only our finalizer is released"
    );
    patch_widget(&world, "default", "w1", json!({"metadata": {"finalizers": null}})).await;
    world
        .run_until_async("the consumer object goes", 30, consumer_widget_gone("default", "w1"))
        .await;
}
