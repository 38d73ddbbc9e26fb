//! contract §4 "schema" with the Connection's pull and update policies: compatible provider
//! changes follow under `Always`, destructive ones wait for `accept-schema-hash`, `Once`
//! holds, `pullPolicy: None` uses a pre-installed CRD, and a CRD kbind did not create is never
//! overwritten (`CRDNotManaged`; §8.3's second half). §8.1, §8.2, §8.7 are checked by the
//! world after every step.

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{annotation as kbind_annotation, condition, reason};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::{widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};
use story::*;

/// The widgets CRD's `versions` with `edit` applied to the `spec` properties.
fn versions_with(edit: impl FnOnce(&mut serde_json::Map<String, Value>)) -> Value {
    let mut crd = widgets_crd();
    let props = crd
        .pointer_mut("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties")
        .and_then(Value::as_object_mut)
        .expect("the widgets spec properties");
    edit(props);
    crd["spec"]["versions"].clone()
}

async fn change_provider_schema(world: &World, versions: Value) {
    world
        .provider("acme")
        .admin_client()
        .patch(
            &crds(),
            None,
            WIDGETS,
            &Patch::Merge(json!({"spec": {"versions": versions}})),
            &PatchParams::default(),
        )
        .await
        .expect("changing the provider CRD");
}

async fn consumer_hash(world: &World) -> Option<String> {
    annotation(
        &world.consumer_get(&crds(), None, WIDGETS).await,
        kbind_annotation::SCHEMA_HASH,
    )
}

async fn consumer_has_field(world: &World, field: &str) -> bool {
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    at(
        &crd,
        &format!("/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties/{field}"),
    )
    .is_some()
}

fn set_policy(objects: &mut [Value], schema: Value) {
    objects[1]["spec"]["schema"] = schema;
}

#[tokio::test(start_paused = true)]
async fn a_compatible_provider_change_is_applied_under_always() {
    let (mut world, _) = bound_world("a_compatible_provider_change_is_applied_under_always", 601).await;
    let before = consumer_hash(&world).await.expect("the pulled CRD has a schema hash");
    assert_eq!(
        bound_api(&world, "acme", WIDGETS).await.and_then(|b| b.crd_hash),
        Some(before.clone())
    );

    change_provider_schema(
        &world,
        versions_with(|p| {
            p.insert("shape".into(), json!({"type": "string"}));
        }),
    )
    .await;
    world
        .run_until_async("the new optional field reaches the consumer CRD", 60, |w| {
            async move { consumer_has_field(w, "shape").await }.boxed()
        })
        .await;
    let after = consumer_hash(&world).await.expect("a schema hash");
    assert_ne!(after, before, "the schema hash follows the change");
    let expected = after.clone();
    world
        .run_until_async("the binding's crdHash follows", 60, move |w| {
            let expected = expected.clone();
            async move { bound_api(w, "acme", WIDGETS).await.and_then(|b| b.crd_hash) == Some(expected) }.boxed()
        })
        .await;
    // The new field syncs.
    create_widget(&world, "default", "w1", json!({"size": 1, "shape": "round"})).await;
    world
        .run_until_async(
            "the new field goes up",
            60,
            copy_has("acme", "default", "w1", "/spec/shape", json!("round")),
        )
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_field_removal_is_held_until_a_user_accepts_it() {
    let (mut world, _) = bound_world("a_field_removal_is_held_until_a_user_accepts_it", 602).await;
    let before = consumer_hash(&world).await;
    change_provider_schema(
        &world,
        versions_with(|p| {
            p.remove("color");
        }),
    )
    .await;
    world
        .run_until_async(
            "the binding reports SchemaUpdateBlocked",
            60,
            api_reason_is("acme", WIDGETS, reason::SCHEMA_UPDATE_BLOCKED),
        )
        .await;
    world.steps_for(20).await;
    assert!(
        consumer_has_field(&world, "color").await,
        "the consumer CRD keeps the field"
    );
    assert_eq!(consumer_hash(&world).await, before, "the consumer CRD is unchanged");

    // The message names the hash to accept.
    let bound = bound_api(&world, "acme", WIDGETS).await.expect("the API's status");
    let message = conditions::find(&bound.conditions, condition::SYNCED)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    let hash = message
        .split(&format!("{}: ", kbind_annotation::ACCEPT_SCHEMA_HASH))
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .map(str::to_string)
        .unwrap_or_else(|| panic!("the blocked message names the hash to accept: {message:?}"));
    assert!(hash.starts_with("sha256:"), "{hash}");
    patch_consumer(
        &world,
        &crds(),
        None,
        WIDGETS,
        json!({"metadata": {"annotations": {kbind_annotation::ACCEPT_SCHEMA_HASH: hash}}}),
    )
    .await;
    let accepted = hash.clone();
    world
        .run_until_async("the accepted change is applied", 60, move |w| {
            let accepted = accepted.clone();
            async move { !consumer_has_field(w, "color").await && consumer_hash(w).await == Some(accepted) }.boxed()
        })
        .await;
    world
        .run_until_async("the binding is Ready again", 60, |w| binding_ready(w, "acme").boxed())
        .await;
}

#[tokio::test(start_paused = true)]
async fn update_policy_once_holds_the_first_schema() {
    let (mut world, _) = bound_world_with("update_policy_once_holds_the_first_schema", 603, |objects| {
        set_policy(objects, json!({"updatePolicy": "Once"}))
    })
    .await;
    let before = consumer_hash(&world).await;
    change_provider_schema(
        &world,
        versions_with(|p| {
            p.insert("shape".into(), json!({"type": "string"}));
        }),
    )
    .await;
    world.steps_for(60).await;
    assert!(
        !consumer_has_field(&world, "shape").await,
        "Once does not follow provider changes"
    );
    assert_eq!(consumer_hash(&world).await, before);
    assert!(binding_ready(&world, "acme").await, "holding is not an error");
}

/// A world where the consumer already has the widgets CRD, installed by someone else, and the
/// bundle's Connection has `schema`.
async fn world_with_consumer_crd(story: &str, seed: u64, schema: Value) -> World {
    let mut world = World::builder()
        .seed(seed_from_env(seed))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let mut mine = widgets_crd();
    mine["metadata"]["labels"] = json!({"owner": "platform-team"});
    let crd: kbind_cluster::DynamicObject = serde_json::from_value(mine).expect("a CRD");
    world
        .consumer()
        .admin_client()
        .create(&crds(), None, &crd, &Default::default())
        .await
        .expect("pre-installing the consumer CRD");
    let cred = world.mint_admin_token("acme");
    let mut objects = kbind_scenarios::bundle::bundle(
        "acme",
        kbind_scenarios::world::NAMESPACE,
        &world.kubeconfig_for(&cred),
        &[WIDGETS],
    );
    set_policy(&mut objects, schema);
    for obj in objects {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    world
}

/// Writes by the konnector to the consumer's widgets CRD.
fn konnector_crd_writes(world: &World) -> usize {
    let konnector = world.replica_user("konnector-0");
    world
        .consumer()
        .write_log()
        .iter()
        .filter(|w| w.user == konnector && w.resource == "customresourcedefinitions.apiextensions.k8s.io")
        .filter(|w| w.name == WIDGETS)
        .count()
}

#[tokio::test(start_paused = true)]
async fn pull_policy_none_syncs_on_a_pre_installed_crd() {
    let mut world = world_with_consumer_crd(
        "pull_policy_none_syncs_on_a_pre_installed_crd",
        604,
        json!({"pullPolicy": "None"}),
    )
    .await;
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    create_widget(&world, "default", "w1", json!({"size": 5})).await;
    world
        .run_until_async(
            "the object syncs",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(5)),
        )
        .await;
    // The one write is the Connection's claim (contract §4 "Connections per API").
    assert_eq!(konnector_crd_writes(&world), 1, "pullPolicy None writes only its claim");
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    assert_eq!(annotation(&crd, kbind_annotation::CONNECTION).as_deref(), Some("acme"));
    assert!(world.consumer_get(&widgets(), Some("default"), "w1").await.is_some());
}

#[tokio::test(start_paused = true)]
async fn a_crd_kbind_did_not_create_is_never_overwritten() {
    let mut world = world_with_consumer_crd("a_crd_kbind_did_not_create_is_never_overwritten", 605, json!({})).await;
    world
        .run_until_async(
            "the binding reports CRDNotManaged",
            120,
            api_reason_is("acme", WIDGETS, reason::CRD_NOT_MANAGED),
        )
        .await;
    world.steps_for(30).await;
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    assert_eq!(konnector_crd_writes(&world), 0, "never overwritten");
    assert_eq!(label(&crd, "owner").as_deref(), Some("platform-team"));
    assert!(!binding_ready(&world, "acme").await);
    let b = cluster_binding(&world, "acme")
        .await
        .and_then(|b| b.status)
        .expect("a status");
    assert!(!conditions::is_true(&b.conditions, condition::READY));
}
