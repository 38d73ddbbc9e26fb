//! Small accessors for `metadata` on JSON objects.

use serde_json::{Map, Value, json};

/// A string field of `metadata`.
pub fn get_str<'a>(obj: &'a Value, field: &str) -> Option<&'a str> {
    obj.get("metadata")?.get(field)?.as_str().filter(|s| !s.is_empty())
}

/// The object's name.
pub fn name(obj: &Value) -> Option<&str> {
    get_str(obj, "name")
}

/// The object's namespace.
pub fn namespace(obj: &Value) -> Option<&str> {
    get_str(obj, "namespace")
}

/// The object's uid.
pub fn uid(obj: &Value) -> Option<&str> {
    get_str(obj, "uid")
}

/// The object's resourceVersion.
pub fn resource_version(obj: &Value) -> Option<&str> {
    get_str(obj, "resourceVersion")
}

/// Whether deletion has started.
pub fn is_terminating(obj: &Value) -> bool {
    get_str(obj, "deletionTimestamp").is_some()
}

/// The object's finalizers.
pub fn finalizers(obj: &Value) -> Vec<String> {
    obj.pointer("/metadata/finalizers")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
        .unwrap_or_default()
}

/// The object's ownerReferences.
pub fn owner_references(obj: &Value) -> Vec<Value> {
    obj.pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default()
}

/// `metadata` as a mutable map, created if missing.
pub fn metadata_mut(obj: &mut Value) -> &mut Map<String, Value> {
    if !obj.is_object() {
        *obj = json!({});
    }
    let map = obj.as_object_mut().expect("object ensured above");
    let meta = map.entry("metadata").or_insert_with(|| json!({}));
    if !meta.is_object() {
        *meta = json!({});
    }
    meta.as_object_mut().expect("object ensured above")
}

/// Sets (or with `None` removes) a metadata field.
pub fn set(obj: &mut Value, field: &str, value: Option<Value>) {
    let meta = metadata_mut(obj);
    match value {
        Some(v) => {
            meta.insert(field.to_string(), v);
        }
        None => {
            meta.remove(field);
        }
    }
}

/// Sets the finalizers, removing the field when empty (as the apiserver stores it).
pub fn set_finalizers(obj: &mut Value, finalizers: &[String]) {
    let value = (!finalizers.is_empty()).then(|| json!(finalizers));
    set(obj, "finalizers", value);
}

/// The metadata lists and maps kube-apiserver never stores empty (`omitempty` on ObjectMeta).
const OMITTED_WHEN_EMPTY: [&str; 3] = ["labels", "annotations", "finalizers"];

/// Removes the metadata fields kube-apiserver omits when empty or null, whichever write (create,
/// update, patch, apply) emptied them.
pub fn omit_empty(obj: &mut Value) {
    let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) else {
        return;
    };
    for field in OMITTED_WHEN_EMPTY {
        let empty = match meta.get(field) {
            Some(Value::Null) => true,
            Some(Value::Object(map)) => map.is_empty(),
            Some(Value::Array(list)) => list.is_empty(),
            _ => false,
        };
        if empty {
            meta.remove(field);
        }
    }
}

/// The object without what a write never compares: its resourceVersion and the times of its
/// managedFields entries. As kube-apiserver does, a write that changes nothing but those times
/// is a no-op, while one that changes who owns what (an apply adding its entry to fields
/// another manager set to the same values, a patch removing an entry) is stored.
pub fn comparable(obj: &Value) -> Value {
    let mut copy = obj.clone();
    if let Some(meta) = copy.get_mut("metadata").and_then(Value::as_object_mut) {
        meta.remove("resourceVersion");
        if let Some(entries) = meta.get_mut("managedFields").and_then(Value::as_array_mut) {
            for entry in entries.iter_mut().filter_map(Value::as_object_mut) {
                entry.remove("time");
            }
        }
    }
    copy
}
