//! contract §4 "provider-side changes" and docs/decisions.md: an API that stops being exported
//! stays in the managed autoBind binding with its per-API `APINotExported` condition, like in
//! any other binding; dropping it from the list would leave its objects served by no binding at
//! all (no condition, nothing to drain them on unbind). Nothing is deleted either way.

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{finalizer, reason};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::{exported_crd, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, bundle, seed_from_env, world::NAMESPACE};
use serde_json::json;
use story::{WIDGETS, api_reason, api_reason_is, cluster_binding, crds, create_widget};

#[tokio::test(start_paused = true)]
async fn an_api_that_stops_being_exported_stays_in_the_autobind_binding_with_its_condition() {
    let mut world = World::builder()
        .seed(seed_from_env(931))
        .story("an_api_that_stops_being_exported_stays_in_the_autobind_binding_with_its_condition")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world
        .install_provider_crd("acme", exported_crd("gadgets", "Gadget", "Cluster"))
        .await;
    let cred = world.mint_admin_token("acme");
    let mut objects = bundle::bundle("acme", NAMESPACE, &world.kubeconfig_for(&cred), &[]);
    objects[1]["spec"]["autoBind"] = json!(true);
    for obj in objects {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    let name = kbind_engine::binding::autobind_name("acme");
    world
        .run_until_async("widgets syncs through the autoBind binding", 150, {
            let name = name.clone();
            move |w| {
                let name = name.clone();
                async move { api_reason(w, &name, WIDGETS).await.as_deref() == Some(reason::AS_EXPECTED) }.boxed()
            }
        })
        .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    story::wait_for_copy(&mut world, "acme", "default", "w1").await;

    world
        .provider("acme")
        .admin_client()
        .patch(
            &crds(),
            None,
            WIDGETS,
            &Patch::Merge(json!({"metadata": {"labels": {"core.kbind.io/exported": null}}})),
            &PatchParams::default(),
        )
        .await
        .expect("un-exporting widgets");
    world
        .run_until_async(
            "widgets reports APINotExported on the autoBind binding",
            150,
            api_reason_is("autobind-acme", WIDGETS, reason::API_NOT_EXPORTED),
        )
        .await;
    world.steps_for(60).await;
    let binding = cluster_binding(&world, &name)
        .await
        .expect("the autoBind binding stays");
    let listed: Vec<String> = binding.spec.apis.iter().map(|a| a.name.clone()).collect();
    assert_eq!(listed, ["gadgets.example.org", WIDGETS], "widgets stays listed");
    assert_eq!(
        api_reason(&world, &name, WIDGETS).await.as_deref(),
        Some(reason::API_NOT_EXPORTED)
    );
    assert!(
        world.consumer_get(&crds(), None, WIDGETS).await.is_some(),
        "the consumer CRD stays"
    );
    let w1 = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(
        w1.and_then(|o| o.metadata.finalizers)
            .unwrap_or_default()
            .iter()
            .any(|f| f == finalizer::SYNCER),
        "the object keeps its finalizer: its copy is still on the provider"
    );
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_some()
    );
}
