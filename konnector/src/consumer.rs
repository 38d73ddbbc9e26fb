//! Where the konnector's own (consumer) credentials come from: `--kubeconfig`, else
//! `$KUBECONFIG`, else the in-cluster service account, and never `~/.kube/config` silently.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use kube::config::{KubeConfigOptions, Kubeconfig, KubeconfigError};

use crate::Error;

/// The places the consumer kubeconfig is looked for, in order.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerSource {
    /// `--kubeconfig PATH`.
    pub flag: Option<PathBuf>,
    /// `$KUBECONFIG` (a path list, merged as kubectl merges it).
    pub env: Option<OsString>,
    /// Whether `KUBERNETES_SERVICE_HOST` and `KUBERNETES_SERVICE_PORT` are set (in a pod).
    pub in_cluster: bool,
}

impl ConsumerSource {
    /// The sources as this process sees them, with `flag` from `--kubeconfig`.
    pub fn from_env(flag: Option<PathBuf>) -> Self {
        let set = |name: &str| std::env::var_os(name).is_some_and(|v| !v.is_empty());
        Self {
            flag,
            env: std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()),
            in_cluster: set("KUBERNETES_SERVICE_HOST") && set("KUBERNETES_SERVICE_PORT"),
        }
    }

    /// The `kube::Config` of the first source present; `context` picks a kubeconfig context.
    pub async fn config(&self, context: Option<&str>) -> Result<kube::Config, Error> {
        let options = KubeConfigOptions {
            context: context.map(str::to_string),
            ..KubeConfigOptions::default()
        };
        let (kubeconfig, origin) = if let Some(path) = &self.flag {
            (read(path, "--kubeconfig")?, format!("--kubeconfig {}", path.display()))
        } else if let Some(list) = &self.env {
            (read_list(list)?, "$KUBECONFIG".to_string())
        } else if self.in_cluster {
            if context.is_some() {
                return Err(Error::InvalidFlags(
                    "--context needs a kubeconfig (--kubeconfig or $KUBECONFIG)".into(),
                ));
            }
            return kube::Config::incluster().map_err(|e| Error::ConsumerConfig {
                origin: "the in-cluster service account".into(),
                message: e.to_string(),
            });
        } else {
            return Err(Error::NoKubeconfig);
        };
        kube::Config::from_custom_kubeconfig(kubeconfig, &options)
            .await
            .map_err(|e| Error::ConsumerConfig {
                origin,
                message: describe(&e),
            })
    }
}

fn read(path: &Path, origin: &str) -> Result<Kubeconfig, Error> {
    Kubeconfig::read_from(path).map_err(|e| Error::ConsumerConfig {
        origin: format!("{origin} {}", path.display()),
        message: describe(&e),
    })
}

/// Merges a `$KUBECONFIG` path list the way kubectl does (first value wins).
fn read_list(list: &OsString) -> Result<Kubeconfig, Error> {
    let mut merged = Kubeconfig::default();
    for path in std::env::split_paths(list).filter(|p| !p.as_os_str().is_empty()) {
        let next = read(&path, "$KUBECONFIG")?;
        merged = merged.merge(next).map_err(|e| Error::ConsumerConfig {
            origin: "$KUBECONFIG".into(),
            message: describe(&e),
        })?;
    }
    Ok(merged)
}

/// kube's message, except for YAML errors, which may quote the offending value (a token).
fn describe(e: &KubeconfigError) -> String {
    match e {
        KubeconfigError::Parse(_) => {
            "failed to parse kubeconfig YAML (details withheld: they may quote credentials)".into()
        }
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters:\n- name: a\n  cluster: {server: 'https://a.example:6443'}\n- name: b\n  cluster: {server: 'https://b.example:6443'}\ncontexts:\n- name: a\n  context: {cluster: a, user: u}\n- name: b\n  context: {cluster: b, user: u}\nusers:\n- name: u\n  user: {token: s3cr3t-t0ken}\n";

    fn file(text: &str) -> tempfile::NamedTempFile {
        let f = tempfile::NamedTempFile::new().unwrap();
        std::fs::write(f.path(), text).unwrap();
        f
    }

    #[tokio::test]
    async fn flag_wins_over_env_and_context_selects_the_cluster() {
        let f = file(KUBECONFIG);
        let source = ConsumerSource {
            flag: Some(f.path().into()),
            env: Some("/nonexistent/kubeconfig".into()),
            in_cluster: true,
        };
        assert_eq!(
            source.config(None).await.unwrap().cluster_url,
            "https://a.example:6443/"
        );
        assert_eq!(
            source.config(Some("b")).await.unwrap().cluster_url,
            "https://b.example:6443/"
        );
    }

    #[tokio::test]
    async fn env_is_used_when_no_flag_is_given() {
        let f = file(KUBECONFIG);
        let source = ConsumerSource {
            env: Some(f.path().as_os_str().to_owned()),
            ..ConsumerSource::default()
        };
        assert_eq!(
            source.config(None).await.unwrap().cluster_url,
            "https://a.example:6443/"
        );
    }

    #[tokio::test]
    async fn nothing_found_names_the_three_places_tried() {
        let err = ConsumerSource::default().config(None).await.unwrap_err();
        let text = err.to_string();
        for place in ["--kubeconfig", "KUBECONFIG", "in-cluster"] {
            assert!(text.contains(place), "{text} does not mention {place}");
        }
        assert_eq!(err.exit_code(), 2);
    }

    #[tokio::test]
    async fn yaml_errors_never_quote_the_kubeconfig() {
        let f = file("users: s3cr3t-t0ken\n");
        let source = ConsumerSource {
            flag: Some(f.path().into()),
            ..ConsumerSource::default()
        };
        let text = source.config(None).await.unwrap_err().to_string();
        assert!(!text.contains("s3cr3t"), "{text}");
        assert!(text.contains("--kubeconfig"), "{text}");
    }
}
