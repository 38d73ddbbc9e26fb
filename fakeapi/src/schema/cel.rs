//! `x-kubernetes-validations`: CEL rules run through kube-cel, failures worded as the
//! apiserver words them.

use kbind_cluster::error::Cause;
use serde_json::Value;

use super::field_errors::{duplicate, forbidden, invalid, required};
use super::{child, items};

/// Whether any node carries `x-kubernetes-validations` (saves converting objects to CEL values).
pub(super) fn has_cel_rules(s: &Value) -> bool {
    match s {
        Value::Object(map) => {
            map.get("x-kubernetes-validations")
                .and_then(Value::as_array)
                .is_some_and(|r| !r.is_empty())
                || map
                    .iter()
                    .any(|(k, v)| k != "default" && k != "enum" && has_cel_rules(v))
        }
        Value::Array(list) => list.iter().any(has_cel_rules),
        _ => false,
    }
}

/// Runs the CEL rules through `kube-cel` and words each failure as the apiserver does.
///
/// Limit: kube-cel correlates `oldSelf` of list items by index, where the apiserver correlates
/// only `x-kubernetes-list-type: map` items (by key); transition rules on list items can thus
/// run where the apiserver would skip them.
pub(super) fn cel_causes(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
    match kube_cel::validate(schema, obj, old) {
        Ok(()) => vec![],
        Err(errors) => errors.iter().map(|e| cel_cause(schema, e)).collect(),
    }
}

fn cel_cause(schema: &Value, error: &kube_cel::ValidationError) -> Cause {
    let field = error.field_path.as_str();
    let node_type = Value::String(rule_node_type(schema, field, &error.rule));
    let message = error.message.trim();
    let failed = error.kind == kube_cel::ErrorKind::ValidationFailure;
    match error.reason.as_deref() {
        Some("FieldValueForbidden") if failed => forbidden(field, message),
        Some("FieldValueRequired") if failed => required(field, message),
        Some("FieldValueDuplicate") if failed => duplicate(field, &node_type),
        _ => invalid(field, &node_type, message),
    }
}

/// The `type` of the deepest schema node along `path` that carries `rule` (the apiserver
/// reports it as the bad value of a failed rule).
fn rule_node_type(schema: &Value, path: &str, rule: &str) -> String {
    let carries = |s: &Value| {
        s.get("x-kubernetes-validations")
            .and_then(Value::as_array)
            .is_some_and(|rules| {
                rules
                    .iter()
                    .any(|r| r.get("rule").and_then(Value::as_str) == Some(rule))
            })
    };
    let type_of = |s: &Value| s.get("type").and_then(Value::as_str).unwrap_or_default().to_string();
    let mut found = type_of(schema);
    let mut node = Some(schema);
    for segment in path_segments(path) {
        node = node.and_then(|s| match segment {
            Segment::Key(key) => child(s, key),
            Segment::Index => items(s),
        });
        match node {
            Some(s) if carries(s) => found = type_of(s),
            Some(_) => {}
            None => break,
        }
    }
    found
}

/// One step of a field path like `spec.items[0].name`.
enum Segment<'a> {
    Key(&'a str),
    Index,
}

fn path_segments(path: &str) -> Vec<Segment<'_>> {
    let mut segments = vec![];
    for part in path.split('.').filter(|p| !p.is_empty()) {
        let name = part.split('[').next().unwrap_or_default();
        if !name.is_empty() {
            segments.push(Segment::Key(name));
        }
        segments.extend(part.matches('[').map(|_| Segment::Index));
    }
    segments
}
