//! The built-in resources fakeapi serves (placeholder until the schema branch lands).

use kbind_cluster::DiscoveredResource;

use crate::schema::Schema;

/// One built-in resource.
#[derive(Debug, Clone)]
pub struct Builtin {
    /// Discovery entry.
    pub resource: DiscoveredResource,
    /// Schema of the whole object.
    pub schema: Schema,
}

fn builtin(group: &str, version: &str, kind: &str, plural: &str, namespaced: bool, subresources: &[&str]) -> Builtin {
    Builtin {
        resource: DiscoveredResource {
            group: group.into(),
            version: version.into(),
            kind: kind.into(),
            plural: plural.into(),
            singular: kind.to_lowercase(),
            namespaced,
            verbs: [
                "create",
                "delete",
                "deletecollection",
                "get",
                "list",
                "patch",
                "update",
                "watch",
            ]
            .map(String::from)
            .to_vec(),
            subresources: subresources.iter().map(|s| s.to_string()).collect(),
            short_names: vec![],
            categories: vec![],
        },
        schema: Schema::any(),
    }
}

/// Every built-in resource.
pub fn all() -> Vec<Builtin> {
    vec![
        builtin("", "v1", "Namespace", "namespaces", false, &["status", "finalize"]),
        builtin("", "v1", "ConfigMap", "configmaps", true, &[]),
        builtin("", "v1", "Secret", "secrets", true, &[]),
        builtin("", "v1", "ServiceAccount", "serviceaccounts", true, &["token"]),
        builtin("", "v1", "Event", "events", true, &[]),
        builtin("apps", "v1", "Deployment", "deployments", true, &["status", "scale"]),
        builtin("coordination.k8s.io", "v1", "Lease", "leases", true, &[]),
        builtin("events.k8s.io", "v1", "Event", "events", true, &[]),
        builtin("rbac.authorization.k8s.io", "v1", "Role", "roles", true, &[]),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "RoleBinding",
            "rolebindings",
            true,
            &[],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRole",
            "clusterroles",
            false,
            &[],
        ),
        builtin(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
            false,
            &[],
        ),
        builtin(
            "apiextensions.k8s.io",
            "v1",
            "CustomResourceDefinition",
            "customresourcedefinitions",
            false,
            &["status"],
        ),
    ]
}

/// kcp's LogicalCluster, served only on kcp-like clusters.
pub fn logical_cluster() -> Builtin {
    builtin(
        "core.kcp.io",
        "v1alpha1",
        "LogicalCluster",
        "logicalclusters",
        false,
        &["status"],
    )
}
