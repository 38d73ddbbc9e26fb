//! Related resources against in-process fake consumer and provider clusters on a paused clock:
//! both directions, label and name selectors, foreign and other owners' targets left alone,
//! garbage collection of only our copies, and unbind.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fakeapi::{FakeCluster, UserInfo};
use kbind_api::consts::{annotation, field_manager, label, reason};
use kbind_api::{ConflictPolicy, RelatedResource};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams, SharedClock,
    TokioClock,
};
use kbind_engine::context::Context;
use kbind_engine::provider::EngagedProvider;
use kbind_engine::related::{self, RelatedReport};
use kbind_engine::sync::{BindingKind, BindingRef};
use serde_json::{Value, json};

mod support;

use support::*;

const CLUSTER_UID: &str = "consumer-uid-1";

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn secret(ns: &str, name: &str, labels: Value, password: &str) -> DynamicObject {
    object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": labels},
        "type": "Opaque", "stringData": {"password": password}}))
}

fn configmap(ns: &str, name: &str, data: Value) -> DynamicObject {
    object(json!({"apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": ns}, "data": data}))
}

fn rules(value: Value) -> Vec<RelatedResource> {
    serde_json::from_value(value).unwrap()
}

fn annotation_of<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

struct World {
    consumer_cluster: FakeCluster,
    consumer: Arc<dyn ClusterClient>,
    provider: Arc<dyn ClusterClient>,
    ctx: Context,
    engaged: Arc<EngagedProvider>,
    _task: AbortOnDrop,
}

impl World {
    async fn new() -> Self {
        Self::with_consumer_user(UserInfo::admin(), None).await
    }

    /// A world where the konnector is `consumer_user` on the consumer; `rbac` (created by the
    /// consumer's admin before the konnector starts) says what that user may do.
    async fn with_consumer_user(consumer_user: UserInfo, rbac: Option<Vec<(ApiResource, Value)>>) -> Self {
        let clock: SharedClock = Arc::new(TokioClock::fixed());
        let consumer_cluster = FakeCluster::builder("consumer").seed(1).clock(clock.clone()).build();
        let provider_cluster = FakeCluster::builder("provider").seed(2).clock(clock.clone()).build();
        let consumer: Arc<dyn ClusterClient> = Arc::new(consumer_cluster.admin_client());
        let provider: Arc<dyn ClusterClient> = Arc::new(provider_cluster.admin_client());
        install_kbind_crds(&consumer).await;
        for ns in ["kbind", "team-a", "team-b"] {
            create_namespace(&consumer, ns).await;
            create_namespace(&provider, ns).await;
        }
        for (res, obj) in rbac.into_iter().flatten() {
            Self::create(&consumer, &res, object(obj)).await;
        }
        let Engaged { ctx, engaged, task } = Engagement {
            consumer_user,
            provider_user: UserInfo::admin(),
            secret_labels: json!({"share": "yes"}),
        }
        .engage(&consumer_cluster, &provider_cluster, clock)
        .await;
        Self {
            consumer_cluster,
            consumer,
            provider,
            ctx,
            engaged,
            _task: task,
        }
    }

    async fn reconcile_as(
        &self,
        binding: &BindingRef,
        rules: &[RelatedResource],
        policy: ConflictPolicy,
        namespaces: &[&str],
    ) -> RelatedReport {
        let namespaces: BTreeSet<String> = namespaces.iter().map(|s| s.to_string()).collect();
        related::reconcile(
            &self.ctx,
            binding,
            rules,
            policy,
            &self.engaged,
            CLUSTER_UID,
            &namespaces,
        )
        .await
        .expect("related resources converge")
    }

    async fn reconcile(&self, rules: &[RelatedResource]) -> RelatedReport {
        self.reconcile_as(
            &cluster_binding("b-1"),
            rules,
            ConflictPolicy::Fail,
            &["team-a", "team-b"],
        )
        .await
    }

    async fn get(client: &Arc<dyn ClusterClient>, res: &ApiResource, ns: &str, name: &str) -> Option<DynamicObject> {
        client.get_opt(res, Some(ns), name).await.unwrap()
    }

    async fn on_provider(&self, res: &ApiResource, ns: &str, name: &str) -> Option<DynamicObject> {
        Self::get(&self.provider, res, ns, name).await
    }

    async fn on_consumer(&self, res: &ApiResource, ns: &str, name: &str) -> Option<DynamicObject> {
        Self::get(&self.consumer, res, ns, name).await
    }

    async fn consumer_secret(&self, ns: &str, name: &str, labels: Value, password: &str) {
        Self::create(&self.consumer, &secrets(), secret(ns, name, labels, password)).await;
    }

    async fn provider_secret(&self, ns: &str, name: &str, labels: Value, password: &str) {
        Self::create(&self.provider, &secrets(), secret(ns, name, labels, password)).await;
    }

    async fn consumer_configmap(&self, ns: &str, name: &str, data: Value) {
        Self::create(&self.consumer, &configmaps(), configmap(ns, name, data)).await;
    }

    async fn provider_configmap(&self, ns: &str, name: &str, data: Value) {
        Self::create(&self.provider, &configmaps(), configmap(ns, name, data)).await;
    }

    async fn create(client: &Arc<dyn ClusterClient>, res: &ApiResource, obj: DynamicObject) {
        let ns = obj.metadata.namespace.clone();
        client
            .create(res, ns.as_deref(), &obj, &PostParams::default())
            .await
            .unwrap();
    }
}

fn cluster_binding(uid: &str) -> BindingRef {
    BindingRef {
        kind: BindingKind::Cluster,
        namespace: None,
        name: format!("binding-{uid}"),
        uid: uid.into(),
    }
}

fn assert_our_copy(copy: &DynamicObject, binding_uid: &str) {
    assert_eq!(annotation_of(copy, annotation::RELATED_BINDING), Some(binding_uid));
    assert_eq!(annotation_of(copy, annotation::CONSUMER_CLUSTER_UID), Some(CLUSTER_UID));
    assert_eq!(
        copy.metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::MANAGED))
            .map(String::as_str),
        Some("true")
    );
    let managers: Vec<_> = copy
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.clone())
        .collect();
    assert!(
        managers.iter().any(|m| m == field_manager::KONNECTOR_RELATED),
        "written as {}: {managers:?}",
        field_manager::KONNECTOR_RELATED
    );
}

fn shared_secrets_up() -> Vec<RelatedResource> {
    rules(json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}}]))
}

#[tokio::test(start_paused = true)]
async fn consumer_secrets_matching_the_label_selector_are_copied_to_the_provider_with_markers() {
    let w = World::new().await;
    w.consumer_secret("team-a", "db", json!({"share": "yes", "app": "web"}), "s3cret")
        .await;
    w.consumer_secret("team-a", "private", json!({"share": "no"}), "x")
        .await;
    create_namespace(&w.consumer, "team-c").await;
    w.consumer_secret("team-c", "elsewhere", json!({"share": "yes"}), "x")
        .await;

    let report = w.reconcile(&shared_secrets_up()).await;
    assert_eq!(report.copied, 1);
    assert!(report.conflicts.is_empty() && report.denied.is_empty());
    let source = w.on_consumer(&secrets(), "team-a", "db").await.unwrap();
    let copy = w
        .on_provider(&secrets(), "team-a", "db")
        .await
        .expect("the copy is on the provider");
    assert_our_copy(&copy, "b-1");
    assert_eq!(copy.data["data"], source.data["data"]);
    assert_eq!(copy.data["type"], json!("Opaque"));
    assert_eq!(
        copy.metadata.labels.as_ref().unwrap().get("app").map(String::as_str),
        Some("web")
    );
    assert!(
        w.on_provider(&secrets(), "team-a", "private").await.is_none(),
        "labels do not match"
    );
    assert!(
        w.on_provider(&secrets(), "team-c", "elsewhere").await.is_none(),
        "namespace not in use"
    );
    assert!(
        w.on_provider(&secrets(), "kbind", "acme").await.is_none(),
        "the konnector's own namespace is never copied"
    );
    let again = w
        .reconcile_as(
            &cluster_binding("b-1"),
            &shared_secrets_up(),
            ConflictPolicy::Fail,
            &["team-a", "kbind"],
        )
        .await;
    assert_eq!(again.copied, 1);
    assert!(
        w.on_provider(&secrets(), "kbind", "acme").await.is_none(),
        "not even when instances live there"
    );

    // A change of the source goes up; a second pass with nothing new writes nothing.
    w.consumer
        .patch(
            &secrets(),
            Some("team-a"),
            "db",
            &Patch::Merge(json!({"stringData": {"password": "n3w"}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    w.reconcile(&shared_secrets_up()).await;
    let source = w.on_consumer(&secrets(), "team-a", "db").await.unwrap();
    let copy = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_eq!(copy.data["data"], source.data["data"]);
    let rv = copy.metadata.resource_version.clone();
    w.reconcile(&shared_secrets_up()).await;
    let unchanged = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_eq!(
        unchanged.metadata.resource_version, rv,
        "an up-to-date copy is not rewritten"
    );
}

#[tokio::test(start_paused = true)]
async fn provider_configmaps_named_in_the_selector_are_copied_to_the_consumer() {
    let w = World::new().await;
    w.provider_configmap("team-b", "endpoints", json!({"url": "https://db"}))
        .await;
    w.provider_configmap("team-b", "other", json!({"k": "v"})).await;
    let down =
        rules(json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}}]));

    let report = w.reconcile(&down).await;
    assert_eq!(report.copied, 1);
    let copy = w
        .on_consumer(&configmaps(), "team-b", "endpoints")
        .await
        .expect("the copy is on the consumer");
    assert_our_copy(&copy, "b-1");
    assert_eq!(copy.data["data"], json!({"url": "https://db"}));
    assert!(w.on_consumer(&configmaps(), "team-b", "other").await.is_none());
    assert!(w.on_consumer(&configmaps(), "team-a", "endpoints").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_pre_existing_foreign_target_is_left_untouched_and_reported() {
    let w = World::new().await;
    w.provider_configmap("team-a", "settings", json!({"from": "provider"}))
        .await;
    w.consumer_configmap("team-a", "settings", json!({"from": "user"}))
        .await;
    w.consumer_secret("team-a", "db", json!({"share": "yes"}), "mine").await;
    w.provider_secret("team-a", "db", json!({}), "theirs").await;
    let mut both = shared_secrets_up();
    both.extend(rules(
        json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["settings"]}}]),
    ));
    let before_cm = w.on_consumer(&configmaps(), "team-a", "settings").await.unwrap();
    let before_secret = w.on_provider(&secrets(), "team-a", "db").await.unwrap();

    let report = w.reconcile(&both).await;
    assert_eq!(report.copied, 0);
    assert_eq!(
        report.conflicts,
        vec![
            (
                "secrets team-a/db".to_string(),
                reason::FOREIGN_OBJECT_EXISTS.to_string()
            ),
            (
                "configmaps team-a/settings".to_string(),
                reason::FOREIGN_OBJECT_EXISTS.to_string()
            ),
        ]
    );
    let after_cm = w.on_consumer(&configmaps(), "team-a", "settings").await.unwrap();
    assert_eq!(after_cm.metadata.resource_version, before_cm.metadata.resource_version);
    assert_eq!(after_cm.data["data"], json!({"from": "user"}));
    let after_secret = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_eq!(
        after_secret.metadata.resource_version,
        before_secret.metadata.resource_version
    );

    // Adopt takes over the provider's unmarked Secret, never the consumer's ConfigMap.
    let adopted = w
        .reconcile_as(&cluster_binding("b-1"), &both, ConflictPolicy::Adopt, &["team-a"])
        .await;
    assert_eq!(
        adopted.conflicts,
        vec![(
            "configmaps team-a/settings".to_string(),
            reason::FOREIGN_OBJECT_EXISTS.to_string()
        )]
    );
    let taken = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_our_copy(&taken, "b-1");
    let source = w.on_consumer(&secrets(), "team-a", "db").await.unwrap();
    assert_eq!(taken.data["data"], source.data["data"]);
    let still = w.on_consumer(&configmaps(), "team-a", "settings").await.unwrap();
    assert_eq!(still.metadata.resource_version, before_cm.metadata.resource_version);
}

#[tokio::test(start_paused = true)]
async fn another_bindings_copy_is_owned_by_another_and_never_collected() {
    let w = World::new().await;
    w.consumer_secret("team-a", "db", json!({"share": "yes"}), "x").await;
    let theirs = w
        .reconcile_as(
            &cluster_binding("b-2"),
            &shared_secrets_up(),
            ConflictPolicy::Fail,
            &["team-a"],
        )
        .await;
    assert_eq!(theirs.copied, 1);
    let before = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_our_copy(&before, "b-2");

    for policy in [ConflictPolicy::Fail, ConflictPolicy::Adopt] {
        let mine = w
            .reconcile_as(&cluster_binding("b-1"), &shared_secrets_up(), policy, &["team-a"])
            .await;
        assert_eq!(
            mine.conflicts,
            vec![("secrets team-a/db".to_string(), reason::OWNED_BY_ANOTHER.to_string())]
        );
    }
    // b-1 drops its rule and unbinds: b-2's copy stays as it was.
    let gone = w
        .reconcile_as(&cluster_binding("b-1"), &[], ConflictPolicy::Fail, &["team-a"])
        .await;
    assert_eq!(gone.removed, 0);
    assert!(
        related::remove_copies(&w.ctx, &cluster_binding("b-1"), CLUSTER_UID, Some(&w.engaged), false)
            .await
            .unwrap()
    );
    let after = w.on_provider(&secrets(), "team-a", "db").await.unwrap();
    assert_eq!(after.metadata.resource_version, before.metadata.resource_version);
}

#[tokio::test(start_paused = true)]
async fn provider_copies_go_when_their_source_stops_matching_and_only_ours() {
    let w = World::new().await;
    for name in ["relabelled", "deleted", "kept", "named"] {
        w.consumer_secret("team-a", name, json!({"share": "yes"}), "x").await;
    }
    w.consumer_configmap("team-a", "ruled", json!({"k": "v"})).await;
    // Unmarked and another binding's objects with managed labels must survive every pass.
    w.provider_secret("team-a", "unmarked", json!({"core.kbind.io/managed": "true"}), "x")
        .await;
    let mut rules_now = shared_secrets_up();
    rules_now.extend(rules(json!([
        {"resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["named"]}},
        {"resource": "configmaps", "direction": "FromConsumer", "selector": {"names": ["ruled"]}},
    ])));
    w.reconcile_as(&cluster_binding("b-2"), &rules_now, ConflictPolicy::Fail, &["team-a"])
        .await;
    w.reconcile_as(&cluster_binding("b-2"), &[], ConflictPolicy::Fail, &["team-a"])
        .await;
    assert!(
        w.on_provider(&secrets(), "team-a", "kept").await.is_none(),
        "b-2 collected its own copies"
    );
    let report = w.reconcile(&rules_now).await;
    assert_eq!(report.copied, 5);
    World::create(&w.provider, &secrets(), {
        let mut s = secret("team-b", "foreign-copy", json!({"core.kbind.io/managed": "true"}), "x");
        s.metadata.annotations = Some(
            [
                (annotation::RELATED_BINDING.to_string(), "b-2".to_string()),
                (annotation::CONSUMER_CLUSTER_UID.to_string(), CLUSTER_UID.to_string()),
            ]
            .into(),
        );
        s
    })
    .await;

    w.consumer
        .patch(
            &secrets(),
            Some("team-a"),
            "relabelled",
            &Patch::Merge(json!({"metadata": {"labels": {"share": "no"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    w.consumer
        .delete(&secrets(), Some("team-a"), "deleted", &Default::default())
        .await
        .unwrap();
    rules_now.retain(|r| r.selector.names != vec!["ruled".to_string()]);
    rules_now[1].selector.names = vec!["something-else".into()];
    w.consumer
        .patch(
            &secrets(),
            Some("team-a"),
            "named",
            &Patch::Merge(json!({"metadata": {"labels": {"share": "no"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();

    let report = w.reconcile(&rules_now).await;
    assert_eq!(
        report.removed, 4,
        "relabelled, deleted, named and the configmap rule's copy"
    );
    assert_eq!(report.copied, 1);
    for name in ["relabelled", "deleted", "named"] {
        assert!(
            w.on_provider(&secrets(), "team-a", name).await.is_none(),
            "{name} is collected"
        );
    }
    assert!(
        w.on_provider(&configmaps(), "team-a", "ruled").await.is_none(),
        "a removed rule's copy is collected"
    );
    assert!(w.on_provider(&secrets(), "team-a", "kept").await.is_some());
    assert!(
        w.on_provider(&secrets(), "team-a", "unmarked").await.is_some(),
        "unmarked objects are never collected"
    );
    assert!(
        w.on_provider(&secrets(), "team-b", "foreign-copy").await.is_some(),
        "another binding's copy stays"
    );

    // A namespace out of use collects its copies too.
    let report = w
        .reconcile_as(&cluster_binding("b-1"), &rules_now, ConflictPolicy::Fail, &["team-b"])
        .await;
    assert_eq!(report.removed, 1);
    assert!(w.on_provider(&secrets(), "team-a", "kept").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn consumer_copies_stay_when_the_provider_source_goes_and_go_when_the_binding_drops_them() {
    let w = World::new().await;
    w.provider_configmap("team-a", "endpoints", json!({"url": "a"})).await;
    w.provider_configmap("team-a", "extra", json!({"url": "b"})).await;
    let down = rules(
        json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints", "extra"]}}]),
    );
    assert_eq!(w.reconcile(&down).await.copied, 2);

    // A provider-side change never deletes on the consumer (§8.1).
    w.provider
        .delete(&configmaps(), Some("team-a"), "endpoints", &Default::default())
        .await
        .unwrap();
    let report = w.reconcile(&down).await;
    assert_eq!(report.removed, 0);
    assert!(w.on_consumer(&configmaps(), "team-a", "endpoints").await.is_some());

    // The binding no longer naming it does.
    let fewer =
        rules(json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["extra"]}}]));
    let report = w.reconcile(&fewer).await;
    assert_eq!(report.removed, 1);
    assert!(w.on_consumer(&configmaps(), "team-a", "endpoints").await.is_none());
    assert!(w.on_consumer(&configmaps(), "team-a", "extra").await.is_some());
}

#[tokio::test(start_paused = true)]
async fn unbind_removes_our_copies_on_both_sides_and_orphan_spares_the_provider() {
    let w = World::new().await;
    w.consumer_secret("team-a", "db", json!({"share": "yes"}), "x").await;
    w.provider_configmap("team-a", "endpoints", json!({"url": "a"})).await;
    let mut both = shared_secrets_up();
    both.extend(rules(
        json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}}]),
    ));
    assert_eq!(w.reconcile(&both).await.copied, 2);

    let orphan = related::remove_copies(&w.ctx, &cluster_binding("b-1"), CLUSTER_UID, None, true)
        .await
        .unwrap();
    assert!(orphan, "Orphan needs no provider");
    assert!(
        w.on_consumer(&configmaps(), "team-a", "endpoints").await.is_none(),
        "consumer copies go"
    );
    assert!(
        w.on_provider(&secrets(), "team-a", "db").await.is_some(),
        "Orphan leaves the provider alone"
    );

    let blocked = related::remove_copies(&w.ctx, &cluster_binding("b-1"), CLUSTER_UID, None, false)
        .await
        .unwrap();
    assert!(!blocked, "provider copies cannot go without a provider");
    let done = related::remove_copies(&w.ctx, &cluster_binding("b-1"), CLUSTER_UID, Some(&w.engaged), false)
        .await
        .unwrap();
    assert!(done);
    assert!(w.on_provider(&secrets(), "team-a", "db").await.is_none());
    assert!(
        w.on_consumer(&secrets(), "team-a", "db").await.is_some(),
        "sources are never touched"
    );
    assert!(
        w.on_provider(&configmaps(), "team-a", "endpoints").await.is_some(),
        "sources are never touched"
    );
}

#[tokio::test(start_paused = true)]
async fn a_binding_copies_in_its_namespace_and_a_cluster_binding_where_instances_live() {
    let w = World::new().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    World::create(&w.consumer, &crds(), object(crd)).await;
    eventually("widgets to be served", Duration::from_secs(60), || {
        let consumer = w.consumer.clone();
        async move { consumer.list(&widgets(), None, &Default::default()).await.is_ok() }
    })
    .await;
    World::create(
        &w.consumer,
        &widgets(),
        object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team-b"}})),
    )
    .await;
    let apis = vec!["widgets.example.org".to_string(), "gadgets.example.org".to_string()];
    let in_use = related::namespaces_in_use(&w.ctx, &cluster_binding("b-1"), &apis)
        .await
        .unwrap();
    assert_eq!(in_use, BTreeSet::from(["team-b".to_string()]));

    let namespaced = BindingRef {
        kind: BindingKind::Namespaced,
        namespace: Some("team-a".into()),
        name: "b".into(),
        uid: "b-3".into(),
    };
    let own = related::namespaces_in_use(&w.ctx, &namespaced, &apis).await.unwrap();
    assert_eq!(own, BTreeSet::from(["team-a".to_string()]));
    w.consumer_secret("team-a", "db", json!({"share": "yes"}), "x").await;
    w.consumer_secret("team-b", "db", json!({"share": "yes"}), "x").await;
    // Even when handed more namespaces, a Binding stays in its own.
    let report = w
        .reconcile_as(
            &namespaced,
            &shared_secrets_up(),
            ConflictPolicy::Fail,
            &["team-a", "team-b"],
        )
        .await;
    assert_eq!(report.copied, 1);
    assert!(w.on_provider(&secrets(), "team-a", "db").await.is_some());
    assert!(w.on_provider(&secrets(), "team-b", "db").await.is_none());
}

/// What the Helm chart grants the konnector on the consumer, as far as these tests reach: kbind's
/// API, CRD reads, Namespaces, and Secrets only in its own namespace (no ConfigMaps anywhere).
fn chart_like_rbac() -> Vec<(ApiResource, Value)> {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let subject = json!([{"kind": "ServiceAccount", "name": "konnector", "namespace": "kbind"}]);
    vec![
        (
            ApiResource::erase::<ClusterRole>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "konnector"},
            "rules": [
                {"apiGroups": ["core.kbind.io"], "resources": ["*"], "verbs": ["*"]},
                {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
                {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
            ]}),
        ),
        (
            ApiResource::erase::<ClusterRoleBinding>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "konnector"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "konnector"}}),
        ),
        (
            ApiResource::erase::<Role>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "konnector", "namespace": "kbind"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch", "update", "patch"]}]}),
        ),
        (
            ApiResource::erase::<RoleBinding>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "konnector", "namespace": "kbind"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "konnector"}}),
        ),
    ]
}

/// Found on real clusters with the chart's RBAC: a ClusterBinding without related resources
/// failed every pass listing consumer Secrets it may not read, and retried for ever.
#[tokio::test(start_paused = true)]
async fn a_binding_without_related_resources_needs_no_consumer_secret_or_configmap_reads() {
    let konnector = UserInfo::service_account("kbind", "konnector");
    let w = World::with_consumer_user(konnector, Some(chart_like_rbac())).await;
    w.consumer_secret("team-a", "db", json!({"share": "yes"}), "s3cret")
        .await;

    let report = w.reconcile(&[]).await;
    assert_eq!((report.copied, report.removed), (0, 0));
    assert!(report.denied.is_empty(), "{:?}", report.denied);

    // A rule that does need the consumer's Secrets still fails loudly without the grant.
    let namespaces = BTreeSet::from(["team-a".to_string()]);
    let refused = related::reconcile(
        &w.ctx,
        &cluster_binding("b-1"),
        &shared_secrets_up(),
        ConflictPolicy::Fail,
        &w.engaged,
        CLUSTER_UID,
        &namespaces,
    )
    .await;
    assert!(refused.is_err(), "{refused:?}");
    assert!(w.on_provider(&secrets(), "team-a", "db").await.is_none());
}

#[tokio::test(start_paused = true)]
async fn a_throttled_list_fails_the_pass_instead_of_reading_as_no_instances() {
    // Real kube-apiservers answer 429 on the first lists of a just-created CRD, and on any list
    // when throttling; read as "no instances" it would make busy namespaces look unused and their
    // related copies collectable. Only a 404 means "not served yet".
    let w = World::new().await;
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {"group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
    });
    World::create(&w.consumer, &crds(), object(crd)).await;
    eventually("widgets to be served", Duration::from_secs(60), || {
        let consumer = w.consumer.clone();
        async move { consumer.list(&widgets(), None, &Default::default()).await.is_ok() }
    })
    .await;
    let apis = vec!["widgets.example.org".to_string()];
    w.consumer_cluster.inject_error(
        fakeapi::ErrorRule::new(
            Some("list"),
            Some("widgets"),
            fakeapi::InjectedError::TooManyRequests { retry_after_seconds: 1 },
        )
        .times(1),
    );
    let throttled = related::namespaces_in_use(&w.ctx, &cluster_binding("b-1"), &apis).await;
    assert!(throttled.is_err(), "a 429 fails the pass: {throttled:?}");
    let served = related::namespaces_in_use(&w.ctx, &cluster_binding("b-1"), &apis)
        .await
        .expect("the retry is served");
    assert_eq!(served, BTreeSet::new());
}

/// The one-pass reconcile cannot see the bound objects, so it cannot follow references: a copy
/// a reference selects must survive it (never collect on a partial picture), while copies its
/// labels and names no longer select still go.
#[tokio::test(start_paused = true)]
async fn a_one_pass_reconcile_never_collects_what_a_reference_may_select() {
    let w = World::new().await;
    w.consumer_secret("team-a", "db-password", json!({}), "s3cret").await;
    let by_name = rules(json!([{"resource": "secrets", "direction": "FromConsumer",
        "selector": {"names": ["db-password"]}}]));
    assert_eq!(w.reconcile(&by_name).await.copied, 1);
    assert!(w.on_provider(&secrets(), "team-a", "db-password").await.is_some());

    let by_reference = rules(json!([{"resource": "secrets", "direction": "FromConsumer",
        "selector": {"references": [{"path": "spec.passwordSecretRef.name"}]}}]));
    let report = w.reconcile(&by_reference).await;
    assert_eq!(report.removed, 0, "{report:?}");
    assert!(
        w.on_provider(&secrets(), "team-a", "db-password").await.is_some(),
        "a copy a bound object may reference stays"
    );

    w.reconcile(&[]).await;
    assert!(
        w.on_provider(&secrets(), "team-a", "db-password").await.is_none(),
        "with no rule left the copy goes"
    );
}
