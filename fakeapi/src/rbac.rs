//! RBAC evaluation per bearer identity, over Roles, ClusterRoles and their bindings, as
//! kube-apiserver's RBAC authorizer and its escalation-checking RBAC storage do it.

mod bootstrap;
mod escalation;
mod message;
mod resolver;
mod rule;
mod selector;

use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde_json::Value;

pub use bootstrap::bootstrap_policy;
pub use escalation::{
    GrantError, check_cluster_role_binding_write, check_cluster_role_write, check_role_binding_write, check_role_write,
    escalation_message, may_grant,
};
pub use message::{forbidden_message, forbidden_message_with_reason};
pub use resolver::ResolveError;
pub use rule::PolicyRule;
pub use selector::SelectorError;

use resolver::{Getter, Resolver, Visit};

/// The group whose members may do anything (kube's privileged-group authorizer).
pub const SYSTEM_MASTERS: &str = "system:masters";
/// The group of every authenticated user.
pub const SYSTEM_AUTHENTICATED: &str = "system:authenticated";
/// The group of every anonymous request.
pub const SYSTEM_UNAUTHENTICATED: &str = "system:unauthenticated";

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
            groups: vec![SYSTEM_MASTERS.into(), SYSTEM_AUTHENTICATED.into()],
        }
    }

    /// A plain authenticated user.
    pub fn user(name: &str) -> Self {
        Self {
            name: name.into(),
            groups: vec![SYSTEM_AUTHENTICATED.into()],
        }
    }

    /// A ServiceAccount token's identity, with the groups the token authenticator adds.
    pub fn service_account(namespace: &str, name: &str) -> Self {
        Self {
            name: format!("system:serviceaccount:{namespace}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{namespace}"),
                SYSTEM_AUTHENTICATED.into(),
            ],
        }
    }

    /// Whether the user is in `system:masters`, which bypasses RBAC and escalation checks.
    pub fn is_privileged(&self) -> bool {
        self.groups.iter().any(|g| g == SYSTEM_MASTERS)
    }
}

/// What a request wants to do.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
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
    /// Object name, if the request names one (also a list/watch whose field selector is
    /// `metadata.name=<name>`, as kube's request info does).
    pub name: Option<String>,
    /// The URL path of a non-resource request (`/api`, `/version`, ...); `None` for resource
    /// requests.
    pub path: Option<String>,
}

impl Attributes {
    /// A resource request for `verb` on `resource` in `api_group`, cluster-scoped and unnamed.
    pub fn resource(verb: &str, api_group: &str, resource: &str) -> Self {
        Self {
            verb: verb.into(),
            api_group: api_group.into(),
            resource: resource.into(),
            ..Self::default()
        }
    }

    /// A non-resource request for `verb` on `path`.
    pub fn non_resource(verb: &str, path: &str) -> Self {
        Self {
            verb: verb.into(),
            path: Some(path.into()),
            ..Self::default()
        }
    }

    /// The same request in `namespace`.
    pub fn in_namespace(mut self, namespace: &str) -> Self {
        self.namespace = Some(namespace.into());
        self
    }

    /// The same request naming object `name`.
    pub fn named(mut self, name: &str) -> Self {
        self.name = Some(name.into());
        self
    }

    /// The same request on `subresource`.
    pub fn on_subresource(mut self, subresource: &str) -> Self {
        self.subresource = subresource.into();
        self
    }

    /// Whether this is a resource (not a non-resource URL) request.
    pub fn is_resource_request(&self) -> bool {
        self.path.is_none()
    }

    /// The namespace, empty for cluster scope.
    fn namespace_or_empty(&self) -> &str {
        self.namespace.as_deref().unwrap_or_default()
    }
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

impl RbacSnapshot {
    /// The `rules` the clusterrole-aggregation controller settles on for each ClusterRole that
    /// has an `aggregationRule`, keyed by name (for a server that stores them back).
    pub fn aggregated_rules(&self) -> BTreeMap<String, Vec<Value>> {
        Resolver::new(self, Getter::Lister)
            .aggregated()
            .iter()
            .map(|(name, rules)| (name.clone(), rules.iter().map(PolicyRule::to_value).collect()))
            .collect()
    }

    /// Every rule that reaches `user` in `namespace` (cluster scope when `None`), as a
    /// SelfSubjectRulesReview would list them.
    pub fn rules_for(&self, user: &UserInfo, namespace: Option<&str>) -> Vec<Value> {
        let (rules, _) = Resolver::new(self, Getter::Lister).rules_for(user, namespace.unwrap_or_default());
        rules.iter().map(PolicyRule::to_value).collect()
    }
}

/// An authorization decision with kube's reason text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request is allowed.
    pub allowed: bool,
    /// `RBAC: allowed by ...` when allowed through a binding; when denied, `RBAC: <errors>` if
    /// some applicable binding referenced a missing role, else empty.
    pub reason: String,
}

/// Whether `user` may do `attrs` under `rbac`.
pub fn authorize(user: &UserInfo, attrs: &Attributes, rbac: &RbacSnapshot) -> bool {
    authorize_with_reason(user, attrs, rbac).allowed
}

/// The decision for `user` doing `attrs` under `rbac`, with the reason kube reports.
pub fn authorize_with_reason(user: &UserInfo, attrs: &Attributes, rbac: &RbacSnapshot) -> Decision {
    if user.is_privileged() {
        return Decision {
            allowed: true,
            reason: String::new(),
        };
    }
    let resolver = Resolver::new(rbac, Getter::Lister);
    let mut allowed_by = None;
    let mut errors = Vec::new();
    resolver.visit_rules_for(user, attrs.namespace_or_empty(), &mut |visit| match visit {
        Visit::Rule { source, rule } if rule.allows(attrs) => {
            allowed_by = Some(format!("RBAC: allowed by {source}"));
            ControlFlow::Break(())
        }
        Visit::Rule { .. } => ControlFlow::Continue(()),
        Visit::Error(err) => {
            errors.push(err);
            ControlFlow::Continue(())
        }
    });
    match allowed_by {
        Some(reason) => Decision { allowed: true, reason },
        None if errors.is_empty() => Decision {
            allowed: false,
            reason: String::new(),
        },
        None => Decision {
            allowed: false,
            reason: format!("RBAC: {}", resolver::aggregate_message(&errors)),
        },
    }
}

#[cfg(test)]
mod tests;
