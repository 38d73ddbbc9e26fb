//! Schema-guided walks over objects: the field set of a value, the comparison of two values,
//! the merge of an apply configuration into a live object, and the removal of paths.
//!
//! Map topology follows structured-merge-diff: objects are granular unless
//! `x-kubernetes-map-type: atomic`; lists merge per `x-kubernetes-list-type` (atomic by
//! default); fields a schema does not declare are "deduced" (maps granular, lists atomic).

use std::collections::HashSet;

use serde_json::{Map, Value};

use super::fieldset::{self, FieldSet, PathElement};
use crate::schema::{ListType, Schema};

/// How a value is walked.
enum Shape {
    /// Owned as a whole: scalars, atomic maps and atomic lists.
    Leaf,
    /// A granular map: each field separately.
    Map,
    /// A set of scalars, items addressed by value.
    Set,
    /// A list of objects, items addressed by these key fields.
    Keyed(Vec<String>),
}

fn shape(v: &Value, schema: &Schema) -> Shape {
    match v {
        Value::Object(_) if !schema.is_atomic_map() => Shape::Map,
        Value::Array(_) => match schema.list_type() {
            ListType::Set => Shape::Set,
            ListType::Map(keys) if !keys.is_empty() => Shape::Keyed(keys),
            _ => Shape::Leaf,
        },
        _ => Shape::Leaf,
    }
}

/// Whether `v` is owned as one path (SMD inserts the path itself, not paths below it).
fn is_leaf(v: &Value, schema: &Schema) -> bool {
    match v {
        // A null map or list owns nothing unless the schema makes it atomic.
        Value::Null => match schema.type_name() {
            Some("object") => schema.is_atomic_map(),
            Some("array") => !matches!(schema.list_type(), ListType::Set | ListType::Map(_)),
            _ => true,
        },
        _ => matches!(shape(v, schema), Shape::Leaf),
    }
}

/// The schema of field `name` and whether it is a declared (struct) field rather than a map key.
pub fn field_schema(schema: &Schema, name: &str) -> (Schema, bool) {
    let named = schema.raw().get("properties").and_then(|p| p.get(name)).is_some();
    (schema.property(name).unwrap_or_else(Schema::any), named)
}

/// The schema of list items.
pub fn item_schema(schema: &Schema) -> Schema {
    schema.items().unwrap_or_else(Schema::any)
}

/// The path element of a list item, or why it has none.
fn item_element(shape: &Shape, item: &Value, items: &Schema) -> Result<PathElement, String> {
    match shape {
        Shape::Keyed(keys) => {
            let Value::Object(fields) = item else {
                return Err("associative list with keys has an element that is not a map type".into());
            };
            let mut key = Vec::with_capacity(keys.len());
            for k in keys {
                let v = match fields.get(k) {
                    Some(v) => v.clone(),
                    None => match field_schema(items, k).0.raw().get("default") {
                        Some(d) => d.clone(),
                        None => {
                            return Err(format!(
                                "associative list with keys has an element that omits key field {k:?} (and doesn't have default value)"
                            ));
                        }
                    },
                };
                key.push((k.clone(), v));
            }
            Ok(fieldset::key(&key))
        }
        Shape::Set => match item {
            Value::Object(_) => Err("associative list without keys has an element that's a map type".into()),
            _ => Ok(fieldset::value(item)),
        },
        Shape::Leaf | Shape::Map => Err("not an associative list".into()),
    }
}

/// Indexes list items strictly: an item without a key or a duplicate key is an error.
fn index_strict(shape: &Shape, items: &[Value], schema: &Schema) -> Result<Vec<PathElement>, String> {
    let mut seen = HashSet::new();
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        let pe = item_element(shape, item, schema).map_err(|e| format!("element {i}: {e}"))?;
        if !seen.insert(pe.clone()) {
            return Err(format!("duplicate entries for key {}", fieldset::display_element(&pe)));
        }
        out.push(pe);
    }
    Ok(out)
}

/// Indexes list items leniently (live objects may hold what an apply could not): an item
/// without a usable key gets a positional element no configuration can name.
fn index_lenient(shape: &Shape, items: &[Value], schema: &Schema) -> Vec<PathElement> {
    let mut seen = HashSet::new();
    items
        .iter()
        .enumerate()
        .map(|(i, item)| match item_element(shape, item, schema) {
            Ok(pe) if seen.insert(pe.clone()) => pe,
            _ => fieldset::index(i),
        })
        .collect()
}

/// A typed walk refused a value; `path` is where.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TypedError {
    /// Where, as kube-apiserver prints paths.
    pub path: String,
    /// What is wrong.
    pub message: String,
}

impl std::fmt::Display for TypedError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.message)
    }
}

/// The field set of `v` (SMD's `ToFieldSet`): scalars and atomic values are members, list
/// items are members, and so are map keys that are not declared fields.
pub fn fields_of(v: &Value, schema: &Schema) -> Result<FieldSet, TypedError> {
    fields_below(v, schema, &mut Vec::new(), true)
}

/// The field set of a live object, which may hold list items an apply could not name (those
/// get positional elements instead of failing).
pub fn fields_of_live(v: &Value, schema: &Schema) -> FieldSet {
    fields_below(v, schema, &mut Vec::new(), false).unwrap_or_default()
}

fn fields_below(v: &Value, schema: &Schema, at: &mut Vec<PathElement>, strict: bool) -> Result<FieldSet, TypedError> {
    let mut set = FieldSet::new();
    match (v, shape(v, schema)) {
        (Value::Object(fields), Shape::Map) => {
            for (name, child) in fields {
                let (cs, named) = field_schema(schema, name);
                let pe = fieldset::field(name);
                at.push(pe.clone());
                let below = fields_below(child, &cs, at, strict)?;
                at.pop();
                set.set_child(pe.clone(), below);
                if !named || is_leaf(child, &cs) {
                    set.insert_member(pe);
                }
            }
        }
        (Value::Array(items), list @ (Shape::Set | Shape::Keyed(_))) => {
            let is = item_schema(schema);
            let pes = if strict {
                index_strict(&list, items, &is).map_err(|message| TypedError {
                    path: fieldset::display_path(at),
                    message,
                })?
            } else {
                index_lenient(&list, items, &is)
            };
            for (item, pe) in items.iter().zip(pes) {
                at.push(pe.clone());
                let below = fields_below(item, &is, at, strict)?;
                at.pop();
                set.set_child(pe.clone(), below);
                set.insert_member(pe);
            }
        }
        _ => {}
    }
    Ok(set)
}

/// What changed between two values (SMD's `Compare`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Comparison {
    /// Paths only in the new value (containers as well as their leaves).
    pub added: FieldSet,
    /// Leaves whose value changed.
    pub modified: FieldSet,
    /// Paths only in the old value.
    pub removed: FieldSet,
}

impl Comparison {
    /// Added or modified paths: what a writer takes from other managers.
    pub fn changed(&self) -> FieldSet {
        self.added.union(&self.modified)
    }
}

/// Compares `old` with `new` under `schema`.
pub fn compare(old: Option<&Value>, new: Option<&Value>, schema: &Schema) -> Comparison {
    let mut cmp = Comparison::default();
    compare_into(old, new, schema, &mut Vec::new(), &mut cmp);
    cmp
}

fn compare_leaf(old: Option<&Value>, new: Option<&Value>, at: &[PathElement], cmp: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => cmp.added.insert(at),
        (Some(_), None) => cmp.removed.insert(at),
        (Some(o), Some(n)) if o != n => cmp.modified.insert(at),
        _ => {}
    }
}

fn compare_into(
    old: Option<&Value>,
    new: Option<&Value>,
    schema: &Schema,
    at: &mut Vec<PathElement>,
    cmp: &mut Comparison,
) {
    let Some(present) = new.or(old) else { return };
    let kind = shape(present, schema);
    let same_kind = match (old, new) {
        (Some(o), Some(n)) => std::mem::discriminant(&shape(o, schema)) == std::mem::discriminant(&shape(n, schema)),
        _ => true,
    };
    if !same_kind {
        compare_leaf(old, new, at, cmp);
        return;
    }
    match kind {
        Shape::Leaf => compare_leaf(old, new, at, cmp),
        Shape::Map => {
            let empty = Map::new();
            let o = old.and_then(Value::as_object).unwrap_or(&empty);
            let n = new.and_then(Value::as_object).unwrap_or(&empty);
            if o.is_empty() && n.is_empty() {
                compare_leaf(old, new, at, cmp);
                return;
            }
            let names: Vec<&String> = o.keys().chain(n.keys().filter(|k| !o.contains_key(*k))).collect();
            for name in names {
                let (cs, _) = field_schema(schema, name);
                at.push(fieldset::field(name));
                compare_into(o.get(name), n.get(name), &cs, at, cmp);
                at.pop();
            }
            compare_container_presence(old, new, at, cmp);
        }
        list @ (Shape::Set | Shape::Keyed(_)) => {
            let o: &[Value] = old.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
            let n: &[Value] = new.and_then(Value::as_array).map(Vec::as_slice).unwrap_or(&[]);
            if o.is_empty() && n.is_empty() {
                compare_leaf(old, new, at, cmp);
                return;
            }
            let is = item_schema(schema);
            let ope = index_lenient(&list, o, &is);
            let npe = index_lenient(&list, n, &is);
            for (i, pe) in ope.iter().enumerate() {
                let counterpart = npe.iter().position(|p| p == pe).map(|j| &n[j]);
                at.push(pe.clone());
                compare_into(Some(&o[i]), counterpart, &is, at, cmp);
                at.pop();
            }
            for (j, pe) in npe.iter().enumerate() {
                if !ope.contains(pe) {
                    at.push(pe.clone());
                    compare_into(None, Some(&n[j]), &is, at, cmp);
                    at.pop();
                }
            }
            compare_container_presence(old, new, at, cmp);
        }
    }
}

/// A whole container appearing or disappearing is itself added or removed.
fn compare_container_presence(old: Option<&Value>, new: Option<&Value>, at: &[PathElement], cmp: &mut Comparison) {
    match (old, new) {
        (None, Some(_)) => cmp.added.insert(at),
        (Some(_), None) => cmp.removed.insert(at),
        _ => {}
    }
}

/// Merges the configuration `config` into `live` (SMD's `Merge`): maps union recursively,
/// associative lists merge item by item, everything else takes the configuration's value.
pub fn merge(live: &Value, config: &Value, schema: &Schema) -> Value {
    match (live, config, shape(live, schema), shape(config, schema)) {
        (Value::Object(l), Value::Object(c), Shape::Map, Shape::Map) if !(l.is_empty() && c.is_empty()) => {
            let mut out = l.clone();
            for (name, cv) in c {
                let merged = match l.get(name) {
                    Some(lv) => merge(lv, cv, &field_schema(schema, name).0),
                    None => cv.clone(),
                };
                out.insert(name.clone(), merged);
            }
            Value::Object(out)
        }
        (Value::Array(l), Value::Array(c), kind @ (Shape::Set | Shape::Keyed(_)), _)
            if !(l.is_empty() && c.is_empty()) =>
        {
            Value::Array(merge_list(l, c, &kind, &item_schema(schema)))
        }
        // A null configuration does not clear a granular container.
        (Value::Object(_) | Value::Array(_), Value::Null, Shape::Map | Shape::Set | Shape::Keyed(_), _) => live.clone(),
        _ => config.clone(),
    }
}

/// Merges associative lists in SMD's order: the configuration's order for the items it
/// shares with the live list, live-only items kept where they stood, new items where the
/// configuration puts them.
fn merge_list(live: &[Value], config: &[Value], kind: &Shape, items: &Schema) -> Vec<Value> {
    let lpe = index_lenient(kind, live, items);
    let cpe = index_lenient(kind, config, items);
    let in_live = |pe: &PathElement| lpe.iter().position(|p| p == pe);
    let in_config = |pe: &PathElement| cpe.iter().position(|p| p == pe);
    let mut shared = cpe.iter().filter(|pe| in_live(pe).is_some());
    let mut next_shared = shared.next();
    let mut merged_config: HashSet<&PathElement> = HashSet::new();
    let mut out = Vec::with_capacity(live.len().max(config.len()));
    let (mut li, mut ci) = (0, 0);
    while li < live.len() || ci < config.len() {
        if li < live.len() && ci < config.len() {
            let pe = &lpe[li];
            if *pe == cpe[ci] {
                merged_config.insert(pe);
                out.push(merge(&live[li], &config[ci], items));
                li += 1;
                ci += 1;
                next_shared = shared.next();
                continue;
            }
            if in_config(pe).is_some() && next_shared.is_some_and(|n| n != pe) {
                // Shared, but the configuration wants another shared item first.
                li += 1;
                continue;
            }
        }
        if li < live.len() {
            let pe = &lpe[li];
            if in_config(pe).is_none() {
                out.push(live[li].clone());
                li += 1;
                continue;
            }
            if merged_config.contains(pe) {
                li += 1;
                continue;
            }
        }
        if ci < config.len() {
            let pe = &cpe[ci];
            merged_config.insert(pe);
            out.push(match in_live(pe) {
                Some(l) => merge(&live[l], &config[ci], items),
                None => config[ci].clone(),
            });
            ci += 1;
            if next_shared == Some(pe) {
                next_shared = shared.next();
            }
        }
    }
    out
}

/// Removes every path of `set` from `v` (a member goes with everything below it). A map or
/// list emptied by the removal disappears, as SMD nulls it and null non-nullable fields are
/// dropped.
pub fn remove_paths(v: &Value, set: &FieldSet, schema: &Schema) -> Value {
    match (v, shape(v, schema)) {
        (Value::Object(fields), Shape::Map) => {
            let mut out = Map::new();
            for (name, child) in fields {
                let pe = fieldset::field(name);
                if set.has_member(&pe) {
                    continue;
                }
                let kept = match set.child(&pe) {
                    Some(below) => {
                        let kept = remove_paths(child, below, &field_schema(schema, name).0);
                        if emptied(child, &kept) {
                            continue;
                        }
                        kept
                    }
                    None => child.clone(),
                };
                out.insert(name.clone(), kept);
            }
            Value::Object(out)
        }
        (Value::Array(items), kind @ (Shape::Set | Shape::Keyed(_))) => {
            let is = item_schema(schema);
            let pes = index_lenient(&kind, items, &is);
            let kept = items
                .iter()
                .zip(&pes)
                .filter(|(_, pe)| !set.has_member(pe))
                .map(|(item, pe)| match set.child(pe) {
                    Some(below) => remove_paths(item, below, &is),
                    None => item.clone(),
                })
                .collect();
            Value::Array(kept)
        }
        _ => v.clone(),
    }
}

fn emptied(before: &Value, after: &Value) -> bool {
    match (before, after) {
        (Value::Object(b), Value::Object(a)) => !b.is_empty() && a.is_empty(),
        (Value::Array(b), Value::Array(a)) => !b.is_empty() && a.is_empty(),
        _ => false,
    }
}

/// Adds the declared fields on the way to each path as members (SMD's
/// `EnsureNamedFieldsAreMembers`); map keys and list items are not added.
pub fn with_named_fields(set: &FieldSet, schema: &Schema) -> FieldSet {
    let mut out = set.clone();
    for pe in set.child_elements() {
        let Some(below) = set.child(pe) else { continue };
        let (cs, named) = match pe.strip_prefix("f:") {
            Some(name) => field_schema(schema, name),
            None => (item_schema(schema), false),
        };
        out.set_child(pe.clone(), with_named_fields(below, &cs));
        if named {
            out.insert_member(pe.clone());
        }
    }
    out
}
