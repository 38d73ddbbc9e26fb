//! RBAC objects: names are path segments rather than DNS subdomains, and a role or binding may
//! grant only what its writer holds (kube's escalation check).

use kbind_cluster::{Error, Result};
use serde_json::Value;

use super::Strategy;
use crate::meta;
use crate::rbac::{self as policy, UserInfo};
use crate::store::State;

/// Which RBAC object a strategy writes.
pub(crate) enum Rbac {
    /// `roles`.
    Roles,
    /// `clusterroles`.
    ClusterRoles,
    /// `rolebindings`.
    RoleBindings,
    /// `clusterrolebindings`.
    ClusterRoleBindings,
}

/// The strategy of `roles`.
pub(crate) static ROLES: Rbac = Rbac::Roles;
/// The strategy of `clusterroles`.
pub(crate) static CLUSTER_ROLES: Rbac = Rbac::ClusterRoles;
/// The strategy of `rolebindings`.
pub(crate) static ROLE_BINDINGS: Rbac = Rbac::RoleBindings;
/// The strategy of `clusterrolebindings`.
pub(crate) static CLUSTER_ROLE_BINDINGS: Rbac = Rbac::ClusterRoleBindings;

impl Strategy for Rbac {
    fn valid_name(&self, name: &str) -> bool {
        !name.is_empty() && name != "." && name != ".." && !name.contains('/') && !name.contains('%')
    }

    fn authorize_write(&self, state: &State, user: &UserInfo, obj: &Value, old: Option<&Value>) -> Result<()> {
        if user.is_privileged() {
            return Ok(());
        }
        let snapshot = crate::admission::rbac_snapshot(state);
        let ns = meta::namespace(obj).unwrap_or("");
        let checked = match self {
            Rbac::Roles => policy::check_role_write(user, ns, obj, old, &snapshot),
            Rbac::ClusterRoles => policy::check_cluster_role_write(user, obj, old, &snapshot),
            Rbac::RoleBindings => policy::check_role_binding_write(user, ns, obj, old, &snapshot),
            Rbac::ClusterRoleBindings => policy::check_cluster_role_binding_write(user, obj, old, &snapshot),
        };
        checked.map_err(|e| match e {
            policy::GrantError::Forbidden { resource, message, .. } => Error::Forbidden {
                verb: if old.is_some() {
                    "update".into()
                } else {
                    "create".into()
                },
                resource: format!("{resource}.rbac.authorization.k8s.io"),
                message,
            },
            policy::GrantError::RoleRef(err) => Error::NotFound {
                message: err.to_string(),
            },
        })
    }
}
