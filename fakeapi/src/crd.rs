//! CustomResourceDefinition handling (placeholder until the schema branch lands).

use kbind_cluster::{DiscoveredResource, error::Cause};
use serde_json::{Value, json};

use crate::schema::Schema;

/// Validates a CRD object.
pub fn validate_crd(_crd: &Value) -> Vec<Cause> {
    vec![]
}

/// The served versions of a CRD with their schemas.
pub fn served_resources(crd: &Value) -> Vec<(DiscoveredResource, Schema)> {
    let spec = &crd["spec"];
    let group = spec["group"].as_str().unwrap_or_default().to_string();
    let kind = spec["names"]["kind"].as_str().unwrap_or_default().to_string();
    let plural = spec["names"]["plural"].as_str().unwrap_or_default().to_string();
    let namespaced = spec["scope"].as_str() == Some("Namespaced");
    spec["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|v| v["served"].as_bool() == Some(true))
        .map(|v| {
            let mut subresources = vec![];
            if v.pointer("/subresources/status").is_some() {
                subresources.push("status".to_string());
            }
            let res = DiscoveredResource {
                group: group.clone(),
                version: v["name"].as_str().unwrap_or_default().to_string(),
                kind: kind.clone(),
                plural: plural.clone(),
                singular: kind.to_lowercase(),
                namespaced,
                verbs: [
                    "delete",
                    "deletecollection",
                    "get",
                    "list",
                    "patch",
                    "create",
                    "update",
                    "watch",
                ]
                .map(String::from)
                .to_vec(),
                subresources,
                short_names: vec![],
                categories: vec![],
            };
            let schema = v
                .pointer("/schema/openAPIV3Schema")
                .cloned()
                .unwrap_or_else(|| json!({}));
            (res, Schema::new(schema))
        })
        .collect()
}

/// The storage version's name.
pub fn storage_version(crd: &Value) -> Option<String> {
    crd["spec"]["versions"]
        .as_array()?
        .iter()
        .find(|v| v["storage"].as_bool() == Some(true))?["name"]
        .as_str()
        .map(str::to_string)
}

/// additionalPrinterColumns of one version.
pub fn printer_columns(crd: &Value, version: &str) -> Vec<Value> {
    crd["spec"]["versions"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|v| v["name"].as_str() == Some(version))
        .and_then(|v| v["additionalPrinterColumns"].as_array().cloned())
        .unwrap_or_default()
}

/// The status an Established CRD carries.
pub fn established_status(crd: &Value, now: &str) -> Value {
    let cond = |t: &str, reason: &str| json!({"type": t, "status": "True", "reason": reason, "message": "", "lastTransitionTime": now});
    json!({
        "conditions": [cond("NamesAccepted", "NoConflicts"), cond("Established", "InitialNamesAccepted")],
        "acceptedNames": crd["spec"]["names"].clone(),
        "storedVersions": storage_version(crd).into_iter().collect::<Vec<_>>(),
    })
}
