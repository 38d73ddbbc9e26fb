//! The `kbind-backend` binary: `crds` prints the service layer's CRDs; `run` starts the enabled
//! modules (`--gateway`, `--issuer`, `--reaper`, any subset) against one provider cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use kbind_backend::auth::{self, Authenticator};
use kbind_backend::gateway;
use kbind_backend::issuer::{self, KubernetesIssuer};
use kbind_backend::reaper::{self, Reaper};
use kbind_cluster::{ClusterClient, KubeClusterClient, SystemClock};
use tokio_util::sync::CancellationToken;
use tracing_subscriber::EnvFilter;

/// kbind's service layer on a provider cluster.
#[derive(Parser, Debug)]
#[command(name = "kbind-backend", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prints the catalog.kbind.io and iam.kbind.io CRDs as YAML (committed as deploy/crds/kbind-backend-crds.yaml).
    Crds,
    /// Runs the enabled modules until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
}

/// Log line format.
#[derive(Clone, Copy, Debug, ValueEnum)]
enum LogFormat {
    /// Human-readable lines.
    Text,
    /// One JSON object per line.
    Json,
}

#[derive(clap::Args, Debug)]
struct RunArgs {
    /// Serve the HTTP API and the web UI.
    #[arg(long)]
    gateway: bool,
    /// Provision and revoke Grants (the issuer controller).
    #[arg(long)]
    issuer: bool,
    /// Delete the Grants of consumers that stopped heartbeating.
    #[arg(long)]
    reaper: bool,
    /// Kubeconfig of the provider cluster; default: in-cluster, else $KUBECONFIG / ~/.kube/config.
    #[arg(long, env = "KBIND_KUBECONFIG")]
    kubeconfig: Option<PathBuf>,
    /// Log format.
    #[arg(long, value_enum, default_value = "text")]
    log_format: LogFormat,
    /// Log filter (RUST_LOG, when set, wins).
    #[arg(long, default_value = "info")]
    log_level: String,
    #[command(flatten)]
    gateway_options: gateway::Options,
    #[command(flatten)]
    auth_options: auth::Options,
    #[command(flatten)]
    issuer_options: issuer::Options,
    #[command(flatten)]
    reaper_options: reaper::Options,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => print!("{}", kbind_api::backend_crds_yaml()),
        Command::Run(args) => {
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .build()
                .context("failed to start the async runtime")?;
            runtime.block_on(run(*args))?;
        }
    }
    Ok(())
}

fn init_logging(format: LogFormat, level: &str) -> anyhow::Result<()> {
    let rust_log = std::env::var("RUST_LOG").ok().filter(|s| !s.trim().is_empty());
    let (directives, origin) = match &rust_log {
        Some(env) => (env.as_str(), "RUST_LOG"),
        None => (level, "--log-level"),
    };
    let filter = EnvFilter::builder()
        .parse(directives)
        .with_context(|| format!("{origin} is not a valid log filter"))?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder.try_init().ok(),
        LogFormat::Json => builder.json().flatten_event(true).try_init().ok(),
    };
    Ok(())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    init_logging(args.log_format, &args.log_level)?;
    if !(args.gateway || args.issuer || args.reaper) {
        bail!("nothing to run: pass at least one of --gateway, --issuer, --reaper");
    }
    // Flags first: a mistake in them should not wait for a provider connection.
    let gateway_config = match args.gateway {
        true => Some(args.gateway_options.config()?),
        false => None,
    };
    let authenticator = match &gateway_config {
        Some(config) => Some(auth::authenticator(&args.auth_options, &config.public_url)?),
        None => None,
    };
    let provider = provider_client(args.kubeconfig.as_deref()).await?;
    let lease_namespace = args.issuer_options.lease_namespace.clone();
    // The gateway mints credentials at pickup with the same issuer the controller provisions with.
    let issuer = Arc::new(KubernetesIssuer::new(provider.clone(), args.issuer_options.clone()));
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            shutdown.cancel();
        }
    });
    let mut tasks = tokio::task::JoinSet::new();

    if args.issuer {
        let stop = shutdown.clone().cancelled_owned();
        let (provider, issuer) = (provider.clone(), issuer.clone());
        tasks.spawn(async move {
            issuer::run_controller(provider, issuer, stop).await;
            Ok(())
        });
        tracing::info!("issuer running");
    }

    let mut reaper_metrics = None;
    if args.reaper {
        let reaper = Reaper::new(
            provider.clone(),
            args.reaper_options.clone(),
            lease_namespace.clone(),
            Arc::new(SystemClock),
        );
        reaper_metrics = Some(reaper.metrics().clone());
        let stop = shutdown.clone();
        tasks.spawn(async move { reaper.run(stop).await.context("the reaper stopped") });
        tracing::info!(ttl = ?args.reaper_options.reap_ttl, "reaper running");
    }

    if let (Some(mut config), Some(authenticator)) = (gateway_config, authenticator) {
        config.lease_namespace = lease_namespace;
        let metrics = gateway::Metrics::with_others(|registry| {
            if let Some(reaper) = &reaper_metrics {
                reaper.register(registry);
            }
        });
        let authenticators: Vec<Arc<dyn Authenticator>> = authenticator.members().to_vec();
        let state = gateway::Gateway::with_metrics(
            config,
            provider.clone(),
            authenticators,
            issuer,
            Arc::new(SystemClock),
            metrics,
        );
        let listener = tokio::net::TcpListener::bind(args.gateway_options.listen)
            .await
            .with_context(|| format!("failed to listen on {}", args.gateway_options.listen))?;
        let addr = listener.local_addr().context("failed to read the listening address")?;
        tracing::info!(%addr, "gateway listening");
        let app = gateway::router(state).into_make_service_with_connect_info::<SocketAddr>();
        let stop = shutdown.clone().cancelled_owned();
        tasks.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(stop)
                .await
                .context("the gateway's server failed")
        });
    }

    while let Some(done) = tasks.join_next().await {
        done.context("a module panicked")??;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The provider client: `--kubeconfig`, else kube's inference (in-cluster, then $KUBECONFIG).
async fn provider_client(kubeconfig: Option<&Path>) -> anyhow::Result<Arc<dyn ClusterClient>> {
    let config = match kubeconfig {
        Some(path) => {
            let file = kube::config::Kubeconfig::read_from(path)
                .with_context(|| format!("failed to read --kubeconfig {}", path.display()))?;
            kube::Config::from_custom_kubeconfig(file, &kube::config::KubeConfigOptions::default())
                .await
                .with_context(|| format!("--kubeconfig {} is not usable", path.display()))?
        }
        None => kube::Config::infer()
            .await
            .context("no provider cluster: not in a cluster and no kubeconfig found; pass --kubeconfig")?,
    };
    Ok(Arc::new(
        KubeClusterClient::from_config(config).context("failed to build the provider client")?,
    ))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn shutdown_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(term) => term,
            Err(e) => {
                tracing::warn!(error = %e, "cannot watch SIGTERM; stopping on Ctrl-C only");
                ctrl_c.await.ok();
                return;
            }
        };
        tokio::select! {
            _ = ctrl_c => {}
            _ = term.recv() => {}
        }
    }
    #[cfg(not(unix))]
    ctrl_c.await.ok();
    tracing::info!("shutting down");
}

#[cfg(test)]
mod tests {
    use clap::CommandFactory;

    use super::*;

    #[test]
    fn the_flags_of_every_module_fit_together() {
        // clap checks unique flag and group names only when the command is built.
        Cli::command().debug_assert();
    }
}
