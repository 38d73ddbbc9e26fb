//! Provider kubeconfigs as untrusted input (contract §5), and the `Connector` that turns an
//! accepted one into a `ClusterClient`.

mod connector;
mod issued;
mod kubeconfig;

use std::sync::Arc;

use async_trait::async_trait;
use kbind_cluster::{BearerToken, ClusterClient, ClusterIdentity};

pub use connector::KubeConnector;
pub use issued::IssuedToken;
#[cfg(any(test, feature = "testing"))]
pub use issued::unsigned_token;
pub use kubeconfig::{Refusal, parse_kubeconfig, with_token};

/// Provider credentials, accepted under contract §5. `Debug` never shows secrets.
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

impl std::fmt::Debug for Credentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Credentials::Token(_) => f.write_str("Token(<redacted>)"),
            Credentials::ClientCertificate { .. } => f.write_str("ClientCertificate(<redacted>)"),
        }
    }
}

/// Builds a client for a provider from accepted credentials.
#[async_trait]
pub trait Connector: Send + Sync {
    /// A fresh client (never a reused one: recovery must not inherit a dead cluster's state).
    /// With token credentials the client sends the token `bearer` holds on every request
    /// (starting as the kubeconfig's): a renewed token set there is used from the next request
    /// on, without a new connection or a restarted watch. Client certificates ignore it.
    async fn connect(
        &self,
        kubeconfig: &ProviderKubeconfig,
        bearer: &BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, kbind_cluster::Error>;
}

/// The provider's identity (LogicalCluster `cluster`, else Namespace `kube-system`).
pub async fn provider_identity(provider: &dyn ClusterClient) -> kbind_cluster::Result<ClusterIdentity> {
    kbind_cluster::identity::read_identity(provider).await
}

/// The consumer's own identity, read the same way as a provider's.
pub async fn local_identity(consumer: &dyn ClusterClient) -> kbind_cluster::Result<ClusterIdentity> {
    kbind_cluster::identity::read_identity(consumer).await
}
