//! Validation of an object against its structural schema, then its CEL rules.

use kbind_cluster::error::Cause;
use std::sync::LazyLock;

use serde_json::{Map, Value};

use super::cel::{cel_causes, has_cel_rules};
use super::field_errors::{
    duplicate, go_float, go_quote, invalid, not_supported, required, too_long, too_many, type_invalid,
};
use super::{Schema, additional_schema, child, default_of, flag, items, nullable, properties};

/// Validates an object as kube-apiserver validates a custom resource: the OpenAPI schema
/// (types, `nullable`, `required`, `enum`, bounds, lengths, item counts, `pattern`, `format`),
/// then `x-kubernetes-list-type` set/map uniqueness, then — unless an earlier failure blocks
/// them — the `x-kubernetes-validations` CEL rules (transition rules only when `old` is given).
pub fn validate(obj: &Value, old: Option<&Value>, schema: &Schema) -> Vec<Cause> {
    let mut walk = Walk::default();
    walk.node(obj, schema.raw(), "");
    let mut causes = walk.schema;
    causes.extend(walk.lists);
    // The apiserver builds a CEL validator only for schemas with rules.
    if !has_cel_rules(schema.raw()) {
        return causes;
    }
    if causes.iter().any(blocks_cel) {
        causes.push(invalid(
            "",
            &Value::Null,
            "some validation rules were not checked because the object was invalid; correct the existing errors to complete validation",
        ));
    } else {
        causes.extend(cel_causes(obj, old, schema.raw()));
    }
    causes
}

/// Schema failures after which the apiserver does not run CEL rules.
fn blocks_cel(cause: &Cause) -> bool {
    matches!(
        cause.reason.as_str(),
        "FieldValueNotSupported"
            | "FieldValueRequired"
            | "FieldValueTooLong"
            | "FieldValueTooMany"
            | "FieldValueTypeInvalid"
    )
}

/// Collects schema causes and list-type causes separately: the apiserver reports the latter after.
#[derive(Default)]
struct Walk {
    schema: Vec<Cause>,
    lists: Vec<Cause>,
}

/// The JSON type kube-openapi names for a value.
fn json_type(x: &Value) -> &'static str {
    match x {
        Value::Null => "null",
        Value::Bool(_) => "boolean",
        Value::Number(n) if n.is_f64() => "number",
        Value::Number(_) => "integer",
        Value::String(_) => "string",
        Value::Array(_) => "array",
        Value::Object(_) => "object",
    }
}

/// The types a node admits (`x-kubernetes-int-or-string` reads as integer or string).
fn declared_types(s: &Value) -> Vec<&str> {
    if flag(s, "x-kubernetes-int-or-string") {
        return vec!["integer", "string"];
    }
    s.get("type").and_then(Value::as_str).into_iter().collect()
}

fn type_accepts(types: &[&str], x: &Value) -> bool {
    types.iter().any(|t| match (*t, x) {
        ("object", Value::Object(_)) | ("array", Value::Array(_)) | ("string", Value::String(_)) => true,
        ("boolean", Value::Bool(_)) | ("number", Value::Number(_)) => true,
        // An integral float is an integer to kube-openapi (JSON has one number type).
        ("integer", Value::Number(n)) => !n.is_f64() || n.as_f64().is_some_and(|f| f.fract() == 0.0),
        _ => false,
    })
}

fn join(path: &str, key: &str) -> String {
    if path.is_empty() {
        key.to_string()
    } else {
        format!("{path}.{key}")
    }
}

impl Walk {
    fn node(&mut self, x: &Value, s: &Value, path: &str) {
        let types = declared_types(s);
        if x.is_null() {
            if !types.is_empty() && !nullable(s) {
                self.type_error(path, &types, "null");
            }
            return;
        }
        if !types.is_empty() && !type_accepts(&types, x) {
            self.type_error(path, &types, json_type(x));
            return;
        }
        match x {
            Value::String(text) => self.string(text, s, path),
            Value::Number(_) => self.number(x, s, path),
            Value::Array(list) => self.array(list, s, path),
            _ => {}
        }
        self.enumeration(x, s, path);
        if let Value::Object(map) = x {
            self.object(map, s, path);
        }
    }

    fn type_error(&mut self, path: &str, types: &[&str], actual: &str) {
        let detail = format!("{path} in body must be of type {}: \"{actual}\"", types.join(","));
        self.schema
            .push(type_invalid(path, &Value::String(actual.into()), &detail));
    }

    fn string(&mut self, text: &str, s: &Value, path: &str) {
        let value = Value::String(text.to_string());
        let chars = text.chars().count() as u64;
        if let Some(max) = s.get("maxLength").and_then(Value::as_u64)
            && chars > max
        {
            self.schema.push(too_long(path, max));
        }
        if let Some(min) = s.get("minLength").and_then(Value::as_u64)
            && chars < min
        {
            let detail = format!("{path} in body should be at least {min} chars long");
            self.schema.push(invalid(path, &value, &detail));
        }
        if let Some(pattern) = s.get("pattern").and_then(Value::as_str)
            && let Ok(re) = regex::Regex::new(pattern)
            && !re.is_match(text)
        {
            let detail = format!("{path} in body should match '{pattern}'");
            self.schema.push(invalid(path, &value, &detail));
        }
        if let Some(format) = s.get("format").and_then(Value::as_str)
            && !format_accepts(format, text)
        {
            let detail = format!("{path} in body must be of type {format}: {}", go_quote(text));
            self.schema.push(type_invalid(path, &value, &detail));
        }
    }

    fn number(&mut self, x: &Value, s: &Value, path: &str) {
        let Some(data) = x.as_f64() else { return };
        let integral = !x.as_number().is_some_and(serde_json::Number::is_f64);
        let bound = |b: f64| {
            if integral {
                format!("{}", b.trunc() as i64)
            } else {
                go_float(b)
            }
        };
        if let Some(factor) = s.get("multipleOf").and_then(Value::as_f64)
            && factor > 0.0
            && (data / factor).fract() != 0.0
        {
            let detail = format!("{path} in body should be a multiple of {}", bound(factor));
            self.schema.push(invalid(path, x, &detail));
        }
        if let Some(max) = s.get("maximum").and_then(Value::as_f64) {
            let exclusive = flag(s, "exclusiveMaximum");
            if data > max || (exclusive && data == max) {
                let relation = if exclusive {
                    "less than"
                } else {
                    "less than or equal to"
                };
                let detail = format!("{path} in body should be {relation} {}", bound(max));
                self.schema.push(invalid(path, x, &detail));
            }
        }
        if let Some(min) = s.get("minimum").and_then(Value::as_f64) {
            let exclusive = flag(s, "exclusiveMinimum");
            if data < min || (exclusive && data == min) {
                let relation = if exclusive {
                    "greater than"
                } else {
                    "greater than or equal to"
                };
                let detail = format!("{path} in body should be {relation} {}", bound(min));
                self.schema.push(invalid(path, x, &detail));
            }
        }
    }

    fn array(&mut self, list: &[Value], s: &Value, path: &str) {
        if let Some(item) = items(s) {
            for (i, value) in list.iter().enumerate() {
                self.node(value, item, &format!("{path}[{i}]"));
            }
        }
        let len = list.len() as u64;
        if let Some(min) = s.get("minItems").and_then(Value::as_u64)
            && len < min
        {
            let detail = format!("{path} in body should have at least {min} items");
            self.schema.push(invalid(path, &Value::from(len), &detail));
        }
        if let Some(max) = s.get("maxItems").and_then(Value::as_u64)
            && len > max
        {
            self.schema.push(too_many(path, len, max));
        }
        match s.get("x-kubernetes-list-type").and_then(Value::as_str) {
            Some("set") => self.set_duplicates(list, path),
            Some("map") => self.map_duplicates(list, s, path),
            _ => {}
        }
    }

    fn set_duplicates(&mut self, list: &[Value], path: &str) {
        for (i, value) in list.iter().enumerate() {
            if list[..i].contains(value) {
                self.lists.push(duplicate(&format!("{path}[{i}]"), value));
            }
        }
    }

    fn map_duplicates(&mut self, list: &[Value], s: &Value, path: &str) {
        let keys: Vec<&str> = match s.get("x-kubernetes-list-map-keys") {
            Some(Value::Array(keys)) => keys.iter().filter_map(Value::as_str).collect(),
            _ => return,
        };
        let item = items(s);
        let key_of = |entry: &Value| -> Value {
            let mut key = Map::new();
            for k in &keys {
                let default = item.and_then(|i| child(i, k)).and_then(default_of);
                if let Some(v) = entry.get(*k).filter(|v| !v.is_null()).or(default) {
                    key.insert((*k).to_string(), v.clone());
                }
            }
            Value::Object(key)
        };
        let seen: Vec<Value> = list.iter().map(key_of).collect();
        for (i, key) in seen.iter().enumerate() {
            if list[i].is_object() && seen[..i].contains(key) {
                self.lists.push(duplicate(&format!("{path}[{i}]"), key));
            }
        }
    }

    fn enumeration(&mut self, x: &Value, s: &Value, path: &str) {
        let Some(allowed) = s.get("enum").and_then(Value::as_array) else {
            return;
        };
        if allowed.is_empty() || allowed.contains(x) {
            return;
        }
        let supported: Vec<String> = allowed
            .iter()
            .map(|v| match v {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            })
            .collect();
        self.schema.push(not_supported(path, x, &supported));
    }

    fn object(&mut self, map: &Map<String, Value>, s: &Value, path: &str) {
        let count = map.len() as u64;
        if let Some(max) = s.get("maxProperties").and_then(Value::as_u64)
            && count > max
        {
            // kube-openapi reports the limit where the count would be.
            self.schema.push(too_many(path, max, max));
        }
        if let Some(min) = s.get("minProperties").and_then(Value::as_u64)
            && count < min
        {
            let detail = format!("{path} in body should have at least {min} properties");
            self.schema.push(invalid(path, &Value::from(min), &detail));
        }
        if let Some(required) = s.get("required").and_then(Value::as_array) {
            for name in required.iter().filter_map(Value::as_str) {
                if !map.contains_key(name) {
                    self.schema.push(self::required(&join(path, name), ""));
                }
            }
        }
        let props = properties(s);
        if let Some(props) = props {
            for (name, prop) in props {
                if let Some(value) = map.get(name) {
                    self.node(value, prop, &join(path, name));
                }
            }
        }
        if let Some(extra) = additional_schema(s) {
            for (name, value) in map {
                if !props.is_some_and(|p| p.contains_key(name)) {
                    self.node(value, extra, &join(path, name));
                }
            }
        }
    }
}

/// Whether `text` matches a string `format` the apiserver checks (kube-openapi's strfmt
/// registry); formats we do not model pass, as unknown formats do on a real server.
fn format_accepts(format: &str, text: &str) -> bool {
    static DATE_TIME: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(
            r"^(?i)(\d{4})-(\d{2})-(\d{2})t([01]\d|2[0-3]):([0-5]\d):([0-5]\d|60)(\.\d+)?(z|[+-]\d{2}:\d{2})$",
        )
        .expect("static date-time pattern compiles")
    });
    static DATE: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"^\d{4}-(0[1-9]|1[0-2])-(0[1-9]|[12]\d|3[01])$").expect("static date pattern compiles")
    });
    static UUID: LazyLock<regex::Regex> = LazyLock::new(|| {
        regex::Regex::new(r"^(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
            .expect("static uuid pattern compiles")
    });
    match format {
        "date-time" => DATE_TIME.is_match(text) && text.get(..10).is_some_and(|d| DATE.is_match(d)) && text.len() >= 20,
        "date" => DATE.is_match(text),
        "uuid" => UUID.is_match(text),
        "ipv4" => text.parse::<std::net::Ipv4Addr>().is_ok(),
        "ipv6" => text.parse::<std::net::Ipv6Addr>().is_ok(),
        _ => true,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn widget_schema() -> Schema {
        Schema::new(json!({
            "type": "object",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "minimum": 1, "maximum": 10},
                        "name": {"type": "string", "minLength": 2, "maxLength": 5, "pattern": "^[a-z]+$"},
                        "mode": {"type": "string", "enum": ["fast", "slow"]},
                        "port": {"x-kubernetes-int-or-string": true},
                        "at": {"type": "string", "format": "date-time"},
                        "ratio": {"type": "number", "exclusiveMinimum": true, "minimum": 0, "exclusiveMaximum": true, "maximum": 1},
                        "tags": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 3, "x-kubernetes-list-type": "set"},
                        "note": {"type": "string", "nullable": true},
                        "ports": {
                            "type": "array",
                            "x-kubernetes-list-type": "map",
                            "x-kubernetes-list-map-keys": ["name"],
                            "items": {"type": "object", "required": ["name"], "properties": {"name": {"type": "string"}, "port": {"type": "integer"}}},
                        },
                    },
                },
            },
        }))
    }

    fn causes_for(spec: Value) -> Vec<Cause> {
        validate(
            &json!({"apiVersion": "example.org/v1", "kind": "Widget", "spec": spec}),
            None,
            &widget_schema(),
        )
    }

    fn only(causes: Vec<Cause>) -> Cause {
        assert_eq!(causes.len(), 1, "{causes:#?}");
        causes.into_iter().next().expect("one cause")
    }

    // --- validation ---

    #[test]
    fn a_valid_object_has_no_causes() {
        let spec = json!({"size": 3, "name": "abc", "mode": "fast", "port": 80, "at": "2024-01-02T03:04:05Z",
            "ratio": 0.5, "tags": ["a", "b"], "note": null, "ports": [{"name": "a"}, {"name": "b"}]});
        assert_eq!(causes_for(spec), vec![]);
    }

    #[test]
    fn a_wrong_type_is_field_value_type_invalid() {
        let c = only(causes_for(json!({"size": "3"})));
        assert_eq!(c.reason, "FieldValueTypeInvalid");
        assert_eq!(c.field, "spec.size");
        assert_eq!(
            c.message,
            r#"Invalid value: "string": spec.size in body must be of type integer: "string""#
        );
        let c = only(causes_for(json!({"size": 2.5})));
        assert_eq!(
            c.message,
            r#"Invalid value: "number": spec.size in body must be of type integer: "number""#
        );
        assert_eq!(
            causes_for(json!({"size": 2.0})),
            vec![],
            "an integral float is an integer"
        );
    }

    #[test]
    fn a_missing_required_field_is_field_value_required() {
        let c = only(causes_for(json!({})));
        assert_eq!(
            (c.reason.as_str(), c.field.as_str(), c.message.as_str()),
            ("FieldValueRequired", "spec.size", "Required value")
        );
    }

    #[test]
    fn an_unlisted_enum_value_is_not_supported() {
        let c = only(causes_for(json!({"size": 1, "mode": "warp"})));
        assert_eq!(c.reason, "FieldValueNotSupported");
        assert_eq!(c.field, "spec.mode");
        assert_eq!(
            c.message,
            r#"Unsupported value: "warp": supported values: "fast", "slow""#
        );
    }

    #[test]
    fn bounds_are_checked_inclusive_and_exclusive() {
        let c = only(causes_for(json!({"size": 11})));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (
                "FieldValueInvalid",
                "Invalid value: 11: spec.size in body should be less than or equal to 10"
            )
        );
        let c = only(causes_for(json!({"size": 0})));
        assert_eq!(
            c.message,
            "Invalid value: 0: spec.size in body should be greater than or equal to 1"
        );
        let c = only(causes_for(json!({"size": 1, "ratio": 1.0})));
        assert_eq!(c.message, "Invalid value: 1: spec.ratio in body should be less than 1");
        let c = only(causes_for(json!({"size": 1, "ratio": 0})));
        assert_eq!(
            c.message,
            "Invalid value: 0: spec.ratio in body should be greater than 0"
        );
        assert_eq!(causes_for(json!({"size": 10, "ratio": 0.99})), vec![]);
    }

    #[test]
    fn string_lengths_and_patterns_are_checked() {
        let c = only(causes_for(json!({"size": 1, "name": "toolong"})));
        assert_eq!(
            (c.reason.as_str(), c.field.as_str()),
            ("FieldValueTooLong", "spec.name")
        );
        assert_eq!(c.message, "Too long: may not be more than 5 bytes");
        let c = only(causes_for(json!({"size": 1, "name": "a"})));
        assert_eq!(
            c.message,
            r#"Invalid value: "a": spec.name in body should be at least 2 chars long"#
        );
        let c = only(causes_for(json!({"size": 1, "name": "ab1"})));
        assert_eq!(
            c.message,
            r#"Invalid value: "ab1": spec.name in body should match '^[a-z]+$'"#
        );
    }

    #[test]
    fn item_counts_are_checked() {
        let c = only(causes_for(json!({"size": 1, "tags": []})));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            (
                "FieldValueInvalid",
                "Invalid value: 0: spec.tags in body should have at least 1 items"
            )
        );
        let c = only(causes_for(json!({"size": 1, "tags": ["a", "b", "c", "d"]})));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            ("FieldValueTooMany", "Too many: 4: must have at most 3 items")
        );
        let c = only(causes_for(json!({"size": 1, "tags": [1]})));
        assert_eq!(c.field, "spec.tags[0]");
        assert_eq!(
            c.message,
            r#"Invalid value: "integer": spec.tags[0] in body must be of type string: "integer""#
        );
    }

    #[test]
    fn int_or_string_accepts_both_and_nothing_else() {
        assert_eq!(causes_for(json!({"size": 1, "port": 8080})), vec![]);
        assert_eq!(causes_for(json!({"size": 1, "port": "http"})), vec![]);
        let c = only(causes_for(json!({"size": 1, "port": true})));
        assert_eq!(
            c.message,
            r#"Invalid value: "boolean": spec.port in body must be of type integer,string: "boolean""#
        );
    }

    #[test]
    fn null_is_refused_unless_nullable() {
        assert_eq!(causes_for(json!({"size": 1, "note": null})), vec![]);
        let c = only(causes_for(json!({"size": 1, "name": null})));
        assert_eq!(
            c.message,
            r#"Invalid value: "null": spec.name in body must be of type string: "null""#
        );
    }

    #[test]
    fn date_time_format_is_checked() {
        assert_eq!(
            causes_for(json!({"size": 1, "at": "2024-01-02T03:04:05.123+02:00"})),
            vec![]
        );
        let c = only(causes_for(json!({"size": 1, "at": "yesterday"})));
        assert_eq!(c.reason, "FieldValueTypeInvalid");
        assert_eq!(
            c.message,
            r#"Invalid value: "yesterday": spec.at in body must be of type date-time: "yesterday""#
        );
        assert_eq!(
            causes_for(json!({"size": 1, "at": "2024-01-02T03:04:05"})).len(),
            1,
            "a time zone is required"
        );
    }

    #[test]
    fn set_duplicates_and_map_duplicate_keys_are_refused() {
        let c = only(causes_for(json!({"size": 1, "tags": ["a", "a"]})));
        assert_eq!(
            (c.reason.as_str(), c.field.as_str(), c.message.as_str()),
            ("FieldValueDuplicate", "spec.tags[1]", r#"Duplicate value: "a""#)
        );
        let c = only(causes_for(
            json!({"size": 1, "ports": [{"name": "a", "port": 1}, {"name": "a", "port": 2}]}),
        ));
        assert_eq!(c.field, "spec.ports[1]");
        assert_eq!(c.message, r#"Duplicate value: map[string]interface {}{"name":"a"}"#);
    }

    fn immutable_schema() -> Schema {
        Schema::new(json!({"type": "object", "properties": {
            "spec": {"type": "object", "properties": {
                "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "id is immutable"}]},
                "size": {"type": "integer"},
                "limit": {"type": "integer", "x-kubernetes-validations": [{"rule": "self <= 10"}]},
                "owner": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'root'", "message": "not root", "reason": "FieldValueForbidden"}]},
            }, "x-kubernetes-validations": [{"rule": "!has(oldSelf.size) || self.size >= oldSelf.size", "message": "size may not shrink"}]},
        }}))
    }

    #[test]
    fn cel_immutability_refuses_a_change_and_allows_a_no_op() {
        let schema = immutable_schema();
        let old = json!({"spec": {"id": "a", "size": 2}});
        assert_eq!(validate(&old, Some(&old), &schema), vec![]);
        let changed = json!({"spec": {"id": "b", "size": 2}});
        let c = only(validate(&changed, Some(&old), &schema));
        assert_eq!((c.reason.as_str(), c.field.as_str()), ("FieldValueInvalid", "spec.id"));
        assert_eq!(c.message, r#"Invalid value: "string": id is immutable"#);
        assert_eq!(
            validate(&changed, None, &schema),
            vec![],
            "transition rules do not run on create"
        );
    }

    #[test]
    fn cel_transition_rules_with_has_compare_to_the_old_object() {
        let schema = immutable_schema();
        let old = json!({"spec": {"size": 3}});
        let c = only(validate(&json!({"spec": {"size": 2}}), Some(&old), &schema));
        assert_eq!(
            (c.field.as_str(), c.message.as_str()),
            ("spec", r#"Invalid value: "object": size may not shrink"#)
        );
        assert_eq!(
            validate(&json!({"spec": {"size": 4}}), Some(&json!({"spec": {}})), &schema),
            vec![]
        );
    }

    #[test]
    fn cel_rules_without_message_or_with_reason_are_worded_like_kube() {
        let schema = immutable_schema();
        let c = only(validate(&json!({"spec": {"limit": 11}}), None, &schema));
        assert_eq!(c.message, r#"Invalid value: "integer": failed rule: self <= 10"#);
        let c = only(validate(&json!({"spec": {"owner": "root"}}), None, &schema));
        assert_eq!(
            (c.reason.as_str(), c.message.as_str()),
            ("FieldValueForbidden", "Forbidden: not root")
        );
    }

    #[test]
    fn cel_rules_on_list_items_report_the_item_path_and_type() {
        let schema = Schema::new(json!({"type": "object", "properties": {
            "ports": {"type": "array", "items": {
                "type": "object",
                "properties": {"port": {"type": "integer"}},
                "x-kubernetes-validations": [{"rule": "self.port > 0", "message": "port must be positive"}],
            }},
        }}));
        let c = only(validate(&json!({"ports": [{"port": 1}, {"port": 0}]}), None, &schema));
        assert_eq!(
            (c.field.as_str(), c.message.as_str()),
            ("ports[1]", r#"Invalid value: "object": port must be positive"#)
        );
    }

    #[test]
    fn a_type_error_blocks_cel_rules() {
        let schema = immutable_schema();
        let causes = validate(&json!({"spec": {"limit": "x", "owner": "root"}}), None, &schema);
        assert_eq!(causes.len(), 2, "{causes:#?}");
        assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
        assert_eq!(causes[1].field, "<nil>");
        assert!(
            causes[1]
                .message
                .starts_with(r#"Invalid value: "null": some validation rules were not checked"#)
        );
    }
}
