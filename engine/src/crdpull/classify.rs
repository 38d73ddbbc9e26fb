//! Classifying a consumer CRD update: unchanged, compatible, or destructive (a field path gone,
//! a field's type changed, unknown fields no longer kept, the storage version or scope changed).

use std::collections::BTreeMap;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::{
    CustomResourceDefinition, CustomResourceDefinitionVersion,
};
use kbind_api::consts::annotation;
use serde_json::Value;

use super::annotation_of;

/// What applying a desired consumer CRD over the existing one would do to stored objects.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum UpdateKind {
    /// Same schema hash: nothing to write.
    Unchanged,
    /// Only additions or relaxations: every stored object keeps its fields.
    Compatible,
    /// Stored objects would lose data or be read under another version; the message names
    /// each removed or retyped field path and any storage version or scope change.
    Destructive(String),
}

/// The shape of one field that matters for compatibility.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    /// `type`, or `int-or-string`, or empty when untyped (preserve-unknown-fields).
    type_name: String,
    /// `x-kubernetes-preserve-unknown-fields: true` at this node.
    preserves_unknown: bool,
}

/// Compares the existing consumer CRD with the desired one; the schema-hash annotations decide
/// `Unchanged` before any schema is walked.
pub fn classify_update(existing: &CustomResourceDefinition, desired: &CustomResourceDefinition) -> UpdateKind {
    let old_hash = annotation_of(existing, annotation::SCHEMA_HASH);
    if old_hash.is_some() && old_hash == annotation_of(desired, annotation::SCHEMA_HASH) {
        return UpdateKind::Unchanged;
    }
    let mut problems = vec![];
    if existing.spec.scope != desired.spec.scope {
        problems.push(format!(
            "scope changes from {} to {}",
            existing.spec.scope, desired.spec.scope
        ));
    }
    match (storage_version(existing), storage_version(desired)) {
        (Some(old), Some(new)) if old.name != new.name => {
            problems.push(format!("storage version changes from {} to {}", old.name, new.name));
        }
        (Some(old), Some(new)) => problems.extend(field_problems(&fields(old), &fields(new))),
        _ => {}
    }
    if problems.is_empty() {
        UpdateKind::Compatible
    } else {
        UpdateKind::Destructive(problems.join("; "))
    }
}

fn storage_version(crd: &CustomResourceDefinition) -> Option<&CustomResourceDefinitionVersion> {
    crd.spec.versions.iter().find(|v| v.storage)
}

/// Every field path of a version's schema with its shape; `[]` marks list items, `[*]` map values.
fn fields(version: &CustomResourceDefinitionVersion) -> BTreeMap<String, Shape> {
    let schema = version
        .schema
        .as_ref()
        .and_then(|s| s.open_api_v3_schema.as_ref())
        .and_then(|s| serde_json::to_value(s).ok())
        .unwrap_or(Value::Null);
    let mut out = BTreeMap::new();
    collect(&schema, "", &mut out);
    out
}

fn collect(node: &Value, path: &str, out: &mut BTreeMap<String, Shape>) {
    let flag = |key: &str| node.get(key).and_then(Value::as_bool).unwrap_or(false);
    let type_name = if flag("x-kubernetes-int-or-string") {
        "int-or-string".to_string()
    } else {
        node.get("type").and_then(Value::as_str).unwrap_or_default().to_string()
    };
    out.insert(
        path.to_string(),
        Shape {
            type_name,
            preserves_unknown: flag("x-kubernetes-preserve-unknown-fields"),
        },
    );
    if let Some(Value::Object(props)) = node.get("properties") {
        for (name, child) in props {
            let child_path = if path.is_empty() {
                name.clone()
            } else {
                format!("{path}.{name}")
            };
            collect(child, &child_path, out);
        }
    }
    if let Some(items @ Value::Object(_)) = node.get("items") {
        collect(items, &format!("{path}[]"), out);
    }
    if let Some(values @ Value::Object(_)) = node.get("additionalProperties") {
        collect(values, &format!("{path}[*]"), out);
    }
}

fn field_problems(old: &BTreeMap<String, Shape>, new: &BTreeMap<String, Shape>) -> Vec<String> {
    let display = |path: &str| {
        if path.is_empty() {
            "<root>".to_string()
        } else {
            path.to_string()
        }
    };
    let mut problems = vec![];
    for (path, before) in old {
        let Some(after) = new.get(path) else {
            // A removed parent already names its whole subtree.
            let parent_removed = old.keys().any(|p| is_ancestor(p, path) && !new.contains_key(p));
            if !parent_removed {
                problems.push(format!("field {} is removed", display(path)));
            }
            continue;
        };
        if before.type_name != after.type_name {
            problems.push(format!(
                "field {} changes type from {} to {}",
                display(path),
                shown(&before.type_name),
                shown(&after.type_name)
            ));
        }
        if before.preserves_unknown && !after.preserves_unknown {
            problems.push(format!("field {} no longer preserves unknown fields", display(path)));
        }
    }
    problems
}

/// Whether `ancestor` is a field path strictly above `path`.
fn is_ancestor(ancestor: &str, path: &str) -> bool {
    !ancestor.is_empty()
        && path
            .strip_prefix(ancestor)
            .is_some_and(|rest| rest.starts_with('.') || rest.starts_with('['))
}

fn shown(type_name: &str) -> &str {
    if type_name.is_empty() { "untyped" } else { type_name }
}
