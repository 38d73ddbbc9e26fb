//! CustomResourceDefinitions as kube-apiserver handles them: validation (names, versions,
//! structural schemas, CEL rules), the resources a CRD serves, and the status it reports.

use std::cmp::Ordering;
use std::sync::LazyLock;

use jiff::Timestamp;
use kbind_cluster::DiscoveredResource;
use kbind_cluster::clock::format_time;
use kbind_cluster::error::Cause;
use serde_json::{Map, Value, json};

use crate::schema::{self, Schema, forbidden, invalid, not_supported, required};

/// Verbs of a custom resource, in the order the apiextensions discovery controller lists them.
pub const VERBS: &[&str] = &[
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "create",
    "update",
    "watch",
];

/// Verbs left while a CRD is terminating.
const TERMINATING_VERBS: &[&str] = &["delete", "deletecollection", "get", "list", "watch"];

const DNS1035_MESSAGE: &str = "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with an alphabetic character, and end with an alphanumeric character (e.g. 'my-name',  or 'abc-123', regex used for validation is '[a-z]([-a-z0-9]*[a-z0-9])?')";

static DNS1035: LazyLock<regex::Regex> =
    LazyLock::new(|| regex::Regex::new(r"^[a-z]([-a-z0-9]*[a-z0-9])?$").expect("static DNS-1035 pattern compiles"));

fn text<'a>(v: &'a Value, pointer: &str) -> &'a str {
    v.pointer(pointer).and_then(Value::as_str).unwrap_or_default()
}

fn versions(crd: &Value) -> &[Value] {
    crd.pointer("/spec/versions")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default()
}

fn is_true(v: &Value, key: &str) -> bool {
    v.get(key).and_then(Value::as_bool) == Some(true)
}

fn string_list(v: Option<&Value>) -> Vec<String> {
    v.and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).map(str::to_string).collect())
        .unwrap_or_default()
}

/// `spec.names.singular`, defaulting as the apiserver does to the lowercased kind.
fn singular(crd: &Value) -> String {
    match text(crd, "/spec/names/singular") {
        "" => text(crd, "/spec/names/kind").to_lowercase(),
        s => s.to_string(),
    }
}

/// `spec.names.listKind`, defaulting to `<kind>List`.
fn list_kind(crd: &Value) -> String {
    match text(crd, "/spec/names/listKind") {
        "" => format!("{}List", text(crd, "/spec/names/kind")),
        s => s.to_string(),
    }
}

/// Validates a `apiextensions.k8s.io/v1` CustomResourceDefinition on create, with kube's
/// wording. Like the apiserver, it accepts a CRD without served versions, and it takes absent
/// `singular`/`listKind` as defaulted.
pub fn validate_crd(crd: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    let (group, plural, kind) = (
        text(crd, "/spec/group"),
        text(crd, "/spec/names/plural"),
        text(crd, "/spec/names/kind"),
    );
    let name = text(crd, "/metadata/name");
    if name != format!("{plural}.{group}") {
        causes.push(invalid(
            "metadata.name",
            &json!(name),
            "must be spec.names.plural+\".\"+spec.group",
        ));
    }
    if group.is_empty() {
        causes.push(required("spec.group", ""));
    } else if !group.contains('.') {
        causes.push(invalid(
            "spec.group",
            &json!(group),
            "should be a domain with at least one dot",
        ));
    }
    match text(crd, "/spec/scope") {
        "" => causes.push(required("spec.scope", "")),
        "Cluster" | "Namespaced" => {}
        other => causes.push(not_supported(
            "spec.scope",
            &json!(other),
            &["Cluster".into(), "Namespaced".into()],
        )),
    }
    causes.extend(validate_versions(crd));
    if plural.is_empty() {
        causes.push(required("spec.names.plural", ""));
    } else if !DNS1035.is_match(plural) {
        causes.push(invalid("spec.names.plural", &json!(plural), DNS1035_MESSAGE));
    }
    if kind.is_empty() {
        causes.push(required("spec.names.kind", ""));
    }
    causes
}

fn validate_versions(crd: &Value) -> Vec<Cause> {
    let mut causes = vec![];
    let versions = versions(crd);
    let all = crd.pointer("/spec/versions").cloned().unwrap_or(Value::Null);
    let mut names: Vec<&str> = vec![];
    for (i, version) in versions.iter().enumerate() {
        let path = format!("spec.versions[{i}]");
        let name = text(version, "/name");
        if !DNS1035.is_match(name) {
            causes.push(invalid(&format!("{path}.name"), &json!(name), DNS1035_MESSAGE));
        }
        names.push(name);
        match version.pointer("/schema/openAPIV3Schema") {
            Some(root) => causes.extend(validate_schema(root, &format!("{path}.schema.openAPIV3Schema"))),
            None => causes.push(required(
                &format!("{path}.schema.openAPIV3Schema"),
                "schemas are required",
            )),
        }
        causes.extend(validate_subresources(
            version.get("subresources"),
            &format!("{path}.subresources"),
        ));
    }
    let unique = names.iter().enumerate().all(|(i, n)| !names[..i].contains(n));
    if !unique {
        causes.push(invalid("spec.versions", &all, "must contain unique version names"));
    }
    if versions.iter().filter(|v| is_true(v, "storage")).count() != 1 {
        causes.push(invalid(
            "spec.versions",
            &all,
            "must have exactly one version marked as storage version",
        ));
    }
    causes
}

fn validate_subresources(sub: Option<&Value>, path: &str) -> Vec<Cause> {
    let Some(scale) = sub.and_then(|s| s.get("scale")) else {
        return vec![];
    };
    let mut causes = vec![];
    for (key, prefix) in [("specReplicasPath", ".spec."), ("statusReplicasPath", ".status.")] {
        let field = format!("{path}.scale.{key}");
        match scale.get(key).and_then(Value::as_str) {
            None | Some("") => causes.push(required(&field, "")),
            Some(p) if !p.starts_with(prefix) => {
                let under = prefix.trim_end_matches('.');
                causes.push(invalid(
                    &field,
                    &json!(p),
                    &format!("should be a json path under {under}"),
                ));
            }
            Some(_) => {}
        }
    }
    causes
}

/// Where a schema node sits, which decides what an empty `type` is called.
#[derive(Clone, Copy, PartialEq)]
enum Level {
    Root,
    Item,
    Field,
}

/// Checks that a version's schema is structural and well-formed (the subset of
/// apiextensions' `ValidateStructural` and schema validation that CRDs in the wild trip).
fn validate_schema(root: &Value, path: &str) -> Vec<Cause> {
    let mut causes = vec![];
    structural(root, path, Level::Root, &mut causes);
    if let Some(meta) = root.pointer("/properties/metadata")
        && !metadata_only_names(meta)
    {
        causes.push(forbidden(
            &format!("{path}.properties[metadata]"),
            "must not specify anything other than name and generateName, but metadata is implicitly specified",
        ));
    }
    // ValidateStructural sorts its errors by their text, so the order is stable.
    causes.sort_by_key(|c| format!("{}: {}", c.field, c.message));
    causes
}

/// Whether a root `metadata` schema restricts nothing but `name` and `generateName`.
fn metadata_only_names(meta: &Value) -> bool {
    let allowed = ["type", "properties"];
    let Some(map) = meta.as_object() else { return false };
    map.keys().all(|k| allowed.contains(&k.as_str()))
        && meta.get("type").is_none_or(|t| t == "object")
        && meta
            .get("properties")
            .and_then(Value::as_object)
            .is_none_or(|p| p.keys().all(|k| k == "name" || k == "generateName"))
}

fn structural(s: &Value, path: &str, level: Level, causes: &mut Vec<Cause>) {
    let Some(node) = s.as_object() else {
        causes.push(invalid(path, s, "must be an object"));
        return;
    };
    let flag = |k: &str| node.get(k).and_then(Value::as_bool) == Some(true);
    let ty = node.get("type").and_then(Value::as_str).unwrap_or_default();
    let at = |k: &str| format!("{path}.{k}");
    structural_type(ty, &flag, path, level, causes);
    if !ty.is_empty() && !["string", "number", "integer", "boolean", "array", "object"].contains(&ty) {
        causes.push(not_supported(
            &at("type"),
            &json!(ty),
            &["array", "boolean", "integer", "number", "object", "string"].map(String::from),
        ));
    }
    if node.contains_key("$ref") {
        causes.push(forbidden(&at("$ref"), "$ref is not supported"));
    }
    if flag("uniqueItems") {
        causes.push(forbidden(
            &at("uniqueItems"),
            "uniqueItems cannot be set to true since the runtime complexity becomes quadratic",
        ));
    }
    if let Some(pattern) = node.get("pattern").and_then(Value::as_str)
        && let Err(e) = regex::Regex::new(pattern)
    {
        let detail = format!("must be a valid regular expression, but isn't: {e}");
        causes.push(invalid(&at("pattern"), &json!(pattern), &detail));
    }
    structural_children(node, path, level, causes);
    list_type_rules(node, path, causes);
    default_matches_schema(s, path, causes);
    cel_rules_compile(node, path, causes);
}

fn structural_type(ty: &str, flag: &dyn Fn(&str) -> bool, path: &str, level: Level, causes: &mut Vec<Cause>) {
    let at = |k: &str| format!("{path}.{k}");
    if flag("x-kubernetes-embedded-resource") && ty != "object" {
        let detail = "must be object if x-kubernetes-embedded-resource is true";
        causes.push(if ty.is_empty() {
            required(&at("type"), detail)
        } else {
            invalid(&at("type"), &json!(ty), detail)
        });
    } else if ty.is_empty() && !flag("x-kubernetes-int-or-string") && !flag("x-kubernetes-preserve-unknown-fields") {
        let detail = match level {
            Level::Root => "must not be empty at the root",
            Level::Item => "must not be empty for specified array items",
            Level::Field => "must not be empty for specified object fields",
        };
        causes.push(required(&at("type"), detail));
    }
    if level == Level::Root && !ty.is_empty() && ty != "object" {
        causes.push(invalid(&at("type"), &json!(ty), "must be object at the root"));
    }
    if flag("x-kubernetes-int-or-string") && flag("x-kubernetes-preserve-unknown-fields") {
        causes.push(invalid(
            &at("x-kubernetes-preserve-unknown-fields"),
            &json!(true),
            "must be false if x-kubernetes-int-or-string is true",
        ));
    }
}

fn structural_children(node: &Map<String, Value>, path: &str, level: Level, causes: &mut Vec<Cause>) {
    let at = |k: &str| format!("{path}.{k}");
    if let Some(props) = node.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            structural(prop, &format!("{path}.properties[{name}]"), Level::Field, causes);
        }
    }
    match node.get("items") {
        Some(item @ Value::Object(_)) => structural(item, &at("items"), Level::Item, causes),
        Some(other) => causes.push(forbidden(
            &at("items"),
            &format!("items must be a schema object and not an array, got {other}"),
        )),
        None if node.get("type").and_then(Value::as_str) == Some("array") => {
            causes.push(required(&at("items"), "must be specified"));
        }
        None => {}
    }
    match node.get("additionalProperties") {
        Some(Value::Bool(false)) => causes.push(forbidden(
            &at("additionalProperties"),
            "additionalProperties cannot be set to false",
        )),
        Some(ap) => {
            if level == Level::Root {
                causes.push(forbidden(&at("additionalProperties"), "must not be used at the root"));
            }
            if node.contains_key("properties") {
                causes.push(forbidden(
                    &at("additionalProperties"),
                    "additionalProperties and properties are mutual exclusive",
                ));
            }
            if ap.is_object() {
                structural(ap, &at("additionalProperties"), Level::Field, causes);
            }
        }
        None => {}
    }
    let int_or_string = node.get("x-kubernetes-int-or-string").and_then(Value::as_bool) == Some(true);
    for junctor in ["allOf", "anyOf", "oneOf"] {
        // kube-apiserver's one exception: int-or-string may spell its two types out.
        if int_or_string && junctor == "anyOf" && is_int_or_string_any_of(node.get("anyOf")) {
            continue;
        }
        if int_or_string
            && junctor == "allOf"
            && node
                .get("allOf")
                .and_then(Value::as_array)
                .and_then(|a| a.first())
                .is_some_and(|first| is_int_or_string_any_of(first.get("anyOf")))
        {
            continue;
        }
        for (i, branch) in node
            .get(junctor)
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            value_validation_only(branch, &format!("{path}.{junctor}[{i}]"), causes);
        }
    }
    if let Some(not) = node.get("not") {
        value_validation_only(not, &at("not"), causes);
    }
}

/// `anyOf: [{type: integer}, {type: string}]` and nothing else, as int-or-string allows.
fn is_int_or_string_any_of(any_of: Option<&Value>) -> bool {
    let only_type = |b: &Value, t: &str| {
        b.as_object()
            .is_some_and(|m| m.len() == 1 && m.get("type") == Some(&json!(t)))
    };
    match any_of.and_then(Value::as_array).map(Vec::as_slice) {
        Some([a, b]) => only_type(a, "integer") && only_type(b, "string"),
        _ => false,
    }
}

/// Inside `allOf`/`anyOf`/`oneOf`/`not` a structural schema may only validate values.
fn value_validation_only(s: &Value, path: &str, causes: &mut Vec<Cause>) {
    let at = |k: &str| format!("{path}.{k}");
    let checks: [(&str, &str); 10] = [
        ("type", "must be empty to be structural"),
        ("additionalProperties", "must be undefined to be structural"),
        ("default", "must be undefined to be structural"),
        ("title", "must be empty to be structural"),
        ("description", "must be empty to be structural"),
        ("nullable", "must be false to be structural"),
        ("x-kubernetes-preserve-unknown-fields", "must be false to be structural"),
        ("x-kubernetes-embedded-resource", "must be false to be structural"),
        ("x-kubernetes-int-or-string", "must be false to be structural"),
        ("x-kubernetes-list-type", "must be undefined to be structural"),
    ];
    for (key, detail) in checks {
        if s.get(key).is_some_and(|v| v != &Value::Bool(false) && v != "") {
            causes.push(forbidden(&at(key), detail));
        }
    }
    if let Some(props) = s.get("properties").and_then(Value::as_object) {
        for (name, prop) in props {
            value_validation_only(prop, &format!("{path}.properties[{name}]"), causes);
        }
    }
    if let Some(item) = s.get("items") {
        value_validation_only(item, &at("items"), causes);
    }
}

fn list_type_rules(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let at = |k: &str| format!("{path}.{k}");
    let list_type = node.get("x-kubernetes-list-type").and_then(Value::as_str);
    let keys = string_list(node.get("x-kubernetes-list-map-keys"));
    if let Some(t) = list_type
        && !["atomic", "set", "map"].contains(&t)
    {
        causes.push(not_supported(
            &at("x-kubernetes-list-type"),
            &json!(t),
            &["atomic", "set", "map"].map(String::from),
        ));
    }
    if list_type.is_some() && node.get("type").and_then(Value::as_str) != Some("array") {
        causes.push(invalid(
            &at("type"),
            &json!(node.get("type")),
            "must be array if x-kubernetes-list-type is specified",
        ));
    }
    if list_type != Some("map") {
        if !keys.is_empty() {
            causes.push(forbidden(
                &at("x-kubernetes-list-map-keys"),
                "must not be specified if x-kubernetes-list-type is not map",
            ));
        }
        return;
    }
    if keys.is_empty() {
        causes.push(required(
            &at("x-kubernetes-list-map-keys"),
            "must not be empty if x-kubernetes-list-type is map",
        ));
        return;
    }
    let item = node.get("items");
    if item.and_then(|i| i.get("type")).and_then(Value::as_str) != Some("object") {
        causes.push(invalid(
            &at("items.type"),
            &json!(item.and_then(|i| i.get("type"))),
            "must be object if parent array's x-kubernetes-list-type is map",
        ));
        return;
    }
    let required_keys = string_list(item.and_then(|i| i.get("required")));
    for key in &keys {
        let key_path = format!("{path}.items.properties[{key}]");
        match item.and_then(|i| i.pointer(&format!("/properties/{key}"))) {
            None => causes.push(required(
                &key_path,
                "entries with x-kubernetes-list-map-keys must exist",
            )),
            Some(p) => {
                let scalar = matches!(
                    p.get("type").and_then(Value::as_str),
                    Some("string" | "integer" | "number" | "boolean")
                );
                if !scalar && !is_true(p, "x-kubernetes-int-or-string") {
                    causes.push(invalid(
                        &format!("{key_path}.type"),
                        &json!(p.get("type")),
                        "must be a scalar type if parent array's x-kubernetes-list-type is map",
                    ));
                }
                if !required_keys.contains(key) && p.get("default").is_none() {
                    causes.push(required(
                        &key_path,
                        "all map keys must be required or have a default value",
                    ));
                }
            }
        }
    }
}

/// A `default` must itself be valid against its node (after pruning), as the apiserver checks.
fn default_matches_schema(s: &Value, path: &str, causes: &mut Vec<Cause>) {
    let Some(default) = s.get("default").filter(|d| !d.is_null()) else {
        return;
    };
    let node = Schema::new(s.clone());
    let mut pruned = default.clone();
    schema::prune(&mut pruned, &node);
    for cause in schema::validate(&pruned, None, &node) {
        let field = match cause.field.as_str() {
            "<nil>" => format!("{path}.default"),
            f => format!("{path}.default.{f}"),
        };
        causes.push(Cause { field, ..cause });
    }
}

/// Every `x-kubernetes-validations` rule must compile.
fn cel_rules_compile(node: &Map<String, Value>, path: &str, causes: &mut Vec<Cause>) {
    let Some(rules) = node.get("x-kubernetes-validations").filter(|r| r.is_array()) else {
        return;
    };
    let compiled = kube_cel::compile_schema(&json!({"x-kubernetes-validations": rules}));
    for (i, result) in compiled.validations.iter().enumerate() {
        if let Err(error) = result {
            let rule = rules.get(i).and_then(|r| r.get("rule")).cloned().unwrap_or(Value::Null);
            let detail = format!("compilation failed: {error}");
            causes.push(invalid(
                &format!("{path}.x-kubernetes-validations[{i}].rule"),
                &rule,
                &detail,
            ));
        }
    }
}

/// Validates an update of a CRD: what [`validate_crd`] checks, plus kube's immutable fields
/// (group and plural always; scope and kind once Established) and that every version in the
/// old `status.storedVersions` is still listed in `spec.versions`.
pub fn validate_crd_update(crd: &Value, old: &Value) -> Vec<Cause> {
    let mut causes = validate_crd(crd);
    let established = old
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Established")
                && c.get("status").and_then(Value::as_str) == Some("True")
        });
    let mut immutable = vec![
        ("/spec/group", "spec.group"),
        ("/spec/names/plural", "spec.names.plural"),
    ];
    if established {
        immutable.extend([("/spec/scope", "spec.scope"), ("/spec/names/kind", "spec.names.kind")]);
    }
    for (pointer, field) in immutable {
        let new_value = crd.pointer(pointer).cloned().unwrap_or(Value::Null);
        if old.pointer(pointer).cloned().unwrap_or(Value::Null) != new_value {
            causes.push(invalid(field, &new_value, "field is immutable"));
        }
    }
    let listed: Vec<&str> = versions(crd).iter().map(|v| text(v, "/name")).collect();
    for (i, stored) in string_list(old.pointer("/status/storedVersions")).iter().enumerate() {
        if !listed.contains(&stored.as_str()) {
            causes.push(invalid(
                &format!("status.storedVersions[{i}]"),
                &json!(stored),
                "must appear in spec.versions",
            ));
        }
    }
    causes
}

/// One discovery entry and schema per served version, preferred version first (kube's
/// version priority: GA before beta before alpha, higher numbers first).
pub fn served_resources(crd: &Value) -> Vec<(DiscoveredResource, Schema)> {
    let mut served: Vec<&Value> = versions(crd).iter().filter(|v| is_true(v, "served")).collect();
    served.sort_by(|a, b| compare_versions(text(a, "/name"), text(b, "/name")));
    served
        .into_iter()
        .map(|v| (discovered(crd, v), version_schema(v)))
        .collect()
}

fn discovered(crd: &Value, version: &Value) -> DiscoveredResource {
    let sub = version.get("subresources");
    let subresources = ["status", "scale"]
        .into_iter()
        .filter(|s| sub.and_then(|x| x.get(*s)).is_some())
        .map(String::from)
        .collect();
    DiscoveredResource {
        group: text(crd, "/spec/group").to_string(),
        version: text(version, "/name").to_string(),
        kind: text(crd, "/spec/names/kind").to_string(),
        plural: text(crd, "/spec/names/plural").to_string(),
        singular: singular(crd),
        namespaced: text(crd, "/spec/scope") == "Namespaced",
        verbs: verbs(crd).iter().map(|v| v.to_string()).collect(),
        subresources,
        short_names: string_list(crd.pointer("/spec/names/shortNames")),
        categories: string_list(crd.pointer("/spec/names/categories")),
    }
}

fn verbs(crd: &Value) -> &'static [&'static str] {
    let conditions = crd.pointer("/status/conditions").and_then(Value::as_array);
    let terminating = conditions.into_iter().flatten().any(|c| {
        c.get("type").and_then(Value::as_str) == Some("Terminating")
            && c.get("status").and_then(Value::as_str) == Some("True")
    });
    if terminating { TERMINATING_VERBS } else { VERBS }
}

fn version_schema(version: &Value) -> Schema {
    match version.pointer("/schema/openAPIV3Schema") {
        Some(s) => Schema::new(s.clone()),
        None => Schema::new(json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true})),
    }
}

/// kube's `CompareKubeAwareVersionStrings`, as an ordering with the preferred version first.
pub fn compare_versions(a: &str, b: &str) -> Ordering {
    fn parse(v: &str) -> Option<(u64, u8, u64)> {
        static KUBE: LazyLock<regex::Regex> = LazyLock::new(|| {
            regex::Regex::new(r"^v(\d+)(?:(alpha|beta)(\d+))?$").expect("static version pattern compiles")
        });
        let c = KUBE.captures(v)?;
        let major = c.get(1)?.as_str().parse().ok()?;
        let stability = match c.get(2).map(|m| m.as_str()) {
            None => 2,
            Some("beta") => 1,
            _ => 0,
        };
        let minor = c.get(3).and_then(|m| m.as_str().parse().ok()).unwrap_or(0);
        Some((major, stability, minor))
    }
    match (parse(a), parse(b)) {
        (Some((ma, sa, na)), Some((mb, sb, nb))) => sb.cmp(&sa).then(mb.cmp(&ma)).then(nb.cmp(&na)),
        (Some(_), None) => Ordering::Less,
        (None, Some(_)) => Ordering::Greater,
        (None, None) => a.cmp(b),
    }
}

/// The name of the storage version.
pub fn storage_version(crd: &Value) -> Option<String> {
    versions(crd)
        .iter()
        .find(|v| is_true(v, "storage"))
        .map(|v| text(v, "/name").to_string())
}

/// A version's `additionalPrinterColumns`, or the apiserver's default `Age` column.
pub fn printer_columns(crd: &Value, version: &str) -> Vec<Value> {
    let columns = versions(crd)
        .iter()
        .find(|v| text(v, "/name") == version)
        .and_then(|v| v.get("additionalPrinterColumns"))
        .and_then(Value::as_array)
        .filter(|c| !c.is_empty());
    match columns {
        Some(c) => c.clone(),
        None => vec![json!({
            "name": "Age",
            "type": "date",
            "description": "CreationTimestamp is a timestamp representing the server time when this object was created. It is not guaranteed to be set in happens-before order across separate operations. Clients may not set this value. It is represented in RFC3339 form and is in UTC.\n\nPopulated by the system. Read-only. Null for lists. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata",
            "jsonPath": ".metadata.creationTimestamp",
        })],
    }
}

/// The status the apiserver's naming and establishing controllers give a valid CRD:
/// `acceptedNames`, conditions `NamesAccepted` and `Established` (True; a transition time is
/// kept while the status stays the same) and `storedVersions` with the storage version added.
pub fn established_status(crd: &Value, now: Timestamp) -> Value {
    let old = crd.get("status");
    let mut accepted = Map::new();
    accepted.insert("kind".into(), json!(text(crd, "/spec/names/kind")));
    accepted.insert("listKind".into(), json!(list_kind(crd)));
    accepted.insert("plural".into(), json!(text(crd, "/spec/names/plural")));
    accepted.insert("singular".into(), json!(singular(crd)));
    for key in ["shortNames", "categories"] {
        let list = string_list(crd.pointer(&format!("/spec/names/{key}")));
        if !list.is_empty() {
            accepted.insert(key.into(), json!(list));
        }
    }
    let old_conditions: Vec<Value> = old
        .and_then(|s| s.get("conditions"))
        .and_then(Value::as_array)
        .cloned()
        .unwrap_or_default();
    let condition = |kind: &str, reason: &str, message: &str| {
        let previous = old_conditions
            .iter()
            .find(|c| c.get("type").and_then(Value::as_str) == Some(kind));
        let since = previous
            .filter(|c| c.get("status").and_then(Value::as_str) == Some("True"))
            .and_then(|c| c.get("lastTransitionTime").cloned())
            .unwrap_or_else(|| json!(format_time(now)));
        json!({"type": kind, "status": "True", "lastTransitionTime": since, "reason": reason, "message": message})
    };
    let mut conditions = vec![
        condition("NamesAccepted", "NoConflicts", "no conflicts found"),
        condition(
            "Established",
            "InitialNamesAccepted",
            "the initial names have been accepted",
        ),
    ];
    conditions.extend(
        old_conditions
            .iter()
            .filter(|c| {
                !matches!(
                    c.get("type").and_then(Value::as_str),
                    Some("NamesAccepted" | "Established")
                )
            })
            .cloned(),
    );
    let mut stored = string_list(old.and_then(|s| s.get("storedVersions")));
    if let Some(storage) = storage_version(crd)
        && !stored.contains(&storage)
    {
        stored.push(storage);
    }
    json!({"conditions": conditions, "acceptedNames": accepted, "storedVersions": stored})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn widget_crd() -> Value {
        json!({
            "apiVersion": "apiextensions.k8s.io/v1",
            "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.org"},
            "spec": {
                "group": "example.org",
                "scope": "Namespaced",
                "names": {"plural": "widgets", "kind": "Widget", "shortNames": ["wd"], "categories": ["all"]},
                "versions": [
                    {
                        "name": "v1alpha1", "served": true, "storage": false,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
                    },
                    {
                        "name": "v1", "served": true, "storage": true,
                        "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                            "spec": {"type": "object", "properties": {"size": {"type": "integer", "default": 1}}},
                            "status": {"type": "object", "properties": {"ready": {"type": "boolean"}}},
                        }}},
                        "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.size", "statusReplicasPath": ".status.size"}},
                        "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size"}],
                    },
                    {"name": "v0", "served": false, "storage": false, "schema": {"openAPIV3Schema": {"type": "object"}}},
                ],
            },
        })
    }

    fn with(mut crd: Value, pointer: &str, value: Value) -> Value {
        *crd.pointer_mut(pointer).unwrap_or_else(|| panic!("no {pointer}")) = value;
        crd
    }

    fn fields(causes: &[Cause]) -> Vec<&str> {
        causes.iter().map(|c| c.field.as_str()).collect()
    }

    #[test]
    fn a_well_formed_crd_is_valid() {
        assert_eq!(validate_crd(&widget_crd()), vec![]);
    }

    #[test]
    fn the_name_must_be_plural_dot_group() {
        let causes = validate_crd(&with(widget_crd(), "/metadata/name", json!("widget.example.org")));
        assert_eq!(causes.len(), 1);
        assert_eq!(causes[0].field, "metadata.name");
        assert_eq!(
            causes[0].message,
            r#"Invalid value: "widget.example.org": must be spec.names.plural+"."+spec.group"#
        );
    }

    #[test]
    fn a_group_needs_a_dot_and_a_scope_must_be_known() {
        let crd = with(widget_crd(), "/spec/group", json!("example"));
        let crd = with(crd, "/metadata/name", json!("widgets.example"));
        let crd = with(crd, "/spec/scope", json!("Everywhere"));
        let causes = validate_crd(&crd);
        assert_eq!(fields(&causes), ["spec.group", "spec.scope"]);
        assert_eq!(
            causes[0].message,
            r#"Invalid value: "example": should be a domain with at least one dot"#
        );
        assert_eq!(
            causes[1].message,
            r#"Unsupported value: "Everywhere": supported values: "Cluster", "Namespaced""#
        );
    }

    #[test]
    fn exactly_one_storage_version_is_required() {
        let crd = with(widget_crd(), "/spec/versions/0/storage", json!(true));
        let causes = validate_crd(&crd);
        assert_eq!(fields(&causes), ["spec.versions"]);
        assert!(
            causes[0]
                .message
                .ends_with("must have exactly one version marked as storage version")
        );
        let none = with(widget_crd(), "/spec/versions/1/storage", json!(false));
        assert_eq!(fields(&validate_crd(&none)), ["spec.versions"]);
    }

    #[test]
    fn names_kind_and_plural_are_required() {
        let crd = with(widget_crd(), "/spec/names", json!({}));
        let crd = with(crd, "/metadata/name", json!(".example.org"));
        assert_eq!(fields(&validate_crd(&crd)), ["spec.names.plural", "spec.names.kind"]);
    }

    #[test]
    fn a_schema_needs_a_type_at_every_level() {
        let crd = with(
            widget_crd(),
            "/spec/versions/1/schema/openAPIV3Schema",
            json!({"type": "object", "properties": {"spec": {"properties": {"list": {"type": "array", "items": {}}}}}}),
        );
        let causes = validate_crd(&crd);
        let root = "spec.versions[1].schema.openAPIV3Schema";
        assert_eq!(
            fields(&causes),
            [
                format!("{root}.properties[spec].properties[list].items.type"),
                format!("{root}.properties[spec].type"),
            ]
        );
        assert_eq!(
            causes[1].message,
            "Required value: must not be empty for specified object fields"
        );
        assert_eq!(
            causes[0].message,
            "Required value: must not be empty for specified array items"
        );
    }

    #[test]
    fn unsupported_schema_constructs_are_refused() {
        let crd = with(
            widget_crd(),
            "/spec/versions/1/schema/openAPIV3Schema",
            json!({
                "type": "object",
                "properties": {
                    "a": {"$ref": "#/definitions/x"},
                    "b": {"type": "array", "items": {"type": "string"}, "uniqueItems": true},
                    "c": {"type": "object", "properties": {"x": {"type": "string"}}, "additionalProperties": {"type": "string"}},
                    "d": {"type": "string", "anyOf": [{"type": "string"}]},
                    "e": {"type": "array", "items": {"type": "object", "properties": {"k": {"type": "string"}}}, "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["k"]},
                    "f": {"type": "integer", "default": "one"},
                    "g": {"type": "string", "x-kubernetes-validations": [{"rule": "self ==="}]},
                    "metadata": {"type": "object", "properties": {"labels": {"type": "object"}}},
                },
            }),
        );
        let causes = validate_crd(&crd);
        let messages: Vec<String> = causes.iter().map(|c| format!("{}: {}", c.field, c.message)).collect();
        let root = "spec.versions[1].schema.openAPIV3Schema";
        let expect = [
            format!("{root}.properties[a].$ref: Forbidden: $ref is not supported"),
            format!("{root}.properties[a].type: Required value: must not be empty for specified object fields"),
            format!("{root}.properties[b].uniqueItems: Forbidden: uniqueItems cannot be set to true"),
            format!(
                "{root}.properties[c].additionalProperties: Forbidden: additionalProperties and properties are mutual exclusive"
            ),
            format!("{root}.properties[d].anyOf[0].type: Forbidden: must be empty to be structural"),
            format!(
                "{root}.properties[e].items.properties[k]: Required value: all map keys must be required or have a default value"
            ),
            format!("{root}.properties[f].default: Invalid value: \"string\""),
            format!(
                "{root}.properties[g].x-kubernetes-validations[0].rule: Invalid value: \"self ===\": compilation failed"
            ),
            format!(
                "{root}.properties[metadata]: Forbidden: must not specify anything other than name and generateName"
            ),
        ];
        for e in &expect {
            assert!(
                messages.iter().any(|m| m.starts_with(e.as_str())),
                "missing {e} in {messages:#?}"
            );
        }
        assert_eq!(messages.len(), expect.len(), "{messages:#?}");
    }

    #[test]
    fn a_served_version_without_schema_is_refused() {
        let mut crd = widget_crd();
        if let Some(v) = crd.pointer_mut("/spec/versions/0").and_then(Value::as_object_mut) {
            v.remove("schema");
        }
        let causes = validate_crd(&crd);
        assert_eq!(fields(&causes), ["spec.versions[0].schema.openAPIV3Schema"]);
        assert_eq!(causes[0].message, "Required value: schemas are required");
    }

    #[test]
    fn an_update_keeps_names_and_stored_versions() {
        let now = Timestamp::from_second(1_767_225_600).expect("valid timestamp");
        let mut old = widget_crd();
        old["status"] = established_status(&old, now);
        assert_eq!(validate_crd_update(&widget_crd(), &old), vec![]);
        let rescoped = with(widget_crd(), "/spec/scope", json!("Cluster"));
        let causes = validate_crd_update(&rescoped, &old);
        assert_eq!(fields(&causes), ["spec.scope"]);
        assert_eq!(causes[0].message, r#"Invalid value: "Cluster": field is immutable"#);
        let mut dropped = widget_crd();
        if let Some(list) = dropped.pointer_mut("/spec/versions").and_then(Value::as_array_mut) {
            list.retain(|v| v["name"] != "v1");
        }
        dropped = with(dropped, "/spec/versions/0/storage", json!(true));
        let causes = validate_crd_update(&dropped, &old);
        assert_eq!(fields(&causes), ["status.storedVersions[0]"]);
        assert_eq!(
            causes[0].message,
            r#"Invalid value: "v1": must appear in spec.versions"#
        );
    }

    #[test]
    fn served_resources_lists_each_served_version_preferred_first() {
        let served = served_resources(&widget_crd());
        let versions: Vec<&str> = served.iter().map(|(r, _)| r.version.as_str()).collect();
        assert_eq!(versions, ["v1", "v1alpha1"]);
        let (v1, v1_schema) = &served[0];
        assert_eq!(
            (
                v1.group.as_str(),
                v1.kind.as_str(),
                v1.plural.as_str(),
                v1.singular.as_str()
            ),
            ("example.org", "Widget", "widgets", "widget")
        );
        assert!(v1.namespaced);
        assert_eq!(v1.subresources, ["status", "scale"]);
        assert_eq!(v1.short_names, ["wd"]);
        assert_eq!(v1.categories, ["all"]);
        assert_eq!(v1.verbs, VERBS);
        let mut terminating = widget_crd();
        terminating["status"] = json!({"conditions": [{"type": "Terminating", "status": "True"}]});
        assert_eq!(
            served_resources(&terminating)[0].0.verbs,
            ["delete", "deletecollection", "get", "list", "watch"]
        );
        assert!(v1_schema.property("spec").and_then(|s| s.property("size")).is_some());
        let (alpha, alpha_schema) = &served[1];
        assert!(alpha.subresources.is_empty());
        assert!(alpha_schema.property("spec").expect("spec").preserves_unknown());
    }

    #[test]
    fn kube_version_priority_orders_ga_beta_alpha_then_others() {
        let mut versions = vec![
            "foo1",
            "v1alpha1",
            "v2",
            "v1beta2",
            "v1",
            "v10",
            "v11alpha2",
            "v1beta1",
            "foo10",
        ];
        versions.sort_by(|a, b| compare_versions(a, b));
        assert_eq!(
            versions,
            [
                "v10",
                "v2",
                "v1",
                "v1beta2",
                "v1beta1",
                "v11alpha2",
                "v1alpha1",
                "foo1",
                "foo10"
            ]
        );
    }

    #[test]
    fn storage_version_and_printer_columns() {
        let crd = widget_crd();
        assert_eq!(storage_version(&crd).as_deref(), Some("v1"));
        assert_eq!(printer_columns(&crd, "v1")[0]["name"], "Size");
        let default = printer_columns(&crd, "v1alpha1");
        assert_eq!(default.len(), 1);
        assert_eq!(
            (default[0]["name"].as_str(), default[0]["jsonPath"].as_str()),
            (Some("Age"), Some(".metadata.creationTimestamp"))
        );
    }

    #[test]
    fn established_status_accepts_names_and_records_the_storage_version() {
        let now = Timestamp::from_second(1_767_225_600).expect("valid timestamp");
        let status = established_status(&widget_crd(), now);
        assert_eq!(
            status["acceptedNames"],
            json!({"kind": "Widget", "listKind": "WidgetList", "plural": "widgets", "singular": "widget", "shortNames": ["wd"], "categories": ["all"]})
        );
        assert_eq!(status["storedVersions"], json!(["v1"]));
        let conditions = status["conditions"].as_array().expect("conditions");
        assert_eq!(conditions[0]["type"], "NamesAccepted");
        assert_eq!(conditions[0]["reason"], "NoConflicts");
        assert_eq!(conditions[1]["type"], "Established");
        assert_eq!(conditions[1]["status"], "True");
        assert_eq!(conditions[1]["lastTransitionTime"], "2026-01-01T00:00:00Z");

        let later = Timestamp::from_second(1_767_229_200).expect("valid timestamp");
        let mut crd = with(widget_crd(), "/spec/versions/1/storage", json!(false));
        crd = with(crd, "/spec/versions/0/storage", json!(true));
        crd["status"] = status;
        let again = established_status(&crd, later);
        assert_eq!(again["storedVersions"], json!(["v1", "v1alpha1"]));
        assert_eq!(
            again["conditions"][1]["lastTransitionTime"], "2026-01-01T00:00:00Z",
            "no transition, time kept"
        );
    }
}
