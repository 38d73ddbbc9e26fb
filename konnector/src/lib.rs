//! The kbind konnector as a library: the command line, the wiring of the engine onto the
//! consumer cluster, `/metrics`, `/healthz`, `/readyz`, and graceful shutdown.
//!
//! An out-of-tree konnector with its own key [`Mapper`] is a few lines:
//!
//! ```no_run
//! use konnector::{ApiResource, Konnector, Mapper, ObjectKey};
//!
//! struct Prefix;
//!
//! impl Mapper for Prefix {
//!     fn to_provider(&self, _: &ApiResource, key: &ObjectKey) -> ObjectKey {
//!         ObjectKey { name: format!("c1-{}", key.name), ..key.clone() }
//!     }
//!     fn to_consumer(&self, _: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
//!         Some(ObjectKey { name: key.name.strip_prefix("c1-")?.to_string(), ..key.clone() })
//!     }
//! }
//!
//! #[tokio::main]
//! async fn main() -> std::process::ExitCode {
//!     Konnector::builder().mapper(Prefix).main().await
//! }
//! ```

pub mod cli;
pub mod consumer;
pub mod http;
pub mod logging;
pub mod metrics;
pub mod telemetry;

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::process::ExitCode;
use std::sync::Arc;

use clap::Parser;
use kbind_cluster::{ClusterClient, KubeClusterClient, SystemClock};
use kbind_engine::{Context, Engine, KubeConnector};
use tokio::sync::watch;

pub use cli::{Cli, Command, LogFormat, RunArgs};
pub use consumer::ConsumerSource;
/// The resource type in [`Mapper`]'s signature, so a custom mapper needs no other kbind crate.
pub use kbind_cluster::ApiResource;
/// What a custom mapper implements.
pub use kbind_engine::{Mapper, ObjectKey};

/// Errors of the konnector; [`Error::exit_code`] tells configuration mistakes (2) from
/// failures at run time (1).
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// No consumer kubeconfig anywhere.
    #[error(
        "no consumer kubeconfig found: tried --kubeconfig (not given), $KUBECONFIG (not set) and the in-cluster \
         service account (KUBERNETES_SERVICE_HOST/KUBERNETES_SERVICE_PORT not set); pass --kubeconfig PATH"
    )]
    NoKubeconfig,
    /// The consumer kubeconfig could not be loaded.
    #[error("failed to load the consumer kubeconfig from {origin}: {message}")]
    ConsumerConfig {
        /// Which source was used.
        origin: String,
        /// What went wrong (never the kubeconfig's content).
        message: String,
    },
    /// A flag value that parses but makes no sense.
    #[error("invalid flags: {0}")]
    InvalidFlags(String),
    /// The consumer client could not be built from a loaded kubeconfig.
    #[error("failed to build the consumer client")]
    ConsumerClientFailed(#[source] kbind_cluster::Error),
    /// An HTTP address could not be bound.
    #[error("failed to listen on {addr} ({flag})")]
    Bind {
        /// The flag that set the address.
        flag: &'static str,
        /// The address.
        addr: SocketAddr,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// The signal handlers could not be installed.
    #[error("failed to install the SIGTERM handler")]
    SignalFailed(#[source] std::io::Error),
}

impl Error {
    /// The process exit code: 2 for configuration mistakes (as for bad flags), else 1.
    pub fn exit_code(&self) -> u8 {
        match self {
            Error::NoKubeconfig | Error::ConsumerConfig { .. } | Error::InvalidFlags(_) => 2,
            Error::ConsumerClientFailed(_) | Error::Bind { .. } | Error::SignalFailed(_) => 1,
        }
    }
}

type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// A konnector to run: flags (or the command line), an optional custom [`Mapper`], and when to
/// stop (SIGTERM or Ctrl-C unless [`Konnector::shutdown_on`] says otherwise).
#[must_use]
pub struct Konnector {
    args: Option<RunArgs>,
    mapper: Option<Arc<dyn Mapper>>,
    shutdown: Option<Shutdown>,
}

impl Konnector {
    /// A konnector that reads its subcommand and flags from the process's command line.
    pub fn builder() -> Self {
        Self {
            args: None,
            mapper: None,
            shutdown: None,
        }
    }

    /// A konnector that runs with `args` (no command line parsing).
    pub fn from_args(args: RunArgs) -> Self {
        Self {
            args: Some(args),
            ..Self::builder()
        }
    }

    /// Maps consumer keys to provider keys with `mapper` instead of the identity.
    pub fn mapper(mut self, mapper: impl Mapper + 'static) -> Self {
        self.mapper = Some(Arc::new(mapper));
        self
    }

    /// Stops when `shutdown` resolves instead of on SIGTERM or Ctrl-C.
    pub fn shutdown_on(mut self, shutdown: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(shutdown));
        self
    }

    /// Runs `konnector crds`, or `konnector run` until shutdown; bad flags on the command line print clap's message and exit with code 2.
    pub async fn run(self) -> Result<(), Error> {
        let args = match self.args.clone() {
            Some(args) => args,
            None => match Cli::parse().command {
                Command::Crds => {
                    print!("{}", kbind_api::crds_yaml());
                    return Ok(());
                }
                Command::Run(args) => *args,
            },
        };
        self.run_with(args).await
    }

    /// [`Konnector::run`], with errors printed to stderr and turned into the exit code.
    pub async fn main(self) -> ExitCode {
        match self.run().await {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("konnector: {}", error_chain(&e));
                ExitCode::from(e.exit_code())
            }
        }
    }

    async fn run_with(self, args: RunArgs) -> Result<(), Error> {
        args.validate()?;
        logging::init(args.log_format, &args.log_level)?;
        if args.allow_insecure_providers {
            tracing::warn!(
                "DEVELOPMENT MODE: --allow-insecure-providers accepts providers over plain http:// and with \
                 insecure-skip-tls-verify; provider credentials and data can be read or altered in transit"
            );
        }
        let config = ConsumerSource::from_env(args.kubeconfig.clone())
            .config(args.context.as_deref())
            .await?;
        let telemetry = telemetry::Telemetry::default();
        let consumer: Arc<dyn ClusterClient> = Arc::new(
            KubeClusterClient::from_config_with_limit(config, args.max_response_bytes)
                .map_err(Error::ConsumerClientFailed)?,
        );
        let consumer: Arc<dyn ClusterClient> = Arc::new(telemetry::CountErrors::new(
            consumer,
            telemetry::CONSUMER,
            telemetry.clone(),
        ));
        let connector = Arc::new(KubeConnector {
            allow_insecure: args.allow_insecure_providers,
            max_response_bytes: args.max_response_bytes,
            request_timeout: args.provider_request_timeout,
        });
        let ctx = Context {
            consumer: consumer.clone(),
            connector: Arc::new(telemetry::CountingConnector::new(connector, telemetry.clone())),
            clock: Arc::new(SystemClock),
            randomness: kbind_cluster::backoff::from_entropy(),
            config: args.engine_config(),
        };
        let leader = args.leader_config();
        match &leader {
            Some(l) => {
                tracing::info!(lease = %l.name, namespace = %l.namespace, identity = %l.identity, "leader election on")
            }
            None => tracing::info!("leader election off: this replica always leads"),
        }
        let mut builder = Engine::builder(ctx)
            .leader_election(leader)
            .with_sync_observer(Arc::new(telemetry.clone()));
        if let Some(mapper) = self.mapper {
            builder = builder.with_mapper(SharedMapper(mapper));
        }
        let engine = builder.build();

        let metrics_listener = http::bind(args.metrics_addr, "--metrics-addr").await?;
        let health_listener = http::bind(args.health_addr, "--health-addr").await?;
        let metrics_router = http::metrics_router(metrics::MetricsSource {
            consumer: consumer.clone(),
            providers: engine.providers(),
            syncers: engine.syncers(),
            leading: engine.leading(),
            telemetry,
        });
        let health_router = http::health_router(http::Readiness {
            consumer,
            namespace: args.namespace.clone(),
            timeout: http::READY_TIMEOUT,
        });
        log_listening("metrics", &metrics_listener);
        log_listening("health", &health_listener);

        let stop = Stop::new(self.shutdown.map_or_else(signals, Ok)?);
        let metrics_server = tokio::spawn(http::serve(metrics_listener, metrics_router, stop.wait()));
        let health_server = tokio::spawn(http::serve(health_listener, health_router, stop.wait()));
        engine.run_until(stop.wait()).await;
        // The servers stop on the same signal; a panic in one is already logged by tokio.
        let _ = tokio::join!(metrics_server, health_server);
        tracing::info!("konnector stopped");
        Ok(())
    }
}

fn log_listening(what: &'static str, listener: &tokio::net::TcpListener) {
    if let Ok(addr) = listener.local_addr() {
        tracing::info!(server = what, addr = %addr, "listening");
    }
}

/// One shutdown future fanned out to the engine and both servers.
struct Stop {
    rx: watch::Receiver<bool>,
}

impl Stop {
    fn new(shutdown: Shutdown) -> Self {
        let (tx, rx) = watch::channel(false);
        tokio::spawn(async move {
            shutdown.await;
            tracing::info!("shutting down");
            tx.send_replace(true);
            // Keep the sender alive so receivers see `true` rather than a closed channel.
            std::future::pending::<()>().await
        });
        Self { rx }
    }

    fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.rx.clone();
        async move {
            // An error means the sender is gone, which only happens at runtime shutdown.
            let _ = rx.wait_for(|stop| *stop).await;
        }
    }
}

/// SIGTERM (what Kubernetes sends) or Ctrl-C.
fn signals() -> Result<Shutdown, Error> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut term = signal(SignalKind::terminate()).map_err(Error::SignalFailed)?;
        Ok(Box::pin(async move {
            tokio::select! {
                _ = term.recv() => {}
                _ = tokio::signal::ctrl_c() => {}
            }
        }))
    }
    #[cfg(not(unix))]
    {
        Ok(Box::pin(async {
            let _ = tokio::signal::ctrl_c().await;
        }))
    }
}

/// A caller's mapper behind an `Arc`, so the builder can hold it before the engine exists.
struct SharedMapper(Arc<dyn Mapper>);

impl Mapper for SharedMapper {
    fn to_provider(&self, res: &ApiResource, key: &ObjectKey) -> ObjectKey {
        self.0.to_provider(res, key)
    }

    fn to_consumer(&self, res: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
        self.0.to_consumer(res, key)
    }
}

/// `error: cause: cause` on one line.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}
