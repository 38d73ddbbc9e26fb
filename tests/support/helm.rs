//! Finding the Go-built helm the chart tests use (included by path from konnector/tests and
//! backend/tests; hack/helm/build.sh builds it).

use std::path::PathBuf;

/// Keep in step with hack/helm/build.sh.
pub const HELM_VERSION: &str = "v3.22.0";

/// The helm binary (`KBIND_HELM`, else where hack/helm/build.sh puts it), or `None` after one
/// line on stderr when it is absent and not required (`KBIND_REQUIRE_HELM=1` in CI).
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
