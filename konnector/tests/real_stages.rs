//! The stories of `kbind_scenarios::told` on real kube-apiservers: the same assertions the fake
//! stage answers in scenarios/tests/stories/on_any_stage.rs, here against the konnector binary
//! under the chart's least-privilege RBAC, with the provider behind a `FaultProxy`.

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
        let konnector = world.consumer().konnector(name, &lines).await;
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

impl Stage for RealStage {
    fn backend(&self) -> &'static str {
        "real"
    }

    fn connection(&self) -> &'static str {
        "provider"
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
