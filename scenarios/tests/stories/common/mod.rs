//! Shared story set-up: one provider `acme`, its bundle applied, the konnector started.

#![allow(dead_code)]

use kbind_scenarios::{Credential, ProviderOpts, World, seed_from_env};

/// A world with provider `acme` (static admin token), its bundle applied and konnector-0 running.
pub async fn connected_world(story: &str) -> (World, Credential) {
    let mut world = World::builder()
        .seed(seed_from_env(42))
        .story(story)
        .consumer("consumer")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
    world.start_konnector();
    (world, cred)
}

/// A ConfigMap to write through an engaged client.
pub fn configmap(name: &str) -> kbind_cluster::DynamicObject {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": "default"}, "data": {"k": "v"},
    }))
    .unwrap()
}

/// The ConfigMap resource.
pub fn configmaps() -> kbind_cluster::ApiResource {
    kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}
