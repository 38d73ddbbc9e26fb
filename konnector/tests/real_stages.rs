//! The stories of `kbind_scenarios::told` on real kube-apiservers: the same assertions the fake
//! stage answers in scenarios/tests/stories/on_any_stage.rs, here against the konnector binary
//! under the chart's least-privilege RBAC, with the provider behind a `FaultProxy`.
//!
//! The stories of two providers (`told::TwoProviders`) run on three clusters: acme (0, behind the
//! proxy), beta (1) and the consumer (2).
//!
//! What real servers did differently from fakeapi: the konnector is not an admin on either side,
//! so a read the chart's RBAC does not grant (Secrets outside the konnector's namespace, a
//! provider API nobody granted) fails here and passes on the fake stage; and the konnector binary
//! rediscovers exported APIs every `--resync` (10 min by default), so the stage passes 15 s.

mod child;
mod real;

use std::future::Future;
use std::sync::Arc;

use kbind_api::consts::{BINDING_NAMESPACES_ALL, annotation};
use kbind_cluster::ClusterClient;
use kbind_scenarios::{Stage, TwoProviders, told};
use kbind_testenv::FaultProxy;
use real::*;

/// Real clusters as a stage: provider = cluster 0 behind a proxy, one consumer with the chart
/// installed, the bundle applied and the konnector running.
struct RealStage {
    world: World,
    proxy: FaultProxy,
    provider: Arc<dyn ClusterClient>,
    /// The second provider's admin, on a stage started with [`RealStage::two_providers`].
    second: Option<KubeClusterClient>,
    /// The Connection to the (first) provider.
    connection: &'static str,
    konnector: Option<Konnector>,
    /// Konnectors started so far, for each one's identity.
    started: usize,
}

/// The Connections of [`RealStage::two_providers`], as the fake stage names them.
const TWO: [&str; 2] = ["acme", "beta"];

/// The konnector's flags on every stage.
const RESYNC: [&str; 2] = ["--resync", "15s"];

impl RealStage {
    /// Starts the stage, or `None` when the binaries or helm are missing and not required.
    async fn start(name: &'static str) -> Option<Self> {
        let (world, proxy) = World::start_behind_proxy(name, &["Fail"]).await?;
        let provider: Arc<dyn ClusterClient> = Arc::new(world.provider.clone());
        let mut stage = Self {
            world,
            proxy,
            provider,
            second: None,
            connection: "provider",
            konnector: None,
            started: 0,
        };
        stage.start_konnector().await;
        stage.world.consumer().wait_ready(&stage.world.lines).await;
        Some(stage)
    }

    /// Starts a stage of two providers: acme (cluster 0, behind the proxy) exporting the scenarios'
    /// widgets and
    /// beta (cluster 1) exporting `beta_crd`, each with a ServiceAccount under the demo's
    /// least-privilege ClusterRole; the consumer (cluster 2) with the chart, a Connection to each
    /// allowing Bindings in every namespace, both Ready, and no binding.
    async fn two_providers(name: &'static str, beta_crd: Value) -> Option<Self> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let env = TestEnv::start_or_skip(3).await.unwrap()?;
        eprintln!("{name}: 3 clusters ready in {:.1?}", env.startup_time());
        let proxy = FaultProxy::start(apiserver_addr(env.cluster(0))).await.unwrap();
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        // The fake stage's widgets (with `spec.config`, which the related-copy story's reference
        // path goes through), not the sample's.
        let widgets = kbind_scenarios::apis::widgets_crd();
        let acme = prepare_provider_exporting(env.cluster(0), &proxy.server(), widgets, &lines).await;
        let beta = prepare_provider_exporting(env.cluster(1), &env.cluster(1).server(), beta_crd, &lines).await;
        let consumer = Consumer::install_chart(env.cluster(2), &chart, dir.path(), &lines).await;
        for (connection, kubeconfig) in TWO.into_iter().zip([&acme, &beta]) {
            create(
                &consumer.admin,
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": connection, "namespace": NAMESPACE},
                       "stringData": {"kubeconfig": kubeconfig}}),
            )
            .await;
            create(
                &consumer.admin,
                json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
                       "metadata": {"name": connection,
                                    "annotations": {annotation::BINDING_NAMESPACES: BINDING_NAMESPACES_ALL}},
                       "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": connection, "key": "kubeconfig"}}}),
            )
            .await;
        }
        let provider = client_as(env.cluster(0), User::Admin).await;
        let second = client_as(env.cluster(1), User::Admin).await;
        let world = World {
            consumers: vec![consumer],
            provider: provider.clone(),
            lines,
            _dir: dir,
            _env: env,
            started,
            name,
            provider_kubeconfigs: vec![acme],
        };
        let mut stage = Self {
            world,
            proxy,
            provider: Arc::new(provider),
            second: Some(second),
            connection: TWO[0],
            konnector: None,
            started: 0,
        };
        stage.start_konnector().await;
        stage.connections_ready().await;
        Some(stage)
    }

    /// Starts a konnector under the chart's ServiceAccount. An API exported after the Connection
    /// engaged is found by rediscovery only (10 min by default); the fake world's konnector
    /// rediscovers every 60 s of its paused clock, so the stage passes 15 s.
    async fn start_konnector(&mut self) {
        self.started += 1;
        let identity = format!("{}-{}", self.world.name, self.started);
        let konnector = Konnector::start(
            &self.world.consumer().kubeconfig,
            &identity,
            &RESYNC,
            self.world.lines.clone(),
        )
        .await;
        self.konnector = Some(konnector);
    }

    /// Waits until both Connections of [`RealStage::two_providers`] are Ready.
    async fn connections_ready(&self) {
        for connection in TWO {
            eventually(
                &format!("Connection {connection} Ready"),
                &self.world.lines,
                async || {
                    let conn = self
                        .world
                        .consumer()
                        .admin
                        .get_opt(&erase::<kbind_api::Connection>(), None, connection)
                        .await
                        .ok()??;
                    has_condition(&conn, "Ready", "True").then_some(())
                },
            )
            .await;
        }
    }

    /// The providers' admins: the first, and the second when there is one.
    fn provider_admins(&self) -> Vec<&KubeClusterClient> {
        std::iter::once(&self.world.provider)
            .chain(self.second.as_ref())
            .collect()
    }
}

/// Creates an RBAC object, keeping one already there (a grant given twice is the same grant).
async fn create_or_keep(client: &KubeClusterClient, rbac: Value) {
    let res = resource_of(kind_of(&rbac));
    let name = rbac["metadata"]["name"].as_str().unwrap_or_default().to_string();
    match client.create(&res, None, &object(rbac), &PostParams::default()).await {
        Ok(_) | Err(kbind_cluster::Error::AlreadyExists { .. }) => {}
        Err(e) => panic!("creating {} {name}: {e}", res.kind),
    }
}

impl TwoProviders for RealStage {
    fn connections(&self) -> [&'static str; 2] {
        TWO
    }

    fn provider_of(&self, connection: &str) -> Arc<dyn ClusterClient> {
        match (connection, &self.second) {
            ("acme", _) => self.provider.clone(),
            ("beta", Some(second)) => Arc::new(second.clone()),
            _ => panic!("no provider behind Connection {connection}"),
        }
    }

    async fn restart_konnector(&mut self) {
        if let Some(konnector) = self.konnector.take() {
            konnector.kill_hard().await;
        }
        self.start_konnector().await;
        self.connections_ready().await;
    }

    fn widget_writes(&self, _connection: &str, _ns: &str) -> Option<usize> {
        None
    }
}

impl RealStage {
    /// Sets the verbs the konnector's provider ClusterRole (`provider_rbac()`) grants on widgets.
    async fn set_widget_verbs(&self, verbs: &[&str]) {
        let roles = erase::<k8s_openapi::api::rbac::v1::ClusterRole>();
        let mut role = self
            .world
            .provider
            .get(&roles, None, "kbind-konnector")
            .await
            .expect("the konnector's provider ClusterRole");
        let rules = role.data["rules"].as_array_mut().expect("rules");
        for rule in rules.iter_mut() {
            if rule["apiGroups"] == json!(["example.org"]) {
                rule["verbs"] = json!(verbs);
            }
        }
        self.world
            .provider
            .replace(&roles, None, "kbind-konnector", &role, &Default::default())
            .await
            .expect("the ClusterRole updated");
    }
}

impl Stage for RealStage {
    fn backend(&self) -> &'static str {
        "real"
    }

    fn connection(&self) -> &'static str {
        self.connection
    }

    fn cluster_binding(&self) -> &'static str {
        "widgets"
    }

    fn consumer(&self) -> Arc<dyn ClusterClient> {
        Arc::new(self.world.consumer().admin.clone())
    }

    fn provider(&self) -> Arc<dyn ClusterClient> {
        self.provider.clone()
    }

    async fn eventually<T, F, Fut>(&mut self, what: &str, mut check: F) -> T
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Option<T>>,
    {
        eventually(what, &self.world.lines, async || check().await).await
    }

    async fn delete(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        self.world
            .consumer()
            .admin
            .delete(res, namespace, name, &DeleteParams::default())
            .await
            .unwrap_or_else(|e| panic!("deleting {} {name}: {e}", res.kind));
    }

    async fn export_api(&mut self, crd: Value) {
        let spec = &crd["spec"];
        let group = spec["group"].as_str().unwrap().to_string();
        let version = spec["versions"][0]["name"].as_str().unwrap().to_string();
        let res = ApiResource {
            group: group.clone(),
            version: version.clone(),
            api_version: format!("{group}/{version}"),
            kind: spec["names"]["kind"].as_str().unwrap().into(),
            plural: spec["names"]["plural"].as_str().unwrap().into(),
        };
        create(&self.world.provider, crd).await;
        served(&self.world.provider, &res, &self.world.lines).await;
        // A CRD is exported only when the credential can read it (contract §2): the provider admin
        // grants the konnector the new API as the demo's ClusterRole grants widgets.
        let rules = json!([{"apiGroups": [group], "resources": [res.plural, format!("{}/status", res.plural)],
                            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
        for rbac in grant(&format!("kbind-{}", res.plural), None, provider_subject(1), rules) {
            create(&self.world.provider, rbac).await;
        }
    }

    async fn allow_namespace_removal(&mut self) {
        // Telling an emptied namespace from a used one takes listing every namespaced resource in
        // it; the demo's least-privilege ClusterRole grants neither that nor deleting namespaces.
        let rules = json!([
            {"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["delete"]},
        ]);
        for rbac in grant("kbind-namespace-removal", None, provider_subject(1), rules) {
            create(&self.world.provider, rbac).await;
        }
    }

    async fn allow_related(&mut self, group: &str, resource: &str) {
        // The consumer admin's consent: the konnector reads the kind (and writes its status back);
        // the provider admin lets the consumer's credential write its copies.
        let read = json!([
            {"apiGroups": [group], "resources": [resource], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [group], "resources": [format!("{resource}/status")], "verbs": ["get", "patch", "update"]},
        ]);
        let name = format!("kbind-related-{resource}");
        for rbac in grant(&name, None, konnector_subject(), read) {
            create_or_keep(&self.world.consumer().admin, rbac).await;
        }
        let write = json!([{"apiGroups": [group], "resources": [resource, format!("{resource}/status")],
                            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
        for provider in self.provider_admins() {
            for rbac in grant(&name, None, provider_subject(1), write.clone()) {
                create_or_keep(provider, rbac).await;
            }
        }
    }

    async fn refuse_related(&mut self, _group: &str, resource: &str) {
        // The chart grants the konnector Secrets, ConfigMaps and the bound groups only; what
        // allow_related granted of this kind goes.
        let name = format!("kbind-related-{resource}");
        let admin = &self.world.consumer().admin;
        for res in [
            erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(),
            erase::<k8s_openapi::api::rbac::v1::ClusterRole>(),
        ] {
            match admin.delete(&res, None, &name, &DeleteParams::default()).await {
                Ok(_) | Err(kbind_cluster::Error::NotFound { .. }) => {}
                Err(e) => panic!("deleting {} {name}: {e}", res.kind),
            }
        }
    }

    async fn serve_ingresses(&mut self) {
        // kube-apiserver serves networking.k8s.io/v1 Ingresses.
    }

    async fn serve_kind(&mut self, crd: Value) {
        let res = kbind_scenarios::stage::served_by(&crd);
        for client in [&self.world.consumer().admin, &self.world.provider] {
            create(client, crd.clone()).await;
            served(client, &res, &self.world.lines).await;
        }
    }

    async fn refuse_widget_watches(&mut self) {
        self.set_widget_verbs(&["get", "create", "update", "patch", "delete"])
            .await;
        // An open watch outlives an RBAC change: the proxy drops it, so it must be opened again.
        self.proxy.drop_connections();
    }

    async fn allow_widget_watches(&mut self) {
        self.set_widget_verbs(&["get", "list", "watch", "create", "update", "patch", "delete"])
            .await;
    }

    async fn partition(&mut self) {
        self.proxy.partition();
    }

    async fn heal(&mut self) {
        self.proxy.heal();
    }

    async fn replace_provider(&mut self) {
        // A fresh cluster behind the same address; its admin makes the Connection's credential valid
        // there again (the CRD, the ServiceAccount and its RBAC, a token minted there, put into the
        // consumer's Secret), so only the identity tells the two apart.
        self.world._env.replace_cluster(0).await.unwrap();
        let fresh = self.world._env.cluster(0);
        let kubeconfig = prepare_provider_at(fresh, &self.proxy.server(), 1, &self.world.lines)
            .await
            .remove(0);
        self.provider = Arc::new(client_as(fresh, User::Admin).await);
        self.world
            .consumer()
            .admin
            .patch(
                &erase::<k8s_openapi::api::core::v1::Secret>(),
                Some(NAMESPACE),
                "provider",
                &Patch::Merge(json!({"stringData": {"kubeconfig": kubeconfig}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn main_flow() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_main_flow").await else {
        return;
    };
    told::main_flow(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fail_conflict() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_fail_conflict").await else {
        return;
    };
    told::fail_conflict(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn identity_change() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_identity_change").await else {
        return;
    };
    told::identity_change(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connection_loss() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_connection_loss").await else {
        return;
    };
    told::connection_loss(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_deletes_nothing() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_orphan_deletes_nothing").await else {
        return;
    };
    told::orphan_deletes_nothing(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_cluster_binding_to_binding() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_hand_over_cluster_binding_to_binding").await else {
        return;
    };
    told::hand_over_cluster_binding_to_binding(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_binding_to_cluster_binding() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_hand_over_binding_to_cluster_binding").await else {
        return;
    };
    told::hand_over_binding_to_cluster_binding(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hand_over_binding_to_binding() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_hand_over_binding_to_binding").await else {
        return;
    };
    told::hand_over_binding_to_binding(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binding_naming_a_cluster_scoped_api() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_binding_naming_a_cluster_scoped_api").await else {
        return;
    };
    told::binding_naming_a_cluster_scoped_api(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn provider_namespace_removal() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_provider_namespace_removal").await else {
        return;
    };
    told::provider_namespace_removal(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_syncer_that_cannot_watch_says_so() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_a_syncer_that_cannot_watch_says_so").await else {
        return;
    };
    told::a_syncer_that_cannot_watch_says_so(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_password_found_by_reference_follows_the_reference() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_related_by_reference").await else {
        return;
    };
    told::a_database_password_found_by_reference_follows_the_reference(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_for_a_certificate_has_its_status_synced_back() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_related_ingress_status").await else {
        return;
    };
    told::an_ingress_for_a_certificate_has_its_status_synced_back(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_related_kind_not_served").await else {
        return;
    };
    told::a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::start("stage_related_kind_denied").await else {
        return;
    };
    told::a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::two_providers("stage_two_providers", kbind_scenarios::apis::widgets_crd()).await
    else {
        return;
    };
    told::two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) = RealStage::two_providers("stage_namespace_moves", kbind_scenarios::apis::widgets_crd()).await
    else {
        return;
    };
    told::a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incompatible_schema_from_the_second_provider_is_refused_naming_both() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) =
        RealStage::two_providers("stage_incompatible_schema", told::widgets_crd_without_color()).await
    else {
        return;
    };
    told::an_incompatible_schema_from_the_second_provider_is_refused_naming_both(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) =
        RealStage::two_providers("stage_cluster_binding_beside", kbind_scenarios::apis::widgets_crd()).await
    else {
        return;
    };
    told::a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_konnector_restarted_mid_hand_over_loses_nothing() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) =
        RealStage::two_providers("stage_restarted_mid_hand_over", kbind_scenarios::apis::widgets_crd()).await
    else {
        return;
    };
    told::the_konnector_restarted_mid_hand_over_loses_nothing(&mut stage).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_related_copy_moves_with_its_namespace_to_the_other_provider() {
    let _turn = SERIAL.lock().await;
    let Some(mut stage) =
        RealStage::two_providers("stage_related_copy_hand_over", kbind_scenarios::apis::widgets_crd()).await
    else {
        return;
    };
    told::a_related_copy_moves_with_its_namespace_to_the_other_provider(&mut stage).await;
}
