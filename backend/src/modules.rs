//! Starting the enabled modules against one provider: what `kbind-backend run` and the
//! whole-system demo share, so the demo runs exactly the wiring the binary does.

mod probes;

use std::sync::Arc;

use k8s_openapi::api::coordination::v1::Lease;
use kbind_api::Grant;
use kbind_cluster::{ApiResource, ClusterClient, SystemClock};
use prometheus_client::registry::Registry;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::auth::{self, Authenticator};
use crate::gateway;
use crate::issuer::{self, KubernetesIssuer};
use crate::reaper::{self, Reaper};

/// The gateway module: its checked configuration, its sign-in methods and its bound listener.
pub struct GatewayModule {
    /// From [`gateway::Options::config`] or [`gateway::Config::new`].
    pub config: gateway::Config,
    /// From [`auth::authenticator`].
    pub auth: Arc<auth::Chain>,
    /// Where it serves.
    pub listener: tokio::net::TcpListener,
}

/// The `--metrics-listen` server of a process without a gateway: its bound listener and the
/// bounds it enforces on connections, the gateway's (a silent client must not hold a socket).
pub struct MetricsListener {
    /// Where it serves.
    pub listener: tokio::net::TcpListener,
    /// From [`gateway::Options::connection_limits`].
    pub limits: gateway::ConnectionLimits,
}

/// Which modules run, and the issuer's options (its lease namespace is every module's).
pub struct Modules {
    /// The gateway, when enabled.
    pub gateway: Option<GatewayModule>,
    /// Whether the issuer's Grant and Export controllers run.
    pub issuer: bool,
    /// The reaper's options, when enabled.
    pub reaper: Option<reaper::Options>,
    /// The Kubernetes issuer's options (the gateway mints credentials with it too).
    pub issuer_options: issuer::Options,
    /// Where `/healthz`, `/readyz` and `/metrics` are served when no gateway runs
    /// (`--metrics-listen`); the gateway serves them on its own listener.
    pub metrics_listener: Option<MetricsListener>,
}

/// Why a running module stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ModuleError {
    /// The reaper stopped.
    #[error("the reaper stopped: {0}")]
    Reaper(#[from] reaper::Error),
    /// The gateway's HTTP server failed.
    #[error("the gateway's server failed: {0}")]
    Gateway(std::io::Error),
    /// The `--metrics-listen` server failed.
    #[error("the /metrics, /healthz and /readyz server failed: {0}")]
    Metrics(std::io::Error),
}

/// Spawns the enabled modules; each stops when `shutdown` is cancelled.
pub fn start(
    provider: Arc<dyn ClusterClient>,
    modules: Modules,
    shutdown: &CancellationToken,
) -> JoinSet<Result<(), ModuleError>> {
    let mut tasks = JoinSet::new();
    let lease_namespace = modules.issuer_options.lease_namespace.clone();
    // The gateway mints credentials at pickup with the same issuer the controller provisions with.
    let issuer = Arc::new(KubernetesIssuer::new(provider.clone(), modules.issuer_options));

    let mut issuer_metrics = None;
    if modules.issuer {
        let stop = shutdown.clone().cancelled_owned();
        let (provider, issuer) = (provider.clone(), issuer.clone());
        let metrics = issuer::Metrics::default();
        issuer_metrics = Some(metrics.clone());
        tasks.spawn(async move {
            issuer::run_controller_with_metrics(provider, issuer, metrics, stop).await;
            Ok(())
        });
        tracing::info!("issuer running");
    }

    let mut reaper_metrics = None;
    if let Some(options) = modules.reaper {
        let ttl = options.reap_ttl;
        let reaper = Reaper::new(
            provider.clone(),
            options,
            lease_namespace.clone(),
            Arc::new(SystemClock),
        );
        reaper_metrics = Some(reaper.metrics().clone());
        let stop = shutdown.clone();
        tasks.spawn(async move { Ok(reaper.run(stop).await?) });
        tracing::info!(?ttl, "reaper running");
    }

    if let Some(GatewayModule {
        mut config,
        auth,
        listener,
    }) = modules.gateway
    {
        config.lease_namespace = lease_namespace;
        // One /metrics for every module in this process.
        let metrics = gateway::Metrics::with_others(|registry| {
            if let Some(reaper) = &reaper_metrics {
                reaper.register(registry);
            }
            if let Some(issuer) = &issuer_metrics {
                issuer.register(registry);
            }
        });
        let authenticators: Vec<Arc<dyn Authenticator>> = auth.members().to_vec();
        let limits = config.connections;
        let state =
            gateway::Gateway::with_metrics(config, provider, authenticators, issuer, Arc::new(SystemClock), metrics);
        let app = gateway::router(state);
        let stop = shutdown.clone();
        tasks.spawn(async move {
            gateway::serve(listener, app, limits, stop)
                .await
                .map_err(ModuleError::Gateway)
        });
    } else if let Some(MetricsListener { listener, limits }) = modules.metrics_listener {
        // Ready when the provider answers, with this process's credentials, the lists its
        // modules watch: a pod whose RBAC is missing shows not ready instead of logging only.
        let mut checks = Vec::new();
        if modules.issuer {
            checks.push(probes::Check {
                resource: ApiResource::erase::<Grant>(&()),
                namespace: None,
            });
        }
        let mut registry = Registry::default();
        if let Some(issuer) = &issuer_metrics {
            issuer.register(&mut registry);
        }
        if let Some(reaper) = &reaper_metrics {
            reaper.register(&mut registry);
            checks.push(probes::Check {
                resource: ApiResource::erase::<Lease>(&()),
                namespace: Some(lease_namespace),
            });
        }
        let app = probes::router(provider, checks, registry);
        let stop = shutdown.clone();
        tasks.spawn(async move {
            gateway::serve(listener, app, limits, stop)
                .await
                .map_err(ModuleError::Metrics)
        });
    }
    tasks
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use fakeapi::FakeCluster;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    use super::*;

    /// Reads until the server closes the connection; the deadline is far beyond any timeout.
    async fn read_until_closed(stream: &mut tokio::net::TcpStream, which: &str) -> String {
        let mut answer = Vec::new();
        let read = tokio::time::timeout(Duration::from_secs(600), stream.read_to_end(&mut answer))
            .await
            .unwrap_or_else(|_| panic!("the server never closed the {which} connection"));
        match read {
            Ok(_) => {}
            // A server that closed with unread bytes pending resets the connection: closed too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
            Err(e) => panic!("{which}: {e}"),
        }
        String::from_utf8_lossy(&answer).into_owned()
    }

    #[tokio::test(start_paused = true)]
    async fn the_metrics_listener_closes_a_half_sent_request_and_frees_its_slot() {
        let cluster = FakeCluster::builder("provider").build();
        let provider: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let modules = Modules {
            gateway: None,
            issuer: false,
            reaper: None,
            issuer_options: issuer::Options::default(),
            metrics_listener: Some(MetricsListener {
                listener,
                limits: gateway::ConnectionLimits {
                    header_read_timeout: Duration::from_secs(10),
                    max_connections: 1,
                },
            }),
        };
        let stop = CancellationToken::new();
        let mut tasks = start(provider, modules, &stop);
        // A client that never finishes its headers takes the only slot...
        let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: kbind\r\nX-Slow: ")
            .await
            .unwrap();
        // ...so a whole request waits for it, and is answered once the header timeout closed it.
        let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
        whole
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: kbind\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let answer = read_until_closed(&mut whole, "whole").await;
        assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
        // The slow client's connection is gone: finishing its request now gets no answer.
        let _ = slow.write_all(b"x\r\n\r\n").await;
        let slow_answer = read_until_closed(&mut slow, "half-sent").await;
        assert!(!slow_answer.contains("200 OK"), "{slow_answer}");
        stop.cancel();
        while let Some(done) = tasks.join_next().await {
            done.unwrap().unwrap();
        }
    }
}
