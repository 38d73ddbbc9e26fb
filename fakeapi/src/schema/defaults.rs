//! Defaulting: the schema's `default`s where fields are absent (or null and not nullable).

use serde_json::{Map, Value};

use super::{Schema, declared_child, default_of, is_embedded, items, nullable, properties};

/// Applies `default`s where a field is absent, or null without `nullable: true`; drops other
/// non-nullable nulls; recurses through properties, `additionalProperties` and `items`, including
/// into the defaults it just set. Defaults under the root (or an embedded) `metadata` are not applied.
pub fn apply_defaults(obj: &mut Value, schema: &Schema) {
    default_node(obj, schema.raw(), true);
}

fn default_node(x: &mut Value, s: &Value, resource: bool) {
    let resource = resource || is_embedded(s);
    match x {
        Value::Object(map) => default_object(map, s, resource),
        Value::Array(list) => {
            if let Some(item) = items(s) {
                for value in list.iter_mut() {
                    default_if_null(value, item);
                    default_node(value, item, false);
                }
            }
        }
        _ => {}
    }
}

fn default_object(map: &mut Map<String, Value>, s: &Value, resource: bool) {
    if let Some(props) = properties(s) {
        for (key, prop) in props {
            if resource && key == "metadata" {
                continue;
            }
            let Some(default) = default_of(prop) else { continue };
            let missing = match map.get(key) {
                None => true,
                Some(Value::Null) => !nullable(prop),
                Some(_) => false,
            };
            if missing {
                map.insert(key.clone(), default.clone());
            }
        }
    }
    // apiextensions drops nulls of non-nullable fields that have no default to fall back on.
    map.retain(|key, value| {
        !(value.is_null() && declared_child(s, key).is_some_and(|c| !nullable(c) && default_of(c).is_none()))
    });
    for (key, value) in map.iter_mut() {
        if resource && key == "metadata" {
            continue;
        }
        if let Some(c) = declared_child(s, key) {
            default_if_null(value, c);
            default_node(value, c, false);
        }
    }
}

fn default_if_null(value: &mut Value, s: &Value) {
    if value.is_null()
        && !nullable(s)
        && let Some(default) = default_of(s)
    {
        *value = default.clone();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // --- defaulting ---

    #[test]
    fn defaults_apply_nested_and_inside_defaults_they_set() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "default": {}, "properties": {
                "replicas": {"type": "integer", "default": 1},
                "strategy": {"type": "object", "default": {"type": "Rolling"}, "properties": {
                    "type": {"type": "string"},
                    "maxSurge": {"type": "integer", "default": 25},
                }},
                "containers": {"type": "array", "items": {"type": "object", "properties": {
                    "pull": {"type": "string", "default": "IfNotPresent"},
                }}},
                "limits": {"type": "object", "additionalProperties": {"type": "object", "properties": {
                    "unit": {"type": "string", "default": "m"},
                }}},
            }},
        }}));
        let mut obj = json!({"spec": {"replicas": 3, "containers": [{}, {"pull": "Always"}], "limits": {"cpu": {}}}});
        apply_defaults(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"spec": {
                "replicas": 3,
                "strategy": {"type": "Rolling", "maxSurge": 25},
                "containers": [{"pull": "IfNotPresent"}, {"pull": "Always"}],
                "limits": {"cpu": {"unit": "m"}},
            }})
        );
        let mut empty = json!({});
        apply_defaults(&mut empty, &schema);
        assert_eq!(empty["spec"]["replicas"], 1);
        assert_eq!(empty["spec"]["strategy"]["maxSurge"], 25);
    }

    #[test]
    fn nulls_are_defaulted_dropped_or_kept_by_nullable() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "defaulted": {"type": "string", "default": "d"},
            "plain": {"type": "string"},
            "nullable": {"type": "string", "nullable": true, "default": "d"},
            "items": {"type": "array", "items": {"type": "string", "default": "i"}},
        }}));
        let mut obj =
            json!({"defaulted": null, "plain": null, "nullable": null, "items": [null, "x"], "unknown": null});
        apply_defaults(&mut obj, &schema);
        assert_eq!(
            obj,
            json!({"defaulted": "d", "nullable": null, "items": ["i", "x"], "unknown": null})
        );
    }

    #[test]
    fn root_metadata_defaults_are_not_applied() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "metadata": {"type": "object", "properties": {"name": {"type": "string", "default": "x"}}},
        }}));
        let mut obj = json!({"metadata": {}});
        apply_defaults(&mut obj, &schema);
        assert_eq!(obj, json!({"metadata": {}}));
    }
}
