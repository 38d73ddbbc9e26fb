//! Related kinds the konnector cannot sync (issue 37): a kind the consumer does not serve and a
//! cluster-scoped kind are named on the binding while the other rules keep syncing, and a kind
//! the konnector's consumer RBAC may not list is a `PermissionDenied` naming verb and resource.
//! Both heal once the cause goes. §8 is checked after every step.

use kbind_api::consts::{condition, reason};
use kbind_api::{ClusterBinding, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use kbind_scenarios::{FakeStage, Stage, World, apis::ingresses, seed_from_env};
use serde_json::{Value, json};

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a story object is valid")
}

async fn set_rules(stage: &FakeStage, rules: Value) {
    stage
        .consumer()
        .patch(
            &ApiResource::erase::<ClusterBinding>(&()),
            None,
            "acme",
            &Patch::Merge(json!({"spec": {"relatedResources": rules}})),
            &PatchParams::default(),
        )
        .await
        .expect("setting the binding's related rules");
}

/// The binding's condition `type_` as (status, reason, message).
async fn binding_condition(consumer: &dyn ClusterClient, type_: &str) -> Option<(String, String, String)> {
    let binding: ClusterBinding = consumer.get_typed_opt(None, "acme").await.ok().flatten()?;
    let found = conditions::find(&binding.status?.conditions, type_)?.clone();
    Some((found.status, found.reason, found.message))
}

async fn create_on(client: &dyn ClusterClient, res: &ApiResource, value: Value) {
    let obj = object(value);
    client
        .create(res, Some("default"), &obj, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating {:?}: {e}", obj.metadata.name));
}

fn ingress(name: &str) -> Value {
    json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
        "metadata": {"name": name, "namespace": "default", "labels": {"share": "yes"}},
        "spec": {"defaultBackend": {"service": {"name": name, "port": {"number": 80}}}}})
}

/// A widget puts `default` in use for the ClusterBinding's related copies.
async fn put_default_in_use(stage: &FakeStage) {
    let widget = kbind_scenarios::apis::widget("default", "w1", json!({"size": 1}));
    stage
        .consumer()
        .create(
            &kbind_scenarios::apis::widgets(),
            Some("default"),
            &widget,
            &Default::default(),
        )
        .await
        .expect("creating a widget");
}

#[tokio::test(start_paused = true)]
async fn a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing() {
    let story = "related_kinds::a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing";
    let mut stage = FakeStage::bound(story, seed_from_env(3703)).await;
    put_default_in_use(&stage).await;
    let consumer = stage.consumer();
    create_on(
        consumer.as_ref(),
        &secrets(),
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "shared", "namespace": "default"},
            "stringData": {"k": "v"}}),
    )
    .await;
    set_rules(
        &stage,
        json!([
            {"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
             "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}},
            {"group": "", "resource": "namespaces", "direction": "FromConsumer", "selector": {"names": ["default"]}},
            {"group": "", "resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["shared"]}},
        ]),
    )
    .await;
    let c = &consumer;
    let message = stage
        .eventually("Ready names the kinds that cannot be synced", || async move {
            let (status, why, message) = binding_condition(c.as_ref(), condition::READY).await?;
            (status == "False" && why == reason::RELATED_KIND_NOT_SERVED && message.contains("namespaces"))
                .then_some(message)
        })
        .await;
    assert!(
        message.contains("ingresses.networking.k8s.io is not served by the consumer"),
        "{message}"
    );
    assert!(
        message.contains("namespaces is cluster-scoped; related resources must be namespaced"),
        "{message}"
    );
    let provider = stage.provider();
    let p = &provider;
    stage
        .eventually("the Secret rule keeps syncing", || async move {
            p.get_opt(&secrets(), Some("default"), "shared")
                .await
                .ok()
                .flatten()
                .map(|_| ())
        })
        .await;

    // The consumer starts serving Ingresses: the rule syncs on its own, without a restart.
    set_rules(
        &stage,
        json!([
            {"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
             "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}},
            {"group": "", "resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["shared"]}},
        ]),
    )
    .await;
    stage.serve_ingresses().await;
    create_on(consumer.as_ref(), &ingresses(), ingress("shop")).await;
    stage
        .eventually("the Ingress goes up once it is served", || async move {
            p.get_opt(&ingresses(), Some("default"), "shop")
                .await
                .ok()
                .flatten()
                .map(|_| ())
        })
        .await;
    stage
        .eventually("and the binding is Ready again", || async move {
            let (status, _, _) = binding_condition(c.as_ref(), condition::READY).await?;
            (status == "True").then_some(())
        })
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_kind_the_konnector_may_not_read_on_the_consumer_is_permission_denied_naming_verb_and_resource() {
    let story = "related_kinds::a_kind_the_konnector_may_not_read_on_the_consumer_is_permission_denied_naming_verb_and_resource";
    let mut stage = FakeStage::bound(story, seed_from_env(3704)).await;
    put_default_in_use(&stage).await;
    stage.serve_ingresses().await;
    let consumer = stage.consumer();
    create_on(consumer.as_ref(), &ingresses(), ingress("shop")).await;
    for verb in ["list", "watch"] {
        stage.world.consumer().inject_error(fakeapi::ErrorRule::new(
            Some(verb),
            Some("ingresses"),
            fakeapi::InjectedError::Forbidden,
        ));
    }
    set_rules(
        &stage,
        json!([{"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
            "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}}]),
    )
    .await;
    let c = &consumer;
    let message = stage
        .eventually("PermissionDenied names the refused verb and resource", || async move {
            let (status, why, message) = binding_condition(c.as_ref(), condition::PERMISSION_DENIED).await?;
            (status == "True" && why == reason::FORBIDDEN).then_some(message)
        })
        .await;
    assert!(
        message.contains("the konnector's RBAC on the consumer may not: list ingresses.networking.k8s.io"),
        "{message}"
    );
    let (ready, _, _) = binding_condition(consumer.as_ref(), condition::READY)
        .await
        .expect("a Ready condition");
    assert_eq!(ready, "False", "not Ready while a rule cannot be read");
    let provider = stage.provider();
    assert!(
        provider
            .get_opt(&ingresses(), Some("default"), "shop")
            .await
            .ok()
            .flatten()
            .is_none(),
        "nothing went up"
    );

    // The consumer admin grants the kind: the copy goes up and the condition clears.
    stage.world.consumer().clear_errors();
    let p = &provider;
    stage
        .eventually("the Ingress goes up once the konnector may read it", || async move {
            p.get_opt(&ingresses(), Some("default"), "shop")
                .await
                .ok()
                .flatten()
                .map(|_| ())
        })
        .await;
    stage
        .eventually("PermissionDenied clears", || async move {
            let (status, _, _) = binding_condition(c.as_ref(), condition::PERMISSION_DENIED).await?;
            (status == "False").then_some(())
        })
        .await;
}

/// Issue 37: a namespace moves from provider acme to provider beta; the Secret its widget names
/// goes with it: beta's Binding copies it (with its own marker), acme's copy is collected with
/// acme's Binding, and the consumer's Secret stays.
#[tokio::test(start_paused = true)]
async fn a_related_copy_moves_with_its_namespace_to_the_other_provider() {
    use crate::several_providers::{bind, partitioned};

    let story = "related_kinds::a_related_copy_moves_with_its_namespace_to_the_other_provider";
    let mut world = partitioned(story, 3705).await;
    let consumer = world.consumer().admin_client();
    let bindings = ApiResource::erase::<kbind_api::Binding>(&());
    let rules = json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"references": [{"path": "spec.config.secretName"}]}}]);
    let secret = object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pw", "namespace": "team-a"}, "stringData": {"password": "p"}}));
    consumer
        .create(&secrets(), Some("team-a"), &secret, &Default::default())
        .await
        .expect("creating the Secret");
    consumer
        .patch(
            &bindings,
            Some("team-a"),
            "widgets",
            &Patch::Merge(json!({"spec": {"relatedResources": rules}})),
            &PatchParams::default(),
        )
        .await
        .expect("acme's Binding copies what widgets name");
    let widget = kbind_scenarios::apis::widget("team-a", "w1", json!({"size": 1, "config": {"secretName": "pw"}}));
    consumer
        .create(
            &kbind_scenarios::apis::widgets(),
            Some("team-a"),
            &widget,
            &Default::default(),
        )
        .await
        .expect("creating a widget");
    world
        .run_until_async("acme has the Secret", 60, copy_on("acme", true))
        .await;

    bind(&world, "beta", "team-a", "widgets-beta").await;
    consumer
        .patch(
            &bindings,
            Some("team-a"),
            "widgets-beta",
            &Patch::Merge(json!({"spec": {"relatedResources": rules}})),
            &PatchParams::default(),
        )
        .await
        .expect("beta's Binding copies what widgets name");
    world.delete_on_consumer(&bindings, Some("team-a"), "widgets").await;
    world
        .run_until_async("acme's copy goes with acme's Binding", 120, copy_on("acme", false))
        .await;
    world
        .run_until_async("beta has the Secret", 120, copy_on("beta", true))
        .await;
    let beta_uid = world
        .consumer_get(&bindings, Some("team-a"), "widgets-beta")
        .await
        .and_then(|b| b.metadata.uid);
    let copy = world.provider_get("beta", &secrets(), Some("team-a"), "pw").await;
    assert_eq!(
        copy.and_then(|c| c.metadata.annotations)
            .and_then(|a| a.get(kbind_api::consts::annotation::RELATED_BINDING).cloned()),
        beta_uid,
        "beta's copy is beta's Binding's"
    );
    assert!(
        world.consumer_get(&secrets(), Some("team-a"), "pw").await.is_some(),
        "the consumer's Secret stays"
    );
}

/// Whether provider `provider` holds a copy of Secret `team-a/pw` (`present`) or none.
fn copy_on(
    provider: &'static str,
    present: bool,
) -> impl for<'w> Fn(&'w World) -> futures::future::BoxFuture<'w, bool> + use<> {
    use futures::FutureExt;
    move |w| {
        async move {
            w.provider_get(provider, &secrets(), Some("team-a"), "pw")
                .await
                .is_some()
                == present
        }
        .boxed()
    }
}
