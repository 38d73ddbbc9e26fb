//! Unit tests of CRD synthesis from OpenAPI v3: round trips through fakeapi's publisher (which
//! lays documents out as kube-apiserver's CRD builder does), names, scope and subresources.

use kbind_api::consts::{annotation, label};
use proptest::prelude::*;
use serde_json::{Value, json};

use super::*;

const API_VERSION_DOC: &str = "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources";
const KIND_DOC: &str = "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds";

/// A controller-gen style root: type meta with its standard docs, metadata an object.
fn rooted(spec: Value) -> Value {
    json!({"type": "object", "description": "A gadget.", "properties": {
        "apiVersion": {"type": "string", "description": API_VERSION_DOC},
        "kind": {"type": "string", "description": KIND_DOC},
        "metadata": {"type": "object"},
        "spec": spec,
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }})
}

fn gadget_crd(schema: &Value, scope: &str, status: bool) -> Value {
    let subresources = if status { json!({"status": {}}) } else { json!({}) };
    json!({
        "metadata": {"name": "gadgets.example.org"},
        "spec": {"group": "example.org", "scope": scope,
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList",
                      "shortNames": ["gd"], "categories": ["all"]},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": subresources,
                          "schema": {"openAPIV3Schema": schema}}]},
    })
}

/// Publishes `schema` as fakeapi would and synthesizes the CRD back.
fn round_trip(schema: &Value, scope: &str, status: bool) -> (DiscoveredResource, CustomResourceDefinition) {
    let served = fakeapi::crd::served_resources(&gadget_crd(schema, scope, status));
    let doc = fakeapi::openapi::group_version_document("example.org", "v1", &served);
    let resource = served[0].0.clone();
    let crd = crd_from_openapi(&resource, &doc, "prod").unwrap();
    (resource, crd)
}

fn schema_of(crd: &CustomResourceDefinition) -> Value {
    serde_json::to_value(&crd.spec.versions[0].schema.as_ref().unwrap().open_api_v3_schema).unwrap()
}

/// `schema` as a CRD stores it: through JSONSchemaProps, where bounds are floats.
fn stored(schema: &Value) -> Value {
    let props: JSONSchemaProps = serde_json::from_value(schema.clone()).unwrap();
    serde_json::to_value(props).unwrap()
}

fn rich_spec() -> Value {
    json!({"type": "object", "required": ["size"], "properties": {
        "size": {"type": "integer", "format": "int32", "default": 1, "minimum": 0, "maximum": 10},
        "port": {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true},
        "mode": {"type": "string", "enum": ["Fast", "Slow"], "default": "Fast"},
        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]},
        "ports": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                  "items": {"type": "object", "required": ["name"], "properties": {
                      "name": {"type": "string"}, "number": {"type": "integer", "nullable": true}}}},
        "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
        "labels": {"type": "object", "additionalProperties": {"type": "string"}, "x-kubernetes-map-type": "granular"},
        "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
    }, "x-kubernetes-validations": [{"rule": "self.size <= 5 || self.mode == 'Slow'", "message": "big is slow"}]})
}

#[test]
fn a_published_crd_schema_round_trips_to_the_same_structural_schema() {
    let original = rooted(rich_spec());
    let (_, crd) = round_trip(&original, "Namespaced", true);
    assert_eq!(schema_of(&crd), stored(&original));
}

#[test]
fn names_scope_subresources_and_markers_come_from_discovery() {
    let (_, crd) = round_trip(&rooted(rich_spec()), "Cluster", false);
    let value = serde_json::to_value(&crd).unwrap();
    assert_eq!(value["metadata"]["name"], "gadgets.example.org");
    assert_eq!(value["spec"]["scope"], "Cluster");
    assert_eq!(
        value["spec"]["names"],
        json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList",
               "shortNames": ["gd"], "categories": ["all"]})
    );
    assert_eq!(value["spec"]["conversion"], json!({"strategy": "None"}));
    assert!(value["spec"]["versions"][0].get("subresources").is_none());
    assert_eq!(value["metadata"]["labels"][label::MANAGED], "true");
    assert_eq!(value["metadata"]["annotations"][annotation::CONNECTION], "prod");
    assert_eq!(
        value["metadata"]["annotations"][annotation::SCHEMA_HASH],
        crate::crdpull::schema_hash(&crd.spec)
    );
    let (_, with_status) = round_trip(&rooted(rich_spec()), "Namespaced", true);
    let value = serde_json::to_value(&with_status).unwrap();
    assert_eq!(value["spec"]["scope"], "Namespaced");
    assert_eq!(value["spec"]["versions"][0]["subresources"], json!({"status": {}}));
}

#[test]
fn a_kind_missing_from_the_document_is_an_error() {
    let served = fakeapi::crd::served_resources(&gadget_crd(&rooted(rich_spec()), "Namespaced", true));
    let doc = fakeapi::openapi::group_version_document("example.org", "v1", &served);
    let mut other = served[0].0.clone();
    other.kind = "Gizmo".into();
    assert_eq!(
        crd_from_openapi(&other, &doc, "prod"),
        Err(SchemaError::KindNotPublished {
            group: "example.org".into(),
            version: "v1".into(),
            kind: "Gizmo".into()
        })
    );
    assert_eq!(
        crd_from_openapi(&other, &json!({"openapi": "3.0.0"}), "prod"),
        Err(SchemaError::NoComponents)
    );
}

/// Small random CRD schemas: scalars with defaults/enums/CEL, objects, lists and maps.
fn arb_schema() -> impl Strategy<Value = Value> {
    let scalar = prop_oneof![
        Just(json!({"type": "string"})),
        (0i64..5).prop_map(|d| json!({"type": "integer", "default": d})),
        Just(json!({"type": "string", "enum": ["a", "b"]})),
        Just(json!({"type": "boolean", "nullable": true})),
        Just(json!({"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": true})),
        Just(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
        Just(json!({"type": "string", "x-kubernetes-validations": [{"rule": "self.size() < 8"}]})),
    ];
    scalar.prop_recursive(3, 16, 4, |inner| {
        prop_oneof![
            prop::collection::btree_map("[a-z]{1,6}", inner.clone(), 1..4)
                .prop_map(|props| json!({"type": "object", "properties": props})),
            inner
                .clone()
                .prop_map(|items| json!({"type": "array", "x-kubernetes-list-type": "atomic", "items": items})),
            inner.prop_map(|values| json!({"type": "object", "additionalProperties": values})),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn random_schemas_round_trip(spec in arb_schema()) {
        let original = rooted(spec);
        let (_, crd) = round_trip(&original, "Namespaced", true);
        prop_assert_eq!(schema_of(&crd), stored(&original));
    }
}

/// A document publishing Gadget with `spec` as given and `components` beside it.
fn hostile_doc(spec: Value, components: Map<String, Value>) -> (DiscoveredResource, Value) {
    let served = fakeapi::crd::served_resources(&gadget_crd(&rooted(json!({"type": "object"})), "Namespaced", true));
    let mut doc = fakeapi::openapi::group_version_document("example.org", "v1", &served);
    let resource = served[0].0.clone();
    let schemas = doc["components"]["schemas"].as_object_mut().unwrap();
    let gadget = schemas
        .values_mut()
        .find(|s| s["x-kubernetes-group-version-kind"].to_string().contains("\"Gadget\""))
        .unwrap();
    gadget["properties"]["spec"] = spec;
    schemas.extend(components);
    (resource, doc)
}

/// Runs `work` on a thread with a tokio worker's 2 MiB stack and fails if it does not finish within a few seconds.
fn quickly<T: Send + 'static>(what: &str, work: impl FnOnce() -> T + Send + 'static) -> T {
    let (done, result) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .stack_size(2 * 1024 * 1024)
        .spawn(move || {
            let _ = done.send(work());
        })
        .unwrap();
    result
        .recv_timeout(std::time::Duration::from_secs(20))
        .unwrap_or_else(|_| panic!("{what} did not finish (or overflowed its stack)"))
}

#[test]
fn a_ten_thousand_long_ref_chain_is_refused_quickly() {
    let mut components = Map::new();
    for i in 0..10_000 {
        components.insert(
            format!("io.example.C{i}"),
            json!({"type": "object", "properties": {"next": {"$ref": format!("#/components/schemas/io.example.C{}", i + 1)}}}),
        );
    }
    components.insert("io.example.C10000".into(), json!({"type": "string"}));
    let (resource, doc) = hostile_doc(json!({"$ref": "#/components/schemas/io.example.C0"}), components);
    let err = quickly("a nested chain", move || {
        crd_from_openapi(&resource, &doc, "prod").unwrap_err()
    });
    assert_eq!(err, SchemaError::TooDeep { limit: 128 });
    assert!(err.is_over_budget());
    assert!(err.to_string().contains("nests deeper than 128 levels"), "{err}");

    // A bare chain (each component only a $ref to the next) is just as deep.
    let mut components = Map::new();
    for i in 0..10_000 {
        components.insert(
            format!("io.example.B{i}"),
            json!({"$ref": format!("#/components/schemas/io.example.B{}", i + 1)}),
        );
    }
    components.insert("io.example.B10000".into(), json!({"type": "string"}));
    let (resource, doc) = hostile_doc(json!({"$ref": "#/components/schemas/io.example.B0"}), components);
    let err = quickly("a bare chain", move || {
        crd_from_openapi(&resource, &doc, "prod").unwrap_err()
    });
    assert_eq!(err, SchemaError::TooDeep { limit: 128 });
}

#[test]
fn a_two_to_the_fortieth_fan_out_is_refused_quickly() {
    let mut components = Map::new();
    for i in 0..40 {
        let next = format!("#/components/schemas/io.example.L{}", i + 1);
        components.insert(
            format!("io.example.L{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
        );
    }
    components.insert("io.example.L40".into(), json!({"type": "string"}));
    let (resource, doc) = hostile_doc(json!({"$ref": "#/components/schemas/io.example.L0"}), components);
    let err = quickly("a fan-out", move || {
        crd_from_openapi(&resource, &doc, "prod").unwrap_err()
    });
    assert_eq!(err, SchemaError::TooLarge { limit: 100_000 });
    assert!(err.is_over_budget());
}

#[test]
fn shared_references_within_budget_are_inlined_everywhere() {
    // 2^10 leaves: shared references expand in full (memoized, not recomputed).
    let mut components = Map::new();
    for i in 0..10 {
        let next = format!("#/components/schemas/io.example.L{}", i + 1);
        components.insert(
            format!("io.example.L{i}"),
            json!({"type": "object", "properties": {"a": {"$ref": next}, "b": {"$ref": next}}}),
        );
    }
    components.insert("io.example.L10".into(), json!({"type": "string", "maxLength": 3}));
    let (resource, doc) = hostile_doc(json!({"$ref": "#/components/schemas/io.example.L0"}), components);
    let crd = crd_from_openapi(&resource, &doc, "prod").unwrap();
    let schema = schema_of(&crd);
    let mut leaf = &schema["properties"]["spec"];
    for _ in 0..10 {
        leaf = &leaf["properties"]["b"];
    }
    assert_eq!(leaf, &json!({"type": "string", "maxLength": 3}));
    assert!(!SchemaError::NoComponents.is_over_budget());
}
