//! `catalog.kbind.io/v1alpha1`: what a provider offers. An `Export` names the APIs a consumer can
//! bind together; a `Collection` groups Exports for browsing. Read by the backend's gateway.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::{BoundApiRef, ConflictPolicy, RelatedResource, ResourceScope};

/// An offer: APIs a consumer binds together, with the defaults its bindings get.
// Clippy reads the repeated `printcolumn(type_ = ...)` inside `#[kube]` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "catalog.kbind.io",
    version = "v1alpha1",
    kind = "Export",
    plural = "exports",
    shortname = "kexp",
    category = "kbind-catalog",
    status = "ExportStatus",
    derive = "PartialEq",
    doc = "An Export offers APIs of this provider for consumers to bind.",
    printcolumn(name = "Title", type_ = "string", json_path = ".spec.title"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(name = "APIs", type_ = "string", json_path = ".spec.apis[*].name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ExportSpec {
    /// Human-readable name shown in the catalog.
    #[schemars(length(min = 1, max = 128))]
    pub title: String,
    /// What the service does, shown in the catalog.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// An https URL of an icon (anything else, a `javascript:` link say, is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^https://\S+$"), length(max = 2048))]
    pub icon: Option<String>,
    /// An https URL of the service's documentation (anything else is refused).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(pattern(r"^https://\S+$"), length(max = 2048))]
    pub docs: Option<String>,
    /// The APIs offered, by `<plural>.<group>`; each must be exported by the provider.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub apis: Vec<BoundApiRef>,
    /// The conflict policy of the bindings in the bundle.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// Secrets and ConfigMaps the bundle's bindings copy alongside the instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub related_resources: Vec<RelatedResource>,
    /// Opt-in for cluster-scoped APIs: every consumer bound to this Export can read and write
    /// every object of its cluster-scoped APIs, including objects other consumers created.
    /// Without it, an Export with a cluster-scoped API is not issued (ClusterScopedNotShared).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub cluster_scoped_sharing: bool,
}

/// What the backend found about an Export's APIs.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportStatus {
    /// Each API of the Export as the provider serves it; an API not exported has no scope.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub apis: Vec<ExportApiStatus>,
    /// `Ready`: every API is exported (`APINotExported` names the ones that are not).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// One API of an Export as the provider serves it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportApiStatus {
    /// `<plural>.<group>`.
    pub name: String,
    /// Whether the provider exports it (CRD labelled `core.kbind.io/exported=true`).
    pub exported: bool,
    /// Its scope, when exported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scope: Option<ResourceScope>,
}

/// A group of Exports shown together in the catalog.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "catalog.kbind.io",
    version = "v1alpha1",
    kind = "Collection",
    plural = "collections",
    shortname = "kcol",
    category = "kbind-catalog",
    derive = "PartialEq",
    doc = "A Collection groups Exports for the catalog.",
    printcolumn(name = "Title", type_ = "string", json_path = ".spec.title"),
    printcolumn(name = "Exports", type_ = "string", json_path = ".spec.exports[*].name")
)]
#[serde(rename_all = "camelCase")]
pub struct CollectionSpec {
    /// Human-readable name shown in the catalog.
    #[schemars(length(min = 1, max = 128))]
    pub title: String,
    /// What the Exports have in common.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// The Exports in this Collection, by name.
    #[serde(default)]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub exports: Vec<ExportRef>,
}

/// A reference to an Export by name.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ExportRef {
    /// Name of the Export.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}
