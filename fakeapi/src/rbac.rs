//! RBAC evaluation per bearer identity, over Roles, ClusterRoles and their bindings.

use serde_json::Value;

/// Who is calling.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct UserInfo {
    /// User name, e.g. `admin` or `system:serviceaccount:ns:sa`.
    pub name: String,
    /// Groups, e.g. `system:masters`, `system:authenticated`.
    pub groups: Vec<String>,
}

impl UserInfo {
    /// The cluster administrator (member of `system:masters`).
    pub fn admin() -> Self {
        Self {
            name: "admin".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        }
    }

    /// A plain authenticated user.
    pub fn user(name: &str) -> Self {
        Self {
            name: name.into(),
            groups: vec!["system:authenticated".into()],
        }
    }
}

/// What a request wants to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attributes {
    /// Verb: get, list, watch, create, update, patch, delete, deletecollection.
    pub verb: String,
    /// API group, empty for core.
    pub api_group: String,
    /// Plural resource.
    pub resource: String,
    /// Subresource, empty if none.
    pub subresource: String,
    /// Namespace for namespaced requests.
    pub namespace: Option<String>,
    /// Object name, if the request names one.
    pub name: Option<String>,
}

/// The RBAC objects of a cluster at one moment.
#[derive(Debug, Clone, Default)]
pub struct RbacSnapshot {
    /// Roles (namespaced).
    pub roles: Vec<Value>,
    /// ClusterRoles.
    pub cluster_roles: Vec<Value>,
    /// RoleBindings (namespaced).
    pub role_bindings: Vec<Value>,
    /// ClusterRoleBindings.
    pub cluster_role_bindings: Vec<Value>,
}

/// Whether `user` may do `attrs` under `rbac`.
pub fn authorize(user: &UserInfo, _attrs: &Attributes, _rbac: &RbacSnapshot) -> bool {
    user.groups.iter().any(|g| g == "system:masters")
}

/// The ClusterRoles and ClusterRoleBindings kube-apiserver creates at start.
pub fn bootstrap_policy() -> RbacSnapshot {
    RbacSnapshot::default()
}
