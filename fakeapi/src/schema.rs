//! Structural schemas (OpenAPI v3 `JSONSchemaProps` as JSON): pruning, defaulting, validation,
//! and the list/map topology server-side apply and strategic merge need.

use std::sync::{Arc, LazyLock};

use kbind_cluster::error::Cause;
use serde_json::{Map, Value};

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

// The walkers below read the `JSONSchemaProps` JSON directly (no `Arc` per field) and follow
// apiextensions-apiserver: `pruning`, `defaulting`, kube-openapi's schema validator with
// `kubeOpenAPIResultToFieldErrors`, `structurallisttype` and the CEL validator.

/// Matches anything and keeps it (`additionalProperties: true`).
static ANY: LazyLock<Value> = LazyLock::new(|| serde_json::json!({"x-kubernetes-preserve-unknown-fields": true}));

/// The ObjectMeta schema metadata of a resource is pruned to (the apiserver's ObjectMeta coercion).
static OBJECT_META: LazyLock<Value> = LazyLock::new(crate::builtins::object_meta_schema);

fn flag(s: &Value, name: &str) -> bool {
    s.get(name).and_then(Value::as_bool) == Some(true)
}

fn properties(s: &Value) -> Option<&Map<String, Value>> {
    s.get("properties").and_then(Value::as_object)
}

fn items(s: &Value) -> Option<&Value> {
    s.get("items").filter(|i| i.is_object())
}

/// The declared `additionalProperties` schema (an object, not `true`).
fn additional_schema(s: &Value) -> Option<&Value> {
    s.get("additionalProperties").filter(|a| a.is_object())
}

/// The schema of key `key`: a property, else `additionalProperties` (`true` reads as anything).
fn child<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
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
fn declared_child<'a>(s: &'a Value, key: &str) -> Option<&'a Value> {
    properties(s).and_then(|p| p.get(key)).or_else(|| additional_schema(s))
}

fn is_embedded(s: &Value) -> bool {
    flag(s, "x-kubernetes-embedded-resource")
}

fn nullable(s: &Value) -> bool {
    flag(s, "nullable")
}

fn default_of(s: &Value) -> Option<&Value> {
    s.get("default").filter(|d| !d.is_null())
}

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

/// Whether any node carries `x-kubernetes-validations` (saves converting objects to CEL values).
fn has_cel_rules(s: &Value) -> bool {
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
fn cel_causes(obj: &Value, old: Option<&Value>, schema: &Value) -> Vec<Cause> {
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

// Field errors worded as k8s.io/apimachinery/pkg/util/validation/field words them
// (`Error.ErrorBody`), with the field path `<nil>` for the root as the apiserver sends it.

fn cause(reason: &str, field: &str, message: String) -> Cause {
    let field = if field.is_empty() { "<nil>" } else { field };
    Cause {
        reason: reason.to_string(),
        message,
        field: field.to_string(),
    }
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

/// `field.Required`: "Required value[: detail]".
pub(crate) fn required(field: &str, detail: &str) -> Cause {
    cause(
        "FieldValueRequired",
        field,
        with_detail("Required value".into(), detail),
    )
}

/// `field.Invalid`: "Invalid value: <value>[: detail]".
pub(crate) fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        with_detail(format!("Invalid value: {}", bad_value(value)), detail),
    )
}

/// `field.TypeInvalid`: worded like `Invalid`, with reason `FieldValueTypeInvalid`.
pub(crate) fn type_invalid(field: &str, value: &Value, detail: &str) -> Cause {
    cause(
        "FieldValueTypeInvalid",
        field,
        with_detail(format!("Invalid value: {}", bad_value(value)), detail),
    )
}

/// `field.NotSupported`: "Unsupported value: <value>: supported values: "a", "b"".
pub(crate) fn not_supported(field: &str, value: &Value, supported: &[String]) -> Cause {
    let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
    let detail = if quoted.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", quoted.join(", "))
    };
    cause(
        "FieldValueNotSupported",
        field,
        with_detail(format!("Unsupported value: {}", bad_value(value)), &detail),
    )
}

/// `field.Duplicate`: "Duplicate value: <value>".
pub(crate) fn duplicate(field: &str, value: &Value) -> Cause {
    cause(
        "FieldValueDuplicate",
        field,
        format!("Duplicate value: {}", bad_value(value)),
    )
}

/// `field.Forbidden`: "Forbidden[: detail]".
pub(crate) fn forbidden(field: &str, detail: &str) -> Cause {
    cause("FieldValueForbidden", field, with_detail("Forbidden".into(), detail))
}

/// `field.TooLong`: "Too long: may not be more than N bytes".
pub(crate) fn too_long(field: &str, max: u64) -> Cause {
    cause(
        "FieldValueTooLong",
        field,
        format!("Too long: may not be more than {max} bytes"),
    )
}

/// `field.TooMany`: "Too many: <actual>: must have at most N items".
pub(crate) fn too_many(field: &str, actual: u64, max: u64) -> Cause {
    cause(
        "FieldValueTooMany",
        field,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

/// A bad value as `ErrorBody` prints it: strings quoted, numbers and booleans bare, null as
/// `"null"`, objects and lists in Go's `%#v` form.
fn bad_value(value: &Value) -> String {
    match value {
        Value::Null => "\"null\"".to_string(),
        Value::String(text) => go_quote(text),
        Value::Number(_) | Value::Bool(_) => go_sharp_v(value),
        Value::Array(_) | Value::Object(_) => go_sharp_v(value),
    }
}

/// Go's `%q` for a string (JSON string escaping is the same for everything but rare controls).
pub(crate) fn go_quote(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"k":1}`, keys sorted).
fn go_sharp_v(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or_default()),
        },
        Value::String(text) => go_quote(text),
        Value::Array(list) => {
            let inner: Vec<String> = list.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_sharp_v(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): shortest digits, exponent
/// form when the decimal exponent is below -4 or at least 6 (`1e+06`, `1.5e-05`).
pub(crate) fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
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

    #[test]
    fn go_float_formatting_matches_go() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
    }
}
