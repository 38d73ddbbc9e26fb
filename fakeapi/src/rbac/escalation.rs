//! Privilege-escalation prevention for writes of Roles, ClusterRoles and their bindings, as
//! kube-apiserver's policy-based RBAC storage does it.

use serde_json::Value;

use super::message::new_forbidden_message;
use super::resolver::{Getter, RBAC_GROUP, ResolveError, Resolver, aggregate_message, aggregation_selectors, name_of};
use super::rule::{PolicyRule, describe_missing, go_quote, go_quote_list, uncovered};
use super::{Attributes, RbacSnapshot, UserInfo, authorize};

/// Why an RBAC write was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum GrantError {
    /// 403 Forbidden: the write would grant permissions the user does not hold.
    #[error("{message}")]
    Forbidden {
        /// The status details' group (`rbac.authorization.k8s.io`).
        group: String,
        /// The status details' kind: the plural resource written, e.g. `rolebindings`.
        resource: String,
        /// The object's name (empty when generated).
        name: String,
        /// The full status message.
        message: String,
    },
    /// The binding's role reference could not be resolved (404 when not found).
    #[error(transparent)]
    RoleRef(#[from] ResolveError),
}

/// Everything, as kube's `fullAuthority`: needed to set an aggregation rule.
fn full_authority() -> Vec<PolicyRule> {
    let all = vec!["*".to_owned()];
    vec![
        PolicyRule {
            verbs: all.clone(),
            api_groups: all.clone(),
            resources: all.clone(),
            ..PolicyRule::default()
        },
        PolicyRule {
            verbs: all.clone(),
            non_resource_urls: all,
            ..PolicyRule::default()
        },
    ]
}

/// Whether `user` already holds every permission in `rules_to_grant` in `namespace` (cluster
/// scope when `None`); otherwise the missing permissions in kube's compact form, sorted.
/// Members of `system:masters` may grant anything.
pub fn may_grant(
    user: &UserInfo,
    rules_to_grant: &[Value],
    namespace: Option<&str>,
    rbac: &RbacSnapshot,
) -> Result<(), Vec<String>> {
    if user.is_privileged() {
        return Ok(());
    }
    let wanted: Vec<PolicyRule> = rules_to_grant.iter().map(PolicyRule::from_value).collect();
    let resolver = Resolver::new(rbac, Getter::Registry);
    let (owned, _) = resolver.rules_for(user, namespace.unwrap_or_default());
    missing_permissions(&owned, &wanted)
}

fn missing_permissions(owned: &[PolicyRule], wanted: &[PolicyRule]) -> Result<(), Vec<String>> {
    let missing = uncovered(owned, wanted);
    if missing.is_empty() {
        Ok(())
    } else {
        Err(describe_missing(missing))
    }
}

/// kube's escalation error text for `missing` permissions (as returned by [`may_grant`]).
pub fn escalation_message(user: &UserInfo, missing: &[String]) -> String {
    format!(
        "user {} (groups={}) is attempting to grant RBAC permissions not currently held:\n{}",
        go_quote(&user.name),
        go_quote_list(&user.groups),
        missing.join("\n")
    )
}

/// kube's `ConfirmNoEscalation` wrapped in the Forbidden error of the written object.
fn confirm_no_escalation(
    user: &UserInfo,
    resolver: &Resolver<'_>,
    wanted: &[PolicyRule],
    written: &Written<'_>,
) -> Result<(), GrantError> {
    let (owned, errors) = resolver.rules_for(user, written.namespace);
    let Err(missing) = missing_permissions(&owned, wanted) else {
        return Ok(());
    };
    let mut message = escalation_message(user, &missing);
    if !errors.is_empty() {
        message.push_str(&format!("; resolution errors: [{}]", aggregate_message(&errors)));
    }
    Err(forbidden(written, &message))
}

fn forbidden(written: &Written<'_>, err: &str) -> GrantError {
    GrantError::Forbidden {
        group: RBAC_GROUP.to_owned(),
        resource: written.resource.to_owned(),
        name: written.name().to_owned(),
        message: new_forbidden_message(RBAC_GROUP, written.resource, written.name(), err),
    }
}

/// The role or binding being written: its plural resource, the request namespace (empty at
/// cluster scope) and the object.
struct Written<'a> {
    resource: &'a str,
    namespace: &'a str,
    object: &'a Value,
}

impl Written<'_> {
    fn name(&self) -> &str {
        name_of(self.object)
    }
}

/// kube's `RoleEscalationAuthorized`: `escalate` on the role resource. A create names no object
/// in its request path, so only an update is checked against the role's name.
fn escalate_authorized(user: &UserInfo, role: &Written<'_>, is_update: bool, rbac: &RbacSnapshot) -> bool {
    let mut attrs = Attributes::resource("escalate", RBAC_GROUP, role.resource);
    if !role.namespace.is_empty() {
        attrs = attrs.in_namespace(role.namespace);
    }
    if is_update {
        attrs = attrs.named(role.name());
    }
    authorize(user, &attrs, rbac)
}

/// kube's `BindingAuthorized`: `bind` on the referenced role, in the binding's namespace.
fn binding_authorized(user: &UserInfo, role_ref: &Value, namespace: &str, rbac: &RbacSnapshot) -> bool {
    let field = |key: &str| role_ref.get(key).and_then(Value::as_str).unwrap_or_default();
    let resource = match field("kind") {
        "ClusterRole" => "clusterroles",
        "Role" => "roles",
        _ => return false,
    };
    let mut attrs = Attributes::resource("bind", field("apiGroup"), resource).named(field("name"));
    if !namespace.is_empty() {
        attrs = attrs.in_namespace(namespace);
    }
    authorize(user, &attrs, rbac)
}

/// kube's `IsOnlyMutatingGCFields`: the update changes nothing but owner references,
/// finalizers and deletion markers. Server-maintained resourceVersion and managedFields are
/// not compared, since callers may or may not have filled them in yet.
fn only_mutates_gc_fields(new: &Value, old: &Value) -> bool {
    const COPIED: [&str; 7] = [
        "ownerReferences",
        "finalizers",
        "selfLink",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "resourceVersion",
        "managedFields",
    ];
    let mut new = new.clone();
    let mut old = old.clone();
    for obj in [&mut new, &mut old] {
        if let Some(meta) = obj.get_mut("metadata").and_then(Value::as_object_mut) {
            for field in COPIED {
                meta.remove(field);
            }
        }
    }
    normalized(&new) == normalized(&old)
}

/// Drops nulls and empty lists and maps, which Go's semantic equality treats as absent.
fn normalized(value: &Value) -> Value {
    match value {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| (k.clone(), normalized(v)))
                .filter(|(_, v)| !is_empty(v))
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(normalized).collect()),
        other => other.clone(),
    }
}

fn is_empty(value: &Value) -> bool {
    match value {
        Value::Null => true,
        Value::Array(items) => items.is_empty(),
        Value::Object(map) => map.is_empty(),
        _ => false,
    }
}

/// Checks a create (`old` is `None`) or update of a Role in `namespace` (the request's, from
/// the URL) by `user`: allowed for `system:masters`, for holders of `escalate` on roles, for
/// updates touching only GC fields, and otherwise only if the user already holds every rule
/// of the Role in that namespace.
pub fn check_role_write(
    user: &UserInfo,
    namespace: &str,
    role: &Value,
    old: Option<&Value>,
    rbac: &RbacSnapshot,
) -> Result<(), GrantError> {
    let written = Written {
        resource: "roles",
        namespace,
        object: role,
    };
    if trusted_role_write(user, &written, old, rbac) {
        return Ok(());
    }
    let resolver = Resolver::new(rbac, Getter::Registry);
    confirm_no_escalation(user, &resolver, &PolicyRule::list_from(role), &written)
}

/// Checks a create or update of a ClusterRole like [`check_role_write`] at cluster scope;
/// setting, changing or removing an `aggregationRule` also needs full authority (`*` on
/// everything).
pub fn check_cluster_role_write(
    user: &UserInfo,
    role: &Value,
    old: Option<&Value>,
    rbac: &RbacSnapshot,
) -> Result<(), GrantError> {
    let written = Written {
        resource: "clusterroles",
        namespace: "",
        object: role,
    };
    if trusted_role_write(user, &written, old, rbac) {
        return Ok(());
    }
    let resolver = Resolver::new(rbac, Getter::Registry);
    confirm_no_escalation(user, &resolver, &PolicyRule::list_from(role), &written)?;
    let has_aggregation = |r: &Value| aggregation_selectors(r).is_some_and(|s| !s.is_empty());
    if has_aggregation(role) || old.is_some_and(has_aggregation) {
        let (owned, _) = resolver.rules_for(user, "");
        if missing_permissions(&owned, &full_authority()).is_err() {
            return Err(forbidden(
                &written,
                "must have cluster-admin privileges to use the aggregationRule",
            ));
        }
    }
    Ok(())
}

/// Whether a role write skips the covers check: the user is privileged, holds `escalate` on
/// the role, or the update touches only GC fields.
fn trusted_role_write(user: &UserInfo, written: &Written<'_>, old: Option<&Value>, rbac: &RbacSnapshot) -> bool {
    user.is_privileged()
        || escalate_authorized(user, written, old.is_some(), rbac)
        || old.is_some_and(|old| only_mutates_gc_fields(written.object, old))
}

/// Checks a create or update of a RoleBinding in `namespace` (the request's): allowed for
/// `system:masters`, for updates touching only GC fields, for holders of `bind` on the
/// referenced role in that namespace, and otherwise only if the user already holds every rule
/// of the referenced role there. A missing role is a [`GrantError::RoleRef`].
pub fn check_role_binding_write(
    user: &UserInfo,
    namespace: &str,
    binding: &Value,
    old: Option<&Value>,
    rbac: &RbacSnapshot,
) -> Result<(), GrantError> {
    let written = Written {
        resource: "rolebindings",
        namespace,
        object: binding,
    };
    check_binding_write(user, &written, old, rbac)
}

/// Checks a create or update of a ClusterRoleBinding like [`check_role_binding_write`], at
/// cluster scope.
pub fn check_cluster_role_binding_write(
    user: &UserInfo,
    binding: &Value,
    old: Option<&Value>,
    rbac: &RbacSnapshot,
) -> Result<(), GrantError> {
    let written = Written {
        resource: "clusterrolebindings",
        namespace: "",
        object: binding,
    };
    check_binding_write(user, &written, old, rbac)
}

fn check_binding_write(
    user: &UserInfo,
    written: &Written<'_>,
    old: Option<&Value>,
    rbac: &RbacSnapshot,
) -> Result<(), GrantError> {
    if user.is_privileged() {
        return Ok(());
    }
    if let Some(old) = old
        && only_mutates_gc_fields(written.object, old)
    {
        return Ok(());
    }
    let role_ref = written.object.get("roleRef").unwrap_or(&Value::Null);
    if binding_authorized(user, role_ref, written.namespace, rbac) {
        return Ok(());
    }
    let resolver = Resolver::new(rbac, Getter::Registry);
    let rules = resolver.role_reference_rules(role_ref, written.namespace)?;
    confirm_no_escalation(user, &resolver, &rules, written)
}
