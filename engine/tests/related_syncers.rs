//! The watch-driven related-resource syncers ([`RelatedSyncers`]) against in-process fake
//! consumer and provider clusters on a paused clock: changes are copied on their events, a
//! ClusterBinding follows the namespaces its instances put in use, a provider that may not list
//! a kind cluster-wide is watched per namespace (and a refused namespace is reported), and a
//! syncer stops once its binding is deleting, so it never re-creates what the unbind removed.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use fakeapi::{FakeCluster, UserInfo};
use kbind_api::{Binding, ClusterBinding, ConflictPolicy, RelatedResource};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, Patch, PatchParams, PostParams,
    SharedClock, TokioClock,
};
use kbind_engine::context::Context;
use kbind_engine::provider::EngagedProvider;
use kbind_engine::related::{RelatedSpec, RelatedSyncers};
use kbind_engine::sync::{BindingKind, BindingRef};
use kube::runtime::reflector::store::Writer;
use kube::runtime::watcher::Event;
use serde_json::{Value, json};

mod support;

use support::*;

const CLUSTER_UID: &str = "consumer-uid-1";

struct World {
    consumer_cluster: FakeCluster,
    consumer: Arc<dyn ClusterClient>,
    provider: Arc<dyn ClusterClient>,
    ctx: Context,
    engaged: Arc<EngagedProvider>,
    cluster_bindings: Writer<ClusterBinding>,
    bindings: Writer<Binding>,
    syncers: RelatedSyncers,
    notified: Arc<AtomicUsize>,
    _task: AbortOnDrop,
}

impl World {
    /// A world whose konnector is `provider_user` on the provider; `provider_rbac` (created by
    /// the provider's admin first) says what that user may do.
    async fn new(provider_user: UserInfo, provider_rbac: Vec<(ApiResource, Value)>) -> Self {
        let clock: SharedClock = Arc::new(TokioClock::fixed());
        let consumer_cluster = FakeCluster::builder("consumer").seed(11).clock(clock.clone()).build();
        let provider_cluster = FakeCluster::builder("provider").seed(12).clock(clock.clone()).build();
        let consumer: Arc<dyn ClusterClient> = Arc::new(consumer_cluster.admin_client());
        let provider: Arc<dyn ClusterClient> = Arc::new(provider_cluster.admin_client());
        install_kbind_crds(&consumer).await;
        for ns in ["kbind", "team-a", "team-b"] {
            create_namespace(&consumer, ns).await;
            create_namespace(&provider, ns).await;
        }
        for (res, obj) in provider_rbac {
            create(&provider, &res, object(obj)).await;
        }
        let Engaged { ctx, engaged, task } = Engagement {
            consumer_user: UserInfo::admin(),
            provider_user,
            secret_labels: json!({}),
        }
        .engage(&consumer_cluster, &provider_cluster, clock)
        .await;
        let cluster_bindings = Writer::<ClusterBinding>::new(());
        let bindings = Writer::<Binding>::new(());
        let syncers = RelatedSyncers::new(ctx.clone(), cluster_bindings.as_reader(), bindings.as_reader());
        let notified = Arc::new(AtomicUsize::new(0));
        let count = notified.clone();
        syncers.on_change(Arc::new(move |_: &BindingRef| {
            count.fetch_add(1, Ordering::SeqCst);
        }));
        Self {
            consumer_cluster,
            consumer,
            provider,
            ctx,
            engaged,
            cluster_bindings,
            bindings,
            syncers,
            notified,
            _task: task,
        }
    }

    async fn admin() -> Self {
        Self::new(konnector(), Vec::new()).await
    }

    /// Puts `binding` into the binding store, deleting or not.
    fn store(&mut self, binding: &BindingRef, deleting: bool) {
        let mut meta = json!({"name": binding.name, "uid": binding.uid});
        if deleting {
            meta["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
            meta["finalizers"] = json!(["core.kbind.io/cleanup"]);
        }
        let spec = json!({"connectionRef": {"name": "acme"}, "apis": [{"name": "widgets.example.org"}]});
        match &binding.namespace {
            Some(ns) => {
                meta["namespace"] = json!(ns);
                let b: Binding = serde_json::from_value(json!({"apiVersion": "core.kbind.io/v1alpha1",
                    "kind": "Binding", "metadata": meta, "spec": spec}))
                .expect("a Binding");
                self.bindings.apply_watcher_event(&Event::Apply(b));
            }
            None => {
                let b: ClusterBinding = serde_json::from_value(json!({"apiVersion": "core.kbind.io/v1alpha1",
                    "kind": "ClusterBinding", "metadata": meta, "spec": spec}))
                .expect("a ClusterBinding");
                self.cluster_bindings.apply_watcher_event(&Event::Apply(b));
            }
        }
    }

    fn ensure(&self, binding: &BindingRef, rules: &[RelatedResource]) {
        self.syncers.ensure(
            RelatedSpec {
                binding: binding.clone(),
                apis: vec!["widgets.example.org".into()],
                rules: rules.to_vec(),
                policy: ConflictPolicy::Fail,
                consumer_cluster_uid: CLUSTER_UID.into(),
            },
            self.engaged.clone(),
        );
    }
}

async fn create(client: &Arc<dyn ClusterClient>, res: &ApiResource, obj: DynamicObject) {
    let ns = obj.metadata.namespace.clone();
    client
        .create(res, ns.as_deref(), &obj, &PostParams::default())
        .await
        .expect("create");
}

fn secret(ns: &str, name: &str, password: &str) -> DynamicObject {
    object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": name, "namespace": ns, "labels": {"share": "yes"}},
        "type": "Opaque", "stringData": {"password": password}}))
}

fn secrets_up() -> Vec<RelatedResource> {
    serde_json::from_value(json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}}]))
    .expect("rules")
}

fn binding_in(ns: &str, uid: &str) -> BindingRef {
    BindingRef {
        kind: BindingKind::Namespaced,
        namespace: Some(ns.into()),
        name: "b".into(),
        uid: uid.into(),
    }
}

async fn password_on(client: &Arc<dyn ClusterClient>, ns: &str, name: &str) -> Option<Value> {
    let obj = client.get_opt(&secrets(), Some(ns), name).await.ok()??;
    obj.data.get("data").and_then(|d| d.get("password")).cloned()
}

async fn wait_for_password(w: &World, ns: &str, wanted: Option<Value>, what: &str) {
    let provider = w.provider.clone();
    eventually(what, Duration::from_secs(30), || {
        let (provider, wanted) = (provider.clone(), wanted.clone());
        async move { password_on(&provider, ns, "db").await == wanted }
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_changed_source_is_copied_on_its_event_and_the_binding_is_told() {
    let mut w = World::admin().await;
    let b = binding_in("team-a", "b-1");
    w.store(&b, false);
    create(&w.consumer, &secrets(), secret("team-a", "db", "one")).await;
    create(&w.consumer, &secrets(), secret("team-b", "db", "elsewhere")).await;
    w.ensure(&b, &secrets_up());
    let first = password_on(&w.consumer, "team-a", "db").await;
    wait_for_password(&w, "team-a", first, "the first copy").await;
    assert!(
        password_on(&w.provider, "team-b", "db").await.is_none(),
        "a Binding copies in its own namespace only"
    );
    eventually("the report counts the copy", Duration::from_secs(10), || {
        let copied = w.syncers.report(&b).copied;
        async move { copied == 1 }
    })
    .await;
    assert!(w.notified.load(Ordering::SeqCst) >= 1, "the binding was told");

    w.consumer
        .patch(
            &secrets(),
            Some("team-a"),
            "db",
            &Patch::Merge(json!({"stringData": {"password": "two"}})),
            &PatchParams::default(),
        )
        .await
        .expect("patch");
    let second = password_on(&w.consumer, "team-a", "db").await;
    // Well within the 10 s the pass it replaces waited between looks.
    wait_for_password(&w, "team-a", second, "the change copied").await;
    let report = w.syncers.report(&b);
    assert_eq!((report.copied, report.conflicts.len()), (1, 0), "{report:?}");

    // A rule edit restarts the syncer; until its first converge the last findings stand, so
    // the binding's status does not blank for a moment.
    let narrower: Vec<RelatedResource> =
        serde_json::from_value(json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
            "selector": {"names": ["db"], "labelSelector": {"matchLabels": {"share": "yes"}}}}]))
        .expect("rules");
    w.ensure(&b, &narrower);
    assert_eq!(w.syncers.report(&b).copied, 1, "carried over at once");
    tokio::time::sleep(Duration::from_secs(5)).await;
    assert_eq!(w.syncers.report(&b).copied, 1, "and still true after the converge");
}

#[tokio::test(start_paused = true)]
async fn a_cluster_binding_follows_the_namespaces_its_instances_put_in_use() {
    let mut w = World::admin().await;
    serve_widgets(&w.consumer).await;
    let b = BindingRef {
        kind: BindingKind::Cluster,
        namespace: None,
        name: "acme".into(),
        uid: "b-2".into(),
    };
    w.store(&b, false);
    create(&w.consumer, &secrets(), secret("team-b", "db", "b")).await;
    w.ensure(&b, &secrets_up());
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert!(
        password_on(&w.provider, "team-b", "db").await.is_none(),
        "no instance in team-b: not in use"
    );

    let widget = object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team-b"}}));
    create(&w.consumer, &widgets(), widget).await;
    let copied = password_on(&w.consumer, "team-b", "db").await;
    wait_for_password(&w, "team-b", copied, "the copy once an instance is in team-b").await;

    w.consumer
        .delete(&widgets(), Some("team-b"), "w", &DeleteParams::default())
        .await
        .expect("delete the widget");
    wait_for_password(&w, "team-b", None, "the copy collected once team-b is out of use").await;
    assert!(
        password_on(&w.consumer, "team-b", "db").await.is_some(),
        "the source stays"
    );
}

#[tokio::test(start_paused = true)]
async fn a_provider_that_may_not_list_a_kind_cluster_wide_is_watched_per_namespace() {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    let subject = json!([{"kind": "ServiceAccount", "name": "konnector", "namespace": "kbind"}]);
    let rbac = vec![
        (
            ApiResource::erase::<ClusterRole>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
            "metadata": {"name": "konnector"},
            "rules": [{"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]}]}),
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
                "metadata": {"name": "konnector", "namespace": "team-a"},
                "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["*"]}]}),
        ),
        (
            ApiResource::erase::<RoleBinding>(&()),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "konnector", "namespace": "team-a"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "konnector"}}),
        ),
    ];
    let mut w = World::new(UserInfo::service_account("kbind", "konnector"), rbac).await;
    let (allowed, refused) = (binding_in("team-a", "b-3"), binding_in("team-b", "b-4"));
    for b in [&allowed, &refused] {
        w.store(b, false);
    }
    create(&w.consumer, &secrets(), secret("team-a", "db", "a")).await;
    create(&w.consumer, &secrets(), secret("team-b", "db", "b")).await;
    w.ensure(&allowed, &secrets_up());
    w.ensure(&refused, &secrets_up());
    let copied = password_on(&w.consumer, "team-a", "db").await;
    wait_for_password(&w, "team-a", copied, "the copy in the namespace the provider allows").await;
    // As a pass reported it: the refused list of the namespace, and the refused read of the
    // target its source asks for.
    eventually("the refusals are reported", Duration::from_secs(30), || {
        let denied = w.syncers.report(&refused).denied;
        async move { denied == ["get secrets", "list secrets"] }
    })
    .await;
    assert!(w.syncers.report(&allowed).denied.is_empty());
    assert!(
        w.engaged.cache.watched().iter().any(|k| k.ends_with("secrets@team-a")),
        "one watch of team-a's Secrets: {:?}",
        w.engaged.cache.watched()
    );
}

#[tokio::test(start_paused = true)]
async fn a_syncer_stops_once_its_binding_is_deleting_and_recreates_nothing() {
    let mut w = World::admin().await;
    let b = binding_in("team-a", "b-5");
    w.store(&b, false);
    create(&w.consumer, &secrets(), secret("team-a", "db", "one")).await;
    w.ensure(&b, &secrets_up());
    let copied = password_on(&w.consumer, "team-a", "db").await;
    wait_for_password(&w, "team-a", copied, "the copy").await;

    // The unbind's view: the binding is deleting and its copy is removed.
    w.store(&b, true);
    w.provider
        .delete(&secrets(), Some("team-a"), "db", &DeleteParams::default())
        .await
        .expect("remove the copy");
    w.consumer
        .patch(
            &secrets(),
            Some("team-a"),
            "db",
            &Patch::Merge(json!({"stringData": {"password": "two"}})),
            &PatchParams::default(),
        )
        .await
        .expect("patch");
    tokio::time::sleep(w.ctx.config.rediscovery_interval * 2).await;
    assert!(
        password_on(&w.provider, "team-a", "db").await.is_none(),
        "the syncer of a deleting binding wrote again"
    );
}

/// §8.9: a ClusterBinding whose namespaces in use cannot be read (the consumer CRD read fails)
/// collects nothing; once they can, its copies stay where instances live.
#[tokio::test(start_paused = true)]
async fn unknown_namespaces_in_use_collect_nothing() {
    let mut w = World::admin().await;
    serve_widgets(&w.consumer).await;
    let b = BindingRef {
        kind: BindingKind::Cluster,
        namespace: None,
        name: "acme".into(),
        uid: "b-6".into(),
    };
    w.store(&b, false);
    let widget = object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w", "namespace": "team-b"}}));
    create(&w.consumer, &widgets(), widget).await;
    create(&w.consumer, &secrets(), secret("team-b", "db", "b")).await;
    w.ensure(&b, &secrets_up());
    let copied = password_on(&w.consumer, "team-b", "db").await;
    wait_for_password(&w, "team-b", copied.clone(), "the copy").await;

    // A restarted konnector that cannot read the CRD yet.
    w.consumer_cluster.inject_error(fakeapi::ErrorRule::new(
        Some("get"),
        Some("customresourcedefinitions"),
        fakeapi::InjectedError::Internal,
    ));
    w.syncers = RelatedSyncers::new(w.ctx.clone(), w.cluster_bindings.as_reader(), w.bindings.as_reader());
    w.ensure(&b, &secrets_up());
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        password_on(&w.provider, "team-b", "db").await,
        copied,
        "a copy was collected on an unknown set of namespaces"
    );
    w.consumer_cluster.clear_errors();
    w.ensure(&b, &secrets_up());
    eventually("the report counts the copy", Duration::from_secs(30), || {
        let copied = w.syncers.report(&b).copied;
        async move { copied == 1 }
    })
    .await;
    assert_eq!(password_on(&w.provider, "team-b", "db").await, copied);
}
