//! What a Grant gets: the [`Issuer`] trait (implementable out of tree) and the in-tree
//! Kubernetes issuer.
//!
//! - [`KubernetesIssuer`] ([`kubernetes`]): ServiceAccounts, RBAC and TokenRequest tokens on a
//!   plain Kubernetes provider, configured by [`Options`].
//! - [`run_controller`] ([`controller`]): the Grant controller (finalizer, provision, status,
//!   revoke) and the Export status controller, over any [`Issuer`].
//! - [`claims`]: provider namespace claims, shared with the gateway's pre-check.
//! - [`metrics`]: `kbind_issuer_reconcile_errors_total`, for the operator.
//!
//! An issuer for another kind of provider implements [`Issuer`] and is handed to the same
//! controller:
//!
//! ```
//! use async_trait::async_trait;
//! use kbind_api::{Export, Grant, Issued};
//! use kbind_backend::issuer::{Credential, IssueError, Issuer};
//!
//! /// Hands every Grant the same pre-made, read-only token (a sketch, not a recommendation).
//! struct SharedToken(String);
//!
//! #[async_trait]
//! impl Issuer for SharedToken {
//!     fn name(&self) -> &str {
//!         "shared-token"
//!     }
//!     async fn check_provider(&self) -> Result<(), IssueError> {
//!         Ok(())
//!     }
//!     async fn provision(&self, grant: &Grant, _export: &Export) -> Result<Issued, IssueError> {
//!         Ok(Issued { issuer: self.name().into(), namespaces: grant.spec.namespaces.clone(), ..Issued::default() })
//!     }
//!     async fn credential(&self, grant: &Grant) -> Result<Credential, IssueError> {
//!         let issued = grant.status.as_ref().and_then(|s| s.issued.as_ref());
//!         issued.ok_or(IssueError::NotIssued)?;
//!         Ok(Credential { token: self.0.clone(), expires_at: None })
//!     }
//!     async fn revoke(&self, _grant: &Grant) -> Result<(), IssueError> {
//!         Ok(())
//!     }
//! }
//!
//! # async fn run(provider: std::sync::Arc<dyn kbind_cluster::ClusterClient>) {
//! let issuer = std::sync::Arc::new(SharedToken("…".into()));
//! kbind_backend::issuer::run_controller(provider, issuer, tokio::signal::ctrl_c().map(|_| ())).await;
//! # }
//! # use futures::FutureExt;
//! ```

pub mod claims;
pub mod controller;
pub mod kubernetes;
pub mod metrics;
pub mod rbac;

pub use controller::run as run_controller;
pub use controller::run_with_metrics as run_controller_with_metrics;
pub use kubernetes::{KubernetesIssuer, Options};
pub use metrics::Metrics;

use async_trait::async_trait;
use kbind_api::{Export, Grant, Issued};

/// A credential minted for a Grant at pickup. Its `Debug` never shows the token.
#[derive(Clone)]
pub struct Credential {
    /// The bearer token the bundle's kubeconfig carries.
    pub token: String,
    /// When the token stops working, if it expires.
    pub expires_at: Option<jiff::Timestamp>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("token", &"[redacted]")
            .field("expires_at", &self.expires_at)
            .finish()
    }
}

/// Why an issuer refused or failed. Messages never contain a credential.
#[derive(Debug, thiserror::Error)]
pub enum IssueError {
    /// A requested provider namespace is claimed by another identity (HTTP 409). A tenant is told
    /// only that it is not available, exactly as for [`IssueError::NamespaceNotClaimable`]: which
    /// namespaces other identities hold is theirs to know.
    #[error("namespace {namespace:?} is not available on this provider; choose another namespace")]
    NamespaceClaimed {
        /// The namespace.
        namespace: String,
    },
    /// A requested provider namespace exists and was not created by kbind (HTTP 409); told to the
    /// tenant in the same words as [`IssueError::NamespaceClaimed`].
    #[error("namespace {namespace:?} is not available on this provider; choose another namespace")]
    NamespaceNotClaimable {
        /// The namespace.
        namespace: String,
    },
    /// A requested namespace does not match the operator's claimable patterns (HTTP 409).
    #[error("namespace {namespace:?} may not be claimed on this provider: {rule}")]
    NamespaceNotAllowed {
        /// The namespace.
        namespace: String,
        /// Which rule refused it and what is allowed.
        rule: String,
    },
    /// The bind asks for more namespaces than one Grant may hold (HTTP 409).
    #[error("a bind may claim at most {max} namespaces on this provider; {asked} were asked for")]
    TooManyNamespaces {
        /// The operator's per-bind maximum.
        max: usize,
        /// How many were asked for.
        asked: usize,
    },
    /// Claiming the new namespaces would take the identity over its quota (HTTP 409).
    #[error(
        "an identity may claim at most {quota} namespaces on this provider; this one holds {held} and the bind adds {adding}: unbind some first or ask the platform team for a higher quota"
    )]
    NamespaceQuotaExceeded {
        /// The operator's per-identity quota.
        quota: usize,
        /// Namespaces the identity claimed already.
        held: usize,
        /// Namespaces this Grant would add.
        adding: usize,
    },
    /// The consumer cluster UID is bound by another identity (HTTP 409).
    #[error(
        "consumer cluster {uid} is already bound by another identity; each consumer cluster is bound by one identity (unbind it there first)"
    )]
    ConsumerClusterClaimed {
        /// The consumer cluster UID.
        uid: String,
    },
    /// The Export has cluster-scoped APIs without `spec.clusterScopedSharing` (HTTP 409).
    #[error(
        "Export has cluster-scoped APIs ({}) and does not set spec.clusterScopedSharing: every consumer would read and write every other consumer's objects of them; the provider's platform team must opt in (spec.clusterScopedSharing: true) or offer namespaced APIs", .0.join(", ")
    )]
    ClusterScopedNotShared(Vec<String>),
    /// Some APIs of the Export are not exported by the provider (HTTP 409).
    #[error("the provider does not export {}; ask the provider's platform team to label its CRD core.kbind.io/exported=true", .0.join(", "))]
    ApiNotExported(Vec<String>),
    /// This issuer cannot work on this provider (HTTP 501), e.g. a kcp-like one.
    #[error("{0}")]
    UnsupportedProvider(String),
    /// The Grant has not been provisioned yet (HTTP 409 at pickup).
    #[error("the grant is not issued yet")]
    NotIssued,
    /// The provider refused or failed a request.
    #[error("provider: {0}")]
    Cluster(#[from] kbind_cluster::Error),
}

/// The CamelCase reasons of [`IssueError`], as Grant and Export conditions and API errors carry them.
pub mod reason {
    /// [`super::IssueError::NamespaceClaimed`] and [`super::IssueError::NamespaceNotClaimable`]:
    /// one reason, so a refusal does not tell whose a namespace is.
    pub const NAMESPACE_NOT_AVAILABLE: &str = "NamespaceNotAvailable";
    /// The reason an older issuer wrote for a namespace another identity claimed.
    pub const NAMESPACE_CLAIMED: &str = "NamespaceClaimed";
    /// The reason an older issuer wrote for a namespace kbind did not create.
    pub const NAMESPACE_NOT_CLAIMABLE: &str = "NamespaceNotClaimable";
    /// [`super::IssueError::NamespaceNotAllowed`].
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// [`super::IssueError::TooManyNamespaces`].
    pub const TOO_MANY_NAMESPACES: &str = "TooManyNamespaces";
    /// [`super::IssueError::NamespaceQuotaExceeded`].
    pub const NAMESPACE_QUOTA_EXCEEDED: &str = "NamespaceQuotaExceeded";
    /// [`super::IssueError::ConsumerClusterClaimed`].
    pub const CONSUMER_CLUSTER_CLAIMED: &str = "ConsumerClusterClaimed";
    /// [`super::IssueError::ClusterScopedNotShared`].
    pub const CLUSTER_SCOPED_NOT_SHARED: &str = "ClusterScopedNotShared";
    /// [`super::IssueError::ApiNotExported`].
    pub const API_NOT_EXPORTED: &str = "APINotExported";
    /// [`super::IssueError::UnsupportedProvider`].
    pub const UNSUPPORTED_PROVIDER: &str = "UnsupportedProvider";
    /// [`super::IssueError::NotIssued`].
    pub const NOT_ISSUED: &str = "NotIssued";
    /// [`super::IssueError::Cluster`] when the provider refused the issuer's request.
    pub const FORBIDDEN: &str = "Forbidden";
    /// [`super::IssueError::Cluster`] otherwise.
    pub const PROVIDER_ERROR: &str = "ProviderError";

    /// The reasons that are the issuer's final word on a Grant's generation: a bind fails with
    /// them at once, any other `Ready=False` reason is waited out (it may pass on a retry).
    pub const GRANT_REFUSALS: &[&str] = &[
        NAMESPACE_NOT_AVAILABLE,
        NAMESPACE_CLAIMED,
        NAMESPACE_NOT_CLAIMABLE,
        NAMESPACE_NOT_ALLOWED,
        TOO_MANY_NAMESPACES,
        NAMESPACE_QUOTA_EXCEEDED,
        CONSUMER_CLUSTER_CLAIMED,
        CLUSTER_SCOPED_NOT_SHARED,
        API_NOT_EXPORTED,
        UNSUPPORTED_PROVIDER,
        FORBIDDEN,
    ];
}

impl IssueError {
    /// The CamelCase reason used in Grant conditions and API errors.
    pub fn reason(&self) -> &'static str {
        match self {
            IssueError::NamespaceClaimed { .. } | IssueError::NamespaceNotClaimable { .. } => {
                reason::NAMESPACE_NOT_AVAILABLE
            }
            IssueError::NamespaceNotAllowed { .. } => reason::NAMESPACE_NOT_ALLOWED,
            IssueError::TooManyNamespaces { .. } => reason::TOO_MANY_NAMESPACES,
            IssueError::NamespaceQuotaExceeded { .. } => reason::NAMESPACE_QUOTA_EXCEEDED,
            IssueError::ConsumerClusterClaimed { .. } => reason::CONSUMER_CLUSTER_CLAIMED,
            IssueError::ClusterScopedNotShared(_) => reason::CLUSTER_SCOPED_NOT_SHARED,
            IssueError::ApiNotExported(_) => reason::API_NOT_EXPORTED,
            IssueError::UnsupportedProvider(_) => reason::UNSUPPORTED_PROVIDER,
            IssueError::NotIssued => reason::NOT_ISSUED,
            IssueError::Cluster(kbind_cluster::Error::Forbidden { .. }) => reason::FORBIDDEN,
            IssueError::Cluster(_) => reason::PROVIDER_ERROR,
        }
    }

    /// The refusal of an Export that has cluster-scoped APIs (`cluster_scoped`, their names) and
    /// does not set `spec.clusterScopedSharing`: every consumer would share their objects.
    pub fn unshared(export: &Export, cluster_scoped: impl IntoIterator<Item = String>) -> Option<IssueError> {
        let apis: Vec<String> = cluster_scoped.into_iter().collect();
        (!apis.is_empty() && !export.spec.cluster_scoped_sharing).then_some(IssueError::ClusterScopedNotShared(apis))
    }
}

/// Provisions and revokes what a Grant gives its identity on the provider.
///
/// The gateway calls [`Issuer::credential`] at pickup; the issuer module's Grant controller calls
/// [`Issuer::provision`] and, through the Grant's finalizer, [`Issuer::revoke`].
#[async_trait]
pub trait Issuer: Send + Sync + 'static {
    /// A short name recorded in `status.issued.issuer`.
    fn name(&self) -> &str;

    /// Whether this issuer can work on the provider; the error says why not and what to do.
    async fn check_provider(&self) -> Result<(), IssueError>;

    /// Creates or updates what `grant` needs; idempotent, and never invalidates a credential
    /// already handed out for the same Grant.
    async fn provision(&self, grant: &Grant, export: &Export) -> Result<Issued, IssueError>;

    /// Refuses, before anything is written, a bind of `subject` for `namespaces` that
    /// [`Issuer::provision`] would refuse whatever the provider holds (the gateway's pre-check).
    fn precheck_namespaces(&self, _subject: &str, _namespaces: &[String]) -> Result<(), IssueError> {
        Ok(())
    }

    /// A fresh credential for an issued Grant.
    async fn credential(&self, grant: &Grant) -> Result<Credential, IssueError>;

    /// Removes what [`Issuer::provision`] created, invalidating its credentials; idempotent.
    async fn revoke(&self, grant: &Grant) -> Result<(), IssueError>;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_refusal_of_a_grant_is_final_for_the_gateway() {
        let forbidden = kbind_cluster::Error::Forbidden {
            verb: String::new(),
            resource: String::new(),
            message: String::new(),
        };
        let refusals = [
            IssueError::NamespaceClaimed {
                namespace: String::new(),
            },
            IssueError::NamespaceNotClaimable {
                namespace: String::new(),
            },
            IssueError::NamespaceNotAllowed {
                namespace: String::new(),
                rule: String::new(),
            },
            IssueError::TooManyNamespaces { max: 0, asked: 0 },
            IssueError::NamespaceQuotaExceeded {
                quota: 0,
                held: 0,
                adding: 0,
            },
            IssueError::ConsumerClusterClaimed { uid: String::new() },
            IssueError::ClusterScopedNotShared(Vec::new()),
            IssueError::ApiNotExported(Vec::new()),
            IssueError::UnsupportedProvider(String::new()),
            IssueError::Cluster(forbidden),
        ];
        for refusal in &refusals {
            assert!(
                reason::GRANT_REFUSALS.contains(&refusal.reason()),
                "{}",
                refusal.reason()
            );
        }
        // Two of them share a reason; the two reasons of older issuers are final too.
        assert_eq!(refusals.len() - 1 + 2, reason::GRANT_REFUSALS.len());
        for waited in [
            IssueError::NotIssued,
            IssueError::Cluster(kbind_cluster::Error::Decode(String::new())),
        ] {
            assert!(
                !reason::GRANT_REFUSALS.contains(&waited.reason()),
                "{}",
                waited.reason()
            );
        }
    }
}
