//! contract §4 "namespaces": a missing provider namespace is created (labelled managed, with
//! the consumer cluster UID), and removed on unbind only if nothing but our objects is left in
//! it; a namespace the provider made, or one holding anything else, stays.

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{TRUE, annotation, label};
use kbind_cluster::{ApiResource, ClusterClient};
use kbind_scenarios::apis::{widget, widgets};
use serde_json::json;

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

#[tokio::test(start_paused = true)]
async fn unbinding_removes_only_the_provider_namespaces_kbind_made_and_left_empty() {
    let (mut world, _cred) = story::bound_world(
        "unbinding_removes_only_the_provider_namespaces_kbind_made_and_left_empty",
        71,
    )
    .await;
    let provider_admin = world.provider("acme").admin_client();
    // The provider's own namespace, used by a widget too.
    provider_admin
        .create(
            &namespaces(),
            None,
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "shared"}}))
                .unwrap(),
            &Default::default(),
        )
        .await
        .expect("the provider makes its own namespace");
    for ns in ["team-x", "team-y", "shared"] {
        story::ensure_namespace(&world.consumer().admin_client(), ns).await;
        world
            .consumer()
            .admin_client()
            .create(
                &widgets(),
                Some(ns),
                &widget(ns, "w", json!({"size": 1})),
                &Default::default(),
            )
            .await
            .expect("creating a widget");
    }
    for ns in ["team-x", "team-y", "shared"] {
        story::wait_for_copy(&mut world, "acme", ns, "w").await;
    }
    let team_x = world.provider_get("acme", &namespaces(), None, "team-x").await;
    assert_eq!(
        story::label(&team_x, label::MANAGED).as_deref(),
        Some(TRUE),
        "kbind labels what it creates"
    );
    assert_eq!(
        story::annotation(&team_x, annotation::CONSUMER_CLUSTER_UID),
        Some(world.consumer().identity_uid()),
        "and says for which consumer"
    );
    // Someone else's object in a namespace kbind made keeps that namespace.
    provider_admin
        .create(
            &ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()),
            Some("team-y"),
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "provider-notes", "namespace": "team-y"}})).unwrap(),
            &Default::default(),
        )
        .await
        .expect("the provider adds its own object");

    world.delete_on_consumer(&story::cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding is released and the empty namespace goes", 150, |w| {
            async move {
                let binding_gone = story::cluster_binding(w, "acme").await.is_none();
                let team_x = w.provider_get("acme", &namespaces(), None, "team-x").await;
                binding_gone && team_x.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some())
            }
            .boxed()
        })
        .await;
    let team_y = world.provider_get("acme", &namespaces(), None, "team-y").await;
    assert!(
        team_y.is_some_and(|ns| ns.metadata.deletion_timestamp.is_none()),
        "team-y holds another object and stays"
    );
    let shared = world.provider_get("acme", &namespaces(), None, "shared").await;
    assert!(
        shared.is_some_and(|ns| ns.metadata.deletion_timestamp.is_none()),
        "the provider's own namespace stays"
    );
}
