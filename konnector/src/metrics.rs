//! `/metrics`: a snapshot of the engine gathered on each scrape (Connections, ClusterBindings and
//! Bindings from consumer lists, engaged providers, syncers and their reports, leadership), plus the long-lived
//! [`Telemetry`] (sync latencies, API errors by code), in the OpenMetrics text format through
//! `prometheus-client`.

use std::collections::BTreeMap;
use std::sync::Arc;

use kbind_api::consts::{condition, status};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, ListParams};
use kbind_engine::{CredentialReport, Links, Syncers};
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::{Registry, Unit};
use tokio::sync::watch;

use crate::telemetry::Telemetry;

/// The `Content-Type` of the exposition.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Per-API counts summed over the syncers of that API.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ApiCounts {
    /// Consumer objects whose provider copy was written.
    pub synced: u64,
    /// Consumer objects left alone because of a conflict.
    pub conflicts: u64,
    /// Distinct forbidden provider operations.
    pub denied: u64,
    /// Objects triggered by a change and not yet picked up by a reconcile.
    pub queued: u64,
}

/// Everything one scrape reports.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Snapshot {
    /// Connections with `Ready=True` and the rest; `None` when the consumer list failed.
    pub connections: Option<(u64, u64)>,
    /// Per binding kind (`ClusterBinding`, `Binding`): those with `Ready=True` and the rest;
    /// `None` when a consumer list failed.
    pub bindings: Option<Vec<(&'static str, u64, u64)>>,
    /// Engaged providers.
    pub engaged_providers: u64,
    /// Engaged providers whose requests fail, kept engaged within the hysteresis window: the
    /// Connection and its failures in a row.
    pub faltering: Vec<(String, u32)>,
    /// Running syncers.
    pub syncers: u64,
    /// Per API (`<plural>.<group>`).
    pub apis: BTreeMap<String, ApiCounts>,
    /// Whether this replica leads.
    pub leader: bool,
    /// Each Connection's credential: when an issued token expires, how its renewals went.
    pub credentials: Vec<CredentialReport>,
}

/// Where a scrape reads from: handles onto the running engine and the consumer.
#[derive(Clone)]
pub struct MetricsSource {
    /// The consumer cluster.
    pub consumer: Arc<dyn ClusterClient>,
    /// `Engine::providers()`.
    pub providers: Links,
    /// `Engine::syncers()`.
    pub syncers: Syncers,
    /// `Engine::leading()`.
    pub leading: watch::Receiver<bool>,
    /// The latencies and error counts, shared with the engine and the clients.
    pub telemetry: Telemetry,
}

impl MetricsSource {
    /// Reads the current state; a failed Connection list leaves `connections` out rather than
    /// reporting zero, which would read as "no Connections".
    pub async fn gather(&self) -> Snapshot {
        let connections = match self
            .consumer
            .list(&connection_resource(), None, &ListParams::default())
            .await
        {
            Ok(list) => Some(count_ready(&list.items)),
            Err(e) => {
                tracing::debug!(error = %e, "failed to list Connections for /metrics");
                None
            }
        };
        let mut bindings = Some(Vec::new());
        for (kind, resource) in [
            ("ClusterBinding", ApiResource::erase::<kbind_api::ClusterBinding>(&())),
            ("Binding", ApiResource::erase::<kbind_api::Binding>(&())),
        ] {
            match self.consumer.list(&resource, None, &ListParams::default()).await {
                Ok(list) => {
                    let (ready, not_ready) = count_ready(&list.items);
                    if let Some(counts) = bindings.as_mut() {
                        counts.push((kind, ready, not_ready));
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, kind, "failed to list bindings for /metrics");
                    bindings = None;
                }
            }
        }
        let keys = self.syncers.keys();
        let mut apis: BTreeMap<String, ApiCounts> = BTreeMap::new();
        for key in &keys {
            let Some(report) = self.syncers.report(key) else {
                continue;
            };
            let counts = apis.entry(key.api.clone()).or_default();
            counts.synced += report.synced as u64;
            counts.conflicts += report.conflicts.len() as u64;
            counts.denied += report.denied.len() as u64;
            counts.queued += report.queued as u64;
        }
        Snapshot {
            connections,
            bindings,
            engaged_providers: self.providers.engaged().len() as u64,
            faltering: self.providers.faltering(),
            syncers: keys.len() as u64,
            apis,
            leader: *self.leading.borrow(),
            credentials: self.providers.credentials(),
        }
    }
}

fn connection_resource() -> ApiResource {
    ApiResource::erase::<kbind_api::Connection>(&())
}

/// (ready, not ready): ready means a `Ready` condition with status `True`.
fn count_ready(items: &[DynamicObject]) -> (u64, u64) {
    let ready = items.iter().filter(|c| is_ready(c)).count() as u64;
    (ready, items.len() as u64 - ready)
}

fn is_ready(obj: &DynamicObject) -> bool {
    let conditions = obj.data.pointer("/status/conditions").and_then(|c| c.as_array());
    conditions.is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == condition::READY && c["status"] == status::TRUE)
    })
}

type Labels = Vec<(&'static str, String)>;

impl Snapshot {
    /// The OpenMetrics text exposition of this snapshot and `telemetry`.
    pub fn encode(&self, telemetry: &Telemetry) -> String {
        let mut registry = Registry::default();
        telemetry.register(&mut registry);
        if let Some((ready, not_ready)) = self.connections {
            let family = Family::<Labels, Gauge>::default();
            family.get_or_create(&vec![("state", "ready".into())]).set(ready as i64);
            family
                .get_or_create(&vec![("state", "not_ready".into())])
                .set(not_ready as i64);
            registry.register("kbind_connections", "Connections by Ready condition", family);
        }
        if let Some(bindings) = &self.bindings {
            let family = Family::<Labels, Gauge>::default();
            for (kind, ready, not_ready) in bindings {
                for (state, count) in [("ready", ready), ("not_ready", not_ready)] {
                    family
                        .get_or_create(&vec![("kind", kind.to_string()), ("state", state.into())])
                        .set(*count as i64);
                }
            }
            registry.register(
                "kbind_bindings",
                "ClusterBindings and Bindings by kind and Ready condition",
                family,
            );
        }
        gauge(
            &mut registry,
            "kbind_engaged_providers",
            "Engaged provider clusters",
            self.engaged_providers,
        );
        let failing = Family::<Labels, Gauge>::default();
        for (connection, failures) in &self.faltering {
            failing
                .get_or_create(&vec![("connection", connection.clone())])
                .set(i64::from(*failures));
        }
        registry.register(
            "kbind_provider_failed_requests",
            "Provider requests of an engaged Connection failed in a row; it stays engaged until failures last the heartbeat Lease's duration",
            failing,
        );
        gauge(
            &mut registry,
            "kbind_syncers",
            "Running per-(binding, API) syncers",
            self.syncers,
        );
        gauge(
            &mut registry,
            "kbind_leader",
            "1 while this replica holds the leader Lease",
            u64::from(self.leader),
        );
        self.per_api(
            &mut registry,
            "kbind_objects_synced",
            "Consumer objects synced to the provider",
            |c| c.synced,
        );
        self.per_api(
            &mut registry,
            "kbind_conflicts",
            "Consumer objects left alone by a conflict",
            |c| c.conflicts,
        );
        self.per_api(
            &mut registry,
            "kbind_permission_denied",
            "Forbidden provider operations",
            |c| c.denied,
        );
        self.per_api(
            &mut registry,
            "kbind_queue_depth",
            "Objects triggered by a change and not yet picked up by a reconcile",
            |c| c.queued,
        );
        self.credentials(&mut registry);
        let mut text = String::new();
        // Writing into a String cannot fail.
        let _ = encode(&mut text, &registry);
        text
    }

    /// `kbind_credential_expiry_timestamp_seconds{connection}` (issued tokens only) and
    /// `kbind_credential_renewals_total{connection,result}`. The engine counts renewals for the
    /// life of the process, so the counter is rebuilt from its totals on every scrape.
    fn credentials(&self, registry: &mut Registry) {
        let expiry = Family::<Labels, Gauge>::default();
        let renewals = Family::<Labels, Counter>::default();
        for credential in &self.credentials {
            let connection = credential.connection.clone();
            if let Some(at) = credential.expires_at {
                expiry
                    .get_or_create(&vec![("connection", connection.clone())])
                    .set(at.as_second());
            }
            for (result, count) in [("renewed", credential.renewed), ("failed", credential.failed)] {
                renewals
                    .get_or_create(&vec![("connection", connection.clone()), ("result", result.into())])
                    .inc_by(count);
            }
        }
        registry.register_with_unit(
            "kbind_credential_expiry_timestamp",
            "Unix time the Connection's issued provider token expires (absent for a credential that is not an issued token)",
            Unit::Seconds,
            expiry,
        );
        registry.register(
            "kbind_credential_renewals",
            "Renewals of a Connection's issued provider token, by result (renewed or failed)",
            renewals,
        );
    }

    fn per_api(&self, registry: &mut Registry, name: &str, help: &str, value: impl Fn(&ApiCounts) -> u64) {
        let family = Family::<Labels, Gauge>::default();
        for (api, counts) in &self.apis {
            family
                .get_or_create(&vec![("api", api.clone())])
                .set(value(counts) as i64);
        }
        registry.register(name, help, family);
    }
}

fn gauge(registry: &mut Registry, name: &str, help: &str, value: u64) {
    let gauge = Gauge::<i64>::default();
    gauge.set(value as i64);
    registry.register(name, help, gauge);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(name: &str, ready: Option<&str>) -> DynamicObject {
        let conditions: Vec<_> = ready
            .map(|s| serde_json::json!({"type": "Ready", "status": s}))
            .into_iter()
            .collect();
        let mut obj = DynamicObject::new(name, &connection_resource());
        obj.data = serde_json::json!({"status": {"conditions": conditions}});
        obj
    }

    #[test]
    fn connections_count_as_ready_only_with_ready_true() {
        let items = [
            connection("a", Some("True")),
            connection("b", Some("False")),
            connection("c", None),
        ];
        assert_eq!(count_ready(&items), (1, 2));
    }

    #[test]
    fn exposition_names_every_metric_with_its_labels() {
        let snapshot = Snapshot {
            connections: Some((2, 1)),
            bindings: Some(vec![("ClusterBinding", 1, 0), ("Binding", 3, 2)]),
            engaged_providers: 2,
            faltering: vec![("acme".to_string(), 3)],
            syncers: 3,
            apis: BTreeMap::from([(
                "widgets.example.org".to_string(),
                ApiCounts {
                    synced: 7,
                    conflicts: 1,
                    denied: 2,
                    queued: 4,
                },
            )]),
            leader: true,
            credentials: vec![
                CredentialReport {
                    connection: "acme".into(),
                    expires_at: Some(jiff::Timestamp::from_second(1_798_761_600).unwrap()),
                    renewed: 5,
                    failed: 1,
                },
                CredentialReport {
                    connection: "platform-owned".into(),
                    expires_at: None,
                    renewed: 0,
                    failed: 0,
                },
            ],
        };
        let telemetry = Telemetry::default();
        telemetry.api_error(crate::telemetry::PROVIDER, &kbind_cluster::Error::Timeout("t".into()));
        let text = snapshot.encode(&telemetry);
        for line in [
            "kbind_connections{state=\"ready\"} 2",
            "kbind_connections{state=\"not_ready\"} 1",
            "kbind_bindings{kind=\"ClusterBinding\",state=\"ready\"} 1",
            "kbind_bindings{kind=\"ClusterBinding\",state=\"not_ready\"} 0",
            "kbind_bindings{kind=\"Binding\",state=\"ready\"} 3",
            "kbind_bindings{kind=\"Binding\",state=\"not_ready\"} 2",
            "kbind_engaged_providers 2",
            "kbind_provider_failed_requests{connection=\"acme\"} 3",
            "kbind_syncers 3",
            "kbind_leader 1",
            "kbind_objects_synced{api=\"widgets.example.org\"} 7",
            "kbind_conflicts{api=\"widgets.example.org\"} 1",
            "kbind_permission_denied{api=\"widgets.example.org\"} 2",
            "kbind_queue_depth{api=\"widgets.example.org\"} 4",
            "kbind_api_errors_total{cluster=\"provider\",code=\"0\"} 1",
            "# TYPE kbind_leader gauge",
            "kbind_credential_expiry_timestamp_seconds{connection=\"acme\"} 1798761600",
            "# UNIT kbind_credential_expiry_timestamp_seconds seconds",
            "kbind_credential_renewals_total{connection=\"acme\",result=\"renewed\"} 5",
            "kbind_credential_renewals_total{connection=\"acme\",result=\"failed\"} 1",
            "kbind_credential_renewals_total{connection=\"platform-owned\",result=\"renewed\"} 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(
            !text.contains("kbind_credential_expiry_timestamp_seconds{connection=\"platform-owned\"}"),
            "a credential that is not an issued token has no expiry: {text}"
        );
        assert!(text.ends_with("# EOF\n"));
    }

    #[test]
    fn a_failed_connection_list_leaves_the_metric_out() {
        let text = Snapshot::default().encode(&Telemetry::default());
        assert!(!text.contains("kbind_connections"), "{text}");
        assert!(!text.contains("kbind_bindings"), "{text}");
        assert!(text.lines().any(|l| l == "kbind_leader 0"));
    }
}
