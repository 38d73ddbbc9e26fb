//! Story: a Connection's Secret is swapped to a kubeconfig with the wrong CA, then back.
//! The provider is disengaged without deleting anything (§8.1) and recovery connects afresh.

use crate::common;

#[tokio::test(start_paused = true)]
async fn secret_swapped_to_an_untrusted_ca_disengages_and_recovers_with_a_fresh_client() {
    let (mut world, cred) =
        common::connected_world("secret_swapped_to_an_untrusted_ca_disengages_and_recovers_with_a_fresh_client").await;
    // What crdpull leaves on the consumer: a CRD served through this Connection.
    let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition =
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "widgets.example.org",
                         "labels": {"core.kbind.io/managed": "true"},
                         "annotations": {"core.kbind.io/connection": "acme"}},
            "spec": {"group": "example.org", "scope": "Namespaced",
                     "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                     "versions": [{"name": "v1", "served": true, "storage": true,
                                   "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        }))
        .unwrap();
    kbind_cluster::ClusterClientExt::create_typed(&world.consumer().admin_client(), &crd)
        .await
        .unwrap();
    world
        .run_until("acme is engaged", 60, |w| w.providers().get("acme").is_some())
        .await;
    // The Connection reconciler builds clients too: count what is built in each window.
    let first = world.providers().get("acme").unwrap();

    world
        .swap_secret(
            "acme",
            &cred,
            Some(b"-----BEGIN CERTIFICATE-----\nbm90IG1pbmU=\n-----END CERTIFICATE-----\n"),
        )
        .await;
    world
        .run_until("the old engagement ends", 30, |_| first.is_disengaged())
        .await;
    let built = world.connector().connects("acme");
    world.steps_for(20).await;
    assert!(
        world.providers().get("acme").is_none(),
        "an untrusted server is never engaged"
    );
    assert_eq!(
        world.connector().connects("acme"),
        built,
        "TLS verification failed before any client was built"
    );

    world.swap_secret("acme", &cred, None).await;
    world
        .run_until("acme is engaged again", 30, |w| w.providers().get("acme").is_some())
        .await;
    let second = world.providers().get("acme").unwrap();
    assert!(
        world.connector().connects("acme") > built,
        "recovery builds a new client"
    );
    assert!(
        !std::sync::Arc::ptr_eq(&first.client, &second.client),
        "recovery builds a fresh client"
    );
    assert!(first.cache.watched().is_empty());
}
