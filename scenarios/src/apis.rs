//! The sample APIs providers of the world export: `widgets.example.org` (namespaced, with a
//! status subresource) and `gadgets.example.org` (cluster-scoped).

use serde_json::{Value, json};

/// A provider CRD for `<plural>.example.org`, labelled exported.
pub fn exported_crd(plural: &str, kind: &str, scope: &str) -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.org"), "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {
                    "type": "object",
                    "properties": {
                        "spec": {"type": "object", "properties": {
                            "size": {"type": "integer", "default": 1},
                            "color": {"type": "string"},
                            "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        }},
                        "status": {"type": "object", "properties": {
                            "phase": {"type": "string"},
                            "observedGeneration": {"type": "integer"},
                            "conditions": {"type": "array", "items": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
                        }},
                    },
                }},
            }],
        },
    })
}

/// A provider CRD for `<plural>.example.org` whose schema keeps any field, labelled exported
/// or not: for tests about who may see and use an API rather than about its schema.
pub fn crd(plural: &str, kind: &str, scope: &str, exported: bool) -> Value {
    let labels = if exported {
        json!({"core.kbind.io/exported": "true"})
    } else {
        json!({})
    };
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.example.org"), "labels": labels},
        "spec": {
            "group": "example.org", "scope": scope,
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}

/// `widgets.example.org`.
pub fn widgets_crd() -> Value {
    exported_crd("widgets", "Widget", "Namespaced")
}

/// The consumer/provider resource of widgets.
pub fn widgets() -> kbind_cluster::ApiResource {
    kbind_cluster::ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// A Widget object.
pub fn widget(namespace: &str, name: &str, spec: Value) -> kbind_cluster::DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": name, "namespace": namespace},
        "spec": spec,
    }))
    .unwrap_or_else(|e| panic!("a widget is a valid object: {e}"))
}

/// `networking.k8s.io/v1` Ingresses.
pub fn ingresses() -> kbind_cluster::ApiResource {
    kbind_cluster::ApiResource::erase::<k8s_openapi::api::networking::v1::Ingress>(&())
}

/// A CRD that serves `ingresses.networking.k8s.io/v1` with a status subresource and any
/// fields, for fake clusters (which have no built-in Ingress).
pub fn ingresses_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "ingresses.networking.k8s.io"},
        "spec": {
            "group": "networking.k8s.io", "scope": "Namespaced",
            "names": {"plural": "ingresses", "singular": "ingress", "kind": "Ingress", "listKind": "IngressList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}},
            }],
        },
    })
}
