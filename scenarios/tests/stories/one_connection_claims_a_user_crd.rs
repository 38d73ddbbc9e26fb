//! contract §4 "Connections per API" under `pullPolicy: None`: the consumer's CRD was
//! installed by a user, so it carries no `core.kbind.io/connection` annotation. Of two
//! Connections binding that API, the first records its claim in that annotation (nothing else
//! of the CRD changes); the other reports `BoundThroughAnotherConnection` and syncs nothing, so
//! no object has copies on two providers.

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{annotation, reason};
use kbind_cluster::{ClusterClient, DynamicObject};
use kbind_scenarios::apis::{widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, bundle, seed_from_env, world::NAMESPACE};
use serde_json::json;
use story::{WIDGETS, api_reason, crds, create_widget};

/// Applies provider `name`'s bundle with `pullPolicy: None`.
async fn apply_with_pull_policy_none(world: &mut World, name: &str) {
    let cred = world.mint_admin_token(name);
    let mut objects = bundle::bundle(name, NAMESPACE, &world.kubeconfig_for(&cred), &[WIDGETS]);
    objects[1]["spec"]["schema"] = json!({"pullPolicy": "None"});
    for obj in objects {
        world.apply_object(obj).await;
    }
}

#[tokio::test(start_paused = true)]
async fn two_connections_on_a_user_installed_crd_one_claims_it_and_the_other_syncs_nothing() {
    let mut world = World::builder()
        .seed(seed_from_env(821))
        .story("two_connections_on_a_user_installed_crd_one_claims_it_and_the_other_syncs_nothing")
        .provider("acme", ProviderOpts::default())
        .provider("beta", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world.install_provider_crd("beta", widgets_crd()).await;
    let mut mine = widgets_crd();
    mine["metadata"]["labels"] = json!({"owner": "platform-team"});
    let mine: DynamicObject = serde_json::from_value(mine).expect("a CRD");
    world
        .consumer()
        .admin_client()
        .create(&crds(), None, &mine, &Default::default())
        .await
        .expect("the platform team installs the widgets CRD");
    let installed = world.consumer_get(&crds(), None, WIDGETS).await.expect("installed");
    apply_with_pull_policy_none(&mut world, "acme").await;
    apply_with_pull_policy_none(&mut world, "beta").await;
    world.start_konnector();
    world
        .run_until_async("one binding syncs and the other reports the claim", 150, |w| {
            async move {
                let acme = api_reason(w, "acme", WIDGETS).await;
                let beta = api_reason(w, "beta", WIDGETS).await;
                let (a, b) = (acme.as_deref(), beta.as_deref());
                matches!(
                    (a, b),
                    (
                        Some(reason::AS_EXPECTED),
                        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION)
                    ) | (
                        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
                        Some(reason::AS_EXPECTED)
                    )
                )
            }
            .boxed()
        })
        .await;
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    let claimant = story::annotation(&crd, annotation::CONNECTION).expect("the CRD records the claim");
    let other = if claimant == "acme" { "beta" } else { "acme" };
    assert_eq!(
        api_reason(&world, &claimant, WIDGETS).await.as_deref(),
        Some(reason::AS_EXPECTED),
        "the claimant is the one that syncs"
    );
    assert_eq!(
        story::at(&crd, "/spec"),
        serde_json::to_value(&installed)
            .ok()
            .and_then(|v| v.get("spec").cloned()),
        "the claim never touches the CRD's spec"
    );
    assert_eq!(story::label(&crd, "owner").as_deref(), Some("platform-team"));

    create_widget(&world, "default", "w1", json!({"size": 3})).await;
    story::wait_for_copy(&mut world, &claimant, "default", "w1").await;
    world.steps_for(30).await;
    assert!(
        world
            .provider_get(other, &widgets(), Some("default"), "w1")
            .await
            .is_none(),
        "the other Connection's provider never gets a copy"
    );
    assert_eq!(
        story::provider_widget_writes(&world, other, "patch") + story::provider_widget_writes(&world, other, "create"),
        0
    );
}
