//! DESIGN.md §8 invariants the world checks after every step: 1, 2, 3, 5 and 7 from the
//! clusters' write and event logs; 4 (eventual convergence) is what each story waits for, and 6
//! (mapper round-trips) is a property test of each mapper.

use std::collections::{BTreeMap, BTreeSet};

use fakeapi::{EventType, FakeCluster, HistoryEvent, WriteRecord};
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, label};
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

fn annotation_of<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

/// The konnector's writes by resourceVersion (the key that joins write and event logs).
fn konnector_writes(cluster: &FakeCluster, konnector_users: &BTreeSet<String>) -> BTreeMap<u64, WriteRecord> {
    cluster
        .write_log()
        .into_iter()
        .filter(|w| konnector_users.contains(&w.user))
        .map(|w| (w.rv, w))
        .collect()
}

/// §8.3 (provider side): no konnector write changed or deleted a provider object that carried
/// another consumer cluster's markers.
pub fn no_write_to_foreign_copies(
    name: &str,
    provider: &FakeCluster,
    konnector_users: &BTreeSet<String>,
    consumer_cluster_uid: &str,
) -> Option<Violation> {
    let writes = konnector_writes(provider, konnector_users);
    if writes.is_empty() {
        return None;
    }
    provider.event_log().into_iter().find_map(|ev| {
        let w = writes.get(&ev.rv)?;
        let owner = annotation_of(ev.old.as_deref()?, annotation::CONSUMER_CLUSTER_UID)?;
        (owner != consumer_cluster_uid).then(|| Violation {
            invariant: "§8.3",
            detail: format!(
                "{} wrote {} {}/{} (verb {}) on {name} at rv {}, which carries consumer cluster {owner}'s markers",
                w.user, w.resource, w.namespace, w.name, w.verb, w.rv
            ),
        })
    })
}

/// §8.3 (consumer side): no konnector write changed or deleted a consumer CRD that kbind did not
/// create.
pub fn no_overwrite_of_foreign_crds(consumer: &FakeCluster, konnector_users: &BTreeSet<String>) -> Option<Violation> {
    let writes = konnector_writes(consumer, konnector_users);
    consumer.event_log().into_iter().find_map(|ev| {
        let w = writes.get(&ev.rv)?;
        if ev.gr.resource != "customresourcedefinitions" || ev.kind == EventType::Added {
            return None;
        }
        let old = ev.old.as_deref()?;
        let managed = old
            .pointer("/metadata/labels")
            .and_then(|l| l.get(label::MANAGED))
            .and_then(Value::as_str);
        (managed != Some("true")).then(|| Violation {
            invariant: "§8.3",
            detail: format!(
                "{} wrote CustomResourceDefinition {} (verb {}) at rv {}, which kbind did not create",
                w.user, w.name, w.verb, w.rv
            ),
        })
    })
}

/// §8.5: every consumer object the story deleted (without Orphan) whose deletion completed has
/// no provider copy left.
pub fn deleted_objects_leave_no_copies(
    consumer: &FakeCluster,
    providers: &[(&str, &FakeCluster)],
    story_deleted: &BTreeSet<(String, String, String)>,
) -> Option<Violation> {
    let deleted: BTreeMap<String, HistoryEvent> = consumer
        .event_log()
        .into_iter()
        .filter(|ev| ev.kind == EventType::Deleted && !ev.gr.group.is_empty())
        .filter(|ev| {
            let resource = format!("{}.{}", ev.gr.resource, ev.gr.group);
            story_deleted.contains(&(resource, ev.namespace().to_string(), ev.name().to_string()))
        })
        .filter(|ev| annotation_of(&ev.object, annotation::DELETION_POLICY) != Some(DELETION_POLICY_ORPHAN))
        .filter_map(|ev| Some((ev.object.pointer("/metadata/uid")?.as_str()?.to_string(), ev)))
        .collect();
    if deleted.is_empty() {
        return None;
    }
    for (name, provider) in providers {
        // The last event of every provider object that names a deleted consumer object.
        let mut last: BTreeMap<(String, String, String), HistoryEvent> = BTreeMap::new();
        for ev in provider.event_log() {
            let Some(uid) = annotation_of(&ev.object, annotation::CONSUMER_OBJECT_UID) else {
                continue;
            };
            if deleted.contains_key(uid) {
                last.insert(
                    (
                        ev.gr.resource.clone(),
                        ev.namespace().to_string(),
                        ev.name().to_string(),
                    ),
                    ev,
                );
            }
        }
        if let Some(((resource, ns, obj), _)) = last.into_iter().find(|(_, ev)| ev.kind != EventType::Deleted) {
            return Some(Violation {
                invariant: "§8.5",
                detail: format!(
                    "the consumer object of {resource} {ns}/{obj} was deleted but its copy is still on {name}"
                ),
            });
        }
    }
    None
}
