//! Structural schemas (OpenAPI v3 `JSONSchemaProps` as JSON): pruning, defaulting, validation,
//! and the list/map topology server-side apply and strategic merge need.

use std::sync::Arc;

use kbind_cluster::error::Cause;
use serde_json::Value;

/// How a list merges (`x-kubernetes-list-type` / `x-kubernetes-list-map-keys`, or for
/// built-ins `x-kubernetes-patch-merge-key`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ListType {
    /// Replaced as a whole.
    Atomic,
    /// A set of scalars, merged by value.
    Set,
    /// A list of objects merged by these key fields.
    Map(Vec<String>),
}

/// A view on one node of a structural schema; cheap to clone.
#[derive(Debug, Clone)]
pub struct Schema {
    node: Arc<Value>,
}

impl Schema {
    /// Wraps a `JSONSchemaProps` value.
    pub fn new(node: Value) -> Self {
        Self { node: Arc::new(node) }
    }

    /// A schema that accepts and keeps anything (`x-kubernetes-preserve-unknown-fields`).
    pub fn any() -> Self {
        Self::new(serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}))
    }

    /// The raw node.
    pub fn raw(&self) -> &Value {
        &self.node
    }

    /// The schema of property `name` (from `properties`, else `additionalProperties`).
    pub fn property(&self, _name: &str) -> Option<Schema> {
        None
    }

    /// The schema of list items.
    pub fn items(&self) -> Option<Schema> {
        None
    }

    /// How a list at this node merges.
    pub fn list_type(&self) -> ListType {
        ListType::Atomic
    }

    /// Whether a map/object at this node is atomic (`x-kubernetes-map-type: atomic`).
    pub fn is_atomic_map(&self) -> bool {
        false
    }

    /// Whether unknown fields are kept here.
    pub fn preserves_unknown(&self) -> bool {
        true
    }
}

/// Removes fields the schema does not know (never `apiVersion`, `kind`, `metadata` at the root).
pub fn prune(_obj: &mut Value, _schema: &Schema) {}

/// Applies `default`s from the schema.
pub fn apply_defaults(_obj: &mut Value, _schema: &Schema) {}

/// Validates an object; each failure is one cause with its field path.
pub fn validate(_obj: &Value, _old: Option<&Value>, _schema: &Schema) -> Vec<Cause> {
    vec![]
}
