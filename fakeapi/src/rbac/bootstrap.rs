//! The default ClusterRoles and ClusterRoleBindings kube-apiserver creates at start (the
//! user-facing and discovery part of its bootstrap policy).

use serde_json::{Value, json};

use super::resolver::name_of;
use super::{RbacSnapshot, SYSTEM_AUTHENTICATED, SYSTEM_MASTERS, SYSTEM_UNAUTHENTICATED};

const READ: &[&str] = &["get", "list", "watch"];
const READ_WRITE: &[&str] = &[
    "create",
    "delete",
    "deletecollection",
    "get",
    "list",
    "patch",
    "update",
    "watch",
];
const WRITE: &[&str] = &["create", "delete", "deletecollection", "patch", "update"];

const AGGREGATE_TO_ADMIN: &str = "rbac.authorization.k8s.io/aggregate-to-admin";
const AGGREGATE_TO_EDIT: &str = "rbac.authorization.k8s.io/aggregate-to-edit";
const AGGREGATE_TO_VIEW: &str = "rbac.authorization.k8s.io/aggregate-to-view";

/// The bootstrap ClusterRoles (cluster-admin, admin, edit, view and the roles aggregated into
/// them, system:discovery, system:basic-user, system:public-info-viewer) and their
/// ClusterRoleBindings, with aggregated rules already filled in as the aggregation controller
/// does moments after start.
pub fn bootstrap_policy() -> RbacSnapshot {
    let mut policy = RbacSnapshot {
        cluster_roles: cluster_roles(),
        cluster_role_bindings: cluster_role_bindings(),
        ..RbacSnapshot::default()
    };
    let aggregated = policy.aggregated_rules();
    for role in &mut policy.cluster_roles {
        if let Some(rules) = aggregated.get(name_of(role)) {
            role["rules"] = Value::Array(rules.clone());
        }
    }
    policy
}

fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn url_rule(urls: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": urls, "verbs": verbs})
}

fn metadata(name: &str, extra_labels: &[&str]) -> Value {
    let mut meta = json!({
        "name": name,
        "labels": {"kubernetes.io/bootstrapping": "rbac-defaults"},
        "annotations": {"rbac.authorization.kubernetes.io/autoupdate": "true"},
    });
    for label in extra_labels {
        meta["labels"][*label] = json!("true");
    }
    meta
}

fn cluster_role(name: &str, extra_labels: &[&str], rules: Vec<Value>) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": metadata(name, extra_labels),
        "rules": rules,
    })
}

fn aggregated_cluster_role(name: &str, extra_labels: &[&str], aggregate_from: &str) -> Value {
    let mut role = cluster_role(name, extra_labels, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {aggregate_from: "true"}}]});
    role
}

fn cluster_roles() -> Vec<Value> {
    vec![
        cluster_role(
            "cluster-admin",
            &[],
            vec![rule(&["*"], &["*"], &["*"]), url_rule(&["*"], &["*"])],
        ),
        aggregated_cluster_role("admin", &[], AGGREGATE_TO_ADMIN),
        aggregated_cluster_role("edit", &[AGGREGATE_TO_ADMIN], AGGREGATE_TO_EDIT),
        aggregated_cluster_role("view", &[AGGREGATE_TO_EDIT], AGGREGATE_TO_VIEW),
        cluster_role(
            "system:aggregate-to-admin",
            &[AGGREGATE_TO_ADMIN],
            aggregate_to_admin_rules(),
        ),
        cluster_role(
            "system:aggregate-to-edit",
            &[AGGREGATE_TO_EDIT],
            aggregate_to_edit_rules(),
        ),
        cluster_role(
            "system:aggregate-to-view",
            &[AGGREGATE_TO_VIEW],
            aggregate_to_view_rules(),
        ),
        cluster_role(
            "system:basic-user",
            &[],
            vec![
                rule(
                    &["authorization.k8s.io"],
                    &["selfsubjectaccessreviews", "selfsubjectrulesreviews"],
                    &["create"],
                ),
                rule(&["authentication.k8s.io"], &["selfsubjectreviews"], &["create"]),
            ],
        ),
        cluster_role(
            "system:discovery",
            &[],
            vec![url_rule(
                &[
                    "/api",
                    "/api/*",
                    "/apis",
                    "/apis/*",
                    "/healthz",
                    "/livez",
                    "/openapi",
                    "/openapi/*",
                    "/readyz",
                    "/version",
                    "/version/",
                ],
                &["get"],
            )],
        ),
        cluster_role(
            "system:public-info-viewer",
            &[],
            vec![url_rule(
                &["/healthz", "/livez", "/readyz", "/version", "/version/"],
                &["get"],
            )],
        ),
    ]
}

fn aggregate_to_admin_rules() -> Vec<Value> {
    vec![
        rule(&["authorization.k8s.io"], &["localsubjectaccessreviews"], &["create"]),
        rule(&["rbac.authorization.k8s.io"], &["rolebindings", "roles"], READ_WRITE),
    ]
}

fn aggregate_to_edit_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "pods/attach",
                "pods/exec",
                "pods/portforward",
                "pods/proxy",
                "secrets",
                "services/proxy",
            ],
            READ,
        ),
        rule(&[""], &["serviceaccounts"], &["impersonate"]),
        rule(
            &[""],
            &["pods", "pods/attach", "pods/exec", "pods/portforward", "pods/proxy"],
            WRITE,
        ),
        rule(&[""], &["pods/eviction"], &["create"]),
        rule(
            &[""],
            &[
                "configmaps",
                "events",
                "persistentvolumeclaims",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "secrets",
                "serviceaccounts",
                "services",
                "services/proxy",
            ],
            WRITE,
        ),
        rule(&[""], &["serviceaccounts/token"], &["create"]),
        rule(
            &["apps"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "replicasets",
                "replicasets/scale",
                "statefulsets",
                "statefulsets/scale",
            ],
            WRITE,
        ),
        rule(&["autoscaling"], &["horizontalpodautoscalers"], WRITE),
        rule(&["batch"], &["cronjobs", "jobs"], WRITE),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "deployments",
                "deployments/rollback",
                "deployments/scale",
                "ingresses",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicationcontrollers/scale",
            ],
            WRITE,
        ),
        rule(&["policy"], &["poddisruptionbudgets"], WRITE),
        rule(&["networking.k8s.io"], &["ingresses", "networkpolicies"], WRITE),
        rule(&["coordination.k8s.io"], &["leases"], READ_WRITE),
    ]
}

fn aggregate_to_view_rules() -> Vec<Value> {
    vec![
        rule(
            &[""],
            &[
                "configmaps",
                "endpoints",
                "persistentvolumeclaims",
                "persistentvolumeclaims/status",
                "pods",
                "replicationcontrollers",
                "replicationcontrollers/scale",
                "serviceaccounts",
                "services",
                "services/status",
            ],
            READ,
        ),
        rule(
            &[""],
            &[
                "bindings",
                "events",
                "limitranges",
                "namespaces/status",
                "pods/log",
                "pods/status",
                "replicationcontrollers/status",
                "resourcequotas",
                "resourcequotas/status",
            ],
            READ,
        ),
        rule(&[""], &["namespaces"], READ),
        rule(&["discovery.k8s.io"], &["endpointslices"], READ),
        rule(
            &["apps"],
            &[
                "controllerrevisions",
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "statefulsets",
                "statefulsets/scale",
                "statefulsets/status",
            ],
            READ,
        ),
        rule(
            &["autoscaling"],
            &["horizontalpodautoscalers", "horizontalpodautoscalers/status"],
            READ,
        ),
        rule(
            &["batch"],
            &["cronjobs", "cronjobs/status", "jobs", "jobs/status"],
            READ,
        ),
        rule(
            &["extensions"],
            &[
                "daemonsets",
                "daemonsets/status",
                "deployments",
                "deployments/scale",
                "deployments/status",
                "ingresses",
                "ingresses/status",
                "networkpolicies",
                "replicasets",
                "replicasets/scale",
                "replicasets/status",
                "replicationcontrollers/scale",
            ],
            READ,
        ),
        rule(
            &["policy"],
            &["poddisruptionbudgets", "poddisruptionbudgets/status"],
            READ,
        ),
        rule(
            &["networking.k8s.io"],
            &["ingresses", "ingresses/status", "networkpolicies"],
            READ,
        ),
    ]
}

fn cluster_role_binding(name: &str, groups: &[&str]) -> Value {
    let subjects: Vec<Value> = groups
        .iter()
        .map(|g| json!({"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": g}))
        .collect();
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": metadata(name, &[]),
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
        "subjects": subjects,
    })
}

fn cluster_role_bindings() -> Vec<Value> {
    vec![
        cluster_role_binding("cluster-admin", &[SYSTEM_MASTERS]),
        cluster_role_binding("system:basic-user", &[SYSTEM_AUTHENTICATED]),
        cluster_role_binding("system:discovery", &[SYSTEM_AUTHENTICATED]),
        cluster_role_binding(
            "system:public-info-viewer",
            &[SYSTEM_AUTHENTICATED, SYSTEM_UNAUTHENTICATED],
        ),
    ]
}
