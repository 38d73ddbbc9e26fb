//! `FakeConnector`: the world's `Connector`, mapping `https://<name>.fake` to world clusters,
//! checking the kubeconfig's CA against the cluster's fake CA, and counting connections.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use fakeapi::FakeCluster;
use kbind_cluster::{BearerToken, ClusterClient, Error, REQUEST_TIMEOUT, with_request_timeout};
use kbind_engine::remote::{Connector, Credentials, ProviderKubeconfig};
use parking_lot::Mutex;

use crate::client::WorldClient;

/// One reachable server.
#[derive(Debug, Clone)]
struct Server {
    cluster: FakeCluster,
    ca_pem: Vec<u8>,
    generation: Arc<AtomicU64>,
}

/// Connects the konnector to world clusters.
#[derive(Debug, Default)]
pub struct FakeConnector {
    servers: Mutex<BTreeMap<String, Server>>,
    connects: Mutex<BTreeMap<String, usize>>,
}

impl FakeConnector {
    /// The server URL of cluster `name`.
    pub fn server_url(name: &str) -> String {
        format!("https://{name}.fake")
    }

    /// Makes `cluster` reachable at `https://<name>.fake`, serving a certificate signed by `ca_pem`.
    pub fn register(&self, name: &str, cluster: FakeCluster, ca_pem: Vec<u8>) {
        self.servers.lock().insert(
            name.to_string(),
            Server {
                cluster,
                ca_pem,
                generation: Arc::new(AtomicU64::new(0)),
            },
        );
    }

    /// Marks the server behind `name` as rebuilt: open connections to it are reset.
    pub fn server_rebuilt(&self, name: &str) {
        if let Some(server) = self.servers.lock().get(name) {
            server.generation.fetch_add(1, Ordering::SeqCst);
        }
    }

    /// How many clients were built for `name` so far.
    pub fn connects(&self, name: &str) -> usize {
        self.connects.lock().get(name).copied().unwrap_or(0)
    }
}

#[async_trait]
impl Connector for FakeConnector {
    async fn connect(
        &self,
        kubeconfig: &ProviderKubeconfig,
        bearer: &BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        let host = kubeconfig
            .server
            .strip_prefix("https://")
            .and_then(|h| h.strip_suffix(".fake"))
            .ok_or_else(|| Error::Transport(format!("dial {}: no such host", kubeconfig.server)))?;
        let server = self
            .servers
            .lock()
            .get(host)
            .cloned()
            .ok_or_else(|| Error::Transport(format!("dial {}: no such host", kubeconfig.server)))?;
        if !kubeconfig.insecure_skip_tls_verify && kubeconfig.ca_pem.as_deref() != Some(server.ca_pem.as_slice()) {
            return Err(Error::Transport(
                "tls: failed to verify certificate: x509: certificate verify failed: unknown authority".into(),
            ));
        }
        let Credentials::Token(_) = &kubeconfig.credentials else {
            return Err(Error::Unauthorized {
                message: "Unauthorized".into(),
            });
        };
        *self.connects.lock().entry(host.to_string()).or_default() += 1;
        let client = WorldClient::token(
            server.cluster,
            bearer.clone(),
            server.generation,
            Arc::new(AtomicBool::new(false)),
        );
        // As the production connector does: on the paused clock a request into a black-holed
        // cluster ends after REQUEST_TIMEOUT of virtual time.
        Ok(with_request_timeout(Arc::new(client), REQUEST_TIMEOUT))
    }
}
