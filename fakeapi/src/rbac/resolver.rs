//! Rule resolution: which rules reach a user through bindings, with ClusterRole aggregation
//! evaluated the way the clusterrole-aggregation controller would settle it.

use std::cell::OnceCell;
use std::collections::BTreeMap;
use std::ops::ControlFlow;

use serde_json::{Map, Value};

use super::rule::{PolicyRule, go_quote};
use super::{RbacSnapshot, UserInfo, selector};

/// The API group of RBAC objects.
pub const RBAC_GROUP: &str = "rbac.authorization.k8s.io";

/// A role reference that could not be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ResolveError {
    /// The referenced Role or ClusterRole does not exist.
    #[error("{resource}.rbac.authorization.k8s.io {} not found", go_quote(.name))]
    NotFound {
        /// The resource as the reporting getter names it (`role` from the authorizer's
        /// listers, `roles` from the registry the escalation check reads).
        resource: String,
        /// The referenced name.
        name: String,
    },
    /// `roleRef.kind` is neither Role nor ClusterRole.
    #[error("unsupported role reference kind: {}", go_quote(.0))]
    UnsupportedKind(String),
}

/// Which getter resolves role references; it decides how a missing role is named.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Getter {
    /// The authorizer's informer listers (`role.rbac.authorization.k8s.io "x" not found`).
    Lister,
    /// The REST registry (`roles.rbac.authorization.k8s.io "x" not found`).
    Registry,
}

/// What a rule visitor sees.
pub enum Visit<'a> {
    /// A rule and a description of the binding that granted it.
    Rule {
        /// e.g. `ClusterRoleBinding "b" of ClusterRole "r" to User "bob"`.
        source: &'a str,
        /// The granted rule.
        rule: &'a PolicyRule,
    },
    /// A binding applied but its role could not be resolved.
    Error(ResolveError),
}

/// Resolves rules over one snapshot, caching the aggregated ClusterRoles.
pub struct Resolver<'a> {
    rbac: &'a RbacSnapshot,
    getter: Getter,
    aggregated: OnceCell<BTreeMap<String, Vec<PolicyRule>>>,
}

impl<'a> Resolver<'a> {
    /// A resolver reading `rbac` through `getter`.
    pub fn new(rbac: &'a RbacSnapshot, getter: Getter) -> Self {
        Self {
            rbac,
            getter,
            aggregated: OnceCell::new(),
        }
    }

    /// kube's `VisitRulesFor`: ClusterRoleBindings first, then RoleBindings of `namespace`
    /// (empty for cluster scope); the visitor may stop early with `Break`.
    pub fn visit_rules_for(
        &self,
        user: &UserInfo,
        namespace: &str,
        visitor: &mut dyn FnMut(Visit<'_>) -> ControlFlow<()>,
    ) {
        for binding in &self.rbac.cluster_role_bindings {
            if self.visit_binding(user, binding, "", visitor).is_break() {
                return;
            }
        }
        if namespace.is_empty() {
            return;
        }
        for binding in self.rbac.role_bindings.iter().filter(|b| namespace_of(b) == namespace) {
            if self.visit_binding(user, binding, namespace, visitor).is_break() {
                return;
            }
        }
    }

    fn visit_binding(
        &self,
        user: &UserInfo,
        binding: &Value,
        namespace: &str,
        visitor: &mut dyn FnMut(Visit<'_>) -> ControlFlow<()>,
    ) -> ControlFlow<()> {
        let subjects = binding
            .get("subjects")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default();
        let Some(subject) = subjects.iter().find(|s| applies_to_user(user, s, namespace)) else {
            return ControlFlow::Continue(());
        };
        let role_ref = binding.get("roleRef").unwrap_or(&Value::Null);
        let rules = match self.role_reference_rules(role_ref, namespace) {
            Ok(rules) => rules,
            Err(err) => return visitor(Visit::Error(err)),
        };
        let source = describe_binding(binding, role_ref, subject, namespace);
        for rule in &rules {
            visitor(Visit::Rule { source: &source, rule })?;
        }
        ControlFlow::Continue(())
    }

    /// kube's `RulesFor`: every rule reaching `user` in `namespace`, and the resolution errors.
    pub fn rules_for(&self, user: &UserInfo, namespace: &str) -> (Vec<PolicyRule>, Vec<ResolveError>) {
        let mut rules = Vec::new();
        let mut errors = Vec::new();
        self.visit_rules_for(user, namespace, &mut |visit| {
            match visit {
                Visit::Rule { rule, .. } => rules.push(rule.clone()),
                Visit::Error(err) => errors.push(err),
            }
            ControlFlow::Continue(())
        });
        (rules, errors)
    }

    /// kube's `GetRoleReferenceRules` for a binding in `namespace` (empty for a ClusterRoleBinding).
    pub fn role_reference_rules(&self, role_ref: &Value, namespace: &str) -> Result<Vec<PolicyRule>, ResolveError> {
        let kind = str_field(role_ref, "kind");
        let name = str_field(role_ref, "name");
        match kind {
            "Role" => self
                .rbac
                .roles
                .iter()
                .find(|r| !namespace.is_empty() && namespace_of(r) == namespace && name_of(r) == name)
                .map(PolicyRule::list_from)
                .ok_or_else(|| self.not_found("role", name)),
            "ClusterRole" => self
                .cluster_role_rules(name)
                .ok_or_else(|| self.not_found("clusterrole", name)),
            other => Err(ResolveError::UnsupportedKind(other.to_owned())),
        }
    }

    fn not_found(&self, singular: &str, name: &str) -> ResolveError {
        let resource = match self.getter {
            Getter::Lister => singular.to_owned(),
            Getter::Registry => format!("{singular}s"),
        };
        ResolveError::NotFound {
            resource,
            name: name.to_owned(),
        }
    }

    /// The effective rules of ClusterRole `name`: its aggregated rules when it has an
    /// aggregation rule, else its own.
    pub fn cluster_role_rules(&self, name: &str) -> Option<Vec<PolicyRule>> {
        let role = self.rbac.cluster_roles.iter().find(|r| name_of(r) == name)?;
        if aggregation_selectors(role).is_none() {
            return Some(PolicyRule::list_from(role));
        }
        let aggregated = self.aggregated().get(name).cloned();
        Some(aggregated.unwrap_or_else(|| PolicyRule::list_from(role)))
    }

    /// The rules the aggregation controller settles on for every aggregated ClusterRole.
    pub fn aggregated(&self) -> &BTreeMap<String, Vec<PolicyRule>> {
        self.aggregated.get_or_init(|| aggregate(&self.rbac.cluster_roles))
    }
}

fn str_field<'v>(obj: &'v Value, key: &str) -> &'v str {
    obj.get(key).and_then(Value::as_str).unwrap_or_default()
}

/// `metadata.name` of an object.
pub fn name_of(obj: &Value) -> &str {
    obj.pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `metadata.namespace` of an object.
pub fn namespace_of(obj: &Value) -> &str {
    obj.pointer("/metadata/namespace")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// The `clusterRoleSelectors` of a ClusterRole that carries an aggregation rule.
pub fn aggregation_selectors(role: &Value) -> Option<&[Value]> {
    let rule = role.get("aggregationRule").filter(|r| !r.is_null())?;
    Some(
        rule.get("clusterRoleSelectors")
            .and_then(Value::as_array)
            .map(Vec::as_slice)
            .unwrap_or_default(),
    )
}

/// kube's `appliesToUser`; a ServiceAccount subject without a namespace takes the binding's.
fn applies_to_user(user: &UserInfo, subject: &Value, namespace: &str) -> bool {
    let name = str_field(subject, "name");
    match str_field(subject, "kind") {
        "User" => user.name == name,
        "Group" => user.groups.iter().any(|g| g == name),
        "ServiceAccount" => {
            let sa_namespace = match str_field(subject, "namespace") {
                "" => namespace,
                ns => ns,
            };
            !sa_namespace.is_empty() && user.name == format!("system:serviceaccount:{sa_namespace}:{name}")
        }
        _ => false,
    }
}

/// The "allowed by" source kube reports, e.g. `RoleBinding "b/ns" of Role "r" to User "bob"`.
fn describe_binding(binding: &Value, role_ref: &Value, subject: &Value, namespace: &str) -> String {
    let subject_kind = str_field(subject, "kind");
    let subject_name = str_field(subject, "name");
    let described_subject = if subject_kind == "ServiceAccount" {
        let sa_namespace = match str_field(subject, "namespace") {
            "" => namespace,
            ns => ns,
        };
        format!("{subject_kind} {}", go_quote(&format!("{subject_name}/{sa_namespace}")))
    } else {
        format!("{subject_kind} {}", go_quote(subject_name))
    };
    let (binding_kind, binding_name) = if namespace.is_empty() {
        ("ClusterRoleBinding", name_of(binding).to_owned())
    } else {
        ("RoleBinding", format!("{}/{}", name_of(binding), namespace_of(binding)))
    };
    format!(
        "{binding_kind} {} of {} {} to {described_subject}",
        go_quote(&binding_name),
        str_field(role_ref, "kind"),
        go_quote(str_field(role_ref, "name")),
    )
}

/// The fixed point of the clusterrole-aggregation controller: each aggregated ClusterRole gets
/// the de-duplicated union of the rules of every other ClusterRole its selectors match, taken
/// in name order per selector. A role whose selectors are invalid keeps its stored rules, as
/// the controller fails on it.
fn aggregate(cluster_roles: &[Value]) -> BTreeMap<String, Vec<PolicyRule>> {
    let mut by_name: BTreeMap<&str, &Value> = BTreeMap::new();
    for role in cluster_roles {
        by_name.entry(name_of(role)).or_insert(role);
    }
    let mut settled: BTreeMap<String, Vec<PolicyRule>> = by_name
        .iter()
        .filter(|(_, role)| aggregation_selectors(role).is_some())
        .map(|(name, _)| (name.to_string(), Vec::new()))
        .collect();
    // Each pass propagates at least one more link of any aggregation chain, so as many passes
    // as there are aggregated roles reach the fixed point.
    for _ in 0..=settled.len() {
        let mut changed = false;
        for (name, role) in &by_name {
            let Some(selectors) = aggregation_selectors(role) else {
                continue;
            };
            let next = match union_of_selected(name, selectors, &by_name, &settled) {
                Ok(rules) => rules,
                Err(_) => PolicyRule::list_from(role),
            };
            if settled.get(*name) != Some(&next) {
                settled.insert(name.to_string(), next);
                changed = true;
            }
        }
        if !changed {
            break;
        }
    }
    settled
}

fn union_of_selected(
    name: &str,
    selectors: &[Value],
    by_name: &BTreeMap<&str, &Value>,
    settled: &BTreeMap<String, Vec<PolicyRule>>,
) -> Result<Vec<PolicyRule>, selector::SelectorError> {
    let empty = Map::new();
    let mut union: Vec<PolicyRule> = Vec::new();
    for selector in selectors {
        for (other, role) in by_name {
            let labels = role
                .pointer("/metadata/labels")
                .and_then(Value::as_object)
                .unwrap_or(&empty);
            if !selector::matches(selector, labels)? || *other == name {
                continue;
            }
            let rules = settled
                .get(*other)
                .cloned()
                .unwrap_or_else(|| PolicyRule::list_from(role));
            for rule in rules {
                if !union.contains(&rule) {
                    union.push(rule);
                }
            }
        }
    }
    Ok(union)
}

/// kube's aggregate error text: a lone message as is, several de-duplicated in brackets.
pub fn aggregate_message(errors: &[ResolveError]) -> String {
    let mut unique: Vec<String> = Vec::new();
    for message in errors.iter().map(ToString::to_string) {
        if !unique.contains(&message) {
            unique.push(message);
        }
    }
    match unique.as_slice() {
        [only] => only.clone(),
        many => format!("[{}]", many.join(", ")),
    }
}
