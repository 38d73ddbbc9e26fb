//! Run (3) of the conformance suite: every case on a real kube-apiserver (+ etcd and
//! kube-controller-manager) from `kbind-testenv`, through the seam's kube implementation.
//! Skips with one line when the binaries are missing, unless `KBIND_REQUIRE_REAL_K8S=1`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kbind_cluster::{ClusterClient, KubeClusterClient};
use kbind_conformance::{FaultControl, Target, TargetKind};
use kbind_testenv::{TestEnv, User};
use tokio::sync::OnceCell;

/// One real cluster shared by every case of this test binary (cases isolate themselves by
/// namespace and CRD group); its processes die with the test process.
static ENV: OnceCell<Result<Option<TestEnv>, String>> = OnceCell::const_new();

struct RealTarget {
    configs: BTreeMap<String, kube::Config>,
    unavailable: Option<String>,
}

impl RealTarget {
    fn client(&self, user: &str) -> Arc<dyn ClusterClient> {
        let config = self
            .configs
            .get(user)
            .cloned()
            .unwrap_or_else(|| panic!("no kubeconfig for user {user}"));
        Arc::new(KubeClusterClient::from_config(config).unwrap_or_else(|e| panic!("kube client for {user}: {e}")))
    }
}

impl Target for RealTarget {
    fn name(&self) -> &str {
        "kube-apiserver"
    }

    fn admin(&self) -> Arc<dyn ClusterClient> {
        self.client("admin")
    }

    fn user(&self, name: &str) -> Arc<dyn ClusterClient> {
        self.client(name)
    }

    fn faults(&self) -> Option<Arc<dyn FaultControl>> {
        None
    }

    fn kind(&self) -> TargetKind {
        TargetKind::RealApiserver
    }

    fn unavailable(&self) -> Option<String> {
        self.unavailable.clone()
    }

    fn admin_http(&self) -> Option<kube::Client> {
        kube::Client::try_from(self.configs.get("admin")?.clone()).ok()
    }
}

async fn real_apiserver() -> Arc<dyn Target> {
    let env = ENV
        .get_or_init(|| async { TestEnv::start_or_skip(1).await.map_err(|e| e.to_string()) })
        .await;
    let env = match env {
        Ok(Some(env)) => env,
        Ok(None) => {
            return Arc::new(RealTarget {
                configs: BTreeMap::new(),
                unavailable: Some("real kube-apiserver binaries not built (hack/kube/build.sh)".into()),
            });
        }
        Err(e) => panic!("failed to start the real clusters: {e}"),
    };
    let mut configs = BTreeMap::new();
    for (name, user) in [
        ("admin", User::Admin),
        ("alice", User::Alice),
        ("bob", User::Bob),
        ("carol", User::Carol),
    ] {
        let config = env
            .cluster(0)
            .config(user)
            .await
            .unwrap_or_else(|e| panic!("kubeconfig for {name}: {e}"));
        configs.insert(name.to_string(), config);
    }
    Arc::new(RealTarget {
        configs,
        unavailable: None,
    })
}

kbind_conformance::conformance_tests!(real_apiserver);
