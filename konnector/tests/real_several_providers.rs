//! Issue 26 on real kube-apiservers: one consumer API served by two providers, `acme` and `beta` (DESIGN.md §4
//! "Connections per API"), with the `konnector` binary under the chart's least-privilege RBAC and a
//! TokenRequest-minted credential for each provider, driven only through the Kubernetes API.
//!
//! The real-server twins of scenarios/tests/stories/several_providers.rs: namespaced Bindings partition the API
//! by namespace, each consumer object's `core.kbind.io/connection` label names its Connection and the consumer
//! CRD's annotation the first one; a binding that would make two Connections serve one namespace (or a
//! ClusterBinding beside another Connection's Binding, and the reverse) gets `BoundThroughAnotherConnection` and
//! syncs nothing; an incompatible schema from the second provider gets `IncompatibleSchema` naming both; a
//! namespace moves between providers by deleting one Binding, with every consumer object kept (same UID), also
//! when the konnector is killed mid-hand-over.
//!
//! Three clusters per story: acme (0), beta (1) and the consumer (2). Skips like real_stories.rs without the
//! Go-built binaries or helm, unless `KBIND_REQUIRE_REAL_K8S=1` / `KBIND_REQUIRE_HELM=1`. The tests take turns
//! (one lock).

mod child;
mod real;

use kbind_api::consts::{BINDING_NAMESPACES_ALL, annotation as kbind_annotation, condition, label, reason};
use real::*;

const API: &str = "widgets.example.org";
const PROVIDERS: [&str; 2] = ["acme", "beta"];

fn bindings() -> ApiResource {
    erase::<kbind_api::Binding>()
}

fn cluster_bindings() -> ApiResource {
    erase::<kbind_api::ClusterBinding>()
}

fn crds() -> ApiResource {
    erase::<CustomResourceDefinition>()
}

fn namespaces() -> ApiResource {
    erase::<k8s_openapi::api::core::v1::Namespace>()
}

/// beta's widgets keep `size` only: acme's `color` would be dropped there.
fn widgets_crd_without_color() -> Value {
    let mut crd = widgets_crd();
    let props = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    crd.pointer_mut(props)
        .and_then(Value::as_object_mut)
        .expect("the sample CRD has spec properties")
        .remove("color");
    crd
}

/// The provider admin's part for one consumer: export `crd`, a ServiceAccount bound to the demo's least-privilege
/// ClusterRole, and an inline kubeconfig with its TokenRequest-minted token.
async fn prepare(cluster: &Cluster, crd: Value, lines: &Lines) -> String {
    let admin = client_as(cluster, User::Admin).await;
    create(&admin, crd).await;
    create(&admin, namespace(PROVIDER_ACCOUNTS)).await;
    create(
        &admin,
        json!({"apiVersion": "v1", "kind": "ServiceAccount",
               "metadata": {"name": "consumer-1", "namespace": PROVIDER_ACCOUNTS}}),
    )
    .await;
    for (res, mut rbac) in provider_rbac() {
        if rbac["kind"] == "ClusterRoleBinding" {
            rbac["subjects"] = json!([provider_subject(1)]);
        }
        admin
            .create(&res, None, &object(rbac), &PostParams::default())
            .await
            .unwrap();
    }
    served(&admin, &widgets(), lines).await;
    let token = service_account_token(cluster, PROVIDER_ACCOUNTS, "consumer-1").await;
    inline_kubeconfig(cluster, "consumer-1", &token)
}

/// A started story: two providers, one consumer with the chart installed, a Secret and a Connection per provider
/// (allowing Bindings in every namespace), namespaces team-a and team-b, no binding and no konnector yet.
struct Several {
    // Why this order: fields drop in order, so the clients go before the servers.
    consumer: Consumer,
    acme: KubeClusterClient,
    beta: KubeClusterClient,
    lines: Lines,
    _dir: tempfile::TempDir,
    _env: TestEnv,
    started: std::time::Instant,
    name: &'static str,
}

impl Several {
    async fn start(name: &'static str, beta_crd: Value) -> Option<Self> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let env = TestEnv::start_or_skip(3).await.unwrap()?;
        eprintln!("{name}: 3 clusters ready in {:.1?}", env.startup_time());
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        let acme_kubeconfig = prepare(env.cluster(0), widgets_crd(), &lines).await;
        let beta_kubeconfig = prepare(env.cluster(1), beta_crd, &lines).await;
        let consumer = Consumer::install_chart(env.cluster(2), &chart, dir.path(), &lines).await;
        for ns in ["team-a", "team-b"] {
            create(&consumer.admin, namespace(ns)).await;
        }
        for (provider, kubeconfig) in PROVIDERS.into_iter().zip([acme_kubeconfig, beta_kubeconfig]) {
            create(
                &consumer.admin,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": provider, "namespace": NAMESPACE},
                       "stringData": {"kubeconfig": kubeconfig}}),
            )
            .await;
            create(
                &consumer.admin,
                json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
                       "metadata": {"name": provider,
                                    "annotations": {kbind_annotation::BINDING_NAMESPACES: BINDING_NAMESPACES_ALL}},
                       "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": provider, "key": "kubeconfig"}}}),
            )
            .await;
        }
        let acme = client_as(env.cluster(0), User::Admin).await;
        let beta = client_as(env.cluster(1), User::Admin).await;
        Some(Self {
            consumer,
            acme,
            beta,
            lines,
            _dir: dir,
            _env: env,
            started,
            name,
        })
    }

    /// Starts a konnector and waits until both Connections are Ready.
    async fn konnector(&self, identity: &str) -> Konnector {
        let konnector = self.consumer.konnector(identity, &self.lines).await;
        for provider in PROVIDERS {
            eventually(&format!("Connection {provider} Ready"), &self.lines, async || {
                let conn = self
                    .consumer
                    .admin
                    .get_opt(&erase::<kbind_api::Connection>(), None, provider)
                    .await
                    .ok()??;
                has_condition(&conn, condition::READY, "True").then_some(())
            })
            .await;
        }
        konnector
    }

    fn provider(&self, provider: &str) -> &KubeClusterClient {
        match provider {
            "acme" => &self.acme,
            "beta" => &self.beta,
            other => panic!("no provider {other}"),
        }
    }

    /// Creates Binding `ns/name` of widgets through `connection`.
    async fn bind(&self, connection: &str, ns: &str, name: &str) {
        let body = json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
                          "metadata": {"name": name, "namespace": ns},
                          "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}});
        self.consumer
            .admin
            .create(&bindings(), Some(ns), &object(body), &PostParams::default())
            .await
            .unwrap_or_else(|e| panic!("creating Binding {ns}/{name}: {e}"));
    }

    /// Creates ClusterBinding `name` of widgets through `connection`.
    async fn bind_cluster(&self, connection: &str, name: &str) {
        create(
            &self.consumer.admin,
            json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": name},
                   "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}}),
        )
        .await;
    }

    /// The Binding `ns/name`, or the ClusterBinding `name` when `ns` is `None`.
    async fn binding(&self, ns: Option<&str>, name: &str) -> Option<DynamicObject> {
        let res = if ns.is_some() { bindings() } else { cluster_bindings() };
        self.consumer.admin.get_opt(&res, ns, name).await.ok()?
    }

    /// Waits until the per-API `Synced` condition of widgets on the binding has `reason`; its message.
    async fn wait_synced_reason(&self, ns: Option<&str>, name: &str, reason: &str) -> String {
        let what = format!("{} {name}: widgets Synced reason {reason}", ns.unwrap_or("cluster"));
        eventually(&what, &self.lines, async || {
            let (_, r, message) = synced(&self.binding(ns, name).await?)?;
            (r == reason).then_some(message)
        })
        .await
    }

    /// Waits until the binding is `Ready=True` and its widgets `Synced=True`.
    async fn wait_serving(&self, ns: Option<&str>, name: &str) {
        let what = format!("{} {name} serving widgets", ns.unwrap_or("cluster"));
        eventually(&what, &self.lines, async || {
            let b = self.binding(ns, name).await?;
            let (status, _, _) = synced(&b)?;
            (status == "True" && has_condition(&b, condition::READY, "True")).then_some(())
        })
        .await;
    }

    /// Deletes the binding and waits until it is gone.
    async fn unbind(&self, ns: Option<&str>, name: &str) {
        self.delete_binding(ns, name).await;
        eventually(&format!("binding {name} gone"), &self.lines, async || {
            let res = if ns.is_some() { bindings() } else { cluster_bindings() };
            self.consumer
                .admin
                .get_opt(&res, ns, name)
                .await
                .ok()?
                .is_none()
                .then_some(())
        })
        .await;
    }

    async fn delete_binding(&self, ns: Option<&str>, name: &str) {
        let res = if ns.is_some() { bindings() } else { cluster_bindings() };
        self.consumer
            .admin
            .delete(&res, ns, name, &DeleteParams::default())
            .await
            .unwrap();
    }

    async fn create_widget(&self, ns: &str, name: &str, size: i64) -> DynamicObject {
        let mut w = widget(name, size);
        w["metadata"]["namespace"] = json!(ns);
        create(&self.consumer.admin, w).await
    }

    async fn widget(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.consumer.admin.get_opt(&widgets(), Some(ns), name).await.unwrap()
    }

    /// Waits for `provider`'s copy of `ns/name`.
    async fn copy(&self, provider: &str, ns: &str, name: &str) -> DynamicObject {
        eventually(&format!("{ns}/{name} on {provider}"), &self.lines, async || {
            self.provider(provider).get_opt(&widgets(), Some(ns), name).await.ok()?
        })
        .await
    }

    /// Every widget on `provider`, as `namespace/name`.
    async fn copies(&self, provider: &str) -> Vec<String> {
        let list = self
            .provider(provider)
            .list(&widgets(), None, &Default::default())
            .await
            .unwrap();
        let mut names: Vec<String> = list
            .items
            .iter()
            .map(|w| {
                format!(
                    "{}/{}",
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                    w.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        names
    }

    /// The consumer CRD's `core.kbind.io/connection` annotation.
    /// Resizes consumer widget `ns/name` and waits until `provider`'s copy has the new size.
    async fn resize_and_wait(&self, provider: &str, ns: &str, name: &str, size: i64) {
        self.consumer
            .admin
            .patch(
                &widgets(),
                Some(ns),
                name,
                &Patch::Merge(json!({"spec": {"size": size}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        let copies = self.provider(provider);
        eventually(&format!("{ns}/{name} resized on {provider}"), &self.lines, async || {
            let copy = copies.get_opt(&widgets(), Some(ns), name).await.ok()??;
            (copy.data.pointer("/spec/size") == Some(&json!(size))).then_some(())
        })
        .await;
    }

    async fn crd_connection(&self) -> Option<String> {
        let crd = self.consumer.admin.get_opt(&crds(), None, API).await.unwrap()?;
        annotation(&crd, kbind_annotation::CONNECTION).map(str::to_string)
    }

    /// Kills the konnector, then starts another and waits until both Connections are Ready.
    async fn restart(&self, konnector: Konnector, identity: &str) -> Konnector {
        konnector.kill_hard().await;
        self.konnector(identity).await
    }
}

impl Drop for Several {
    fn drop(&mut self) {
        eprintln!("{}: finished in {:.1?}", self.name, self.started.elapsed());
    }
}

/// The per-API `Synced` condition of widgets on a binding: status, reason and message.
fn synced(binding: &DynamicObject) -> Option<(String, String, String)> {
    let apis = binding.data.pointer("/status/boundAPIs")?.as_array()?;
    let api = apis.iter().find(|a| a["name"] == API)?;
    let c = api["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == condition::SYNCED)?;
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("reason"), field("message")))
}

/// The `core.kbind.io/connection` label of a consumer object.
fn connection_label(obj: &DynamicObject) -> Option<&str> {
    obj.metadata.labels.as_ref()?.get(label::CONNECTION).map(String::as_str)
}

fn has_syncer_finalizer(obj: &DynamicObject) -> bool {
    obj.metadata
        .finalizers
        .iter()
        .flatten()
        .any(|f| f == kbind_api::consts::finalizer::SYNCER)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_serve_two_namespaces_on_real_servers() {
    let _turn = SERIAL.lock().await;
    let Some(world) = Several::start("two_providers", widgets_crd()).await else {
        return;
    };
    let _konnector = world.konnector("two").await;
    world.bind("acme", "team-a", "widgets").await;
    world.wait_serving(Some("team-a"), "widgets").await;
    world.bind("beta", "team-b", "widgets").await;
    world.wait_serving(Some("team-b"), "widgets").await;
    served(&world.consumer.admin, &widgets(), &world.lines).await;

    let a = world.create_widget("team-a", "w", 1).await;
    let b = world.create_widget("team-b", "w", 2).await;
    let a_copy = world.copy("acme", "team-a", "w").await;
    let b_copy = world.copy("beta", "team-b", "w").await;
    assert_eq!(
        annotation(&a_copy, kbind_annotation::CONSUMER_OBJECT_UID),
        a.metadata.uid.as_deref()
    );
    assert_eq!(
        annotation(&b_copy, kbind_annotation::CONSUMER_OBJECT_UID),
        b.metadata.uid.as_deref()
    );
    assert_eq!(
        world.copies("acme").await,
        ["team-a/w"],
        "acme has team-a's widget only"
    );
    assert_eq!(
        world.copies("beta").await,
        ["team-b/w"],
        "beta has team-b's widget only"
    );
    // The label is written with the syncer finalizer, before the copy.
    for (ns, connection) in [("team-a", "acme"), ("team-b", "beta")] {
        let mine = world.widget(ns, "w").await.unwrap();
        assert_eq!(connection_label(&mine), Some(connection), "{ns}/w names its Connection");
    }
    assert_eq!(
        world.crd_connection().await.as_deref(),
        Some("acme"),
        "the CRD names the first Connection"
    );

    // A Binding of team-a through beta would make two Connections serve team-a.
    world.bind("beta", "team-a", "widgets-beta").await;
    let message = world
        .wait_synced_reason(Some("team-a"), "widgets-beta", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    eprintln!("two_providers: the refusal: {message}");
    assert!(
        message.contains("\"acme\"") && message.contains("team-a"),
        "the refusal names the serving Connection and the namespace: {message}"
    );
    let refused = world.binding(Some("team-a"), "widgets-beta").await.unwrap();
    assert!(
        !has_condition(&refused, condition::READY, "True"),
        "the refused Binding is not Ready"
    );
    // acme keeps serving team-a: a new widget and a resize reach acme, nothing reaches beta.
    world.create_widget("team-a", "w2", 3).await;
    world.copy("acme", "team-a", "w2").await;
    world.resize_and_wait("acme", "team-a", "w", 5).await;
    assert_eq!(world.copies("beta").await, ["team-b/w"], "beta got nothing of team-a");
    for name in ["w", "w2"] {
        let mine = world.widget("team-a", name).await.unwrap();
        assert_eq!(connection_label(&mine), Some("acme"), "team-a/{name}");
    }
    assert_eq!(world.widget("team-a", "w").await.unwrap().metadata.uid, a.metadata.uid);
    let serving = world.binding(Some("team-a"), "widgets").await.unwrap();
    assert_eq!(
        synced(&serving).map(|s| s.0).as_deref(),
        Some("True"),
        "never a takeover"
    );
}

/// Widgets w1..w3 in team-a served through acme, and beta's Binding of team-a refused beside it. Returns the
/// consumer UIDs by name.
async fn team_a_on_acme_with_beta_waiting(world: &Several) -> BTreeMap<String, Option<String>> {
    world.bind("acme", "team-a", "widgets").await;
    world.wait_serving(Some("team-a"), "widgets").await;
    world.bind("beta", "team-b", "widgets").await;
    world.wait_serving(Some("team-b"), "widgets").await;
    served(&world.consumer.admin, &widgets(), &world.lines).await;
    let mut uids = BTreeMap::new();
    for (i, name) in ["w1", "w2", "w3"].into_iter().enumerate() {
        let mine = world.create_widget("team-a", name, i as i64 + 1).await;
        uids.insert(name.to_string(), mine.metadata.uid);
    }
    for name in uids.keys() {
        world.copy("acme", "team-a", name).await;
    }
    world.bind("beta", "team-a", "widgets-beta").await;
    world
        .wait_synced_reason(Some("team-a"), "widgets-beta", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    uids
}

/// The end of a hand-over of team-a from acme to beta: acme's copies drained, beta has a copy of every widget,
/// each the same consumer object now labelled beta, the CRD kept (and claimed by beta), and beta syncs.
async fn handed_over_to_beta(world: &Several, uids: &BTreeMap<String, Option<String>>) {
    eventually("acme's copies of team-a drained", &world.lines, async || {
        let left = world
            .acme
            .list(&widgets(), Some("team-a"), &Default::default())
            .await
            .ok()?;
        left.items.is_empty().then_some(())
    })
    .await;
    for (name, uid) in uids {
        let copy = world.copy("beta", "team-a", name).await;
        assert_eq!(
            annotation(&copy, kbind_annotation::CONSUMER_OBJECT_UID),
            uid.as_deref(),
            "beta's copy of {name} mirrors the same consumer object"
        );
        let mine = eventually(&format!("team-a/{name} labelled beta"), &world.lines, async || {
            let w = world.widget("team-a", name).await?;
            (connection_label(&w) == Some("beta")).then_some(w)
        })
        .await;
        assert_eq!(&mine.metadata.uid, uid, "team-a/{name} is the same consumer object");
        assert!(mine.metadata.deletion_timestamp.is_none(), "team-a/{name}");
        assert!(has_syncer_finalizer(&mine), "team-a/{name} is held by beta's syncer");
    }
    let consumer_names: Vec<String> = world
        .consumer
        .admin
        .list(&widgets(), Some("team-a"), &Default::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|w| w.metadata.name)
        .collect();
    assert_eq!(
        consumer_names,
        uids.keys().cloned().collect::<Vec<_>>(),
        "no consumer object lost"
    );
    let crd = world.consumer.admin.get_opt(&crds(), None, API).await.unwrap();
    assert!(
        crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the consumer CRD stays"
    );
    world.wait_serving(Some("team-a"), "widgets-beta").await;
    eventually("beta claims the CRD acme no longer uses", &world.lines, async || {
        (world.crd_connection().await.as_deref() == Some("beta")).then_some(())
    })
    .await;
    world.resize_and_wait("beta", "team-a", "w2", 9).await;
    assert!(
        world
            .acme
            .get_opt(&widgets(), Some("team-a"), "w2")
            .await
            .unwrap()
            .is_none(),
        "acme got no copy back"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_moves_between_providers_on_real_servers_and_nothing_is_lost() {
    let _turn = SERIAL.lock().await;
    let Some(world) = Several::start("namespace_moves", widgets_crd()).await else {
        return;
    };
    let _konnector = world.konnector("moves").await;
    let uids = team_a_on_acme_with_beta_waiting(&world).await;
    assert!(
        world.copies("beta").await.iter().all(|c| !c.starts_with("team-a/")),
        "beta waits while acme serves team-a"
    );

    world.delete_binding(Some("team-a"), "widgets").await;
    handed_over_to_beta(&world, &uids).await;
    eventually("acme's Binding gone", &world.lines, async || {
        world.binding(Some("team-a"), "widgets").await.is_none().then_some(())
    })
    .await;
    assert_eq!(world.copies("beta").await, ["team-a/w1", "team-a/w2", "team-a/w3"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_schema_from_the_second_provider_is_refused_on_real_servers() {
    let _turn = SERIAL.lock().await;
    let Some(world) = Several::start("incompatible_schema", widgets_crd_without_color()).await else {
        return;
    };
    let _konnector = world.konnector("incompatible").await;
    world.bind("acme", "team-a", "widgets").await;
    world.wait_serving(Some("team-a"), "widgets").await;
    served(&world.consumer.admin, &widgets(), &world.lines).await;
    world.create_widget("team-a", "w", 1).await;
    world.copy("acme", "team-a", "w").await;
    let crd_before = world.consumer.admin.get_opt(&crds(), None, API).await.unwrap().unwrap();

    world.bind("beta", "team-b", "widgets").await;
    let message = world
        .wait_synced_reason(Some("team-b"), "widgets", reason::INCOMPATIBLE_SCHEMA)
        .await;
    eprintln!("incompatible_schema: the refusal: {message}");
    assert!(
        message.contains("\"acme\"") && message.contains("\"beta\""),
        "the refusal names both Connections: {message}"
    );
    let refused = world.binding(Some("team-b"), "widgets").await.unwrap();
    assert!(
        !has_condition(&refused, condition::READY, "True"),
        "the refused Binding is not Ready"
    );

    // Nothing is synced through beta; acme keeps serving team-a.
    let b = world.create_widget("team-b", "w", 2).await;
    world.create_widget("team-a", "w2", 3).await;
    world.copy("acme", "team-a", "w2").await;
    assert_eq!(
        world.copies("beta").await,
        Vec::<String>::new(),
        "nothing created on beta"
    );
    assert!(
        world
            .beta
            .get_opt(&namespaces(), None, "team-b")
            .await
            .unwrap()
            .is_none(),
        "no namespace created on beta"
    );
    assert_eq!(world.copies("acme").await, ["team-a/w", "team-a/w2"]);
    let b_now = world.widget("team-b", "w").await.unwrap();
    assert_eq!(b_now.metadata.uid, b.metadata.uid);
    assert_eq!(connection_label(&b_now), None, "team-b/w is served by no Connection");
    assert!(!has_syncer_finalizer(&b_now), "team-b/w is held by no syncer");
    let crd_after = world.consumer.admin.get_opt(&crds(), None, API).await.unwrap().unwrap();
    assert_eq!(
        crd_after.metadata.resource_version, crd_before.metadata.resource_version,
        "the consumer CRD is left as acme's provider has it"
    );
    assert_eq!(annotation(&crd_after, kbind_annotation::CONNECTION), Some("acme"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_binding_beside_another_connections_binding_is_refused_on_real_servers() {
    let _turn = SERIAL.lock().await;
    let Some(world) = Several::start("cluster_binding_beside", widgets_crd()).await else {
        return;
    };
    let _konnector = world.konnector("beside").await;
    world.bind("acme", "team-a", "widgets").await;
    world.wait_serving(Some("team-a"), "widgets").await;
    served(&world.consumer.admin, &widgets(), &world.lines).await;
    let a = world.create_widget("team-a", "w", 1).await;
    let a_copy = world.copy("acme", "team-a", "w").await;

    // A ClusterBinding through beta beside acme's Binding: all or nothing, so nothing.
    world.bind_cluster("beta", "widgets-beta").await;
    let message = world
        .wait_synced_reason(None, "widgets-beta", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    eprintln!("cluster_binding_beside: the refusal: {message}");
    assert!(
        message.contains("\"acme\""),
        "the refusal names the serving Connection: {message}"
    );
    // team-b is served by nobody: the refused ClusterBinding syncs nothing, not even there.
    let b = world.create_widget("team-b", "w", 2).await;
    world.create_widget("team-a", "w2", 3).await;
    world.copy("acme", "team-a", "w2").await;
    assert_eq!(
        world.copies("beta").await,
        Vec::<String>::new(),
        "nothing created on beta"
    );
    assert_eq!(world.copies("acme").await, ["team-a/w", "team-a/w2"]);
    assert_eq!(connection_label(&world.widget("team-b", "w").await.unwrap()), None);

    // Deleting the refused ClusterBinding deletes nothing.
    world.unbind(None, "widgets-beta").await;
    let kept = world.acme.get_opt(&widgets(), Some("team-a"), "w").await.unwrap();
    assert_eq!(
        kept.and_then(|c| c.metadata.uid),
        a_copy.metadata.uid,
        "acme's copy stays"
    );
    let mine = world.widget("team-a", "w").await.unwrap();
    assert_eq!(mine.metadata.uid, a.metadata.uid);
    assert_eq!(connection_label(&mine), Some("acme"));
    assert!(
        world
            .consumer
            .admin
            .get_opt(&crds(), None, API)
            .await
            .unwrap()
            .is_some()
    );

    // The reverse: a ClusterBinding through acme serves every namespace, and beta's Binding of team-b beside it
    // is refused.
    world.bind_cluster("acme", "widgets").await;
    world.wait_serving(None, "widgets").await;
    world.copy("acme", "team-b", "w").await;
    world.bind("beta", "team-b", "widgets").await;
    let message = world
        .wait_synced_reason(Some("team-b"), "widgets", reason::BOUND_THROUGH_ANOTHER_CONNECTION)
        .await;
    eprintln!("cluster_binding_beside: the reverse refusal: {message}");
    assert!(
        message.contains("\"acme\"") && message.contains("team-b"),
        "the refusal names the serving Connection and the namespace: {message}"
    );
    world.create_widget("team-b", "w3", 4).await;
    world.copy("acme", "team-b", "w3").await;
    assert_eq!(
        world.copies("beta").await,
        Vec::<String>::new(),
        "nothing created on beta"
    );
    for name in ["w", "w3"] {
        let mine = world.widget("team-b", name).await.unwrap();
        assert_eq!(connection_label(&mine), Some("acme"), "team-b/{name}");
    }
    assert_eq!(world.widget("team-b", "w").await.unwrap().metadata.uid, b.metadata.uid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_konnector_restarted_mid_hand_over_loses_nothing_on_real_servers() {
    const HOLD: &str = "example.org/hold";
    let _turn = SERIAL.lock().await;
    let Some(world) = Several::start("restarted_mid_hand_over", widgets_crd()).await else {
        return;
    };
    let konnector = world.konnector("before").await;
    let uids = team_a_on_acme_with_beta_waiting(&world).await;

    // A finalizer of the provider's own on acme's copy of w1 holds the drain: the hand-over stays mid-way until
    // the story lets it go, whatever the timing.
    world
        .acme
        .patch(
            &widgets(),
            Some("team-a"),
            "w1",
            &Patch::Merge(json!({"metadata": {"finalizers": [HOLD]}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    world.delete_binding(Some("team-a"), "widgets").await;
    eventually(
        "acme's drain started (w1's copy terminating)",
        &world.lines,
        async || {
            let copy = world.acme.get_opt(&widgets(), Some("team-a"), "w1").await.ok()??;
            copy.metadata.deletion_timestamp.is_some().then_some(())
        },
    )
    .await;
    let konnector = world.restart(konnector, "after").await;
    let draining = world.binding(Some("team-a"), "widgets").await;
    assert!(
        draining.is_some_and(|b| b.metadata.deletion_timestamp.is_some()),
        "acme's Binding still drains after the restart"
    );
    let message = world
        .wait_synced_reason(Some("team-a"), "widgets-beta", reason::PENDING)
        .await;
    eprintln!("restarted_mid_hand_over: beta waits: {message}");
    assert!(
        message.contains("\"acme\""),
        "the wait names the Connection handing over: {message}"
    );
    assert!(
        world.copies("beta").await.iter().all(|c| !c.starts_with("team-a/")),
        "beta waits while acme drains"
    );
    let held = world.widget("team-a", "w1").await.unwrap();
    assert_eq!(
        connection_label(&held),
        Some("acme"),
        "w1 is still acme's until its copy is gone"
    );
    assert!(has_syncer_finalizer(&held));

    world
        .acme
        .patch(
            &widgets(),
            Some("team-a"),
            "w1",
            &Patch::Merge(json!({"metadata": {"finalizers": null}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    handed_over_to_beta(&world, &uids).await;
    eventually("acme's Binding gone", &world.lines, async || {
        world.binding(Some("team-a"), "widgets").await.is_none().then_some(())
    })
    .await;
    assert_eq!(world.copies("beta").await, ["team-a/w1", "team-a/w2", "team-a/w3"]);
    drop(konnector);
}
