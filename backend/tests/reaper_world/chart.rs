//! The kbind-backend chart as the chart tests see it: helm, rendering, and the RBAC objects an
//! issuer writes.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

#[path = "../../../tests/support/helm.rs"]
mod helm;
#[allow(unused_imports)] // Not every test binary that includes this world renders the chart.
pub use helm::helm;

pub const RELEASE: &str = "kbind-backend";
pub const NAMESPACE: &str = "kbind-system";
pub const GATEWAY: &str = "kbind-backend-gateway";
pub const CONTROLLER: &str = "kbind-backend-controller";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/charts/kbind-backend")
}

/// `helm template` of release [`RELEASE`] with extra arguments: the documents, or helm's stderr.
pub fn template(helm: &Path, args: &[&str]) -> Result<Vec<Value>, String> {
    template_release(helm, RELEASE, args)
}

/// `helm template` of `release` into [`NAMESPACE`], with the CRDs and extra arguments.
pub fn template_release(helm: &Path, release: &str, args: &[&str]) -> Result<Vec<Value>, String> {
    let output = Command::new(helm)
        .arg("template")
        .arg(release)
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--include-crds"])
        .args(args)
        .output()
        .map_err(|e| format!("running {}: {e}", helm.display()))?;
    if !output.status.success() {
        return Err(String::from_utf8_lossy(&output.stderr).into_owned());
    }
    let documents: Vec<Value> =
        serde_saphyr::from_multiple(&String::from_utf8_lossy(&output.stdout)).map_err(|e| e.to_string())?;
    Ok(documents.into_iter().filter(|doc| !doc.is_null()).collect())
}

/// `--set` arguments for `sets`.
pub fn set_args<'a>(sets: &[&'a str]) -> Vec<&'a str> {
    sets.iter().flat_map(|set| ["--set", *set]).collect()
}

/// Renders with `--set` values; fails the test on a helm error.
pub fn render(helm: &Path, sets: &[&str]) -> Vec<Value> {
    template(helm, &set_args(sets)).unwrap_or_else(|err| panic!("helm template {sets:?} failed: {err}"))
}

/// Renders with the committed non-default values file.
pub fn render_ci(helm: &Path) -> Vec<Value> {
    let values = chart_dir().join("ci/non-default-values.yaml");
    template(helm, &["--values", values.to_str().unwrap()]).unwrap()
}

pub fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap()
}

pub fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap()
}

pub fn named<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| kind_of(o) == kind && name_of(o) == name)
        .unwrap_or_else(|| panic!("no {kind} {name} rendered"))
}

pub fn args_of(deployment: &Value) -> Vec<&str> {
    deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(Value::as_str)
        .collect()
}

pub fn role(namespace: &str, name: &str, rules: Value) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"namespace": namespace, "name": name}, "rules": rules,
    })
}

pub fn role_binding(namespace: &str, name: &str, service_account: (&str, &str)) -> Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"namespace": namespace, "name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
        "subjects": [{"kind": "ServiceAccount", "namespace": service_account.0, "name": service_account.1}],
    })
}
