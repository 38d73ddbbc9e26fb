//! JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.
//!
//! Strategic merge follows apimachinery's `StrategicMergeMapPatch`: maps merge recursively and
//! `null` deletes; lists whose schema says `x-kubernetes-patch-strategy: merge` merge (maps by
//! `x-kubernetes-patch-merge-key`, scalars as a set), other lists are replaced; the directives
//! `$patch` (replace / delete, and delete / replace on list items), `$retainKeys`,
//! `$deleteFromPrimitiveList/<field>` and `$setElementOrder/<field>` are honoured. Errors carry
//! the codes kube-apiserver answers with: malformed directives 400, lists of lists and keys
//! outside `$retainKeys` 422, anything else (an unknown `$patch`, a missing merge key) 500.

use kbind_cluster::Error;
use serde_json::{Map, Value};

use crate::schema::Schema;

/// kube-apiserver's message for a 422 built from a bare status code.
const REJECTED: &str = "the server rejected our request due to an error in our request";

/// Applies a JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies a JSON patch; a failed `test` or a bad path is a 422 / 400 as kube-apiserver answers.
///
/// kube-apiserver answers every failure to apply a decoded JSON patch (a failed `test`, a
/// missing path) with a bare 422 Invalid; a patch that does not decode is the caller's 400.
/// The target is left untouched on failure.
pub fn json_patch(target: &mut Value, patch: &json_patch::Patch) -> Result<(), Error> {
    let mut patched = target.clone();
    json_patch::patch(&mut patched, &patch.0).map_err(|_| Error::Invalid {
        message: REJECTED.into(),
        causes: vec![],
    })?;
    *target = patched;
    Ok(())
}

/// Applies a strategic merge patch using the merge keys of `schema`.
pub fn strategic_merge_patch(target: &mut Value, patch: &Value, schema: &Schema) -> Result<(), Error> {
    let Value::Object(patch) = patch else {
        return Err(Error::BadRequest {
            message: "invalid JSON document".into(),
        });
    };
    let original = match target {
        Value::Object(o) => o.clone(),
        _ => Map::new(),
    };
    let root = crate::ssa::object_schema(schema);
    let merged = merge_map(original, patch.clone(), &root).map_err(SmpError::into_error)?;
    *target = Value::Object(merged);
    Ok(())
}

/// Why a strategic merge failed, by the status kube-apiserver gives it.
enum SmpError {
    /// A malformed directive (400).
    BadRequest(&'static str),
    /// A patch the schema cannot take (422).
    Rejected,
    /// Any other merge error (500, reason unknown).
    Internal(String),
}

impl SmpError {
    fn into_error(self) -> Error {
        match self {
            SmpError::BadRequest(message) => Error::BadRequest {
                message: message.into(),
            },
            SmpError::Rejected => Error::Invalid {
                message: REJECTED.into(),
                causes: vec![],
            },
            SmpError::Internal(message) => Error::Server {
                code: 500,
                reason: String::new(),
                message,
            },
        }
    }
}

const DIRECTIVE: &str = "$patch";
const RETAIN_KEYS: &str = "$retainKeys";
const DELETE_FROM_PRIMITIVE_LIST: &str = "$deleteFromPrimitiveList/";
const SET_ELEMENT_ORDER: &str = "$setElementOrder/";

/// How a field of `schema` merges: its schema, its strategies and its merge key.
struct FieldMeta {
    schema: Schema,
    strategies: Vec<String>,
    merge_key: Option<String>,
}

impl FieldMeta {
    fn of(schema: &Schema, name: &str) -> FieldMeta {
        let schema = schema.property(name).unwrap_or_else(Schema::any);
        let strategies = schema
            .patch_strategy()
            .map(|s| s.split(',').map(|p| p.trim().to_string()).collect())
            .unwrap_or_default();
        let merge_key = schema.patch_merge_key();
        FieldMeta {
            schema,
            strategies,
            merge_key,
        }
    }

    fn has(&self, strategy: &str) -> bool {
        self.strategies.iter().any(|s| s == strategy)
    }

    fn items(&self) -> Schema {
        self.schema.items().unwrap_or_else(Schema::any)
    }
}

fn merge_map(
    mut original: Map<String, Value>,
    mut patch: Map<String, Value>,
    schema: &Schema,
) -> Result<Map<String, Value>, SmpError> {
    if let Some(directive) = patch.get(DIRECTIVE) {
        return match directive.as_str() {
            Some("replace") => {
                patch.remove(DIRECTIVE);
                Ok(patch)
            }
            Some("delete") => Ok(Map::new()),
            _ => Err(bad_patch_type(directive, &patch)),
        };
    }
    retain_keys(&mut original, &mut patch)?;

    let mut orders = Map::new();
    let mut deletions = Vec::new();
    for key in patch.keys().cloned().collect::<Vec<_>>() {
        if let Some(field) = key.strip_prefix(SET_ELEMENT_ORDER) {
            let Some(Value::Array(order)) = patch.remove(&key) else {
                return Err(SmpError::BadRequest("invalid patch format of setElementOrder list"));
            };
            orders.insert(field.to_string(), Value::Array(order));
        } else if let Some(field) = key.strip_prefix(DELETE_FROM_PRIMITIVE_LIST) {
            let Some(Value::Array(values)) = patch.remove(&key) else {
                return Err(SmpError::BadRequest("invalid patch format of primitive list"));
            };
            deletions.push((field.to_string(), values));
        }
    }
    for (field, values) in deletions {
        if let Some(Value::Array(list)) = original.get_mut(&field) {
            list.retain(|v| !values.contains(v));
        }
    }

    for (key, patch_value) in patch {
        if patch_value.is_null() {
            original.remove(&key);
            continue;
        }
        let meta = FieldMeta::of(schema, &key);
        let order = orders.get(&key).and_then(Value::as_array);
        let merged = match (original.remove(&key), patch_value) {
            (Some(Value::Object(o)), Value::Object(p)) if !meta.has("replace") => {
                Value::Object(merge_map(o, p, &meta.schema)?)
            }
            (Some(Value::Array(o)), Value::Array(p)) if meta.has("merge") => {
                Value::Array(merge_list(o, p, &meta, &key, order)?)
            }
            // A value that is new here (or of another type) still loses its nulls and directives.
            (o, Value::Object(p)) if !matches!(o, Some(Value::Object(_))) => {
                Value::Object(merge_map(Map::new(), p, &meta.schema)?)
            }
            (o, Value::Array(p)) if meta.has("merge") && !matches!(o, Some(Value::Array(_))) => {
                Value::Array(merge_list(vec![], p, &meta, &key, order)?)
            }
            (_, p) => p,
        };
        original.insert(key, merged);
    }

    // A `$setElementOrder` for a list the patch does not otherwise touch only reorders it.
    for (field, order) in orders {
        if let (Some(Value::Array(list)), Some(order)) = (original.get(&field), order.as_array()) {
            let meta = FieldMeta::of(schema, &field);
            let reordered = order_list(list.clone(), vec![], order, list, meta.merge_key.as_deref())?;
            original.insert(field, Value::Array(reordered));
        }
    }
    Ok(original)
}

/// `$retainKeys`: keys of the original not listed go; a patch key not listed is invalid.
fn retain_keys(original: &mut Map<String, Value>, patch: &mut Map<String, Value>) -> Result<(), SmpError> {
    let Some(retain) = patch.remove(RETAIN_KEYS) else {
        return Ok(());
    };
    let keys: Vec<&str> = match &retain {
        Value::Array(items) => items
            .iter()
            .map(Value::as_str)
            .collect::<Option<Vec<_>>>()
            .ok_or(SmpError::BadRequest("invalid patch format of retainKeys"))?,
        _ => return Err(SmpError::BadRequest("invalid patch format of retainKeys")),
    };
    let outside = patch.iter().any(|(k, v)| {
        !v.is_null()
            && !k.starts_with(DELETE_FROM_PRIMITIVE_LIST)
            && !k.starts_with(SET_ELEMENT_ORDER)
            && !keys.contains(&k.as_str())
    });
    if outside {
        return Err(SmpError::Rejected);
    }
    original.retain(|k, _| keys.contains(&k.as_str()));
    Ok(())
}

fn merge_list(
    original: Vec<Value>,
    patch: Vec<Value>,
    meta: &FieldMeta,
    field: &str,
    order: Option<&Vec<Value>>,
) -> Result<Vec<Value>, SmpError> {
    if original.is_empty() && patch.is_empty() {
        return Ok(original);
    }
    if original.iter().chain(&patch).any(Value::is_array) {
        return Err(SmpError::Rejected);
    }
    let maps = original.iter().chain(&patch).any(Value::is_object);
    if !maps {
        let mut merged: Vec<Value> = Vec::with_capacity(original.len() + patch.len());
        for v in original.iter().chain(&patch) {
            if !merged.contains(v) {
                merged.push(v.clone());
            }
        }
        let (in_patch, server_only) = merged.into_iter().partition(|v| patch.contains(v));
        return order_list(in_patch, server_only, order.unwrap_or(&patch), &original, None);
    }
    let Some(key) = meta.merge_key.as_deref() else {
        return Err(SmpError::Internal(format!(
            "cannot merge lists without merge key for {field}"
        )));
    };
    let (original, patch) = special_elements(original, patch, key)?;
    let mut merged = original.clone();
    for item in &patch {
        let Value::Object(fields) = item else {
            return Err(SmpError::Internal(format!(
                "{} does not contain declared merge key: {key}",
                go_fmt(item)
            )));
        };
        let Some(wanted) = fields.get(key) else {
            return Err(no_merge_key(item, key));
        };
        match merged.iter().position(|o| o.get(key) == Some(wanted)) {
            Some(i) => {
                let existing = match merged[i].take() {
                    Value::Object(m) => m,
                    _ => Map::new(),
                };
                merged[i] = Value::Object(merge_map(existing, fields.clone(), &meta.items())?);
            }
            None => merged.push(Value::Object(merge_map(Map::new(), fields.clone(), &meta.items())?)),
        }
    }
    let in_patch_keys: Vec<&Value> = patch.iter().filter_map(|p| p.get(key)).collect();
    let (in_patch, server_only): (Vec<Value>, Vec<Value>) = merged
        .into_iter()
        .partition(|m| m.get(key).is_some_and(|k| in_patch_keys.contains(&k)));
    order_list(in_patch, server_only, order.unwrap_or(&patch), &original, Some(key))
}

/// Applies `$patch` list items: `delete` drops the original item with that key, `replace`
/// makes the rest of the patch the whole list.
fn special_elements(
    mut original: Vec<Value>,
    patch: Vec<Value>,
    key: &str,
) -> Result<(Vec<Value>, Vec<Value>), SmpError> {
    let mut plain = Vec::with_capacity(patch.len());
    let mut replace = false;
    for item in patch {
        let Some(directive) = item.get(DIRECTIVE) else {
            plain.push(item);
            continue;
        };
        match directive.as_str() {
            Some("delete") => {
                let Some(wanted) = item.get(key) else {
                    return Err(no_merge_key(&item, key));
                };
                original.retain(|o| o.get(key) != Some(wanted));
            }
            Some("replace") => replace = true,
            Some("merge") => {
                return Err(SmpError::Internal(
                    "merging lists cannot yet be specified in the patch".into(),
                ));
            }
            _ => return Err(bad_patch_type(directive, item.as_object().unwrap_or(&Map::new()))),
        }
    }
    if replace {
        return Ok((plain, vec![]));
    }
    Ok((original, plain))
}

/// Orders a merged list as apimachinery does: the patch's items in `patch_order`, the
/// server-only items in their live order, interleaved where the live list relates them.
fn order_list(
    mut in_patch: Vec<Value>,
    server_only: Vec<Value>,
    patch_order: &[Value],
    live: &[Value],
    key: Option<&str>,
) -> Result<Vec<Value>, SmpError> {
    let identity = |v: &Value| -> Value {
        match key {
            Some(k) => v.get(k).cloned().unwrap_or(Value::Null),
            None => v.clone(),
        }
    };
    let position = |list: &[Value], v: &Value| list.iter().position(|x| identity(x) == identity(v));
    in_patch.sort_by_key(|v| position(patch_order, v).unwrap_or(usize::MAX));

    let mut out = Vec::with_capacity(in_patch.len() + server_only.len());
    let (mut left, mut right) = (server_only.into_iter().peekable(), in_patch.into_iter().peekable());
    loop {
        let take_left = match (left.peek(), right.peek()) {
            (None, None) => break,
            (Some(_), None) => true,
            (None, Some(_)) => false,
            (Some(l), Some(r)) => matches!((position(live, l), position(live, r)), (Some(li), Some(ri)) if li < ri),
        };
        let next = if take_left { left.next() } else { right.next() };
        out.extend(next);
    }
    Ok(out)
}

fn bad_patch_type(directive: &Value, map: &Map<String, Value>) -> SmpError {
    SmpError::Internal(format!(
        "unknown patch type: {} in map: {}",
        go_fmt(directive),
        go_fmt(&Value::Object(map.clone()))
    ))
}

fn no_merge_key(item: &Value, key: &str) -> SmpError {
    SmpError::Internal(format!(
        "map: {} does not contain declared merge key: {key}",
        go_fmt(item)
    ))
}

/// A value as Go's `%v` prints the decoded JSON (`map[a:1 b:[x y]]`).
fn go_fmt(v: &Value) -> String {
    match v {
        Value::Null => "<nil>".into(),
        Value::String(s) => s.clone(),
        Value::Array(items) => format!("[{}]", items.iter().map(go_fmt).collect::<Vec<_>>().join(" ")),
        Value::Object(fields) => format!(
            "map[{}]",
            fields
                .iter()
                .map(|(k, v)| format!("{k}:{}", go_fmt(v)))
                .collect::<Vec<_>>()
                .join(" ")
        ),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    fn pod_schema() -> Schema {
        let named_list = |items: Value| {
            json!({
                "type": "array", "items": items,
                "x-kubernetes-patch-strategy": "merge", "x-kubernetes-patch-merge-key": "name",
            })
        };
        let env = named_list(
            json!({"type": "object", "properties": {"name": {"type": "string"}, "value": {"type": "string"}}}),
        );
        let container = json!({"type": "object", "properties": {
            "name": {"type": "string"}, "image": {"type": "string"}, "env": env,
            "args": {"type": "array", "items": {"type": "string"}},
        }});
        let mut volumes = named_list(json!({"type": "object", "properties": {
            "name": {"type": "string"}, "configMap": {"type": "object"}, "secret": {"type": "object"},
        }}));
        volumes["x-kubernetes-patch-strategy"] = json!("merge,retainKeys");
        Schema::new(
            json!({"type": "object", "properties": {"spec": {"type": "object", "properties": {
                "containers": named_list(container),
                "volumes": volumes,
                "tolerations": {"type": "array", "items": {"type": "object"}},
                "nodeSelector": {"type": "object", "additionalProperties": {"type": "string"}},
            }}}}),
        )
    }

    fn pod(spec: Value) -> Value {
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": spec})
    }

    fn smp(target: &Value, patch: Value) -> Result<Value, Error> {
        let mut out = target.clone();
        strategic_merge_patch(&mut out, &patch, &pod_schema())?;
        Ok(out)
    }

    #[test]
    fn containers_merge_by_name_and_new_ones_follow_the_patch_order() {
        let live = pod(json!({"containers": [{"name": "a", "image": "x"}, {"name": "b", "image": "y"}]}));
        let out = smp(
            &live,
            json!({"spec": {"containers": [{"name": "b", "image": "z"}, {"name": "c", "image": "w"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "a", "image": "x"}, {"name": "b", "image": "z"}, {"name": "c", "image": "w"}])
        );
    }

    #[test]
    fn nested_lists_merge_inside_merged_items() {
        let live = pod(json!({"containers": [{"name": "a", "env": [{"name": "X", "value": "1"}], "args": ["1"]}]}));
        let patch =
            json!({"spec": {"containers": [{"name": "a", "env": [{"name": "Y", "value": "2"}], "args": ["2"]}]}});
        let out = smp(&live, patch).unwrap();
        assert_eq!(
            out["spec"]["containers"][0],
            // New items go before the server-only ones they are not related to (apimachinery prepends).
            json!({"name": "a", "env": [{"name": "Y", "value": "2"}, {"name": "X", "value": "1"}], "args": ["2"]})
        );
    }

    #[test]
    fn null_deletes_and_maps_merge() {
        let live = pod(json!({"nodeSelector": {"a": "1", "b": "2"}}));
        let out = smp(
            &live,
            json!({"spec": {"nodeSelector": {"a": null, "c": "3"}}, "metadata": {"labels": {"x": "y"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["nodeSelector"], json!({"b": "2", "c": "3"}));
        assert_eq!(out["metadata"], json!({"name": "p", "labels": {"x": "y"}}));
    }

    #[test]
    fn lists_without_a_merge_strategy_are_replaced() {
        let live = pod(json!({"tolerations": [{"key": "a"}]}));
        let out = smp(&live, json!({"spec": {"tolerations": [{"key": "b"}]}})).unwrap();
        assert_eq!(out["spec"]["tolerations"], json!([{"key": "b"}]));
    }

    #[test]
    fn patch_delete_removes_a_list_item_and_empties_a_map() {
        let live = pod(json!({"containers": [{"name": "a"}, {"name": "b"}], "nodeSelector": {"a": "1"}}));
        let out = smp(
            &live,
            json!({"spec": {"containers": [{"name": "a", "$patch": "delete"}], "nodeSelector": {"$patch": "delete"}}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "b"}]));
        assert_eq!(out["spec"]["nodeSelector"], json!({}));
    }

    #[test]
    fn patch_replace_replaces_a_list_or_a_map() {
        let live = pod(json!({"containers": [{"name": "a"}, {"name": "b"}], "nodeSelector": {"a": "1"}}));
        let out = smp(
            &live,
            json!({"spec": {
                "containers": [{"name": "c"}, {"$patch": "replace"}],
                "nodeSelector": {"z": "9", "$patch": "replace"},
            }}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "c"}]));
        assert_eq!(out["spec"]["nodeSelector"], json!({"z": "9"}));
    }

    #[test]
    fn finalizers_merge_as_a_set_and_delete_from_primitive_list_removes() {
        let mut live = pod(json!({}));
        live["metadata"]["finalizers"] = json!(["a", "b"]);
        let out = smp(&live, json!({"metadata": {"finalizers": ["c", "a"]}})).unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "a", "b"]));
        let out = smp(
            &out,
            json!({"metadata": {"$deleteFromPrimitiveList/finalizers": ["a"]}}),
        )
        .unwrap();
        assert_eq!(out["metadata"]["finalizers"], json!(["c", "b"]));
    }

    #[test]
    fn owner_references_merge_by_uid() {
        let mut live = pod(json!({}));
        live["metadata"]["ownerReferences"] = json!([{"uid": "1", "name": "a"}]);
        let out = smp(
            &live,
            json!({"metadata": {"ownerReferences": [{"uid": "2", "name": "b"}]}}),
        )
        .unwrap();
        assert_eq!(
            out["metadata"]["ownerReferences"],
            json!([{"uid": "2", "name": "b"}, {"uid": "1", "name": "a"}])
        );
    }

    #[test]
    fn set_element_order_orders_the_merged_list() {
        let live = pod(json!({"containers": [{"name": "a"}, {"name": "b"}]}));
        let patch = json!({"spec": {
            "$setElementOrder/containers": [{"name": "b"}, {"name": "c"}, {"name": "a"}],
            "containers": [{"name": "c"}],
        }});
        let out = smp(&live, patch).unwrap();
        assert_eq!(
            out["spec"]["containers"],
            json!([{"name": "b"}, {"name": "c"}, {"name": "a"}])
        );
        let reorder_only = smp(
            &live,
            json!({"spec": {"$setElementOrder/containers": [{"name": "b"}, {"name": "a"}]}}),
        )
        .unwrap();
        assert_eq!(
            reorder_only["spec"]["containers"],
            json!([{"name": "b"}, {"name": "a"}])
        );
    }

    #[test]
    fn retain_keys_drops_unlisted_fields() {
        let live = pod(json!({"volumes": [{"name": "v", "configMap": {"name": "c"}}]}));
        let patch = json!({"spec": {"volumes": [{"name": "v", "secret": {"secretName": "s"}, "$retainKeys": ["name", "secret"]}]}});
        let out = smp(&live, patch).unwrap();
        assert_eq!(
            out["spec"]["volumes"],
            json!([{"name": "v", "secret": {"secretName": "s"}}])
        );
    }

    #[test]
    fn directives_inside_new_subtrees_are_not_stored() {
        let out = smp(
            &pod(json!({})),
            json!({"spec": {"containers": [{"name": "a"}, {"$patch": "replace"}]}}),
        )
        .unwrap();
        assert_eq!(out["spec"]["containers"], json!([{"name": "a"}]));
    }

    #[test]
    fn malformed_patches_fail_with_kube_apiserver_codes() {
        let live = pod(json!({"containers": [{"name": "a"}]}));
        let unknown = smp(&live, json!({"spec": {"nodeSelector": {"$patch": "explode"}}})).unwrap_err();
        assert_eq!(unknown.code(), 500);
        assert_eq!(
            unknown.to_string(),
            "unknown patch type: explode in map: map[$patch:explode]"
        );

        let no_key = smp(&live, json!({"spec": {"containers": [{"image": "x"}]}})).unwrap_err();
        assert_eq!(
            no_key.to_string(),
            "map: map[image:x] does not contain declared merge key: name"
        );

        let retain = smp(&live, json!({"spec": {"$retainKeys": ["containers"], "volumes": []}})).unwrap_err();
        assert_eq!((retain.code(), retain.to_string()), (422, REJECTED.to_string()));

        let bad_list = smp(&live, json!({"metadata": {"$deleteFromPrimitiveList/finalizers": "a"}})).unwrap_err();
        assert_eq!(
            (bad_list.code(), bad_list.to_string()),
            (400, "invalid patch format of primitive list".to_string())
        );

        assert_eq!(smp(&live, json!([1])).unwrap_err().code(), 400);
    }

    #[test]
    fn json_patch_applies_or_fails_with_a_bare_422_leaving_the_target() {
        let mut target = json!({"spec": {"replicas": 1}});
        let ok: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/spec/replicas", "value": 1},
            {"op": "replace", "path": "/spec/replicas", "value": 2},
            {"op": "add", "path": "/spec/image", "value": "x"},
        ]))
        .unwrap();
        json_patch(&mut target, &ok).unwrap();
        assert_eq!(target, json!({"spec": {"replicas": 2, "image": "x"}}));

        let failing: json_patch::Patch = serde_json::from_value(json!([
            {"op": "remove", "path": "/spec/image"},
            {"op": "test", "path": "/spec/replicas", "value": 7},
        ]))
        .unwrap();
        let err = json_patch(&mut target, &failing).unwrap_err();
        assert!(matches!(&err, Error::Invalid { causes, .. } if causes.is_empty()));
        assert_eq!(err.to_string(), REJECTED);
        assert_eq!(target, json!({"spec": {"replicas": 2, "image": "x"}}));

        let missing: json_patch::Patch =
            serde_json::from_value(json!([{"op": "replace", "path": "/spec/nope/x", "value": 1}])).unwrap();
        assert_eq!(json_patch(&mut target, &missing).unwrap_err().code(), 422);
    }

    fn arb_tree() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<i64>().prop_map(Value::from),
            "[a-z]{0,3}".prop_map(Value::from)
        ];
        leaf.prop_recursive(3, 24, 4, |inner| {
            proptest::collection::btree_map("[a-d]", inner, 0..4).prop_map(|m| Value::Object(m.into_iter().collect()))
        })
    }

    proptest! {
        #[test]
        fn strategic_merge_of_list_free_maps_equals_json_merge_patch(target in arb_tree(), patch in arb_tree()) {
            prop_assume!(target.is_object() && patch.is_object());
            let mut by_smp = target.clone();
            strategic_merge_patch(&mut by_smp, &patch, &Schema::any()).unwrap();
            let mut by_merge = target.clone();
            merge_patch(&mut by_merge, &patch);
            prop_assert_eq!(by_smp, by_merge);
        }
    }

    #[test]
    fn merge_patch_deletes_with_null() {
        let mut target = json!({"a": 1, "b": {"c": 2}});
        merge_patch(&mut target, &json!({"a": null, "b": {"d": 3}}));
        assert_eq!(target, json!({"b": {"c": 2, "d": 3}}));
    }
}
