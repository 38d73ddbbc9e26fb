//! The issuer controller's metrics: reconciles that the provider or the issuer's own permissions
//! kept from completing. A tenant's refusal (a namespace taken, a quota reached) is the tenant's
//! answer, written on its Grant, and is not counted: this counter is for the operator.

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

use super::IssueError;

type Labels = Vec<(&'static str, String)>;

/// The `controller` label of the Grant controller.
pub const GRANT: &str = "grant";
/// The `controller` label of the Export controller.
pub const EXPORT: &str = "export";

/// The issuer's series; clones share them, so one goes to the controller and one to the scrape.
#[derive(Clone, Debug)]
pub struct Metrics {
    errors: Family<Labels, Counter>,
}

impl Default for Metrics {
    fn default() -> Self {
        let errors = Family::<Labels, Counter>::default();
        // Every series exists from the start at 0: a counter that first appears at 1 shows no
        // increase() in Prometheus, so the first error would go unseen by an alert.
        for controller in [GRANT, EXPORT] {
            let _ = errors.get_or_create(&labels(controller));
        }
        Self { errors }
    }
}

fn labels(controller: &'static str) -> Labels {
    vec![("controller", controller.to_string())]
}

impl Metrics {
    /// Adds the series to a scrape's registry.
    pub fn register(&self, registry: &mut Registry) {
        registry.register(
            "kbind_issuer_reconcile_errors",
            "Grant and Export reconciles that failed (provider errors, the issuer's own permissions, an unsupported provider) and are retried; tenant refusals are not counted",
            self.errors.clone(),
        );
    }

    /// Counts one failed reconcile of `controller` ([`GRANT`] or [`EXPORT`]).
    pub(crate) fn reconcile_failed(&self, controller: &'static str) {
        self.errors.get_or_create(&labels(controller)).inc();
    }

    /// Counts a Grant that was not provisioned, when the cause is the operator's to fix.
    pub(crate) fn not_provisioned(&self, error: &IssueError) {
        if is_operator_error(error) {
            self.reconcile_failed(GRANT);
        }
    }
}

/// Whether an issuer error is the provider's or the issuer's (an operator's to look at), not a
/// tenant's refusal.
fn is_operator_error(error: &IssueError) -> bool {
    matches!(error, IssueError::Cluster(_) | IssueError::UnsupportedProvider(_))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn exposition(metrics: &Metrics) -> String {
        let mut registry = Registry::default();
        metrics.register(&mut registry);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
        text
    }

    fn value(text: &str, controller: &str) -> Option<u64> {
        let series = format!("kbind_issuer_reconcile_errors_total{{controller=\"{controller}\"}} ");
        text.lines().find_map(|l| l.strip_prefix(&series)?.parse().ok())
    }

    #[test]
    fn both_controllers_start_at_zero_and_only_operator_errors_count() {
        let metrics = Metrics::default();
        let text = exposition(&metrics);
        assert_eq!(value(&text, GRANT), Some(0), "{text}");
        assert_eq!(value(&text, EXPORT), Some(0), "{text}");

        metrics.not_provisioned(&IssueError::NamespaceClaimed {
            namespace: "team-a".into(),
        });
        metrics.not_provisioned(&IssueError::TooManyNamespaces { max: 1, asked: 2 });
        let text = exposition(&metrics);
        assert_eq!(value(&text, GRANT), Some(0), "tenant refusals are not errors:\n{text}");

        metrics.not_provisioned(&IssueError::Cluster(kbind_cluster::Error::Forbidden {
            verb: "create".into(),
            resource: "roles".into(),
            message: String::new(),
        }));
        metrics.not_provisioned(&IssueError::UnsupportedProvider("kcp".into()));
        metrics.reconcile_failed(EXPORT);
        let text = exposition(&metrics);
        assert_eq!(value(&text, GRANT), Some(2), "{text}");
        assert_eq!(value(&text, EXPORT), Some(1), "{text}");
    }
}
