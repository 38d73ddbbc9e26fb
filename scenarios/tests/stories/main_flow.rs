//! The Go POC's end-to-end story: bundle → Connection Ready → CRD pulled → create → spec up →
//! status down → update → delete through the provider, with §8 checked after every step.

use futures::FutureExt;
use kbind_api::consts::{annotation, finalizer, label};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::widgets;
use serde_json::{Value, json};

use crate::story;

use story::{at, bound_world, crds, create_widget, meta_key, wait_for_copy};

/// `obj` without what the server sets (uids, resourceVersions, timestamps, managedFields), with
/// the consumer-object-uid marker kept only as "present".
fn redacted(obj: &Option<kbind_cluster::DynamicObject>) -> Value {
    let mut value = serde_json::to_value(obj).unwrap_or(Value::Null);
    if let Some(meta) = value.get_mut("metadata").and_then(Value::as_object_mut) {
        for key in ["uid", "resourceVersion", "creationTimestamp", "managedFields"] {
            meta.remove(key);
        }
        if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
            for key in [annotation::CONSUMER_OBJECT_UID, annotation::CONSUMER_CLUSTER_UID] {
                if annotations.contains_key(key) {
                    annotations.insert(key.to_string(), json!("[uid]"));
                }
            }
        }
    }
    value
}

#[tokio::test(start_paused = true)]
async fn an_object_goes_up_its_status_comes_down_and_deletion_goes_through_the_provider() {
    let (mut world, _cred) = bound_world(
        "an_object_goes_up_its_status_comes_down_and_deletion_goes_through_the_provider",
        21,
    )
    .await;
    let crd = world.consumer_get(&crds(), None, "widgets.example.org").await;
    assert_eq!(at(&crd, &meta_key("labels", label::MANAGED)), Some(json!("true")));
    assert_eq!(
        at(&crd, &meta_key("annotations", annotation::CONNECTION)),
        Some(json!("acme"))
    );

    // Create on the consumer → the copy appears on the provider with our markers.
    let consumer = world.consumer().admin_client();
    let created = create_widget(&world, "default", "w1", json!({"size": 3, "color": "blue"})).await;
    let copy = Some(wait_for_copy(&mut world, "acme", "default", "w1").await);
    assert_eq!(at(&copy, "/spec/size"), Some(json!(3)));
    assert_eq!(
        at(&copy, &meta_key("annotations", annotation::CONSUMER_OBJECT_UID)),
        created.metadata.uid.clone().map(Value::String)
    );
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    let finalizers = at(&mine, "/metadata/finalizers").unwrap_or_default();
    assert!(
        finalizers
            .as_array()
            .is_some_and(|f| f.contains(&json!(finalizer::SYNCER))),
        "the syncer finalizer is on the consumer object"
    );

    // The provider's controller reports status → it comes down, observedGeneration translated.
    let provider_generation = at(&copy, "/metadata/generation").unwrap_or(json!(1));
    world
        .provider("acme")
        .admin_client()
        .patch_status(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"status": {"phase": "Ready", "observedGeneration": provider_generation}})),
            &PatchParams::default(),
        )
        .await
        .expect("the provider writes status");
    world
        .run_until_async("the status comes down", 60, |w| {
            async move {
                let obj = w.consumer_get(&widgets(), Some("default"), "w1").await;
                at(&obj, "/status/phase") == Some(json!("Ready"))
            }
            .boxed()
        })
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&mine, "/status/observedGeneration"),
        at(&mine, "/metadata/generation"),
        "observedGeneration answers the consumer generation"
    );
    // Both sides as a reviewer would read them (server-set fields redacted).
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    insta::assert_json_snapshot!("consumer_widget_after_status_down", redacted(&mine));
    insta::assert_json_snapshot!("provider_copy_after_status_down", redacted(&copy));

    // Update the spec → it goes up.
    consumer
        .patch(
            &widgets(),
            Some("default"),
            "w1",
            &Patch::Merge(json!({"spec": {"size": 5}})),
            &PatchParams::default(),
        )
        .await
        .expect("updating the widget");
    world
        .run_until_async("the update reaches the provider", 60, |w| {
            async move {
                let obj = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                at(&obj, "/spec/size") == Some(json!(5))
            }
            .boxed()
        })
        .await;

    // Delete → the copy goes first, then the consumer object.
    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world
        .run_until_async("both copies are gone", 60, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("default"), "w1")
                    .await
                    .is_none()
                    && w.consumer_get(&widgets(), Some("default"), "w1").await.is_none()
            }
            .boxed()
        })
        .await;
}
