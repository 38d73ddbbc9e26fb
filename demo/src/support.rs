//! What both demos share: polling a step with a deadline, private files, clients from
//! kubeconfig text, and the provider's own controller for the sample Widgets.

use std::future::Future;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use fakeapi::sample::widgets;
use kbind_cluster::{ClusterClient, KubeClusterClient, Patch, PatchParams};
use serde_json::{Value, json};

/// How long each scripted step may take before the demo gives up.
const STEP_DEADLINE: Duration = Duration::from_secs(60);
/// How often a step's condition is polled.
const POLL: Duration = Duration::from_millis(200);

/// Polls `check` until it yields a value, or fails naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("not observed within {}s: {what}", STEP_DEADLINE.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Writes `text` to `path`, readable by its owner only (kubeconfigs, tokens).
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
    }
    Ok(())
}

/// A cluster client from kubeconfig text.
pub async fn kube_client(kubeconfig: &str) -> anyhow::Result<Arc<dyn ClusterClient>> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).context("reading a demo kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("loading a demo kubeconfig")?;
    Ok(Arc::new(
        KubeClusterClient::from_config(config).map_err(|e| anyhow!("building a client: {e}"))?,
    ))
}

/// Plays the provider's own controller: every widget gets `phase: Ready` for its generation.
pub async fn provider_controller(provider: Arc<dyn ClusterClient>) {
    loop {
        if let Ok(list) = provider.list(&widgets(), None, &Default::default()).await {
            for w in list.items {
                let generation = w.metadata.generation.unwrap_or(0);
                let observed = w.data.pointer("/status/observedGeneration").and_then(Value::as_i64);
                if observed == Some(generation) {
                    continue;
                }
                let status = json!({"status": {"phase": "Ready", "observedGeneration": generation}});
                let _ = provider
                    .patch_status(
                        &widgets(),
                        w.metadata.namespace.as_deref(),
                        &w.metadata.name.clone().unwrap_or_default(),
                        &Patch::Merge(status),
                        &PatchParams::default(),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
