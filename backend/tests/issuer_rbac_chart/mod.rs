#![allow(dead_code)] // Each test binary that includes this uses part of it.
//! The issuer's RBAC as the kbind-backend chart renders it with its default values (a real
//! `helm template`): what `issuer_chart.rs` compares with `issuer_rbac()` and what the
//! real-apiserver tests run the issuer on.

use std::path::Path;
use std::process::Command;

use k8s_openapi::api::rbac::v1::PolicyRule;
use serde_json::Value;

#[path = "../../../tests/support/helm.rs"]
mod helm;
pub use helm::helm;

/// The release the chart is rendered as, into namespace [`NAMESPACE`].
pub const RELEASE: &str = "kbind-backend";
/// The release namespace.
pub const NAMESPACE: &str = "kbind-system";
/// The issuer's RBAC objects are named after it.
pub const ISSUER: &str = "kbind-backend-issuer";
/// The ServiceAccount the issuer runs as.
pub const CONTROLLER: &str = "kbind-backend-controller";

/// Every document `helm template` renders with `--set` values `sets`.
pub fn render(helm: &Path, sets: &[&str]) -> Vec<Value> {
    let args: Vec<&str> = sets.iter().flat_map(|s| ["--set", *s]).collect();
    render_with(helm, &args)
}

/// Every document `helm template` renders with extra arguments `args`.
pub fn render_with(helm: &Path, args: &[&str]) -> Vec<Value> {
    let sets = args;
    let chart = Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/charts/kbind-backend");
    let output = Command::new(helm)
        .arg("template")
        .arg(RELEASE)
        .arg(chart)
        .args(["--namespace", NAMESPACE])
        .args(sets)
        .output()
        .expect("run helm");
    assert!(
        output.status.success(),
        "helm template {sets:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&output.stdout)).expect("helm's YAML");
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

fn is(doc: &Value, kind: &str, name: &str) -> bool {
    doc["kind"] == kind && doc["metadata"]["name"] == name
}

/// The rules of the rendered `kind` named `name`.
pub fn rules(documents: &[Value], kind: &str, name: &str) -> Vec<PolicyRule> {
    let doc = documents
        .iter()
        .find(|d| is(d, kind, name))
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"));
    serde_json::from_value(doc["rules"].clone()).expect("RBAC rules")
}

/// What the issuer needs from the rendering to run: the namespaces, its ServiceAccount, and its
/// ClusterRole, Roles and their bindings, in an order an apiserver accepts.
pub fn issuer_objects(documents: &[Value]) -> Vec<Value> {
    let mut out: Vec<Value> = documents.iter().filter(|d| d["kind"] == "Namespace").cloned().collect();
    out.extend(
        documents
            .iter()
            .filter(|d| is(d, "ServiceAccount", CONTROLLER))
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
