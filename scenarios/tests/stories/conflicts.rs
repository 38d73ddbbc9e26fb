//! contract §4 "conflicts" and "Connections per API", for a single consumer: Fail leaves
//! a foreign provider object alone and signals it, Adopt takes it over, another consumer's
//! copy is never touched, and a second Connection binding the same API syncs nothing and
//! deletes nothing when unbound (§8.3 checked here; §8.1, §8.2, §8.7 by the world).

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{annotation as kbind_annotation, condition, finalizer, reason};
use kbind_cluster::{ClusterClient, DynamicObject};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};
use story::*;

/// Creates `default/<name>` directly on provider `acme`, with `annotations`.
async fn provider_object(world: &World, name: &str, annotations: Value) -> DynamicObject {
    let mut obj = widget("default", name, json!({"size": 9}));
    obj.metadata.annotations = serde_json::from_value(annotations).expect("annotations");
    let client = world.provider("acme").admin_client();
    ensure_namespace(&client, "default").await;
    client
        .create(&widgets(), Some("default"), &obj, &Default::default())
        .await
        .expect("creating a provider object")
}

fn conflict_is(name: &str, why: &str) -> impl for<'w> Fn(&'w World) -> futures::future::BoxFuture<'w, bool> + use<> {
    widget_has(
        "default",
        name,
        &meta_key("annotations", kbind_annotation::CONFLICT),
        json!(why),
    )
}

async fn warning_events_for(world: &World, name: &str, why: &str) -> usize {
    let events = world
        .consumer()
        .admin_client()
        .list(
            &kbind_engine::events::event_resource(),
            Some("default"),
            &Default::default(),
        )
        .await
        .expect("listing events");
    events
        .items
        .iter()
        .filter(|e| {
            e.data.get("type") == Some(&json!("Warning"))
                && e.data.get("reason") == Some(&json!(why))
                && e.data.pointer("/regarding/name") == Some(&json!(name))
        })
        .count()
}

fn adopt(objects: &mut [Value]) {
    objects[2]["spec"]["conflictPolicy"] = json!("Adopt");
}

#[tokio::test(start_paused = true)]
async fn fail_leaves_a_foreign_provider_object_alone_and_says_so() {
    let (mut world, _) = bound_world("fail_leaves_a_foreign_provider_object_alone_and_says_so", 801).await;
    let foreign = provider_object(&world, "w1", json!({})).await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create_widget(&world, "default", "w2", json!({"size": 2})).await;

    world
        .run_until_async(
            "w1 is annotated ForeignObjectExists",
            60,
            conflict_is("w1", reason::FOREIGN_OBJECT_EXISTS),
        )
        .await;
    world
        .run_until_async("the binding counts the conflict", 60, |w| {
            async move {
                let b = cluster_binding(w, "acme").await.and_then(|b| b.status);
                b.is_some_and(|s| {
                    conditions::is_true(&s.conditions, condition::CONFLICTS)
                        && s.bound_api(WIDGETS).is_some_and(|a| a.conflict_count == 1)
                })
            }
            .boxed()
        })
        .await;
    assert_eq!(warning_events_for(&world, "w1", reason::FOREIGN_OBJECT_EXISTS).await, 1);
    let w2 = wait_for_copy(&mut world, "acme", "default", "w2").await;
    assert_eq!(
        at(&Some(w2), "/spec/size"),
        Some(json!(2)),
        "other objects keep syncing"
    );

    world.steps_for(20).await;
    let live = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        live.as_ref().and_then(|o| o.metadata.resource_version.clone()),
        foreign.metadata.resource_version,
        "the foreign object is left alone"
    );
    assert_eq!(annotation(&live, kbind_annotation::CONSUMER_CLUSTER_UID), None);
    assert_eq!(
        warning_events_for(&world, "w1", reason::FOREIGN_OBJECT_EXISTS).await,
        1,
        "one event, not a storm"
    );

    // The foreign object goes away: w1 syncs and the conflict clears everywhere.
    world
        .provider("acme")
        .admin_client()
        .delete(&widgets(), Some("default"), "w1", &Default::default())
        .await
        .expect("deleting the foreign object");
    world
        .run_until_async("w1 syncs once the way is clear", 60, |w| {
            async move {
                let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                annotation(&copy, kbind_annotation::CONSUMER_CLUSTER_UID).is_some()
                    && at(&copy, "/spec/size") == Some(json!(1))
            }
            .boxed()
        })
        .await;
    world
        .run_until_async("the conflict is cleared on the object and the binding", 60, |w| {
            async move {
                let mine = w.consumer_get(&widgets(), Some("default"), "w1").await;
                let b = cluster_binding(w, "acme").await.and_then(|b| b.status);
                annotation(&mine, kbind_annotation::CONFLICT).is_none()
                    && b.is_some_and(|s| {
                        !conditions::is_true(&s.conditions, condition::CONFLICTS)
                            && s.bound_api(WIDGETS).is_some_and(|a| a.conflict_count == 0)
                    })
            }
            .boxed()
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn deleting_a_conflicted_object_leaves_the_foreign_provider_object_alone() {
    let (mut world, _) = bound_world(
        "deleting_a_conflicted_object_leaves_the_foreign_provider_object_alone",
        805,
    )
    .await;
    let foreign = provider_object(&world, "w1", json!({})).await;
    let theirs = provider_object(
        &world,
        "w2",
        json!({kbind_annotation::CONSUMER_CLUSTER_UID: "another-consumer", kbind_annotation::CONSUMER_OBJECT_UID: "x"}),
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create_widget(&world, "default", "w2", json!({"size": 1})).await;
    world
        .run_until_async(
            "w1 is in conflict",
            60,
            conflict_is("w1", reason::FOREIGN_OBJECT_EXISTS),
        )
        .await;
    world
        .run_until_async("w2 is in conflict", 60, conflict_is("w2", reason::OWNED_BY_ANOTHER))
        .await;

    world.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    world.delete_on_consumer(&widgets(), Some("default"), "w2").await;
    world
        .run_until_async("both consumer deletes complete", 60, |w| {
            async move {
                consumer_widget_gone("default", "w1")(w).await && consumer_widget_gone("default", "w2")(w).await
            }
            .boxed()
        })
        .await;
    world.steps_for(10).await;
    for (name, before) in [("w1", &foreign), ("w2", &theirs)] {
        let live = world.provider_get("acme", &widgets(), Some("default"), name).await;
        assert_eq!(
            live.and_then(|o| o.metadata.resource_version),
            before.metadata.resource_version,
            "{name} on the provider is not ours and stays untouched"
        );
    }
    assert_eq!(provider_widget_writes(&world, "acme", "delete"), 0);
}

#[tokio::test(start_paused = true)]
async fn adopt_stamps_our_markers_and_syncs() {
    let (mut world, _) = bound_world_with("adopt_stamps_our_markers_and_syncs", 802, adopt).await;
    let foreign = provider_object(&world, "w1", json!({})).await;
    let mine = create_widget(&world, "default", "w1", json!({"size": 1})).await;

    world
        .run_until_async(
            "the adopted object carries the consumer spec",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(1)),
        )
        .await;
    let live = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        live.as_ref().and_then(|o| o.metadata.uid.clone()),
        foreign.metadata.uid,
        "adopted, not replaced"
    );
    assert_eq!(
        annotation(&live, kbind_annotation::CONSUMER_OBJECT_UID),
        mine.metadata.uid
    );
    assert!(annotation(&live, kbind_annotation::CONSUMER_CLUSTER_UID).is_some());
    let me = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(annotation(&me, kbind_annotation::CONFLICT), None);
}

#[tokio::test(start_paused = true)]
async fn another_consumers_copy_is_owned_by_another_even_under_adopt() {
    let (mut world, _) = bound_world_with(
        "another_consumers_copy_is_owned_by_another_even_under_adopt",
        803,
        adopt,
    )
    .await;
    let theirs = provider_object(
        &world,
        "w1",
        json!({kbind_annotation::CONSUMER_CLUSTER_UID: "another-consumer", kbind_annotation::CONSUMER_OBJECT_UID: "their-object"}),
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    world
        .run_until_async(
            "w1 is annotated OwnedByAnother",
            60,
            conflict_is("w1", reason::OWNED_BY_ANOTHER),
        )
        .await;
    world.steps_for(20).await;
    let live = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(
        live.and_then(|o| o.metadata.resource_version),
        theirs.metadata.resource_version,
        "another consumer's object is never modified"
    );
    assert_eq!(warning_events_for(&world, "w1", reason::OWNED_BY_ANOTHER).await, 1);
}

#[tokio::test(start_paused = true)]
async fn a_second_connection_for_the_same_api_syncs_nothing_and_deletes_nothing() {
    let mut world = World::builder()
        .seed(seed_from_env(804))
        .story("a_second_connection_for_the_same_api_syncs_nothing_and_deletes_nothing")
        .provider("acme", ProviderOpts::default())
        .provider("beta", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world.install_provider_crd("beta", widgets_crd()).await;
    let acme = world.mint_admin_token("acme");
    world.apply_bundle("acme", &acme, &[WIDGETS]).await;
    world.start_konnector();
    world
        .run_until_async("acme's binding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    let beta = world.mint_admin_token("beta");
    world.apply_bundle("beta", &beta, &[WIDGETS]).await;
    world
        .run_until_async(
            "beta's binding reports BoundThroughAnotherConnection",
            120,
            api_reason_is("beta", WIDGETS, reason::BOUND_THROUGH_ANOTHER_CONNECTION),
        )
        .await;
    create_widget(&world, "default", "w2", json!({"size": 2})).await;
    wait_for_copy(&mut world, "acme", "default", "w2").await;
    world.steps_for(10).await;
    assert_eq!(
        provider_widget_writes(&world, "beta", "patch") + provider_widget_writes(&world, "beta", "create"),
        0
    );
    let crd = world.consumer_get(&crds(), None, WIDGETS).await;
    assert_eq!(annotation(&crd, kbind_annotation::CONNECTION).as_deref(), Some("acme"));

    world.delete_on_consumer(&cluster_bindings(), None, "beta").await;
    world
        .run_until_async("beta's binding is gone", 60, |w| {
            async move { w.consumer_get(&cluster_bindings(), None, "beta").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(10).await;
    assert!(
        world.consumer_get(&crds(), None, WIDGETS).await.is_some(),
        "acme's CRD stays"
    );
    for name in ["w1", "w2"] {
        let mine = world.consumer_get(&widgets(), Some("default"), name).await;
        let finalizers = mine.and_then(|o| o.metadata.finalizers).unwrap_or_default();
        assert!(
            finalizers.iter().any(|f| f == finalizer::SYNCER),
            "{name} still served by acme"
        );
        assert!(
            world
                .provider_get("acme", &widgets(), Some("default"), name)
                .await
                .is_some()
        );
    }
    assert_eq!(provider_widget_writes(&world, "acme", "delete"), 0);
    patch_widget(&world, "default", "w1", json!({"spec": {"size": 6}})).await;
    world
        .run_until_async(
            "acme keeps syncing",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(6)),
        )
        .await;
}
