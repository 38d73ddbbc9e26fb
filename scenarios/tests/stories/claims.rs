//! contract §4 "Connections per API": a claim that lasts. A binding that
//! serves a namespace of an API keeps it through its Connection going not Ready, a rival's
//! Connection blinking, konnector restarts and edits of other bindings: the claim is the
//! binding's `status.boundAPIs[].claimedAt`, never inferred from what its conditions say now.
//! A refused binding never overtakes a serving one; an API added to an older binding's
//! `spec.apis` where another Connection serves that namespace is refused, never a split.

use futures::FutureExt;
use futures::future::BoxFuture;
use kbind_api::consts::{annotation as kbind_annotation, condition, reason};
use kbind_api::{Binding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::{widgets, widgets_crd};
use serde_json::{Value, json};

use crate::binding_kit::bindings;
use crate::several_providers::{bind, labelled, serving, synced, synced_reason_is, writes_in};
use crate::story::*;

/// Providers `acme` (here "prov-us") and `beta` ("prov-eu"), both exporting widgets and
/// gadgets, acme's Connection allowing Bindings in `acme_namespaces` only, beta's in every
/// namespace; both Connections Ready.
async fn two_providers_allowing(story: &str, seed: u64, acme_namespaces: &str) -> World {
    let gadgets = kbind_scenarios::apis::exported_crd("gadgets", "Gadget", "Namespaced");
    crate::several_providers::two_providers_allowing(story, seed, widgets_crd(), [acme_namespaces, "*"], &[gadgets])
        .await
}

/// Sets Connection `name`'s `binding-namespaces` annotation.
async fn allow(world: &World, name: &str, namespaces: &str) {
    patch_consumer(
        world,
        &connections(),
        None,
        name,
        json!({"metadata": {"annotations": {kbind_annotation::BINDING_NAMESPACES: namespaces}}}),
    )
    .await;
}

/// `status.boundAPIs[api].claimedAt` of Binding `ns/name`.
async fn claimed_at(world: &World, ns: &str, name: &str, api: &str) -> Option<String> {
    let client = world.consumer().admin_client();
    let b = client.get_typed_opt::<Binding>(Some(ns), name).await.ok()??;
    b.status?.bound_api(api)?.claimed_at.as_ref().map(|t| t.0.to_string())
}

/// The per-API `Synced` reason of `api` on Binding `ns/name`.
async fn api_synced(world: &World, ns: &str, name: &str, api: &str) -> Option<(String, String)> {
    let client = world.consumer().admin_client();
    let b = client.get_typed_opt::<Binding>(Some(ns), name).await.ok()??;
    let c = conditions::find(&b.status?.bound_api(api)?.conditions, condition::SYNCED)?.clone();
    Some((c.status, c.reason))
}

/// A check that `api`'s `Synced` on Binding `ns/name` (status, reason) passes `wanted`.
fn api_synced_is(
    ns: &str,
    name: &str,
    api: &str,
    wanted: fn(&(String, String)) -> bool,
) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (ns, name, api) = (ns.to_string(), name.to_string(), api.to_string());
    move |w| {
        let (ns, name, api) = (ns.clone(), name.clone(), api.clone());
        async move { api_synced(w, &ns, &name, &api).await.is_some_and(|s| wanted(&s)) }.boxed()
    }
}

/// Waits until Connection `name` is Ready (`ready`) or not.
async fn until_connection_ready(world: &mut World, name: &str, ready: bool) {
    world
        .run_until_connection(name, if ready { "Ready" } else { "not Ready" }, 240, |c| {
            conditions::is_true(c.conditions(), condition::READY) == ready
        })
        .await;
}

/// The refused binding's Connection blinks, and the namespace stays with the
/// binding that serves it, its objects keep syncing and deleting.
#[tokio::test(start_paused = true)]
async fn a_refused_binding_whose_connection_blinks_never_takes_over_a_served_namespace() {
    let mut world = two_providers_allowing(
        "a_refused_binding_whose_connection_blinks_never_takes_over_a_served_namespace",
        3401,
        "team-z",
    )
    .await;
    // 1. prov-us (acme) may not bind team-a yet: its Binding is created first and refused.
    bind(&world, "acme", "team-a", "widgets-us").await;
    world
        .run_until_async(
            "widgets-us is refused: acme may not bind team-a",
            120,
            synced_reason_is(Some("team-a"), "widgets-us", reason::NAMESPACE_NOT_ALLOWED),
        )
        .await;
    // prov-eu (beta) binds team-a and serves it; a widget syncs there.
    bind(&world, "beta", "team-a", "widgets-eu").await;
    world
        .run_until_async("widgets-eu serves team-a", 120, serving(Some("team-a"), "widgets-eu"))
        .await;
    let w = create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-a", "w").await;
    assert!(
        claimed_at(&world, "team-a", "widgets-eu", WIDGETS).await.is_some(),
        "the serving binding records its claim"
    );
    // prov-us is allowed team-a: its older Binding is refused, the claim stands.
    allow(&world, "acme", "*").await;
    world
        .run_until_async(
            "widgets-us is refused: beta serves team-a",
            120,
            synced_reason_is(Some("team-a"), "widgets-us", reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    assert_eq!(claimed_at(&world, "team-a", "widgets-us", WIDGETS).await, None);

    // 2. prov-us is partitioned until its Connection says so, then healed.
    world.partition("acme");
    until_connection_ready(&mut world, "acme", false).await;
    world.steps_for(10).await;
    world.heal("acme");
    until_connection_ready(&mut world, "acme", true).await;
    // And the serving side blinks too.
    world.partition("beta");
    until_connection_ready(&mut world, "beta", false).await;
    world.steps_for(10).await;
    world.heal("beta");
    until_connection_ready(&mut world, "beta", true).await;
    world
        .run_until_async(
            "widgets-eu serves team-a again",
            120,
            serving(Some("team-a"), "widgets-eu"),
        )
        .await;

    // 3. Nothing moved: widgets-eu serves, widgets-us is refused, w is beta's and syncs.
    world.steps_for(20).await;
    assert_eq!(
        synced(&world, Some("team-a"), "widgets-us")
            .await
            .map(|s| s.1)
            .as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "the refused binding never takes over"
    );
    assert_eq!(
        synced(&world, Some("team-a"), "widgets-eu")
            .await
            .map(|s| s.0)
            .as_deref(),
        Some("True")
    );
    assert_eq!(writes_in(&world, "acme", "team-a"), 0, "prov-us never writes team-a");
    world
        .run_until_async("w still names beta", 30, labelled("team-a", "w", "beta"))
        .await;
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the spec change reaches prov-eu",
            120,
            copy_has("beta", "team-a", "w", "/spec/size", json!(7)),
        )
        .await;
    world.delete_on_consumer(&widgets(), Some("team-a"), "w").await;
    world
        .run_until_async("deleting w completes", 120, consumer_widget_gone("team-a", "w"))
        .await;
    world
        .run_until_async("prov-eu's copy is deleted", 60, copy_gone("beta", "team-a", "w"))
        .await;
    assert!(w.metadata.uid.is_some());
}

/// A serving binding keeps its claim through a konnector restart while its own Connection is
/// down, and the restarted konnector decides nothing before every binding store has listed:
/// a refused ClusterBinding that saw no Binding yet would otherwise serve every namespace.
#[tokio::test(start_paused = true)]
async fn a_restart_while_a_binding_store_has_not_listed_hands_nothing_over() {
    let mut world = two_providers_allowing(
        "a_restart_while_a_binding_store_has_not_listed_hands_nothing_over",
        3402,
        "*",
    )
    .await;
    bind(&world, "beta", "team-a", "widgets-eu").await;
    world
        .run_until_async("widgets-eu serves team-a", 120, serving(Some("team-a"), "widgets-eu"))
        .await;
    world.steps_for(2).await;
    crate::several_providers::bind_cluster(&world, "acme", "widgets-all").await;
    world
        .run_until_async(
            "acme's ClusterBinding is refused",
            120,
            synced_reason_is(None, "widgets-all", reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    create_widget(&world, "team-b", "v", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-a", "w").await;

    // The serving side goes down; its binding says Pending but keeps its claim.
    world.partition("beta");
    until_connection_ready(&mut world, "beta", false).await;
    world
        .run_until_async(
            "widgets-eu waits for its Connection",
            120,
            synced_reason_is(Some("team-a"), "widgets-eu", reason::PENDING),
        )
        .await;
    assert!(claimed_at(&world, "team-a", "widgets-eu", WIDGETS).await.is_some());
    // The konnector restarts and its Binding list fails for a while.
    world.consumer().inject_error(fakeapi::ErrorRule::new(
        Some("list"),
        Some("bindings"),
        fakeapi::InjectedError::Internal,
    ));
    world.crash_konnector();
    world.restart_konnector();
    world.steps_for(60).await;
    assert_eq!(
        synced(&world, None, "widgets-all").await.map(|s| s.1).as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "no decision on a binding store that has not listed"
    );
    assert_eq!(writes_in(&world, "acme", "team-a"), 0);
    assert_eq!(writes_in(&world, "acme", "team-b"), 0);
    world.consumer().clear_errors();
    world.steps_for(30).await;
    assert_eq!(
        synced(&world, None, "widgets-all").await.map(|s| s.1).as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "a restart while the serving Connection is down hands nothing over"
    );
    assert_eq!(writes_in(&world, "acme", "team-a"), 0);
    world.heal("beta");
    world
        .run_until_async("widgets-eu serves again", 240, serving(Some("team-a"), "widgets-eu"))
        .await;
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 3}})).await;
    world
        .run_until_async(
            "the spec change reaches beta",
            120,
            copy_has("beta", "team-a", "w", "/spec/size", json!(3)),
        )
        .await;
}

/// An API added to an older binding's `spec.apis` where another Connection serves that
/// namespace is refused, and the other bindings of the API hear of it at once.
#[tokio::test(start_paused = true)]
async fn an_api_added_to_an_older_binding_where_another_connection_serves_is_refused() {
    let mut world = two_providers_allowing(
        "an_api_added_to_an_older_binding_where_another_connection_serves_is_refused",
        3403,
        "*",
    )
    .await;
    // acme's Binding of gadgets is the older one; beta's serves widgets in team-a.
    let client = world.consumer().admin_client();
    ensure_namespace(&client, "team-a").await;
    create(
        &client,
        json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
            "metadata": {"name": "older", "namespace": "team-a"},
            "spec": {"connectionRef": {"name": "acme"}, "apis": [{"name": GADGETS}]},
        }),
    )
    .await;
    world
        .run_until_async(
            "acme serves gadgets in team-a",
            120,
            api_synced_is("team-a", "older", GADGETS, |(s, _)| s == "True"),
        )
        .await;
    world.steps_for(2).await;
    bind(&world, "beta", "team-a", "widgets-eu").await;
    world
        .run_until_async("widgets-eu serves team-a", 120, serving(Some("team-a"), "widgets-eu"))
        .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-a", "w").await;

    // kubectl edit (no CLI pre-check): the older binding now names widgets too.
    client
        .patch(
            &bindings(),
            Some("team-a"),
            "older",
            &Patch::Merge(json!({"spec": {"apis": [{"name": GADGETS}, {"name": WIDGETS}]}})),
            &PatchParams::default(),
        )
        .await
        .expect("edit spec.apis");
    world
        .run_until_async(
            "the added API is refused",
            60,
            api_synced_is("team-a", "older", WIDGETS, |(_, r)| {
                r == reason::BOUND_THROUGH_ANOTHER_CONNECTION
            }),
        )
        .await;
    world.steps_for(20).await;
    assert_eq!(
        synced(&world, Some("team-a"), "widgets-eu")
            .await
            .map(|s| s.0)
            .as_deref(),
        Some("True"),
        "the serving binding keeps team-a"
    );
    assert_eq!(writes_in(&world, "acme", "team-a"), 0, "never a split");
    assert_eq!(
        api_synced(&world, "team-a", "older", GADGETS)
            .await
            .map(|s| s.0)
            .as_deref(),
        Some("True"),
        "the older binding's own API keeps syncing"
    );
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 4}})).await;
    world
        .run_until_async(
            "widgets keep syncing to beta",
            120,
            copy_has("beta", "team-a", "w", "/spec/size", json!(4)),
        )
        .await;
}

const GADGETS: &str = "gadgets.example.org";

async fn create(client: &dyn ClusterClient, body: Value) {
    let obj: DynamicObject = serde_json::from_value(body).expect("an object");
    let ns = obj.metadata.namespace.clone();
    client
        .create(&bindings(), ns.as_deref(), &obj, &Default::default())
        .await
        .expect("create");
}

/// An API removed from the serving binding's `spec.apis` is unbound there as a deleted binding
/// unbinds it (its copies drain, its finalizers go), its claim stays until then, and only then
/// does the other Connection's binding of that namespace take it over: no object is frozen
/// between the two, none lost.
#[tokio::test(start_paused = true)]
async fn an_api_removed_from_the_serving_binding_drains_before_another_connection_takes_over() {
    let mut world = two_providers_allowing(
        "an_api_removed_from_the_serving_binding_drains_before_another_connection_takes_over",
        3404,
        "*",
    )
    .await;
    let client = world.consumer().admin_client();
    ensure_namespace(&client, "team-a").await;
    create(
        &client,
        json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
            "metadata": {"name": "serving", "namespace": "team-a"},
            "spec": {"connectionRef": {"name": "beta"}, "apis": [{"name": WIDGETS}, {"name": GADGETS}]},
        }),
    )
    .await;
    world
        .run_until_async("beta serves widgets in team-a", 120, serving(Some("team-a"), "serving"))
        .await;
    world.steps_for(2).await;
    bind(&world, "acme", "team-a", "waiting").await;
    world
        .run_until_async(
            "acme's binding waits",
            120,
            synced_reason_is(Some("team-a"), "waiting", reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    let w = create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-a", "w").await;

    client
        .patch(
            &bindings(),
            Some("team-a"),
            "serving",
            &Patch::Merge(json!({"spec": {"apis": [{"name": GADGETS}]}})),
            &PatchParams::default(),
        )
        .await
        .expect("edit spec.apis");
    world
        .run_until_async("beta's copy is drained", 120, copy_gone("beta", "team-a", "w"))
        .await;
    wait_for_copy(&mut world, "acme", "team-a", "w").await;
    world
        .run_until_async("w names acme", 60, labelled("team-a", "w", "acme"))
        .await;
    world
        .run_until_async("acme's binding serves team-a", 60, serving(Some("team-a"), "waiting"))
        .await;
    assert_eq!(
        claimed_at(&world, "team-a", "serving", WIDGETS).await,
        None,
        "the removed API's claim went with its drain"
    );
    assert_eq!(
        world
            .consumer_get(&kbind_scenarios::apis::widgets(), Some("team-a"), "w")
            .await
            .and_then(|o| o.metadata.uid),
        w.metadata.uid,
        "the consumer object is the same one"
    );
    // The gadgets API of the edited binding keeps serving.
    assert_eq!(
        api_synced(&world, "team-a", "serving", GADGETS)
            .await
            .map(|s| s.0)
            .as_deref(),
        Some("True")
    );
    patch_widget(&world, "team-a", "w", json!({"spec": {"size": 2}})).await;
    world
        .run_until_async(
            "w syncs to acme",
            60,
            copy_has("acme", "team-a", "w", "/spec/size", json!(2)),
        )
        .await;
}
