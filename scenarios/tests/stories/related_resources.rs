//! Related resources end to end: a ClusterBinding of widgets copies a consumer Secret up
//! (label selector) and a provider ConfigMap and Secret down (names), leaves a user's own
//! Secret of the same name alone with a `Conflicts` condition, and collects the provider copy
//! when its source stops matching; §8 is checked after every step.

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{annotation, condition, label, reason};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use kbind_scenarios::World;
use serde_json::{Value, json};

use crate::story;

use story::{bound_world, cluster_binding, cluster_bindings, create_widget, secrets};

const PASSWORD: &str = "hunter2-do-not-log";

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a story object is valid")
}

async fn binding_condition(world: &World, type_: &str) -> Option<(String, String)> {
    let status = cluster_binding(world, "acme").await?.status?;
    conditions::find(&status.conditions, type_).map(|c| (c.status.clone(), c.reason.clone()))
}

fn annotation_of<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

async fn create(client: &dyn ClusterClient, res: &ApiResource, obj: Value) {
    let obj = object(obj);
    let ns = obj.metadata.namespace.clone();
    client
        .create(res, ns.as_deref(), &obj, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", obj.metadata.name));
}

#[tokio::test(start_paused = true)]
async fn related_secrets_and_configmaps_are_copied_both_ways_and_collected_when_unmatched() {
    let (mut world, _cred) = bound_world(
        "related_secrets_and_configmaps_are_copied_both_ways_and_collected_when_unmatched",
        33,
    )
    .await;

    let consumer = world.consumer().admin_client();
    let provider = world.provider("acme").admin_client();
    // A widget puts namespace `default` in use; the sources and a user's own Secret.
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create(
        &consumer,
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-creds", "namespace": "default", "labels": {"share": "yes"}},
        "stringData": {"password": PASSWORD}}),
    )
    .await;
    create(
        &consumer,
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "private", "namespace": "default", "labels": {"share": "no"}},
        "stringData": {"password": "x"}}),
    )
    .await;
    create(
        &consumer,
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "provider-token", "namespace": "default"},
        "stringData": {"token": "the-users-own"}}),
    )
    .await;
    create(
        &provider,
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "endpoints", "namespace": "default"}, "data": {"url": "https://db.acme"}}),
    )
    .await;
    create(
        &provider,
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "provider-token", "namespace": "default"}, "stringData": {"token": "from-acme"}}),
    )
    .await;
    let users_secret = world
        .consumer_get(&secrets(), Some("default"), "provider-token")
        .await
        .unwrap();

    consumer
        .patch(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "secrets", "direction": "FromConsumer",
                 "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}},
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
                {"group": "", "resource": "secrets", "direction": "FromProvider", "selector": {"names": ["provider-token"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .expect("adding related resources to the binding");

    copied_both_ways(&mut world, "the Secret goes up and the ConfigMap comes down").await;
    let source = world
        .consumer_get(&secrets(), Some("default"), "db-creds")
        .await
        .unwrap();
    let up = world
        .provider_get("acme", &secrets(), Some("default"), "db-creds")
        .await
        .unwrap();
    assert_eq!(up.data["data"], source.data["data"]);
    let binding_uid = cluster_binding(&world, "acme")
        .await
        .and_then(|b| b.metadata.uid)
        .unwrap();
    assert_eq!(
        annotation_of(&up, annotation::RELATED_BINDING),
        Some(binding_uid.as_str())
    );
    assert!(annotation_of(&up, annotation::CONSUMER_CLUSTER_UID).is_some_and(|u| !u.is_empty()));
    assert_eq!(
        up.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::MANAGED))
            .map(String::as_str),
        Some("true")
    );
    let down = world
        .consumer_get(&configmaps(), Some("default"), "endpoints")
        .await
        .unwrap();
    assert_eq!(down.data["data"], json!({"url": "https://db.acme"}));
    assert_eq!(
        annotation_of(&down, annotation::RELATED_BINDING),
        Some(binding_uid.as_str())
    );
    assert!(
        world
            .provider_get("acme", &secrets(), Some("default"), "private")
            .await
            .is_none()
    );

    // The user's own Secret of the same name is left alone, and the binding says so.
    world
        .run_until_async("the binding reports the conflict", 60, |w| {
            async move {
                binding_condition(w, condition::CONFLICTS).await
                    == Some(("True".to_string(), reason::OWNED_BY_ANOTHER.to_string()))
            }
            .boxed()
        })
        .await;
    let still = world
        .consumer_get(&secrets(), Some("default"), "provider-token")
        .await
        .unwrap();
    assert_eq!(still.metadata.resource_version, users_secret.metadata.resource_version);
    assert_eq!(still.data["data"], users_secret.data["data"]);

    // The source stops matching: the provider copy is collected, the source stays.
    consumer
        .patch(
            &secrets(),
            Some("default"),
            "db-creds",
            &Patch::Merge(json!({"metadata": {"labels": {"share": "no"}}})),
            &PatchParams::default(),
        )
        .await
        .expect("relabelling the source");
    world
        .run_until_async("the unmatched copy is collected", 60, |w| {
            async move {
                w.provider_get("acme", &secrets(), Some("default"), "db-creds")
                    .await
                    .is_none()
            }
            .boxed()
        })
        .await;
    assert!(
        world
            .consumer_get(&secrets(), Some("default"), "db-creds")
            .await
            .is_some()
    );
    assert!(
        world
            .consumer_get(&configmaps(), Some("default"), "endpoints")
            .await
            .is_some()
    );
    assert!(
        world
            .provider_get("acme", &secrets(), Some("default"), "provider-token")
            .await
            .is_some()
    );

    // Secret content never reaches the log or the binding's status.
    let status = serde_json::to_string(&cluster_binding(&world, "acme").await.unwrap().status).unwrap();
    assert!(!world.log().text().contains(PASSWORD) && !status.contains(PASSWORD));
}

/// Unbinding removes the related copies the binding made on the consumer; the story allows
/// that delete of a core-group object, which the world must record under the name fakeapi's
/// write log uses (`configmaps`, not `configmaps.`), or §8.1 counts the allowed delete as a loss.
#[tokio::test(start_paused = true)]
async fn an_unbind_removes_its_related_copy_and_the_allowed_delete_is_no_loss() {
    let (mut world, _cred) = bound_world(
        "an_unbind_removes_its_related_copy_and_the_allowed_delete_is_no_loss",
        34,
    )
    .await;
    let consumer = world.consumer().admin_client();
    let provider = world.provider("acme").admin_client();
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create(
        &provider,
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "endpoints", "namespace": "default"}, "data": {"url": "https://db.acme"}}),
    )
    .await;
    consumer
        .patch(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .expect("adding a related resource to the binding");
    world
        .run_until_async("the ConfigMap comes down", 60, |w| {
            async move {
                w.consumer_get(&configmaps(), Some("default"), "endpoints")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;

    world.allow_konnector_delete(&configmaps(), Some("default"), "endpoints");
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding is gone with its related copy", 120, |w| {
            async move {
                w.consumer_get(&cluster_bindings(), None, "acme").await.is_none()
                    && w.consumer_get(&configmaps(), Some("default"), "endpoints")
                        .await
                        .is_none()
            }
            .boxed()
        })
        .await;
}

/// The konnector's requests of Secrets and ConfigMaps, and its lists of widgets (the namespaces
/// in use), on both clusters since positions `from` (consumer, provider), by `"<cluster> <verb>
/// <resource> in <namespace or *>"`; the world's own reads (the admin's) are left out.
fn related_requests(world: &World, from: (usize, usize)) -> std::collections::BTreeMap<String, usize> {
    let mut counts = std::collections::BTreeMap::new();
    let logs = [
        ("consumer", world.consumer().request_log_from(from.0)),
        ("provider", world.provider("acme").request_log_from(from.1)),
    ];
    for (cluster, log) in logs {
        for r in log.into_iter().filter(|r| r.user != "admin") {
            let instance_list = r.verb == "list" && r.resource == "widgets.example.org";
            if r.resource == "secrets." || r.resource == "configmaps." || instance_list {
                let ns = if r.namespace.is_empty() { "*" } else { &r.namespace };
                *counts
                    .entry(format!("{cluster} {} {} in {ns}", r.verb, r.resource))
                    .or_insert(0) += 1;
            }
        }
    }
    counts
}

fn log_positions(world: &World) -> (usize, usize) {
    (
        world.consumer().request_log().len(),
        world.provider("acme").request_log().len(),
    )
}

/// Related resources are converged by watches, not by a pass that lists sources
/// and copies on both sides every few seconds. Ten idle minutes of a ClusterBinding whose
/// copies are in place (up and down) list no Secret, ConfigMap or instance (for the namespaces
/// in use) on either cluster, and a changed source on either side is still copied within a few
/// steps. The pass it replaces made 420 such LISTs (and 120 GETs of the targets) in ten minutes.
#[tokio::test(start_paused = true)]
async fn idle_related_copies_cost_no_list_and_a_changed_source_is_copied_within_steps() {
    let (mut world, _cred) = bound_world(
        "idle_related_copies_cost_no_list_and_a_changed_source_is_copied_within_steps",
        35,
    )
    .await;
    let seed = world.seed();
    let consumer = world.consumer().admin_client();
    let provider = world.provider("acme").admin_client();
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    create(
        &consumer,
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-creds", "namespace": "default", "labels": {"share": "yes"}},
        "stringData": {"password": PASSWORD}}),
    )
    .await;
    create(
        &provider,
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "endpoints", "namespace": "default"}, "data": {"url": "https://db.acme"}}),
    )
    .await;
    consumer
        .patch(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "secrets", "direction": "FromConsumer",
                 "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}},
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .expect("adding related resources to the binding");
    copied_both_ways(&mut world, "the copies are in place both ways").await;
    // Let the watches start and every first converge finish.
    world.steps_for(60).await;

    let from = log_positions(&world);
    world.steps_for(600).await;
    let idle = related_requests(&world, from);
    println!("seed {seed}: Secret and ConfigMap requests in ten idle minutes: {idle:#?}");
    let lists: usize = idle.iter().filter(|(k, _)| k.contains(" list ")).map(|(_, n)| n).sum();
    assert_eq!(
        lists, 0,
        "seed {seed}: idle related copies listed Secrets, ConfigMaps or widgets: {idle:?}"
    );

    // A changed source is copied on its event, on either side.
    consumer
        .patch(
            &secrets(),
            Some("default"),
            "db-creds",
            &Patch::Merge(json!({"stringData": {"password": "rotated"}})),
            &PatchParams::default(),
        )
        .await
        .expect("rotating the consumer Secret");
    provider
        .patch(
            &configmaps(),
            Some("default"),
            "endpoints",
            &Patch::Merge(json!({"data": {"url": "https://db2.acme"}})),
            &PatchParams::default(),
        )
        .await
        .expect("changing the provider ConfigMap");
    let source = world
        .consumer_get(&secrets(), Some("default"), "db-creds")
        .await
        .expect("the source");
    let wanted = source.data["data"].clone();
    world
        .run_until_async("both changes are copied within a few steps", 3, move |w| {
            let wanted = wanted.clone();
            async move {
                let up = w.provider_get("acme", &secrets(), Some("default"), "db-creds").await;
                let down = w.consumer_get(&configmaps(), Some("default"), "endpoints").await;
                up.is_some_and(|u| u.data["data"] == wanted)
                    && down.is_some_and(|d| d.data["data"] == json!({"url": "https://db2.acme"}))
            }
            .boxed()
        })
        .await;
    let changed = related_requests(&world, from);
    println!("seed {seed}: Secret and ConfigMap requests including both changes: {changed:#?}");
    assert!(!world.log().text().contains(PASSWORD));
}

/// Waits until Secret `db-creds` is on the provider and ConfigMap `endpoints` on the consumer.
async fn copied_both_ways(world: &mut World, what: &str) {
    world
        .run_until_async(what, 60, |w| {
            async move {
                w.provider_get("acme", &secrets(), Some("default"), "db-creds")
                    .await
                    .is_some()
                    && w.consumer_get(&configmaps(), Some("default"), "endpoints")
                        .await
                        .is_some()
            }
            .boxed()
        })
        .await;
}

/// For related resources: a provider ConfigMap watch that keeps failing turns
/// the binding not Ready with `WatchFailed` naming the kind, the side and the answer; once the
/// provider answers again the binding is Ready and the related copy arrives.
#[tokio::test(start_paused = true)]
async fn a_related_watch_that_keeps_failing_is_said_and_heals() {
    let (mut world, _cred) = bound_world("a_related_watch_that_keeps_failing_is_said_and_heals", 3803).await;
    let consumer = world.consumer().admin_client();
    let provider = world.provider("acme").admin_client();
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    for verb in ["list", "watch"] {
        world.provider("acme").inject_error(fakeapi::ErrorRule::new(
            Some(verb),
            Some("configmaps"),
            fakeapi::InjectedError::Internal,
        ));
    }
    consumer
        .patch(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .expect("related resources added");
    world
        .run_until_async("the binding says its related watch fails", 120, |w| {
            async move {
                binding_condition(w, condition::READY).await
                    == Some(("False".to_string(), reason::WATCH_FAILED.to_string()))
            }
            .boxed()
        })
        .await;
    let status = cluster_binding(&world, "acme")
        .await
        .and_then(|b| b.status)
        .expect("a status");
    let ready = conditions::find(&status.conditions, condition::READY).expect("Ready");
    assert!(
        ready.message.contains("configmaps on the provider failed") && ready.message.contains("500"),
        "{}",
        ready.message
    );
    world.provider("acme").clear_errors();
    create(
        &provider,
        &configmaps(),
        json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "endpoints", "namespace": "default"}, "data": {"url": "https://db.acme"}}),
    )
    .await;
    world
        .run_until_async("the binding is Ready again", 120, |w| {
            story::binding_ready(w, "acme").boxed()
        })
        .await;
    world
        .run_until_async("the related ConfigMap arrives", 120, |w| {
            async move {
                w.consumer_get(&configmaps(), Some("default"), "endpoints")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;
}
