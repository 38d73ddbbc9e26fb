//! Schema delivery against in-process fake clusters: provider CRDs pulled into the consumer
//! (create, unchanged, compatible and destructive updates, acceptance, `Once`, foreign CRDs)
//! and CRDs synthesized from a served OpenAPI v3 document.

use std::time::Duration;

use fakeapi::FakeCluster;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{CustomResourceDefinition, JSONSchemaProps};
use kbind_api::UpdatePolicy;
use kbind_api::consts::{annotation, label};
use kbind_cluster::{ClusterClient, ClusterClientExt, PostParams, from_dynamic, to_dynamic};
use kbind_engine::crdpull::{CrdOutcome, consumer_crd_from_provider, crd_resource, ensure_consumer_crd};
use kbind_engine::openapi::crd_from_openapi;
use serde_json::{Value, json};

mod support;

use support::eventually;

const NAME: &str = "widgets.example.org";

fn spec_schema(props: Value) -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": props},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }})
}

fn base_props() -> Value {
    json!({"size": {"type": "integer", "default": 1}, "color": {"type": "string"}})
}

/// A provider CRD with two versions, conversion through a webhook with a CA bundle, storing `storage`.
fn provider_crd(props: Value, storage: &str) -> Value {
    let version = |name: &str| {
        json!({"name": name, "served": true, "storage": name == storage, "subresources": {"status": {}},
               "schema": {"openAPIV3Schema": spec_schema(props.clone())}})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": NAME, "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"caBundle": "LS0tLS1CRUdJTg==", "service": {"namespace": "widgets", "name": "conversion"}}}},
            "versions": [version("v1beta1"), version("v1"), version("v2")],
        },
    })
}

/// Creates or replaces `crd` on `cluster` and returns it as the server holds it.
async fn publish(cluster: &dyn ClusterClient, mut crd: Value) -> CustomResourceDefinition {
    let params = PostParams::default();
    match cluster.get_opt(&crd_resource(), None, NAME).await.unwrap() {
        Some(existing) => {
            crd["metadata"]["resourceVersion"] = json!(existing.metadata.resource_version);
            let obj = serde_json::from_value(crd).unwrap();
            cluster
                .replace(&crd_resource(), None, NAME, &obj, &params)
                .await
                .unwrap();
        }
        None => {
            let obj = serde_json::from_value(crd).unwrap();
            cluster.create(&crd_resource(), None, &obj, &params).await.unwrap();
        }
    }
    read(cluster).await
}

async fn read(cluster: &dyn ClusterClient) -> CustomResourceDefinition {
    from_dynamic(cluster.get(&crd_resource(), None, NAME).await.unwrap()).unwrap()
}

async fn pull(provider: &dyn ClusterClient, props: Value, storage: &str) -> CustomResourceDefinition {
    let crd = publish(provider, provider_crd(props, storage)).await;
    consumer_crd_from_provider(&crd, "prod").unwrap()
}

fn established(crd: &CustomResourceDefinition) -> bool {
    crd.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"))
}

async fn wait_established(consumer: &dyn ClusterClient) {
    eventually(
        "the consumer CRD to be Established",
        Duration::from_secs(10),
        || async { established(&read(consumer).await) },
    )
    .await;
}

fn schema(crd: &CustomResourceDefinition, version: &str) -> Value {
    let v = crd.spec.versions.iter().find(|v| v.name == version).unwrap();
    serde_json::to_value(&v.schema.as_ref().unwrap().open_api_v3_schema).unwrap()
}

/// `schema` as a CRD stores it (through JSONSchemaProps).
fn stored(schema: &Value) -> Value {
    let props: JSONSchemaProps = serde_json::from_value(schema.clone()).unwrap();
    serde_json::to_value(props).unwrap()
}

fn annotation_of<'a>(crd: &'a CustomResourceDefinition, key: &str) -> Option<&'a str> {
    crd.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

struct World {
    consumer: FakeCluster,
    provider: FakeCluster,
}

impl World {
    fn new() -> Self {
        Self {
            consumer: FakeCluster::builder("consumer").seed(1).build(),
            provider: FakeCluster::builder("provider").seed(2).build(),
        }
    }

    fn consumer(&self) -> fakeapi::FakeClient {
        self.consumer.admin_client()
    }

    fn provider(&self) -> fakeapi::FakeClient {
        self.provider.admin_client()
    }

    /// Pulls the base schema into the consumer and waits until it is served there.
    async fn pulled(&self) -> CustomResourceDefinition {
        let desired = pull(&self.provider(), base_props(), "v1").await;
        let outcome = ensure_consumer_crd(&self.consumer(), desired, UpdatePolicy::Always)
            .await
            .unwrap();
        assert_eq!(outcome, CrdOutcome::Created);
        wait_established(&self.consumer()).await;
        read(&self.consumer()).await
    }

    /// A user annotates the consumer CRD.
    async fn annotate_consumer(&self, key: &str, value: &str) {
        let mut crd = read(&self.consumer()).await;
        crd.metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(key.to_string(), value.to_string());
        let obj = to_dynamic(&crd).unwrap();
        self.consumer()
            .replace(&crd_resource(), None, NAME, &obj, &PostParams::default())
            .await
            .unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn a_pulled_crd_keeps_only_its_storage_version_and_becomes_established() {
    let world = World::new();
    let crd = world.pulled().await;
    assert_eq!(crd.spec.versions.len(), 1);
    assert_eq!(crd.spec.versions[0].name, "v1");
    assert!(crd.spec.versions[0].served && crd.spec.versions[0].storage);
    assert_eq!(schema(&crd, "v1"), stored(&spec_schema(base_props())));
    let conversion = crd.spec.conversion.as_ref().unwrap();
    assert_eq!(
        (conversion.strategy.as_str(), conversion.webhook.is_none()),
        ("None", true)
    );
    let text = serde_json::to_string(&crd).unwrap();
    assert!(!text.contains("caBundle"), "{text}");
    assert_eq!(crd.metadata.labels.as_ref().unwrap()[label::MANAGED], "true");
    assert!(!crd.metadata.labels.as_ref().unwrap().contains_key(label::EXPORTED));
    assert_eq!(annotation_of(&crd, annotation::CONNECTION), Some("prod"));
    let discovery = world.consumer().discovery().await.unwrap();
    let served = discovery.find("example.org", "widgets").unwrap();
    assert_eq!((served.version.as_str(), served.has_status()), ("v1", true));
    assert!(discovery.find_version("example.org", "v1beta1", "widgets").is_none());
}

#[tokio::test(start_paused = true)]
async fn pulling_the_same_schema_again_writes_nothing() {
    let world = World::new();
    let before = world.pulled().await;
    let desired = pull(&world.provider(), base_props(), "v1").await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Unchanged);
    assert_eq!(
        read(&world.consumer()).await.metadata.resource_version,
        before.metadata.resource_version
    );
}

#[tokio::test(start_paused = true)]
async fn a_new_optional_field_is_applied_with_update_policy_always() {
    let world = World::new();
    world.pulled().await;
    world.annotate_consumer("team", "blue").await;
    let mut props = base_props();
    props["shape"] = json!({"type": "string", "enum": ["round", "square"]});
    let desired = pull(&world.provider(), props.clone(), "v1").await;
    let hash = annotation_of(&desired, annotation::SCHEMA_HASH).unwrap().to_string();
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Updated);
    let crd = read(&world.consumer()).await;
    assert_eq!(schema(&crd, "v1"), stored(&spec_schema(props)));
    assert_eq!(annotation_of(&crd, annotation::SCHEMA_HASH), Some(hash.as_str()));
    assert_eq!(
        annotation_of(&crd, "team"),
        Some("blue"),
        "a user's annotation was dropped"
    );
}

#[tokio::test(start_paused = true)]
async fn a_removed_field_is_blocked_until_a_user_accepts_the_new_hash() {
    let world = World::new();
    let before = world.pulled().await;
    let desired = pull(
        &world.provider(),
        json!({"size": {"type": "integer", "default": 1}}),
        "v1",
    )
    .await;
    let hash = annotation_of(&desired, annotation::SCHEMA_HASH).unwrap().to_string();
    let outcome = ensure_consumer_crd(&world.consumer(), desired.clone(), UpdatePolicy::Always).await;
    let CrdOutcome::Blocked(message) = outcome.unwrap() else {
        panic!("expected Blocked");
    };
    assert!(message.contains("field spec.color is removed"), "{message}");
    assert!(message.contains(&hash), "{message}");
    assert_eq!(read(&world.consumer()).await, before, "a blocked change was written");

    // Accepting some other hash does not accept this change.
    let old_hash = annotation_of(&before, annotation::SCHEMA_HASH).unwrap().to_string();
    world.annotate_consumer(annotation::ACCEPT_SCHEMA_HASH, &old_hash).await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired.clone(), UpdatePolicy::Always).await;
    assert!(matches!(outcome.unwrap(), CrdOutcome::Blocked(_)));

    world.annotate_consumer(annotation::ACCEPT_SCHEMA_HASH, &hash).await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Updated);
    let crd = read(&world.consumer()).await;
    assert_eq!(
        schema(&crd, "v1"),
        stored(&spec_schema(json!({"size": {"type": "integer", "default": 1}})))
    );
    assert_eq!(annotation_of(&crd, annotation::SCHEMA_HASH), Some(hash.as_str()));
}

#[tokio::test(start_paused = true)]
async fn an_accepted_storage_version_change_keeps_the_old_version_unserved() {
    let world = World::new();
    world.pulled().await;
    let desired = pull(&world.provider(), base_props(), "v2").await;
    let hash = annotation_of(&desired, annotation::SCHEMA_HASH).unwrap().to_string();
    let outcome = ensure_consumer_crd(&world.consumer(), desired.clone(), UpdatePolicy::Always).await;
    let CrdOutcome::Blocked(message) = outcome.unwrap() else {
        panic!("expected Blocked");
    };
    assert!(
        message.starts_with("storage version changes from v1 to v2"),
        "{message}"
    );
    world.annotate_consumer(annotation::ACCEPT_SCHEMA_HASH, &hash).await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Updated);
    let crd = read(&world.consumer()).await;
    let versions: Vec<(&str, bool, bool)> = crd
        .spec
        .versions
        .iter()
        .map(|v| (v.name.as_str(), v.served, v.storage))
        .collect();
    assert_eq!(versions, [("v2", true, true), ("v1", false, false)]);
    eventually("v2 to be served", Duration::from_secs(10), || async {
        let discovery = world.consumer().discovery().await.unwrap();
        discovery.find_version("example.org", "v2", "widgets").is_some()
            && discovery.find_version("example.org", "v1", "widgets").is_none()
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn update_policy_once_holds_changes_to_an_existing_crd() {
    let world = World::new();
    let before = world.pulled().await;
    let mut props = base_props();
    props["shape"] = json!({"type": "string"});
    let desired = pull(&world.provider(), props, "v1").await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Once).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Held);
    assert_eq!(read(&world.consumer()).await, before);
}

#[tokio::test(start_paused = true)]
async fn a_crd_kbind_did_not_create_is_never_overwritten() {
    let world = World::new();
    let mut foreign = provider_crd(json!({"mine": {"type": "string"}}), "v1");
    foreign["spec"]["conversion"] = json!({"strategy": "None"});
    foreign["metadata"]["labels"] = json!({});
    let before = publish(&world.consumer(), foreign).await;
    let desired = pull(&world.provider(), base_props(), "v1").await;
    let outcome = ensure_consumer_crd(&world.consumer(), desired, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::NotManaged);
    assert_eq!(read(&world.consumer()).await, before);
}

#[tokio::test(start_paused = true)]
async fn a_crd_pulled_through_another_connection_is_left_to_it() {
    let world = World::new();
    let provider_crd = publish(&world.provider(), provider_crd(base_props(), "v1")).await;
    let theirs = consumer_crd_from_provider(&provider_crd, "staging").unwrap();
    let outcome = ensure_consumer_crd(&world.consumer(), theirs, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Created);
    let before = read(&world.consumer()).await;
    let ours = consumer_crd_from_provider(&provider_crd, "prod").unwrap();
    let outcome = ensure_consumer_crd(&world.consumer(), ours, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::OtherConnection("staging".into()));
    assert_eq!(read(&world.consumer()).await, before);
}

/// A controller-gen style schema exercising what the OpenAPI route must keep.
fn rich_schema() -> Value {
    json!({"type": "object", "description": "A widget.", "properties": {
        "apiVersion": {"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"},
        "kind": {"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"},
        "metadata": {"type": "object"},
        "spec": {"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "default": 1, "minimum": 0},
            "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
            "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]},
            "mode": {"type": "string", "enum": ["Fast", "Slow"], "default": "Fast"},
            "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                      "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}}}},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true,
                         "x-kubernetes-preserve-unknown-fields": true},
        }},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }})
}

#[tokio::test(start_paused = true)]
async fn a_crd_served_through_openapi_comes_back_with_its_structural_schema() {
    let world = World::new();
    let mut crd = provider_crd(json!({}), "v1");
    crd["spec"]["conversion"] = json!({"strategy": "None"});
    crd["spec"]["versions"] = json!([{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                                       "schema": {"openAPIV3Schema": rich_schema()}}]);
    publish(&world.provider(), crd).await;
    let provider = world.provider();
    eventually(
        "widgets to be served on the provider",
        Duration::from_secs(10),
        || async {
            provider
                .discovery()
                .await
                .unwrap()
                .find("example.org", "widgets")
                .is_some()
        },
    )
    .await;
    let discovery = provider.discovery().await.unwrap();
    let resource = discovery.find("example.org", "widgets").unwrap();
    let doc = provider.openapi_v3("example.org", "v1").await.unwrap();
    let synthesized = crd_from_openapi(resource, &doc, "prod").unwrap();
    assert_eq!(schema(&synthesized, "v1"), stored(&rich_schema()));
    assert!(
        synthesized.spec.versions[0]
            .subresources
            .as_ref()
            .unwrap()
            .status
            .is_some()
    );
    assert_eq!(synthesized.spec.scope, "Namespaced");

    let outcome = ensure_consumer_crd(&world.consumer(), synthesized.clone(), UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Created);
    wait_established(&world.consumer()).await;
    let again = crd_from_openapi(resource, &doc, "prod").unwrap();
    let outcome = ensure_consumer_crd(&world.consumer(), again, UpdatePolicy::Always).await;
    assert_eq!(outcome.unwrap(), CrdOutcome::Unchanged);
}
