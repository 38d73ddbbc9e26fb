//! Pulling a provider CRD into the consumer (contract §4 "schema", source `CRD`): the consumer
//! copy, its schema hash, how an update is classified, and the guarded write.
//!
//! Choices recorded here:
//! - The consumer CRD carries only the provider's storage version (served and storage), with
//!   conversion `None`: the consumer never runs the provider's conversion webhook, and one
//!   version is what the provider copy is written in.
//! - Provider labels and annotations are copied except those that never cross
//!   (`ownership::crosses`): kbind's own (`core.kbind.io/*`, which describe the
//!   provider's relationship, not ours), kubectl's (`last-applied-configuration` would mislead
//!   `kubectl apply` on the consumer), other tools' ownership and tracking keys (Helm, Argo CD,
//!   Flux would act on a CRD they never made) and cert-manager's CA injection requests (there is
//!   no webhook to inject into).
//! - The schema hash covers exactly the consumer spec, so only a change of what the consumer
//!   would serve is an update.

mod classify;
mod ensure;

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceConversion, CustomResourceDefinition, CustomResourceDefinitionSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kbind_api::consts::{SCHEMA_HASH_PREFIX, TRUE, annotation, label};
use serde_json::Value;

use crate::ownership::{self, Copied};

pub use classify::{UpdateKind, classify_update};
pub use ensure::{CrdOutcome, crd_resource, ensure_and_keep, ensure_consumer_crd};

/// Conversion strategy of every consumer CRD.
const CONVERSION_NONE: &str = "None";
/// Hex characters of the SHA-256 digest kept in a schema hash.
const HASH_HEX_LEN: usize = 16;

/// Why a provider CRD cannot become a consumer CRD.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SchemaError {
    /// The provider CRD marks no version as its storage version.
    #[error("CustomResourceDefinition {name} has no storage version")]
    NoStorageVersion {
        /// Name of the provider CRD.
        name: String,
    },
}

/// `sha256:<16 hex>` over the canonical JSON (keys sorted at every level) of `spec`.
pub fn schema_hash(spec: &CustomResourceDefinitionSpec) -> String {
    let value = serde_json::to_value(spec).unwrap_or(Value::Null);
    let mut canonical = String::new();
    write_canonical(&value, &mut canonical);
    let digest = ring::digest::digest(&ring::digest::SHA256, canonical.as_bytes());
    let hex: String = digest.as_ref().iter().map(|b| format!("{b:02x}")).collect();
    format!("{SCHEMA_HASH_PREFIX}{}", &hex[..HASH_HEX_LEN])
}

/// Serialises `value` with object keys sorted, whatever map order serde_json was built with.
fn write_canonical(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let sorted: BTreeMap<&String, &Value> = map.iter().collect();
            out.push('{');
            for (i, (key, child)) in sorted.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(key.clone()).to_string());
                out.push(':');
                write_canonical(child, out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, child) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                write_canonical(child, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The consumer copy of a provider CRD, marked as pulled through `connection`.
pub fn consumer_crd_from_provider(
    provider: &CustomResourceDefinition,
    connection: &str,
) -> Result<CustomResourceDefinition, SchemaError> {
    let name = provider.metadata.name.clone().unwrap_or_default();
    let storage = provider
        .spec
        .versions
        .iter()
        .find(|v| v.storage)
        .cloned()
        .ok_or_else(|| SchemaError::NoStorageVersion { name: name.clone() })?;
    let mut version = storage;
    version.served = true;
    let spec = CustomResourceDefinitionSpec {
        group: provider.spec.group.clone(),
        names: provider.spec.names.clone(),
        scope: provider.spec.scope.clone(),
        preserve_unknown_fields: provider.spec.preserve_unknown_fields,
        versions: vec![version],
        conversion: Some(CustomResourceConversion {
            strategy: CONVERSION_NONE.to_string(),
            webhook: None,
        }),
    };
    let metadata = ObjectMeta {
        name: Some(name),
        labels: Some(ownership::crossing(Copied::Crd, provider.metadata.labels.as_ref())),
        annotations: Some(ownership::crossing(Copied::Crd, provider.metadata.annotations.as_ref())),
        ..ObjectMeta::default()
    };
    Ok(mark_managed(
        CustomResourceDefinition {
            metadata,
            spec,
            status: None,
        },
        connection,
    ))
}

/// Stamps the managed label, the connection and the schema hash of its current spec on `crd`.
pub(crate) fn mark_managed(mut crd: CustomResourceDefinition, connection: &str) -> CustomResourceDefinition {
    let hash = schema_hash(&crd.spec);
    crd.metadata
        .labels
        .get_or_insert_with(BTreeMap::new)
        .insert(label::MANAGED.to_string(), TRUE.to_string());
    let annotations = crd.metadata.annotations.get_or_insert_with(BTreeMap::new);
    annotations.insert(annotation::CONNECTION.to_string(), connection.to_string());
    annotations.insert(annotation::SCHEMA_HASH.to_string(), hash);
    crd
}

/// An annotation of `crd`, if set.
pub(crate) fn annotation_of<'a>(crd: &'a CustomResourceDefinition, key: &str) -> Option<&'a str> {
    ownership::annotation_of(&crd.metadata, key)
}

/// Whether kbind created `crd` (it carries `core.kbind.io/managed: "true"`).
pub fn is_managed(crd: &CustomResourceDefinition) -> bool {
    ownership::is_managed(&crd.metadata)
}

#[cfg(test)]
mod tests;
