//! The CustomResourceDefinitions of `core.kbind.io`, as objects and as the committed YAML.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Binding, ClusterBinding, Collection, Connection, Export, Grant};

/// Where the generated YAML is committed, relative to the repository root.
pub const CRDS_YAML_PATH: &str = "deploy/crds/kbind-crds.yaml";

/// The command that regenerates [`CRDS_YAML_PATH`].
pub const REGENERATE_COMMAND: &str = "cargo run -p konnector -- crds > deploy/crds/kbind-crds.yaml";

/// Every `core.kbind.io` CRD, ordered by name.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![Connection::crd(), ClusterBinding::crd(), Binding::crd()];
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// [`crds`] as one multi-document YAML stream, headed by a "generated" comment.
pub fn crds_yaml() -> String {
    to_yaml(&crds(), REGENERATE_COMMAND)
}

/// Where the service layer's generated CRD YAML is committed, relative to the repository root.
pub const BACKEND_CRDS_YAML_PATH: &str = "deploy/crds/kbind-backend-crds.yaml";

/// The command that regenerates [`BACKEND_CRDS_YAML_PATH`].
pub const BACKEND_REGENERATE_COMMAND: &str = "cargo run -p kbind-backend -- crds > deploy/crds/kbind-backend-crds.yaml";

/// The service layer's CRDs (contract §7: Export, Collection, Grant), ordered by name. They go on
/// the provider with `kbind-backend`, never on a consumer.
pub fn backend_crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![Export::crd(), Collection::crd(), Grant::crd()];
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// [`backend_crds`] as one multi-document YAML stream, headed by a "generated" comment.
pub fn backend_crds_yaml() -> String {
    to_yaml(&backend_crds(), BACKEND_REGENERATE_COMMAND)
}

fn to_yaml(crds: &[CustomResourceDefinition], command: &str) -> String {
    let header = format!("# Generated from the kbind-api types; do not edit. Regenerate with:\n#   {command}\n");
    // CRDs are plain maps, strings, numbers and booleans: serialization cannot fail.
    let documents =
        serde_saphyr::to_string_multiple(crds).unwrap_or_else(|err| panic!("CRDs serialize to YAML: {err}"));
    format!("{header}---\n{documents}")
}

/// Shared helpers for the schema tests of this crate.
#[cfg(test)]
pub(crate) mod test_support {
    use kube::core::cel::{ValidationErrors, Validator};
    use serde_json::Value;

    /// The `openAPIV3Schema` of the CRD named `name`, as JSON.
    pub(crate) fn schema_of(name: &str) -> Value {
        let crd = super::crds()
            .into_iter()
            .find(|crd| crd.metadata.name.as_deref() == Some(name))
            .unwrap();
        let schema = crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap();
        serde_json::to_value(schema).unwrap()
    }

    /// Runs the CEL rules of CRD `name` the way the apiserver does on create (`old` = None) or
    /// update, after applying schema defaults.
    pub(crate) fn validate(name: &str, object: &Value, old: Option<&Value>) -> Result<(), ValidationErrors> {
        Validator::new().validate(&schema_of(name), object, old)
    }

    /// Applies the schema defaults of CRD `name` to `object`, as the apiserver does on admission.
    pub(crate) fn apply_defaults(name: &str, object: &Value) -> Value {
        kube::core::cel::apply_defaults(&schema_of(name), object)
    }

    /// The schema node at a `/`-separated path of property names (`items` steps into arrays).
    pub(crate) fn node<'a>(schema: &'a Value, path: &str) -> &'a Value {
        path.split('/').fold(schema, |node, step| match step {
            "items" => &node["items"],
            property => &node["properties"][property],
        })
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use serde_json::{Value, json};

    use super::test_support::{node, schema_of};
    use super::*;

    const CRD_NAMES: [&str; 3] = [
        "bindings.core.kbind.io",
        "clusterbindings.core.kbind.io",
        "connections.core.kbind.io",
    ];

    #[test]
    fn committed_yaml_matches_the_generated_crds() {
        assert_committed(CRDS_YAML_PATH, &crds_yaml(), REGENERATE_COMMAND);
    }

    #[test]
    fn committed_backend_yaml_matches_the_generated_crds() {
        assert_committed(BACKEND_CRDS_YAML_PATH, &backend_crds_yaml(), BACKEND_REGENERATE_COMMAND);
    }

    #[test]
    fn backend_crds_are_cluster_scoped_with_status_where_written() {
        let names: Vec<_> = backend_crds()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "collections.catalog.kbind.io",
                "exports.catalog.kbind.io",
                "grants.iam.kbind.io"
            ]
        );
        for crd in backend_crds() {
            assert_eq!(crd.spec.scope, "Cluster", "{:?}", crd.metadata.name);
            let status = crd.spec.versions[0]
                .subresources
                .as_ref()
                .and_then(|s| s.status.as_ref());
            let is_collection = crd.spec.names.kind == "Collection";
            assert_eq!(status.is_none(), is_collection, "{:?}", crd.metadata.name);
        }
    }

    fn assert_committed(relative: &str, generated: &str, command: &str) {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("..").join(relative);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|err| {
            panic!(
                "cannot read {}: {err}\nGenerate it from the repository root with:\n    {command}",
                path.display()
            )
        });
        if committed != generated {
            let first_diff = committed.lines().zip(generated.lines()).position(|(a, b)| a != b);
            panic!(
                "{relative} is out of date with the kbind-api types (first differing line: {}).\n\
                 Regenerate it from the repository root with:\n    {command}",
                first_diff.map_or("at the end".to_owned(), |line| (line + 1).to_string()),
            );
        }
    }

    #[test]
    fn yaml_parses_back_to_the_same_crds() {
        let parsed: Vec<Value> = serde_saphyr::from_multiple(&crds_yaml()).unwrap();
        let expected: Vec<Value> = crds().iter().map(|crd| serde_json::to_value(crd).unwrap()).collect();
        assert_eq!(parsed, expected);
    }

    #[test]
    #[ignore = "needs kubectl on PATH; `kubectl create --dry-run=client` needs a server, `kubectl kustomize` does not"]
    fn kubectl_parses_the_committed_yaml_to_the_same_crds() {
        let dir = std::env::temp_dir().join(format!("kbind-crds-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("kbind-crds.yaml"), crds_yaml()).unwrap();
        std::fs::write(dir.join("kustomization.yaml"), "resources:\n- kbind-crds.yaml\n").unwrap();
        let output = std::process::Command::new("kubectl")
            .arg("kustomize")
            .arg(&dir)
            .output()
            .unwrap();
        std::fs::remove_dir_all(&dir).unwrap();
        assert!(
            output.status.success(),
            "kubectl kustomize failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let mut parsed: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
        parsed.sort_by_key(|crd| crd["metadata"]["name"].as_str().map(str::to_owned));
        let expected: Vec<Value> = crds().iter().map(|crd| serde_json::to_value(crd).unwrap()).collect();
        assert_eq!(parsed, expected);
    }

    #[test]
    fn crds_are_ordered_by_name() {
        let names: Vec<_> = crds().into_iter().map(|crd| crd.metadata.name.unwrap()).collect();
        assert_eq!(names, CRD_NAMES);
    }

    #[test]
    fn every_crd_has_status_subresource_category_and_short_name() {
        for crd in crds() {
            let name = crd.metadata.name.clone().unwrap();
            assert_eq!(crd.spec.group, crate::consts::GROUP);
            assert_eq!(name, format!("{}.{}", crd.spec.names.plural, crd.spec.group));
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&[crate::consts::CATEGORY.to_owned()][..])
            );
            assert_eq!(
                crd.spec.names.short_names.as_ref().map(Vec::len),
                Some(1),
                "{name} short name"
            );
            let version = &crd.spec.versions[0];
            assert_eq!(version.name, crate::consts::VERSION);
            assert!(version.served && version.storage);
            let status = version.subresources.as_ref().and_then(|s| s.status.as_ref());
            assert!(status.is_some(), "{name} has no status subresource");
        }
    }

    #[test]
    fn printer_columns_show_readiness_connection_and_apis() {
        let columns = |name: &str| -> Vec<(String, String)> {
            let crd = crds()
                .into_iter()
                .find(|crd| crd.metadata.name.as_deref() == Some(name))
                .unwrap();
            let columns = crd.spec.versions[0]
                .additional_printer_columns
                .clone()
                .unwrap_or_default();
            columns
                .into_iter()
                .map(|c| (c.name.to_uppercase(), c.json_path))
                .collect()
        };
        let ready = (
            "READY".to_owned(),
            r#".status.conditions[?(@.type=="Ready")].status"#.to_owned(),
        );
        let reason = (
            "REASON".to_owned(),
            r#".status.conditions[?(@.type=="Ready")].reason"#.to_owned(),
        );
        let age = ("AGE".to_owned(), ".metadata.creationTimestamp".to_owned());
        for name in ["bindings.core.kbind.io", "clusterbindings.core.kbind.io"] {
            let expected = vec![
                ready.clone(),
                reason.clone(),
                ("CONNECTION".to_owned(), ".spec.connectionRef.name".to_owned()),
                ("APIS".to_owned(), ".spec.apis[*].name".to_owned()),
                age.clone(),
            ];
            assert_eq!(columns(name), expected, "{name}");
        }
        let connection = columns("connections.core.kbind.io");
        assert_eq!(connection.first(), Some(&ready));
        assert_eq!(connection.get(1), Some(&reason));
        assert!(connection.contains(&(
            "CONNECTED".to_owned(),
            r#".status.conditions[?(@.type=="Connected")].status"#.to_owned()
        )));
        assert_eq!(connection.last(), Some(&age));
    }

    /// Checks the rules of a structural schema that kube-apiserver enforces on CRD creation,
    /// collecting every violation with its path.
    fn structural_violations(schema: &Value, path: &str, violations: &mut Vec<String>) {
        let Some(node) = schema.as_object() else {
            violations.push(format!("{path}: not an object"));
            return;
        };
        for forbidden in [
            "$ref",
            "anyOf",
            "oneOf",
            "allOf",
            "not",
            "definitions",
            "$defs",
            "$schema",
        ] {
            if node.contains_key(forbidden) {
                violations.push(format!("{path}: has {forbidden}"));
            }
        }
        let ty = node.get("type").and_then(Value::as_str);
        let untyped_ok = node.get("x-kubernetes-int-or-string") == Some(&json!(true))
            || node.get("x-kubernetes-preserve-unknown-fields") == Some(&json!(true));
        if ty.is_none() && !untyped_ok {
            violations.push(format!("{path}: no type"));
        }
        if node.contains_key("nullable") && node.contains_key("default") {
            violations.push(format!("{path}: nullable with default"));
        }
        if node.contains_key("enum") && ty != Some("string") {
            violations.push(format!("{path}: enum on non-string type {ty:?}"));
        }
        if let Some(properties) = node.get("properties").and_then(Value::as_object) {
            if ty != Some("object") {
                violations.push(format!("{path}: properties on type {ty:?}"));
            }
            for (name, property) in properties {
                structural_violations(property, &format!("{path}.{name}"), violations);
            }
        }
        if let Some(items) = node.get("items") {
            structural_violations(items, &format!("{path}[]"), violations);
        }
        if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
            structural_violations(values, &format!("{path}{{}}"), violations);
        }
        if node.get("x-kubernetes-list-type") == Some(&json!("map")) {
            let keys = node
                .get("x-kubernetes-list-map-keys")
                .and_then(Value::as_array)
                .cloned()
                .unwrap_or_default();
            if keys.is_empty() {
                violations.push(format!("{path}: list-type map without keys"));
            }
            let items = &node["items"];
            let required = items["required"].as_array().cloned().unwrap_or_default();
            for key in keys {
                let key_name = key.as_str().unwrap_or_default();
                let defaulted = items["properties"][key_name].get("default").is_some();
                if !required.contains(&key) && !defaulted {
                    violations.push(format!("{path}: map key {key_name} neither required nor defaulted"));
                }
                if items["properties"][key_name].get("nullable").is_some() {
                    violations.push(format!("{path}: map key {key_name} is nullable"));
                }
            }
        }
    }

    #[test]
    fn schemas_are_structural() {
        for name in CRD_NAMES {
            let mut violations = Vec::new();
            structural_violations(&schema_of(name), name, &mut violations);
            assert!(
                violations.is_empty(),
                "non-structural schema:\n{}",
                violations.join("\n")
            );
        }
    }

    #[test]
    fn every_cel_rule_compiles() {
        for name in CRD_NAMES {
            let compiled = kube::core::cel::compile_schema(&schema_of(name));
            assert!(!compiled.has_errors(), "{name}: {:?}", compiled.compilation_errors());
        }
    }

    #[test]
    fn status_lists_are_maps_keyed_by_name_or_type() {
        let map_keys = |schema: &Value, path: &str| node(schema, path)["x-kubernetes-list-map-keys"].clone();
        let connection = schema_of("connections.core.kbind.io");
        assert_eq!(map_keys(&connection, "status/conditions"), json!(["type"]));
        assert_eq!(map_keys(&connection, "status/exportedAPIs"), json!(["name"]));
        for name in ["bindings.core.kbind.io", "clusterbindings.core.kbind.io"] {
            let binding = schema_of(name);
            assert_eq!(map_keys(&binding, "spec/apis"), json!(["name"]));
            assert_eq!(map_keys(&binding, "status/conditions"), json!(["type"]));
            assert_eq!(map_keys(&binding, "status/boundAPIs"), json!(["name"]));
            assert_eq!(map_keys(&binding, "status/boundAPIs/items/conditions"), json!(["type"]));
        }
    }
}
