//! The konnector's HTTP endpoints as axum routers: `/healthz` and `/readyz` on the health
//! address, `/metrics` on the metrics address.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use k8s_openapi::api::core::v1::Namespace;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt};
use tokio::net::TcpListener;

use crate::metrics::{CONTENT_TYPE, MetricsSource};

/// How long `/readyz` waits for the consumer before answering 503.
pub const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// What `/readyz` checks: the consumer answers a GET of the konnector's namespace.
#[derive(Clone)]
pub struct Readiness {
    /// The consumer cluster.
    pub consumer: Arc<dyn ClusterClient>,
    /// The konnector's namespace.
    pub namespace: String,
    /// How long to wait for the consumer.
    pub timeout: Duration,
}

/// `/healthz` (the process answers) and `/readyz` (the consumer answers).
pub fn health_router(readiness: Readiness) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(readyz))
        .with_state(readiness)
}

/// `/metrics`.
pub fn metrics_router(source: MetricsSource) -> Router {
    Router::new().route("/metrics", get(metrics)).with_state(source)
}

async fn healthz() -> &'static str {
    "ok\n"
}

async fn readyz(State(readiness): State<Readiness>) -> Response {
    let res = ApiResource::erase::<Namespace>(&());
    let get = readiness.consumer.get_opt(&res, None, &readiness.namespace);
    match tokio::time::timeout(readiness.timeout, get).await {
        // A missing namespace still proves the consumer answers; the Connection conditions say
        // what is missing.
        Ok(Ok(_)) => (StatusCode::OK, "ok\n").into_response(),
        Ok(Err(e)) => {
            tracing::debug!(error = %e, "readiness check failed");
            (StatusCode::SERVICE_UNAVAILABLE, "consumer cluster did not answer\n").into_response()
        }
        Err(_) => (StatusCode::SERVICE_UNAVAILABLE, "consumer cluster timed out\n").into_response(),
    }
}

async fn metrics(State(source): State<MetricsSource>) -> Response {
    let text = source.gather().await.encode(&source.telemetry);
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

/// Serves `router` on `listener` until `shutdown` resolves (open requests are then finished).
pub async fn serve(listener: TcpListener, router: Router, shutdown: impl Future<Output = ()> + Send + 'static) {
    let addr = listener.local_addr().ok();
    if let Err(e) = axum::serve(listener, router).with_graceful_shutdown(shutdown).await {
        tracing::error!(error = %e, addr = ?addr, "HTTP server failed");
    }
}

/// Binds `addr`, naming the flag on failure.
pub async fn bind(addr: SocketAddr, flag: &'static str) -> Result<TcpListener, crate::Error> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| crate::Error::Bind { flag, addr, source })
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::body::Body;
    use axum::http::Request;
    use fakeapi::FakeCluster;
    use tower::ServiceExt;

    fn readiness(cluster: &FakeCluster) -> Readiness {
        Readiness {
            consumer: Arc::new(cluster.admin_client()),
            namespace: "kbind".into(),
            timeout: READY_TIMEOUT,
        }
    }

    async fn status(router: Router, path: &str) -> StatusCode {
        let request = Request::get(path).body(Body::empty()).unwrap();
        router.oneshot(request).await.unwrap().status()
    }

    #[tokio::test]
    async fn readyz_follows_the_consumer() {
        let cluster = FakeCluster::builder("consumer").build();
        let router = health_router(readiness(&cluster));
        assert_eq!(status(router.clone(), "/healthz").await, StatusCode::OK);
        assert_eq!(status(router.clone(), "/readyz").await, StatusCode::OK);
        cluster.partition();
        assert_eq!(status(router.clone(), "/readyz").await, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(status(router, "/healthz").await, StatusCode::OK);
    }
}
