//! Which Connection serves which namespace of an API: one consumer may get an API
//! from several Connections, each serving its own namespaces (a ClusterBinding covers them all).
//! `kbind status` shows it per API and namespace; `kbind bind` and `redeem` refuse a bundle whose
//! bindings the konnector would refuse as `BoundThroughAnotherConnection` before anything is
//! applied, and say who serves what after a bind that shares an API with another Connection.
//!
//! The rules are the engine's (DESIGN.md §4 "Connections per API"), from
//! [`kbind_api::placement`]: a binding that recorded a claim on an API
//! (`status.boundAPIs[].claimedAt`) keeps its namespaces whatever its conditions say now (never
//! a takeover); one without a claim that is refused for the API claims nothing; one being
//! deleted hands its namespaces over once it has drained.

use std::collections::BTreeSet;

use kbind_api::consts::{condition, reason};
use kbind_api::placement;
use serde::Serialize;
use serde_json::Value;

use crate::error::CliError;
use crate::status::BindingRef;

/// The label on every consumer object kbind syncs: the Connection that serves it.
pub const CONNECTION_LABEL: &str = kbind_api::consts::label::CONNECTION;

/// The value of [`CONNECTION_LABEL`] on the objects `connection` serves (the hash form for a
/// name that is no label value), as the konnector writes it.
pub fn connection_label(connection: &str) -> String {
    kbind_api::consts::connection_label_value(connection)
}
/// The state of a binding whose per-API `Synced` condition holds.
pub const SERVING: &str = "Serving";
/// The namespace column of a ClusterBinding: every namespace.
pub const EVERY_NAMESPACE: &str = "*";

/// One API of one binding: where it serves (or would serve) it, through which Connection.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Served {
    /// `<plural>.<group>`.
    pub api: String,
    /// The Binding's namespace; `None` for a ClusterBinding (every namespace).
    #[serde(skip)]
    pub namespace: Option<String>,
    /// The Connection.
    pub connection: String,
    /// `Binding` or `ClusterBinding`.
    #[serde(skip)]
    pub kind: String,
    /// The binding's name.
    #[serde(skip)]
    pub name: String,
    /// `Serving`, else the reason of its per-API `Synced` condition (`Pending` without one).
    pub state: String,
    /// Whether the binding is being deleted (it drains, then hands its namespaces over).
    pub deleting: bool,
    /// Whether its status records a claim on the API (it keeps its namespaces whatever its
    /// conditions say now).
    #[serde(skip)]
    pub claimed: bool,
}

impl Served {
    /// The namespace as `status` shows it: `*` for a ClusterBinding.
    pub fn namespace_column(&self) -> &str {
        self.namespace.as_deref().unwrap_or(EVERY_NAMESPACE)
    }

    /// `Binding/<ns>/<name>` or `ClusterBinding/<name>`.
    pub fn binding_column(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{}/{ns}/{}", self.kind, self.name),
            None => format!("{}/{}", self.kind, self.name),
        }
    }

    /// `Binding <ns>/<name>` or `ClusterBinding <name>`, as messages name it.
    fn binding_words(&self) -> String {
        match &self.namespace {
            Some(ns) => format!("{} {ns}/{}", self.kind, self.name),
            None => format!("{} {}", self.kind, self.name),
        }
    }

    /// Whether it is refused for its API (claims nothing): no recorded claim, and a refusal
    /// reason ([`placement::claims`]). Every other state (serving, Pending,
    /// SchemaUpdateBlocked, no status yet) claims its namespaces.
    pub fn refused(&self) -> bool {
        let failing = (self.state != SERVING).then_some(self.state.as_str());
        !placement::claims(self.claimed, failing)
    }

    /// Whether the two cover a common namespace.
    fn overlaps(&self, other: &Served) -> bool {
        placement::common(self.namespace.as_deref(), other.namespace.as_deref()).is_some()
    }

    /// The machine form `status -o json|yaml` shows.
    pub fn to_json(&self) -> Value {
        serde_json::json!({
            "api": self.api,
            "namespace": self.namespace_column(),
            "connection": self.connection,
            "binding": self.binding_column(),
            "state": self.state,
            "deleting": self.deleting,
        })
    }
}

/// A binding's state for `api`: `Serving` when its per-API `Synced` condition holds, else that
/// condition's reason; `Pending` while it has none.
pub fn api_state(binding: &Value, api: &str) -> String {
    let synced = binding
        .pointer("/status/boundAPIs")
        .and_then(Value::as_array)
        .and_then(|apis| apis.iter().find(|a| a["name"] == api))
        .and_then(|a| a["conditions"].as_array())
        .and_then(|cs| cs.iter().find(|c| c["type"] == condition::SYNCED));
    match synced {
        Some(c) if c["status"] == kbind_api::consts::status::TRUE => SERVING.into(),
        Some(c) => c["reason"]
            .as_str()
            .filter(|r| !r.is_empty())
            .unwrap_or(reason::PENDING)
            .to_string(),
        None => reason::PENDING.into(),
    }
}

/// Whether a binding's status records a claim on `api`: its `claimedAt`, or (a status written
/// before claims were recorded) a `Synced` condition that holds, as `kbind_api::BoundApiStatus::claim`
/// reads it.
pub fn api_claimed(binding: &Value, api: &str) -> bool {
    let recorded = binding
        .pointer("/status/boundAPIs")
        .and_then(Value::as_array)
        .and_then(|apis| apis.iter().find(|a| a["name"] == api))
        .is_some_and(|a| a["claimedAt"].is_string());
    recorded || api_state(binding, api) == SERVING
}

/// One row per binding and API it names, sorted by API, namespace (`*` first) and Connection.
pub fn served(bindings: &[(String, BindingRef)]) -> Vec<Served> {
    let mut rows: Vec<Served> = bindings
        .iter()
        .flat_map(|(connection, binding)| {
            let deleting = binding.object["metadata"]["deletionTimestamp"].is_string();
            binding.apis().into_iter().map(move |api| Served {
                state: api_state(&binding.object, &api),
                claimed: api_claimed(&binding.object, &api),
                api,
                namespace: binding.namespace.clone(),
                connection: connection.clone(),
                kind: binding.kind.clone(),
                name: binding.name.clone(),
                deleting,
            })
        })
        .collect();
    rows.sort_by(|a, b| {
        (&a.api, &a.namespace, &a.connection, &a.name).cmp(&(&b.api, &b.namespace, &b.connection, &b.name))
    });
    rows
}

/// What a bundle (or the catalog's view of one) would bind: its Connection's name and one
/// entry per binding and API.
#[derive(Debug, Clone, PartialEq)]
pub struct Planned {
    /// The Connection the bundle applies.
    pub connection: String,
    /// Its bindings' APIs, state empty.
    pub apis: Vec<Served>,
}

impl Planned {
    /// From bundle objects (checked or not): the Connection and its Bindings/ClusterBindings.
    /// `None` when the bundle holds no Connection.
    pub fn of_objects<'a>(objects: impl IntoIterator<Item = &'a Value>) -> Option<Self> {
        let objects: Vec<&Value> = objects.into_iter().collect();
        let connection = objects
            .iter()
            .find(|o| o["kind"] == "Connection")
            .and_then(|o| o["metadata"]["name"].as_str())?
            .to_string();
        let mut apis = Vec::new();
        for object in objects {
            let kind = object["kind"].as_str().unwrap_or_default();
            if kind != "Binding" && kind != "ClusterBinding" {
                continue;
            }
            let names = object["spec"]["apis"].as_array().cloned().unwrap_or_default();
            for api in names.iter().filter_map(|a| a["name"].as_str()) {
                apis.push(Served {
                    api: api.to_string(),
                    namespace: object["metadata"]["namespace"].as_str().map(str::to_string),
                    connection: connection.clone(),
                    kind: kind.to_string(),
                    name: object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                    state: String::new(),
                    deleting: false,
                    claimed: false,
                });
            }
        }
        Some(Self { connection, apis })
    }

    /// What binding `export` in `namespaces` would apply, as the gateway builds bundles: a
    /// Connection and bindings named `connection`, a Binding per namespace for the namespaced
    /// APIs and a ClusterBinding for the cluster-scoped ones.
    pub fn of_export(connection: &str, export: &kbind_api::service::CatalogExport, namespaces: &[String]) -> Self {
        let mut apis = Vec::new();
        for api in &export.apis {
            let wheres: Vec<Option<String>> = match api.scope {
                Some(kbind_api::ResourceScope::Cluster) => vec![None],
                Some(kbind_api::ResourceScope::Namespaced) => namespaces.iter().cloned().map(Some).collect(),
                None => Vec::new(),
            };
            for namespace in wheres {
                apis.push(Served {
                    api: api.name.clone(),
                    kind: if namespace.is_some() {
                        "Binding"
                    } else {
                        "ClusterBinding"
                    }
                    .into(),
                    namespace,
                    connection: connection.to_string(),
                    name: connection.to_string(),
                    state: String::new(),
                    deleting: false,
                    claimed: false,
                });
            }
        }
        Self {
            connection: connection.to_string(),
            apis,
        }
    }

    /// Checks the plan against the bindings on the consumer (`existing`): refuses when another
    /// Connection's live, claiming binding of one of its APIs covers a namespace it would bind
    /// (the konnector would refuse it as `BoundThroughAnotherConnection`); else returns who
    /// serves which namespace of each API another Connection serves too (nothing when none is
    /// shared). A binding of the same Connection (a re-bind) is never in the way.
    pub fn check(&self, existing: &[Served]) -> Result<Vec<String>, CliError> {
        let others: Vec<&Served> = existing
            .iter()
            .filter(|e| e.connection != self.connection && !e.refused())
            .collect();
        let mut conflicts = Vec::new();
        for planned in &self.apis {
            for other in others
                .iter()
                .filter(|o| o.api == planned.api && !o.deleting && o.overlaps(planned))
            {
                let why = conflict(planned, other);
                if !conflicts.contains(&why) {
                    conflicts.push(why);
                }
            }
        }
        if !conflicts.is_empty() {
            return Err(CliError::ConsumerRefused(format!(
                "{}; nothing was applied",
                conflicts.join("; ")
            )));
        }
        let apis: BTreeSet<&str> = self.apis.iter().map(|p| p.api.as_str()).collect();
        let mut lines = Vec::new();
        for api in apis {
            let theirs: Vec<&&Served> = others.iter().filter(|o| o.api == api).collect();
            if theirs.is_empty() {
                continue;
            }
            let mine: Vec<&Served> = self.apis.iter().filter(|p| p.api == api).collect();
            let mut entries: Vec<(Option<&str>, String)> = Vec::new();
            for p in &mine {
                let handover: Vec<&&&Served> = theirs.iter().filter(|o| o.overlaps(p)).collect();
                let waits = match handover.as_slice() {
                    [] => String::new(),
                    list => format!(
                        ", once {} has drained",
                        list.iter()
                            .map(|o| format!("Connection {}'s {} (being deleted)", o.connection, o.binding_words()))
                            .collect::<Vec<_>>()
                            .join(" and ")
                    ),
                };
                entries.push((
                    p.namespace.as_deref(),
                    format!(
                        "{} → Connection {} (this bind{waits})",
                        where_words(p.namespace.as_deref()),
                        p.connection
                    ),
                ));
            }
            for o in theirs.iter().filter(|o| !o.deleting) {
                entries.push((
                    o.namespace.as_deref(),
                    format!("{} → Connection {}", where_words(o.namespace.as_deref()), o.connection),
                ));
            }
            entries.sort();
            entries.dedup();
            let text: Vec<String> = entries.into_iter().map(|(_, t)| t).collect();
            lines.push(format!("{api}: {}", text.join("; ")));
        }
        Ok(lines)
    }
}

fn where_words(namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("namespace {ns}"),
        None => "every namespace".into(),
    }
}

/// Why `planned` cannot be bound while `other` (another Connection's) serves its API, and what
/// to do.
fn conflict(planned: &Served, other: &Served) -> String {
    let api = &planned.api;
    let (c, b) = (&other.connection, other.binding_words());
    let unbind = format!("unbind it first (`kbind unbind {c}`)");
    match (&planned.namespace, &other.namespace) {
        (Some(ns), Some(_)) => format!(
            "namespace {ns} of {api} is already served through Connection {c} ({b}); {unbind} or bind another namespace"
        ),
        (Some(ns), None) => format!(
            "{api} is served in every namespace through Connection {c} ({b}), so namespace {ns} cannot be bound through Connection {}; {unbind}",
            planned.connection
        ),
        (None, Some(ns)) => format!(
            "{api} is already served in namespace {ns} through Connection {c} ({b}), and {} would serve every namespace; {unbind}",
            planned.binding_words()
        ),
        (None, None) => format!("{api} is already served in every namespace through Connection {c} ({b}); {unbind}"),
    }
}

/// The lines [`Planned::check`] returned, under a heading; nothing when there are none.
pub fn notice(lines: &[String]) -> String {
    if lines.is_empty() {
        return String::new();
    }
    let mut text = "Served by several Connections, each its own namespaces:\n".to_string();
    for line in lines {
        text.push_str("  ");
        text.push_str(line);
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const API: &str = "widgets.example.org";

    fn binding(kind: &str, ns: Option<&str>, name: &str, connection: &str, synced: Option<(&str, &str)>) -> Value {
        let mut object = json!({"kind": kind, "metadata": {"name": name},
            "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}});
        if let Some(ns) = ns {
            object["metadata"]["namespace"] = json!(ns);
        }
        if let Some((status, reason)) = synced {
            object["status"] = json!({"boundAPIs": [{"name": API, "conditions": [
                {"type": "Conflicts", "status": "False", "reason": "AsExpected"},
                {"type": "Synced", "status": status, "reason": reason}]}]});
        }
        object
    }

    fn existing(objects: &[Value]) -> Vec<Served> {
        let refs: Vec<(String, BindingRef)> = objects
            .iter()
            .map(|o| {
                (
                    o["spec"]["connectionRef"]["name"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string(),
                    BindingRef {
                        kind: o["kind"].as_str().unwrap_or_default().to_string(),
                        namespace: o["metadata"]["namespace"].as_str().map(str::to_string),
                        name: o["metadata"]["name"].as_str().unwrap_or_default().to_string(),
                        object: o.clone(),
                    },
                )
            })
            .collect();
        served(&refs)
    }

    fn bundle(connection: &str, namespaces: &[&str], cluster: bool) -> Planned {
        let mut objects = vec![json!({"kind": "Connection", "metadata": {"name": connection}})];
        if cluster {
            objects.push(binding("ClusterBinding", None, connection, connection, None));
        }
        for ns in namespaces {
            objects.push(binding("Binding", Some(ns), connection, connection, None));
        }
        Planned::of_objects(&objects).expect("a Connection")
    }

    #[test]
    fn the_state_is_serving_or_the_per_api_reason_or_pending() {
        let b = |s| binding("Binding", Some("a"), "x", "c", s);
        assert_eq!(api_state(&b(Some(("True", "AsExpected"))), API), "Serving");
        assert_eq!(
            api_state(&b(Some(("False", "BoundThroughAnotherConnection"))), API),
            "BoundThroughAnotherConnection"
        );
        assert_eq!(api_state(&b(None), API), "Pending");
        assert_eq!(
            api_state(&b(Some(("True", "AsExpected"))), "gadgets.example.org"),
            "Pending"
        );
    }

    #[test]
    fn rows_name_the_namespace_or_star_and_the_binding() {
        let rows = existing(&[
            binding("Binding", Some("team-b"), "us", "acme-us", Some(("True", "AsExpected"))),
            binding("ClusterBinding", None, "all", "acme-eu", None),
        ]);
        assert_eq!(rows[0].namespace_column(), "*");
        assert_eq!(rows[0].binding_column(), "ClusterBinding/all");
        assert_eq!(rows[1].binding_column(), "Binding/team-b/us");
        assert_eq!(
            rows[1].to_json(),
            json!({"api": API, "namespace": "team-b", "connection": "acme-us", "binding": "Binding/team-b/us",
                "state": "Serving", "deleting": false})
        );
    }

    #[test]
    fn another_namespace_is_a_partition_and_is_reported() {
        let there = existing(&[binding(
            "Binding",
            Some("team-b"),
            "us",
            "acme-us",
            Some(("True", "AsExpected")),
        )]);
        let lines = bundle("acme-eu", &["team-a"], false)
            .check(&there)
            .expect("a partition");
        assert_eq!(
            lines,
            [format!(
                "{API}: namespace team-a → Connection acme-eu (this bind); namespace team-b → Connection acme-us"
            )]
        );
        assert!(
            bundle("acme-eu", &["team-a"], false)
                .check(&[])
                .expect("alone")
                .is_empty()
        );
    }

    #[test]
    fn a_namespace_served_by_another_connection_is_refused_with_what_to_do() {
        let there = existing(&[binding("Binding", Some("team-b"), "us", "acme-us", None)]);
        let err = bundle("acme-eu", &["team-a", "team-b"], false)
            .check(&there)
            .expect_err("taken");
        let text = err.to_string();
        assert!(
            text.contains("namespace team-b of widgets.example.org is already served through Connection acme-us (Binding team-b/us)")
                && text.contains("kbind unbind acme-us")
                && text.contains("bind another namespace"),
            "{text}"
        );
        assert_eq!(err.exit_code(), crate::exit::CONSUMER_REFUSED);
        // The same Connection again is a re-bind, not a conflict.
        assert!(bundle("acme-us", &["team-b"], false).check(&there).is_ok());
    }

    #[test]
    fn a_cluster_binding_conflicts_with_any_binding_of_another_connection_and_back() {
        let namespaced = existing(&[binding("Binding", Some("team-b"), "us", "acme-us", None)]);
        let err = bundle("acme-eu", &[], true)
            .check(&namespaced)
            .expect_err("cluster over ns");
        assert!(
            err.to_string()
                .contains("ClusterBinding acme-eu would serve every namespace"),
            "{err}"
        );
        let cluster = existing(&[binding("ClusterBinding", None, "us", "acme-us", None)]);
        let err = bundle("acme-eu", &["team-a"], false)
            .check(&cluster)
            .expect_err("ns under cluster");
        assert!(
            err.to_string()
                .contains("served in every namespace through Connection acme-us (ClusterBinding us)"),
            "{err}"
        );
    }

    #[test]
    fn a_recorded_claim_keeps_its_namespace_whatever_the_conditions_say_now() {
        // It served, then its provider stopped exporting the API: a refusal reason, but the
        // claim stands (the konnector keeps the namespace for it).
        let mut claimed = binding(
            "Binding",
            Some("team-b"),
            "us",
            "acme-us",
            Some(("False", reason::API_NOT_EXPORTED)),
        );
        claimed["status"]["boundAPIs"][0]["claimedAt"] = json!("2026-01-01T00:00:00Z");
        let err = bundle("acme-eu", &["team-b"], false)
            .check(&existing(&[claimed]))
            .expect_err("a claimed namespace is taken");
        assert!(
            err.to_string().contains("already served through Connection acme-us"),
            "{err}"
        );
    }

    #[test]
    fn refused_bindings_claim_nothing_and_deleting_ones_hand_over() {
        let refused = existing(&[binding(
            "Binding",
            Some("team-b"),
            "us",
            "acme-us",
            Some(("False", reason::INCOMPATIBLE_SCHEMA)),
        )]);
        assert!(
            bundle("acme-eu", &["team-b"], false)
                .check(&refused)
                .expect("refused is not in the way")
                .is_empty()
        );
        let mut deleting = binding("Binding", Some("team-b"), "us", "acme-us", Some(("True", "AsExpected")));
        deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
        let lines = bundle("acme-eu", &["team-b"], false)
            .check(&existing(&[deleting]))
            .expect("a hand-over");
        assert!(
            lines[0].contains("namespace team-b → Connection acme-eu (this bind, once Connection acme-us's Binding team-b/us (being deleted) has drained)"),
            "{lines:?}"
        );
    }
}
