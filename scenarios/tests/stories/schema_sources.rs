//! Where schemas come from and which are pulled (contract §2, §4 "schema"): a kcp-like
//! provider's API served through its OpenAPI; pullPolicy All pulls every exported API; autoBind
//! keeps a managed ClusterBinding of every exported API.

use futures::FutureExt;
use kbind_api::consts::annotation;
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::{exported_crd, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, bundle, seed_from_env};
use serde_json::{Value, json};

use crate::story;

use story::{binding_ready, cluster_binding, copy_has, crds, create_widget};

async fn object_syncs(world: &mut World, provider: &'static str) {
    let spec = json!({"size": 2, "config": {"any": ["thing"]}});
    create_widget(world, "default", "w1", spec.clone()).await;
    world
        .run_until_async(
            "the copy reaches the provider unchanged",
            60,
            copy_has(provider, "default", "w1", "/spec", spec),
        )
        .await;
}

/// Applies Secret + Connection (with `spec` merged into the Connection's) and optionally a binding.
async fn apply(world: &mut World, provider: &str, connection_spec: Value, apis: &[&str]) {
    let cred = world.mint_admin_token(provider);
    let mut objects = bundle::bundle(provider, "kbind", &world.kubeconfig_for(&cred), apis);
    if let Some(spec) = objects[1].get_mut("spec").and_then(Value::as_object_mut)
        && let Some(extra) = connection_spec.as_object()
    {
        spec.extend(extra.clone());
    }
    for obj in objects {
        world.apply_object(obj).await;
    }
}

#[tokio::test(start_paused = true)]
async fn a_kcp_like_providers_api_is_served_from_its_openapi() {
    let mut world = World::builder()
        .seed(seed_from_env(31))
        .story("a_kcp_like_providers_api_is_served_from_its_openapi")
        .kcp_provider("kcp")
        .build()
        .await;
    // On a CRD-less provider nothing is labelled: everything outside the built-in groups is exported.
    let mut crd = widgets_crd();
    crd["metadata"]["labels"] = json!({});
    world.install_provider_crd("kcp", crd).await;
    apply(&mut world, "kcp", json!({}), &["widgets.example.org"]).await;
    world.start_konnector();
    world
        .run_until_async("the binding is Ready", 150, |w| binding_ready(w, "kcp").boxed())
        .await;
    let conn = world.connection("kcp").await.and_then(|c| c.status);
    assert_eq!(
        conn.and_then(|s| s.active_schema_source),
        Some(kbind_api::SchemaSource::OpenApi)
    );
    object_syncs(&mut world, "kcp").await;
}

#[tokio::test(start_paused = true)]
async fn pull_policy_all_pulls_every_exported_api_and_syncs_only_the_bound_one() {
    let mut world = World::builder()
        .seed(seed_from_env(32))
        .story("pull_policy_all_pulls_every_exported_api_and_syncs_only_the_bound_one")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world
        .install_provider_crd("acme", exported_crd("gadgets", "Gadget", "Cluster"))
        .await;
    apply(
        &mut world,
        "acme",
        json!({"schema": {"pullPolicy": "All"}}),
        &["widgets.example.org"],
    )
    .await;
    world.start_konnector();
    world
        .run_until_async("the binding is Ready", 150, |w| binding_ready(w, "acme").boxed())
        .await;
    world
        .run_until_async("the unbound API's CRD is pulled too", 90, |w| {
            async move { w.consumer_get(&crds(), None, "gadgets.example.org").await.is_some() }.boxed()
        })
        .await;
    let gadgets = world
        .consumer_get(&crds(), None, "gadgets.example.org")
        .await
        .expect("pulled");
    assert_eq!(
        gadgets
            .metadata
            .annotations
            .and_then(|a| a.get(annotation::CONNECTION).cloned())
            .as_deref(),
        Some("acme")
    );
    object_syncs(&mut world, "acme").await;
}

#[tokio::test(start_paused = true)]
async fn auto_bind_keeps_a_managed_binding_of_every_exported_api() {
    let mut world = World::builder()
        .seed(seed_from_env(33))
        .story("auto_bind_keeps_a_managed_binding_of_every_exported_api")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    apply(&mut world, "acme", json!({"autoBind": true}), &[]).await;
    world.start_konnector();
    let name = kbind_engine::binding::autobind_name("acme");
    world
        .run_until_async("the autoBind binding is Ready", 150, |w| {
            binding_ready(w, "autobind-acme").boxed()
        })
        .await;
    object_syncs(&mut world, "acme").await;

    // A newly exported API joins the list.
    world
        .install_provider_crd("acme", exported_crd("gadgets", "Gadget", "Cluster"))
        .await;
    world
        .run_until_async("gadgets joins the autoBind binding", 150, |w| {
            async move {
                let b = cluster_binding(w, "autobind-acme").await;
                b.is_some_and(|b| b.spec.apis.iter().any(|a| a.name == "gadgets.example.org"))
            }
            .boxed()
        })
        .await;
    // An API that stops being exported stops syncing but deletes nothing (the world checks §8.1).
    world
        .provider("acme")
        .admin_client()
        .patch(
            &crds(),
            None,
            "gadgets.example.org",
            &Patch::Merge(json!({"metadata": {"labels": {"core.kbind.io/exported": null}}})),
            &PatchParams::default(),
        )
        .await
        .expect("un-exporting gadgets");
    world.steps_for(120).await;
    assert!(
        world.consumer_get(&crds(), None, "gadgets.example.org").await.is_some(),
        "the consumer CRD stays"
    );
    assert_eq!(name, "autobind-acme");
}
