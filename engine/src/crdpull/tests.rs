//! Unit tests of the pure parts of CRD pulling: copy, hash and update classification.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{annotation, label};
use serde_json::{Value, json};

use super::*;

fn provider_crd(schema: Value) -> CustomResourceDefinition {
    serde_json::from_value(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {
            "name": "widgets.example.org", "uid": "u-1", "resourceVersion": "42", "generation": 3,
            "creationTimestamp": "2025-01-01T00:00:00Z",
            "labels": {"core.kbind.io/exported": "true", "app": "widgets"},
            "annotations": {"kubectl.kubernetes.io/last-applied-configuration": "{}", "team": "blue",
                            "cert-manager.io/inject-ca-from": "ns/cert"},
            "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "o-1"}],
            "finalizers": ["example.org/keep"],
            "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "apiextensions.k8s.io/v1"}],
        },
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"],
                "clientConfig": {"caBundle": "Q0E=", "service": {"namespace": "w", "name": "conv", "port": 443}}}},
            "versions": [
                {"name": "v1alpha1", "served": true, "storage": false,
                 "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}},
                {"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": schema},
                 "subresources": {"status": {}},
                 "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}]},
            ],
        },
        "status": {"storedVersions": ["v1"], "acceptedNames": {"plural": "widgets", "kind": "Widget"}},
    }))
    .unwrap()
}

fn widget_schema() -> Value {
    json!({"type": "object", "properties": {
        "spec": {"type": "object", "properties": {
            "size": {"type": "integer", "default": 1},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"name": {"type": "string"}}}},
            "labels": {"type": "object", "additionalProperties": {"type": "string"}},
        }},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }})
}

fn consumer(schema: Value) -> CustomResourceDefinition {
    consumer_crd_from_provider(&provider_crd(schema), "prod").unwrap()
}

fn with_storage(mut crd: CustomResourceDefinition, name: &str) -> CustomResourceDefinition {
    crd.spec.versions[0].name = name.to_string();
    mark_managed(crd, "prod")
}

#[test]
fn the_consumer_copy_keeps_only_the_storage_version_without_conversion_or_server_fields() {
    let crd = consumer(widget_schema());
    let value = serde_json::to_value(&crd).unwrap();
    let versions = value["spec"]["versions"].as_array().unwrap();
    assert_eq!(versions.len(), 1);
    assert_eq!(versions[0]["name"], "v1");
    assert_eq!(versions[0]["served"], true);
    assert_eq!(versions[0]["storage"], true);
    assert_eq!(versions[0]["schema"]["openAPIV3Schema"], widget_schema());
    assert_eq!(versions[0]["subresources"], json!({"status": {}}));
    assert_eq!(versions[0]["additionalPrinterColumns"][0]["jsonPath"], ".spec.size");
    assert_eq!(value["spec"]["conversion"], json!({"strategy": "None"}));
    assert!(!value.to_string().contains("caBundle"));
    let meta = &value["metadata"];
    for gone in [
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "ownerReferences",
        "finalizers",
        "managedFields",
    ] {
        assert!(meta.get(gone).is_none(), "{gone} was copied");
    }
    assert!(value.get("status").is_none());
    assert_eq!(meta["name"], "widgets.example.org");
    assert_eq!(meta["labels"], json!({"app": "widgets", label::MANAGED: "true"}));
    assert_eq!(meta["annotations"]["team"], "blue");
    assert_eq!(meta["annotations"][annotation::CONNECTION], "prod");
    assert_eq!(meta["annotations"][annotation::SCHEMA_HASH], schema_hash(&crd.spec));
    assert_eq!(meta["annotations"].as_object().unwrap().len(), 3);
}

#[test]
fn a_crd_without_storage_version_cannot_be_pulled() {
    let mut crd = provider_crd(widget_schema());
    for v in &mut crd.spec.versions {
        v.storage = false;
    }
    assert_eq!(
        consumer_crd_from_provider(&crd, "prod"),
        Err(SchemaError::NoStorageVersion {
            name: "widgets.example.org".into()
        })
    );
}

#[test]
fn the_schema_hash_is_stable_and_changes_with_the_spec() {
    let a = consumer(widget_schema());
    let hash = schema_hash(&a.spec);
    assert!(hash.starts_with("sha256:"));
    assert_eq!(hash.len(), "sha256:".len() + 16);
    assert!(hash["sha256:".len()..].chars().all(|c| c.is_ascii_hexdigit()));
    // Key order of the input does not matter: a re-parsed copy hashes the same.
    let reparsed: CustomResourceDefinitionSpec =
        serde_json::from_str(&serde_json::to_string(&a.spec).unwrap()).unwrap();
    assert_eq!(schema_hash(&reparsed), hash);
    let mut changed = a.spec.clone();
    changed.names.short_names = Some(vec!["wd".into()]);
    assert_ne!(schema_hash(&changed), hash);
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let mut out = String::new();
    write_canonical(&json!({"b": [{"z": 1, "a": "x\"y"}], "a": null}), &mut out);
    assert_eq!(out, r#"{"a":null,"b":[{"a":"x\"y","z":1}]}"#);
}

#[test]
fn same_hash_is_unchanged_and_an_added_optional_field_is_compatible() {
    let existing = consumer(widget_schema());
    assert_eq!(classify_update(&existing, &existing.clone()), UpdateKind::Unchanged);
    let mut schema = widget_schema();
    schema["properties"]["spec"]["properties"]["color"] = json!({"type": "string"});
    assert_eq!(classify_update(&existing, &consumer(schema)), UpdateKind::Compatible);
}

#[test]
fn removing_a_field_names_the_topmost_removed_path() {
    let existing = consumer(widget_schema());
    let mut schema = widget_schema();
    schema["properties"]["spec"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("ports");
    let UpdateKind::Destructive(message) = classify_update(&existing, &consumer(schema)) else {
        panic!("expected destructive");
    };
    assert_eq!(message, "field spec.ports is removed");
}

#[test]
fn a_type_change_or_lost_preservation_is_destructive() {
    let existing = consumer(widget_schema());
    let mut schema = widget_schema();
    schema["properties"]["spec"]["properties"]["labels"]["additionalProperties"] = json!({"type": "integer"});
    schema["properties"]["status"] = json!({"type": "object"});
    let UpdateKind::Destructive(message) = classify_update(&existing, &consumer(schema)) else {
        panic!("expected destructive");
    };
    assert_eq!(
        message,
        "field spec.labels[*] changes type from string to integer; field status no longer preserves unknown fields"
    );
}

#[test]
fn a_storage_version_change_is_destructive() {
    let existing = consumer(widget_schema());
    let desired = with_storage(existing.clone(), "v2");
    assert_eq!(
        classify_update(&existing, &desired),
        UpdateKind::Destructive("storage version changes from v1 to v2".into())
    );
}

#[test]
fn a_similar_named_sibling_does_not_hide_a_removal() {
    let mut base = widget_schema();
    base["properties"]["spec"]["properties"]["sizeLimit"] = json!({"type": "integer"});
    let existing = consumer(base.clone());
    base["properties"]["spec"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("size");
    base["properties"]["spec"]["properties"]
        .as_object_mut()
        .unwrap()
        .remove("sizeLimit");
    let UpdateKind::Destructive(message) = classify_update(&existing, &consumer(base)) else {
        panic!("expected destructive");
    };
    assert_eq!(message, "field spec.size is removed; field spec.sizeLimit is removed");
}

#[test]
fn other_tools_markers_stay_on_the_provider_crd() {
    // Until the strip list was one (docs/decisions.md), a pulled CRD kept these: Helm, Argo CD
    // or Flux on the consumer would then take the CRD for one of their own.
    let mut provider = provider_crd(widget_schema());
    let tools = [
        ("app.kubernetes.io/managed-by", "Helm"),
        ("helm.sh/chart", "widgets-1.0.0"),
        ("argocd.argoproj.io/instance", "platform"),
        ("kustomize.toolkit.fluxcd.io/name", "platform"),
    ];
    let notes = [
        ("meta.helm.sh/release-name", "widgets"),
        (
            "argocd.argoproj.io/tracking-id",
            "platform:apiextensions.k8s.io/CustomResourceDefinition:/widgets",
        ),
        ("kubectl.kubernetes.io/description", "widgets"),
        ("cert-manager.io/inject-ca-from-secret", "ns/ca"),
    ];
    let labels = provider.metadata.labels.get_or_insert_with(Default::default);
    labels.extend(tools.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let annotations = provider.metadata.annotations.get_or_insert_with(Default::default);
    annotations.extend(notes.iter().map(|(k, v)| (k.to_string(), v.to_string())));
    let crd = consumer_crd_from_provider(&provider, "prod").unwrap();
    assert_eq!(
        crd.metadata.labels.unwrap().into_keys().collect::<Vec<_>>(),
        ["app", label::MANAGED]
    );
    assert_eq!(
        crd.metadata.annotations.unwrap().into_keys().collect::<Vec<_>>(),
        [annotation::CONNECTION, annotation::SCHEMA_HASH, "team"]
    );
}
