//! `metadata.managedFields`: decoding, encoding and ordering of per-manager entries.

use serde_json::{Map, Value, json};

use super::Operation;
use super::fieldset::FieldSet;

/// One managedFields entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    /// The field manager.
    pub manager: String,
    /// Apply or Update.
    pub operation: Operation,
    /// The apiVersion the fields were written in.
    pub api_version: String,
    /// When the manager last changed the object (RFC 3339), if recorded.
    pub time: Option<String>,
    /// `""` or the subresource written through.
    pub subresource: String,
    /// The fields owned.
    pub fields: FieldSet,
}

impl Entry {
    /// Whether this entry is the one `(manager, operation, subresource)` (and, for updates,
    /// `api_version`) writes to; appliers keep one entry whatever version they apply in.
    pub fn is(&self, manager: &str, operation: Operation, api_version: &str, subresource: &str) -> bool {
        self.manager == manager
            && self.operation == operation
            && self.subresource == subresource
            && (operation == Operation::Apply || self.api_version == api_version)
    }

    /// The manager as kube-apiserver names it in conflicts (`"m"`, `"m" using v1`, with the
    /// subresource when there is one).
    pub fn display(&self) -> String {
        let mut out = format!("{:?}", self.manager);
        if !self.subresource.is_empty() {
            out.push_str(&format!(" with subresource {:?}", self.subresource));
        }
        if self.operation == Operation::Update {
            out.push_str(&format!(" using {}", self.api_version));
        }
        out
    }

    /// The JSON identifier kube-apiserver sorts conflicting managers by (Go marshals the
    /// entry's fields in declaration order, leaving out empty ones and, for appliers, the
    /// apiVersion).
    pub fn identifier(&self) -> String {
        let mut parts = vec![
            format!("\"manager\":{}", json!(self.manager)),
            format!("\"operation\":\"{}\"", operation_name(self.operation)),
        ];
        if self.operation == Operation::Update && !self.api_version.is_empty() {
            parts.push(format!("\"apiVersion\":{}", json!(self.api_version)));
        }
        if !self.subresource.is_empty() {
            parts.push(format!("\"subresource\":{}", json!(self.subresource)));
        }
        format!("{{{}}}", parts.join(","))
    }

    fn to_json(&self) -> Value {
        let mut out = Map::new();
        out.insert("manager".into(), json!(self.manager));
        out.insert("operation".into(), json!(operation_name(self.operation)));
        out.insert("apiVersion".into(), json!(self.api_version));
        if let Some(t) = &self.time {
            out.insert("time".into(), json!(t));
        }
        out.insert("fieldsType".into(), json!("FieldsV1"));
        out.insert("fieldsV1".into(), self.fields.to_fields_v1());
        if !self.subresource.is_empty() {
            out.insert("subresource".into(), json!(self.subresource));
        }
        Value::Object(out)
    }

    fn from_json(v: &Value) -> Result<Entry, String> {
        let text = |k: &str| v.get(k).and_then(Value::as_str).unwrap_or_default().to_string();
        let operation = match v.get("operation").and_then(Value::as_str) {
            Some("Apply") => Operation::Apply,
            Some("Update") => Operation::Update,
            other => return Err(format!("unknown operation {other:?}")),
        };
        if let Some(t) = v.get("fieldsType").and_then(Value::as_str)
            && t != "FieldsV1"
        {
            return Err(format!("unsupported fieldsType {t:?}"));
        }
        let fields = match v.get("fieldsV1") {
            Some(f) => FieldSet::from_fields_v1(f)?,
            None => FieldSet::new(),
        };
        Ok(Entry {
            manager: text("manager"),
            operation,
            api_version: text("apiVersion"),
            time: v.get("time").and_then(Value::as_str).map(str::to_string),
            subresource: text("subresource"),
            fields,
        })
    }
}

fn operation_name(op: Operation) -> &'static str {
    match op {
        Operation::Apply => "Apply",
        Operation::Update => "Update",
    }
}

/// Decodes `metadata.managedFields` of `obj` (absent: no entries).
pub fn decode(obj: &Value) -> Result<Vec<Entry>, String> {
    match obj.pointer("/metadata/managedFields") {
        None | Some(Value::Null) => Ok(vec![]),
        Some(Value::Array(entries)) => entries.iter().map(Entry::from_json).collect(),
        Some(other) => Err(format!("expected a list in metadata.managedFields, got {other}")),
    }
}

/// Whether `obj` asks for its managedFields to be wiped: a list holding one empty entry.
pub fn is_reset(obj: &Value) -> bool {
    matches!(obj.pointer("/metadata/managedFields"), Some(Value::Array(e)) if e.len() == 1 && e[0].as_object().is_some_and(Map::is_empty))
}

/// Removes `metadata.managedFields` from `obj`.
pub fn strip(obj: &mut Value) {
    if let Some(Value::Object(meta)) = obj.get_mut("metadata") {
        meta.remove("managedFields");
    }
}

/// Writes `entries` into `obj` in kube-apiserver's order: appliers first, then by time,
/// manager, apiVersion and subresource. Entries owning nothing are dropped.
pub fn encode(obj: &mut Value, entries: &[Entry]) {
    let mut kept: Vec<&Entry> = entries.iter().filter(|e| !e.fields.is_empty()).collect();
    kept.sort_by(|a, b| {
        (a.operation == Operation::Update)
            .cmp(&(b.operation == Operation::Update))
            .then_with(|| seconds(&a.time).cmp(&seconds(&b.time)))
            .then_with(|| a.manager.cmp(&b.manager))
            .then_with(|| a.api_version.cmp(&b.api_version))
            .then_with(|| a.subresource.cmp(&b.subresource))
    });
    let Value::Object(fields) = obj else { return };
    if kept.is_empty() && !fields.contains_key("metadata") {
        return;
    }
    let meta = fields.entry("metadata").or_insert_with(|| Value::Object(Map::new()));
    let Value::Object(meta) = meta else { return };
    if kept.is_empty() {
        meta.remove("managedFields");
    } else {
        meta.insert(
            "managedFields".into(),
            Value::Array(kept.into_iter().map(Entry::to_json).collect()),
        );
    }
}

fn seconds(time: &Option<String>) -> i64 {
    time.as_deref()
        .and_then(|t| t.parse::<jiff::Timestamp>().ok())
        .map(|t| t.as_second())
        .unwrap_or(0)
}

/// How many Update entries kube-apiserver keeps before merging the oldest.
pub const MAX_UPDATE_MANAGERS: usize = 10;

/// The manager the oldest Update entries are merged into.
pub const ANCIENT_CHANGES: &str = "ancient-changes";

/// Keeps at most [`MAX_UPDATE_MANAGERS`] Update entries: the oldest are merged, per apiVersion,
/// into an `ancient-changes` entry (kube-apiserver's cap-managers manager).
pub fn cap_update_managers(entries: &mut Vec<Entry>) {
    let mut updaters: Vec<usize> = (0..entries.len())
        .filter(|&i| entries[i].operation == Operation::Update)
        .collect();
    if updaters.len() <= MAX_UPDATE_MANAGERS {
        return;
    }
    updaters.sort_by(|&a, &b| {
        seconds(&entries[a].time)
            .cmp(&seconds(&entries[b].time))
            .then_with(|| entries[a].identifier().cmp(&entries[b].identifier()))
    });
    let mut remaining = updaters.len();
    let mut first_of_version: Vec<(String, usize)> = Vec::new();
    let mut merged_away = vec![false; entries.len()];
    for i in updaters {
        if remaining <= MAX_UPDATE_MANAGERS {
            break;
        }
        let version = entries[i].api_version.clone();
        let Some(&(_, first)) = first_of_version.iter().find(|(v, _)| *v == version) else {
            first_of_version.push((version, i));
            continue;
        };
        let bucket = bucket_for(entries, &version);
        for absorbed in [i, first] {
            if absorbed != bucket && !merged_away[absorbed] {
                let fields = entries[absorbed].fields.clone();
                entries[bucket].fields = entries[bucket].fields.union(&fields);
                merged_away[absorbed] = true;
            }
        }
        entries[bucket].time = entries[i].time.clone();
        remaining -= 1;
    }
    let mut index = 0;
    entries.retain(|_| {
        let keep = !merged_away.get(index).copied().unwrap_or(false);
        index += 1;
        keep
    });
}

/// The index of the `ancient-changes` entry for `version`, created when missing.
fn bucket_for(entries: &mut Vec<Entry>, version: &str) -> usize {
    if let Some(i) = entries
        .iter()
        .position(|e| e.is(ANCIENT_CHANGES, Operation::Update, version, ""))
    {
        return i;
    }
    entries.push(Entry {
        manager: ANCIENT_CHANGES.into(),
        operation: Operation::Update,
        api_version: version.into(),
        time: None,
        subresource: String::new(),
        fields: FieldSet::new(),
    });
    entries.len() - 1
}
