//! The reaper's metrics: what it watches and what it deleted (or would have). Labels carry
//! kinds and modes only, never a consumer UID (unbounded cardinality) or anything secret.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

type Labels = Vec<(&'static str, String)>;

/// The reaper's series; clones share them, so one goes to the reaper and one to the scrape.
#[derive(Clone, Debug, Default)]
pub struct Metrics {
    leases: Gauge,
    consumers: Family<Labels, Counter>,
    deletions: Family<Labels, Counter>,
    failures: Counter,
}

impl Metrics {
    /// The series of a reaper in one mode (`report_only` or not), each at 0 from the start: a
    /// counter that first appears at 1 shows no increase() in Prometheus, so an alert would miss
    /// the first consumer reaped.
    pub fn for_mode(report_only: bool) -> Self {
        let metrics = Self::default();
        let _ = metrics.consumers.get_or_create(&vec![("mode", mode(report_only))]);
        for kind in KINDS {
            let labels = vec![("kind", kind.to_string()), ("mode", mode(report_only))];
            let _ = metrics.deletions.get_or_create(&labels);
        }
        metrics
    }

    /// Adds the series to a scrape's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kbind_reaper_leases",
            "Heartbeat Leases the reaper observes",
            self.leases.clone(),
        );
        registry.register(
            "kbind_reaper_consumers_reaped",
            "Consumers whose Lease went unrenewed for the TTL, by mode (delete or report)",
            self.consumers.clone(),
        );
        registry.register(
            "kbind_reaper_deletions",
            "Objects deleted (mode=delete) or listed as to delete (mode=report), by kind",
            self.deletions.clone(),
        );
        registry.register(
            "kbind_reaper_sweep_failures",
            "Reaps that failed and will be retried",
            self.failures.clone(),
        );
    }

    pub(crate) fn set_leases(&self, n: usize) {
        self.leases.set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    pub(crate) fn consumer_reaped(&self, report_only: bool) {
        self.consumers.get_or_create(&vec![("mode", mode(report_only))]).inc();
    }

    pub(crate) fn deleted(&self, kind: &'static str, report_only: bool) {
        let labels = vec![("kind", kind.to_string()), ("mode", mode(report_only))];
        self.deletions.get_or_create(&labels).inc();
    }

    pub(crate) fn sweep_failed(&self) {
        self.failures.inc();
    }
}

/// The `kind` label values: what a reap deletes.
const KINDS: [&str; 3] = ["grant", "object", "namespace"];

fn mode(report_only: bool) -> String {
    if report_only { "report" } else { "delete" }.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reapers_series_exist_at_zero_before_its_first_reap() {
        let metrics = Metrics::for_mode(false);
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        for line in [
            "kbind_reaper_consumers_reaped_total{mode=\"delete\"} 0",
            "kbind_reaper_deletions_total{kind=\"grant\",mode=\"delete\"} 0",
            "kbind_reaper_deletions_total{kind=\"object\",mode=\"delete\"} 0",
            "kbind_reaper_deletions_total{kind=\"namespace\",mode=\"delete\"} 0",
            "kbind_reaper_sweep_failures_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "missing {line:?} in\n{text}");
        }
        assert!(!text.contains("mode=\"report\""), "{text}");
    }
}
