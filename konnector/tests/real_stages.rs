//! The stories of `kbind_scenarios::told` on real kube-apiservers: the same assertions the fake
//! stage answers in scenarios/tests/stories/on_any_stage.rs, here against the konnector binary
//! under the chart's least-privilege RBAC, with the provider behind a `FaultProxy`.
//!
//! What real servers did differently from fakeapi: the konnector is not an admin on either side,
//! so a read the chart's RBAC does not grant (Secrets outside the konnector's namespace, a
//! provider API nobody granted) fails here and passes on the fake stage; and the konnector binary
//! rediscovers exported APIs every `--resync` (10 min by default), so the stage passes 15 s.

mod child;
mod real;

use std::future::Future;
use std::sync::Arc;

use kbind_cluster::ClusterClient;
use kbind_scenarios::{Stage, told};
use kbind_testenv::FaultProxy;
use real::*;

/// Real clusters as a stage: provider = cluster 0 behind a proxy, one consumer with the chart
/// installed, the bundle applied and the konnector running.
struct RealStage {
    world: World,
    proxy: FaultProxy,
    provider: Arc<dyn ClusterClient>,
    _konnector: Konnector,
}

impl RealStage {
    /// Starts the stage, or `None` when the binaries or helm are missing and not required.
    async fn start(name: &'static str) -> Option<Self> {
        let (world, proxy) = World::start_behind_proxy(name, &["Fail"]).await?;
        let lines = world.lines.clone();
        // An API exported after the Connection engaged is found by rediscovery only (10 min by
        // default); the fake world's konnector rediscovers every 60 s of its paused clock.
        let resync = ["--resync", "15s"];
        let konnector = Konnector::start(&world.consumer().kubeconfig, name, &resync, lines.clone()).await;
        world.consumer().wait_ready(&lines).await;
        let provider: Arc<dyn ClusterClient> = Arc::new(world.provider.clone());
        Some(Self {
            world,
            proxy,
            provider,
            _konnector: konnector,
        })
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
        "provider"
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
        // A CRD is exported only when the credential can read it (DESIGN.md §2): the provider admin
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
            create(&self.world.consumer().admin, rbac).await;
        }
        let write = json!([{"apiGroups": [group], "resources": [resource, format!("{resource}/status")],
                            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
        for rbac in grant(&name, None, provider_subject(1), write) {
            create(&self.world.provider, rbac).await;
        }
    }

    async fn serve_ingresses(&mut self) {
        // kube-apiserver serves networking.k8s.io/v1 Ingresses.
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
