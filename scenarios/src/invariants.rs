//! DESIGN.md §8 invariants the world checks after every step (those the engine parts built so
//! far can break: 1, 2 and 7).

use std::collections::BTreeSet;

use fakeapi::FakeCluster;
use serde_json::Value;

/// A broken invariant, with enough context to read the failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant (`§8.1`, `§8.2`, `§8.7`).
    pub invariant: &'static str,
    /// What happened.
    pub detail: String,
}

/// §8.1: the konnector deleted nothing on the consumer that the story did not delete first.
pub fn nothing_deleted_on_consumer(
    consumer: &FakeCluster,
    konnector_users: &BTreeSet<String>,
    story_deleted: &BTreeSet<(String, String, String)>,
) -> Option<Violation> {
    consumer
        .write_log()
        .into_iter()
        .filter(|w| w.verb == "delete" && konnector_users.contains(&w.user))
        .filter(|w| !w.resource.starts_with("leases.") && !w.resource.starts_with("events."))
        .find(|w| !story_deleted.contains(&(w.resource.clone(), w.namespace.clone(), w.name.clone())))
        .map(|w| Violation {
            invariant: "§8.1",
            detail: format!(
                "{} deleted {} {}/{} on the consumer at rv {}",
                w.user, w.resource, w.namespace, w.name, w.rv
            ),
        })
}

/// §8.2: no write by the konnector reached `provider` after its identity changed at `since_rv`.
pub fn no_write_after_identity_change(
    name: &str,
    provider: &FakeCluster,
    since_rv: u64,
    konnector_users: &BTreeSet<String>,
) -> Option<Violation> {
    provider
        .write_log()
        .into_iter()
        .find(|w| w.rv > since_rv && konnector_users.contains(&w.user))
        .map(|w| Violation {
            invariant: "§8.2",
            detail: format!(
                "{} wrote {} {}/{} (verb {}) on {name} at rv {} after its identity changed at rv {since_rv}",
                w.user, w.resource, w.namespace, w.name, w.verb, w.rv
            ),
        })
}

/// §8.7: no credential appears in `haystack` (events, conditions, logs).
pub fn no_credentials_in(what: &str, haystack: &str, secrets: &[String]) -> Option<Violation> {
    secrets
        .iter()
        .find(|s| !s.is_empty() && haystack.contains(s.as_str()))
        .map(|_| Violation {
            invariant: "§8.7",
            detail: format!("a credential appears in {what}"),
        })
}

/// Every Event on the consumer and every Connection status, as one text to scan.
pub async fn consumer_surfaces(consumer: &FakeCluster) -> String {
    use kbind_cluster::{ApiResource, ClusterClient};
    let admin = consumer.admin_client();
    let resources = [
        ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
        ApiResource::erase::<k8s_openapi::api::events::v1::Event>(&()),
        ApiResource::erase::<kbind_api::Connection>(&()),
    ];
    let mut text = String::new();
    for res in &resources {
        if let Ok(list) = admin.list(res, None, &Default::default()).await {
            for item in list.items {
                let value = serde_json::to_value(&item).unwrap_or(Value::Null);
                let relevant = if res.kind == "Connection" {
                    value.get("status").cloned().unwrap_or(Value::Null)
                } else {
                    value
                };
                text.push_str(&relevant.to_string());
                text.push('\n');
            }
        }
    }
    text
}
