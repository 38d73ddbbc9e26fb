//! Syncers against in-process fake consumer and provider clusters on a paused clock: spec up
//! with filtered metadata, status down, drift, deletion, conflicts, mappers and RBAC.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use fakeapi::{FakeCluster, UserInfo};
use kbind_api::ConflictPolicy;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams, SharedClock,
    TokioClock,
};
use kbind_engine::context::Context;
use kbind_engine::mapper::{Identity, Mapper, ObjectKey, assert_round_trips};
use kbind_engine::provider::EngagedProvider;
use kbind_engine::sync::{ApiSyncerSpec, BindingKind, BindingRef, Syncers};
use serde_json::{Value, json};

mod support;

use support::*;

struct World {
    consumer: FakeCluster,
    provider: FakeCluster,
    /// Consumer admin (the user's hands).
    admin: Arc<dyn ClusterClient>,
    /// Provider admin (someone else on the provider).
    padmin: Arc<dyn ClusterClient>,
    ctx: Context,
    engaged: Arc<EngagedProvider>,
    _task: AbortOnDrop,
}

/// Merge-patches widget `ns/name` through `client`.
async fn merge_patch(client: &Arc<dyn ClusterClient>, ns: &str, name: &str, patch: Value) -> DynamicObject {
    let params = PatchParams::default();
    client
        .patch(&widgets(), Some(ns), name, &Patch::Merge(patch), &params)
        .await
        .unwrap()
}

impl World {
    async fn new() -> Self {
        Self::as_user(konnector(), |_| async {}).await
    }

    /// A world whose konnector acts on the provider as `user`; `prepare` runs on the provider
    /// admin client before the engagement.
    async fn as_user<F, Fut>(user: UserInfo, prepare: F) -> Self
    where
        F: FnOnce(Arc<dyn ClusterClient>) -> Fut,
        Fut: Future<Output = ()>,
    {
        let clock: SharedClock = Arc::new(TokioClock::fixed());
        let consumer = FakeCluster::builder("consumer")
            .seed(1)
            .clock(clock.clone())
            .garbage_collector(false)
            .build();
        let provider = FakeCluster::builder("provider").seed(2).clock(clock.clone()).build();
        let admin: Arc<dyn ClusterClient> = Arc::new(consumer.admin_client());
        let padmin: Arc<dyn ClusterClient> = Arc::new(provider.admin_client());
        install_kbind_crds(&admin).await;
        serve_widgets(&admin).await;
        serve_widgets(&padmin).await;
        for ns in ["kbind", "team-a", "team-b"] {
            create_namespace(&admin, ns).await;
        }
        prepare(padmin.clone()).await;
        let Engaged { ctx, engaged, task } = Engagement {
            consumer_user: konnector(),
            provider_user: user,
            secret_labels: Value::Null,
        }
        .engage(&consumer, &provider, clock)
        .await;
        Self {
            consumer,
            provider,
            admin,
            padmin,
            ctx,
            engaged,
            _task: task,
        }
    }

    fn spec(&self, policy: ConflictPolicy) -> ApiSyncerSpec {
        ApiSyncerSpec {
            connection: "acme".into(),
            binding: BindingRef {
                kind: BindingKind::Cluster,
                namespace: None,
                name: "widgets".into(),
                uid: "binding-uid".into(),
            },
            api: "widgets.example.org".into(),
            resource: widgets(),
            namespaced: true,
            namespace: None,
            conflict_policy: policy,
            consumer_cluster_uid: self.consumer.identity_uid(),
            status_subresource: true,
        }
    }

    fn syncers(&self, mapper: Arc<dyn Mapper>, spec: ApiSyncerSpec) -> Syncers {
        let syncers = Syncers::new(self.ctx.clone(), mapper);
        assert!(syncers.ensure(spec, self.engaged.clone()));
        syncers
    }

    async fn consumer_widget(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.admin.get_opt(&widgets(), Some(ns), name).await.unwrap()
    }

    async fn provider_widget(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.padmin.get_opt(&widgets(), Some(ns), name).await.unwrap()
    }

    async fn create_widget(&self, ns: &str, name: &str, extra: Value) -> DynamicObject {
        let mut body = json!({"apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns}, "spec": {"size": 1}});
        merge(&mut body, extra);
        self.admin
            .create(&widgets(), Some(ns), &object(body), &PostParams::default())
            .await
            .unwrap()
    }

    async fn create_provider_widget(&self, ns: &str, name: &str, annotations: Value) -> DynamicObject {
        self.padmin
            .create(
                &widgets(),
                Some(ns),
                &object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
                    "metadata": {"name": name, "namespace": ns, "annotations": annotations},
                    "spec": {"size": 99}})),
                &PostParams::default(),
            )
            .await
            .unwrap()
    }

    async fn patch_consumer(&self, ns: &str, name: &str, patch: Value) -> DynamicObject {
        merge_patch(&self.admin, ns, name, patch).await
    }

    async fn patch_provider(&self, ns: &str, name: &str, patch: Value) -> DynamicObject {
        merge_patch(&self.padmin, ns, name, patch).await
    }

    async fn patch_provider_status(&self, ns: &str, name: &str, patch: Value) -> DynamicObject {
        let params = PatchParams::default();
        let patch = Patch::Merge(patch);
        self.padmin
            .patch_status(&widgets(), Some(ns), name, &patch, &params)
            .await
            .unwrap()
    }

    async fn wait_consumer(&self, what: &str, ns: &str, name: &str, check: impl Fn(Option<&DynamicObject>) -> bool) {
        eventually(what, Duration::from_secs(120), || {
            let fut = self.consumer_widget(ns, name);
            let check = &check;
            async move { check(fut.await.as_ref()) }
        })
        .await;
    }

    async fn wait_provider(&self, what: &str, ns: &str, name: &str, check: impl Fn(Option<&DynamicObject>) -> bool) {
        eventually(what, Duration::from_secs(120), || {
            let fut = self.provider_widget(ns, name);
            let check = &check;
            async move { check(fut.await.as_ref()) }
        })
        .await;
    }

    /// Provider writes made by the konnector to one object.
    fn konnector_writes(&self, name: &str) -> usize {
        self.provider
            .write_log()
            .iter()
            .filter(|w| w.user == "konnector" && w.name == name)
            .count()
    }
}

fn merge(target: &mut Value, patch: Value) {
    match (target, patch) {
        (Value::Object(t), Value::Object(p)) => {
            for (k, v) in p {
                merge(t.entry(k).or_insert(Value::Null), v);
            }
        }
        (t, p) => *t = p,
    }
}

fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn has_markers_of(obj: &DynamicObject, cluster: &str, object_uid: &str) -> bool {
    annotation(obj, "core.kbind.io/consumer-cluster-uid") == Some(cluster)
        && annotation(obj, "core.kbind.io/consumer-object-uid") == Some(object_uid)
}

#[tokio::test(start_paused = true)]
async fn created_object_is_copied_up_with_markers_and_filtered_metadata() {
    let w = World::new().await;
    let syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    let created = w
        .create_widget(
            "team-a",
            "w1",
            json!({"metadata": {
                "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm"},
                "annotations": {"note": "keep", "meta.helm.sh/release-name": "r", "helm.sh/chart": "c",
                    "argocd.argoproj.io/sync-wave": "1", "kustomize.toolkit.fluxcd.io/name": "k",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}"},
                "finalizers": ["example.org/keep"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": "owner-uid"}]}}),
        )
        .await;
    let uid = created.metadata.uid.clone().unwrap();
    w.wait_provider("the provider copy", "team-a", "w1", |c| c.is_some())
        .await;
    let copy = w.provider_widget("team-a", "w1").await.unwrap();
    assert!(has_markers_of(&copy, &w.consumer.identity_uid(), &uid));
    assert_eq!(annotation(&copy, "core.kbind.io/consumer-generation"), Some("1"));
    assert_eq!(annotation(&copy, "note"), Some("keep"));
    let annotations = copy.metadata.annotations.clone().unwrap();
    for key in annotations.keys() {
        assert!(
            key == "note" || key.starts_with("core.kbind.io/"),
            "{key} must not be copied up"
        );
    }
    let labels = copy.metadata.labels.clone().unwrap();
    assert_eq!(
        labels,
        BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("core.kbind.io/managed".to_string(), "true".to_string())
        ])
    );
    assert!(copy.metadata.owner_references.unwrap_or_default().is_empty());
    assert!(copy.metadata.finalizers.unwrap_or_default().is_empty());
    assert_eq!(copy.data["spec"], json!({"size": 1}));

    let ns = w
        .padmin
        .get(&res("", "v1", "Namespace", "namespaces"), None, "team-a")
        .await
        .unwrap();
    assert_eq!(
        ns.metadata
            .labels
            .as_ref()
            .unwrap()
            .get("core.kbind.io/managed")
            .map(String::as_str),
        Some("true")
    );
    assert_eq!(
        annotation(&ns, "core.kbind.io/consumer-cluster-uid"),
        Some(w.consumer.identity_uid().as_str())
    );
    w.wait_consumer("the syncer finalizer", "team-a", "w1", |o| {
        o.and_then(|o| o.metadata.finalizers.clone()).is_some_and(|f| {
            f.contains(&"core.kbind.io/syncer".to_string()) && f.contains(&"example.org/keep".to_string())
        })
    })
    .await;
    let key = w.spec(ConflictPolicy::Fail).key();
    assert_eq!(syncers.report(&key).unwrap().synced, 1);
    assert_eq!(syncers.keys(), vec![key]);
}

#[tokio::test(start_paused = true)]
async fn spec_goes_up_drift_is_reverted_and_status_comes_down_translated() {
    let w = World::new().await;
    let _syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    w.create_widget("team-a", "w1", json!({})).await;
    w.wait_provider("the copy", "team-a", "w1", |c| c.is_some()).await;

    // Drift on the provider: reverted, which also moves the provider generation ahead.
    w.patch_provider("team-a", "w1", json!({"spec": {"size": 42}})).await;
    w.wait_provider("drift to be reverted", "team-a", "w1", |c| {
        c.is_some_and(|c| c.data["spec"]["size"] == 1 && c.metadata.generation == Some(3))
    })
    .await;

    let updated = w.patch_consumer("team-a", "w1", json!({"spec": {"size": 2}})).await;
    assert_eq!(updated.metadata.generation, Some(2));
    w.wait_provider("the new spec", "team-a", "w1", |c| {
        c.is_some_and(|c| {
            c.data["spec"]["size"] == 2 && annotation(c, "core.kbind.io/consumer-generation") == Some("2")
        })
    })
    .await;
    let copy = w.provider_widget("team-a", "w1").await.unwrap();
    let provider_generation = copy.metadata.generation.unwrap();
    assert_eq!(
        provider_generation, 4,
        "the drift and its revert moved the provider ahead"
    );

    // A status answering an older provider generation is held back.
    let stale = json!({"status": {"phase": "Old", "observedGeneration": provider_generation - 1}});
    w.patch_provider_status("team-a", "w1", stale).await;
    // A negative check: ten quiet seconds on the paused clock (many cache looks), not a sync point.
    tokio::time::sleep(Duration::from_secs(10)).await;
    let consumer = w.consumer_widget("team-a", "w1").await.unwrap();
    assert!(
        consumer.data.get("status").is_none(),
        "{:?}",
        consumer.data.get("status")
    );

    let current = json!({"status": {"phase": "Ready", "observedGeneration": provider_generation,
        "conditions": [{"type": "Ready", "status": "True", "reason": "Done", "message": "",
            "lastTransitionTime": "2026-01-01T00:00:00Z", "observedGeneration": provider_generation}]}});
    w.patch_provider_status("team-a", "w1", current).await;
    w.wait_consumer("the status to come down", "team-a", "w1", |o| {
        o.is_some_and(|o| o.data.get("status").and_then(|s| s.get("phase")) == Some(&json!("Ready")))
    })
    .await;
    let status = w.consumer_widget("team-a", "w1").await.unwrap().data["status"].clone();
    assert_eq!(status["observedGeneration"], 2);
    assert_eq!(status["conditions"][0]["observedGeneration"], 2);
}

#[tokio::test(start_paused = true)]
async fn deleted_object_takes_its_copy_first_and_orphan_keeps_it() {
    let w = World::new().await;
    let _syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    w.create_widget("team-a", "gone", json!({})).await;
    w.create_widget(
        "team-a",
        "kept",
        json!({"metadata": {"annotations": {"core.kbind.io/deletion-policy": "Orphan"}}}),
    )
    .await;
    for name in ["gone", "kept"] {
        w.wait_provider("the copy", "team-a", name, |c| c.is_some()).await;
        w.wait_consumer("the finalizer", "team-a", name, |o| {
            o.is_some_and(|o| o.metadata.finalizers.is_some())
        })
        .await;
    }
    for name in ["gone", "kept"] {
        w.admin
            .delete(&widgets(), Some("team-a"), name, &Default::default())
            .await
            .unwrap();
    }
    w.wait_consumer("the consumer object to go", "team-a", "gone", |o| o.is_none())
        .await;
    assert!(w.provider_widget("team-a", "gone").await.is_none());
    assert!(
        w.provider
            .write_log()
            .iter()
            .any(|r| r.verb == "delete" && r.name == "gone" && r.user == "konnector"),
        "the konnector deleted the copy"
    );
    let consumer_log = w.consumer.write_log();
    let deleted_at = consumer_log
        .iter()
        .position(|r| r.name == "gone" && r.verb == "delete")
        .expect("the user's delete");
    assert!(
        consumer_log[deleted_at..]
            .iter()
            .any(|r| r.name == "gone" && r.verb == "update" && r.user == "konnector"),
        "the konnector released its finalizer after the delete"
    );
    w.wait_consumer("the orphaned object to go", "team-a", "kept", |o| o.is_none())
        .await;
    assert!(
        w.provider_widget("team-a", "kept").await.is_some(),
        "Orphan keeps the copy"
    );
}

#[tokio::test(start_paused = true)]
async fn copy_deleted_out_of_band_is_recreated() {
    let w = World::new().await;
    let _syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    w.create_widget("team-a", "w1", json!({})).await;
    w.wait_provider("the copy", "team-a", "w1", |c| c.is_some()).await;
    let first = w.provider_widget("team-a", "w1").await.unwrap().metadata.uid;
    w.padmin
        .delete(&widgets(), Some("team-a"), "w1", &Default::default())
        .await
        .unwrap();
    w.wait_provider("a new copy", "team-a", "w1", |c| {
        c.is_some_and(|c| c.metadata.uid != first)
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn fail_policy_leaves_a_foreign_object_and_signals_the_conflict() {
    let w = World::new().await;
    create_namespace(&w.padmin, "team-a").await;
    let foreign = w.create_provider_widget("team-a", "w1", json!({})).await;
    let syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    let created = w.create_widget("team-a", "w1", json!({})).await;
    w.wait_consumer("the conflict annotation", "team-a", "w1", |o| {
        o.is_some_and(|o| annotation(o, "core.kbind.io/conflict") == Some("ForeignObjectExists"))
    })
    .await;
    let live = w.provider_widget("team-a", "w1").await.unwrap();
    assert_eq!(live.metadata.resource_version, foreign.metadata.resource_version);
    assert_eq!(w.konnector_writes("w1"), 0, "the foreign object was not touched");

    let events = w
        .admin
        .list(
            &kbind_engine::events::event_resource(),
            Some("team-a"),
            &Default::default(),
        )
        .await
        .unwrap();
    let warning = events
        .items
        .iter()
        .find(|e| e.data["reason"] == "ForeignObjectExists")
        .expect("a Warning event");
    assert_eq!(warning.data["type"], "Warning");
    assert_eq!(warning.data["reportingController"], "kbind-konnector");
    assert_eq!(warning.data["regarding"]["uid"], json!(created.metadata.uid));
    let report = syncers.report(&w.spec(ConflictPolicy::Fail).key()).unwrap();
    assert_eq!(
        report
            .conflicts
            .get(&ObjectKey::namespaced("team-a", "w1"))
            .map(String::as_str),
        Some("ForeignObjectExists")
    );
    assert_eq!(report.synced, 0);
    let status = w.consumer_widget("team-a", "w1").await.unwrap().data["status"].clone();
    assert_eq!(status["conditions"][0]["reason"], "ForeignObjectExists");
}

#[tokio::test(start_paused = true)]
async fn adopt_stamps_markers_but_never_takes_another_clusters_copy() {
    let w = World::new().await;
    create_namespace(&w.padmin, "team-a").await;
    w.create_provider_widget("team-a", "bare", json!({})).await;
    w.create_provider_widget(
        "team-a",
        "theirs",
        json!({"core.kbind.io/consumer-cluster-uid": "another-cluster", "core.kbind.io/consumer-object-uid": "x"}),
    )
    .await;
    let _syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Adopt));
    let bare = w.create_widget("team-a", "bare", json!({})).await;
    w.create_widget("team-a", "theirs", json!({})).await;
    let me = w.consumer.identity_uid();
    let uid = bare.metadata.uid.clone().unwrap();
    w.wait_provider("adopted markers", "team-a", "bare", |c| {
        c.is_some_and(|c| has_markers_of(c, &me, &uid) && c.data["spec"]["size"] == 1)
    })
    .await;
    w.wait_consumer("OwnedByAnother", "team-a", "theirs", |o| {
        o.is_some_and(|o| annotation(o, "core.kbind.io/conflict") == Some("OwnedByAnother"))
    })
    .await;
    assert_eq!(w.konnector_writes("theirs"), 0);
    let theirs = w.provider_widget("team-a", "theirs").await.unwrap();
    assert_eq!(theirs.data["spec"]["size"], 99);
}

#[tokio::test(start_paused = true)]
async fn readopt_takes_back_a_stale_copy_of_this_cluster() {
    let w = World::new().await;
    create_namespace(&w.padmin, "team-a").await;
    let me = w.consumer.identity_uid();
    w.create_provider_widget(
        "team-a",
        "w1",
        json!({"core.kbind.io/consumer-cluster-uid": me, "core.kbind.io/consumer-object-uid": "before-restore"}),
    )
    .await;
    let _syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    let created = w.create_widget("team-a", "w1", json!({})).await;
    w.wait_consumer("OwnedByAnother", "team-a", "w1", |o| {
        o.is_some_and(|o| annotation(o, "core.kbind.io/conflict") == Some("OwnedByAnother"))
    })
    .await;
    assert_eq!(w.konnector_writes("w1"), 0);
    w.patch_consumer(
        "team-a",
        "w1",
        json!({"metadata": {"annotations": {"core.kbind.io/readopt": "true"}}}),
    )
    .await;
    let uid = created.metadata.uid.clone().unwrap();
    w.wait_provider("the copy taken back", "team-a", "w1", |c| {
        c.is_some_and(|c| has_markers_of(c, &me, &uid))
    })
    .await;
    w.wait_consumer("the conflict to clear", "team-a", "w1", |o| {
        o.is_some_and(|o| annotation(o, "core.kbind.io/conflict").is_none())
    })
    .await;
}

/// Maps namespace `n` to `<prefix>-n`; only provider namespaces with the prefix map back.
struct Prefix(&'static str);

impl Mapper for Prefix {
    fn to_provider(&self, _res: &ApiResource, key: &ObjectKey) -> ObjectKey {
        ObjectKey {
            namespace: key.namespace.as_ref().map(|ns| format!("{}-{ns}", self.0)),
            name: key.name.clone(),
        }
    }

    fn to_consumer(&self, _res: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
        let namespace = match &key.namespace {
            Some(ns) => Some(ns.strip_prefix(self.0)?.strip_prefix('-')?.to_string()),
            None => None,
        };
        Some(ObjectKey {
            namespace,
            name: key.name.clone(),
        })
    }
}

#[tokio::test(start_paused = true)]
async fn prefix_mapper_round_trips_and_syncs_end_to_end() {
    assert_round_trips(&Prefix("c1"), &widgets());
    let w = World::new().await;
    let _syncers = w.syncers(Arc::new(Prefix("c1")), w.spec(ConflictPolicy::Fail));
    w.create_widget("team-a", "w1", json!({})).await;
    w.wait_provider("the mapped copy", "c1-team-a", "w1", |c| c.is_some())
        .await;
    assert!(w.provider_widget("team-a", "w1").await.is_none());
    // Provider changes map back: drift on the mapped copy is reverted.
    w.patch_provider("c1-team-a", "w1", json!({"spec": {"size": 7}})).await;
    w.wait_provider("drift reverted", "c1-team-a", "w1", |c| {
        c.is_some_and(|c| c.data["spec"]["size"] == 1 && c.metadata.generation == Some(3))
    })
    .await;
    w.admin
        .delete(&widgets(), Some("team-a"), "w1", &Default::default())
        .await
        .unwrap();
    w.wait_consumer("the object to go", "team-a", "w1", |o| o.is_none())
        .await;
    assert!(w.provider_widget("c1-team-a", "w1").await.is_none());
}

async fn rbac(client: Arc<dyn ClusterClient>) {
    let rbac = |kind: &str, plural: &str| res("rbac.authorization.k8s.io", "v1", kind, plural);
    let create = |r: ApiResource, ns: Option<&'static str>, body: Value| {
        let client = client.clone();
        async move {
            client
                .create(&r, ns, &object(body), &PostParams::default())
                .await
                .unwrap();
        }
    };
    create_namespace(&client, "team-a").await;
    create_namespace(&client, "team-b").await;
    create(
        rbac("ClusterRole", "clusterroles"),
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "konnector-read"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
                      {"apiGroups": ["example.org"], "resources": ["widgets"], "verbs": ["get", "list", "watch"]}]}),
    )
    .await;
    create(
        rbac("ClusterRoleBinding", "clusterrolebindings"),
        None,
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "konnector-read"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "konnector-read"},
            "subjects": [{"kind": "User", "name": "konnector", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .await;
    create(
        rbac("Role", "roles"),
        Some("team-a"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
            "metadata": {"name": "konnector-write", "namespace": "team-a"},
            "rules": [{"apiGroups": ["example.org"], "resources": ["widgets"],
                       "verbs": ["create", "update", "patch", "delete"]}]}),
    )
    .await;
    create(
        rbac("RoleBinding", "rolebindings"),
        Some("team-a"),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": "konnector-write", "namespace": "team-a"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "konnector-write"},
            "subjects": [{"kind": "User", "name": "konnector", "apiGroup": "rbac.authorization.k8s.io"}]}),
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn forbidden_namespace_is_reported_and_the_other_keeps_syncing() {
    let w = World::as_user(UserInfo::user("konnector"), rbac).await;
    let syncers = w.syncers(Arc::new(Identity), w.spec(ConflictPolicy::Fail));
    w.create_widget("team-b", "denied", json!({})).await;
    w.create_widget("team-a", "allowed", json!({})).await;
    w.wait_provider("the allowed copy", "team-a", "allowed", |c| c.is_some())
        .await;
    let key = w.spec(ConflictPolicy::Fail).key();
    eventually("the denial to be reported", Duration::from_secs(120), || {
        let report = syncers.report(&key);
        async move {
            report.is_some_and(|r| r.denied.iter().any(|d| d.ends_with(" widgets.example.org")) && r.synced == 1)
        }
    })
    .await;
    assert!(w.provider_widget("team-b", "denied").await.is_none());
    let report = syncers.report(&key).unwrap();
    assert_eq!(
        report.denied.into_iter().collect::<Vec<_>>(),
        // The first write of a copy is an apply that can only create (docs/decisions.md): the
        // request's own verb, patch, is refused first, as kube-apiserver does.
        vec!["patch widgets.example.org".to_string()]
    );
}

#[tokio::test(start_paused = true)]
async fn ensure_keeps_a_running_syncer_and_drain_releases_everything() {
    let w = World::new().await;
    let spec = w.spec(ConflictPolicy::Fail);
    let syncers = w.syncers(Arc::new(Identity), spec.clone());
    assert!(
        !syncers.ensure(spec.clone(), w.engaged.clone()),
        "same spec, same engagement"
    );
    w.create_widget("team-a", "gone", json!({})).await;
    w.create_widget(
        "team-a",
        "kept",
        json!({"metadata": {"annotations": {"core.kbind.io/deletion-policy": "Orphan"}}}),
    )
    .await;
    for name in ["gone", "kept"] {
        w.wait_provider("the copy", "team-a", name, |c| c.is_some()).await;
        w.wait_consumer("the finalizer", "team-a", name, |o| {
            o.is_some_and(|o| o.metadata.finalizers.is_some())
        })
        .await;
    }
    let drained = syncers.drain(&spec, Some(w.engaged.clone()), false).await.unwrap();
    assert!(drained.is_complete());
    assert_eq!((drained.released, drained.deleted), (2, 1));
    assert!(syncers.keys().is_empty(), "drain stops the syncer");
    assert!(w.provider_widget("team-a", "gone").await.is_none());
    assert!(w.provider_widget("team-a", "kept").await.is_some());
    for name in ["gone", "kept"] {
        let obj = w.consumer_widget("team-a", name).await.unwrap();
        assert!(obj.metadata.finalizers.unwrap_or_default().is_empty());
    }
}

#[tokio::test(start_paused = true)]
async fn orphan_drain_never_touches_the_provider() {
    let w = World::new().await;
    let spec = w.spec(ConflictPolicy::Fail);
    let syncers = w.syncers(Arc::new(Identity), spec.clone());
    w.create_widget("team-a", "w1", json!({})).await;
    w.wait_consumer("the finalizer", "team-a", "w1", |o| {
        o.is_some_and(|o| o.metadata.finalizers.is_some())
    })
    .await;
    w.wait_provider("the copy", "team-a", "w1", |c| c.is_some()).await;
    let blocked = syncers.drain(&spec, None, false).await;
    assert!(blocked.is_err(), "copies to delete and no provider: DeletionBlocked");
    let writes = w.provider.write_log().len();
    let drained = syncers.drain(&spec, None, true).await.unwrap();
    assert_eq!((drained.released, drained.deleted), (1, 0));
    assert_eq!(w.provider.write_log().len(), writes);
    assert!(w.provider_widget("team-a", "w1").await.is_some());
}
