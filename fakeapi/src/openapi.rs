//! OpenAPI v3 documents as kube-apiserver serves them: `/openapi/v3` (the index) and
//! `/openapi/v3/apis/<group>/<version>` (paths and `components.schemas` of one group-version).
//!
//! Resource schemas are the CRD schemas as written (defaults, validations, preserve-unknown
//! fields kept), with what the apiserver's CRD OpenAPI builder adds: `apiVersion`/`kind`,
//! `metadata` referring to ObjectMeta, `x-kubernetes-group-version-kind`, and its `Unfold` step
//! (`anyOf: [integer, string]` beside `x-kubernetes-int-or-string`, type meta on embedded resources).

use kbind_cluster::DiscoveredResource;
use serde_json::{Map, Value, json};

use crate::schema::Schema;

const META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1";
const OBJECT_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta";
const LIST_META: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.ListMeta";
const STATUS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Status";
const DELETE_OPTIONS: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.DeleteOptions";
const PATCH: &str = "io.k8s.apimachinery.pkg.apis.meta.v1.Patch";
const SCALE: &str = "io.k8s.api.autoscaling.v1.Scale";
const TOKEN_REQUEST: &str = "io.k8s.api.authentication.v1.TokenRequest";

/// The `components.schemas` name of a kind: reverse-domain group for custom groups
/// (`org.example.v1.Widget`), the Go package path for Kubernetes' own groups
/// (`io.k8s.api.apps.v1.Deployment`).
pub fn definition_name(group: &str, version: &str, kind: &str) -> String {
    let prefix = match group {
        "" => "io.k8s.api.core".to_string(),
        "apiextensions.k8s.io" => "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions".to_string(),
        "apiregistration.k8s.io" => "io.k8s.kube-aggregator.pkg.apis.apiregistration".to_string(),
        g if !g.contains('.') => format!("io.k8s.api.{g}"),
        g if g.ends_with(".k8s.io") => format!("io.k8s.api.{}", g.split('.').next().unwrap_or(g)),
        g => g.split('.').rev().collect::<Vec<_>>().join("."),
    };
    format!("{prefix}.{version}.{kind}")
}

/// The discovery path of a group-version under `/openapi/v3/`: `api/v1` or `apis/<g>/<v>`.
pub fn document_path(group: &str, version: &str) -> String {
    if group.is_empty() {
        format!("api/{version}")
    } else {
        format!("apis/{group}/{version}")
    }
}

/// The hash the apiserver puts in `serverRelativeURL`: uppercase hex SHA-512 of the document.
pub fn document_hash(doc: &Value) -> String {
    let bytes = serde_json::to_vec(doc).unwrap_or_default();
    let digest = ring::digest::digest(&ring::digest::SHA512, &bytes);
    digest.as_ref().iter().map(|b| format!("{b:02X}")).collect()
}

/// The `/openapi/v3` index for these `(group, version, document)` entries.
pub fn root_index(documents: &[(String, String, Value)]) -> Value {
    let paths: Map<String, Value> = documents
        .iter()
        .map(|(group, version, doc)| {
            let path = document_path(group, version);
            let url = format!("/openapi/v3/{path}?hash={}", document_hash(doc));
            (path, json!({"serverRelativeURL": url}))
        })
        .collect();
    json!({"paths": paths})
}

/// The `/openapi/v3/apis/<group>/<version>` document for these resources.
pub fn group_version_document(group: &str, version: &str, resources: &[(DiscoveredResource, Schema)]) -> Value {
    let mut paths = Map::new();
    let mut schemas = meta_schemas();
    for (resource, schema) in resources {
        let name = definition_name(group, version, &resource.kind);
        schemas.insert(name.clone(), resource_schema(group, version, &resource.kind, schema));
        schemas.insert(format!("{name}List"), list_schema(group, version, resource, &name));
        Routes {
            group,
            version,
            resource,
            name: &name,
        }
        .add_to(&mut paths);
        if resource.subresources.iter().any(|s| s == "scale") {
            schemas.extend(scale_schemas());
        }
        if resource.subresources.iter().any(|s| s == "token") {
            schemas.insert(TOKEN_REQUEST.into(), token_request_schema());
        }
    }
    json!({
        "openapi": "3.0.0",
        "info": info(group),
        "paths": paths,
        "components": {"schemas": schemas},
    })
}

/// Custom groups are published by the CRD OpenAPI builder, Kubernetes' own by the apiserver.
fn info(group: &str) -> Value {
    let builtin = group.is_empty() || !group.contains('.') || group.ends_with(".k8s.io");
    if builtin {
        json!({"title": "Kubernetes", "version": "v1.35.0"})
    } else {
        json!({"title": "Kubernetes CRD Swagger", "version": "v0.1.0"})
    }
}

fn reference(name: &str) -> Value {
    json!({"$ref": format!("#/components/schemas/{name}")})
}

/// A reference with siblings, which OpenAPI v3 only allows wrapped in `allOf`.
fn wrapped_reference(name: &str, description: &str) -> Value {
    json!({"allOf": [reference(name)], "description": description})
}

fn gvk(group: &str, version: &str, kind: &str) -> Value {
    json!({"group": group, "version": version, "kind": kind})
}

fn type_meta() -> (Value, Value) {
    (
        json!({"type": "string", "description": "APIVersion defines the versioned schema of this representation of an object. Servers should convert recognized schemas to the latest internal value, and may reject unrecognized values. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#resources"}),
        json!({"type": "string", "description": "Kind is a string value representing the REST resource this object represents. Servers may infer this from the endpoint the client submits requests to. Cannot be updated. In CamelCase. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"}),
    )
}

const METADATA_DOC: &str = "Standard object's metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#metadata";

fn resource_schema(group: &str, version: &str, kind: &str, schema: &Schema) -> Value {
    let mut root = unfold(schema.raw().clone());
    let (api_version, kind_prop) = type_meta();
    if let Value::Object(node) = &mut root {
        let props = node.entry("properties").or_insert_with(|| json!({}));
        if let Value::Object(props) = props {
            props.insert("apiVersion".into(), api_version);
            props.insert("kind".into(), kind_prop);
            props.insert("metadata".into(), wrapped_reference(OBJECT_META, METADATA_DOC));
        }
        node.entry("type").or_insert_with(|| json!("object"));
        node.insert(
            "x-kubernetes-group-version-kind".into(),
            json!([gvk(group, version, kind)]),
        );
    }
    root
}

/// The builder's `Unfold`: int-or-string gains its `anyOf`, embedded resources their type meta.
fn unfold(mut node: Value) -> Value {
    let Value::Object(map) = &mut node else { return node };
    for key in ["properties", "patternProperties"] {
        if let Some(Value::Object(props)) = map.get_mut(key) {
            for prop in props.values_mut() {
                *prop = unfold(prop.take());
            }
        }
    }
    for key in ["items", "additionalProperties"] {
        if let Some(child @ Value::Object(_)) = map.get_mut(key) {
            *child = unfold(child.take());
        }
    }
    let int_or_string = map.get("x-kubernetes-int-or-string") == Some(&Value::Bool(true));
    if int_or_string && !map.contains_key("anyOf") && !map.contains_key("allOf") {
        map.insert("anyOf".into(), json!([{"type": "integer"}, {"type": "string"}]));
    }
    if map.get("x-kubernetes-embedded-resource") == Some(&Value::Bool(true)) {
        let (api_version, kind) = type_meta();
        if let Value::Object(props) = map.entry("properties").or_insert_with(|| json!({})) {
            props.insert("apiVersion".into(), api_version);
            props.insert("kind".into(), kind);
            props.insert("metadata".into(), wrapped_reference(OBJECT_META, METADATA_DOC));
        }
        if let Value::Array(required) = map.entry("required").or_insert_with(|| json!([])) {
            for key in ["kind", "apiVersion"] {
                if !required.iter().any(|r| r == key) {
                    required.push(json!(key));
                }
            }
        }
    }
    node
}

fn list_schema(group: &str, version: &str, resource: &DiscoveredResource, item: &str) -> Value {
    let list_kind = format!("{}List", resource.kind);
    let (api_version, kind) = type_meta();
    json!({
        "type": "object",
        "description": format!("{list_kind} is a list of {}", resource.kind),
        "required": ["items"],
        "properties": {
            "apiVersion": api_version,
            "kind": kind,
            "items": {
                "type": "array",
                "description": format!("List of {}. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md", resource.plural),
                "items": reference(item),
            },
            "metadata": wrapped_reference(LIST_META, "Standard list metadata. More info: https://git.k8s.io/community/contributors/devel/sig-architecture/api-conventions.md#types-kinds"),
        },
        "x-kubernetes-group-version-kind": [gvk(group, version, &list_kind)],
    })
}

/// The paths of one resource, built as the apiserver's CRD OpenAPI builder lays them out.
struct Routes<'a> {
    group: &'a str,
    version: &'a str,
    resource: &'a DiscoveredResource,
    name: &'a str,
}

/// One operation: HTTP method, `x-kubernetes-action`, operation verb, response and body schemas.
struct Op<'a> {
    method: &'a str,
    action: &'a str,
    verb: &'a str,
    response: &'a str,
    body: Option<&'a str>,
}

impl Routes<'_> {
    fn add_to(&self, paths: &mut Map<String, Value>) {
        let r = self.resource;
        let base = if self.group.is_empty() {
            "/api".to_string()
        } else {
            format!("/apis/{}", self.group)
        };
        let base = format!("{base}/{}", self.version);
        let list = format!("{}List", self.name);
        let (kind, ns) = (r.kind.as_str(), if r.namespaced { "Namespaced" } else { "" });
        let op = |method, action, verb, response, body| Op {
            method,
            action,
            verb,
            response,
            body,
        };
        let root = if r.namespaced {
            let all = format!("{base}/{}", r.plural);
            let ops = [op("get", "list", "list", list.as_str(), None)];
            paths.insert(
                all,
                self.path_item(&ops, &format!("{kind}ForAllNamespaces"), false, false),
            );
            format!("{base}/namespaces/{{namespace}}/{}", r.plural)
        } else {
            format!("{base}/{}", r.plural)
        };
        let collection = [
            op("get", "list", "list", list.as_str(), None),
            op("post", "post", "create", self.name, Some(self.name)),
            op(
                "delete",
                "deletecollection",
                "deletecollection",
                STATUS,
                Some(DELETE_OPTIONS),
            ),
        ];
        paths.insert(
            root.clone(),
            self.path_item(&collection, &format!("{ns}{kind}"), r.namespaced, false),
        );
        let object = [
            op("get", "get", "read", self.name, None),
            op("put", "put", "replace", self.name, Some(self.name)),
            op("delete", "delete", "delete", STATUS, Some(DELETE_OPTIONS)),
            op("patch", "patch", "patch", self.name, Some(PATCH)),
        ];
        paths.insert(
            format!("{root}/{{name}}"),
            self.path_item(&object, &format!("{ns}{kind}"), r.namespaced, true),
        );
        for sub in &r.subresources {
            let target = match sub.as_str() {
                "scale" => SCALE,
                _ => self.name,
            };
            let ops: Vec<Op> = match sub.as_str() {
                "status" | "scale" => vec![
                    op("get", "get", "read", target, None),
                    op("put", "put", "replace", target, Some(target)),
                    op("patch", "patch", "patch", target, Some(PATCH)),
                ],
                "finalize" => vec![op("put", "put", "replace", target, Some(target))],
                "token" => vec![op("post", "post", "create", TOKEN_REQUEST, Some(TOKEN_REQUEST))],
                _ => continue,
            };
            let suffix = format!("{ns}{kind}{}", title(sub));
            paths.insert(
                format!("{root}/{{name}}/{sub}"),
                self.path_item(&ops, &suffix, r.namespaced, true),
            );
        }
    }

    fn path_item(&self, ops: &[Op], suffix: &str, namespaced: bool, named: bool) -> Value {
        let mut item = Map::new();
        for op in ops {
            item.insert(op.method.into(), self.operation(op, suffix));
        }
        let mut params = vec![];
        if named {
            params.push(path_param("name", &format!("name of the {}", self.resource.kind)));
        }
        if namespaced {
            params.push(path_param(
                "namespace",
                "object name and auth scope, such as for teams and projects",
            ));
        }
        params.push(query_param("pretty", "string"));
        item.insert("parameters".into(), Value::Array(params));
        Value::Object(item)
    }

    fn operation(&self, op: &Op, suffix: &str) -> Value {
        let (prefix, infix) = match op.verb {
            "deletecollection" => ("delete", "Collection"),
            v => (v, ""),
        };
        let group_version = format!("{}{}", camel(&api_group_word(self.group), true), title(self.version));
        let mut out = json!({
            "tags": [format!("{}_{}", camel(&api_group_word(self.group), false), self.version)],
            "description": description(op.verb, &self.resource.kind),
            "operationId": format!("{prefix}{group_version}{infix}{suffix}"),
            "parameters": query_params(op.action),
            "responses": responses(op),
            "x-kubernetes-action": op.action,
            "x-kubernetes-group-version-kind": self.operation_gvk(op),
        });
        if let Some(body) = op.body {
            let types: &[&str] = match op.method {
                "patch" if self.group.is_empty() || self.group.ends_with(".k8s.io") || !self.group.contains('.') => &[
                    "application/apply-patch+yaml",
                    "application/json-patch+json",
                    "application/merge-patch+json",
                    "application/strategic-merge-patch+json",
                ],
                "patch" => &[
                    "application/apply-patch+yaml",
                    "application/json-patch+json",
                    "application/merge-patch+json",
                ],
                _ => &["*/*"],
            };
            let content: Map<String, Value> = types
                .iter()
                .map(|t| (t.to_string(), json!({"schema": reference(body)})))
                .collect();
            out["requestBody"] = json!({"content": content, "required": op.method != "delete"});
        }
        out
    }

    fn operation_gvk(&self, op: &Op) -> Value {
        if op.response == TOKEN_REQUEST {
            return gvk("authentication.k8s.io", "v1", "TokenRequest");
        }
        if op.response == SCALE {
            return gvk("autoscaling", "v1", "Scale");
        }
        gvk(self.group, self.version, &self.resource.kind)
    }
}

fn responses(op: &Op) -> Value {
    let body = |description: &str| {
        let content: Map<String, Value> = ["application/json", "application/yaml"]
            .iter()
            .map(|t| (t.to_string(), json!({"schema": reference(op.response)})))
            .collect();
        json!({"description": description, "content": content})
    };
    let mut out = Map::new();
    out.insert("200".into(), body("OK"));
    match op.action {
        "post" => {
            out.insert("201".into(), body("Created"));
            out.insert("202".into(), body("Accepted"));
        }
        "put" => {
            out.insert("201".into(), body("Created"));
        }
        "delete" => {
            out.insert("202".into(), body("Accepted"));
        }
        _ => {}
    }
    out.insert("401".into(), json!({"description": "Unauthorized"}));
    Value::Object(out)
}

fn description(verb: &str, kind: &str) -> String {
    let article = if kind.starts_with(['A', 'E', 'I', 'O', 'U']) {
        "an"
    } else {
        "a"
    };
    match verb {
        "list" => format!("list or watch objects of kind {kind}"),
        "create" => format!("create {article} {kind}"),
        "delete" => format!("delete {article} {kind}"),
        "deletecollection" => format!("delete collection of {kind}"),
        "read" => format!("read the specified {kind}"),
        "replace" => format!("replace the specified {kind}"),
        _ => format!("partially update the specified {kind}"),
    }
}

fn path_param(name: &str, description: &str) -> Value {
    json!({"name": name, "in": "path", "description": description, "required": true, "schema": {"type": "string", "uniqueItems": true}})
}

fn query_param(name: &str, ty: &str) -> Value {
    json!({"name": name, "in": "query", "schema": {"type": ty, "uniqueItems": true}})
}

fn query_params(action: &str) -> Value {
    let names: &[(&str, &str)] = match action {
        "list" | "deletecollection" => &[
            ("allowWatchBookmarks", "boolean"),
            ("continue", "string"),
            ("fieldSelector", "string"),
            ("labelSelector", "string"),
            ("limit", "integer"),
            ("resourceVersion", "string"),
            ("resourceVersionMatch", "string"),
            ("sendInitialEvents", "boolean"),
            ("timeoutSeconds", "integer"),
            ("watch", "boolean"),
        ],
        "post" | "put" => &[
            ("dryRun", "string"),
            ("fieldManager", "string"),
            ("fieldValidation", "string"),
        ],
        "patch" => &[
            ("dryRun", "string"),
            ("fieldManager", "string"),
            ("fieldValidation", "string"),
            ("force", "boolean"),
        ],
        "delete" => &[
            ("dryRun", "string"),
            ("gracePeriodSeconds", "integer"),
            ("orphanDependents", "boolean"),
            ("propagationPolicy", "string"),
        ],
        _ => &[],
    };
    Value::Array(names.iter().map(|(n, t)| query_param(n, t)).collect())
}

/// The group as operation IDs spell it: `core` for the core group, `.k8s.io` dropped.
fn api_group_word(group: &str) -> String {
    match group {
        "" => "core".into(),
        g => g.strip_suffix(".k8s.io").unwrap_or(g).to_string(),
    }
}

/// `rbac.authorization` → `RbacAuthorization` (or `rbacAuthorization`).
fn camel(word: &str, upper_first: bool) -> String {
    let joined: String = word.split(['.', '-']).filter(|p| !p.is_empty()).map(title).collect();
    if upper_first {
        joined
    } else {
        let mut chars = joined.chars();
        chars
            .next()
            .map(|c| c.to_lowercase().chain(chars).collect())
            .unwrap_or_default()
    }
}

fn title(word: &str) -> String {
    let mut chars = word.chars();
    chars
        .next()
        .map(|c| c.to_uppercase().chain(chars).collect())
        .unwrap_or_default()
}

/// The meta/v1 schemas every group-version document carries.
fn meta_schemas() -> Map<String, Value> {
    let meta = |kind: &str| format!("{META}.{kind}");
    let time = json!({"type": "string", "format": "date-time", "description": "Time is a wrapper around time.Time which supports correct marshaling to YAML and JSON."});
    let string_map = json!({"type": "object", "additionalProperties": {"type": "string", "default": ""}});
    let object_meta = json!({
        "type": "object",
        "description": "ObjectMeta is metadata that all persisted resources must have, which includes all objects users must create.",
        "properties": {
            "annotations": string_map,
            "creationTimestamp": wrapped_reference(&meta("Time"), "CreationTimestamp is a timestamp representing the server time when this object was created."),
            "deletionGracePeriodSeconds": {"type": "integer", "format": "int64"},
            "deletionTimestamp": wrapped_reference(&meta("Time"), "DeletionTimestamp is RFC 3339 date and time at which this resource will be deleted."),
            "finalizers": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "set", "x-kubernetes-patch-strategy": "merge"},
            "generateName": {"type": "string"},
            "generation": {"type": "integer", "format": "int64"},
            "labels": string_map,
            "managedFields": {"type": "array", "items": {"default": {}, "allOf": [reference(&meta("ManagedFieldsEntry"))]}, "x-kubernetes-list-type": "atomic"},
            "name": {"type": "string"},
            "namespace": {"type": "string"},
            "ownerReferences": {
                "type": "array",
                "items": {"default": {}, "allOf": [reference(&meta("OwnerReference"))]},
                "x-kubernetes-list-map-keys": ["uid"],
                "x-kubernetes-list-type": "map",
                "x-kubernetes-patch-merge-key": "uid",
                "x-kubernetes-patch-strategy": "merge",
            },
            "resourceVersion": {"type": "string"},
            "selfLink": {"type": "string"},
            "uid": {"type": "string"},
        },
    });
    let entries = [
        (OBJECT_META.to_string(), object_meta),
        (
            LIST_META.to_string(),
            json!({"type": "object", "properties": {
                "continue": {"type": "string"}, "remainingItemCount": {"type": "integer", "format": "int64"},
                "resourceVersion": {"type": "string"}, "selfLink": {"type": "string"},
            }}),
        ),
        (meta("Time"), time),
        (
            meta("FieldsV1"),
            json!({"type": "object", "description": "FieldsV1 stores a set of fields in a data structure like a Trie, in JSON format."}),
        ),
        (
            meta("ManagedFieldsEntry"),
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"}, "fieldsType": {"type": "string"},
                "fieldsV1": wrapped_reference(&meta("FieldsV1"), "FieldsV1 holds the first JSON version format as described in the \"FieldsV1\" type."),
                "manager": {"type": "string"}, "operation": {"type": "string"}, "subresource": {"type": "string"},
                "time": wrapped_reference(&meta("Time"), "Time is the timestamp of when the ManagedFields entry was added."),
            }}),
        ),
        (
            meta("OwnerReference"),
            json!({"type": "object", "required": ["apiVersion", "kind", "name", "uid"], "properties": {
            "apiVersion": {"type": "string", "default": ""}, "blockOwnerDeletion": {"type": "boolean"},
            "controller": {"type": "boolean"}, "kind": {"type": "string", "default": ""},
            "name": {"type": "string", "default": ""}, "uid": {"type": "string", "default": ""},
        }, "x-kubernetes-map-type": "atomic"}),
        ),
        (
            STATUS.to_string(),
            json!({"type": "object", "properties": {
            "apiVersion": {"type": "string"}, "code": {"type": "integer", "format": "int32"},
            "details": {"allOf": [reference(&meta("StatusDetails"))]}, "kind": {"type": "string"},
            "message": {"type": "string"}, "metadata": {"default": {}, "allOf": [reference(LIST_META)]},
            "reason": {"type": "string"}, "status": {"type": "string"},
        }, "x-kubernetes-group-version-kind": [gvk("", "v1", "Status")]}),
        ),
        (
            meta("StatusDetails"),
            json!({"type": "object", "properties": {
                "causes": {"type": "array", "items": {"default": {}, "allOf": [reference(&meta("StatusCause"))]}, "x-kubernetes-list-type": "atomic"},
                "group": {"type": "string"}, "kind": {"type": "string"}, "name": {"type": "string"},
                "retryAfterSeconds": {"type": "integer", "format": "int32"}, "uid": {"type": "string"},
            }}),
        ),
        (
            meta("StatusCause"),
            json!({"type": "object", "properties": {
                "field": {"type": "string"}, "message": {"type": "string"}, "reason": {"type": "string"},
            }}),
        ),
        (
            DELETE_OPTIONS.to_string(),
            json!({"type": "object", "properties": {
                "apiVersion": {"type": "string"},
                "dryRun": {"type": "array", "items": {"type": "string", "default": ""}, "x-kubernetes-list-type": "atomic"},
                "gracePeriodSeconds": {"type": "integer", "format": "int64"}, "kind": {"type": "string"},
                "orphanDependents": {"type": "boolean"},
                "preconditions": {"allOf": [reference(&meta("Preconditions"))]},
                "propagationPolicy": {"type": "string"},
            }}),
        ),
        (
            meta("Preconditions"),
            json!({"type": "object", "properties": {
                "resourceVersion": {"type": "string"}, "uid": {"type": "string"},
            }}),
        ),
        (
            PATCH.to_string(),
            json!({"type": "object", "description": "Patch is provided to give a concrete name and type to the Kubernetes PATCH request body."}),
        ),
    ];
    entries.into_iter().collect()
}

fn scale_schemas() -> Map<String, Value> {
    let (api_version, kind) = type_meta();
    [
        (
            SCALE.to_string(),
            json!({"type": "object", "properties": {
            "apiVersion": api_version, "kind": kind,
            "metadata": wrapped_reference(OBJECT_META, METADATA_DOC),
            "spec": {"default": {}, "allOf": [reference("io.k8s.api.autoscaling.v1.ScaleSpec")]},
            "status": {"default": {}, "allOf": [reference("io.k8s.api.autoscaling.v1.ScaleStatus")]},
        }, "x-kubernetes-group-version-kind": [gvk("autoscaling", "v1", "Scale")]}),
        ),
        (
            "io.k8s.api.autoscaling.v1.ScaleSpec".to_string(),
            json!({"type": "object", "properties": {
                "replicas": {"type": "integer", "format": "int32"},
            }}),
        ),
        (
            "io.k8s.api.autoscaling.v1.ScaleStatus".to_string(),
            json!({"type": "object", "required": ["replicas"], "properties": {
                "replicas": {"type": "integer", "format": "int32", "default": 0}, "selector": {"type": "string"},
            }}),
        ),
    ]
    .into_iter()
    .collect()
}

fn token_request_schema() -> Value {
    let (api_version, kind) = type_meta();
    json!({"type": "object", "required": ["spec"], "properties": {
        "apiVersion": api_version, "kind": kind,
        "metadata": wrapped_reference(OBJECT_META, METADATA_DOC),
        "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
    }, "x-kubernetes-group-version-kind": [gvk("authentication.k8s.io", "v1", "TokenRequest")]})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{builtins, crd};

    fn widget_schema() -> Value {
        json!({
            "type": "object",
            "description": "A widget.",
            "properties": {
                "spec": {
                    "type": "object",
                    "required": ["size"],
                    "properties": {
                        "size": {"type": "integer", "default": 1, "minimum": 0},
                        "extra": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                        "id": {"type": "string", "x-kubernetes-validations": [{"rule": "self == oldSelf", "message": "immutable"}]},
                    },
                },
            },
        })
    }

    fn widget(namespaced: bool, subresources: &[&str]) -> (DiscoveredResource, Schema) {
        let resource = DiscoveredResource {
            group: "example.org".into(),
            version: "v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
            singular: "widget".into(),
            namespaced,
            verbs: vec![],
            subresources: subresources.iter().map(|s| s.to_string()).collect(),
            short_names: vec![],
            categories: vec![],
        };
        (resource, Schema::new(widget_schema()))
    }

    #[test]
    fn definition_names_follow_kube_naming() {
        assert_eq!(definition_name("example.org", "v1", "Widget"), "org.example.v1.Widget");
        assert_eq!(
            definition_name("core.kcp.io", "v1alpha1", "LogicalCluster"),
            "io.kcp.core.v1alpha1.LogicalCluster"
        );
        assert_eq!(definition_name("", "v1", "Secret"), "io.k8s.api.core.v1.Secret");
        assert_eq!(
            definition_name("apps", "v1", "Deployment"),
            "io.k8s.api.apps.v1.Deployment"
        );
        assert_eq!(
            definition_name("rbac.authorization.k8s.io", "v1", "Role"),
            "io.k8s.api.rbac.v1.Role"
        );
        assert_eq!(
            definition_name("apiextensions.k8s.io", "v1", "CustomResourceDefinition"),
            "io.k8s.apiextensions-apiserver.pkg.apis.apiextensions.v1.CustomResourceDefinition"
        );
    }

    #[test]
    fn a_crd_schema_round_trips_into_components_unchanged() {
        let doc = group_version_document("example.org", "v1", &[widget(true, &["status"])]);
        assert_eq!(doc["openapi"], "3.0.0");
        assert_eq!(doc["info"]["title"], "Kubernetes CRD Swagger");
        let mut published = doc["components"]["schemas"]["org.example.v1.Widget"].clone();
        assert_eq!(
            published["x-kubernetes-group-version-kind"],
            json!([{"group": "example.org", "version": "v1", "kind": "Widget"}])
        );
        assert_eq!(
            published["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/components/schemas/io.k8s.apimachinery.pkg.apis.meta.v1.ObjectMeta"
        );
        assert_eq!(published["properties"]["apiVersion"]["type"], "string");
        let object = published.as_object_mut().expect("object");
        object.remove("x-kubernetes-group-version-kind");
        for key in ["apiVersion", "kind", "metadata"] {
            object["properties"].as_object_mut().expect("properties").remove(key);
        }
        assert_eq!(published, widget_schema());
        assert!(doc["components"]["schemas"][OBJECT_META]["properties"]["ownerReferences"].is_object());
        let list = &doc["components"]["schemas"]["org.example.v1.WidgetList"];
        assert_eq!(
            list["properties"]["items"]["items"]["$ref"],
            "#/components/schemas/org.example.v1.Widget"
        );
    }

    #[test]
    fn paths_carry_actions_and_group_version_kind() {
        let doc = group_version_document("example.org", "v1", &[widget(true, &["status"])]);
        let paths = doc["paths"].as_object().expect("paths");
        let mut names: Vec<&str> = paths.keys().map(String::as_str).collect();
        names.sort();
        assert_eq!(
            names,
            [
                "/apis/example.org/v1/namespaces/{namespace}/widgets",
                "/apis/example.org/v1/namespaces/{namespace}/widgets/{name}",
                "/apis/example.org/v1/namespaces/{namespace}/widgets/{name}/status",
                "/apis/example.org/v1/widgets",
            ]
        );
        let one = &paths["/apis/example.org/v1/namespaces/{namespace}/widgets/{name}"];
        let actions: Vec<&str> = ["get", "put", "delete", "patch"]
            .iter()
            .map(|m| one[m]["x-kubernetes-action"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(actions, ["get", "put", "delete", "patch"]);
        assert_eq!(
            one["get"]["x-kubernetes-group-version-kind"],
            json!({"group": "example.org", "version": "v1", "kind": "Widget"})
        );
        assert_eq!(one["get"]["operationId"], "readExampleOrgV1NamespacedWidget");
        let collection = &paths["/apis/example.org/v1/namespaces/{namespace}/widgets"];
        assert_eq!(collection["get"]["x-kubernetes-action"], "list");
        assert_eq!(collection["post"]["x-kubernetes-action"], "post");
        assert_eq!(
            collection["delete"]["operationId"],
            "deleteExampleOrgV1CollectionNamespacedWidget"
        );
        assert_eq!(
            paths["/apis/example.org/v1/widgets"]["get"]["operationId"],
            "listExampleOrgV1WidgetForAllNamespaces"
        );
        let status = &paths["/apis/example.org/v1/namespaces/{namespace}/widgets/{name}/status"];
        assert_eq!(
            status["patch"]["operationId"],
            "patchExampleOrgV1NamespacedWidgetStatus"
        );
    }

    #[test]
    fn cluster_scoped_resources_have_no_namespace_paths() {
        let doc = group_version_document("example.org", "v1", &[widget(false, &[])]);
        let paths = doc["paths"].as_object().expect("paths");
        assert_eq!(paths.len(), 2);
        assert!(paths.contains_key("/apis/example.org/v1/widgets/{name}"));
    }

    #[test]
    fn int_or_string_and_embedded_resources_are_unfolded_like_the_apiserver() {
        let schema = json!({"type": "object", "properties": {
            "port": {"x-kubernetes-int-or-string": true},
            "template": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
        }});
        let (resource, _) = widget(true, &[]);
        let doc = group_version_document("example.org", "v1", &[(resource, Schema::new(schema))]);
        let props = &doc["components"]["schemas"]["org.example.v1.Widget"]["properties"];
        assert_eq!(
            props["port"],
            json!({"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]})
        );
        assert_eq!(props["template"]["required"], json!(["kind", "apiVersion"]));
        assert_eq!(props["template"]["properties"]["kind"]["type"], "string");
    }

    #[test]
    fn a_crd_and_builtins_publish_their_documents() {
        let crd = json!({
            "metadata": {"name": "widgets.example.org"},
            "spec": {"group": "example.org", "scope": "Namespaced", "names": {"plural": "widgets", "kind": "Widget"},
                "versions": [{"name": "v1", "served": true, "storage": true, "schema": {"openAPIV3Schema": widget_schema()}}]},
        });
        let doc = group_version_document("example.org", "v1", &crd::served_resources(&crd));
        assert!(doc["components"]["schemas"]["org.example.v1.Widget"]["properties"]["spec"]["properties"]["id"]["x-kubernetes-validations"].is_array());
        let apps: Vec<(DiscoveredResource, Schema)> = builtins::all()
            .into_iter()
            .filter(|b| b.resource.group == "apps")
            .map(|b| (b.resource, b.schema))
            .collect();
        let doc = group_version_document("apps", "v1", &apps);
        assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
        assert!(doc["components"]["schemas"][SCALE].is_object());
        let scale = &doc["paths"]["/apis/apps/v1/namespaces/{namespace}/deployments/{name}/scale"]["get"];
        assert_eq!(scale["x-kubernetes-group-version-kind"]["kind"], "Scale");
        assert_eq!(scale["operationId"], "readAppsV1NamespacedDeploymentScale");
    }

    #[test]
    fn the_root_index_points_at_each_document_with_a_content_hash() {
        let a = group_version_document("example.org", "v1", &[widget(true, &[])]);
        let b = group_version_document("example.org", "v1", &[widget(false, &[])]);
        let index = root_index(&[
            ("example.org".into(), "v1".into(), a.clone()),
            ("".into(), "v1".into(), json!({"openapi": "3.0.0"})),
        ]);
        let url = index["paths"]["apis/example.org/v1"]["serverRelativeURL"]
            .as_str()
            .expect("url");
        assert_eq!(
            url,
            format!("/openapi/v3/apis/example.org/v1?hash={}", document_hash(&a))
        );
        assert!(
            index["paths"]["api/v1"]["serverRelativeURL"]
                .as_str()
                .is_some_and(|u| u.starts_with("/openapi/v3/api/v1?hash="))
        );
        assert_eq!(document_hash(&a).len(), 128);
        assert_eq!(document_hash(&a), document_hash(&a.clone()));
        assert_ne!(document_hash(&a), document_hash(&b));
    }
}
