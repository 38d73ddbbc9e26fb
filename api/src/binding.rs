//! `ClusterBinding` and `Binding`: which exported APIs of a Connection are synced, and how.

use std::ops::{Deref, DerefMut};

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// Which APIs of a Connection are synced, and how. A namespaced Binding syncs only the
/// instances in its own namespace, and only when the Connection's
/// `core.kbind.io/binding-namespaces` annotation allows that namespace.
///
/// `connectionRef` is immutable: an API is served through exactly one Connection, so moving a
/// binding means deleting it (which drains) and creating a new one.
// Clippy reads the repeated `printcolumn(type_ = ...)` inside `#[kube]` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
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
    /// Objects of other kinds copied alongside the instances (Secrets, ConfigMaps or any namespaced kind).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "atomic"))]
    pub related_resources: Vec<RelatedResource>,
}

/// Which APIs of a Connection are synced cluster-wide, and how; the same fields as a Binding.
// One spec for both kinds (contract §2): a transparent newtype that dereferences to BindingSpec,
// because the CustomResource derive generates exactly one kind per struct.
// Clippy reads the repeated `printcolumn(type_ = ...)` inside `#[kube]` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
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
    printcolumn(name = "Connection", type_ = "string", json_path = ".spec.connectionRef.name"),
    printcolumn(name = "APIs", type_ = "string", json_path = ".spec.apis[*].name"),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(transparent)]
pub struct ClusterBindingSpec(
    /// The spec shared with `Binding`.
    pub BindingSpec,
);

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

/// Objects of another namespaced kind synced next to the bound instances: Secrets and
/// ConfigMaps, or any namespaced resource the side they come from serves.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResource {
    /// API group; `""` is the core group.
    #[serde(default)]
    #[schemars(length(max = 253))]
    #[schemars(pattern(r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$"))]
    pub group: String,
    /// Plural resource name, e.g. `secrets`, `configmaps`, `ingresses`.
    #[schemars(length(min = 1, max = 63))]
    #[schemars(pattern(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"))]
    pub resource: String,
    /// API version; the version the source side prefers when absent.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(min = 1, max = 63))]
    pub version: Option<String>,
    /// Which side owns the originals.
    pub direction: RelatedResourceDirection,
    /// Which objects are copied: those the label and name parts select (both must match when
    /// both are set), plus those named by `references`. An empty selector selects nothing, an
    /// empty `labelSelector: {}` selects every object.
    #[serde(default)]
    pub selector: RelatedResourceSelector,
    /// Also copy the status of the copy back onto the original.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub sync_status: bool,
}

impl RelatedResource {
    /// The rule's kind as group and resource.
    pub fn kind(&self) -> RelatedKind {
        RelatedKind {
            group: self.group.clone(),
            resource: self.resource.clone(),
        }
    }
}

/// A related kind: API group and plural resource, without a version.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RelatedKind {
    /// API group; `""` is the core group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl RelatedKind {
    /// Core `v1` Secrets.
    pub fn secrets() -> Self {
        Self {
            group: String::new(),
            resource: "secrets".into(),
        }
    }

    /// Core `v1` ConfigMaps.
    pub fn config_maps() -> Self {
        Self {
            group: String::new(),
            resource: "configmaps".into(),
        }
    }

    /// Whether this is core Secrets (their content is never shown or logged).
    pub fn is_secrets(&self) -> bool {
        self.group.is_empty() && self.resource == "secrets"
    }
}

impl std::fmt::Display for RelatedKind {
    /// `resource` for the core group, `resource.group` otherwise (as kubectl names them).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.group.is_empty() {
            f.write_str(&self.resource)
        } else {
            write!(f, "{}.{}", self.resource, self.group)
        }
    }
}

/// Direction of a related-resource copy.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum RelatedResourceDirection {
    /// Provider originals are copied to the consumer.
    FromProvider,
    /// Consumer originals are copied to the provider.
    FromConsumer,
}

/// Selects related objects by labels and/or names, and by references from the bound objects.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct RelatedResourceSelector {
    /// Objects whose labels match.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub label_selector: Option<LabelSelector>,
    /// Objects with exactly these names.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub names: Vec<String>,
    /// Objects whose names appear at these paths of the bound objects, in the bound object's
    /// namespace (a union with the label and name parts).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub references: Vec<RelatedReference>,
}

/// Where in a bound object the name of a related object is found.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
pub struct RelatedReference {
    /// A dotted path into the bound object, `[]` after a list field to look into each item,
    /// e.g. `spec.passwordSecretRef.name` or `spec.tls[].secretName`.
    #[schemars(length(min = 1, max = 512))]
    #[schemars(pattern(r"^[A-Za-z0-9_-]+(\[\])?(\.[A-Za-z0-9_-]+(\[\])?)*$"))]
    pub path: String,
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
    /// *(ours)* When this binding claimed what it covers of this API (its namespace, or every
    /// namespace for a ClusterBinding) for its Connection. Set when it starts serving, kept
    /// while it names the API, whatever its Connection's state: no binding of another Connection
    /// is let into a claimed namespace (contract §4 "Connections per API").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<Time>,
}

impl BoundApiStatus {
    /// When this binding claimed the API: `claimedAt`, or, for a status written before claims
    /// were recorded, when its `Synced` condition last turned True while it still holds (a
    /// binding that served then claimed it).
    pub fn claim(&self) -> Option<&Time> {
        self.claimed_at.as_ref().or_else(|| {
            self.conditions
                .iter()
                .find(|c| c.type_ == crate::consts::condition::SYNCED && c.status == crate::consts::status::TRUE)
                .map(|c| &c.last_transition_time)
        })
    }
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

    /// When this binding claimed API `<plural>.<group>` (see [`BoundApiStatus::claim`]).
    pub fn claim(&self, api: &str) -> Option<&Time> {
        self.bound_api(api).and_then(BoundApiStatus::claim)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::crds::test_support::{apply_defaults, node, schema_of, validate};

    const CLUSTER_CRD: &str = "clusterbindings.core.kbind.io";
    const NAMESPACED_CRD: &str = "bindings.core.kbind.io";

    /// The ClusterBinding of contract §1, the one-apply bundle.
    const DESIGN_SAMPLE: &str = r#"
apiVersion: core.kbind.io/v1alpha1
kind: ClusterBinding
metadata: {name: widgets}
spec:
  connectionRef: {name: acme}
  apis: [{name: widgets.example.org}]
"#;

    fn minimal(kind: &str) -> Value {
        json!({
            "apiVersion": "core.kbind.io/v1alpha1",
            "kind": kind,
            "metadata": {"name": "widgets", "namespace": "team-a"},
            "spec": {
                "connectionRef": {"name": "acme"},
                "apis": [{"name": "widgets.example.org"}],
                "relatedResources": [{"resource": "secrets", "direction": "FromProvider", "selector": {"names": ["creds"]}}],
            },
        })
    }

    #[test]
    fn design_sample_round_trips() {
        let binding: ClusterBinding = serde_saphyr::from_str(DESIGN_SAMPLE).unwrap();
        assert_eq!(binding.spec.connection_ref.name, "acme");
        assert!(binding.spec.binds("widgets.example.org"));
        assert_eq!(binding.spec.conflict_policy, ConflictPolicy::Fail);
        let yaml = serde_saphyr::to_string(&binding).unwrap();
        let again: ClusterBinding = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(again, binding);
        let wire = serde_json::to_value(&again).unwrap();
        assert_eq!(wire["kind"], "ClusterBinding");
        assert_eq!(wire["spec"]["apis"], json!([{"name": "widgets.example.org"}]));
    }

    #[test]
    fn cluster_binding_and_binding_share_one_spec() {
        let binding: Binding = serde_json::from_value(minimal("Binding")).unwrap();
        let cluster: ClusterBinding = serde_json::from_value(minimal("ClusterBinding")).unwrap();
        assert_eq!(*cluster.spec, binding.spec);
        assert_eq!(
            node(&schema_of(CLUSTER_CRD), "spec")["properties"],
            node(&schema_of(NAMESPACED_CRD), "spec")["properties"]
        );
    }

    #[test]
    fn serde_fills_the_defaults_of_a_minimal_spec() {
        let binding: Binding = serde_json::from_value(minimal("Binding")).unwrap();
        assert_eq!(binding.spec.conflict_policy, ConflictPolicy::Fail);
        let related = &binding.spec.related_resources[0];
        assert_eq!(related.group, "");
        assert_eq!(related.resource, "secrets");
        assert!(related.kind().is_secrets());
        assert_eq!(related.direction, RelatedResourceDirection::FromProvider);
        assert_eq!(related.selector.names, ["creds"]);
        assert!(related.selector.label_selector.is_none());
    }

    #[test]
    fn schema_defaults_agree_with_serde_defaults() {
        for (crd, kind) in [(NAMESPACED_CRD, "Binding"), (CLUSTER_CRD, "ClusterBinding")] {
            let defaulted = apply_defaults(crd, &minimal(kind));
            assert_eq!(defaulted["spec"]["conflictPolicy"], "Fail");
            assert_eq!(defaulted["spec"]["relatedResources"][0]["group"], "");
            let from_serde = serde_json::to_value(serde_json::from_value::<Binding>(minimal(kind)).unwrap()).unwrap();
            assert_eq!(defaulted["spec"], from_serde["spec"], "{kind}");
        }
    }

    #[test]
    fn related_resources_admit_any_group_and_plural_resource_with_dotted_reference_paths() {
        let schema = schema_of(NAMESPACED_CRD);
        let related = node(&schema, "spec/relatedResources/items");
        assert_eq!(
            node(related, "direction")["enum"],
            json!(["FromProvider", "FromConsumer"])
        );
        let matcher = |field: &str| regex::Regex::new(node(related, field)["pattern"].as_str().unwrap()).unwrap();
        let group = matcher("group");
        for valid in ["", "networking.k8s.io", "db.example.org", "apps"] {
            assert!(group.is_match(valid), "group {valid:?} should be accepted");
        }
        for invalid in ["Networking.k8s.io", ".org", "a..b", "a/b"] {
            assert!(!group.is_match(invalid), "group {invalid:?} should be refused");
        }
        let resource = matcher("resource");
        for invalid in ["", "Ingresses", "ingresses.networking.k8s.io", "a/b"] {
            assert!(!resource.is_match(invalid), "resource {invalid:?} should be refused");
        }
        let path = regex::Regex::new(
            node(related, "selector/references/items/path")["pattern"]
                .as_str()
                .unwrap(),
        )
        .unwrap();
        for valid in [
            "spec.passwordSecretRef.name",
            "spec.tls[].secretName",
            "spec.a_b-c",
            "spec",
        ] {
            assert!(path.is_match(valid), "path {valid:?} should be accepted");
        }
        for invalid in [
            "",
            ".spec",
            "spec.",
            "spec..name",
            "spec.tls[0].name",
            "spec[*]",
            "$.spec",
        ] {
            assert!(!path.is_match(invalid), "path {invalid:?} should be refused");
        }
    }

    #[test]
    fn a_rule_without_the_new_fields_reads_and_writes_as_before() {
        let rule: RelatedResource = serde_json::from_value(json!({
            "resource": "configmaps", "direction": "FromConsumer", "selector": {"names": ["a"]}
        }))
        .unwrap();
        assert_eq!(rule.kind(), RelatedKind::config_maps());
        assert_eq!(rule.kind().to_string(), "configmaps");
        assert!(!rule.sync_status && rule.version.is_none() && rule.selector.references.is_empty());
        assert_eq!(
            serde_json::to_value(&rule).unwrap(),
            json!({"group": "", "resource": "configmaps", "direction": "FromConsumer", "selector": {"names": ["a"]}})
        );
        let ingress = RelatedKind {
            group: "networking.k8s.io".into(),
            resource: "ingresses".into(),
        };
        assert_eq!(ingress.to_string(), "ingresses.networking.k8s.io");
    }

    #[test]
    fn apis_need_at_least_one_plural_dot_group_name() {
        let schema = schema_of(CLUSTER_CRD);
        assert_eq!(node(&schema, "spec/apis")["minItems"], 1);
        let pattern = node(&schema, "spec/apis/items/name")["pattern"].as_str().unwrap();
        let pattern = regex::Regex::new(pattern).unwrap();
        for valid in ["widgets.example.org", "gateways.gateway.networking.k8s.io", "a1-b.c"] {
            assert!(pattern.is_match(valid), "{valid} should be accepted");
        }
        for invalid in [
            "widgets",
            "Widgets.example.org",
            "widgets.",
            ".example.org",
            "widgets..org",
            "wid gets.org",
        ] {
            assert!(!pattern.is_match(invalid), "{invalid} should be refused");
        }
    }

    #[test]
    fn connection_ref_is_immutable_but_apis_may_change() {
        for (crd, kind) in [(NAMESPACED_CRD, "Binding"), (CLUSTER_CRD, "ClusterBinding")] {
            let old = minimal(kind);
            let mut moved = minimal(kind);
            moved["spec"]["connectionRef"]["name"] = json!("other");
            let errors = validate(crd, &moved, Some(&old)).unwrap_err();
            assert!(
                errors.iter().any(|e| e.message.contains("connectionRef is immutable")),
                "{kind}: {errors:?}"
            );

            let mut more_apis = minimal(kind);
            more_apis["spec"]["apis"] = json!([{"name": "widgets.example.org"}, {"name": "gadgets.example.org"}]);
            more_apis["spec"]["conflictPolicy"] = json!("Adopt");
            validate(crd, &more_apis, Some(&old)).unwrap();
        }
    }

    #[test]
    fn status_uses_the_contract_field_names() {
        let status = BindingStatus {
            bound_apis: vec![BoundApiStatus {
                name: "widgets.example.org".into(),
                crd_hash: Some("sha256:0123456789abcdef".into()),
                conflict_count: 2,
                conditions: vec![],
                claimed_at: None,
            }],
            conditions: vec![],
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({"boundAPIs": [{"name": "widgets.example.org", "crdHash": "sha256:0123456789abcdef", "conflictCount": 2}]})
        );
        assert_eq!(
            status.bound_api("widgets.example.org").map(|b| b.conflict_count),
            Some(2)
        );
        assert!(status.bound_api("gadgets.example.org").is_none());
    }
}
