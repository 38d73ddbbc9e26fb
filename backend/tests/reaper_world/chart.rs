//! The kbind-backend chart as the chart tests see it: helm, rendering, and the RBAC objects an
//! issuer writes.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{Value, json};

pub const RELEASE: &str = "kbind-backend";
pub const NAMESPACE: &str = "kbind-system";
pub const GATEWAY: &str = "kbind-backend-gateway";
pub const CONTROLLER: &str = "kbind-backend-controller";
/// Keep in step with hack/helm/build.sh.
pub const HELM_VERSION: &str = "v3.22.0";

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

pub fn chart_dir() -> PathBuf {
    repo_root().join("deploy/charts/kbind-backend")
}

/// The helm binary, or `None` after one line on stderr when it is absent and not required.
pub fn helm() -> Option<PathBuf> {
    let path = std::env::var_os("KBIND_HELM").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("KBIND_TOOLS_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/kbind-tools")
            });
        cache.join(format!("helm-{HELM_VERSION}/helm"))
    });
    if path.is_file() {
        return Some(path);
    }
    let required = std::env::var("KBIND_REQUIRE_HELM").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KBIND_REQUIRE_HELM=1 but there is no helm at {}: run hack/helm/build.sh",
        path.display()
    );
    eprintln!("skipped: no helm at {} (hack/helm/build.sh builds it)", path.display());
    None
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
