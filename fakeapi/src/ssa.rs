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

/// Checks an apply body's `metadata.resourceVersion` (a precondition when set) against the
/// live object; a mismatch is the stale-write 409 for `resource` (e.g. `widgets.example.org`).
/// [`apply`] does not check it: the caller does, before applying.
pub fn precondition(live: &Value, applied: &Value, resource: &str) -> Result<(), Error> {
    let wanted = applied.pointer("/metadata/resourceVersion").and_then(Value::as_str);
    let current = live.pointer("/metadata/resourceVersion").and_then(Value::as_str);
    match wanted {
        Some(rv) if !rv.is_empty() && Some(rv) != current => {
            let name = live.pointer("/metadata/name").and_then(Value::as_str).unwrap_or_default();
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
        (1, Some((e, paths))) => format!("Apply failed with 1 conflict: conflict with {}: {}", e.display(), paths[0]),
        (n, _) => {
            let lines: Vec<String> = by_manager
                .iter()
                .flat_map(|(e, paths)| {
                    std::iter::once(format!("conflicts with {}:", e.display())).chain(paths.iter().map(|p| format!("- {p}")))
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
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default().to_string()
}
