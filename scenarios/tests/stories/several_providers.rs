//! contract §4 "Connections per API": one consumer API served by two providers, each
//! namespace through exactly one Connection. Bindings partition the API by namespace; a binding
//! that would make two Connections serve one namespace (or a ClusterBinding beside another
//! Connection's bindings) gets `BoundThroughAnotherConnection` and syncs nothing, never a
//! takeover; an incompatible second schema is refused naming both Connections; a namespace moves
//! between providers by deleting one Binding and creating another, with no consumer object lost
//! (the old provider's copies drained as an unbind drains them); the consumer CRD goes only with
//! the last binding through any Connection; each object's label names its Connection.
//!
//! The stories real servers tell too live in `kbind_scenarios::told` (run in on_any_stage.rs);
//! here are the ones told on the fake world only (a partition mid-hand-over, a compatible
//! superset, the CRD with the last binding, bindings made in the same second), and the helpers
//! claims.rs and seeded_several_providers.rs share.

#![allow(dead_code)]

use futures::FutureExt;
use futures::future::BoxFuture;
use kbind_api::consts::{annotation as kbind_annotation, condition, label as kbind_label, reason};
use kbind_api::{Binding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject};
use kbind_scenarios::apis::{exported_crd, widgets, widgets_crd};
use kbind_scenarios::world::ProviderOpts;
use kbind_scenarios::{World, seed_from_env};
use serde_json::{Value, json};

use crate::binding_kit::{allow_binding_namespaces, bindings};
use crate::story::*;

/// The two providers.
pub const PROVIDERS: [&str; 2] = ["acme", "beta"];

/// A world with providers `acme` and `beta`, each exporting widgets (`beta`'s CRD is
/// `beta_crd`), a Connection to each that allows Bindings in every namespace, no binding, and
/// konnector-0 running with both Connections Ready.
pub async fn two_providers(story: &str, seed: u64, beta_crd: Value) -> World {
    two_providers_allowing(story, seed, beta_crd, ["*", "*"], &[]).await
}

/// [`two_providers`] whose Connections allow Bindings in `namespaces` (acme's, beta's), with
/// `more` CRDs exported by both providers.
pub async fn two_providers_allowing(
    story: &str,
    seed: u64,
    beta_crd: Value,
    namespaces: [&str; 2],
    more: &[Value],
) -> World {
    let mut world = World::builder()
        .seed(seed_from_env(seed))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .provider("beta", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world.install_provider_crd("beta", beta_crd).await;
    for (provider, allowed) in PROVIDERS.into_iter().zip(namespaces) {
        for crd in more {
            world.install_provider_crd(provider, crd.clone()).await;
        }
        let cred = world.mint_admin_token(provider);
        let mut objects = kbind_scenarios::bundle::bundle(
            provider,
            kbind_scenarios::world::NAMESPACE,
            &world.kubeconfig_for(&cred),
            &[],
        );
        allow_binding_namespaces(&mut objects, allowed);
        for obj in objects {
            world.apply_object(obj).await;
        }
    }
    world.start_konnector();
    for provider in PROVIDERS {
        world
            .run_until_connection(provider, "Ready", 120, |c| {
                conditions::is_true(c.conditions(), condition::READY)
            })
            .await;
    }
    world
}

/// Creates Binding `ns/name` of widgets through Connection `connection`, its namespace first.
pub async fn bind(world: &World, connection: &str, ns: &str, name: &str) {
    let client = world.consumer().admin_client();
    ensure_namespace(&client, ns).await;
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"connectionRef": {"name": connection}, "apis": [{"name": WIDGETS}]},
    }))
    .expect("a Binding object");
    client
        .create(&bindings(), Some(ns), &body, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating Binding {ns}/{name}: {e}"));
}

/// Creates ClusterBinding `name` of widgets through Connection `connection`.
pub async fn bind_cluster(world: &World, connection: &str, name: &str) {
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
        "metadata": {"name": name},
        "spec": {"connectionRef": {"name": connection}, "apis": [{"name": WIDGETS}]},
    }))
    .expect("a ClusterBinding object");
    world
        .consumer()
        .admin_client()
        .create(&cluster_bindings(), None, &body, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating ClusterBinding {name}: {e}"));
}

/// The per-API `Synced` condition of widgets on Binding `ns/name` (`None` namespace: the
/// ClusterBinding `name`): its status, reason and message.
pub async fn synced(world: &World, ns: Option<&str>, name: &str) -> Option<(String, String, String)> {
    let client = world.consumer().admin_client();
    let status = match ns {
        Some(ns) => client.get_typed_opt::<Binding>(Some(ns), name).await.ok()??.status?,
        None => cluster_binding(world, name).await?.status?,
    };
    let c = conditions::find(&status.bound_api(WIDGETS)?.conditions, condition::SYNCED)?.clone();
    Some((c.status, c.reason, c.message))
}

/// A check that the per-API `Synced` reason of widgets on a binding is `reason`.
pub fn synced_reason_is(
    ns: Option<&str>,
    name: &str,
    reason: &str,
) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (ns, name, reason) = (ns.map(str::to_string), name.to_string(), reason.to_string());
    move |w| {
        let (ns, name, reason) = (ns.clone(), name.clone(), reason.clone());
        async move {
            synced(w, ns.as_deref(), &name)
                .await
                .is_some_and(|(_, r, _)| r == reason)
        }
        .boxed()
    }
}

/// A check that widgets on a binding is syncing (`Synced=True`).
pub fn serving(ns: Option<&str>, name: &str) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (ns, name) = (ns.map(str::to_string), name.to_string());
    move |w| {
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            synced(w, ns.as_deref(), &name)
                .await
                .is_some_and(|(s, _, _)| s == "True")
        }
        .boxed()
    }
}

/// The Connection label of consumer widget `ns/name`.
pub async fn served_by(world: &World, ns: &str, name: &str) -> Option<String> {
    label(
        &world.consumer_get(&widgets(), Some(ns), name).await,
        kbind_label::CONNECTION,
    )
}

/// A check that consumer widget `ns/name` is labelled with Connection `connection`.
pub fn labelled(ns: &str, name: &str, connection: &str) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (ns, name, connection) = (ns.to_string(), name.to_string(), connection.to_string());
    move |w| {
        let (ns, name, connection) = (ns.clone(), name.clone(), connection.clone());
        async move { served_by(w, &ns, &name).await.as_deref() == Some(connection.as_str()) }.boxed()
    }
}

/// Widget writes (create, apply or delete) on `provider` in namespace `ns` so far.
pub fn writes_in(world: &World, provider: &str, ns: &str) -> usize {
    world
        .provider(provider)
        .write_log()
        .iter()
        .filter(|w| w.resource.starts_with("widgets.") && w.namespace == ns)
        .count()
}

/// The consumer CRD's `core.kbind.io/connection` annotation (`None` when the CRD is gone).
pub async fn crd_claimed_by(world: &World) -> Option<String> {
    annotation(
        &world.consumer_get(&crds(), None, WIDGETS).await,
        kbind_annotation::CONNECTION,
    )
}

/// [`two_providers`] with widgets of `team-a` served through acme and of `team-b` through beta,
/// both Bindings (`widgets`) serving.
pub async fn partitioned(story: &str, seed: u64) -> World {
    let mut world = two_providers(story, seed, widgets_crd()).await;
    bind(&world, "acme", "team-a", "widgets").await;
    bind(&world, "beta", "team-b", "widgets").await;
    for ns in ["team-a", "team-b"] {
        world
            .run_until_async(&format!("{ns} is served"), 120, serving(Some(ns), "widgets"))
            .await;
    }
    world
}

#[tokio::test(start_paused = true)]
async fn a_compatible_superset_from_the_second_provider_is_served() {
    // beta's widgets have one more field: every consumer field is kept there.
    let mut beta_crd = exported_crd("widgets", "Widget", "Namespaced");
    let spec_props = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    if let Some(props) = beta_crd.pointer_mut(spec_props).and_then(Value::as_object_mut) {
        props.insert("zone".into(), json!({"type": "string"}));
    }
    let mut world = two_providers(
        "a_compatible_superset_from_the_second_provider_is_served",
        2604,
        beta_crd,
    )
    .await;
    bind(&world, "acme", "team-a", "widgets").await;
    world
        .run_until_async("acme serves team-a", 120, serving(Some("team-a"), "widgets"))
        .await;
    bind(&world, "beta", "team-b", "widgets").await;
    world
        .run_until_async("beta serves team-b", 60, serving(Some("team-b"), "widgets"))
        .await;
    create_widget(&world, "team-b", "w", json!({"size": 3, "color": "blue"})).await;
    world
        .run_until_async(
            "beta has team-b's widget",
            60,
            copy_has("beta", "team-b", "w", "/spec/color", json!("blue")),
        )
        .await;
    assert_eq!(
        crd_claimed_by(&world).await.as_deref(),
        Some("acme"),
        "acme's schema stays the consumer's"
    );
}

#[tokio::test(start_paused = true)]
async fn a_cluster_binding_is_refused_beside_another_connections_bindings_and_the_reverse() {
    let mut world = two_providers(
        "a_cluster_binding_is_refused_beside_another_connections_bindings_and_the_reverse",
        2605,
        widgets_crd(),
    )
    .await;
    bind(&world, "acme", "team-a", "widgets").await;
    world
        .run_until_async("acme serves team-a", 120, serving(Some("team-a"), "widgets"))
        .await;
    bind_cluster(&world, "beta", "beta").await;
    world
        .run_until_async(
            "beta's ClusterBinding is refused",
            60,
            synced_reason_is(None, "beta", reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    create_widget(&world, "team-c", "w", json!({"size": 1})).await;
    world.steps_for(10).await;
    assert_eq!(
        provider_widget_writes(&world, "beta", "create") + provider_widget_writes(&world, "beta", "patch"),
        0,
        "a refused ClusterBinding syncs nothing, not even namespaces nobody serves"
    );

    // The reverse: once acme's Binding goes, beta's ClusterBinding serves the whole API, and a
    // Binding through acme is refused beside it.
    world.delete_on_consumer(&bindings(), Some("team-a"), "widgets").await;
    world
        .run_until_async("beta's ClusterBinding serves", 60, serving(None, "beta"))
        .await;
    wait_for_copy(&mut world, "beta", "team-c", "w").await;
    bind(&world, "acme", "team-d", "widgets").await;
    world
        .run_until_async(
            "acme's Binding beside beta's ClusterBinding is refused",
            60,
            synced_reason_is(Some("team-d"), "widgets", reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    create_widget(&world, "team-d", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-d", "w").await;
    world.steps_for(5).await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("team-d"), "w")
            .await
            .is_none()
    );
}

#[tokio::test(start_paused = true)]
async fn a_konnector_restarted_mid_hand_over_loses_nothing() {
    let mut world = two_providers("a_konnector_restarted_mid_hand_over_loses_nothing", 2606, widgets_crd()).await;
    bind(&world, "acme", "team-a", "widgets").await;
    bind(&world, "beta", "team-a", "widgets-beta").await;
    world
        .run_until_async("acme serves team-a", 120, serving(Some("team-a"), "widgets"))
        .await;
    let mut uids = Vec::new();
    for name in ["w1", "w2"] {
        uids.push(
            create_widget(&world, "team-a", name, json!({"size": 1}))
                .await
                .metadata
                .uid,
        );
        wait_for_copy(&mut world, "acme", "team-a", name).await;
    }
    // acme is cut off, so its Binding's drain cannot finish before the crash.
    world.partition("acme");
    world.delete_on_consumer(&bindings(), Some("team-a"), "widgets").await;
    world
        .run_until_async(
            "beta waits for the hand-over",
            60,
            synced_reason_is(Some("team-a"), "widgets-beta", reason::PENDING),
        )
        .await;
    world.steps_for(5).await;
    assert_eq!(writes_in(&world, "beta", "team-a"), 0, "beta waits while acme drains");
    world.crash_konnector();
    world.heal("acme");
    world.start_konnector();
    for name in ["w1", "w2"] {
        world
            .run_until_async(
                &format!("acme's copy of {name} is drained"),
                120,
                copy_gone("acme", "team-a", name),
            )
            .await;
        wait_for_copy(&mut world, "beta", "team-a", name).await;
    }
    for (name, uid) in ["w1", "w2"].into_iter().zip(&uids) {
        let live = world.consumer_get(&widgets(), Some("team-a"), name).await;
        assert_eq!(
            live.and_then(|w| w.metadata.uid).as_ref(),
            uid.as_ref(),
            "{name} is the same consumer object"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn the_consumer_crd_goes_only_with_the_last_binding_through_any_connection() {
    let mut world = partitioned(
        "the_consumer_crd_goes_only_with_the_last_binding_through_any_connection",
        2607,
    )
    .await;
    create_widget(&world, "team-b", "w", json!({"size": 1})).await;
    wait_for_copy(&mut world, "beta", "team-b", "w").await;

    // acme pulled the CRD; its last binding going leaves it to beta.
    world.delete_on_consumer(&bindings(), Some("team-a"), "widgets").await;
    world
        .run_until_async("acme's Binding is gone", 60, |w| {
            async move {
                w.consumer()
                    .admin_client()
                    .get_typed_opt::<Binding>(Some("team-a"), "widgets")
                    .await
                    .ok()
                    .flatten()
                    .is_none()
            }
            .boxed()
        })
        .await;
    world.steps_for(5).await;
    assert!(
        world.consumer_get(&crds(), None, WIDGETS).await.is_some(),
        "beta still serves the API"
    );
    assert!(world.consumer_get(&widgets(), Some("team-b"), "w").await.is_some());
    assert!(
        world
            .provider_get("beta", &widgets(), Some("team-b"), "w")
            .await
            .is_some()
    );

    world.delete_on_consumer(&bindings(), Some("team-b"), "widgets").await;
    world
        .run_until_async("the last binding takes the CRD with it", 120, |w| {
            async move { w.consumer_get(&crds(), None, WIDGETS).await.is_none() }.boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn two_bindings_of_one_namespace_made_in_the_same_second_leave_exactly_one_serving() {
    let mut world = two_providers(
        "two_bindings_of_one_namespace_made_in_the_same_second_leave_exactly_one_serving",
        2608,
        widgets_crd(),
    )
    .await;
    // Same namespace, same name, same creation second: only the Connection tells them apart.
    let client = world.consumer().admin_client();
    ensure_namespace(&client, "team-a").await;
    for connection in PROVIDERS {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
            "metadata": {"name": format!("widgets-{connection}"), "namespace": "team-a"},
            "spec": {"connectionRef": {"name": connection}, "apis": [{"name": WIDGETS}]},
        }))
        .expect("a Binding object");
        client
            .create(&bindings(), Some("team-a"), &body, &Default::default())
            .await
            .expect("creating a Binding");
    }
    world
        .run_until_async("one of them serves team-a", 120, |w| {
            async move {
                serving(Some("team-a"), "widgets-acme")(w).await || serving(Some("team-a"), "widgets-beta")(w).await
            }
            .boxed()
        })
        .await;
    create_widget(&world, "team-a", "w", json!({"size": 1})).await;
    world
        .run_until_async("the widget is labelled", 60, |w| {
            async move { served_by(w, "team-a", "w").await.is_some() }.boxed()
        })
        .await;
    world.steps_for(10).await;
    let winner = served_by(&world, "team-a", "w").await.unwrap_or_default();
    let loser = if winner == "acme" { "beta" } else { "acme" };
    assert_eq!(
        synced(&world, Some("team-a"), &format!("widgets-{loser}"))
            .await
            .map(|s| s.1)
            .as_deref(),
        Some(reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        "the other binding is refused"
    );
    assert!(
        world
            .provider_get(&winner, &widgets(), Some("team-a"), "w")
            .await
            .is_some()
    );
    assert_eq!(writes_in(&world, loser, "team-a"), 0, "{loser} never wrote team-a");
}

/// Provider credentials that may not list ConfigMaps (least privilege, as on real servers) do
/// not block the unbind of a Binding whose rules name Secrets only: its related copy still moves
/// with its namespace to the other provider.
#[tokio::test(start_paused = true)]
async fn a_related_copy_moves_when_the_first_provider_may_not_list_configmaps() {
    let story = "several_providers::a_related_copy_moves_when_the_first_provider_may_not_list_configmaps";
    let mut stage = kbind_scenarios::FakeStage::two_providers(story, seed_from_env(3706), widgets_crd()).await;
    stage.world.provider("acme").inject_error(fakeapi::ErrorRule::new(
        Some("list"),
        Some("configmaps"),
        fakeapi::InjectedError::Forbidden,
    ));
    kbind_scenarios::told::a_related_copy_moves_with_its_namespace_to_the_other_provider(&mut stage).await;
}
