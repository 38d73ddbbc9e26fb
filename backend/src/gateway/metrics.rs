//! The gateway's Prometheus metrics. Requests are labelled by route template (`/api/v1/pickup/{id}`),
//! so no pickup id, name or token can appear in a label.

use std::sync::Arc;
use std::time::Duration;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::header::CONTENT_TYPE;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::Gateway;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RequestLabels {
    method: String,
    route: String,
    status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct RouteLabels {
    route: String,
}

/// The `outcome` label values of `kbind_gateway_binds_total` and `kbind_gateway_pickups_total`.
pub(crate) mod outcome {
    /// A bind answered with its pickup URL.
    pub const BOUND: &str = "bound";
    /// A bind refused for the caller's mistake (a 4xx answer).
    pub const REFUSED: &str = "refused";
    /// A bind or a pickup that failed on the gateway's or the provider's side (a 5xx answer).
    pub const FAILED: &str = "failed";
    /// A pickup that delivered its bundle.
    pub const DELIVERED: &str = "delivered";
    /// A pickup already redeemed or expired.
    pub const GONE: &str = "gone";
    /// A pickup id that names no pickup.
    pub const NOT_FOUND: &str = "not_found";
    /// Every bind outcome.
    pub const BINDS: [&str; 3] = [BOUND, REFUSED, FAILED];
    /// Every pickup outcome.
    pub const PICKUPS: [&str; 4] = [DELIVERED, GONE, NOT_FOUND, FAILED];
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OutcomeLabels {
    outcome: &'static str,
}

/// The gateway's metrics registry.
#[derive(Clone)]
pub struct Metrics {
    registry: Arc<Registry>,
    requests: Family<RequestLabels, Counter>,
    durations: Family<RouteLabels, Histogram>,
    binds: Family<OutcomeLabels, Counter>,
    pickups: Family<OutcomeLabels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        Self::new()
    }
}

impl Metrics {
    /// A fresh registry with the gateway's metrics.
    pub fn new() -> Self {
        Self::with_others(|_| {})
    }

    /// A fresh registry with the gateway's metrics and whatever `others` registers at the root
    /// (the reaper's, when it runs in the same process), so one `/metrics` serves them all.
    pub fn with_others(others: impl FnOnce(&mut Registry)) -> Self {
        let mut root = Registry::default();
        others(&mut root);
        let registry = root.sub_registry_with_prefix("kbind_gateway");
        let requests = Family::<RequestLabels, Counter>::default();
        registry.register(
            "requests",
            "HTTP requests by method, route template and status",
            requests.clone(),
        );
        let durations = Family::<RouteLabels, Histogram>::new_with_constructor(|| {
            Histogram::new(exponential_buckets(0.001, 2.0, 16))
        });
        registry.register(
            "request_duration_seconds",
            "HTTP request latency by route template",
            durations.clone(),
        );
        let binds = Family::<OutcomeLabels, Counter>::default();
        registry.register("binds", "Binds by outcome", binds.clone());
        let pickups = Family::<OutcomeLabels, Counter>::default();
        registry.register("pickups", "Pickups by outcome", pickups.clone());
        // Every outcome exists from the start at 0: a counter that first appears at 1 shows no
        // increase() in Prometheus, so an alert would miss the first failed pickup.
        for outcome in outcome::BINDS {
            let _ = binds.get_or_create(&OutcomeLabels { outcome });
        }
        for outcome in outcome::PICKUPS {
            let _ = pickups.get_or_create(&OutcomeLabels { outcome });
        }
        Metrics {
            registry: Arc::new(root),
            requests,
            durations,
            binds,
            pickups,
        }
    }

    pub(crate) fn observe_request(&self, method: &str, route: &str, status: u16, elapsed: Duration) {
        self.requests
            .get_or_create(&RequestLabels {
                method: method_label(method).to_string(),
                route: route.to_string(),
                status,
            })
            .inc();
        self.durations
            .get_or_create(&RouteLabels {
                route: route.to_string(),
            })
            .observe(elapsed.as_secs_f64());
    }

    pub(crate) fn bind(&self, outcome: &'static str) {
        self.binds.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    pub(crate) fn pickup(&self, outcome: &'static str) {
        self.pickups.get_or_create(&OutcomeLabels { outcome }).inc();
    }

    /// The OpenMetrics text of every metric.
    pub fn encode(&self) -> String {
        let mut text = String::new();
        if prometheus_client::encoding::text::encode(&mut text, &self.registry).is_err() {
            text.clear();
        }
        text
    }
}

/// The `method` label: the methods of RFC 9110 and PATCH as they are, any other `other`. A
/// client picks the method, so taking it as it comes would let it add a series per request.
fn method_label(method: &str) -> &'static str {
    const KNOWN: [&str; 9] = [
        "GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH",
    ];
    KNOWN.into_iter().find(|known| *known == method).unwrap_or("other")
}

/// `GET /metrics`.
pub(crate) async fn serve(State(state): State<Gateway>) -> Response {
    response(&state.metrics().registry)
}

/// The `/metrics` answer: the OpenMetrics text of `registry` (the gateway's, or the probes' of a
/// process without one).
pub(crate) fn response(registry: &Registry) -> Response {
    let mut text = String::new();
    if let Err(e) = prometheus_client::encoding::text::encode(&mut text, registry) {
        tracing::warn!(error = %e, "encoding /metrics failed");
        return (StatusCode::INTERNAL_SERVER_ERROR, "encoding the metrics failed").into_response();
    }
    (
        [(
            CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        text,
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn made_up_methods_share_one_series() {
        let metrics = Metrics::new();
        for i in 0..300 {
            metrics.observe_request(&format!("X-METHOD-{i}"), "unmatched", 405, Duration::ZERO);
        }
        metrics.observe_request("GET", "/healthz", 200, Duration::ZERO);
        let text = metrics.encode();
        let series: Vec<&str> = text
            .lines()
            .filter(|l| l.starts_with("kbind_gateway_requests_total{"))
            .collect();
        assert_eq!(series.len(), 2, "{series:#?}");
        assert!(
            series
                .iter()
                .any(|l| l.contains("method=\"other\"") && l.ends_with(" 300")),
            "{series:#?}"
        );
        assert!(series.iter().any(|l| l.contains("method=\"GET\"")), "{series:#?}");
    }

    #[test]
    fn every_outcome_is_exported_at_zero_before_it_happens() {
        let text = Metrics::new().encode();
        for (family, outcomes) in [("binds", &outcome::BINDS[..]), ("pickups", &outcome::PICKUPS[..])] {
            for outcome in outcomes {
                let line = format!("kbind_gateway_{family}_total{{outcome=\"{outcome}\"}} 0");
                assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
            }
        }
    }
}
