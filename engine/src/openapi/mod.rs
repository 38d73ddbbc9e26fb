//! Synthesizing a consumer CRD from discovery and a provider's OpenAPI v3 document (contract §4
//! "schema", source `OpenAPI`), for providers that serve APIs without CRDs (kcp-like).
//!
//! kube-apiserver publishes a CRD version's schema as written, plus `apiVersion`, `kind`,
//! `metadata` (a `$ref` to ObjectMeta, wrapped in `allOf`), `x-kubernetes-group-version-kind`,
//! the `anyOf: [integer, string]` it unfolds beside `x-kubernetes-int-or-string`, and type meta
//! on embedded resources. [`crd_from_openapi`] inverts that so a CRD round-trips through its
//! published document to the same structural schema.
//!
//! Choices recorded here:
//! - The unfolded int-or-string `anyOf` is kept: it is the form controller-gen writes, the
//!   apiserver accepts it beside the flag, and it validates exactly like the bare flag.
//! - Root `apiVersion`/`kind` keep the published `{type: string, description}`; `metadata`
//!   becomes `{type: object}`. Embedded resources lose the injected type meta (the apiserver
//!   validates and never prunes it there anyway).
//! - A `$ref` cycle (recursive built-in types) becomes an object preserving unknown fields;
//!   CRD schemas cannot be recursive.
//! - Inlining is bounded (depth, counting `$ref`s followed, and node count; shared references
//!   are memoized): an over-budget schema is refused as [`SchemaError::TooDeep`] or
//!   [`SchemaError::TooLarge`], never expanded until the konnector runs out of stack or memory.
//! - The scale subresource and printer columns are not in discovery or OpenAPI and are left out.

mod structural;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionNames, CustomResourceDefinitionSpec,
    CustomResourceDefinitionVersion, CustomResourceSubresourceStatus, CustomResourceSubresources,
    CustomResourceValidation, JSONSchemaProps,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kbind_cluster::DiscoveredResource;
use serde_json::{Map, Value};

use crate::crdpull::mark_managed;

pub use structural::structural_schema;

/// Why an OpenAPI document cannot give a CRD.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The document has no `components.schemas`.
    #[error("the OpenAPI document has no components.schemas")]
    NoComponents,
    /// No component schema carries the resource's group-version-kind.
    #[error("no schema for {group}/{version}, Kind={kind} in the OpenAPI document")]
    KindNotPublished {
        /// API group.
        group: String,
        /// Version.
        version: String,
        /// Kind.
        kind: String,
    },
    /// A `$ref` names a schema the document does not have.
    #[error("unresolved $ref {0}")]
    UnresolvedRef(String),
    /// Inlining the schema's `$ref`s nests deeper than `limit` levels.
    #[error(
        "the published schema nests deeper than {limit} levels once its $refs are inlined; kbind does not synthesize a CRD from it"
    )]
    TooDeep {
        /// The depth limit.
        limit: usize,
    },
    /// Inlining the schema's `$ref`s gives more than `limit` schema nodes.
    #[error(
        "the published schema grows beyond {limit} schema nodes once its $refs are inlined; kbind does not synthesize a CRD from it"
    )]
    TooLarge {
        /// The node limit.
        limit: usize,
    },
    /// The synthesized schema is not a valid JSONSchemaProps.
    #[error("synthesized schema does not decode: {0}")]
    Decode(String),
}

impl SchemaError {
    /// Whether the schema was refused for its size or depth (a lasting verdict on what the
    /// provider publishes, unlike a document that is not there yet).
    pub fn is_over_budget(&self) -> bool {
        matches!(self, SchemaError::TooDeep { .. } | SchemaError::TooLarge { .. })
    }
}

/// The consumer CRD for a discovered resource, its schema taken from the OpenAPI v3 document of
/// its group-version, marked as pulled through `connection`.
pub fn crd_from_openapi(
    resource: &DiscoveredResource,
    doc: &Value,
    connection: &str,
) -> Result<CustomResourceDefinition, SchemaError> {
    let schemas = doc
        .pointer("/components/schemas")
        .and_then(Value::as_object)
        .ok_or(SchemaError::NoComponents)?;
    let published = published_schema(schemas, resource).ok_or_else(|| SchemaError::KindNotPublished {
        group: resource.group.clone(),
        version: resource.version.clone(),
        kind: resource.kind.clone(),
    })?;
    let schema = structural_schema(published, schemas)?;
    let props: JSONSchemaProps = serde_json::from_value(schema).map_err(|e| SchemaError::Decode(e.to_string()))?;
    let version = CustomResourceDefinitionVersion {
        name: resource.version.clone(),
        served: true,
        storage: true,
        schema: Some(CustomResourceValidation {
            open_api_v3_schema: Some(props),
        }),
        subresources: resource.has_status().then(|| CustomResourceSubresources {
            status: Some(CustomResourceSubresourceStatus(Value::Object(Map::new()))),
            scale: None,
        }),
        ..CustomResourceDefinitionVersion::default()
    };
    let spec = CustomResourceDefinitionSpec {
        group: resource.group.clone(),
        names: names(resource),
        scope: if resource.namespaced { "Namespaced" } else { "Cluster" }.to_string(),
        versions: vec![version],
        conversion: Some(CustomResourceConversion {
            strategy: "None".to_string(),
            webhook: None,
        }),
        preserve_unknown_fields: None,
    };
    let crd = CustomResourceDefinition {
        metadata: ObjectMeta {
            name: Some(format!("{}.{}", resource.plural, resource.group)),
            labels: Some(BTreeMap::new()),
            annotations: Some(BTreeMap::new()),
            ..ObjectMeta::default()
        },
        spec,
        status: None,
    };
    Ok(mark_managed(crd, connection))
}

/// The component schema whose `x-kubernetes-group-version-kind` names the resource.
fn published_schema<'a>(schemas: &'a Map<String, Value>, resource: &DiscoveredResource) -> Option<&'a Value> {
    schemas.values().find(|schema| {
        let gvks = schema.get("x-kubernetes-group-version-kind");
        let gvks = match gvks {
            Some(Value::Array(list)) => list.iter().collect::<Vec<_>>(),
            Some(one @ Value::Object(_)) => vec![one],
            _ => vec![],
        };
        gvks.iter().any(|gvk| {
            let field = |key: &str| gvk.get(key).and_then(Value::as_str).unwrap_or_default();
            field("group") == resource.group && field("version") == resource.version && field("kind") == resource.kind
        })
    })
}

fn names(resource: &DiscoveredResource) -> CustomResourceDefinitionNames {
    let non_empty = |list: &Vec<String>| (!list.is_empty()).then(|| list.clone());
    CustomResourceDefinitionNames {
        plural: resource.plural.clone(),
        singular: Some(if resource.singular.is_empty() {
            resource.kind.to_lowercase()
        } else {
            resource.singular.clone()
        }),
        kind: resource.kind.clone(),
        list_kind: Some(format!("{}List", resource.kind)),
        short_names: non_empty(&resource.short_names),
        categories: non_empty(&resource.categories),
    }
}

#[cfg(test)]
mod tests;
