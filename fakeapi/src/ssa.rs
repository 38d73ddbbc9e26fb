//! Server-side apply: per-manager field ownership in `metadata.managedFields` (fieldsV1),
//! list-map merge, removal of fields dropped from a re-apply, conflicts and force.
//!
//! This follows kube-apiserver's field manager over structured-merge-diff: the applier's set
//! is the field set of its configuration; the configuration is merged into the live object;
//! fields the applier owned before, no longer applies and nobody else owns are pruned; fields
//! whose value the write changes are taken from every other manager (a conflict unless
//! `force`); and `apiVersion`, `kind` and the server-set metadata are never owned.

mod fieldset;
mod managed;
mod typed;

use kbind_cluster::Error;
use kbind_cluster::error::Cause;
use serde_json::{Value, json};

use crate::schema::Schema;
use fieldset::FieldSet;
use managed::Entry;
use typed::Comparison;

/// What a write did, for the managedFields entry it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A server-side apply.
    Apply,
    /// Any other write (create, update, patch).
    Update,
}

/// Metadata the server sets: dropped from an apply configuration before the merge (the caller
/// keeps the live values; `resourceVersion` is a precondition, see [`precondition`]).
const SERVER_SET_METADATA: [&str; 8] = [
    "managedFields",
    "resourceVersion",
    "uid",
    "creationTimestamp",
    "generation",
    "selfLink",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
];

/// Paths no manager ever owns (kube-apiserver's strip-meta manager).
const NEVER_OWNED: [&[&str]; 12] = [
    &["apiVersion"],
    &["kind"],
    &["metadata"],
    &["metadata", "name"],
    &["metadata", "namespace"],
    &["metadata", "creationTimestamp"],
    &["metadata", "selfLink"],
    &["metadata", "uid"],
    &["metadata", "clusterName"],
    &["metadata", "generation"],
    &["metadata", "managedFields"],
    &["metadata", "resourceVersion"],
];

fn never_owned() -> FieldSet {
    let mut set = FieldSet::new();
    for path in NEVER_OWNED {
        let elems: Vec<String> = path.iter().map(|f| fieldset::field(f)).collect();
        set.insert(&elems);
    }
    set
}

/// The schema of `ObjectMeta` as server-side apply sees it: labels and annotations are
/// granular maps, finalizers a set, ownerReferences a list-map keyed by uid with atomic items.
fn object_meta_schema() -> Value {
    let string = json!({"type": "string"});
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string"}});
    json!({
        "type": "object",
        "properties": {
            "name": string, "namespace": string, "generateName": string, "uid": string,
            "resourceVersion": string, "selfLink": string, "creationTimestamp": string,
            "deletionTimestamp": string,
            "generation": {"type": "integer"},
            "deletionGracePeriodSeconds": {"type": "integer"},
            "labels": string_map, "annotations": string_map,
            "finalizers": {
                "type": "array", "items": string,
                "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge",
            },
            "ownerReferences": {
                "type": "array",
                "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-patch-merge-key": "uid", "x-kubernetes-patch-strategy": "merge",
                "items": {
                    "type": "object", "x-kubernetes-map-type": "atomic",
                    "properties": {
                        "apiVersion": string, "kind": string, "name": string, "uid": string,
                        "controller": {"type": "boolean"}, "blockOwnerDeletion": {"type": "boolean"},
                    },
                },
            },
            "managedFields": {"type": "array", "items": {"type": "object", "x-kubernetes-map-type": "atomic"}},
        },
    })
}

/// The schema of a whole object: `schema` with `apiVersion`, `kind` and the standard
/// `metadata` (kube-apiserver uses `ObjectMeta` whatever a CRD declares there).
pub(crate) fn object_schema(schema: &Schema) -> Schema {
    let mut raw = schema.raw().clone();
    if let Value::Object(root) = &mut raw {
        let props = root.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(props) = props {
            props.insert("metadata".into(), object_meta_schema());
            props.entry("apiVersion").or_insert_with(|| json!({"type": "string"}));
            props.entry("kind").or_insert_with(|| json!({"type": "string"}));
        }
    }
    Schema::new(raw)
}

/// Checks an apply body's `metadata.uid` against the live object as kube-apiserver's update
/// validation does: a different UID is a 422 (`metadata.uid` is immutable), so an apply that
/// names the object it means never lands on one that replaced it. `kind` names the object in the
/// message. Checked after [`precondition`], as kube checks the resourceVersion first.
pub fn uid_unchanged(live: &Value, applied: &Value, kind: &str) -> Result<(), Error> {
    let wanted = applied.pointer("/metadata/uid").and_then(Value::as_str);
    let current = live.pointer("/metadata/uid").and_then(Value::as_str);
    match wanted {
        Some(uid) if !uid.is_empty() && Some(uid) != current => {
            let name = live
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Err(Error::invalid(
                kind,
                name,
                vec![crate::schema::invalid(
                    "metadata.uid",
                    &Value::from(uid),
                    "field is immutable",
                )],
            ))
        }
        _ => Ok(()),
    }
}

/// The 409 of an apply that names a UID where no object exists (kube-apiserver's wording): it
/// meant an object that has gone, so nothing is created.
pub fn uid_of_a_missing_object(applied: &Value, resource: &str, name: &str) -> Option<Error> {
    let uid = applied
        .pointer("/metadata/uid")
        .and_then(Value::as_str)
        .filter(|uid| !uid.is_empty())?;
    Some(Error::Conflict {
        message: format!(
            "Operation cannot be fulfilled on {resource} \"{name}\": uid mismatch: the provided object specified uid {uid}, and no existing object was found"
        ),
        causes: vec![],
    })
}

/// Checks an apply body's `metadata.resourceVersion` (a precondition when set) against the
/// live object; a mismatch is the stale-write 409 for `resource` (e.g. `widgets.example.org`).
/// [`apply`] does not check it: the caller does, before applying.
pub fn precondition(live: &Value, applied: &Value, resource: &str) -> Result<(), Error> {
    let wanted = applied.pointer("/metadata/resourceVersion").and_then(Value::as_str);
    let current = live.pointer("/metadata/resourceVersion").and_then(Value::as_str);
    match wanted {
        Some(rv) if !rv.is_empty() && Some(rv) != current => {
            let name = live
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default();
            Err(Error::stale(resource, name))
        }
        _ => Ok(()),
    }
}

/// Applies `applied` (a partial object) as `manager` over `live` (`None`: the object is new).
/// Returns the merged object with `metadata.managedFields` updated; a field owned by another
/// manager with a different value is a 409 with one cause per field unless `force`.
/// `subresource` is `""` or `"status"`; `now` is the RFC 3339 time recorded in the entry.
///
/// Through `"status"` only the configuration's `.status` counts. On the main resource the
/// configuration is taken as given: a caller serving a status subresource strips `.status`
/// first. Server-set metadata (uid, resourceVersion, creationTimestamp, generation, ...) in
/// the configuration is ignored; the caller restores the live values and checks
/// [`precondition`]. An apply that changes nothing leaves the entry's time alone.
pub fn apply(
    live: Option<&Value>,
    applied: &Value,
    manager: &str,
    force: bool,
    schema: &Schema,
    subresource: &str,
    now: &str,
) -> Result<Value, Error> {
    if !applied.is_object() {
        return Err(Error::BadRequest {
            message: "the body of an apply patch must be a JSON object".into(),
        });
    }
    let root = object_schema(schema);
    let config = apply_configuration(applied, subresource);
    let api_version = text(&config, "/apiVersion");
    let mut entries = match live {
        Some(l) => managed::decode(l).map_err(|e| internal(format!("failed to decode managed fields: {e}")))?,
        None => vec![],
    };
    let mut live_obj = live.cloned().unwrap_or_else(|| empty_object(&config));
    managed::strip(&mut live_obj);

    let config_set = typed::fields_of(&config, &root).map_err(|e| typed_patch_error(&config, &e))?;
    let merged = typed::merge(&live_obj, &config, &root);

    let me = match entries
        .iter()
        .position(|e| e.is(manager, Operation::Apply, &api_version, subresource))
    {
        Some(i) => i,
        None => {
            entries.push(Entry {
                manager: manager.to_string(),
                operation: Operation::Apply,
                api_version: api_version.clone(),
                time: None,
                subresource: subresource.to_string(),
                fields: FieldSet::new(),
            });
            entries.len() - 1
        }
    };
    let last_set = std::mem::replace(&mut entries[me].fields, config_set.difference(&never_owned()));
    entries[me].api_version = api_version;

    let pruned = prune(&merged, &entries, &last_set, &root);
    let cmp = typed::compare(Some(&live_obj), Some(&pruned), &root);
    if let Err(conflicts) = settle(&mut entries, Some(me), &cmp, force) {
        return Err(conflict_error(&entries, &conflicts));
    }
    if pruned != live_obj {
        entries[me].time = Some(now.to_string());
    }
    let mut out = pruned;
    finish(&mut out, &mut entries);
    Ok(out)
}

/// Records a non-apply write by `manager` in `new`'s managedFields: the fields that changed
/// from `old` become the manager's (operation Update) and leave every other manager.
///
/// As kube-apiserver does, managedFields sent in `new` replace the live ones (main resource
/// only; an empty list keeps the live ones) and a list of one empty entry wipes them all.
pub fn record_update(
    old: Option<&Value>,
    new: &mut Value,
    manager: &str,
    schema: &Schema,
    subresource: &str,
    now: &str,
) {
    if managed::is_reset(new) {
        managed::strip(new);
        return;
    }
    let root = object_schema(schema);
    let sent = match subresource {
        "" => managed::decode(new).ok().filter(|e| !e.is_empty()),
        _ => None,
    };
    // A live object whose managedFields do not decode loses them, as kube-apiserver resets them.
    let mut entries = sent
        .or_else(|| old.and_then(|o| managed::decode(o).ok()))
        .unwrap_or_default();
    let api_version = text(new, "/apiVersion");
    let mut old_obj = old.cloned().unwrap_or_else(|| empty_object(new));
    managed::strip(&mut old_obj);
    let mut new_obj = new.clone();
    managed::strip(&mut new_obj);

    let cmp = typed::compare(Some(&old_obj), Some(&new_obj), &root);
    // Forced: an update takes what it changed from everyone, so this cannot fail.
    let _ = settle(&mut entries, None, &cmp, true);
    let changed = cmp.changed().difference(&never_owned());
    if !changed.is_empty() {
        match entries
            .iter_mut()
            .find(|e| e.is(manager, Operation::Update, &api_version, subresource))
        {
            Some(entry) => {
                entry.fields = entry.fields.union(&changed);
                entry.time = Some(now.to_string());
            }
            None => entries.push(Entry {
                manager: manager.to_string(),
                operation: Operation::Update,
                api_version,
                time: Some(now.to_string()),
                subresource: subresource.to_string(),
                fields: changed,
            }),
        }
        managed::cap_update_managers(&mut entries);
    }
    finish(new, &mut entries);
}

/// The configuration an apply merges: without server-set metadata, and through the status
/// subresource only the object's identity and `.status`.
fn apply_configuration(applied: &Value, subresource: &str) -> Value {
    let mut config = applied.clone();
    if let Some(Value::Object(meta)) = config.get_mut("metadata") {
        for field in SERVER_SET_METADATA {
            meta.remove(field);
        }
    }
    if subresource != "status" {
        return config;
    }
    let mut only_status = serde_json::Map::new();
    for field in ["apiVersion", "kind", "status"] {
        if let Some(v) = config.get(field) {
            only_status.insert(field.into(), v.clone());
        }
    }
    let mut meta = serde_json::Map::new();
    for field in ["name", "namespace"] {
        if let Some(v) = config.get("metadata").and_then(|m| m.get(field)) {
            meta.insert(field.into(), v.clone());
        }
    }
    if !meta.is_empty() {
        only_status.insert("metadata".into(), Value::Object(meta));
    }
    Value::Object(only_status)
}

/// What a new object is compared against: the empty object of its kind.
fn empty_object(obj: &Value) -> Value {
    let mut out = serde_json::Map::new();
    for field in ["apiVersion", "kind"] {
        if let Some(v) = obj.get(field) {
            out.insert(field.into(), v.clone());
        }
    }
    Value::Object(out)
}

/// Removes what the applier owned before, no longer applies, and nobody else owns (SMD's
/// prune: remove the last set, add back what anyone owns, and only ever remove paths that were
/// in the last set).
fn prune(merged: &Value, entries: &[Entry], last: &FieldSet, root: &Schema) -> Value {
    if last.is_empty() {
        return merged.clone();
    }
    let named = |s: &FieldSet| typed::with_named_fields(s, root);
    let fields = |v: &Value| named(&typed::fields_of_live(v, root));
    let last = named(last);
    let managed = named(&entries.iter().fold(FieldSet::new(), |acc, e| acc.union(&e.fields)));
    let merged_set = fields(merged);

    let without_last = typed::remove_paths(merged, &last, root);
    let unowned_removed = merged_set.difference(&fields(&without_last).union(&managed));
    let owned_back = typed::remove_paths(merged, &unowned_removed, root);
    let to_remove = merged_set.difference(&fields(&owned_back)).intersection(&last);
    typed::remove_paths(merged, &to_remove, root)
}

/// Takes what `cmp` changed from every manager but `writer` and drops what it removed.
/// Without `force`, fields other managers own that the write changes are returned instead.
fn settle(
    entries: &mut [Entry],
    writer: Option<usize>,
    cmp: &Comparison,
    force: bool,
) -> Result<(), Vec<(usize, FieldSet)>> {
    let changed = cmp.changed();
    let conflicts: Vec<(usize, FieldSet)> = entries
        .iter()
        .enumerate()
        .filter(|(i, _)| Some(*i) != writer)
        .map(|(i, e)| (i, e.fields.intersection(&changed)))
        .filter(|(_, c)| !c.is_empty())
        .collect();
    if !force && !conflicts.is_empty() {
        return Err(conflicts);
    }
    for (i, entry) in entries.iter_mut().enumerate() {
        if Some(i) != writer {
            entry.fields = entry.fields.difference(&changed).difference(&cmp.removed);
        }
    }
    Ok(())
}

/// Strips never-owned paths from every entry and writes the entries into `obj`.
fn finish(obj: &mut Value, entries: &mut [Entry]) {
    let never = never_owned();
    for entry in entries.iter_mut() {
        entry.fields = entry.fields.difference(&never);
    }
    managed::encode(obj, entries);
}

/// The 409 kube-apiserver answers for apply conflicts: one cause per field, and a message
/// listing them grouped by manager.
fn conflict_error(entries: &[Entry], conflicts: &[(usize, FieldSet)]) -> Error {
    let mut by_manager: Vec<(&Entry, Vec<String>)> = conflicts
        .iter()
        .map(|(i, set)| {
            let paths = set.paths().iter().map(|p| fieldset::display_path(p)).collect();
            (&entries[*i], paths)
        })
        .collect();
    by_manager.sort_by_key(|(e, _)| e.identifier());
    let causes: Vec<Cause> = by_manager
        .iter()
        .flat_map(|(e, paths)| {
            paths.iter().map(|p| Cause {
                reason: "FieldManagerConflict".into(),
                message: format!("conflict with {}", e.display()),
                field: p.clone(),
            })
        })
        .collect();
    let message = match (causes.len(), by_manager.first()) {
        (1, Some((e, paths))) => format!(
            "Apply failed with 1 conflict: conflict with {}: {}",
            e.display(),
            paths[0]
        ),
        (n, _) => {
            let lines: Vec<String> = by_manager
                .iter()
                .flat_map(|(e, paths)| {
                    std::iter::once(format!("conflicts with {}:", e.display()))
                        .chain(paths.iter().map(|p| format!("- {p}")))
                })
                .collect();
            format!("Apply failed with {n} conflicts: {}", lines.join("\n"))
        }
    };
    Error::Conflict { message, causes }
}

/// The 500 kube-apiserver answers when a configuration does not fit the schema's topology
/// (a list-map item without its key, duplicate keys).
fn typed_patch_error(config: &Value, err: &typed::TypedError) -> Error {
    let api_version = text(config, "/apiVersion");
    let group_version = if api_version.contains('/') {
        api_version
    } else {
        format!("/{api_version}")
    };
    internal(format!(
        "failed to create typed patch object ({}/{}; {}, Kind={}): {err}",
        text(config, "/metadata/namespace"),
        text(config, "/metadata/name"),
        group_version,
        text(config, "/kind"),
    ))
}

/// A 500 for an error kube-apiserver does not turn into a status (reason unknown).
fn internal(message: String) -> Error {
    Error::Server {
        code: 500,
        reason: String::new(),
        message,
    }
}

fn text(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use serde_json::json;

    use super::*;

    const T1: &str = "2025-01-01T00:00:00Z";
    const T2: &str = "2025-01-01T00:01:00Z";

    fn widget_schema() -> Schema {
        Schema::new(json!({
            "type": "object",
            "properties": {
                "spec": {"type": "object", "properties": {
                    "replicas": {"type": "integer"},
                    "image": {"type": "string"},
                    "containers": {
                        "type": "array",
                        "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"],
                        "items": {"type": "object", "properties": {
                            "name": {"type": "string"}, "image": {"type": "string"},
                        }},
                    },
                    "tags": {"type": "array", "x-kubernetes-list-type": "set", "items": {"type": "string"}},
                    "args": {"type": "array", "items": {"type": "string"}},
                    "selector": {
                        "type": "object", "x-kubernetes-map-type": "atomic",
                        "additionalProperties": {"type": "string"},
                    },
                    "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                }},
                "status": {"type": "object", "properties": {"phase": {"type": "string"}}},
            },
        }))
    }

    fn widget(spec: Value) -> Value {
        json!({
            "apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "ns"},
            "spec": spec,
        })
    }

    fn apply_as(live: Option<&Value>, body: &Value, manager: &str, force: bool) -> Result<Value, Error> {
        apply(live, body, manager, force, &widget_schema(), "", T1)
    }

    fn entry<'a>(obj: &'a Value, manager: &str) -> Option<&'a Value> {
        obj.pointer("/metadata/managedFields")?
            .as_array()?
            .iter()
            .find(|e| e["manager"] == manager)
    }

    fn fields(obj: &Value, manager: &str) -> Value {
        entry(obj, manager)
            .map(|e| e["fieldsV1"].clone())
            .unwrap_or(Value::Null)
    }

    fn conflict(err: Error) -> (String, Vec<Cause>) {
        match err {
            Error::Conflict { message, causes } => (message, causes),
            other => panic!("expected a conflict, got {other:?}"),
        }
    }

    #[test]
    fn apply_creates_the_object_and_records_an_apply_entry() {
        let mut body = widget(json!({"replicas": 1, "containers": [{"name": "a", "image": "x"}]}));
        body["metadata"]["labels"] = json!({"app": "w"});
        let out = apply_as(None, &body, "kbind", false).unwrap();

        assert_eq!(out["spec"], body["spec"]);
        assert_eq!(out["metadata"]["labels"], json!({"app": "w"}));
        assert_eq!(
            out["metadata"]["managedFields"],
            json!([{
                "manager": "kbind", "operation": "Apply", "apiVersion": "example.org/v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {"f:app": {}}},
                    "f:spec": {
                        "f:replicas": {},
                        "f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}}},
                    },
                },
            }])
        );
    }

    #[test]
    fn applying_the_same_body_twice_changes_nothing() {
        let body = widget(json!({"replicas": 1, "tags": ["a"]}));
        let once = apply_as(None, &body, "kbind", false).unwrap();
        let twice = apply(Some(&once), &body, "kbind", false, &widget_schema(), "", T2).unwrap();
        assert_eq!(once, twice);
    }

    #[test]
    fn server_set_metadata_and_identity_are_never_owned() {
        let mut body = widget(json!({"replicas": 1}));
        body["metadata"]["uid"] = json!("u1");
        body["metadata"]["resourceVersion"] = json!("7");
        body["metadata"]["creationTimestamp"] = json!(null);
        body["metadata"]["managedFields"] = json!([{"manager": "x", "operation": "Update"}]);
        body["metadata"]["finalizers"] = json!(["example.org/f"]);
        body["metadata"]["ownerReferences"] =
            json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "o1"}]);
        let out = apply_as(None, &body, "kbind", false).unwrap();

        assert!(out["metadata"].get("uid").is_none());
        assert!(out["metadata"].get("resourceVersion").is_none());
        assert_eq!(out["metadata"]["managedFields"].as_array().unwrap().len(), 1);
        assert_eq!(
            fields(&out, "kbind"),
            json!({
                "f:metadata": {
                    "f:finalizers": {"v:\"example.org/f\"": {}},
                    "f:ownerReferences": {"k:{\"uid\":\"o1\"}": {}},
                },
                "f:spec": {"f:replicas": {}},
            })
        );
    }

    #[test]
    fn an_update_then_an_apply_of_another_value_conflicts() {
        let mut created = widget(json!({"replicas": 1}));
        record_update(None, &mut created, "kubectl", &widget_schema(), "", T1);
        let err = apply_as(Some(&created), &widget(json!({"replicas": 2})), "kbind", false).unwrap_err();
        let (message, causes) = conflict(err);
        assert_eq!(
            message,
            "Apply failed with 1 conflict: conflict with \"kubectl\" using example.org/v1: .spec.replicas"
        );
        assert_eq!(
            causes,
            vec![Cause {
                reason: "FieldManagerConflict".into(),
                message: "conflict with \"kubectl\" using example.org/v1".into(),
                field: ".spec.replicas".into(),
            }]
        );
    }

    #[test]
    fn force_moves_ownership_to_the_applier() {
        let mut created = widget(json!({"replicas": 1, "image": "x"}));
        record_update(None, &mut created, "kubectl", &widget_schema(), "", T1);
        let out = apply_as(Some(&created), &widget(json!({"replicas": 2})), "kbind", true).unwrap();
        assert_eq!(out["spec"], json!({"replicas": 2, "image": "x"}));
        assert_eq!(fields(&out, "kbind"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(fields(&out, "kubectl"), json!({"f:spec": {".": {}, "f:image": {}}}));
    }

    #[test]
    fn an_equal_value_is_shared_without_conflict() {
        let a = apply_as(None, &widget(json!({"replicas": 3})), "a", false).unwrap();
        let b = apply_as(Some(&a), &widget(json!({"replicas": 3})), "b", false).unwrap();
        assert_eq!(fields(&b, "a"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(fields(&b, "b"), json!({"f:spec": {"f:replicas": {}}}));
        // Nothing changed for the object, so the new entry carries no time.
        assert!(entry(&b, "b").unwrap().get("time").is_none());
    }

    #[test]
    fn fields_dropped_by_a_reapply_are_removed() {
        let first = apply_as(None, &widget(json!({"replicas": 1, "image": "x"})), "kbind", false).unwrap();
        let second = apply_as(Some(&first), &widget(json!({"replicas": 1})), "kbind", false).unwrap();
        assert_eq!(second["spec"], json!({"replicas": 1}));
        assert_eq!(fields(&second, "kbind"), json!({"f:spec": {"f:replicas": {}}}));
    }

    #[test]
    fn a_dropped_field_another_manager_owns_stays() {
        let a = apply_as(None, &widget(json!({"image": "x", "replicas": 1})), "a", false).unwrap();
        let b = apply_as(Some(&a), &widget(json!({"image": "x"})), "b", false).unwrap();
        let a2 = apply_as(Some(&b), &widget(json!({"replicas": 1})), "a", false).unwrap();
        assert_eq!(a2["spec"], json!({"image": "x", "replicas": 1}));
        assert_eq!(fields(&a2, "a"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(fields(&a2, "b"), json!({"f:spec": {"f:image": {}}}));
    }

    #[test]
    fn dropping_everything_removes_the_emptied_parents_and_the_entry() {
        let a = apply_as(None, &widget(json!({"image": "x"})), "a", false).unwrap();
        let gone = apply_as(Some(&a), &widget(json!(null)), "a", false).unwrap();
        assert!(gone.get("spec").is_none(), "{gone}");
        assert!(gone["metadata"].get("managedFields").is_none());
    }

    #[test]
    fn two_appliers_own_disjoint_items_of_one_list_map() {
        let a = apply_as(
            None,
            &widget(json!({"containers": [{"name": "a", "image": "1"}]})),
            "a",
            false,
        )
        .unwrap();
        let b = apply_as(
            Some(&a),
            &widget(json!({"containers": [{"name": "b", "image": "2"}]})),
            "b",
            false,
        )
        .unwrap();
        assert_eq!(
            b["spec"]["containers"],
            json!([{"name": "a", "image": "1"}, {"name": "b", "image": "2"}])
        );
        let a_left = apply_as(Some(&b), &widget(json!({"replicas": 1})), "a", false).unwrap();
        assert_eq!(a_left["spec"]["containers"], json!([{"name": "b", "image": "2"}]));
        assert_eq!(
            fields(&a_left, "b"),
            json!({"f:spec": {"f:containers": {"k:{\"name\":\"b\"}": {".": {}, "f:image": {}, "f:name": {}}}}})
        );
    }

    #[test]
    fn a_list_map_item_another_applier_changed_conflicts_per_field() {
        let a = apply_as(
            None,
            &widget(json!({"containers": [{"name": "a", "image": "1"}]})),
            "a",
            false,
        )
        .unwrap();
        let err = apply_as(
            Some(&a),
            &widget(json!({"containers": [{"name": "a", "image": "2"}]})),
            "b",
            false,
        )
        .unwrap_err();
        let (message, causes) = conflict(err);
        assert_eq!(
            message,
            "Apply failed with 1 conflict: conflict with \"a\": .spec.containers[name=\"a\"].image"
        );
        assert_eq!(causes[0].field, ".spec.containers[name=\"a\"].image");
    }

    #[test]
    fn several_conflicts_are_grouped_by_manager() {
        let a = apply_as(None, &widget(json!({"image": "x", "replicas": 1})), "a", false).unwrap();
        let mut b = a.clone();
        b["spec"]["args"] = json!(["1"]);
        record_update(Some(&a), &mut b, "b", &widget_schema(), "", T1);
        let err = apply_as(
            Some(&b),
            &widget(json!({"image": "y", "replicas": 2, "args": ["2"]})),
            "c",
            false,
        )
        .unwrap_err();
        let (message, causes) = conflict(err);
        assert_eq!(
            message,
            "Apply failed with 3 conflicts: conflicts with \"a\":\n- .spec.image\n- .spec.replicas\n\
             conflicts with \"b\" using example.org/v1:\n- .spec.args"
        );
        assert_eq!(causes.len(), 3);
    }

    #[test]
    fn adding_to_a_set_another_manager_owns_items_of_does_not_conflict() {
        let mut b = widget(json!({"tags": ["t"]}));
        record_update(None, &mut b, "b", &widget_schema(), "", T1);
        let c = apply_as(Some(&b), &widget(json!({"tags": ["t", "u"]})), "c", false).unwrap();
        assert_eq!(c["spec"]["tags"], json!(["t", "u"]));
        assert_eq!(
            fields(&c, "b"),
            json!({"f:spec": {".": {}, "f:tags": {".": {}, "v:\"t\"": {}}}})
        );
    }

    #[test]
    fn set_lists_merge_by_value() {
        let a = apply_as(None, &widget(json!({"tags": ["x", "y"]})), "a", false).unwrap();
        let b = apply_as(Some(&a), &widget(json!({"tags": ["z"]})), "b", false).unwrap();
        assert_eq!(b["spec"]["tags"], json!(["x", "y", "z"]));
        let a2 = apply_as(Some(&b), &widget(json!({"tags": ["x"]})), "a", false).unwrap();
        assert_eq!(a2["spec"]["tags"], json!(["x", "z"]));
        assert_eq!(fields(&a2, "a"), json!({"f:spec": {"f:tags": {"v:\"x\"": {}}}}));
    }

    #[test]
    fn atomic_lists_and_maps_are_owned_and_replaced_whole() {
        let a = apply_as(
            None,
            &widget(json!({"args": ["1", "2"], "selector": {"k": "v"}})),
            "a",
            false,
        )
        .unwrap();
        assert_eq!(fields(&a, "a"), json!({"f:spec": {"f:args": {}, "f:selector": {}}}));
        let err = apply_as(Some(&a), &widget(json!({"args": ["3"]})), "b", false).unwrap_err();
        assert_eq!(conflict(err).1[0].field, ".spec.args");
        let b = apply_as(
            Some(&a),
            &widget(json!({"args": ["3"], "selector": {"j": "w"}})),
            "b",
            true,
        )
        .unwrap();
        assert_eq!(b["spec"]["args"], json!(["3"]));
        assert_eq!(b["spec"]["selector"], json!({"j": "w"}));
        assert!(entry(&b, "a").is_none());
    }

    #[test]
    fn list_maps_keep_the_configured_order_of_shared_items() {
        let mut live = widget(json!({"containers": [{"name": "a"}, {"name": "b"}, {"name": "c"}]}));
        record_update(None, &mut live, "kubectl", &widget_schema(), "", T1);
        let out = apply_as(
            Some(&live),
            &widget(json!({"containers": [{"name": "c"}, {"name": "a"}, {"name": "d"}]})),
            "k",
            false,
        )
        .unwrap();
        let names: Vec<&str> = out["spec"]["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, vec!["b", "c", "a", "d"]);
    }

    #[test]
    fn unknown_fields_are_granular_maps_and_atomic_lists() {
        let out = apply_as(
            None,
            &widget(json!({"extra": {"foo": {"bar": 1}, "list": [1, 2]}})),
            "a",
            false,
        )
        .unwrap();
        assert_eq!(
            fields(&out, "a"),
            json!({"f:spec": {"f:extra": {"f:foo": {".": {}, "f:bar": {}}, "f:list": {}}}})
        );
    }

    #[test]
    fn status_apply_takes_only_status() {
        let live = apply_as(None, &widget(json!({"replicas": 1})), "a", false).unwrap();
        let mut body = widget(json!({"replicas": 5}));
        body["status"] = json!({"phase": "Ready"});
        let out = apply(Some(&live), &body, "ctrl", false, &widget_schema(), "status", T2).unwrap();
        assert_eq!(out["spec"], json!({"replicas": 1}));
        assert_eq!(out["status"], json!({"phase": "Ready"}));
        let e = entry(&out, "ctrl").unwrap();
        assert_eq!(e["subresource"], "status");
        assert_eq!(e["fieldsV1"], json!({"f:status": {"f:phase": {}}}));
        assert!(entry(&out, "a").unwrap().get("subresource").is_none());
    }

    #[test]
    fn a_list_map_item_without_its_key_is_refused_as_kube_apiserver_does() {
        let err = apply_as(None, &widget(json!({"containers": [{"image": "x"}]})), "a", false).unwrap_err();
        assert_eq!(err.code(), 500);
        assert_eq!(
            err.to_string(),
            "failed to create typed patch object (ns/w; example.org/v1, Kind=Widget): .spec.containers: element 0: \
             associative list with keys has an element that omits key field \"name\" (and doesn't have default value)"
        );
        let dup = apply_as(
            None,
            &widget(json!({"containers": [{"name": "a"}, {"name": "a"}]})),
            "a",
            false,
        )
        .unwrap_err();
        assert!(
            dup.to_string()
                .ends_with(".spec.containers: duplicate entries for key [name=\"a\"]"),
            "{dup}"
        );
    }

    #[test]
    fn a_non_object_body_is_a_bad_request() {
        assert_eq!(apply_as(None, &json!([1]), "a", false).unwrap_err().code(), 400);
    }

    #[test]
    fn record_update_on_create_owns_everything_set() {
        let mut obj = widget(json!({"replicas": 1, "containers": [{"name": "a"}]}));
        obj["metadata"]["labels"] = json!({"app": "w"});
        record_update(None, &mut obj, "kubectl", &widget_schema(), "", T1);
        assert_eq!(
            obj["metadata"]["managedFields"],
            json!([{
                "manager": "kubectl", "operation": "Update", "apiVersion": "example.org/v1", "time": T1,
                "fieldsType": "FieldsV1",
                "fieldsV1": {
                    "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
                    "f:spec": {
                        ".": {}, "f:replicas": {},
                        "f:containers": {".": {}, "k:{\"name\":\"a\"}": {".": {}, "f:name": {}}},
                    },
                },
            }])
        );
    }

    #[test]
    fn record_update_takes_changed_fields_and_drops_removed_ones_from_everyone() {
        let a = apply_as(None, &widget(json!({"replicas": 1, "image": "x"})), "a", false).unwrap();
        let mut updated = a.clone();
        updated["spec"] = json!({"replicas": 2});
        record_update(Some(&a), &mut updated, "editor", &widget_schema(), "", T2);
        assert!(entry(&updated, "a").is_none(), "{updated}");
        assert_eq!(fields(&updated, "editor"), json!({"f:spec": {"f:replicas": {}}}));
        assert_eq!(entry(&updated, "editor").unwrap()["time"], T2);
    }

    #[test]
    fn record_update_that_changes_nothing_records_nothing() {
        let a = apply_as(None, &widget(json!({"replicas": 1})), "a", false).unwrap();
        let mut same = a.clone();
        same["metadata"]["resourceVersion"] = json!("9");
        record_update(Some(&a), &mut same, "editor", &widget_schema(), "", T2);
        assert!(entry(&same, "editor").is_none());
        assert_eq!(same["metadata"]["managedFields"], a["metadata"]["managedFields"]);
    }

    #[test]
    fn record_update_honours_sent_and_reset_managed_fields() {
        let a = apply_as(None, &widget(json!({"replicas": 1})), "a", false).unwrap();
        let mut reset = a.clone();
        reset["metadata"]["managedFields"] = json!([{}]);
        record_update(Some(&a), &mut reset, "editor", &widget_schema(), "", T2);
        assert!(reset["metadata"].get("managedFields").is_none());

        let mut kept = a.clone();
        kept["metadata"]["managedFields"] = json!([]);
        kept["spec"]["image"] = json!("y");
        record_update(Some(&a), &mut kept, "editor", &widget_schema(), "", T2);
        assert!(entry(&kept, "a").is_some());
        assert_eq!(fields(&kept, "editor"), json!({"f:spec": {"f:image": {}}}));
    }

    #[test]
    fn record_update_through_status_keeps_the_live_entries_and_names_the_subresource() {
        let a = apply_as(None, &widget(json!({"replicas": 1})), "a", false).unwrap();
        let mut with_status = a.clone();
        with_status["status"] = json!({"phase": "Ready"});
        // Entries sent through a subresource are ignored: the live ones count.
        with_status["metadata"]["managedFields"] = json!([{"manager": "forged", "operation": "Update"}]);
        record_update(Some(&a), &mut with_status, "ctrl", &widget_schema(), "status", T2);
        assert!(entry(&with_status, "forged").is_none());
        assert!(entry(&with_status, "a").is_some());
        let ctrl = entry(&with_status, "ctrl").unwrap();
        assert_eq!(ctrl["subresource"], "status");
        assert_eq!(ctrl["fieldsV1"], json!({"f:status": {".": {}, "f:phase": {}}}));
    }

    #[test]
    fn an_object_without_metadata_still_gets_its_entry() {
        let mut obj = json!({"apiVersion": "example.org/v1", "kind": "Widget", "spec": {"replicas": 1}});
        record_update(None, &mut obj, "m", &widget_schema(), "", T1);
        assert_eq!(fields(&obj, "m"), json!({"f:spec": {".": {}, "f:replicas": {}}}));
    }

    #[test]
    fn the_oldest_update_entries_merge_into_ancient_changes() {
        let mut obj = widget(json!({}));
        for i in 0..12 {
            let before = obj.clone();
            obj["spec"][format!("f{i}")] = json!(i);
            let now = format!("2025-01-01T00:00:{i:02}Z");
            record_update(Some(&before), &mut obj, &format!("m{i:02}"), &widget_schema(), "", &now);
        }
        let managers: Vec<&str> = obj["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers.len(), 10, "{managers:?}");
        assert_eq!(managers[0], "ancient-changes");
        assert!(!managers.contains(&"m00") && !managers.contains(&"m01") && !managers.contains(&"m02"));
        assert_eq!(
            fields(&obj, "ancient-changes"),
            json!({"f:spec": {"f:f0": {}, "f:f1": {}, "f:f2": {}}})
        );
        assert_eq!(entry(&obj, "ancient-changes").unwrap()["time"], "2025-01-01T00:00:02Z");
    }

    #[test]
    fn entries_are_ordered_appliers_first_then_by_time() {
        let mut obj = widget(json!({"image": "x"}));
        record_update(None, &mut obj, "kubectl", &widget_schema(), "", T1);
        let out = apply(
            Some(&obj),
            &widget(json!({"replicas": 1})),
            "kbind",
            false,
            &widget_schema(),
            "",
            T2,
        )
        .unwrap();
        let managers: Vec<&str> = out["metadata"]["managedFields"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["manager"].as_str().unwrap())
            .collect();
        assert_eq!(managers, vec!["kbind", "kubectl"]);
    }

    #[test]
    fn a_uid_in_an_apply_body_must_name_the_live_object() {
        let mut live = widget(json!({}));
        live["metadata"]["uid"] = json!("u1");
        let mut body = widget(json!({}));
        assert!(uid_unchanged(&live, &body, "Widget").is_ok(), "no UID: no check");
        body["metadata"]["uid"] = json!("u1");
        assert!(uid_unchanged(&live, &body, "Widget").is_ok());
        assert!(uid_of_a_missing_object(&widget(json!({})), "widgets.example.org", "w").is_none());
        body["metadata"]["uid"] = json!("u2");
        let err = uid_unchanged(&live, &body, "Widget").unwrap_err();
        assert_eq!(
            err.to_string(),
            "Widget \"w\" is invalid: metadata.uid: Invalid value: \"u2\": field is immutable"
        );
        let gone = uid_of_a_missing_object(&body, "widgets.example.org", "w").expect("a conflict");
        assert!(gone.is_conflict());
        assert!(gone.to_string().contains("uid mismatch"));
    }

    #[test]
    fn resource_version_in_an_apply_body_is_a_precondition() {
        let mut live = widget(json!({}));
        live["metadata"]["resourceVersion"] = json!("5");
        let mut body = widget(json!({}));
        assert!(precondition(&live, &body, "widgets.example.org").is_ok());
        body["metadata"]["resourceVersion"] = json!("5");
        assert!(precondition(&live, &body, "widgets.example.org").is_ok());
        body["metadata"]["resourceVersion"] = json!("4");
        let err = precondition(&live, &body, "widgets.example.org").unwrap_err();
        assert!(err.is_conflict());
        assert!(err.to_string().contains("widgets.example.org \"w\""));
    }

    fn arb_spec() -> impl Strategy<Value = Value> {
        (
            proptest::option::of(0..3i64),
            proptest::option::of("[a-c]"),
            proptest::collection::btree_map("[a-d]", "[xy]", 0..3),
            proptest::collection::btree_set("[p-s]", 0..3),
        )
            .prop_map(|(replicas, image, containers, tags)| {
                let mut spec = serde_json::Map::new();
                if let Some(r) = replicas {
                    spec.insert("replicas".into(), json!(r));
                }
                if let Some(i) = image {
                    spec.insert("image".into(), json!(i));
                }
                if !containers.is_empty() {
                    let items: Vec<Value> = containers.iter().map(|(n, i)| json!({"name": n, "image": i})).collect();
                    spec.insert("containers".into(), Value::Array(items));
                }
                if !tags.is_empty() {
                    spec.insert("tags".into(), json!(tags));
                }
                Value::Object(spec)
            })
    }

    proptest! {
        #[test]
        fn reapplying_any_body_is_a_no_op(spec in arb_spec()) {
            let body = widget(spec);
            let once = apply_as(None, &body, "kbind", false).unwrap();
            let twice = apply(Some(&once), &body, "kbind", false, &widget_schema(), "", T2).unwrap();
            prop_assert_eq!(once, twice);
        }

        #[test]
        fn every_owned_field_exists_after_forced_applies(steps in proptest::collection::vec((0..2usize, arb_spec()), 1..6)) {
            let root = object_schema(&widget_schema());
            let mut obj: Option<Value> = None;
            for (who, spec) in steps {
                let manager = ["a", "b"][who];
                let out = apply(obj.as_ref(), &widget(spec.clone()), manager, true, &widget_schema(), "", T1).unwrap();
                // What the applier just applied is in the object with the applied values.
                if let Value::Object(applied) = &spec {
                    for (k, v) in applied {
                        if k == "replicas" || k == "image" {
                            prop_assert_eq!(&out["spec"][k], v);
                        }
                    }
                }
                let present = typed::with_named_fields(&typed::fields_of_live(&out, &root), &root);
                for e in managed::decode(&out).unwrap() {
                    prop_assert!(e.fields.difference(&present).is_empty(), "{} owns missing fields in {}", e.manager, out);
                }
                obj = Some(out);
            }
        }
    }
}
