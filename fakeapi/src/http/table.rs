//! Server-side `Table` answers (what `kubectl get` prints): built-in printers for a few
//! resources, CRD `additionalPrinterColumns` evaluated by JSONPath, and the default
//! Name / Created At table for everything else.

use jiff::Timestamp;
use serde_json::{Map, Value, json};

use super::query::IncludeObject;
use crate::registry::ResourceInfo;

const NAME_DESCRIPTION: &str = "Name must be unique within a namespace. Is required when creating resources, although some resources may allow a client to request the generation of an appropriate name automatically. Name is primarily intended for creation idempotence and configuration definition. Cannot be updated. More info: https://kubernetes.io/docs/concepts/overview/working-with-objects/names#names";
const AGE_DESCRIPTION: &str = "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.";

/// How to render rows: the resource, the server's clock and what each row's `object` carries.
pub(crate) struct TableOptions<'a> {
    /// The resource the objects belong to.
    pub info: &'a ResourceInfo,
    /// The server's now, for ages.
    pub now: Timestamp,
    /// What each row's `object` carries.
    pub include: IncludeObject,
    /// The `meta.k8s.io` version asked for (`v1` or `v1beta1`).
    pub version: &'a str,
}

/// One column: its definition and how a cell is computed.
struct Column {
    name: String,
    kind: String,
    format: String,
    description: String,
    priority: i64,
    cell: Cell,
}

enum Cell {
    Name,
    Age,
    CreatedAt,
    Builtin(fn(&Value) -> Value),
    JsonPath { path: String, kind: String },
}

impl Column {
    fn builtin(name: &str, kind: &str, description: &str, cell: fn(&Value) -> Value) -> Self {
        Self {
            name: name.into(),
            kind: kind.into(),
            format: String::new(),
            description: description.to_string(),
            priority: 0,
            cell: Cell::Builtin(cell),
        }
    }

    fn wide(mut self) -> Self {
        self.priority = 1;
        self
    }

    fn definition(&self) -> Value {
        json!({
            "name": self.name,
            "type": self.kind,
            "format": self.format,
            "description": self.description,
            "priority": self.priority,
        })
    }
}

fn name_column() -> Column {
    Column {
        name: "Name".into(),
        kind: "string".into(),
        format: "name".into(),
        description: NAME_DESCRIPTION.into(),
        priority: 0,
        cell: Cell::Name,
    }
}

fn age_column() -> Column {
    Column {
        name: "Age".into(),
        kind: "string".into(),
        format: "".into(),
        description: AGE_DESCRIPTION.into(),
        priority: 0,
        cell: Cell::Age,
    }
}

fn created_at_column() -> Column {
    Column {
        name: "Created At".into(),
        kind: "date".into(),
        format: "".into(),
        description: AGE_DESCRIPTION.into(),
        priority: 0,
        cell: Cell::CreatedAt,
    }
}

/// The columns of a resource: its CRD's printer columns, a built-in printer, or the default.
fn columns(info: &ResourceInfo) -> Vec<Column> {
    if info.is_custom() {
        return std::iter::once(name_column())
            .chain(info.printer_columns.iter().map(crd_column))
            .collect();
    }
    let mut cols = vec![name_column()];
    match (info.resource.group.as_str(), info.resource.plural.as_str()) {
        ("", "namespaces") => cols.push(Column::builtin(
            "Status",
            "string",
            "The status of the namespace",
            |o| text_at(o, "/status/phase"),
        )),
        ("", "configmaps") => cols.push(Column::builtin("Data", "string", "Number of data in configmap", |o| {
            json!(count(o, "/data") + count(o, "/binaryData"))
        })),
        ("", "secrets") => {
            cols.push(Column::builtin("Type", "string", "The type of the secret", |o| {
                text_at(o, "/type")
            }));
            cols.push(Column::builtin("Data", "string", "The number of data entries", |o| {
                json!(count(o, "/data"))
            }));
        }
        ("", "serviceaccounts") => cols.push(Column::builtin(
            "Secrets",
            "string",
            "Secrets is the list of secrets allowed to be used by pods running using this ServiceAccount.",
            |o| json!(count(o, "/secrets")),
        )),
        ("apps", "deployments") => {
            cols.push(Column::builtin(
                "Ready",
                "string",
                "Number of the pod with ready state",
                |o| {
                    let desired = o.pointer("/spec/replicas").and_then(Value::as_i64).unwrap_or(1);
                    json!(format!("{}/{desired}", int_at(o, "/status/readyReplicas")))
                },
            ));
            cols.push(Column::builtin(
                "Up-to-date",
                "string",
                "Total number of non-terminated pods targeted by this deployment that have the desired template spec.",
                |o| json!(int_at(o, "/status/updatedReplicas")),
            ));
            cols.push(Column::builtin(
                "Available",
                "string",
                "Total number of available pods (ready for at least minReadySeconds) targeted by this deployment.",
                |o| json!(int_at(o, "/status/availableReplicas")),
            ));
            cols.push(age_column());
            cols.push(
                Column::builtin(
                    "Containers",
                    "string",
                    "Names of each container in the template.",
                    |o| containers(o, "name"),
                )
                .wide(),
            );
            cols.push(
                Column::builtin(
                    "Images",
                    "string",
                    "Images referenced by each container in the template.",
                    |o| containers(o, "image"),
                )
                .wide(),
            );
            cols.push(Column::builtin("Selector", "string", "Label selector for pods.", selector).wide());
            return cols;
        }
        ("coordination.k8s.io", "leases") => {
            cols.push(Column::builtin("Holder", "string", "The holder of the lease", |o| {
                text_at(o, "/spec/holderIdentity")
            }))
        }
        ("rbac.authorization.k8s.io", "rolebindings" | "clusterrolebindings") => {
            cols.push(Column::builtin("Role", "string", "Role", |o| {
                json!(format!(
                    "{}/{}",
                    o.pointer("/roleRef/kind").and_then(Value::as_str).unwrap_or_default(),
                    o.pointer("/roleRef/name").and_then(Value::as_str).unwrap_or_default()
                ))
            }));
            cols.push(age_column());
            for (name, kind) in [
                ("Users", "User"),
                ("Groups", "Group"),
                ("ServiceAccounts", "ServiceAccount"),
            ] {
                let cell: fn(&Value) -> Value = match kind {
                    "User" => |o| subjects(o, "User"),
                    "Group" => |o| subjects(o, "Group"),
                    _ => |o| subjects(o, "ServiceAccount"),
                };
                cols.push(Column::builtin(name, "string", &format!("{name} in the roleBinding"), cell).wide());
            }
            return cols;
        }
        _ => {
            cols.push(created_at_column());
            return cols;
        }
    }
    cols.push(age_column());
    cols
}

fn crd_column(spec: &Value) -> Column {
    let text = |key: &str| spec.get(key).and_then(Value::as_str).unwrap_or_default().to_string();
    Column {
        name: text("name"),
        kind: text("type"),
        format: text("format"),
        description: text("description"),
        priority: spec.get("priority").and_then(Value::as_i64).unwrap_or(0),
        cell: Cell::JsonPath {
            path: text("jsonPath"),
            kind: text("type"),
        },
    }
}

/// A Table of `objects` with the list metadata `list_meta`.
pub(crate) fn table(options: &TableOptions<'_>, objects: &[Value], list_meta: Value) -> Value {
    let columns = columns(options.info);
    let rows: Vec<Value> = objects.iter().map(|o| row(options, &columns, o)).collect();
    json!({
        "kind": "Table",
        "apiVersion": format!("meta.k8s.io/{}", options.version),
        "metadata": list_meta,
        "columnDefinitions": columns.iter().map(Column::definition).collect::<Vec<_>>(),
        "rows": rows,
    })
}

fn row(options: &TableOptions<'_>, columns: &[Column], obj: &Value) -> Value {
    let cells: Vec<Value> = columns.iter().map(|c| cell(options, c, obj)).collect();
    let mut row = Map::new();
    row.insert("cells".into(), json!(cells));
    match options.include {
        IncludeObject::None => {}
        IncludeObject::Metadata => {
            row.insert(
                "object".into(),
                json!({
                    "kind": "PartialObjectMetadata",
                    "apiVersion": format!("meta.k8s.io/{}", options.version),
                    "metadata": obj.get("metadata").cloned().unwrap_or_else(|| json!({})),
                }),
            );
        }
        IncludeObject::Object => {
            row.insert("object".into(), obj.clone());
        }
    }
    Value::Object(row)
}

fn cell(options: &TableOptions<'_>, column: &Column, obj: &Value) -> Value {
    let created = obj.pointer("/metadata/creationTimestamp").and_then(Value::as_str);
    match &column.cell {
        Cell::Name => text_at(obj, "/metadata/name"),
        Cell::Age => json!(age(created, options.now)),
        Cell::CreatedAt => json!(created.unwrap_or_default()),
        Cell::Builtin(f) => f(obj),
        Cell::JsonPath { path, kind } => match jsonpath(obj, path).into_iter().next() {
            Some(value) => typed_cell(kind, value, options.now),
            None => Value::Null,
        },
    }
}

/// A CRD column's cell for a JSONPath result, by the column's type (as the CRD table convertor).
fn typed_cell(kind: &str, value: &Value, now: Timestamp) -> Value {
    match (kind, value) {
        (_, Value::Null) => Value::Null,
        ("integer", Value::Number(n)) => n
            .as_i64()
            .or_else(|| n.as_f64().map(|f| f as i64))
            .map_or(Value::Null, |i| json!(i)),
        ("number", Value::Number(n)) => n.as_f64().map_or(Value::Null, |f| json!(f)),
        ("boolean", Value::Bool(b)) => json!(b),
        ("date", Value::String(s)) => json!(age(Some(s), now)),
        ("string", Value::String(s)) => json!(s),
        // jsonpath prints non-string values in their JSON form.
        ("string", other) => json!(other.to_string()),
        _ => Value::Null,
    }
}

/// A creation timestamp as `kubectl` ages read: `<unknown>` when missing, `<invalid>` when
/// unparsable, else a human duration since then.
fn age(timestamp: Option<&str>, now: Timestamp) -> String {
    let Some(raw) = timestamp.filter(|t| !t.is_empty()) else {
        return "<unknown>".into();
    };
    match raw.parse::<Timestamp>() {
        Ok(then) => human_duration(now.as_second() - then.as_second()),
        Err(_) => "<invalid>".into(),
    }
}

/// apimachinery's `duration.HumanDuration` on whole seconds.
pub(crate) fn human_duration(seconds: i64) -> String {
    if seconds < -1 {
        return "<invalid>".into();
    }
    if seconds < 0 {
        return "0s".into();
    }
    if seconds < 60 * 2 {
        return format!("{seconds}s");
    }
    let minutes = seconds / 60;
    if minutes < 10 {
        let s = seconds % 60;
        return if s == 0 {
            format!("{minutes}m")
        } else {
            format!("{minutes}m{s}s")
        };
    }
    if minutes < 60 * 3 {
        return format!("{minutes}m");
    }
    let hours = seconds / 3600;
    if hours < 8 {
        let m = minutes % 60;
        return if m == 0 {
            format!("{hours}h")
        } else {
            format!("{hours}h{m}m")
        };
    }
    if hours < 48 {
        return format!("{hours}h");
    }
    if hours < 24 * 8 {
        let h = hours % 24;
        return if h == 0 {
            format!("{}d", hours / 24)
        } else {
            format!("{}d{h}h", hours / 24)
        };
    }
    if hours < 24 * 365 * 2 {
        return format!("{}d", hours / 24);
    }
    if hours < 24 * 365 * 8 {
        let dy = (hours / 24) % 365;
        return if dy == 0 {
            format!("{}y", hours / 24 / 365)
        } else {
            format!("{}y{dy}d", hours / 24 / 365)
        };
    }
    format!("{}y", hours / 24 / 365)
}

fn text_at(obj: &Value, pointer: &str) -> Value {
    json!(obj.pointer(pointer).and_then(Value::as_str).unwrap_or_default())
}

fn int_at(obj: &Value, pointer: &str) -> i64 {
    obj.pointer(pointer).and_then(Value::as_i64).unwrap_or(0)
}

fn count(obj: &Value, pointer: &str) -> usize {
    match obj.pointer(pointer) {
        Some(Value::Object(m)) => m.len(),
        Some(Value::Array(a)) => a.len(),
        _ => 0,
    }
}

fn containers(obj: &Value, field: &str) -> Value {
    let names: Vec<&str> = obj
        .pointer("/spec/template/spec/containers")
        .and_then(Value::as_array)
        .map(|cs| cs.iter().filter_map(|c| c.get(field).and_then(Value::as_str)).collect())
        .unwrap_or_default();
    json!(names.join(","))
}

fn selector(obj: &Value) -> Value {
    let mut parts: Vec<String> = obj
        .pointer("/spec/selector/matchLabels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .map(|(k, v)| format!("{k}={}", v.as_str().unwrap_or_default()))
                .collect()
        })
        .unwrap_or_default();
    parts.sort();
    json!(if parts.is_empty() {
        "<none>".to_string()
    } else {
        parts.join(",")
    })
}

fn subjects(obj: &Value, kind: &str) -> Value {
    let names: Vec<String> = obj
        .get("subjects")
        .and_then(Value::as_array)
        .map(|ss| {
            ss.iter()
                .filter(|s| s.get("kind").and_then(Value::as_str) == Some(kind))
                .map(|s| {
                    let name = s.get("name").and_then(Value::as_str).unwrap_or_default();
                    match s.get("namespace").and_then(Value::as_str) {
                        Some(ns) if kind == "ServiceAccount" => format!("{ns}/{name}"),
                        _ => name.to_string(),
                    }
                })
                .collect()
        })
        .unwrap_or_default();
    json!(names.join(", "))
}

/// Evaluates the simple JSONPath subset CRD printer columns use: `.a.b`, `['a.b']`, `[0]`,
/// `[*]`, and `[?(@.k=="v")]` / `[?(@.k!="v")]` filters. Every match, in document order.
pub(crate) fn jsonpath<'v>(root: &'v Value, path: &str) -> Vec<&'v Value> {
    let Some(steps) = parse_path(path) else {
        return vec![];
    };
    let mut current = vec![root];
    for step in &steps {
        current = current.into_iter().flat_map(|v| step.apply(v)).collect();
    }
    current
}

#[derive(Debug, Clone, PartialEq)]
enum Step {
    Field(String),
    Index(i64),
    Wildcard,
    Filter { path: Vec<Step>, equal: bool, value: Value },
}

impl Step {
    fn apply<'v>(&self, v: &'v Value) -> Vec<&'v Value> {
        match self {
            Step::Field(name) => v.get(name).into_iter().collect(),
            Step::Index(i) => {
                let Some(items) = v.as_array() else { return vec![] };
                let idx = if *i < 0 { items.len() as i64 + i } else { *i };
                usize::try_from(idx)
                    .ok()
                    .and_then(|i| items.get(i))
                    .into_iter()
                    .collect()
            }
            Step::Wildcard => match v {
                Value::Array(items) => items.iter().collect(),
                Value::Object(map) => map.values().collect(),
                _ => vec![],
            },
            Step::Filter { path, equal, value } => v
                .as_array()
                .map(|items| {
                    items
                        .iter()
                        .filter(|item| {
                            let mut found = vec![*item];
                            for step in path {
                                found = found.into_iter().flat_map(|f| step.apply(f)).collect();
                            }
                            found.first().is_some_and(|f| (*f == value) == *equal)
                        })
                        .collect()
                })
                .unwrap_or_default(),
        }
    }
}

fn parse_path(path: &str) -> Option<Vec<Step>> {
    let path = path.trim();
    let path = path.strip_prefix('{').and_then(|p| p.strip_suffix('}')).unwrap_or(path);
    let chars: Vec<char> = path.chars().collect();
    let mut steps = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '$' | '@' if i == 0 => i += 1,
            '.' => {
                i += 1;
                let mut name = String::new();
                while i < chars.len() && chars[i] != '.' && chars[i] != '[' {
                    // `\.` escapes a dot inside a field name.
                    if chars[i] == '\\' && i + 1 < chars.len() {
                        i += 1;
                    }
                    name.push(chars[i]);
                    i += 1;
                }
                if name == "*" {
                    steps.push(Step::Wildcard);
                } else if !name.is_empty() {
                    steps.push(Step::Field(name));
                }
            }
            '[' => {
                let close = bracket_end(&chars, i)?;
                let inner: String = chars[i + 1..close].iter().collect();
                steps.push(bracket_step(inner.trim())?);
                i = close + 1;
            }
            _ => return None,
        }
    }
    Some(steps)
}

/// The index of the `]` closing the bracket opened at `open`, skipping quoted text.
fn bracket_end(chars: &[char], open: usize) -> Option<usize> {
    let mut quote: Option<char> = None;
    for (offset, c) in chars[open + 1..].iter().enumerate() {
        match (quote, c) {
            (Some(q), c) if *c == q => quote = None,
            (None, '"' | '\'') => quote = Some(*c),
            (None, ']') => return Some(open + 1 + offset),
            _ => {}
        }
    }
    None
}

fn bracket_step(inner: &str) -> Option<Step> {
    if inner == "*" {
        return Some(Step::Wildcard);
    }
    if let Some(quoted) = unquote(inner) {
        return Some(Step::Field(quoted));
    }
    if let Ok(i) = inner.parse::<i64>() {
        return Some(Step::Index(i));
    }
    let expr = inner.strip_prefix("?(")?.strip_suffix(')')?.trim();
    let (lhs, rhs, equal) = if let Some((l, r)) = expr.split_once("!=") {
        (l, r, false)
    } else {
        let (l, r) = expr.split_once("==")?;
        (l, r, true)
    };
    let path = parse_path(lhs.trim())?;
    let rhs = rhs.trim();
    let value = match unquote(rhs) {
        Some(s) => Value::String(s),
        None => serde_json::from_str(rhs).ok()?,
    };
    Some(Step::Filter { path, equal, value })
}

fn unquote(s: &str) -> Option<String> {
    let quoted = |q: char| s.len() >= 2 && s.starts_with(q) && s.ends_with(q);
    (quoted('"') || quoted('\'')).then(|| s[1..s.len() - 1].to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn obj() -> Value {
        json!({
            "metadata": {"name": "w", "labels": {"example.com/tier": "gold"}},
            "spec": {"replicas": 3, "items": [{"name": "a"}, {"name": "b"}]},
            "status": {"conditions": [
                {"type": "Synced", "status": "False"},
                {"type": "Ready", "status": "True"},
            ]},
        })
    }

    #[test]
    fn simple_paths_select_fields_and_indexes() {
        let o = obj();
        assert_eq!(jsonpath(&o, ".spec.replicas"), vec![&json!(3)]);
        assert_eq!(jsonpath(&o, ".spec.items[1].name"), vec![&json!("b")]);
        assert_eq!(jsonpath(&o, ".spec.items[-1].name"), vec![&json!("b")]);
        assert_eq!(jsonpath(&o, ".spec.items[*].name"), vec![&json!("a"), &json!("b")]);
        assert_eq!(jsonpath(&o, "{.metadata.name}"), vec![&json!("w")]);
        assert!(jsonpath(&o, ".spec.missing").is_empty());
    }

    #[test]
    fn filters_and_escaped_keys_select_like_kubectl() {
        let o = obj();
        assert_eq!(
            jsonpath(&o, r#".status.conditions[?(@.type=="Ready")].status"#),
            vec![&json!("True")]
        );
        assert_eq!(
            jsonpath(&o, r#".status.conditions[?(@.type!="Ready")].type"#),
            vec![&json!("Synced")]
        );
        assert_eq!(
            jsonpath(&o, r".metadata.labels.example\.com/tier"),
            vec![&json!("gold")]
        );
        assert_eq!(
            jsonpath(&o, ".metadata.labels['example.com/tier']"),
            vec![&json!("gold")]
        );
    }

    #[test]
    fn human_durations_round_as_apimachinery_does() {
        let cases = [
            (-5, "<invalid>"),
            (-1, "0s"),
            (59, "59s"),
            (119, "119s"),
            (120, "2m"),
            (185, "3m5s"),
            (600, "10m"),
            (3 * 3600 + 5 * 60, "3h5m"),
            (10 * 3600, "10h"),
            (50 * 3600, "2d2h"),
            (30 * 86400, "30d"),
            (3 * 365 * 86400 + 86400, "3y1d"),
            (9 * 365 * 86400, "9y"),
        ];
        for (seconds, want) in cases {
            assert_eq!(human_duration(seconds), want, "{seconds}s");
        }
    }

    #[test]
    fn typed_cells_follow_the_column_type() {
        let now: Timestamp = "2025-01-01T00:10:00Z".parse().unwrap();
        assert_eq!(typed_cell("integer", &json!(3.0), now), json!(3));
        assert_eq!(typed_cell("date", &json!("2025-01-01T00:00:00Z"), now), json!("10m"));
        assert_eq!(typed_cell("date", &json!("yesterday"), now), json!("<invalid>"));
        assert_eq!(typed_cell("boolean", &json!("yes"), now), Value::Null);
        assert_eq!(typed_cell("string", &json!(5), now), json!("5"));
    }
}
