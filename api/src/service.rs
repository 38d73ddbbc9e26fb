//! The gateway's HTTP API (contract §7) as JSON types, shared by the backend, the `kbind` CLI
//! and the web UI's expectations. Paths are in [`path`]; every error body is an [`ApiError`].

use serde::{Deserialize, Serialize};

use crate::ResourceScope;

/// Request paths of the gateway.
pub mod path {
    /// `GET`: [`super::ProviderInfo`], no authentication.
    pub const PROVIDER: &str = "/api/v1/provider";
    /// `GET`: [`super::WhoAmI`] of the caller.
    pub const WHOAMI: &str = "/api/v1/whoami";
    /// `GET`: [`super::Catalog`] for the caller.
    pub const CATALOG: &str = "/api/v1/catalog";
    /// `POST` [`super::BindRequest`] → [`super::BindResponse`].
    pub const BIND: &str = "/api/v1/bind";
    /// `GET`: the caller's [`super::GrantList`]; `DELETE {PATH}/<name>` revokes one.
    pub const GRANTS: &str = "/api/v1/grants";
    /// `GET {PATH}/<id>`: the bundle, once (YAML or JSON by `Accept`). No authentication: the id is
    /// the capability.
    pub const PICKUP: &str = "/api/v1/pickup";
    /// Liveness.
    pub const HEALTHZ: &str = "/healthz";
    /// Readiness: the provider cluster answers.
    pub const READYZ: &str = "/readyz";
    /// Prometheus metrics.
    pub const METRICS: &str = "/metrics";
}

/// Header a browser session must echo on every state-changing request (double-submit CSRF).
pub const CSRF_HEADER: &str = "x-kbind-csrf";

/// `GET /api/v1/provider`: who this provider is and how to sign in.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ProviderInfo {
    /// The provider's name (`--provider-name`), used to name the bundle's Connection.
    pub name: String,
    /// The API server URL issued kubeconfigs point at.
    #[serde(rename = "providerURL")]
    pub provider_url: String,
    /// The sign-in methods the gateway accepts.
    pub auth_methods: Vec<AuthMethod>,
    /// The issuer that provisions credentials (`kubernetes` in tree).
    pub issuer: String,
    /// Set when binding cannot work on this provider, with the reason (e.g. a kcp-like provider
    /// needs another issuer).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unavailable: Option<String>,
    /// The backend's version.
    pub version: String,
}

/// One sign-in method.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct AuthMethod {
    /// `token` (a bearer token) or `oidc`.
    #[serde(rename = "type")]
    pub kind: String,
    /// Where a browser starts signing in, for methods with a login flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub login_path: Option<String>,
    /// For `oidc`: the issuer a CLI discovers and signs in at (`issuerURL`).
    #[serde(default, rename = "issuerURL", skip_serializing_if = "Option::is_none")]
    pub issuer_url: Option<String>,
    /// For `oidc`: the public native client (PKCE, loopback redirect) a CLI signs in as
    /// (`clientID`); absent when the gateway offers no CLI sign-in.
    #[serde(default, rename = "clientID", skip_serializing_if = "Option::is_none")]
    pub client_id: Option<String>,
}

/// `GET /api/v1/whoami`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct WhoAmI {
    /// The stable subject Grants are recorded under.
    pub subject: String,
    /// Display name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// The CSRF token a browser session sends in [`CSRF_HEADER`]; absent for bearer callers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub csrf_token: Option<String>,
}

/// `GET /api/v1/catalog`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Catalog {
    /// Collections, by name.
    pub collections: Vec<CatalogCollection>,
    /// Every Export, by name (also those in no Collection).
    pub exports: Vec<CatalogExport>,
}

/// A Collection in the catalog.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogCollection {
    /// Its name.
    pub name: String,
    /// Its title.
    pub title: String,
    /// Its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Names of its Exports that exist.
    pub exports: Vec<String>,
}

/// An Export in the catalog.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogExport {
    /// Its name (what `bind` takes).
    pub name: String,
    /// Its title.
    pub title: String,
    /// Its description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Icon URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub icon: Option<String>,
    /// Documentation URL.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub docs: Option<String>,
    /// Its APIs.
    pub apis: Vec<CatalogApi>,
    /// Whether binding needs namespaces (some API is namespaced).
    pub namespaced: bool,
    /// Whether it can be bound now (every API exported).
    pub ready: bool,
    /// Why not, when not ready.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// The related-resource rules its bindings carry (a `FromConsumer` rule copies the consumer's objects).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_resources: Vec<crate::RelatedResource>,
    /// Set when the Export shares cluster-scoped APIs (`spec.clusterScopedSharing`): what that
    /// means for the consumer, [`CLUSTER_SCOPED_SHARING`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_scoped_sharing: Option<String>,
}

/// What `spec.clusterScopedSharing` means, as the catalog shows it.
pub const CLUSTER_SCOPED_SHARING: &str = "shared cluster-scoped APIs: every consumer bound to this Export can read and write every object of its cluster-scoped APIs, including other consumers' objects";

/// One API of an Export in the catalog.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogApi {
    /// `<plural>.<group>`.
    pub name: String,
    /// Whether the provider exports it.
    pub exported: bool,
    /// Its scope, when exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ResourceScope>,
    /// Its API group (from the name, so also when not exported).
    #[serde(default)]
    pub group: String,
    /// Its resource, the plural (from the name).
    #[serde(default)]
    pub resource: String,
    /// Its kind, when exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kind: Option<String>,
    /// Its served versions, when exported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
    /// The `spec` fields of its storage version's schema (two levels deep, bounded), when exported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub fields: Vec<CatalogField>,
}

/// A field of an exported API's `spec`, from the provider CRD's `openAPIV3Schema`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct CatalogField {
    /// Its path, e.g. `spec.tls.secretName`.
    pub path: String,
    /// Its schema type (`string`, `integer`, `object`, …; empty when the schema gives none).
    #[serde(rename = "type", default)]
    pub type_: String,
    /// Whether its parent object requires it.
    #[serde(default)]
    pub required: bool,
    /// Its schema description, shortened.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
}

/// `POST /api/v1/bind`.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct BindRequest {
    /// The Export to bind.
    pub export: String,
    /// The consumer cluster's UID (its `kube-system` Namespace UID), a UUID.
    #[serde(rename = "consumerClusterUID")]
    pub consumer_cluster_uid: String,
    /// Namespaces the consumer uses, for Exports with namespaced APIs.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// The konnector's namespace on the consumer (where the bundle's Secret goes); default `kbind`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub konnector_namespace: Option<String>,
}

/// The answer to a bind: where to pick the bundle up, once.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct BindResponse {
    /// The Grant created or updated.
    pub grant: String,
    /// The one-time URL of the bundle.
    #[serde(rename = "pickupURL")]
    pub pickup_url: String,
    /// When the pickup URL stops working (RFC 3339).
    pub expires_at: String,
    /// What the bind did to the Grant (absent from older gateways).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub outcome: Option<BindOutcome>,
    /// The Grant's namespaces after the bind: the ones it held and the ones asked for (a bind
    /// only adds; absent from older gateways, which replaced them).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespaces: Option<Vec<String>>,
}

/// What a bind did to its Grant.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum BindOutcome {
    /// A new Grant.
    Created,
    /// The Grant existed; namespaces were added to it.
    Updated,
    /// The Grant existed with every namespace asked for (a new pickup only).
    Unchanged,
}

/// `GET /api/v1/grants`.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrantList {
    /// The caller's Grants, by name.
    pub grants: Vec<GrantView>,
}

/// One Grant as its owner sees it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GrantView {
    /// Its name.
    pub name: String,
    /// The Export.
    pub export: String,
    /// The consumer cluster.
    #[serde(rename = "consumerClusterUID")]
    pub consumer_cluster_uid: String,
    /// Claimed namespaces.
    #[serde(default)]
    pub namespaces: Vec<String>,
    /// Whether it is issued and usable.
    pub ready: bool,
    /// The Ready condition's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// The Ready condition's message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// Seconds since the consumer's heartbeat Lease was last seen renewed; absent before the first.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub heartbeat_age_seconds: Option<i64>,
    /// Set while the Grant is being revoked.
    #[serde(default)]
    pub revoking: bool,
    /// Creation time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created: Option<String>,
}

/// Every error the gateway answers: an HTTP status, a machine-readable reason and what to do.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    /// The HTTP status code.
    pub code: u16,
    /// A CamelCase reason (`ExportNotFound`, `PickupGone`, `NamespaceClaimed`, …).
    pub reason: String,
    /// A sentence that says what went wrong and what to do.
    pub message: String,
}
