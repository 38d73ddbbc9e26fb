//! The Go POC's end-to-end story: bundle → Connection Ready → CRD pulled → create → spec up →
//! status down → update → delete through the provider, with §8 checked after every step.

use futures::FutureExt;
use kbind_api::consts::{annotation, condition, finalizer, label};
use kbind_api::{ClusterBinding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

fn crds() -> kbind_cluster::ApiResource {
    kbind_cluster::ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&())
}

async fn binding_ready(world: &World, name: &str) -> bool {
    let b: Option<ClusterBinding> = world
        .consumer()
        .admin_client()
        .get_typed_opt(None, name)
        .await
        .ok()
        .flatten();
    b.and_then(|b| b.status)
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

fn at(obj: &Option<kbind_cluster::DynamicObject>, pointer: &str) -> Option<Value> {
    let whole = serde_json::to_value(obj.as_ref()?).ok()?;
    whole.pointer(pointer).cloned()
}

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
    let mut world = World::builder()
        .seed(seed_from_env(21))
        .story("an_object_goes_up_its_status_comes_down_and_deletion_goes_through_the_provider")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_konnector();

    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    let crd = world.consumer_get(&crds(), None, "widgets.example.org").await;
    assert_eq!(
        at(&crd, &format!("/metadata/labels/{}", label::MANAGED.replace('/', "~1"))),
        Some(json!("true"))
    );
    assert_eq!(
        at(
            &crd,
            &format!("/metadata/annotations/{}", annotation::CONNECTION.replace('/', "~1"))
        ),
        Some(json!("acme"))
    );

    // Create on the consumer → the copy appears on the provider with our markers.
    let consumer = world.consumer().admin_client();
    let created = consumer
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w1", json!({"size": 3, "color": "blue"})),
            &Default::default(),
        )
        .await
        .expect("creating a widget on the consumer");
    world
        .run_until_async("the copy is on the provider", 60, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("default"), "w1")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(at(&copy, "/spec/size"), Some(json!(3)));
    assert_eq!(
        at(
            &copy,
            &format!(
                "/metadata/annotations/{}",
                annotation::CONSUMER_OBJECT_UID.replace('/', "~1")
            )
        ),
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
