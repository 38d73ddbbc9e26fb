//! Provider kubeconfigs as untrusted input (DESIGN.md §5), and the `Connector` that turns an
//! accepted one into a `ClusterClient`.

use std::sync::Arc;

use async_trait::async_trait;
use kbind_cluster::ClusterClient;

/// Provider credentials, accepted under DESIGN.md §5. `Debug` never shows secrets.
#[derive(Clone, PartialEq, Eq)]
pub struct ProviderKubeconfig {
    /// The provider's API server URL (`https://…`, or `http://` only in development mode).
    pub server: String,
    /// PEM CA bundle to verify the server with (`certificate-authority-data`).
    pub ca_pem: Option<Vec<u8>>,
    /// How the konnector authenticates.
    pub credentials: Credentials,
    /// `insecure-skip-tls-verify` (accepted only in development mode).
    pub insecure_skip_tls_verify: bool,
}

/// Inline credentials: the only kinds §5 accepts.
#[derive(Clone, PartialEq, Eq)]
pub enum Credentials {
    /// A bearer token.
    Token(String),
    /// A client certificate and key, PEM.
    ClientCertificate {
        /// `client-certificate-data`.
        cert_pem: Vec<u8>,
        /// `client-key-data`.
        key_pem: Vec<u8>,
    },
}

impl std::fmt::Debug for ProviderKubeconfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kind = match self.credentials {
            Credentials::Token(_) => "token",
            Credentials::ClientCertificate { .. } => "client-certificate",
        };
        f.debug_struct("ProviderKubeconfig")
            .field("server", &self.server)
            .field("credentials", &kind)
            .field("insecure_skip_tls_verify", &self.insecure_skip_tls_verify)
            .finish_non_exhaustive()
    }
}

/// Builds a client for a provider from accepted credentials.
#[async_trait]
pub trait Connector: Send + Sync {
    /// A fresh client (never a reused one: recovery must not inherit a dead cluster's state).
    async fn connect(&self, kubeconfig: &ProviderKubeconfig) -> Result<Arc<dyn ClusterClient>, kbind_cluster::Error>;
}
