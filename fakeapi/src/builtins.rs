//! The built-in resources fakeapi serves, with the schemas (list-map and merge keys) that
//! server-side apply and strategic merge patch need.
//!
//! Discovery entries are those kube-apiserver 1.35 reports. Schemas type what kbind reads or
//! merges and keep `x-kubernetes-preserve-unknown-fields` where fields are not modelled, so
//! pruning never drops a real field; lists carry the list types and merge keys of the Go types
//! (`+listType`, `+listMapKey`, `+patchMergeKey`, `+patchStrategy`).

use kbind_cluster::DiscoveredResource;
use serde_json::{Value, json};

use crate::schema::Schema;

/// One built-in resource.
#[derive(Debug, Clone)]
pub struct Builtin {
    /// Discovery entry.
    pub resource: DiscoveredResource,
    /// Schema of the whole object.
    pub schema: Schema,
}

/// Every built-in resource (kcp's LogicalCluster is separate: [`logical_cluster`]).
pub fn all() -> Vec<Builtin> {
    vec![
        namespaces(),
        secrets(),
        configmaps(),
        serviceaccounts(),
        core_events(),
        events_k8s_io(),
        leases(),
        roles(),
        clusterroles(),
        rolebindings(),
        clusterrolebindings(),
        deployments(),
        customresourcedefinitions(),
    ]
}

/// kcp's `logicalclusters.core.kcp.io/v1alpha1`, served only by kcp-like fakes.
pub fn logical_cluster() -> Builtin {
    let mut resource = discovered("core.kcp.io", "v1alpha1", "LogicalCluster", "logicalclusters", false);
    // kcp serves it through its CRD machinery, hence the custom-resource verb order.
    resource.verbs = strings(crate::crd::VERBS);
    resource.subresources = strings(&["status"]);
    resource.categories = strings(&["kcp"]);
    let schema = object_schema(json!({
        "spec": open_object(json!({
            "owner": open_object(json!({})),
            "directlyDeletable": boolean(),
            "initializers": set_of(string()),
        })),
        "status": open_object(json!({
            "URL": string(),
            "phase": string(),
            "initializers": set_of(string()),
            "conditions": conditions(),
        })),
    }));
    Builtin { resource, schema }
}

/// The ObjectMeta schema shared by every resource (and used to prune custom resources'
/// metadata): labels/annotations string maps, ownerReferences keyed by uid, finalizers a set,
/// managedFields atomic.
pub fn object_meta_schema() -> Value {
    let timestamp = json!({"type": "string", "format": "date-time", "nullable": true});
    json!({
        "type": "object",
        "properties": {
            "name": string(),
            "generateName": string(),
            "namespace": string(),
            "selfLink": string(),
            "uid": string(),
            "resourceVersion": string(),
            "generation": int64(),
            "creationTimestamp": timestamp,
            "deletionTimestamp": timestamp,
            "deletionGracePeriodSeconds": int64(),
            "labels": string_map(),
            "annotations": string_map(),
            "ownerReferences": merge_list(&["uid"], owner_reference()),
            "finalizers": {
                "type": "array",
                "items": string(),
                "x-kubernetes-list-type": "set",
                "x-kubernetes-patch-strategy": "merge",
            },
            "managedFields": atomic_list(managed_fields_entry()),
        },
    })
}

fn owner_reference() -> Value {
    json!({
        "type": "object",
        "required": ["apiVersion", "kind", "name", "uid"],
        "properties": {
            "apiVersion": string(),
            "kind": string(),
            "name": string(),
            "uid": string(),
            "controller": boolean(),
            "blockOwnerDeletion": boolean(),
        },
        "x-kubernetes-map-type": "atomic",
    })
}

fn managed_fields_entry() -> Value {
    json!({
        "type": "object",
        "properties": {
            "manager": string(),
            "operation": string(),
            "apiVersion": string(),
            "time": {"type": "string", "format": "date-time"},
            "fieldsType": string(),
            "fieldsV1": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
            "subresource": string(),
        },
    })
}

// --- discovery ---------------------------------------------------------------------------

const ALL_VERBS: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];

fn strings(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| s.to_string()).collect()
}

fn discovered(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool) -> DiscoveredResource {
    DiscoveredResource {
        group: group.to_string(),
        version: version.to_string(),
        kind: kind.to_string(),
        plural: plural.to_string(),
        singular: kind.to_lowercase(),
        namespaced,
        verbs: strings(ALL_VERBS),
        subresources: vec![],
        short_names: vec![],
        categories: vec![],
    }
}

// --- schema building blocks --------------------------------------------------------------

fn string() -> Value {
    json!({"type": "string"})
}

fn boolean() -> Value {
    json!({"type": "boolean"})
}

fn int32() -> Value {
    json!({"type": "integer", "format": "int32"})
}

fn int64() -> Value {
    json!({"type": "integer", "format": "int64"})
}

fn micro_time() -> Value {
    json!({"type": "string", "format": "date-time", "nullable": true})
}

fn string_map() -> Value {
    json!({"type": "object", "additionalProperties": string()})
}

/// An object whose other fields we do not model (kept as they are).
fn open_object(properties: Value) -> Value {
    json!({"type": "object", "properties": properties, "x-kubernetes-preserve-unknown-fields": true})
}

/// An object with exactly these fields.
fn closed_object(properties: Value) -> Value {
    json!({"type": "object", "properties": properties})
}

fn atomic_list(items: Value) -> Value {
    json!({"type": "array", "items": items, "x-kubernetes-list-type": "atomic"})
}

fn set_of(items: Value) -> Value {
    json!({"type": "array", "items": items, "x-kubernetes-list-type": "set"})
}

/// A list-map keyed by `keys`, strategic-merged on the first key.
fn merge_list(keys: &[&str], items: Value) -> Value {
    json!({
        "type": "array",
        "items": items,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": keys,
        "x-kubernetes-patch-merge-key": keys[0],
        "x-kubernetes-patch-strategy": "merge",
    })
}

/// `metav1.Condition`-like conditions keyed by type.
fn conditions() -> Value {
    merge_list(
        &["type"],
        json!({
            "type": "object",
            "required": ["type"],
            "properties": {
                "type": string(),
                "status": string(),
                "reason": string(),
                "message": string(),
                "observedGeneration": int64(),
                "lastTransitionTime": micro_time(),
                "lastUpdateTime": micro_time(),
                "lastProbeTime": micro_time(),
            },
            "x-kubernetes-preserve-unknown-fields": true,
        }),
    )
}

/// A top-level resource schema: TypeMeta, ObjectMeta and `properties`.
fn object_schema(properties: Value) -> Schema {
    let mut props = json!({
        "apiVersion": string(),
        "kind": string(),
        "metadata": object_meta_schema(),
    });
    if let (Some(all), Value::Object(extra)) = (props.as_object_mut(), properties) {
        all.extend(extra);
    }
    Schema::new(json!({"type": "object", "properties": props}))
}

// --- core/v1 -----------------------------------------------------------------------------

fn namespaces() -> Builtin {
    let mut resource = discovered("", "v1", "Namespace", "namespaces", false);
    resource.verbs = strings(&["create", "delete", "get", "list", "patch", "update", "watch"]);
    resource.subresources = strings(&["status", "finalize"]);
    resource.short_names = strings(&["ns"]);
    let schema = object_schema(json!({
        "spec": closed_object(json!({"finalizers": atomic_list(string())})),
        "status": closed_object(json!({"phase": string(), "conditions": conditions()})),
    }));
    Builtin { resource, schema }
}

fn secrets() -> Builtin {
    let resource = discovered("", "v1", "Secret", "secrets", true);
    let schema = object_schema(json!({
        "data": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
        "stringData": string_map(),
        "type": string(),
        "immutable": boolean(),
    }));
    Builtin { resource, schema }
}

fn configmaps() -> Builtin {
    let mut resource = discovered("", "v1", "ConfigMap", "configmaps", true);
    resource.short_names = strings(&["cm"]);
    let schema = object_schema(json!({
        "data": string_map(),
        "binaryData": {"type": "object", "additionalProperties": {"type": "string", "format": "byte"}},
        "immutable": boolean(),
    }));
    Builtin { resource, schema }
}

fn serviceaccounts() -> Builtin {
    let mut resource = discovered("", "v1", "ServiceAccount", "serviceaccounts", true);
    resource.subresources = strings(&["token"]);
    resource.short_names = strings(&["sa"]);
    let schema = object_schema(json!({
        "secrets": merge_list(&["name"], open_object(json!({"name": string()}))),
        "imagePullSecrets": atomic_list(closed_object(json!({"name": string()}))),
        "automountServiceAccountToken": boolean(),
    }));
    Builtin { resource, schema }
}

fn core_events() -> Builtin {
    let mut resource = discovered("", "v1", "Event", "events", true);
    resource.short_names = strings(&["ev"]);
    let schema = object_schema(json!({
        "involvedObject": open_object(json!({})),
        "reason": string(),
        "message": string(),
        "source": closed_object(json!({"component": string(), "host": string()})),
        "firstTimestamp": micro_time(),
        "lastTimestamp": micro_time(),
        "count": int32(),
        "type": string(),
        "eventTime": micro_time(),
        "series": open_object(json!({"count": int32(), "lastObservedTime": micro_time()})),
        "action": string(),
        "related": open_object(json!({})),
        "reportingComponent": string(),
        "reportingInstance": string(),
    }));
    Builtin { resource, schema }
}

fn events_k8s_io() -> Builtin {
    let mut resource = discovered("events.k8s.io", "v1", "Event", "events", true);
    resource.short_names = strings(&["ev"]);
    let schema = object_schema(json!({
        "eventTime": micro_time(),
        "series": open_object(json!({"count": int32(), "lastObservedTime": micro_time()})),
        "reportingController": string(),
        "reportingInstance": string(),
        "action": string(),
        "reason": string(),
        "regarding": open_object(json!({})),
        "related": open_object(json!({})),
        "note": string(),
        "type": string(),
        "deprecatedSource": open_object(json!({})),
        "deprecatedFirstTimestamp": micro_time(),
        "deprecatedLastTimestamp": micro_time(),
        "deprecatedCount": int32(),
    }));
    Builtin { resource, schema }
}

fn leases() -> Builtin {
    let resource = discovered("coordination.k8s.io", "v1", "Lease", "leases", true);
    let schema = object_schema(json!({
        "spec": closed_object(json!({
            "holderIdentity": string(),
            "leaseDurationSeconds": int32(),
            "acquireTime": micro_time(),
            "renewTime": micro_time(),
            "leaseTransitions": int32(),
            "strategy": string(),
            "preferredHolder": string(),
        })),
    }));
    Builtin { resource, schema }
}

// --- rbac.authorization.k8s.io/v1 --------------------------------------------------------

const RBAC: &str = "rbac.authorization.k8s.io";

fn policy_rules() -> Value {
    atomic_list(closed_object(json!({
        "apiGroups": atomic_list(string()),
        "resources": atomic_list(string()),
        "verbs": atomic_list(string()),
        "resourceNames": atomic_list(string()),
        "nonResourceURLs": atomic_list(string()),
    })))
}

fn binding_schema() -> Schema {
    object_schema(json!({
        "subjects": atomic_list(closed_object(json!({
            "kind": string(),
            "apiGroup": string(),
            "name": string(),
            "namespace": string(),
        }))),
        "roleRef": {
            "type": "object",
            "required": ["apiGroup", "kind", "name"],
            "properties": {"apiGroup": string(), "kind": string(), "name": string()},
            "x-kubernetes-map-type": "atomic",
        },
    }))
}

fn roles() -> Builtin {
    let resource = discovered(RBAC, "v1", "Role", "roles", true);
    Builtin {
        resource,
        schema: object_schema(json!({"rules": policy_rules()})),
    }
}

fn clusterroles() -> Builtin {
    let resource = discovered(RBAC, "v1", "ClusterRole", "clusterroles", false);
    let schema = object_schema(json!({
        "rules": policy_rules(),
        "aggregationRule": closed_object(json!({
            "clusterRoleSelectors": atomic_list(open_object(json!({}))),
        })),
    }));
    Builtin { resource, schema }
}

fn rolebindings() -> Builtin {
    let resource = discovered(RBAC, "v1", "RoleBinding", "rolebindings", true);
    Builtin {
        resource,
        schema: binding_schema(),
    }
}

fn clusterrolebindings() -> Builtin {
    let resource = discovered(RBAC, "v1", "ClusterRoleBinding", "clusterrolebindings", false);
    Builtin {
        resource,
        schema: binding_schema(),
    }
}

// --- apps/v1 -----------------------------------------------------------------------------

fn container() -> Value {
    json!({
        "type": "object",
        "required": ["name"],
        "properties": {
            "name": string(),
            "image": string(),
            "command": atomic_list(string()),
            "args": atomic_list(string()),
            "ports": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["containerPort"],
                    "properties": {
                        "containerPort": int32(),
                        "protocol": {"type": "string", "default": "TCP"},
                        "name": string(),
                        "hostPort": int32(),
                        "hostIP": string(),
                    },
                },
                "x-kubernetes-list-type": "map",
                "x-kubernetes-list-map-keys": ["containerPort", "protocol"],
                "x-kubernetes-patch-merge-key": "containerPort",
                "x-kubernetes-patch-strategy": "merge",
            },
            "env": merge_list(&["name"], open_object(json!({"name": string(), "value": string()}))),
            "envFrom": atomic_list(open_object(json!({}))),
            "volumeMounts": merge_list(
                &["mountPath"],
                open_object(json!({"name": string(), "mountPath": string(), "readOnly": boolean()})),
            ),
        },
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

fn pod_spec() -> Value {
    let mut volumes = merge_list(&["name"], open_object(json!({"name": string()})));
    volumes["x-kubernetes-patch-strategy"] = json!("merge,retainKeys");
    open_object(json!({
        "containers": merge_list(&["name"], container()),
        "initContainers": merge_list(&["name"], container()),
        "ephemeralContainers": merge_list(&["name"], container()),
        "volumes": volumes,
        "imagePullSecrets": merge_list(&["name"], closed_object(json!({"name": string()}))),
        "serviceAccountName": string(),
    }))
}

fn deployments() -> Builtin {
    let mut resource = discovered("apps", "v1", "Deployment", "deployments", true);
    resource.subresources = strings(&["status", "scale"]);
    resource.short_names = strings(&["deploy"]);
    resource.categories = strings(&["all"]);
    let mut strategy = open_object(json!({"type": string()}));
    strategy["x-kubernetes-patch-strategy"] = json!("retainKeys");
    let schema = object_schema(json!({
        "spec": open_object(json!({
            "replicas": int32(),
            "selector": {"type": "object", "x-kubernetes-preserve-unknown-fields": true, "x-kubernetes-map-type": "atomic"},
            "template": open_object(json!({"metadata": object_meta_schema(), "spec": pod_spec()})),
            "strategy": strategy,
            "minReadySeconds": int32(),
            "revisionHistoryLimit": int32(),
            "progressDeadlineSeconds": int32(),
            "paused": boolean(),
        })),
        "status": open_object(json!({
            "observedGeneration": int64(),
            "replicas": int32(),
            "updatedReplicas": int32(),
            "readyReplicas": int32(),
            "availableReplicas": int32(),
            "unavailableReplicas": int32(),
            "conditions": conditions(),
        })),
    }));
    Builtin { resource, schema }
}

// --- apiextensions.k8s.io/v1 -------------------------------------------------------------

fn customresourcedefinitions() -> Builtin {
    let mut resource = discovered(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
        false,
    );
    resource.subresources = strings(&["status"]);
    resource.short_names = strings(&["crd", "crds"]);
    resource.categories = strings(&["api-extensions"]);
    let schema = object_schema(json!({
        "spec": open_object(json!({
            "group": string(),
            "names": open_object(json!({})),
            "scope": string(),
            "versions": atomic_list(open_object(json!({"name": string()}))),
            "conversion": open_object(json!({})),
            "preserveUnknownFields": boolean(),
        })),
        "status": open_object(json!({
            "conditions": conditions(),
            "acceptedNames": open_object(json!({})),
            "storedVersions": atomic_list(string()),
        })),
    }));
    Builtin { resource, schema }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::{ListType, apply_defaults, prune, validate};

    fn builtin(group: &str, plural: &str) -> Builtin {
        all()
            .into_iter()
            .find(|b| b.resource.group == group && b.resource.plural == plural)
            .unwrap_or_else(|| panic!("no builtin {plural}.{group}"))
    }

    fn at(schema: &Schema, path: &[&str]) -> Schema {
        path.iter().fold(schema.clone(), |s, seg| match *seg {
            "[]" => s.items().expect("items"),
            name => s.property(name).unwrap_or_else(|| panic!("no property {name}")),
        })
    }

    #[test]
    fn every_builtin_is_unique_and_has_a_singular_name() {
        let all = all();
        assert_eq!(all.len(), 13);
        for b in &all {
            let r = &b.resource;
            assert_eq!(r.singular, r.kind.to_lowercase(), "{}", r.plural);
            let same = all
                .iter()
                .filter(|o| o.resource.group == r.group && o.resource.plural == r.plural)
                .count();
            assert_eq!(same, 1, "{}.{} twice", r.plural, r.group);
            assert_eq!(b.schema.type_name(), Some("object"));
        }
    }

    #[test]
    fn discovery_matches_kube_apiserver() {
        let ns = builtin("", "namespaces").resource;
        assert!(!ns.namespaced);
        assert_eq!(ns.subresources, ["status", "finalize"]);
        assert_eq!(ns.short_names, ["ns"]);
        assert!(!ns.verbs.contains(&"deletecollection".to_string()));
        let deploy = builtin("apps", "deployments").resource;
        assert_eq!(deploy.subresources, ["status", "scale"]);
        assert_eq!(deploy.short_names, ["deploy"]);
        assert_eq!(deploy.categories, ["all"]);
        assert_eq!(builtin("", "serviceaccounts").resource.subresources, ["token"]);
        let crd = builtin("apiextensions.k8s.io", "customresourcedefinitions").resource;
        assert_eq!(crd.short_names, ["crd", "crds"]);
        assert_eq!(crd.categories, ["api-extensions"]);
        assert!(!builtin(RBAC, "clusterroles").resource.namespaced);
        assert!(builtin(RBAC, "roles").resource.namespaced);
        assert_eq!(builtin("events.k8s.io", "events").resource.short_names, ["ev"]);
        let lc = logical_cluster().resource;
        assert_eq!(
            (lc.group.as_str(), lc.version.as_str(), lc.namespaced),
            ("core.kcp.io", "v1alpha1", false)
        );
        assert!(lc.has_status());
    }

    #[test]
    fn object_meta_lists_merge_by_their_kube_keys() {
        let meta = Schema::new(object_meta_schema());
        let owners = meta.property("ownerReferences").expect("ownerReferences");
        assert_eq!(owners.list_type(), ListType::Map(vec!["uid".into()]));
        assert_eq!(owners.patch_merge_key().as_deref(), Some("uid"));
        assert!(owners.items().expect("items").is_atomic_map());
        let finalizers = meta.property("finalizers").expect("finalizers");
        assert_eq!(finalizers.list_type(), ListType::Set);
        assert_eq!(finalizers.patch_strategy(), Some("merge"));
        assert_eq!(
            meta.property("managedFields").expect("managedFields").list_type(),
            ListType::Atomic
        );
    }

    #[test]
    fn pod_template_lists_merge_by_their_kube_keys() {
        let deploy = builtin("apps", "deployments").schema;
        let pod = at(&deploy, &["spec", "template", "spec"]);
        let containers = pod.property("containers").expect("containers");
        assert_eq!(containers.list_type(), ListType::Map(vec!["name".into()]));
        let c = containers.items().expect("container");
        assert_eq!(
            c.property("ports").expect("ports").list_type(),
            ListType::Map(vec!["containerPort".into(), "protocol".into()])
        );
        assert_eq!(
            c.property("ports").expect("ports").patch_merge_key().as_deref(),
            Some("containerPort")
        );
        assert_eq!(
            c.property("env").expect("env").list_type(),
            ListType::Map(vec!["name".into()])
        );
        assert_eq!(
            c.property("volumeMounts").expect("mounts").list_type(),
            ListType::Map(vec!["mountPath".into()])
        );
        let volumes = pod.property("volumes").expect("volumes");
        assert_eq!(volumes.list_type(), ListType::Map(vec!["name".into()]));
        assert_eq!(volumes.patch_strategy(), Some("merge,retainKeys"));
        let conditions = at(&deploy, &["status", "conditions"]);
        assert_eq!(conditions.list_type(), ListType::Map(vec!["type".into()]));
    }

    #[test]
    fn rbac_rules_and_subjects_are_atomic() {
        for plural in ["roles", "clusterroles"] {
            assert_eq!(
                at(&builtin(RBAC, plural).schema, &["rules"]).list_type(),
                ListType::Atomic
            );
        }
        for plural in ["rolebindings", "clusterrolebindings"] {
            let schema = builtin(RBAC, plural).schema;
            assert_eq!(at(&schema, &["subjects"]).list_type(), ListType::Atomic);
            assert!(at(&schema, &["roleRef"]).is_atomic_map());
        }
    }

    #[test]
    fn pruning_a_secret_drops_unknown_fields_and_metadata_junk() {
        let schema = builtin("", "secrets").schema;
        let mut secret = json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "s", "bogus": 1, "labels": {"a": "b"}},
            "data": {"k": "dg=="}, "stray": true,
        });
        prune(&mut secret, &schema);
        assert_eq!(
            secret,
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "labels": {"a": "b"}}, "data": {"k": "dg=="}})
        );
    }

    #[test]
    fn pruning_a_deployment_keeps_unmodelled_pod_fields() {
        let schema = builtin("apps", "deployments").schema;
        let mut deploy = json!({
            "spec": {"template": {"spec": {
                "containers": [{"name": "c", "image": "i", "resources": {"limits": {"cpu": "1"}}}],
                "nodeSelector": {"a": "b"},
            }}},
        });
        let before = deploy.clone();
        prune(&mut deploy, &schema);
        assert_eq!(deploy, before);
    }

    #[test]
    fn container_port_protocol_defaults_to_tcp_and_duplicates_are_refused() {
        let schema = builtin("apps", "deployments").schema;
        let mut deploy = json!({"spec": {"template": {"spec": {"containers": [
            {"name": "c", "ports": [{"containerPort": 80}, {"containerPort": 80, "protocol": "TCP"}]},
        ]}}}});
        apply_defaults(&mut deploy, &schema);
        assert_eq!(
            deploy["spec"]["template"]["spec"]["containers"][0]["ports"][0]["protocol"],
            "TCP"
        );
        let causes = validate(&deploy, None, &schema);
        assert_eq!(causes.len(), 1, "{causes:?}");
        assert_eq!(causes[0].reason, "FieldValueDuplicate");
        assert_eq!(causes[0].field, "spec.template.spec.containers[0].ports[1]");
    }

    #[test]
    fn a_valid_lease_and_namespace_pass_validation() {
        let lease = json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "l", "namespace": "default", "creationTimestamp": null},
            "spec": {"holderIdentity": "me", "leaseDurationSeconds": 15, "renewTime": "2024-01-01T00:00:00.000000Z"},
        });
        assert_eq!(
            validate(&lease, None, &builtin("coordination.k8s.io", "leases").schema),
            vec![]
        );
        let bad = json!({"spec": {"leaseDurationSeconds": "15"}});
        let causes = validate(&bad, None, &builtin("coordination.k8s.io", "leases").schema);
        assert_eq!(causes[0].reason, "FieldValueTypeInvalid");
        let ns = json!({"metadata": {"name": "x", "finalizers": ["a"]}, "spec": {"finalizers": ["kubernetes"]}});
        assert_eq!(validate(&ns, None, &builtin("", "namespaces").schema), vec![]);
    }
}
