//! contract §4 "namespaces", §8.9: on unbind a provider namespace kbind made is removed only if
//! the binding's own objects used it, and only when a complete, successful read says nothing
//! but our objects was in it. A group-version discovery cannot read (an unavailable APIService
//! answering 503) hides the objects of its kinds, so a partial discovery keeps the namespace —
//! and whatever it holds; a namespace another binding uses is not this binding's to remove,
//! even while it is empty.

use crate::story;

use fakeapi::{ErrorRule, InjectedError};
use futures::FutureExt;
use kbind_cluster::{ApiResource, ClusterClient};
use kbind_scenarios::apis::exported_crd;
use kbind_scenarios::{bundle, world::NAMESPACE};
use serde_json::json;

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

fn roles() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&())
}

#[tokio::test(start_paused = true)]
async fn a_partial_discovery_keeps_the_provider_namespace_and_what_it_hides() {
    let (mut world, _cred) = story::bound_world(
        "a_partial_discovery_keeps_the_provider_namespace_and_what_it_hides",
        411,
    )
    .await;
    story::create_widget(&world, "team-x", "w", json!({"size": 1})).await;
    story::wait_for_copy(&mut world, "acme", "team-x", "w").await;
    let made = world.provider_get("acme", &namespaces(), None, "team-x").await;
    assert!(made.is_some(), "kbind made the provider namespace");
    // The provider keeps its own object in the namespace kbind made, of a kind whose
    // group-version discovery cannot read for now.
    world
        .provider("acme")
        .admin_client()
        .create(
            &roles(),
            Some("team-x"),
            &serde_json::from_value(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "provider-ops", "namespace": "team-x"},
                "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}],
            }))
            .expect("a Role"),
            &Default::default(),
        )
        .await
        .expect("the provider adds its own Role");
    world
        .provider("acme")
        .set_undiscoverable("rbac.authorization.k8s.io/v1", true);

    world.delete_on_consumer(&story::cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding is released", 150, |w| {
            async move { story::cluster_binding(w, "acme").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(20).await;
    let team_x = world.provider_get("acme", &namespaces(), None, "team-x").await;
    assert!(
        team_x.is_some_and(|ns| ns.metadata.deletion_timestamp.is_none()),
        "a namespace judged on a partial discovery stays"
    );
    assert!(
        world
            .provider_get("acme", &roles(), Some("team-x"), "provider-ops")
            .await
            .is_some(),
        "the provider's Role discovery could not see stays"
    );
    assert!(
        world
            .provider_get("acme", &kbind_scenarios::apis::widgets(), Some("team-x"), "w")
            .await
            .is_none(),
        "the binding's own copy was drained"
    );
}

#[tokio::test(start_paused = true)]
async fn unbinding_leaves_the_empty_namespace_another_binding_made() {
    let (mut world, _cred) = story::bound_world("unbinding_leaves_the_empty_namespace_another_binding_made", 412).await;
    // A second binding of the same Connection serves gizmos; its first write fails for now, so
    // the namespace it made for team-y is still empty.
    world
        .install_provider_crd("acme", exported_crd("gizmos", "Gizmo", "Namespaced"))
        .await;
    for verb in ["create", "patch"] {
        world
            .provider("acme")
            .inject_error(ErrorRule::new(Some(verb), Some("gizmos"), InjectedError::Internal));
    }
    let cred = world.mint_admin_token("acme");
    let mut objects = bundle::bundle("acme", NAMESPACE, &world.kubeconfig_for(&cred), &["gizmos.example.org"]);
    objects[2]["metadata"]["name"] = json!("gizmos");
    world.apply_object(objects.remove(2)).await;
    world
        .run_until_async("the gizmos CRD is served on the consumer", 150, |w| {
            async move {
                w.consumer_get(&story::crds(), None, "gizmos.example.org")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;
    world.steps_for(10).await;
    let gizmos = ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Gizmo".into(),
        plural: "gizmos".into(),
    };
    story::ensure_namespace(&world.consumer().admin_client(), "team-y").await;
    world
        .consumer()
        .admin_client()
        .create(
            &gizmos,
            Some("team-y"),
            &serde_json::from_value(json!({"apiVersion": "example.org/v1", "kind": "Gizmo",
                "metadata": {"name": "g", "namespace": "team-y"}, "spec": {"size": 1}}))
            .expect("a gizmo"),
            &Default::default(),
        )
        .await
        .expect("creating a gizmo");
    world
        .run_until_async("the gizmos binding made team-y on the provider", 90, |w| {
            async move { w.provider_get("acme", &namespaces(), None, "team-y").await.is_some() }.boxed()
        })
        .await;
    let team_y = world
        .provider_get("acme", &namespaces(), None, "team-y")
        .await
        .expect("team-y");
    story::create_widget(&world, "team-x", "w", json!({"size": 1})).await;
    story::wait_for_copy(&mut world, "acme", "team-x", "w").await;

    world.delete_on_consumer(&story::cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the widgets binding is released", 150, |w| {
            async move { story::cluster_binding(w, "acme").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(20).await;
    let now = world.provider_get("acme", &namespaces(), None, "team-y").await;
    assert!(
        now.as_ref().is_some_and(|ns| ns.metadata.deletion_timestamp.is_none()),
        "team-y stays"
    );
    assert_eq!(
        now.and_then(|ns| ns.metadata.uid),
        team_y.metadata.uid,
        "team-y was never deleted and made again"
    );
    let team_x = world.provider_get("acme", &namespaces(), None, "team-x").await;
    assert!(
        team_x.is_none_or(|ns| ns.metadata.deletion_timestamp.is_some()),
        "the namespace the released binding used and left empty goes"
    );
}
