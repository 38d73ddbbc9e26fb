//! The metrics that accumulate between scrapes: sync latency histograms (fed by the engine's
//! [`SyncObserver`] hook) and API errors by cluster and HTTP code (fed by a [`Layer`] around
//! the consumer client and, through [`CountingConnector`], every provider client).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kbind_cluster::{ClusterClient, Error, Layer, Request};
use kbind_engine::remote::{Connector, ProviderKubeconfig};
use kbind_engine::sync::SyncObserver;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};

/// The `cluster` label of requests to the consumer.
pub const CONSUMER: &str = "consumer";
/// The `cluster` label of requests to a provider.
pub const PROVIDER: &str = "provider";

type Labels = Vec<(&'static str, String)>;
type Histograms = Family<Labels, Histogram, fn() -> Histogram>;

/// 5 ms to about 41 s, doubling: a sync is a few requests, a slow one waits for retries.
fn latency_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.005, 2.0, 14))
}

/// Long-lived metrics; clones share the same series, so one is handed to the engine and the
/// clients while the scrape registers another.
#[derive(Clone, Debug)]
pub struct Telemetry {
    spec_up: Histograms,
    status_down: Histograms,
    api_errors: Family<Labels, Counter>,
}

impl Default for Telemetry {
    fn default() -> Self {
        Self {
            spec_up: Family::new_with_constructor(latency_histogram),
            status_down: Family::new_with_constructor(latency_histogram),
            api_errors: Family::default(),
        }
    }
}

impl Telemetry {
    /// Counts one failed request to `cluster` ([`CONSUMER`] or [`PROVIDER`]).
    pub fn api_error(&self, cluster: &'static str, error: &Error) {
        let labels = vec![("cluster", cluster.to_string()), ("code", error.code().to_string())];
        self.api_errors.get_or_create(&labels).inc();
    }

    /// Adds the series to a scrape's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register_with_unit(
            "kbind_spec_up",
            "Seconds from a change seen by a syncer to the provider apply that carried it",
            Unit::Seconds,
            self.spec_up.clone(),
        );
        registry.register_with_unit(
            "kbind_status_down",
            "Seconds from a change seen by a syncer to the consumer status write that carried it",
            Unit::Seconds,
            self.status_down.clone(),
        );
        registry.register(
            "kbind_api_errors",
            "Requests answered with an error, by cluster and HTTP code (0: no answer)",
            self.api_errors.clone(),
        );
    }
}

fn api(api: &str) -> Labels {
    vec![("api", api.to_string())]
}

impl SyncObserver for Telemetry {
    fn spec_up(&self, api_name: &str, latency: Duration) {
        self.spec_up
            .get_or_create(&api(api_name))
            .observe(latency.as_secs_f64());
    }

    fn status_down(&self, api_name: &str, latency: Duration) {
        self.status_down
            .get_or_create(&api(api_name))
            .observe(latency.as_secs_f64());
    }
}

/// A client whose failed requests count in `kbind_api_errors_total{cluster}`.
#[derive(Clone)]
pub struct CountErrors {
    inner: Arc<dyn ClusterClient>,
    cluster: &'static str,
    telemetry: Telemetry,
}

impl CountErrors {
    /// Wraps `inner`, a client of `cluster` ([`CONSUMER`] or [`PROVIDER`]).
    pub fn new(inner: Arc<dyn ClusterClient>, cluster: &'static str, telemetry: Telemetry) -> Self {
        Self {
            inner,
            cluster,
            telemetry,
        }
    }
}

#[async_trait]
impl Layer for CountErrors {
    async fn route(&self, _request: Request<'_>) -> kbind_cluster::Result<Arc<dyn ClusterClient>> {
        Ok(self.inner.clone())
    }

    fn observe(&self, error: &Error) {
        self.telemetry.api_error(self.cluster, error);
    }
}

/// A [`Connector`] whose provider clients count their failed requests.
pub struct CountingConnector {
    inner: Arc<dyn Connector>,
    telemetry: Telemetry,
}

impl CountingConnector {
    /// Wraps the clients `inner` builds.
    pub fn new(inner: Arc<dyn Connector>, telemetry: Telemetry) -> Self {
        Self { inner, telemetry }
    }
}

#[async_trait]
impl Connector for CountingConnector {
    async fn connect(
        &self,
        kubeconfig: &ProviderKubeconfig,
        bearer: &kbind_cluster::BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        let client = self.inner.connect(kubeconfig, bearer).await?;
        Ok(Arc::new(CountErrors::new(client, PROVIDER, self.telemetry.clone())))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakeapi::FakeCluster;
    use k8s_openapi::api::core::v1::Namespace;
    use kbind_cluster::{ApiResource, ClusterClientExt};
    use prometheus_client::encoding::text::encode;

    fn exposition(telemetry: &Telemetry) -> String {
        let mut registry = Registry::default();
        telemetry.register(&mut registry);
        let mut text = String::new();
        encode(&mut text, &registry).unwrap();
        text
    }

    fn has(text: &str, line: &str) -> bool {
        text.lines().any(|l| l == line)
    }

    #[tokio::test]
    async fn failed_requests_count_by_cluster_and_code() {
        let cluster = FakeCluster::builder("consumer").build();
        let telemetry = Telemetry::default();
        let client = CountErrors::new(Arc::new(cluster.admin_client()), CONSUMER, telemetry.clone());
        let namespaces = ApiResource::erase::<Namespace>(&());
        assert!(client.get_opt(&namespaces, None, "missing").await.unwrap().is_none());
        client.get_opt(&namespaces, None, "default").await.unwrap();
        let text = exposition(&telemetry);
        assert!(
            has(&text, "kbind_api_errors_total{cluster=\"consumer\",code=\"404\"} 1"),
            "{text}"
        );
        cluster.partition();
        assert!(client.get(&namespaces, None, "default").await.is_err());
        let text = exposition(&telemetry);
        assert!(
            has(&text, "kbind_api_errors_total{cluster=\"consumer\",code=\"404\"} 1"),
            "{text}"
        );
        assert!(
            text.lines()
                .any(|l| l.starts_with("kbind_api_errors_total{cluster=\"consumer\",code=") && !l.contains("404")),
            "the partition counts under its own code:\n{text}"
        );
    }

    #[test]
    fn latencies_land_in_per_api_histograms_that_outlive_a_scrape() {
        let telemetry = Telemetry::default();
        let observer: Arc<dyn SyncObserver> = Arc::new(telemetry.clone());
        observer.spec_up("widgets.example.org", Duration::from_millis(30));
        observer.spec_up("widgets.example.org", Duration::from_secs(2));
        observer.status_down("widgets.example.org", Duration::from_millis(3));
        let first = exposition(&telemetry);
        for line in [
            "# TYPE kbind_spec_up_seconds histogram",
            "# UNIT kbind_spec_up_seconds seconds",
            "kbind_spec_up_seconds_count{api=\"widgets.example.org\"} 2",
            "kbind_spec_up_seconds_sum{api=\"widgets.example.org\"} 2.03",
            "kbind_spec_up_seconds_bucket{le=\"0.04\",api=\"widgets.example.org\"} 1",
            "kbind_status_down_seconds_count{api=\"widgets.example.org\"} 1",
            "kbind_status_down_seconds_bucket{le=\"0.005\",api=\"widgets.example.org\"} 1",
        ] {
            assert!(has(&first, line), "missing {line:?} in\n{first}");
        }
        observer.spec_up("widgets.example.org", Duration::from_millis(1));
        let second = exposition(&telemetry);
        assert!(
            has(&second, "kbind_spec_up_seconds_count{api=\"widgets.example.org\"} 3"),
            "{second}"
        );
    }
}
