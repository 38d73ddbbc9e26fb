//! Finds the kube-apiserver, kube-controller-manager and etcd binaries that hack/kube/build.sh puts in the tools cache.

use std::path::{Path, PathBuf};

/// The Kubernetes release the binaries are built from (hack/kube/build.sh pins the same).
pub const KUBE_VERSION: &str = "v1.35.8";
/// The etcd release the binary is built from (hack/kube/build.sh pins the same).
pub const ETCD_VERSION: &str = "v3.6.14";

/// Paths of the three executables a test environment runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Binaries {
    /// The kube-apiserver executable.
    pub kube_apiserver: PathBuf,
    /// The kube-controller-manager executable.
    pub kube_controller_manager: PathBuf,
    /// The etcd executable.
    pub etcd: PathBuf,
}

/// The binaries that could not be found, each with where it was looked for.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("real Kubernetes binaries missing: {} (run hack/kube/build.sh or set the env vars)", .missing.join("; "))]
pub struct Missing {
    /// One entry per missing binary: its name, the place looked at and the env var that overrides it.
    pub missing: Vec<String>,
}

/// One binary: its file name, the env var naming it and its version folder in the tools cache.
struct Wanted {
    name: &'static str,
    env_var: &'static str,
    version: &'static str,
}

const WANTED: [Wanted; 3] = [
    Wanted {
        name: "kube-apiserver",
        env_var: "KBIND_KUBE_APISERVER",
        version: KUBE_VERSION,
    },
    Wanted {
        name: "kube-controller-manager",
        env_var: "KBIND_KUBE_CONTROLLER_MANAGER",
        version: KUBE_VERSION,
    },
    Wanted {
        name: "etcd",
        env_var: "KBIND_ETCD",
        version: ETCD_VERSION,
    },
];

/// The tools cache folder: `$KBIND_TOOLS_CACHE`, else `$HOME/.cache/kbind-tools`.
pub fn tools_cache() -> Option<PathBuf> {
    if let Some(dir) = std::env::var_os("KBIND_TOOLS_CACHE").filter(|d| !d.is_empty()) {
        return Some(PathBuf::from(dir));
    }
    std::env::var_os("HOME").map(|home| PathBuf::from(home).join(".cache").join("kbind-tools"))
}

/// Looks each binary up: its env var when set, else `<tools cache>/<name>-<version>/<name>`.
pub fn find() -> Result<Binaries, Missing> {
    let cache = tools_cache();
    let [kube_apiserver, kube_controller_manager, etcd] = WANTED.map(|wanted| locate(&wanted, cache.as_deref()));
    match (kube_apiserver, kube_controller_manager, etcd) {
        (Ok(kube_apiserver), Ok(kube_controller_manager), Ok(etcd)) => Ok(Binaries {
            kube_apiserver,
            kube_controller_manager,
            etcd,
        }),
        (a, b, c) => Err(Missing {
            missing: [a, b, c].into_iter().filter_map(Result::err).collect(),
        }),
    }
}

/// One binary's path, or why it is not usable.
fn locate(wanted: &Wanted, cache: Option<&Path>) -> Result<PathBuf, String> {
    let path = match std::env::var_os(wanted.env_var).filter(|p| !p.is_empty()) {
        Some(path) => PathBuf::from(path),
        None => match cache {
            Some(cache) => cache
                .join(format!("{}-{}", wanted.name, wanted.version))
                .join(wanted.name),
            None => return Err(format!("{} (no HOME, set {})", wanted.name, wanted.env_var)),
        },
    };
    if is_executable(&path) {
        Ok(path)
    } else {
        Err(format!(
            "{} not at {} ({})",
            wanted.name,
            path.display(),
            wanted.env_var
        ))
    }
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether CI demands the real binaries (`KBIND_REQUIRE_REAL_K8S=1`): then missing ones fail a test instead of skipping it.
pub fn required() -> bool {
    std::env::var("KBIND_REQUIRE_REAL_K8S").is_ok_and(|v| v == "1")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_lists_every_binary_with_its_env_var() {
        let missing = Missing {
            missing: vec![
                "etcd not at /x/etcd (KBIND_ETCD)".into(),
                "kube-apiserver not at /y (KBIND_KUBE_APISERVER)".into(),
            ],
        };
        let line = missing.to_string();
        assert!(
            line.contains("KBIND_ETCD") && line.contains("KBIND_KUBE_APISERVER"),
            "{line}"
        );
        assert!(!line.contains('\n'), "one line: {line}");
    }

    #[test]
    fn a_directory_is_not_an_executable() {
        let dir = tempfile::tempdir().unwrap();
        assert!(!is_executable(dir.path()));
        let file = dir.path().join("tool");
        std::fs::write(&file, "#!/bin/sh\n").unwrap();
        assert!(!is_executable(&file));
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o755)).unwrap();
        assert!(is_executable(&file));
    }
}
