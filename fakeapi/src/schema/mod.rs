//! Structural schemas (OpenAPI v3 `JSONSchemaProps` as JSON): pruning, defaulting, validation,
//! and the list/map topology server-side apply and strategic merge need.

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

mod cel;
mod defaults;
mod field_errors;
mod prune;
mod validate;

pub use defaults::apply_defaults;
pub(crate) use field_errors::{forbidden, invalid, not_supported, required};
pub use prune::prune;
pub use validate::validate;

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

    /// The schema of property `name` (from `properties`, else `additionalProperties`; a node
    /// that preserves unknown fields answers [`Schema::any`] for names it does not list).
    pub fn property(&self, name: &str) -> Option<Schema> {
        if let Some(p) = self.node.get("properties").and_then(|p| p.get(name)) {
            return Some(Schema::new(p.clone()));
        }
        match self.node.get("additionalProperties") {
            Some(Value::Object(ap)) => return Some(Schema::new(Value::Object(ap.clone()))),
            Some(Value::Bool(true)) => return Some(Schema::any()),
            _ => {}
        }
        if self.preserves_unknown() {
            Some(Schema::any())
        } else {
            None
        }
    }

    /// The schema of list items.
    pub fn items(&self) -> Option<Schema> {
        match self.node.get("items") {
            Some(items @ Value::Object(_)) => Some(Schema::new(items.clone())),
            _ if self.preserves_unknown() => Some(Schema::any()),
            _ => None,
        }
    }

    /// How a list at this node merges.
    pub fn list_type(&self) -> ListType {
        let keys = |field: &str| -> Option<Vec<String>> {
            match self.node.get(field)? {
                Value::Array(a) => Some(a.iter().filter_map(|k| k.as_str().map(str::to_string)).collect()),
                Value::String(s) => Some(vec![s.clone()]),
                _ => None,
            }
        };
        match self.node.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("map") => ListType::Map(keys("x-kubernetes-list-map-keys").unwrap_or_default()),
            Some("set") => ListType::Set,
            Some(_) => ListType::Atomic,
            None => match keys("x-kubernetes-patch-merge-key") {
                Some(k) if !k.is_empty() => ListType::Map(k),
                _ => ListType::Atomic,
            },
        }
    }

    /// The strategic-merge key of a list of objects (`x-kubernetes-patch-merge-key`, else the
    /// first list-map key).
    pub fn patch_merge_key(&self) -> Option<String> {
        if let Some(k) = self.node.get("x-kubernetes-patch-merge-key").and_then(Value::as_str) {
            return Some(k.to_string());
        }
        match self.list_type() {
            ListType::Map(keys) => keys.into_iter().next(),
            _ => None,
        }
    }

    /// The strategic-merge strategy (`x-kubernetes-patch-strategy`, e.g. `merge`, `retainKeys`).
    pub fn patch_strategy(&self) -> Option<&str> {
        self.node.get("x-kubernetes-patch-strategy").and_then(Value::as_str)
    }

    /// Whether a map/object at this node is atomic (`x-kubernetes-map-type: atomic`).
    pub fn is_atomic_map(&self) -> bool {
        self.node.get("x-kubernetes-map-type").and_then(Value::as_str) == Some("atomic")
    }

    /// Whether unknown fields are kept here.
    pub fn preserves_unknown(&self) -> bool {
        self.node
            .get("x-kubernetes-preserve-unknown-fields")
            .and_then(Value::as_bool)
            == Some(true)
    }

    /// Whether this node is `x-kubernetes-int-or-string`.
    pub fn is_int_or_string(&self) -> bool {
        self.node.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true)
    }

    /// The declared `type`, if any.
    pub fn type_name(&self) -> Option<&str> {
        self.node.get("type").and_then(Value::as_str)
    }
}

// The walkers (prune, defaults, validate) read the `JSONSchemaProps` JSON directly (no `Arc` per field) and follow
// apiextensions-apiserver: `pruning`, `defaulting`, kube-openapi's schema validator with
// `kubeOpenAPIResultToFieldErrors`, `structurallisttype` and the CEL validator.

/// Matches anything and keeps it (`additionalProperties: true`).
static ANY: LazyLock<Value> = LazyLock::new(|| serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}));

/// The ObjectMeta schema metadata of a resource is pruned to (the apiserver's ObjectMeta coercion).
pub(super) static OBJECT_META: LazyLock<Value> = LazyLock::new(crate::builtins::object_meta_schema);

pub(super) fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

pub(super) fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

pub(super) fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

/// The declared `additionalProperties` schema (an object, not `true`).
pub(super) fn additional_schema(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

/// The schema of key `key`: a property, else `additionalProperties` (`true` reads as anything).
pub(super) fn child<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    if let Some(p) = properties(s).and_then(|p| p.get(key)) {
        return Some(p);
    }
    match s.get("additionalProperties") {
        Some(ap @ Value::Object(_)) => Some(ap),
        Some(Value::Bool(true)) => Some(&ANY),
        _ => None,
    }
}

/// The schema of key `key` when it is declared (a property or an `additionalProperties` schema).
pub(super) fn declared_child<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    properties(s).and_then(|p| p.get(key)).or_else(|| additional_schema(s))
}

pub(super) fn is_embedded(s: &Value) -> bool {
    flag(s, "x-kubernetes-embedded-resource")
}

pub(super) fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

pub(super) fn default_of(s: &Value) -> Option<&Value> {
    s.get("default").filter(|d| !d.is_null())
}
