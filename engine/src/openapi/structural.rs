//! From a published OpenAPI v3 component schema to an inline CRD structural schema: `$ref`s
//! (bare or `allOf`-wrapped) resolved, keys CRDs do not accept dropped, and what the CRD OpenAPI
//! builder injects (group-version-kind, ObjectMeta, embedded type meta) taken back out.

use std::collections::HashMap;

use serde_json::{Map, Value, json};

use super::SchemaError;

/// Prefix of local component references.
const REF_PREFIX: &str = "#/components/schemas/";
/// The component every `metadata` property refers to.
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";

/// JSONSchemaProps keys a CRD schema may carry; everything else (`x-kubernetes-patch-*`,
/// `x-kubernetes-group-version-kind`, `readOnly`, `example`, …) is dropped.
const CRD_KEYS: &[&str] = &[
    "description",
    "type",
    "format",
    "title",
    "default",
    "maximum",
    "exclusiveMaximum",
    "minimum",
    "exclusiveMinimum",
    "maxLength",
    "minLength",
    "pattern",
    "maxItems",
    "minItems",
    "multipleOf",
    "enum",
    "maxProperties",
    "minProperties",
    "required",
    "items",
    "allOf",
    "oneOf",
    "anyOf",
    "not",
    "properties",
    "additionalProperties",
    "nullable",
    "x-kubernetes-preserve-unknown-fields",
    "x-kubernetes-embedded-resource",
    "x-kubernetes-int-or-string",
    "x-kubernetes-list-map-keys",
    "x-kubernetes-list-type",
    "x-kubernetes-map-type",
    "x-kubernetes-validations",
];

/// Type meta the builder injects into embedded resources.
const TYPE_META: &[&str] = &["apiVersion", "kind", "metadata"];

/// Where a node sits: structural nodes need a type; value validations (inside `allOf`,
/// `anyOf`, `oneOf`, `not`) must not get one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Position {
    Structural,
    Validation,
}

/// How deep the inlined schema may nest, counting every `$ref` followed: serde_json refuses to
/// parse a document deeper than 128 levels, so a schema that only `$ref` chains make deeper is
/// not one a CRD could carry, and recursing further would risk the konnector's stack.
pub const MAX_DEPTH: usize = 128;

/// How many schema nodes the inlined schema may have: a CRD object is at most a few MiB, and
/// `$ref` fan-out (each level naming the next twice) would otherwise grow exponentially.
pub const MAX_NODES: usize = 100_000;

/// The inline CRD `openAPIV3Schema` for a published resource schema.
pub fn structural_schema(published: &Value, schemas: &Map<String, Value>) -> Result<Value, SchemaError> {
    let mut resolver = Resolver {
        schemas,
        nodes: 0,
        cuts: 0,
        memo: HashMap::new(),
    };
    let inlined = resolver.inline(published, &mut Vec::new(), 0)?;
    let mut root = to_crd_node(inlined, Position::Structural);
    if let Some(Value::Object(props)) = root.get_mut("properties")
        && props.contains_key("metadata")
    {
        props.insert("metadata".into(), json!({"type": "object"}));
    }
    Ok(root)
}

/// Resolves `$ref`s against `components.schemas`, within [`MAX_DEPTH`] and [`MAX_NODES`].
struct Resolver<'a> {
    schemas: &'a Map<String, Value>,
    /// Nodes produced so far (a memoized subtree counts with all its nodes).
    nodes: usize,
    /// Recursive placeholders produced so far: a subtree that made one depends on the
    /// components being expanded around it and is not memoized.
    cuts: usize,
    /// A bare `{"$ref": name}` already inlined, with its node count.
    memo: HashMap<String, (Value, usize)>,
}

impl Resolver<'_> {
    /// `node` with every reference replaced by its target; `stack` holds the components being
    /// expanded, to cut cycles; `depth` counts nesting and references followed.
    fn inline(&mut self, node: &Value, stack: &mut Vec<String>, depth: usize) -> Result<Value, SchemaError> {
        if depth > MAX_DEPTH {
            return Err(SchemaError::TooDeep { limit: MAX_DEPTH });
        }
        self.count(1)?;
        let Value::Object(map) = node else {
            return Ok(node.clone());
        };
        if let Some(name) = bare_reference(map)
            && !stack.contains(&name)
        {
            if let Some((value, size)) = self.memo.get(&name) {
                let (value, size) = (value.clone(), *size);
                self.count(size)?;
                return Ok(value);
            }
            let (nodes, cuts) = (self.nodes, self.cuts);
            let value = self.expand(map.clone(), stack, depth)?;
            if self.cuts == cuts {
                self.memo.insert(name, (value.clone(), self.nodes - nodes));
            }
            return Ok(value);
        }
        self.expand(map.clone(), stack, depth)
    }

    fn expand(
        &mut self,
        mut map: Map<String, Value>,
        stack: &mut Vec<String>,
        depth: usize,
    ) -> Result<Value, SchemaError> {
        let base = stack.len();
        let mut depth = depth;
        while let Some(name) = take_reference(&mut map) {
            if stack.contains(&name) {
                stack.truncate(base);
                self.cuts += 1;
                return Ok(recursive_placeholder(&map));
            }
            depth += 1;
            if depth > MAX_DEPTH {
                return Err(SchemaError::TooDeep { limit: MAX_DEPTH });
            }
            // Siblings of a reference (description, default) override the target's.
            for (key, value) in self.target(&name)? {
                map.entry(key).or_insert(value);
            }
            stack.push(name);
        }
        let result = self.children(&mut map, stack, depth + 1);
        stack.truncate(base);
        result?;
        Ok(Value::Object(map))
    }

    /// Inlines the subschemas of `map` in place.
    fn children(
        &mut self,
        map: &mut Map<String, Value>,
        stack: &mut Vec<String>,
        depth: usize,
    ) -> Result<(), SchemaError> {
        for key in ["properties", "patternProperties"] {
            if let Some(Value::Object(children)) = map.get_mut(key) {
                for child in children.values_mut() {
                    *child = self.inline(child, stack, depth)?;
                }
            }
        }
        for key in ["items", "additionalProperties", "not"] {
            if let Some(child @ Value::Object(_)) = map.get_mut(key) {
                *child = self.inline(child, stack, depth)?;
            }
        }
        for key in ["allOf", "anyOf", "oneOf"] {
            if let Some(Value::Array(children)) = map.get_mut(key) {
                for child in children.iter_mut() {
                    *child = self.inline(child, stack, depth)?;
                }
            }
        }
        Ok(())
    }

    fn count(&mut self, nodes: usize) -> Result<(), SchemaError> {
        self.nodes = self.nodes.saturating_add(nodes);
        if self.nodes > MAX_NODES {
            return Err(SchemaError::TooLarge { limit: MAX_NODES });
        }
        Ok(())
    }

    /// The fields of a referenced component; ObjectMeta is just an object in a CRD.
    fn target(&self, name: &str) -> Result<Map<String, Value>, SchemaError> {
        if name == OBJECT_META {
            return Ok(Map::from_iter([("type".to_string(), json!("object"))]));
        }
        match self.schemas.get(name) {
            Some(Value::Object(target)) => Ok(target.clone()),
            _ => Err(SchemaError::UnresolvedRef(format!("{REF_PREFIX}{name}"))),
        }
    }
}

/// The component a node names when it is nothing but `{"$ref": …}` (what a memo can stand for).
fn bare_reference(map: &Map<String, Value>) -> Option<String> {
    match (map.len(), map.get("$ref")) {
        (1, Some(Value::String(target))) => Some(component_name(target)),
        _ => None,
    }
}

/// Removes one reference from `map`: `$ref` itself, or an `allOf` entry that is only a `$ref`
/// (how OpenAPI v3 gives a reference siblings). Returns the component name.
fn take_reference(map: &mut Map<String, Value>) -> Option<String> {
    if let Some(Value::String(target)) = map.remove("$ref") {
        return Some(component_name(&target));
    }
    let Some(Value::Array(all_of)) = map.get_mut("allOf") else {
        return None;
    };
    let at = all_of.iter().position(is_bare_reference)?;
    let entry = all_of.remove(at);
    if all_of.is_empty() {
        map.remove("allOf");
    }
    entry.get("$ref").and_then(Value::as_str).map(component_name)
}

fn is_bare_reference(node: &Value) -> bool {
    node.as_object()
        .is_some_and(|m| m.len() == 1 && m.get("$ref").is_some_and(Value::is_string))
}

fn component_name(target: &str) -> String {
    target.strip_prefix(REF_PREFIX).unwrap_or(target).to_string()
}

/// What a recursive reference becomes: an object whose content is kept as is.
fn recursive_placeholder(siblings: &Map<String, Value>) -> Value {
    let mut node = json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true});
    if let (Some(description), Value::Object(map)) = (siblings.get("description"), &mut node) {
        map.insert("description".into(), description.clone());
    }
    node
}

/// Keeps CRD keys, recurses, gives typeless structural nodes a type and strips the builder's
/// embedded type meta.
fn to_crd_node(node: Value, position: Position) -> Value {
    let Value::Object(map) = node else { return node };
    let mut map: Map<String, Value> = map
        .into_iter()
        .filter(|(k, _)| CRD_KEYS.contains(&k.as_str()))
        .collect();
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for child in props.values_mut() {
            *child = to_crd_node(child.take(), position);
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child @ Value::Object(_)) = map.get_mut(key) {
            *child = to_crd_node(child.take(), position);
        }
    }
    if let Some(child @ Value::Object(_)) = map.get_mut("not") {
        *child = to_crd_node(child.take(), Position::Validation);
    }
    for key in ["allOf", "anyOf", "oneOf"] {
        if let Some(Value::Array(children)) = map.get_mut(key) {
            for child in children.iter_mut() {
                *child = to_crd_node(child.take(), Position::Validation);
            }
        }
    }
    if position == Position::Structural {
        int_or_string_format(&mut map);
        give_type(&mut map);
    }
    if flag(&map, "x-kubernetes-embedded-resource") {
        strip_type_meta(&mut map);
    }
    Value::Object(map)
}

fn flag(map: &Map<String, Value>, key: &str) -> bool {
    map.get(key).and_then(Value::as_bool).unwrap_or(false)
}

/// Built-in `IntOrString` is published as `format: int-or-string`; a CRD says it with the flag.
fn int_or_string_format(map: &mut Map<String, Value>) {
    if map.get("format").and_then(Value::as_str) == Some("int-or-string") {
        map.remove("format");
        map.remove("type");
        map.remove("oneOf");
        map.insert("x-kubernetes-int-or-string".into(), json!(true));
    }
}

/// A structural node needs a type unless it is int-or-string or preserves unknown fields.
fn give_type(map: &mut Map<String, Value>) {
    if map.contains_key("type")
        || flag(map, "x-kubernetes-int-or-string")
        || flag(map, "x-kubernetes-preserve-unknown-fields")
    {
        return;
    }
    if map.contains_key("properties") || map.contains_key("additionalProperties") {
        map.insert("type".into(), json!("object"));
    } else if map.contains_key("items") {
        map.insert("type".into(), json!("array"));
    } else {
        // An untyped published node (a built-in `JSON` or `RawExtension`) accepts anything.
        map.remove("oneOf");
        map.remove("anyOf");
        map.insert("x-kubernetes-preserve-unknown-fields".into(), json!(true));
    }
}

/// Undoes the builder's type meta on an embedded resource: the apiserver validates and keeps
/// `apiVersion`, `kind` and `metadata` there without any schema.
fn strip_type_meta(map: &mut Map<String, Value>) {
    if let Some(Value::Object(props)) = map.get_mut("properties") {
        for key in TYPE_META {
            props.remove(*key);
        }
        if props.is_empty() {
            map.remove("properties");
        }
    }
    if let Some(Value::Array(required)) = map.get_mut("required") {
        required.retain(|r| r != "kind" && r != "apiVersion");
        if required.is_empty() {
            map.remove("required");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn components() -> Map<String, Value> {
        json!({
            OBJECT_META: {"type": "object", "properties": {"name": {"type": "string"}}},
            "io.example.Port": {"type": "object", "description": "A port.", "properties": {
                "number": {"type": "integer", "format": "int32"},
                "target": {"$ref": "#/components/schemas/io.k8s.apimachinery.pkg.util.intstr.IntOrString"},
            }, "x-kubernetes-patch-merge-key": "number"},
            "io.k8s.apimachinery.pkg.util.intstr.IntOrString": {"type": "string", "format": "int-or-string"},
            "io.example.Node": {"type": "object", "properties": {
                "children": {"type": "array", "items": {"$ref": "#/components/schemas/io.example.Node"}},
            }},
        })
        .as_object()
        .cloned()
        .unwrap()
    }

    #[test]
    fn allof_wrapped_references_resolve_with_their_siblings_winning() {
        let published = json!({"type": "object", "properties": {
            "port": {"allOf": [{"$ref": "#/components/schemas/io.example.Port"}], "description": "The port.", "default": {}},
            "metadata": {"allOf": [{"$ref": format!("{REF_PREFIX}{OBJECT_META}")}], "description": "meta"},
        }, "x-kubernetes-group-version-kind": [{"group": "g.io", "version": "v1", "kind": "K"}]});
        let schema = structural_schema(&published, &components()).unwrap();
        assert_eq!(
            schema,
            json!({"type": "object", "properties": {
                "port": {"type": "object", "description": "The port.", "default": {}, "properties": {
                    "number": {"type": "integer", "format": "int32"},
                    "target": {"x-kubernetes-int-or-string": true},
                }},
                "metadata": {"type": "object"},
            }})
        );
    }

    #[test]
    fn a_reference_cycle_becomes_an_object_preserving_unknown_fields() {
        let published =
            json!({"type": "object", "properties": {"tree": {"$ref": "#/components/schemas/io.example.Node"}}});
        let schema = structural_schema(&published, &components()).unwrap();
        assert_eq!(
            schema["properties"]["tree"]["properties"]["children"]["items"],
            json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})
        );
    }

    #[test]
    fn an_unknown_reference_is_an_error() {
        let published = json!({"type": "object", "properties": {"x": {"$ref": "#/components/schemas/missing"}}});
        assert_eq!(
            structural_schema(&published, &components()),
            Err(SchemaError::UnresolvedRef("#/components/schemas/missing".into()))
        );
    }

    #[test]
    fn embedded_resources_lose_the_injected_type_meta_but_keep_their_own_fields() {
        let published = json!({"type": "object", "properties": {"template": {
            "type": "object", "x-kubernetes-embedded-resource": true,
            "required": ["replicas", "kind", "apiVersion"],
            "properties": {
                "apiVersion": {"type": "string"}, "kind": {"type": "string"},
                "metadata": {"allOf": [{"$ref": format!("{REF_PREFIX}{OBJECT_META}")}]},
                "replicas": {"type": "integer"},
            },
        }}});
        let schema = structural_schema(&published, &components()).unwrap();
        assert_eq!(
            schema["properties"]["template"],
            json!({"type": "object", "x-kubernetes-embedded-resource": true, "required": ["replicas"],
                   "properties": {"replicas": {"type": "integer"}}})
        );
    }

    #[test]
    fn value_validations_stay_typeless_and_untyped_structural_nodes_preserve_unknown_fields() {
        let published = json!({"type": "object", "properties": {
            "choice": {"type": "object", "oneOf": [{"required": ["a"]}, {"required": ["b"]}],
                       "properties": {"a": {"type": "string"}, "b": {"type": "string"}}},
            "raw": {"description": "anything"},
        }});
        let schema = structural_schema(&published, &components()).unwrap();
        assert_eq!(
            schema["properties"]["choice"]["oneOf"],
            json!([{"required": ["a"]}, {"required": ["b"]}])
        );
        assert_eq!(
            schema["properties"]["raw"],
            json!({"description": "anything", "x-kubernetes-preserve-unknown-fields": true})
        );
    }
}
