//! Objects a fresh cluster starts with besides namespaces: the bootstrap RBAC policy.

use serde_json::Value;

use crate::registry::GroupResource;

/// The bootstrap ClusterRoles and ClusterRoleBindings, ready to store.
pub fn rbac_objects() -> Vec<(GroupResource, Value)> {
    let snapshot = crate::rbac::bootstrap_policy();
    let roles = snapshot
        .cluster_roles
        .into_iter()
        .map(|r| (GroupResource::new("rbac.authorization.k8s.io", "clusterroles"), r));
    let bindings = snapshot.cluster_role_bindings.into_iter().map(|b| {
        (
            GroupResource::new("rbac.authorization.k8s.io", "clusterrolebindings"),
            b,
        )
    });
    roles.chain(bindings).collect()
}
