//! The `kbind-backend` binary: `crds` prints the service layer's CRDs; `run` starts the enabled
//! modules (`--gateway`, `--issuer`, `--reaper`, any subset) against one provider cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use clap::{Parser, Subcommand, ValueEnum};
use kbind_backend::modules::{self, GatewayModule, MetricsListener, Modules};
use kbind_backend::{auth, gateway, issuer, reaper};
use kbind_cluster::{ClusterClient, KubeClusterClient};
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
    /// Serve /healthz, /readyz and /metrics (the reaper's) here; for a process without
    /// --gateway, whose --listen serves them.
    #[arg(long = "metrics-listen", env = "KBIND_METRICS_LISTEN", value_name = "ADDR")]
    metrics_listen: Option<SocketAddr>,
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
    // Colour only on a terminal, and not with NO_COLOR: a log file would keep the codes as text.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
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
    if args.gateway && args.metrics_listen.is_some() {
        bail!(
            "--metrics-listen is for a process without --gateway: the gateway serves /metrics, /healthz and /readyz on --listen"
        );
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
    let metrics_limits = match args.metrics_listen {
        Some(_) => Some(args.gateway_options.connection_limits()?),
        None => None,
    };
    let provider = provider_client(args.kubeconfig.as_deref()).await?;
    let gateway = match (gateway_config, authenticator) {
        (Some(config), Some(auth)) => {
            let listener = listen(args.gateway_options.listen, "", "gateway listening").await?;
            Some(GatewayModule { config, auth, listener })
        }
        _ => None,
    };
    let metrics_listener = match (args.metrics_listen, metrics_limits) {
        (Some(addr), Some(limits)) => Some(MetricsListener {
            listener: listen(addr, "--metrics-listen ", "serving /metrics, /healthz and /readyz").await?,
            limits,
        }),
        _ => None,
    };
    let modules = Modules {
        gateway,
        issuer: args.issuer,
        reaper: args.reaper.then(|| args.reaper_options.clone()),
        issuer_options: args.issuer_options.clone(),
        metrics_listener,
    };
    let shutdown = CancellationToken::new();
    tokio::spawn({
        let shutdown = shutdown.clone();
        async move {
            shutdown_signal().await;
            shutdown.cancel();
        }
    });
    let mut tasks = modules::start(provider, modules, &shutdown);
    while let Some(done) = tasks.join_next().await {
        done.context("a module panicked")??;
    }
    tracing::info!("stopped");
    Ok(())
}

/// The provider client: `--kubeconfig`, else kube's inference (in-cluster, then $KUBECONFIG).
/// Binds `addr` (`flag`: how the error names it) and logs `what` with the address bound.
async fn listen(addr: SocketAddr, flag: &str, what: &str) -> anyhow::Result<tokio::net::TcpListener> {
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("failed to listen on {flag}{addr}"))?;
    let addr = listener.local_addr().context("failed to read the listening address")?;
    tracing::info!(%addr, "{what}");
    Ok(listener)
}

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

    #[tokio::test]
    async fn metrics_listen_is_refused_beside_the_gateway_which_serves_metrics_itself() {
        let cli = Cli::try_parse_from(["kbind-backend", "run", "--gateway", "--metrics-listen=127.0.0.1:0"]).unwrap();
        let Command::Run(args) = cli.command else {
            panic!("parsed as another command")
        };
        let err = run(*args).await.unwrap_err().to_string();
        assert!(
            err.contains("--metrics-listen is for a process without --gateway"),
            "{err}"
        );
    }
}
