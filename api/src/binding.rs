//! `ClusterBinding` and `Binding`: which exported APIs of a Connection are synced, and how.

use std::ops::{Deref, DerefMut};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which APIs of a Connection are synced, and how. A namespaced Binding syncs only the
/// instances in its own namespace, and only when the Connection's
/// `core.kbind.io/binding-namespaces` annotation allows that namespace.
///
/// `connectionRef` is immutable: an API is served through exactly one Connection, so moving a
/// binding means deleting it (which drains) and creating a new one.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kbind.io",
    version = "v1alpha1",
    kind = "Binding",
    plural = "bindings",
    namespaced,
    shortname = "kbd",
    category = "kbind",
    status = "BindingStatus",
    derive = "PartialEq",
    doc = "A Binding syncs instances of APIs of a Connection in its own namespace.",
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Connection", type_ = "string", json_path = ".spec.connectionRef.name"),
    printcolumn(name = "APIs", type_ = "string", json_path = ".spec.apis[*].name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct BindingSpec {
    /// The Connection whose provider serves the APIs. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "connectionRef is immutable; delete the binding and create a new one"
    }]))]
    pub connection_ref: ConnectionRef,
    /// The APIs to sync, by `<plural>.<group>`.
    #[schemars(length(min = 1))]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub apis: Vec<BoundApiRef>,
    /// What to do with a provider object of the same name that kbind did not create.
    #[serde(default)]
    pub conflict_policy: ConflictPolicy,
    /// Secrets and ConfigMaps copied alongside the instances.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub related_resources: Vec<RelatedResource>,
}

/// Which APIs of a Connection are synced cluster-wide, and how; the same fields as a Binding.
// One spec for both kinds (DESIGN §2): a transparent newtype that dereferences to BindingSpec,
// because the CustomResource derive generates exactly one kind per struct.
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kbind.io",
    version = "v1alpha1",
    kind = "ClusterBinding",
    plural = "clusterbindings",
    shortname = "kcb",
    category = "kbind",
    status = "BindingStatus",
    derive = "PartialEq",
    doc = "A ClusterBinding syncs all instances of APIs of a Connection.",
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Connection", type_ = "string", json_path = ".spec.connectionRef.name"),
    printcolumn(name = "APIs", type_ = "string", json_path = ".spec.apis[*].name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(transparent)]
pub struct ClusterBindingSpec(pub BindingSpec);

impl Deref for ClusterBindingSpec {
    type Target = BindingSpec;

    fn deref(&self) -> &BindingSpec {
        &self.0
    }
}

impl DerefMut for ClusterBindingSpec {
    fn deref_mut(&mut self) -> &mut BindingSpec {
        &mut self.0
    }
}

impl From<BindingSpec> for ClusterBindingSpec {
    fn from(spec: BindingSpec) -> Self {
        Self(spec)
    }
}

/// Reference to a cluster-scoped Connection.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct ConnectionRef {
    /// Name of the Connection.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
}

/// One API to bind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct BoundApiRef {
    /// `<plural>.<group>`, e.g. `widgets.example.org`.
    #[schemars(length(min = 3, max = 253))]
    #[schemars(pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)+$"))]
    pub name: String,
}

/// What happens to a provider object kbind did not create.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum ConflictPolicy {
    /// Leave it alone and report the conflict.
    #[default]
    Fail,
    /// Take it over by stamping kbind's ownership markers.
    Adopt,
}

/// Secrets or ConfigMaps synced next to the bound instances.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResource {
    /// API group; only the core group `""`.
    #[serde(default)]
    #[schemars(extend("enum" = [""]))]
    pub group: String,
    /// `secrets` or `configmaps`.
    pub resource: RelatedResourceKind,
    /// Which side owns the originals.
    pub direction: RelatedResourceDirection,
    /// Which objects are copied. Both parts must match when both are set; an empty selector
    /// selects nothing, an empty `labelSelector: {}` selects every object.
    #[serde(default)]
    pub selector: RelatedResourceSelector,
}

/// Kinds of related resources.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum RelatedResourceKind {
    /// Core `v1` Secrets.
    Secrets,
    /// Core `v1` ConfigMaps.
    ConfigMaps,
}

/// Direction of a related-resource copy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RelatedResourceDirection {
    /// Provider originals are copied to the consumer.
    FromProvider,
    /// Consumer originals are copied to the provider.
    FromConsumer,
}

/// Selects related objects by labels and/or names.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceSelector {
    /// Objects whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Objects with exactly these names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
}

/// Observed state of a ClusterBinding or Binding.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindingStatus {
    /// Per-API state.
    #[serde(rename = "boundAPIs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub bound_apis: Vec<BoundApiStatus>,
    /// `Connected`, `Synced`, `Conflicts`, `PermissionDenied` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// The state of one bound API.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct BoundApiStatus {
    /// `<plural>.<group>`.
    pub name: String,
    /// `sha256:<16 hex>` of the schema installed on this cluster.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub crd_hash: Option<String>,
    /// Objects of this API currently left alone because of a conflict.
    #[serde(default)]
    pub conflict_count: i64,
    /// Per-API conditions *(ours)*, e.g. `APINotExported` or `BoundThroughAnotherConnection`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

impl BindingSpec {
    /// Whether the spec names the API `<plural>.<group>`.
    pub fn binds(&self, api: &str) -> bool {
        self.apis.iter().any(|bound| bound.name == api)
    }
}

impl BindingStatus {
    /// The status of the bound API `<plural>.<group>`, if reported.
    pub fn bound_api(&self, api: &str) -> Option<&BoundApiStatus> {
        self.bound_apis.iter().find(|bound| bound.name == api)
    }
}
