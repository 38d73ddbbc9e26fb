//! The `kbind-backend` binary: `crds` prints the service layer's CRDs; `run` starts the enabled
//! modules (`--gateway`, `--issuer`, `--reaper`, any subset) against one provider cluster.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context, bail};
use async_trait::async_trait;
use clap::{Parser, Subcommand, ValueEnum};
use kbind_api::service::AuthMethod;
use kbind_api::{Export, Grant, Issued};
use kbind_backend::auth::{AuthError, Authenticator, Caller, Identity, Via};
use kbind_backend::gateway;
use kbind_backend::issuer::{Credential, IssueError, Issuer};
use kbind_cluster::{ApiResource, ClusterClient, IdentitySource, KubeClusterClient};
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
    /// Static bearer tokens, one `token,user` per line (kube-apiserver's token file format; the
    /// subject is `token:<user>`).
    // LEAD: replace with the auth module's flags (static tokens, OIDC) when the auth branch lands.
    #[arg(long, env = "KBIND_TOKEN_FILE")]
    token_file: Option<PathBuf>,
    #[command(flatten)]
    gateway_options: gateway::Options,
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
    let provider = provider_client(args.kubeconfig.as_deref()).await?;
    let mut tasks = tokio::task::JoinSet::new();

    // LEAD: the issuer controller starts here when the issuer branch lands (`--issuer`).
    if args.issuer {
        bail!("--issuer: the issuer controller is not part of this build yet");
    }
    // LEAD: the reaper starts here when the reaper branch lands (`--reaper`).
    if args.reaper {
        bail!("--reaper: the reaper is not part of this build yet");
    }

    if let Some(config) = gateway_config {
        // LEAD: replace with the auth module's authenticator chain.
        let token_file = args
            .token_file
            .as_deref()
            .context("--gateway needs --token-file (static bearer tokens)")?;
        let authenticators: Vec<Arc<dyn Authenticator>> = vec![Arc::new(StaticTokens::read(token_file)?)];
        // LEAD: replace with the in-tree Kubernetes issuer.
        let issuer: Arc<dyn Issuer> = Arc::new(ServiceAccountTokens {
            provider: provider.clone(),
        });
        let state = gateway::Gateway::new(config, provider.clone(), authenticators, issuer);
        let listener = tokio::net::TcpListener::bind(args.gateway_options.listen)
            .await
            .with_context(|| format!("failed to listen on {}", args.gateway_options.listen))?;
        let addr = listener.local_addr().context("failed to read the listening address")?;
        tracing::info!(%addr, "gateway listening");
        let app = gateway::router(state).into_make_service_with_connect_info::<SocketAddr>();
        tasks.spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(shutdown_signal())
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

/// Interim static bearer tokens (`token,user[,...]` per line) until the auth module lands.
// LEAD: delete when `kbind_backend::auth`'s static-token authenticator is on main.
struct StaticTokens {
    tokens: Vec<(String, String)>,
}

impl StaticTokens {
    fn read(path: &Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("failed to read --token-file {}", path.display()))?;
        let mut tokens = Vec::new();
        for (n, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let mut fields = line.split(',');
            match (fields.next(), fields.next()) {
                (Some(token), Some(user)) if !token.trim().is_empty() && !user.trim().is_empty() => {
                    tokens.push((token.trim().to_string(), user.trim().trim_matches('"').to_string()));
                }
                // The line may hold a token: name only the line number.
                _ => bail!("--token-file {} line {}: expected token,user", path.display(), n + 1),
            }
        }
        Ok(StaticTokens { tokens })
    }
}

#[async_trait]
impl Authenticator for StaticTokens {
    fn method(&self) -> AuthMethod {
        AuthMethod {
            kind: "token".into(),
            login_path: None,
        }
    }

    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
        let Some(value) = headers.get(http::header::AUTHORIZATION) else {
            return Ok(None);
        };
        let Some(token) = value.to_str().ok().and_then(|v| v.strip_prefix("Bearer ")) else {
            return Ok(None);
        };
        let token = token.trim().as_bytes();
        let found = self.tokens.iter().find(|(known, _)| {
            known.len() == token.len() && known.bytes().zip(token).fold(0u8, |acc, (a, b)| acc | (a ^ b)) == 0
        });
        match found {
            Some((_, user)) => Ok(Some(Caller {
                identity: Identity {
                    subject: format!("token:{user}"),
                    name: Some(user.clone()),
                },
                via: Via::Bearer,
            })),
            None => Err(AuthError::Unauthenticated("the bearer token is not valid".into())),
        }
    }
}

/// Interim issuer half the gateway needs: the provider check and a TokenRequest for the Grant's
/// ServiceAccount (`status.issued.serviceAccount`). Provisioning is the issuer controller's.
// LEAD: delete when the in-tree Kubernetes issuer is on main.
struct ServiceAccountTokens {
    provider: Arc<dyn ClusterClient>,
}

/// Lifetime asked for issued tokens; the API server may shorten it.
const TOKEN_SECONDS: i64 = 365 * 24 * 3600;

#[async_trait]
impl Issuer for ServiceAccountTokens {
    fn name(&self) -> &str {
        "kubernetes"
    }

    async fn check_provider(&self) -> Result<(), IssueError> {
        match self.provider.identity().await?.source {
            IdentitySource::LogicalCluster => Err(IssueError::UnsupportedProvider(
                "this provider is kcp-like (it serves LogicalCluster): the Kubernetes issuer cannot provision on it; run kbind-backend with an issuer for kcp".into(),
            )),
            _ => Ok(()),
        }
    }

    async fn provision(&self, _grant: &Grant, _export: &Export) -> Result<Issued, IssueError> {
        Err(IssueError::UnsupportedProvider(
            "the issuer controller is not part of this build".into(),
        ))
    }

    async fn credential(&self, grant: &Grant) -> Result<Credential, IssueError> {
        let sa = grant
            .status
            .as_ref()
            .and_then(|s| s.issued.as_ref())
            .and_then(|i| i.service_account.as_ref())
            .ok_or(IssueError::NotIssued)?;
        let res = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        let body = serde_json::json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": TOKEN_SECONDS},
        });
        let answer = self
            .provider
            .create_subresource(&res, sa.namespace.as_deref(), &sa.name, "token", &body)
            .await?;
        let token = answer
            .pointer("/status/token")
            .and_then(|t| t.as_str())
            .ok_or_else(|| {
                IssueError::Cluster(kbind_cluster::Error::Decode(
                    "the TokenRequest answer has no token".into(),
                ))
            })?;
        let expires_at = answer
            .pointer("/status/expirationTimestamp")
            .and_then(|t| t.as_str())
            .and_then(|t| t.parse().ok());
        Ok(Credential {
            token: token.to_string(),
            expires_at,
        })
    }

    async fn revoke(&self, _grant: &Grant) -> Result<(), IssueError> {
        Err(IssueError::UnsupportedProvider(
            "the issuer controller is not part of this build".into(),
        ))
    }
}
