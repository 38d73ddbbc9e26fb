//! kube-apiserver's Forbidden messages for denied requests and refused RBAC writes.

use super::rule::go_quote;
use super::{Attributes, UserInfo};

/// The message of a 403 for `user` denied `attrs`, e.g. `widgets.example.org "a" is forbidden:
/// User "bob" cannot get resource "widgets" in API group "example.org" in the namespace "ns1"`.
pub fn forbidden_message(user: &UserInfo, attrs: &Attributes) -> String {
    forbidden_message_with_reason(user, attrs, "")
}

/// [`forbidden_message`] with the authorizer's reason appended after `: ` when non-empty.
pub fn forbidden_message_with_reason(user: &UserInfo, attrs: &Attributes, reason: &str) -> String {
    let denial = sanitize(&denial(user, attrs));
    let err = if reason.is_empty() {
        denial
    } else {
        format!("{denial}: {reason}")
    };
    if attrs.is_resource_request() {
        new_forbidden_message(
            &attrs.api_group,
            &attrs.resource,
            attrs.name.as_deref().unwrap_or_default(),
            &err,
        )
    } else {
        new_forbidden_message("", "", "", &err)
    }
}

/// What the user cannot do (kube's `forbiddenMessage`).
fn denial(user: &UserInfo, attrs: &Attributes) -> String {
    let who = go_quote(&user.name);
    let verb = &attrs.verb;
    if let Some(path) = &attrs.path {
        return format!("User {who} cannot {verb} path {}", go_quote(path));
    }
    let resource = if attrs.subresource.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}/{}", attrs.resource, attrs.subresource)
    };
    let what = format!(
        "resource {} in API group {}",
        go_quote(&resource),
        go_quote(&attrs.api_group)
    );
    match attrs.namespace.as_deref() {
        Some(ns) if !ns.is_empty() => format!("User {who} cannot {verb} {what} in the namespace {}", go_quote(ns)),
        _ => format!("User {who} cannot {verb} {what} at the cluster scope"),
    }
}

/// The HTML escaping kube applies to the denial (not to the reason).
fn sanitize(message: &str) -> String {
    message.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

/// The message of kube's `NewForbidden(groupResource, name, err)`.
pub fn new_forbidden_message(group: &str, resource: &str, name: &str, err: &str) -> String {
    let qualified = if group.is_empty() {
        resource.to_owned()
    } else {
        format!("{resource}.{group}")
    };
    match (qualified.is_empty(), name.is_empty()) {
        (true, _) => format!("forbidden: {err}"),
        (false, true) => format!("{qualified} is forbidden: {err}"),
        (false, false) => format!("{qualified} {} is forbidden: {err}", go_quote(name)),
    }
}
