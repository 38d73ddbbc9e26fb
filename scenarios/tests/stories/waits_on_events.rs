//! Events, not timers: an API that waits for something (here, under `pullPolicy: None`, the
//! consumer CRD a user must install) is woken by the event it waits for, the CRD's own change,
//! not by looking again every few seconds. `--resync` stays the
//! only backstop of a healthy binding; a waiting one backs off to it.

use futures::FutureExt;
use kbind_api::consts::reason;
use kbind_cluster::ClusterClient;
use kbind_scenarios::apis::widgets_crd;
use kbind_scenarios::world::ProviderOpts;
use kbind_scenarios::{World, seed_from_env};
use serde_json::json;

use crate::story::*;

/// The konnector's reads of the consumer's widgets CRD so far.
fn crd_reads(world: &World) -> usize {
    let konnector = world.replica_user("konnector-0");
    world
        .consumer()
        .request_log()
        .iter()
        .filter(|r| r.user == konnector && r.verb == "get" && r.name == WIDGETS)
        .filter(|r| r.resource.starts_with("customresourcedefinitions"))
        .count()
}

#[tokio::test(start_paused = true)]
async fn an_api_waiting_for_its_crd_is_woken_when_it_is_installed_not_by_polling() {
    let story = "an_api_waiting_for_its_crd_is_woken_when_it_is_installed_not_by_polling";
    let mut world = World::builder()
        .seed(seed_from_env(3410))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    let mut objects = kbind_scenarios::bundle::bundle(
        "acme",
        kbind_scenarios::world::NAMESPACE,
        &world.kubeconfig_for(&cred),
        &[WIDGETS],
    );
    objects[1]["spec"]["schema"] = json!({"pullPolicy": "None"});
    for obj in objects {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    world
        .run_until_async(
            "the binding waits for the CRD to be installed",
            120,
            api_reason_is("acme", WIDGETS, reason::PENDING),
        )
        .await;
    let before = crd_reads(&world);
    world.steps_for(120).await;
    let polled = crd_reads(&world) - before;
    assert!(
        polled <= 8,
        "a waiting API backs off while it waits for an event: {polled} reads of its CRD in two minutes (a look every 2 s, as before, made over 100)"
    );
    // The user installs the CRD: its event wakes the binding at once.
    let crd: kbind_cluster::DynamicObject = serde_json::from_value(widgets_crd()).expect("a CRD");
    world
        .consumer()
        .admin_client()
        .create(&crds(), None, &crd, &Default::default())
        .await
        .expect("installing the consumer CRD");
    world
        .run_until_async("the binding serves as soon as the CRD is there", 5, |w| {
            binding_ready(w, "acme").boxed()
        })
        .await;
}
