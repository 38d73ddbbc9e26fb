//! `Connection`: one consumer→provider link, its credentials Secret, schema policy and status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::consts;

/// A link from this (consumer) cluster to one provider cluster, whose kubeconfig lives in a
/// Secret in the konnector's namespace.
// Clippy reads the repeated `printcolumn(type_ = ...)` inside `#[kube]` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "core.kbind.io",
    version = "v1alpha1",
    kind = "Connection",
    plural = "connections",
    shortname = "kconn",
    category = "kbind",
    status = "ConnectionStatus",
    derive = "PartialEq",
    doc = "A Connection links this consumer cluster to one provider cluster.",
    validation = Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.localClusterUID) || (has(self.status) && has(self.status.localClusterUID) && self.status.localClusterUID == oldSelf.status.localClusterUID)"
    ).message("status.localClusterUID is immutable once set"),
    validation = Rule::new(
        "!has(oldSelf.status) || !has(oldSelf.status.remoteClusterUID) || (has(self.status) && has(self.status.remoteClusterUID) && self.status.remoteClusterUID == oldSelf.status.remoteClusterUID)"
    ).message("status.remoteClusterUID is immutable once set; delete the Connection with deletion-policy Orphan and apply it again to accept a rebuilt provider"),
    printcolumn(name = "Ready", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].status"#),
    printcolumn(name = "Reason", type_ = "string", json_path = r#".status.conditions[?(@.type=="Ready")].reason"#),
    printcolumn(name = "Connected", type_ = "string", json_path = r#".status.conditions[?(@.type=="Connected")].status"#),
    printcolumn(name = "Schema", type_ = "string", json_path = ".status.activeSchemaSource", priority = 1),
    printcolumn(name = "Provider UID", type_ = "string", json_path = ".status.remoteClusterUID", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionSpec {
    /// The Secret holding the provider kubeconfig; it must be in the konnector's namespace.
    /// Immutable: to point at another provider, create another Connection.
    #[schemars(extend("x-kubernetes-validations" = [{
        "rule": "self == oldSelf",
        "message": "kubeconfigSecretRef is immutable"
    }]))]
    pub kubeconfig_secret_ref: KubeconfigSecretRef,
    /// Where exported schemas come from and how they are pulled and updated.
    #[serde(default)]
    pub schema: SchemaPolicy,
    /// Bind every exported API automatically through a managed ClusterBinding.
    #[serde(default)]
    pub auto_bind: bool,
}

/// Reference to the key of a Secret holding a kubeconfig.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct KubeconfigSecretRef {
    /// Namespace of the Secret (the konnector's namespace, `kbind` by default).
    #[schemars(length(min = 1, max = 63))]
    pub namespace: String,
    /// Name of the Secret.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// Key of the kubeconfig inside the Secret.
    #[serde(default = "default_kubeconfig_key")]
    #[schemars(length(min = 1, max = 253))]
    pub key: String,
}

fn default_kubeconfig_key() -> String {
    consts::DEFAULT_KUBECONFIG_KEY.to_owned()
}

/// How exported schemas are discovered, pulled and kept up to date.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchemaPolicy {
    /// Where schemas come from: provider CRDs, the provider's OpenAPI, or whichever is available.
    #[serde(default)]
    pub source: SchemaSource,
    /// Which exported schemas are pulled into this cluster.
    #[serde(default)]
    pub pull_policy: PullPolicy,
    /// Whether compatible provider schema changes are applied after the first pull.
    #[serde(default)]
    pub update_policy: UpdatePolicy,
}

/// Source of exported API schemas.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum SchemaSource {
    /// `CRD` when the provider serves labelled CRDs, `OpenAPI` on a CRD-less (kcp-like) provider.
    #[default]
    Auto,
    /// Copy the provider CRD's storage version.
    #[serde(rename = "CRD")]
    Crd,
    /// Synthesize a CRD from discovery and `/openapi/v3`.
    #[serde(rename = "OpenAPI")]
    OpenApi,
}

/// Which exported schemas are pulled.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum PullPolicy {
    /// Only APIs named by a binding.
    #[default]
    Bound,
    /// Every exported API.
    All,
    /// None; consumer CRDs are managed by someone else.
    None,
}

/// Whether pulled schemas follow provider changes.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, Default, PartialEq, Eq, Hash, JsonSchema)]
pub enum UpdatePolicy {
    /// Apply compatible changes; hold incompatible ones with `SchemaUpdateBlocked`.
    #[default]
    Always,
    /// Pull once and never update.
    Once,
}

/// Observed state of a Connection.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ConnectionStatus {
    /// Identity of the provider cluster, pinned on first contact; immutable once set.
    #[serde(rename = "remoteClusterUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub remote_cluster_uid: Option<String>,
    /// Identity of this consumer cluster, pinned on first contact; immutable once set.
    #[serde(rename = "localClusterUID", default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 128))]
    pub local_cluster_uid: Option<String>,
    /// The schema source in use (`CRD` or `OpenAPI`) after resolving `Auto`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub active_schema_source: Option<SchemaSource>,
    /// APIs the provider exports to this consumer.
    #[serde(rename = "exportedAPIs", default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    pub exported_apis: Vec<ExportedApi>,
    /// `SecretValid`, `Connected`, `SchemaInSync`, `PermissionDenied` and `Ready`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
    /// *(ours)* When the credential in the kubeconfig Secret expires (RFC 3339), for an issued
    /// token (a ServiceAccount token with an expiry), which the konnector renews before then;
    /// absent for credentials that are not issued tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credential_expires_at: Option<k8s_openapi::apimachinery::pkg::apis::meta::v1::Time>,
}

/// One API the provider exports.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExportedApi {
    /// `<plural>.<group>`.
    pub name: String,
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
    /// Whether instances are namespaced.
    pub scope: ResourceScope,
    /// Served versions.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub versions: Vec<String>,
}

/// Scope of a resource, as in a CRD's `spec.scope`.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq, Hash, JsonSchema)]
pub enum ResourceScope {
    /// Instances live in namespaces.
    Namespaced,
    /// Instances are cluster-wide.
    Cluster,
}

impl Connection {
    /// The Connection's conditions (empty before the first status write).
    pub fn conditions(&self) -> &[Condition] {
        self.status.as_ref().map_or(&[], |status| &status.conditions)
    }

    /// Whether the Connection exports the API `<plural>.<group>`.
    pub fn exports(&self, api: &str) -> bool {
        self.status
            .as_ref()
            .is_some_and(|status| status.exported_apis.iter().any(|exported| exported.name == api))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;
    use crate::crds::test_support::{apply_defaults, node, schema_of, validate};

    const CRD: &str = "connections.core.kbind.io";

    /// The Connection of contract §1, the one-apply bundle.
    const DESIGN_SAMPLE: &str = r#"
apiVersion: core.kbind.io/v1alpha1
kind: Connection
metadata: {name: acme}
spec:
  kubeconfigSecretRef: {namespace: kbind, name: acme, key: kubeconfig}
"#;

    fn minimal() -> Value {
        json!({
            "apiVersion": "core.kbind.io/v1alpha1",
            "kind": "Connection",
            "metadata": {"name": "acme"},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "acme"}},
        })
    }

    fn with_status(mut object: Value, status: Value) -> Value {
        object["status"] = status;
        object
    }

    #[test]
    fn design_sample_round_trips() {
        let connection: Connection = serde_saphyr::from_str(DESIGN_SAMPLE).unwrap();
        assert_eq!(connection.metadata.name.as_deref(), Some("acme"));
        let secret = &connection.spec.kubeconfig_secret_ref;
        assert_eq!(
            (secret.namespace.as_str(), secret.name.as_str(), secret.key.as_str()),
            ("kbind", "acme", "kubeconfig")
        );
        let yaml = serde_saphyr::to_string(&connection).unwrap();
        let again: Connection = serde_saphyr::from_str(&yaml).unwrap();
        assert_eq!(again, connection);
        assert_eq!(
            serde_json::to_value(&again).unwrap()["apiVersion"],
            "core.kbind.io/v1alpha1"
        );
    }

    #[test]
    fn serde_fills_the_defaults_of_a_minimal_spec() {
        let connection: Connection = serde_json::from_value(minimal()).unwrap();
        assert_eq!(connection.spec.kubeconfig_secret_ref.key, "kubeconfig");
        assert_eq!(
            connection.spec.schema,
            SchemaPolicy {
                source: SchemaSource::Auto,
                pull_policy: PullPolicy::Bound,
                update_policy: UpdatePolicy::Always
            }
        );
        assert!(!connection.spec.auto_bind);
    }

    #[test]
    fn schema_defaults_agree_with_serde_defaults() {
        let defaulted = apply_defaults(CRD, &minimal());
        assert_eq!(defaulted["spec"]["kubeconfigSecretRef"]["key"], "kubeconfig");
        assert_eq!(
            defaulted["spec"]["schema"],
            json!({"source": "Auto", "pullPolicy": "Bound", "updatePolicy": "Always"})
        );
        assert_eq!(defaulted["spec"]["autoBind"], false);
        let from_serde = serde_json::to_value(serde_json::from_value::<Connection>(minimal()).unwrap()).unwrap();
        assert_eq!(defaulted["spec"], from_serde["spec"]);
    }

    #[test]
    fn enums_serialize_with_their_wire_names() {
        let policy = SchemaPolicy {
            source: SchemaSource::OpenApi,
            pull_policy: PullPolicy::None,
            update_policy: UpdatePolicy::Once,
        };
        assert_eq!(
            serde_json::to_value(policy).unwrap(),
            json!({"source": "OpenAPI", "pullPolicy": "None", "updatePolicy": "Once"})
        );
        assert_eq!(serde_json::to_value(SchemaSource::Crd).unwrap(), "CRD");
        let schema = schema_of(CRD);
        assert_eq!(
            node(&schema, "spec/schema/source")["enum"],
            json!(["Auto", "CRD", "OpenAPI"])
        );
        assert_eq!(
            node(&schema, "spec/schema/pullPolicy")["enum"],
            json!(["Bound", "All", "None"])
        );
        assert_eq!(
            node(&schema, "spec/schema/updatePolicy")["enum"],
            json!(["Always", "Once"])
        );
    }

    #[test]
    fn status_uses_the_contract_field_names() {
        let status = ConnectionStatus {
            remote_cluster_uid: Some("r".into()),
            local_cluster_uid: Some("l".into()),
            active_schema_source: Some(SchemaSource::Crd),
            exported_apis: vec![ExportedApi {
                name: "widgets.example.org".into(),
                group: "example.org".into(),
                resource: "widgets".into(),
                scope: ResourceScope::Namespaced,
                versions: vec!["v1".into()],
            }],
            credential_expires_at: None,
            conditions: vec![],
        };
        assert_eq!(
            serde_json::to_value(&status).unwrap(),
            json!({
                "remoteClusterUID": "r",
                "localClusterUID": "l",
                "activeSchemaSource": "CRD",
                "exportedAPIs": [{"name": "widgets.example.org", "group": "example.org", "resource": "widgets", "scope": "Namespaced", "versions": ["v1"]}],
            })
        );
        let mut connection: Connection = serde_json::from_value(minimal()).unwrap();
        connection.status = Some(status);
        assert!(connection.exports("widgets.example.org"));
        assert!(!connection.exports("gadgets.example.org"));
        assert!(connection.conditions().is_empty());
    }

    #[test]
    fn kubeconfig_secret_ref_is_immutable() {
        let old = minimal();
        let mut renamed = minimal();
        renamed["spec"]["kubeconfigSecretRef"]["name"] = json!("other");
        let errors = validate(CRD, &renamed, Some(&old)).unwrap_err();
        assert!(
            errors
                .iter()
                .any(|e| e.message.contains("kubeconfigSecretRef is immutable")),
            "{errors:?}"
        );

        let mut explicit_default_key = minimal();
        explicit_default_key["spec"]["kubeconfigSecretRef"]["key"] = json!("kubeconfig");
        validate(CRD, &explicit_default_key, Some(&old)).unwrap();
        let mut toggled = minimal();
        toggled["spec"]["autoBind"] = json!(true);
        validate(CRD, &toggled, Some(&old)).unwrap();
    }

    #[test]
    fn cluster_uids_are_settable_once_then_immutable() {
        let pinned = with_status(
            minimal(),
            json!({"localClusterUID": "local-1", "remoteClusterUID": "remote-1"}),
        );
        validate(CRD, &pinned, None).unwrap();
        validate(CRD, &pinned, Some(&minimal())).unwrap();
        validate(CRD, &pinned, Some(&with_status(minimal(), json!({})))).unwrap();
        validate(CRD, &pinned, Some(&pinned)).unwrap();

        for (field, value) in [("localClusterUID", "local-2"), ("remoteClusterUID", "remote-2")] {
            let mut changed = pinned.clone();
            changed["status"][field] = json!(value);
            let errors = validate(CRD, &changed, Some(&pinned)).unwrap_err();
            assert!(
                errors
                    .iter()
                    .any(|e| e.message.contains(&format!("status.{field} is immutable"))),
                "{errors:?}"
            );

            let mut removed = pinned.clone();
            removed["status"].as_object_mut().unwrap().remove(field);
            assert!(
                validate(CRD, &removed, Some(&pinned)).is_err(),
                "removing {field} must be refused"
            );
        }
        assert!(
            validate(CRD, &minimal(), Some(&pinned)).is_err(),
            "dropping the whole status must be refused"
        );
    }
}
