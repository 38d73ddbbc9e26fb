//! `/healthz`, `/readyz` and `/metrics` of a process that runs no gateway (the chart's issuer and
//! reaper Deployment, `--metrics-listen`): the gateway serves these on its own `--listen`, so
//! without it the kubelet would have nothing to probe and Prometheus no `kbind_reaper_*` to scrape.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use http::StatusCode;
use kbind_api::service::path;
use kbind_cluster::{ApiResource, ClusterClient, ListParams};
use prometheus_client::registry::Registry;

/// How long `/readyz` waits for the provider before answering 503.
const READY_TIMEOUT: Duration = Duration::from_secs(5);

/// One list the running modules depend on: `/readyz` answers 200 only when each succeeds.
#[derive(Clone, Debug)]
pub(crate) struct Check {
    /// What is listed.
    pub(crate) resource: ApiResource,
    /// In which namespace (`None`: cluster-wide).
    pub(crate) namespace: Option<String>,
}

#[derive(Clone)]
struct Probes {
    provider: Arc<dyn ClusterClient>,
    checks: Arc<[Check]>,
    registry: Arc<Registry>,
}

/// The router: `/healthz` (the process serves), `/readyz` (the provider answers every list of
/// `checks` with this process's credentials) and `/metrics` (OpenMetrics text of `registry`).
pub(crate) fn router(provider: Arc<dyn ClusterClient>, checks: Vec<Check>, registry: Registry) -> Router {
    let state = Probes {
        provider,
        checks: checks.into(),
        registry: Arc::new(registry),
    };
    Router::new()
        .route(path::HEALTHZ, get(healthz))
        .route(path::READYZ, get(readyz))
        .route(path::METRICS, get(metrics))
        .with_state(state)
}

async fn healthz() -> &'static str {
    "ok"
}

async fn readyz(State(probes): State<Probes>) -> Response {
    let probe = ListParams::default().limit(1);
    for check in probes.checks.iter() {
        let what = match &check.namespace {
            Some(ns) => format!("{} in namespace {ns}", check.resource.plural),
            None => check.resource.plural.clone(),
        };
        let listed = tokio::time::timeout(
            READY_TIMEOUT,
            probes
                .provider
                .list(&check.resource, check.namespace.as_deref(), &probe),
        )
        .await;
        let failure = match listed {
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => e.to_string(),
            Err(_) => format!("no answer within {}s", READY_TIMEOUT.as_secs()),
        };
        // Why the log and not the body: the body goes to whoever can reach the port.
        tracing::warn!(error = %failure, "readiness: the provider does not answer a list of {what}");
        return (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("the provider does not answer a list of {what}"),
        )
            .into_response();
    }
    "ok".into_response()
}

async fn metrics(State(probes): State<Probes>) -> Response {
    crate::gateway::metrics::response(&probes.registry)
}

#[cfg(test)]
mod tests {
    use axum::body::Body;
    use fakeapi::{FakeCluster, UserInfo};
    use http::Request;
    use k8s_openapi::api::coordination::v1::Lease;
    use tower::ServiceExt;

    use super::*;
    use crate::reaper::Metrics;

    async fn get(router: &Router, uri: &str) -> (StatusCode, String) {
        let response = router
            .clone()
            .oneshot(Request::get(uri).body(Body::empty()).unwrap())
            .await
            .unwrap();
        let status = response.status();
        let body = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
        (status, String::from_utf8(body.to_vec()).unwrap())
    }

    fn leases_in(ns: &str) -> Check {
        Check {
            resource: ApiResource::erase::<Lease>(&()),
            namespace: Some(ns.into()),
        }
    }

    #[tokio::test]
    async fn readyz_follows_what_the_credentials_may_list_and_metrics_serve_the_reaper() {
        let cluster = FakeCluster::builder("provider").build();
        let mut registry = Registry::default();
        Metrics::default().register(&mut registry);
        let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
        let admitted = router(admin, vec![leases_in("kbind")], registry);
        assert_eq!(get(&admitted, "/healthz").await, (StatusCode::OK, "ok".into()));
        assert_eq!(get(&admitted, "/readyz").await, (StatusCode::OK, "ok".into()));
        let (status, text) = get(&admitted, "/metrics").await;
        assert_eq!(status, StatusCode::OK);
        assert!(text.contains("kbind_reaper_leases 0"), "{text}");

        // A ServiceAccount with no RBAC: alive, not ready, and the body names what failed.
        let nobody: Arc<dyn ClusterClient> = Arc::new(cluster.client(UserInfo::service_account("kbind-system", "x")));
        let refused = router(nobody, vec![leases_in("kbind")], Registry::default());
        assert_eq!(get(&refused, "/healthz").await.0, StatusCode::OK);
        assert_eq!(
            get(&refused, "/readyz").await,
            (
                StatusCode::SERVICE_UNAVAILABLE,
                "the provider does not answer a list of leases in namespace kbind".into()
            )
        );
    }
}
