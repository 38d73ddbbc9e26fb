//! The sample API a provider exports in the demo and in the tests that play a provider's
//! platform team (on fakeapi or on a real kube-apiserver): Widgets in `example.org`, their CRD
//! labelled exported, and the least-privilege RBAC a provider grants the konnector.

use kbind_cluster::ApiResource;
use serde_json::{Value, json};

/// The sample API the provider exports.
pub fn widgets() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// The provider's sample CRD, labelled exported.
pub fn widgets_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org", "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "observedGeneration": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

/// What the provider grants the konnector: the exported API, CRD reads for discovery, its
/// heartbeat Lease and namespaces (least privilege, as a provider's platform team would).
pub fn provider_rbac() -> Vec<(ApiResource, Value)> {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kbind-konnector"},
        "rules": [
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kbind-konnector"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kbind-konnector"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "kbind-konnector"}],
    });
    vec![
        (ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()), role),
        (
            ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&()),
            binding,
        ),
    ]
}
