//! OpenAPI v3 documents (placeholder until the schema branch lands).

use kbind_cluster::DiscoveredResource;
use serde_json::{Value, json};

use crate::schema::Schema;

/// The OpenAPI v3 document of one group-version.
pub fn group_version_document(_group: &str, _version: &str, resources: &[(DiscoveredResource, Schema)]) -> Value {
    let schemas: serde_json::Map<String, Value> = resources
        .iter()
        .map(|(r, s)| (format!("{}.{}.{}", r.group, r.version, r.kind), s.raw().clone()))
        .collect();
    json!({"openapi": "3.0.0", "components": {"schemas": schemas}})
}
