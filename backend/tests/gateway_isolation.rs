//! The gateway's tenant-isolation pre-checks in process (tests/gateway_support): a consumer
//! cluster UID another identity bound, and an Export sharing cluster-scoped APIs without
//! opting in, are refused with 409 before anything is written; the catalog says what sharing
//! means.

mod gateway_support;

use gateway_support::world::*;
use gateway_support::*;
use http::{Method, StatusCode};
use kbind_api::service::{CLUSTER_SCOPED_SHARING, Catalog};
use serde_json::json;

#[tokio::test(start_paused = true)]
async fn a_consumer_cluster_another_identity_bound_is_refused_with_409() {
    let world = world().await;
    let reply = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let reply = bind(
        &world.app,
        "bob-token",
        json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["team-b"]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    let error = reply.error();
    assert_eq!(error.reason, "ConsumerClusterClaimed");
    assert!(
        error.message.contains(UID) && error.message.contains("another identity"),
        "{}",
        error.message
    );
    assert_nothing_created(&world, Some("team-b")).await;
    // Alice binds the same consumer again; Bob his own.
    let again = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text());
    let own = bind(
        &world.app,
        "bob-token",
        json!({"export": "widgets", "consumerClusterUID": OTHER_UID, "namespaces": ["team-b"]}),
    )
    .await;
    assert_eq!(own.status, StatusCode::CREATED, "{}", own.text());
}

#[tokio::test(start_paused = true)]
async fn a_cluster_scoped_export_without_sharing_is_refused_and_the_catalog_says_so() {
    let world = world().await;
    create(
        world.admin.as_ref(),
        res_of::<kbind_api::Export>(),
        None,
        json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "private-gadgets"},
            "spec": {"title": "Private gadgets", "apis": [{"name": "gadgets.example.org"}]},
        }),
    )
    .await;
    let reply = bind(
        &world.app,
        "bob-token",
        json!({"export": "private-gadgets", "consumerClusterUID": UID}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    let error = reply.error();
    assert_eq!(error.reason, "ClusterScopedNotShared");
    assert!(
        error.message.contains("gadgets.example.org") && error.message.contains("spec.clusterScopedSharing"),
        "{}",
        error.message
    );
    let grants = grant_names(world.admin.as_ref()).await;
    assert!(
        !grants.contains(&world.grant_name("token:bob", "private-gadgets", UID).await),
        "{grants:?}"
    );

    let catalog: Catalog = send(
        &world.app,
        request(Method::GET, "/api/v1/catalog", Some("alice-token"), None),
    )
    .await
    .json();
    let entry = |name: &str| catalog.exports.iter().find(|e| e.name == name).unwrap().clone();
    let private = entry("private-gadgets");
    assert!(!private.ready);
    assert!(private.message.unwrap_or_default().contains("clusterScopedSharing"));
    assert_eq!(private.cluster_scoped_sharing, None);
    let shared = entry("gadgets");
    assert!(shared.ready);
    assert_eq!(shared.cluster_scoped_sharing.as_deref(), Some(CLUSTER_SCOPED_SHARING));
    assert_eq!(entry("sprockets").cluster_scoped_sharing, None);
}

/// Grant names are keyed by the provider's grants CRD UID, which no tenant credential can read:
/// a third party (a gateway a user is tricked into using) cannot compute the name of someone's
/// Grant from the identity, Export and consumer UID. A Grant made under the unkeyed name before
/// keeps it: a re-bind updates that Grant, never a second one.
#[tokio::test(start_paused = true)]
async fn grant_names_cannot_be_computed_without_the_providers_key() {
    let world = world().await;
    let reply = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let bound: kbind_api::service::BindResponse = reply.json();
    assert_ne!(bound.grant, kbind_api::grant_name("token:alice", "widgets", UID));
    assert_eq!(bound.grant, world.grant_name("token:alice", "widgets", UID).await);

    let legacy = kbind_api::grant_name("token:bob", "widgets", OTHER_UID);
    let grant = kbind_api::Grant::new(
        &legacy,
        kbind_api::GrantSpec {
            identity: kbind_api::GrantIdentity {
                subject: "token:bob".into(),
                name: None,
            },
            export: "widgets".into(),
            consumer_cluster_uid: OTHER_UID.into(),
            namespaces: vec!["team-b".into()],
        },
    );
    kbind_cluster::ClusterClientExt::create_typed(world.admin.as_ref(), &grant)
        .await
        .expect("a Grant of before");
    let reply = bind(
        &world.app,
        "bob-token",
        json!({"export": "widgets", "consumerClusterUID": OTHER_UID, "namespaces": ["team-b"]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let bound: kbind_api::service::BindResponse = reply.json();
    assert_eq!(bound.grant, legacy);
    let grants = grant_names(world.admin.as_ref()).await;
    assert!(
        !grants.contains(&world.grant_name("token:bob", "widgets", OTHER_UID).await),
        "a second Grant: {grants:?}"
    );
}
