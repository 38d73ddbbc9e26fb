//! Pruning: fields the structural schema does not declare are dropped, as apiextensions
//! pruning does.

use serde_json::Value;

use super::{OBJECT_META, Schema, child, flag, is_embedded, items};

/// Removes fields the schema does not know, as apiextensions pruning does: unknown fields go
/// unless a node sets `x-kubernetes-preserve-unknown-fields` (declared fields below it are still
/// pruned); the root and every `x-kubernetes-embedded-resource` keep `apiVersion`, `kind` and
/// `metadata`, and their `metadata` is cut down to ObjectMeta fields.
pub fn prune(obj: &mut Value, schema: &Schema) {
    prune_node(obj, Some(schema.raw()), true);
}

/// Keeps `apiVersion`/`kind`/`metadata` of a resource whatever the schema says, pruning the
/// metadata to ObjectMeta; answers whether `key` was such a field.
fn keep_resource_field(key: &str, value: &mut Value) -> bool {
    match key {
        "apiVersion" | "kind" => value.is_string(),
        "metadata" if value.is_object() => {
            prune_node(value, Some(&OBJECT_META), false);
            true
        }
        _ => false,
    }
}

fn prune_node(x: &mut Value, s: Option<&Value>, resource: bool) {
    let Some(s) = s else {
        return prune_everything(x);
    };
    let resource = resource || is_embedded(s);
    if flag(s, "x-kubernetes-preserve-unknown-fields") {
        return prune_declared(x, s, resource);
    }
    match x {
        Value::Object(map) => map.retain(|key, value| {
            if resource && keep_resource_field(key, value) {
                return true;
            }
            match child(s, key) {
                Some(c) => {
                    prune_node(value, Some(c), false);
                    true
                }
                None => false,
            }
        }),
        Value::Array(list) => {
            let item = items(s);
            list.iter_mut().for_each(|v| prune_node(v, item, false));
        }
        _ => {}
    }
}

/// A value with no schema at all keeps only its scalars.
fn prune_everything(x: &mut Value) {
    match x {
        Value::Object(map) => map.clear(),
        Value::Array(list) => list.iter_mut().for_each(prune_everything),
        _ => {}
    }
}

/// Below `x-kubernetes-preserve-unknown-fields`: unknown fields stay, declared ones are pruned.
fn prune_declared(x: &mut Value, s: &Value, resource: bool) {
    match x {
        Value::Object(map) => {
            for (key, value) in map.iter_mut() {
                if resource && keep_resource_field(key, value) {
                    continue;
                }
                if let Some(c) = child(s, key) {
                    prune_node(value, Some(c), false);
                }
            }
        }
        Value::Array(list) => {
            if let Some(item) = items(s) {
                list.iter_mut().for_each(|v| prune_declared(v, item, is_embedded(item)));
            }
        }
        _ => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // --- pruning ---

    #[test]
    fn pruning_drops_unknown_fields_at_every_level() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "inner": {"type": "object", "properties": {"keep": {"type": "string"}}},
                "list": {"type": "array", "items": {"type": "object", "properties": {"a": {"type": "string"}}}},
                "labels": {"type": "object", "additionalProperties": {"type": "object", "properties": {"v": {"type": "string"}}}},
            }},
        }}));
        let mut obj = json!({
            "apiVersion": "v1", "kind": "W", "top": 1,
            "spec": {
                "inner": {"keep": "x", "drop": "y"},
                "list": [{"a": "1", "b": "2"}],
                "labels": {"k": {"v": "1", "w": "2"}},
                "gone": {"deep": true},
            },
        });
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({
                "apiVersion": "v1", "kind": "W",
                "spec": {"inner": {"keep": "x"}, "list": [{"a": "1"}], "labels": {"k": {"v": "1"}}},
            })
        );
    }

    #[test]
    fn preserve_unknown_fields_keeps_unknowns_but_prunes_below_declared_properties() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "properties": {
                "known": {"type": "object", "properties": {"a": {"type": "string"}}},
            }},
        }}));
        let mut obj = json!({"spec": {"free": {"any": [1, {"x": 2}]}, "known": {"a": "1", "b": "2"}}});
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"spec": {"free": {"any": [1, {"x": 2}]}, "known": {"a": "1"}}})
        );
    }

    #[test]
    fn root_metadata_is_pruned_to_object_meta_fields() {
        let schema = Schema::new(json!({"type": "object", "properties": {}}));
        let mut obj = json!({"metadata": {"name": "w", "labels": {"a": "b"}, "bogus": 1, "ownerReferences": [{"uid": "u", "extra": 1}]}});
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"metadata": {"name": "w", "labels": {"a": "b"}, "ownerReferences": [{"uid": "u"}]}})
        );
    }

    #[test]
    fn embedded_resources_keep_type_meta_and_object_meta_only() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "template": {"type": "object", "x-kubernetes-embedded-resource": true, "properties": {
                    "spec": {"type": "object", "properties": {"replicas": {"type": "integer"}}},
                }},
            }},
        }}));
        let mut obj = json!({"spec": {"template": {
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "d", "junk": true},
            "spec": {"replicas": 1, "junk": true},
            "junk": true,
        }}});
        prune(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"spec": {"template": {
                "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 1},
            }}})
        );
    }

    #[test]
    fn a_list_without_item_schema_keeps_only_scalars() {
        let schema = Schema::new(json!({"type": "object", "properties": {"list": {"type": "array"}}}));
        let mut obj = json!({"list": [1, "a", {"x": 1}]});
        prune(&mut obj, &schema);
        assert_eq!(obj, json!({"list": [1, "a", {}]}));
    }
}
