//! contract §8 invariants the world checks after every step: 1, 2, 3, 5, 7, 8 and 9 from the
//! clusters' write, event and request logs; 4 (eventual convergence) is what each story waits
//! for, and 6 (mapper round-trips) is a property test of each mapper.
//!
//! Deletions are judged by who caused them, not by who wrote them: an instance the CRD cleanup
//! controller deletes after the konnector deleted its CRD, or an object the namespace controller
//! deletes after the konnector deleted its namespace, is the konnector's deletion.

use std::collections::{BTreeMap, BTreeSet};

use base64::Engine as _;
use fakeapi::{EventType, FakeCluster, HistoryEvent, RequestRecord, WriteRecord};
use kbind_api::consts::{DELETION_POLICY_ORPHAN, GROUP, annotation, connection_label_value, label};
use serde_json::Value;

/// A broken invariant, with enough context to read the failure.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Violation {
    /// Which invariant (`§8.1`, `§8.2`, `§8.7`).
    pub invariant: &'static str,
    /// What happened.
    pub detail: String,
}

/// The resource of consumer CRDs in write records.
pub const CRDS: &str = "customresourcedefinitions.apiextensions.k8s.io";
/// The user fakeapi's CRD cleanup controller deletes instances of a deleted CRD as.
pub const CRD_CLEANUP_USER: &str = "system:apiextensions-apiserver";
/// The user fakeapi's namespace controller empties a deleted namespace as.
pub const NAMESPACE_CLEANUP_USER: &str = "system:serviceaccount:kube-system:namespace-controller";

/// One cluster's logs, read once per check.
#[derive(Debug, Clone)]
pub struct Logs {
    /// The cluster's name.
    pub name: String,
    /// Every successful write.
    pub writes: Vec<WriteRecord>,
    /// The retained event history.
    pub events: Vec<HistoryEvent>,
}

impl Logs {
    /// The write and event logs of `cluster` as they are now.
    pub fn of(cluster: &FakeCluster) -> Self {
        Self {
            name: cluster.name().to_string(),
            writes: cluster.write_log(),
            events: cluster.event_log(),
        }
    }

    /// The event a write produced (joined by resourceVersion).
    fn event_at(&self, rv: u64) -> Option<&HistoryEvent> {
        let idx = self.events.binary_search_by_key(&rv, |e| e.rv).ok()?;
        self.events.get(idx)
    }
}

/// `resource.group` as write records name a resource.
fn resource_name(gr: &fakeapi::registry::GroupResource) -> String {
    format!("{}.{}", gr.resource, gr.group)
}

fn annotation_of<'a>(obj: &'a Value, key: &str) -> Option<&'a str> {
    obj.pointer("/metadata/annotations")?.get(key)?.as_str()
}

fn is_terminating(obj: &Value) -> bool {
    obj.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
}

fn is_orphan(obj: &Value) -> bool {
    annotation_of(obj, annotation::DELETION_POLICY) == Some(DELETION_POLICY_ORPHAN)
}

fn is_binding(ev: &HistoryEvent) -> bool {
    ev.gr.group == GROUP && (ev.gr.resource == "clusterbindings" || ev.gr.resource == "bindings")
}

fn is_connection(ev: &HistoryEvent) -> bool {
    ev.gr.group == GROUP && ev.gr.resource == "connections"
}

/// A binding or Connection whose deletion has begun (or completed).
fn is_going(ev: &HistoryEvent) -> bool {
    ev.kind == EventType::Deleted || is_terminating(&ev.object)
}

fn apis_of(binding: &Value) -> impl Iterator<Item = &str> {
    binding
        .pointer("/spec/apis")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(|a| a.get("name").and_then(Value::as_str))
}

/// Whether the binding's status says it serves nothing of `api` (a per-API `Synced=False` with
/// a refusal reason, e.g. `BoundThroughAnotherConnection`: another Connection keeps it out).
fn refused_for(binding: &Value, api: &str) -> bool {
    binding
        .pointer("/status/boundAPIs")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|a| a.get("name").and_then(Value::as_str) == Some(api))
        .filter_map(|a| a.get("conditions").and_then(Value::as_array))
        .flatten()
        .any(|c| {
            c.get("type").and_then(Value::as_str) == Some("Synced")
                && c.get("status").and_then(Value::as_str) == Some("False")
                && c.get("reason")
                    .and_then(Value::as_str)
                    .is_some_and(kbind_api::placement::is_refusal)
        })
}

fn connection_of(binding: &Value) -> &str {
    binding
        .pointer("/spec/connectionRef/name")
        .and_then(Value::as_str)
        .unwrap_or_default()
}

/// `Kind ns/name` of an object, for messages.
fn describe(ev: &HistoryEvent) -> String {
    let kind = ev.object.get("kind").and_then(Value::as_str).unwrap_or("object");
    if ev.namespace().is_empty() {
        format!("{kind} {}", ev.name())
    } else {
        format!("{kind} {}/{}", ev.namespace(), ev.name())
    }
}

/// The last event (up to and including `rv`) of every object `keep` selects, by (resource,
/// namespace, name); Deleted ones included, so a gone object's last state can be read.
fn last_events_until(
    events: &[HistoryEvent],
    rv: u64,
    keep: impl Fn(&HistoryEvent) -> bool,
) -> BTreeMap<(String, String, String), &HistoryEvent> {
    let mut last = BTreeMap::new();
    for ev in events.iter().take_while(|e| e.rv <= rv).filter(|e| keep(e)) {
        last.insert(
            (
                ev.gr.resource.clone(),
                ev.namespace().to_string(),
                ev.name().to_string(),
            ),
            ev,
        );
    }
    last
}

/// Whether `connection` (its last event) lets Bindings in `namespace` use it.
fn allows_namespace(connection: Option<&&HistoryEvent>, namespace: &str) -> bool {
    let allowed = connection.and_then(|c| annotation_of(&c.object, annotation::BINDING_NAMESPACES));
    kbind_api::placement::allows_namespace(allowed, namespace)
}

/// The consumer's bindings and Connections as they stood at one resourceVersion.
struct BindingsAt<'a> {
    bindings: BTreeMap<(String, String, String), &'a HistoryEvent>,
    connections: BTreeMap<String, &'a HistoryEvent>,
}

impl<'a> BindingsAt<'a> {
    fn at(consumer: &'a Logs, rv: u64) -> Self {
        Self {
            bindings: last_events_until(&consumer.events, rv, is_binding),
            connections: last_events_until(&consumer.events, rv, is_connection)
                .into_iter()
                .map(|((_, _, name), ev)| (name, ev))
                .collect(),
        }
    }

    /// A live binding through `connection` that serves `api` in consumer namespace `namespace`.
    fn serving(&self, api: &str, connection: &str, namespace: &str) -> Option<&'a HistoryEvent> {
        self.bindings
            .values()
            .filter(|b| !is_going(b))
            .filter(|b| apis_of(&b.object).any(|a| a == api) && connection_of(&b.object) == connection)
            .filter(|b| !refused_for(&b.object, api))
            .find(|b| {
                let scope = (b.gr.resource != "clusterbindings").then(|| b.namespace());
                kbind_api::placement::covers(scope, Some(namespace))
                    && (scope.is_none() || allows_namespace(self.connections.get(connection), namespace))
            })
            .copied()
    }

    /// Whether `binding` or its Connection was being deleted with the Orphan escape hatch.
    fn orphaned(&self, binding: &HistoryEvent) -> bool {
        (is_going(binding) && is_orphan(&binding.object))
            || self
                .connections
                .get(connection_of(&binding.object))
                .is_some_and(|c| is_going(c) && is_orphan(&c.object))
    }
}

/// Every konnector delete of a consumer CRD, with why it was wrong (`None`: it was allowed).
///
/// contract §4 "unbind": the konnector removes a consumer CRD only after a binding of its API
/// was deleted, only when no binding of any kind still uses the API, and never when the deleted
/// binding (or its Connection) carried `deletion-policy: Orphan`. No story whitelist applies.
pub fn crd_delete_verdicts(
    consumer: &Logs,
    konnector_users: &BTreeSet<String>,
) -> Vec<(WriteRecord, Option<Violation>)> {
    consumer
        .writes
        .iter()
        .filter(|w| w.verb == "delete" && w.resource == CRDS && konnector_users.contains(&w.user))
        .map(|w| (w.clone(), crd_delete_verdict(consumer, w)))
        .collect()
}

fn crd_delete_verdict(consumer: &Logs, w: &WriteRecord) -> Option<Violation> {
    let before = w.rv.saturating_sub(1);
    let state = BindingsAt::at(consumer, before);
    let users: Vec<&HistoryEvent> = state
        .bindings
        .values()
        .filter(|b| apis_of(&b.object).any(|a| a == w.name))
        .copied()
        .collect();
    if let Some(user) = users.iter().find(|b| !is_going(b)) {
        return Some(Violation {
            invariant: "§8.1",
            detail: format!(
                "{} deleted CustomResourceDefinition {} on the consumer at rv {} while {} (rv {}) still uses it",
                w.user,
                w.name,
                w.rv,
                describe(user),
                user.rv
            ),
        });
    }
    // Only unbinds since this CRD was (last) created can be the reason to remove it.
    let created = consumer
        .events
        .iter()
        .take_while(|e| e.rv <= before)
        .filter(|e| e.kind == EventType::Added && resource_name(&e.gr) == CRDS && e.name() == w.name)
        .map(|e| e.rv)
        .last()
        .unwrap_or(0);
    let unbound: Vec<&HistoryEvent> = users.into_iter().filter(|b| b.rv > created).collect();
    if unbound.is_empty() {
        return Some(Violation {
            invariant: "§8.1",
            detail: format!(
                "{} deleted CustomResourceDefinition {} on the consumer at rv {}, but no binding of that API was deleted",
                w.user, w.name, w.rv
            ),
        });
    }
    unbound.iter().find(|b| state.orphaned(b)).map(|b| Violation {
        invariant: "§8.8",
        detail: format!(
            "{} deleted CustomResourceDefinition {} on the consumer at rv {} although {} (or its Connection) was deleted with deletion-policy Orphan",
            w.user,
            w.name,
            w.rv,
            describe(b)
        ),
    })
}

/// §8.1: the konnector deleted nothing on the consumer that the story did not delete first. A
/// CRD delete is judged by [`crd_delete_verdicts`]; the instances the CRD cleanup deleted after
/// it are the konnector's deletions too, so a wrong CRD delete is reported with what it took.
pub fn nothing_deleted_on_consumer(
    consumer: &Logs,
    konnector_users: &BTreeSet<String>,
    story_deleted: &BTreeSet<(String, String, String)>,
    crd_verdicts: &[(WriteRecord, Option<Violation>)],
) -> Option<Violation> {
    if let Some((crd, v)) = crd_verdicts.iter().find_map(|(w, v)| Some((w, v.clone()?))) {
        let cascade: Vec<String> = consumer
            .writes
            .iter()
            .filter(|w| w.verb == "delete" && w.user == CRD_CLEANUP_USER && w.resource == crd.name && w.rv > crd.rv)
            .map(|w| format!("{}/{} at rv {}", w.namespace, w.name, w.rv))
            .collect();
        if cascade.is_empty() {
            return Some(v);
        }
        return Some(Violation {
            detail: format!(
                "{}; its cleanup deleted {} consumer object(s): {}",
                v.detail,
                cascade.len(),
                cascade.join(", ")
            ),
            ..v
        });
    }
    consumer
        .writes
        .iter()
        .filter(|w| w.verb == "delete" && konnector_users.contains(&w.user))
        .filter(|w| !w.resource.starts_with("leases.") && !w.resource.starts_with("events.") && w.resource != CRDS)
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
    provider: &Logs,
    since_rv: u64,
    konnector_users: &BTreeSet<String>,
) -> Option<Violation> {
    provider
        .writes
        .iter()
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
        .find(|s| s.len() >= 8 && haystack.contains(s.as_str()))
        .map(|_| Violation {
            invariant: "§8.7",
            detail: format!("a credential appears in {what}"),
        })
}

/// Every credential material in the consumer's Secrets: tokens, passwords, client keys and
/// certificates and CA data of every kubeconfig stored in one, both as written and decoded.
pub fn credential_material(consumer: &Logs) -> Vec<String> {
    let mut found = BTreeSet::new();
    for ev in consumer
        .events
        .iter()
        .filter(|e| e.gr.group.is_empty() && e.gr.resource == "secrets")
    {
        let data = ev.object.get("data").and_then(Value::as_object).into_iter().flatten();
        let decoded = data.filter_map(|(_, v)| {
            let bytes = base64::engine::general_purpose::STANDARD.decode(v.as_str()?).ok()?;
            String::from_utf8(bytes).ok()
        });
        let plain = ev
            .object
            .get("stringData")
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .filter_map(|(_, v)| v.as_str().map(str::to_string));
        for text in decoded.chain(plain) {
            kubeconfig_material(&text, &mut found);
        }
    }
    found.into_iter().collect()
}

const CREDENTIAL_KEYS: [&str; 5] = [
    "token",
    "password",
    "client-key-data",
    "client-certificate-data",
    "certificate-authority-data",
];

/// The credential values of one kubeconfig text (line-based: the values are single scalars).
fn kubeconfig_material(text: &str, found: &mut BTreeSet<String>) {
    for line in text.lines() {
        let Some((key, value)) = line.trim().trim_start_matches("- ").split_once(':') else {
            continue;
        };
        if !CREDENTIAL_KEYS.contains(&key.trim()) {
            continue;
        }
        let value = value.trim().trim_matches(|c: char| c == '"' || c == '\'');
        if value.len() < 8 {
            continue;
        }
        found.insert(value.to_string());
        if key.trim().ends_with("-data")
            && let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(value)
            && let Ok(pem) = String::from_utf8(bytes)
        {
            // The body lines of a PEM block: a log that prints the key shows these.
            for body in pem
                .lines()
                .map(str::trim)
                .filter(|l| l.len() >= 16 && !l.starts_with("-----"))
            {
                found.insert(body.to_string());
            }
        }
    }
}

/// Every version of every Event on the consumer and of the status of every Connection,
/// ClusterBinding and Binding written after consumer rv `after`, as one text to scan: a leak
/// overwritten within a step is still seen.
pub fn consumer_surfaces(consumer: &Logs, after: u64) -> String {
    let mut text = String::new();
    for ev in consumer
        .events
        .iter()
        .filter(|e| e.rv > after && e.kind != EventType::Deleted)
    {
        let relevant = match (ev.gr.group.as_str(), ev.gr.resource.as_str()) {
            ("" | "events.k8s.io", "events") => Some(&*ev.object),
            (GROUP, "connections" | "clusterbindings" | "bindings") => ev.object.get("status"),
            _ => None,
        };
        if let Some(value) = relevant {
            text.push_str(&value.to_string());
            text.push('\n');
        }
    }
    text
}

/// The konnector's writes by resourceVersion (the key that joins write and event logs).
fn konnector_writes<'a>(cluster: &'a Logs, konnector_users: &BTreeSet<String>) -> BTreeMap<u64, &'a WriteRecord> {
    cluster
        .writes
        .iter()
        .filter(|w| konnector_users.contains(&w.user))
        .map(|w| (w.rv, w))
        .collect()
}

/// §8.3 (provider side): no konnector write changed or deleted a provider object that carried
/// another consumer cluster's markers.
pub fn no_write_to_foreign_copies(
    name: &str,
    provider: &Logs,
    konnector_users: &BTreeSet<String>,
    consumer_cluster_uid: &str,
) -> Option<Violation> {
    let writes = konnector_writes(provider, konnector_users);
    if writes.is_empty() {
        return None;
    }
    provider.events.iter().find_map(|ev| {
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

/// §8.3 for related copies of any kind, on `cluster` (the consumer or a provider): no konnector
/// write moved an object's `core.kbind.io/related-binding` marker from one binding to another
/// (a copy of one binding is never taken over by another), and on the consumer no konnector
/// write put the marker on an object that existed without it (`Adopt` never applies there).
pub fn related_copies_keep_their_owner(
    name: &str,
    cluster: &Logs,
    konnector_users: &BTreeSet<String>,
    is_consumer: bool,
) -> Option<Violation> {
    let writes = konnector_writes(cluster, konnector_users);
    if writes.is_empty() {
        return None;
    }
    cluster.events.iter().find_map(|ev| {
        let w = writes.get(&ev.rv)?;
        if w.verb == "delete" {
            return None;
        }
        let old = ev.old.as_deref()?;
        let before = annotation_of(old, annotation::RELATED_BINDING);
        let after = annotation_of(&ev.object, annotation::RELATED_BINDING);
        let taken = match (before, after) {
            (Some(b), Some(a)) => b != a,
            (None, Some(_)) => is_consumer,
            _ => false,
        };
        taken.then(|| Violation {
            invariant: "§8.3",
            detail: format!(
                "{} wrote {} {}/{} on {name} at rv {}: its related-binding marker went from {before:?} to {after:?}",
                w.user, w.resource, w.namespace, w.name, w.rv
            ),
        })
    })
}

/// §8.3 (consumer side): no konnector write changed or deleted a consumer CRD that kbind did not
/// create.
pub fn no_overwrite_of_foreign_crds(consumer: &Logs, konnector_users: &BTreeSet<String>) -> Option<Violation> {
    let writes = konnector_writes(consumer, konnector_users);
    consumer.events.iter().find_map(|ev| {
        let w = writes.get(&ev.rv)?;
        if ev.gr.resource != "customresourcedefinitions" || ev.kind == EventType::Added {
            return None;
        }
        let old = ev.old.as_deref()?;
        let managed = old
            .pointer("/metadata/labels")
            .and_then(|l| l.get(label::MANAGED))
            .and_then(Value::as_str);
        if ev.kind == EventType::Modified && is_connection_claim(old, &ev.object) {
            return None;
        }
        (managed != Some("true")).then(|| Violation {
            invariant: "§8.3",
            detail: format!(
                "{} wrote CustomResourceDefinition {} (verb {}) at rv {}, which kbind did not create",
                w.user, w.name, w.verb, w.rv
            ),
        })
    })
}

/// Whether `new` is `old` with a new `core.kbind.io/connection` claim and nothing else: the one
/// write kbind makes to a CRD it did not create (pullPolicy None, docs/decisions.md), which
/// records which Connection serves the API without touching the schema.
fn is_connection_claim(old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(meta) = v.get_mut("metadata").and_then(Value::as_object_mut) {
            for volatile in ["resourceVersion", "managedFields", "generation"] {
                meta.remove(volatile);
            }
            if let Some(annotations) = meta.get_mut("annotations").and_then(Value::as_object_mut) {
                annotations.remove(annotation::CONNECTION);
                if annotations.is_empty() {
                    meta.remove("annotations");
                }
            }
        }
        v
    };
    let claimed = annotation_of(new, annotation::CONNECTION);
    claimed.is_some() && annotation_of(old, annotation::CONNECTION) != claimed && strip(old) == strip(new)
}

/// The APIs an Orphan unbind released: every API of a binding deleted with `Orphan` (on itself
/// or on its Connection). Their consumer objects may keep provider copies whatever happens next.
fn orphan_released_apis(consumer: &Logs) -> BTreeSet<String> {
    let state = BindingsAt::at(consumer, u64::MAX);
    state
        .bindings
        .values()
        .filter(|b| state.orphaned(b))
        .flat_map(|b| apis_of(&b.object).map(str::to_string).collect::<Vec<_>>())
        .collect()
}

/// §8.5: a consumer object whose deletion completed, for whatever reason (the story, an unbind,
/// a CRD cleanup), has no provider copy of this consumer cluster left, unless Orphan applied
/// (on the object, or on the binding or Connection that released its API).
pub fn deleted_objects_leave_no_copies(
    consumer: &Logs,
    providers: &[Logs],
    consumer_cluster_uid: &str,
) -> Option<Violation> {
    let orphaned = orphan_released_apis(consumer);
    let deleted: BTreeMap<&str, &HistoryEvent> = consumer
        .events
        .iter()
        .filter(|ev| ev.kind == EventType::Deleted && !ev.gr.group.is_empty() && ev.gr.group != GROUP)
        .filter(|ev| !is_orphan(&ev.object) && !orphaned.contains(&resource_name(&ev.gr)))
        .filter_map(|ev| Some((ev.object.pointer("/metadata/uid")?.as_str()?, ev)))
        .collect();
    if deleted.is_empty() {
        return None;
    }
    for provider in providers {
        // The last event of every provider copy of a deleted consumer object.
        let mut last: BTreeMap<(String, String, String), &HistoryEvent> = BTreeMap::new();
        for ev in &provider.events {
            if annotation_of(&ev.object, annotation::CONSUMER_CLUSTER_UID) != Some(consumer_cluster_uid) {
                continue;
            }
            let Some(uid) = annotation_of(&ev.object, annotation::CONSUMER_OBJECT_UID) else {
                continue;
            };
            if deleted.contains_key(uid) {
                last.insert(
                    (resource_name(&ev.gr), ev.namespace().to_string(), ev.name().to_string()),
                    ev,
                );
            }
        }
        if let Some(((resource, ns, obj), copy)) = last.into_iter().find(|(_, ev)| ev.kind != EventType::Deleted) {
            let uid = annotation_of(&copy.object, annotation::CONSUMER_OBJECT_UID).unwrap_or_default();
            let gone = deleted.get(uid).map(|ev| ev.rv).unwrap_or_default();
            return Some(Violation {
                invariant: "§8.5",
                detail: format!(
                    "the consumer object of {resource} {ns}/{obj} was deleted at rv {gone} but its copy is still on {} (rv {})",
                    provider.name, copy.rv
                ),
            });
        }
    }
    None
}

/// The part of the logs one step added: writes after these indexes, consumer events after this rv.
#[derive(Debug, Clone, Default)]
pub struct Window {
    /// The consumer resourceVersion at the previous check.
    pub consumer_from: u64,
    /// The consumer resourceVersion now.
    pub consumer_to: u64,
    /// Per provider: how many of its writes were already checked.
    pub provider_writes_from: BTreeMap<String, usize>,
    /// How many consumer writes were already checked.
    pub consumer_writes_from: usize,
}

/// Deletes on `provider` in the window the konnector caused: its own, and the namespace
/// controller's in a namespace the konnector deleted.
fn konnector_caused_deletes<'a>(
    provider: &'a Logs,
    from: usize,
    users: &BTreeSet<String>,
) -> Vec<(&'a WriteRecord, &'a WriteRecord)> {
    let namespaces_deleted: BTreeMap<&str, &WriteRecord> = provider
        .writes
        .iter()
        .filter(|w| w.verb == "delete" && w.resource == "namespaces." && users.contains(&w.user))
        .map(|w| (w.name.as_str(), w))
        .collect();
    provider
        .writes
        .iter()
        .skip(from)
        .filter(|w| w.verb == "delete")
        .filter_map(|w| {
            if users.contains(&w.user) {
                return Some((w, w));
            }
            let cause = namespaces_deleted.get(w.namespace.as_str())?;
            (w.user == NAMESPACE_CLEANUP_USER && cause.rv < w.rv).then_some((w, *cause))
        })
        .collect()
}

/// §8.8: deleting one binding never deletes a provider copy another binding still serves, and
/// the Orphan escape hatch deletes nothing on either side.
///
/// Checked per step (the `window`): a provider copy of this consumer cluster that the konnector
/// deleted (itself, or through a namespace it deleted) while its consumer object was not being
/// deleted, and while a binding of the copy's API through the CRD's Connection that covers the
/// object's namespace was live (the same binding, not being deleted, at consumer rvs that
/// bracket the delete in the request log) is a violation. A
/// copy is re-created only after a delete, so a UID change of a served copy shows up here as
/// the delete that preceded it. During a step in which a binding or Connection with
/// `deletion-policy: Orphan` was being deleted, any konnector delete other than its own Leases,
/// Events and kbind objects is a violation, on any provider and on the consumer.
pub fn unbind_keeps_served_copies(
    consumer: &Logs,
    providers: &[Logs],
    konnector_users: &BTreeSet<String>,
    provider_users: &BTreeSet<String>,
    consumer_cluster_uid: &str,
    window: &Window,
    requests: &[Request],
) -> Option<Violation> {
    let start = BindingsAt::at(consumer, window.consumer_from);
    let end = BindingsAt::at(consumer, window.consumer_to);
    let orphaning = start
        .bindings
        .values()
        .chain(end.bindings.values())
        .copied()
        .chain(
            consumer
                .events
                .iter()
                .filter(|e| e.rv > window.consumer_from && e.rv <= window.consumer_to)
                .filter(|e| is_binding(e) || is_connection(e)),
        )
        .chain(start.connections.values().chain(end.connections.values()).copied())
        .find(|e| orphan_in_effect(e, window.consumer_from));
    if let Some(orphan) = orphaning {
        let on_consumer = consumer
            .writes
            .iter()
            .skip(window.consumer_writes_from)
            .filter(|w| w.verb == "delete" && konnector_users.contains(&w.user))
            .find(|w| {
                !(w.resource.starts_with("leases.")
                    || w.resource.starts_with("events.")
                    || w.resource.ends_with(&format!(".{GROUP}")))
            })
            .map(|w| (consumer.name.as_str(), w));
        let on_providers = providers.iter().find_map(|p| {
            let from = window.provider_writes_from.get(&p.name).copied().unwrap_or(0);
            konnector_caused_deletes(p, from, provider_users)
                .into_iter()
                .map(|(w, _)| w)
                .find(|w| !w.resource.starts_with("leases."))
                .map(|w| (p.name.as_str(), w))
        });
        if let Some((cluster, w)) = on_consumer.or(on_providers) {
            return Some(Violation {
                invariant: "§8.8",
                detail: format!(
                    "deleted {} {}/{} on {cluster} at rv {} while {} was being deleted with deletion-policy Orphan",
                    w.resource,
                    w.namespace,
                    w.name,
                    w.rv,
                    describe(orphan)
                ),
            });
        }
    }
    for provider in providers {
        let from = window.provider_writes_from.get(&provider.name).copied().unwrap_or(0);
        for (w, cause) in konnector_caused_deletes(provider, from, provider_users) {
            let Some(ev) = provider.event_at(w.rv) else {
                continue;
            };
            let copy = ev.old.as_deref().unwrap_or(&ev.object);
            if annotation_of(copy, annotation::CONSUMER_CLUSTER_UID) != Some(consumer_cluster_uid)
                || annotation_of(copy, annotation::RELATED_BINDING).is_some()
            {
                continue;
            }
            let Some(uid) = annotation_of(copy, annotation::CONSUMER_OBJECT_UID) else {
                continue;
            };
            let Some(mine) = consumer
                .events
                .iter()
                .rev()
                .find(|e| e.object.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid))
            else {
                continue;
            };
            if is_going(mine) {
                continue;
            }
            let api = resource_name(&mine.gr);
            let (lo, hi) = consumer_rvs_around(&provider.name, cause, requests, window);
            // The Connection that served the object before the copy went: its label then (several
            // Connections may serve one API), else the CRD's Connection.
            let labelled = consumer
                .events
                .iter()
                .rev()
                .filter(|e| e.rv <= lo)
                .find(|e| e.object.pointer("/metadata/uid").and_then(Value::as_str) == Some(uid))
                .and_then(|e| labelled_connection(&e.object));
            let crd = last_events_until(&consumer.events, window.consumer_to, |e| {
                resource_name(&e.gr) == CRDS && e.name() == api
            });
            let Some(connection) = labelled.or_else(|| {
                crd.values()
                    .next()
                    .and_then(|c| annotation_of(&c.object, annotation::CONNECTION))
                    .map(str::to_string)
            }) else {
                continue;
            };
            let connection = connection.as_str();
            let (before, after) = (BindingsAt::at(consumer, lo), BindingsAt::at(consumer, hi));
            let served_throughout = before.serving(&api, connection, mine.namespace()).filter(|b| {
                after
                    .serving(&api, connection, mine.namespace())
                    .is_some_and(|a| same_object(a, b))
            });
            if let Some(binding) = served_throughout {
                let how = if cause.rv == w.rv {
                    String::new()
                } else {
                    format!(" (through namespace {} it deleted at rv {})", cause.name, cause.rv)
                };
                return Some(Violation {
                    invariant: "§8.8",
                    detail: format!(
                        "{} deleted {} {}/{} on {} at rv {}{how}, a copy that {} (rv {}) still serves",
                        cause.user,
                        w.resource,
                        w.namespace,
                        w.name,
                        provider.name,
                        w.rv,
                        describe(binding),
                        binding.rv
                    ),
                });
            }
        }
    }
    None
}

fn same_object(a: &HistoryEvent, b: &HistoryEvent) -> bool {
    let uid = |e: &HistoryEvent| e.object.pointer("/metadata/uid").cloned();
    uid(a).is_some() && uid(a) == uid(b)
}

/// Consumer resourceVersions that bracket the moment `delete` was sent to `provider`: the
/// consumer's rv at its last request before the delete's request and at its first one after
/// (the step's bounds where the request log has none), so a binding live at both was live then.
fn consumer_rvs_around(provider: &str, delete: &WriteRecord, requests: &[Request], window: &Window) -> (u64, u64) {
    let sent = requests.iter().rposition(|(c, _, r)| {
        c == provider
            && r.verb == "delete"
            && r.error.is_none()
            && r.user == delete.user
            && r.resource == delete.resource
            && r.namespace == delete.namespace
            && r.name == delete.name
            && r.rv < delete.rv
    });
    let Some(sent) = sent else {
        return (window.consumer_from, window.consumer_to);
    };
    let lo = requests[..sent]
        .iter()
        .rev()
        .find(|(_, is_consumer, _)| *is_consumer)
        .map_or(window.consumer_from, |(_, _, r)| r.rv);
    let hi = requests[sent..]
        .iter()
        .find(|(_, is_consumer, _)| *is_consumer)
        .map_or(window.consumer_to, |(_, _, r)| r.rv);
    (lo.max(window.consumer_from), hi)
}

/// Whether `ev` (the last state of a binding or Connection, or one event of it) shows an Orphan
/// escape hatch at work after consumer rv `since`: terminating with Orphan, or deleted with it
/// after `since`.
fn orphan_in_effect(ev: &HistoryEvent, since: u64) -> bool {
    if !is_orphan(&ev.object) {
        return false;
    }
    match ev.kind {
        EventType::Deleted => ev.rv > since,
        _ => is_terminating(&ev.object),
    }
}

/// One answered request of a world cluster: the cluster's name, whether it is the consumer, and
/// the record.
pub type Request = (String, bool, RequestRecord);

/// The requests the world's clusters answered since the previous check, in process-wide order.
pub fn new_requests(consumer: &FakeCluster, providers: &[&FakeCluster], memory: &mut ReadMemory) -> Vec<Request> {
    let mut new: Vec<Request> = Vec::new();
    for (cluster, is_consumer) in std::iter::once((consumer, true)).chain(providers.iter().map(|p| (*p, false))) {
        let from = memory.checked.get(cluster.name()).copied().unwrap_or(0);
        let log = cluster.request_log_from(from);
        memory.checked.insert(cluster.name().to_string(), from + log.len());
        new.extend(log.into_iter().map(|r| (cluster.name().to_string(), is_consumer, r)));
    }
    new.sort_by_key(|(_, _, r)| r.seq);
    new
}

/// The request-log side of §8.9, carried from one check to the next.
#[derive(Debug, Clone, Default)]
pub struct ReadMemory {
    /// Per cluster: how many requests were already read.
    pub checked: BTreeMap<String, usize>,
    /// Failed reads of the latest instant seen (a pass can straddle two checks).
    pub failed: Vec<(String, RequestRecord)>,
}

fn is_read_of_the_whole(r: &RequestRecord) -> bool {
    matches!(r.verb.as_str(), "list" | "discovery" | "openapi")
}

const BINDING_LISTS: [&str; 2] = ["clusterbindings.core.kbind.io", "bindings.core.kbind.io"];

/// §8.9: every deletion kbind makes rests on a complete, successful read.
///
/// What is checked, from fakeapi's request log: a konnector delete of a provider namespace, of a
/// provider object (a copy or a related copy) or of a consumer CRD is a violation when, earlier
/// in the same pass, a read it rests on was refused or failed (an injected fault, a partition,
/// RBAC, an unserved resource). "The same pass" is the same instant of the paused clock (a
/// controller pass runs without sleeping, so its reads and its delete share an instant) and an
/// earlier place in the process-wide request order. The reads a delete rests on: discovery and
/// OpenAPI reads on that provider; lists on that provider by the same user cluster-wide or in the
/// object's namespace (for a namespace: in that namespace) of the deleted resource (of any
/// resource, for a namespace); and lists of bindings on the consumer by a konnector replica (and,
/// for a copy, of its consumer resource). For a consumer CRD: the replica's discovery and its
/// lists of bindings and CRDs.
///
/// What is not checked: a read that succeeded but was stale (a cache not yet synced) or partial
/// without failing (fakeapi answers discovery as one document, so a per-group-version failure
/// of aggregated discovery only shows on the HTTP stage); and a pass that sleeps between read and
/// delete (injected latency, a retry backoff), since its reads and delete no longer share an
/// instant.
pub fn deletions_rest_on_complete_reads(
    consumer_name: &str,
    requests: &[Request],
    konnector_users: &BTreeSet<String>,
    provider_users: &BTreeSet<String>,
    memory: &mut ReadMemory,
) -> Option<Violation> {
    for (cluster, is_consumer, r) in requests {
        let (cluster, is_consumer) = (cluster.clone(), *is_consumer);
        if let Some(latest) = memory.failed.last().map(|(_, f)| f.at)
            && latest != r.at
        {
            memory.failed.clear();
        }
        if r.error.is_some() {
            if is_read_of_the_whole(r) {
                memory.failed.push((cluster, r.clone()));
            }
            continue;
        }
        if r.verb != "delete" {
            continue;
        }
        let rests_on = |c: &str, f: &RequestRecord| -> bool {
            if is_consumer {
                return konnector_users.contains(&r.user)
                    && r.resource == CRDS
                    && c == cluster
                    && f.user == r.user
                    && (f.verb != "list" || BINDING_LISTS.contains(&f.resource.as_str()) || f.resource == CRDS);
            }
            if !provider_users.contains(&r.user)
                || r.resource.starts_with("leases.")
                || r.resource.starts_with("events.")
            {
                return false;
            }
            if c == consumer_name {
                return konnector_users.contains(&f.user)
                    && f.verb == "list"
                    && (BINDING_LISTS.contains(&f.resource.as_str())
                        || (r.resource != "namespaces." && f.resource == r.resource));
            }
            if c != cluster || f.user != r.user {
                return false;
            }
            if f.verb != "list" {
                return true;
            }
            if r.resource == "namespaces." {
                f.namespace.is_empty() || f.namespace == r.name
            } else {
                f.resource == r.resource && (f.namespace.is_empty() || f.namespace == r.namespace)
            }
        };
        if let Some((c, f)) = memory.failed.iter().find(|(c, f)| rests_on(c, f)) {
            let what = if f.resource.is_empty() {
                f.verb.clone()
            } else if f.namespace.is_empty() {
                format!("{} of {}", f.verb, f.resource)
            } else {
                format!("{} of {} in {}", f.verb, f.resource, f.namespace)
            };
            return Some(Violation {
                invariant: "§8.9",
                detail: format!(
                    "{} deleted {} {}/{} on {cluster} at {} after its {what} on {c} failed in the same pass ({})",
                    r.user,
                    r.resource,
                    r.namespace,
                    r.name,
                    r.at,
                    f.error.as_deref().unwrap_or_default()
                ),
            });
        }
    }
    None
}

/// The Connection a consumer object's label names: the label's value, or the full name in the
/// annotation when the label holds its hash form (a name longer than a label value).
fn labelled_connection(object: &Value) -> Option<String> {
    let label = object.pointer("/metadata/labels")?.get(label::CONNECTION)?.as_str()?;
    let named = object
        .pointer("/metadata/annotations")
        .and_then(|a| a.get(annotation::CONNECTION))
        .and_then(Value::as_str)
        .filter(|name| connection_label_value(name) == label);
    Some(named.unwrap_or(label).to_string())
}
