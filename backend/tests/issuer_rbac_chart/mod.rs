#![allow(dead_code)] // Each test binary that includes this uses part of it.
//! The issuer's RBAC as the kbind-backend chart renders it with its default values (a real
//! `helm template`): what `issuer_chart.rs` compares with `issuer_rbac()` and what the
//! real-apiserver tests run the issuer on.

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

#[path = "../reaper_world/chart.rs"]
mod chart;
pub use chart::*;

/// The issuer's RBAC objects are named after it.
pub const ISSUER: &str = "kbind-backend-issuer";

/// The rules of the rendered `kind` named `name`.
pub fn rules(documents: &[Value], kind: &str, name: &str) -> Vec<PolicyRule> {
    serde_json::from_value(named(documents, kind, name)["rules"].clone()).expect("RBAC rules")
}

/// What the issuer needs from the rendering to run: the namespaces, its ServiceAccount, and its
/// ClusterRole, Roles and their bindings, in an order an apiserver accepts.
pub fn issuer_objects(documents: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = documents.iter().filter(|d| d["kind"] == "Namespace").cloned().collect();
    out.extend(
        documents
            .iter()
            .filter(|d| kind_of(d) == "ServiceAccount" && name_of(d) == CONTROLLER)
            .cloned(),
    );
    for kind in ["ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"] {
        out.extend(
            documents
                .iter()
                .filter(|d| d["kind"] == kind && d["metadata"]["name"].as_str().is_some_and(|n| n.starts_with(ISSUER)))
                .cloned(),
        );
    }
    out
}
