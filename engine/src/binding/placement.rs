//! Which Connection serves each namespace of an API (contract §4 "Connections per API"):
//! several Connections may serve one consumer API when their Bindings partition it by
//! namespace; a ClusterBinding claims every namespace. Of two Connections whose bindings would
//! serve one namespace, the one whose binding holds a claim keeps it. A claim is data: the
//! binding's `status.boundAPIs[].claimedAt`, written before its syncer starts and kept while
//! the binding names the API, whatever its Connection's state, a konnector restart or a status
//! rewrite. A binding without a claim that another Connection's claim keeps out is no rival.
//! Among the others only what no blink changes decides: exported by its Connection, servable
//! by its own schema, then the oldest. So a serving binding never
//! loses its namespace to an older one that becomes eligible later, or whose side blinked:
//! never a takeover. A namespace is handed over only when its binding is deleted (or stops
//! naming the API), and the next Connection waits until that binding has drained its provider
//! copies as an unbind does.
//!
//! The pure rule (what a binding covers, whether it claims, how two rank) is
//! [`kbind_api::placement`], which the CLI and the scenario invariants read too; this module
//! applies it to the binding caches.

use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_api::placement::{self, Standing};

use super::reconcile::Binder;
use super::view::BindingView;

/// Where one binding's API stands among the Connections that bind it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Placement {
    /// No other Connection claims what this binding covers.
    Ours,
    /// Another Connection's binding serves (part of) what this binding covers.
    Elsewhere {
        /// The other Connection.
        connection: String,
        /// Its binding, for messages.
        binding: String,
        /// The namespace they share (`None`: the whole API).
        namespace: Option<String>,
    },
    /// Another Connection's binding of this namespace is being deleted and drains its copies.
    HandingOver {
        /// The other Connection.
        connection: String,
        /// Its binding, for messages.
        binding: String,
        /// The namespace handed over (`None`: the whole API).
        namespace: Option<String>,
    },
}

/// When `b` claimed `api` for its Connection, as its status records it.
pub(crate) fn claim(b: &BindingView, api: &str) -> Option<jiff::Timestamp> {
    if crate::planted::planted(crate::planted::Plant::IgnoreRecordedClaims) {
        return None;
    }
    b.status.as_ref().and_then(|s| s.claim(api)).map(|t| t.0)
}

/// Whether `b`'s status says it cannot serve `api` for a reason of its own
/// ([`placement::is_own_refusal`]).
fn unservable(b: &BindingView, api: &str) -> bool {
    b.status
        .as_ref()
        .and_then(|s| s.bound_api(api))
        .and_then(|a| conditions::find(&a.conditions, condition::SYNCED))
        .is_some_and(|c| c.status == "False" && placement::is_own_refusal(&c.reason))
}

/// Whether `b`'s Connection exports `api` (its `status.exportedAPIs`, which keep their last
/// value while the provider is unreachable: a fact a blink does not change).
fn exported(shared: &Binder, b: &BindingView, api: &str) -> bool {
    shared
        .connection(&b.spec.connection_ref.name)
        .and_then(|c| c.status.clone())
        .is_some_and(|s| s.exported_apis.iter().any(|e| e.name == api))
}

/// Whether `b`, holding no claim on `api`, is kept out of it by another Connection's claim on
/// a namespace it covers: then it can win nothing (a ClusterBinding is all or nothing), and it
/// is no rival anywhere.
fn blocked(all: &[BindingView], b: &BindingView, api: &str) -> bool {
    claim(b, api).is_none()
        && all
            .iter()
            .filter(|o| o.spec.connection_ref.name != b.spec.connection_ref.name && !o.is_deleting())
            .filter(|o| o.spec.binds(api) && claim(o, api).is_some())
            .any(|o| placement::common(b.namespace().as_deref(), o.namespace().as_deref()).is_some())
}

/// Where `b` stands in the contest for a part of `api` ([`Standing`]: lower wins).
fn rank(shared: &Binder, b: &BindingView, api: &str) -> Standing {
    Standing {
        claimed_at: claim(b, api),
        exported: exported(shared, b, api),
        servable: !unservable(b, api),
        created: b.meta.creation_timestamp.as_ref().map(|t| t.0),
        namespace: b.namespace(),
        name: b.name(),
        connection: b.spec.connection_ref.name.clone(),
    }
}

/// The live (not deleting) bindings of `connection` that name `api` and that the Connection
/// allows to serve: the only ones that can serve it.
pub(crate) fn live<'a>(
    shared: &'a Binder,
    all: &'a [BindingView],
    connection: &'a str,
    api: &'a str,
) -> impl Iterator<Item = &'a BindingView> + 'a {
    all.iter()
        .filter(move |b| !b.is_deleting() && b.spec.connection_ref.name == connection)
        .filter(move |b| b.spec.apis.iter().any(|a| a.name == api))
        .filter(move |b| shared.may_serve(b))
}

/// The best claim of `connection` on `namespace` of `api`, and the binding that holds it: of
/// its live bindings that may serve, and of those that hold a recorded claim even when they
/// may not serve now (the Connection stopped allowing the namespace): a claim goes only with
/// the binding or its API.
fn best_claim(
    shared: &Binder,
    all: &[BindingView],
    connection: &str,
    namespace: Option<&str>,
    api: &str,
) -> Option<(Standing, String)> {
    all.iter()
        .filter(|b| !b.is_deleting() && b.spec.connection_ref.name == connection)
        .filter(|b| b.spec.apis.iter().any(|a| a.name == api))
        .filter(|b| claim(b, api).is_some() || (shared.may_serve(b) && !blocked(all, b, api)))
        .filter(|b| placement::covers(b.namespace().as_deref(), namespace))
        .map(|b| (rank(shared, b, api), b.display()))
        .min()
}

/// Where `view`'s `api` stands: served here, by another Connection, or being handed over.
pub(crate) fn placement(shared: &Binder, all: &[BindingView], view: &BindingView, api: &str) -> Placement {
    if crate::planted::planted(crate::planted::Plant::SecondConnectionInServedNamespace) {
        return Placement::Ours;
    }
    let mine = &view.spec.connection_ref.name;
    let mut handing_over = None;
    for other in all.iter().filter(|b| &b.spec.connection_ref.name != mine) {
        // A binding that stopped naming the API but still claims it drains its objects first,
        // as a deleted one does.
        let leaving = !other.spec.binds(api) && claim(other, api).is_some();
        if !other.spec.binds(api) && !leaving {
            continue;
        }
        // The part both cover: the Binding's namespace, or the whole API for two ClusterBindings.
        let (view_ns, other_ns) = (view.namespace(), other.namespace());
        let Some(namespace) = placement::common(view_ns.as_deref(), other_ns.as_deref()).map(|p| p.map(str::to_string))
        else {
            continue;
        };
        if other.is_deleting() || leaving {
            // Only a binding that claimed the namespace has copies there to drain first.
            if claim(other, api).is_some() && handing_over.is_none() {
                handing_over = Some(Placement::HandingOver {
                    connection: other.spec.connection_ref.name.clone(),
                    binding: other.display(),
                    namespace,
                });
            }
            continue;
        }
        let theirs = best_claim(shared, all, &other.spec.connection_ref.name, namespace.as_deref(), api);
        let ours = best_claim(shared, all, mine, namespace.as_deref(), api);
        if let Some((their_rank, binding)) = theirs
            && ours.is_none_or(|(our_rank, _)| their_rank < our_rank)
        {
            return Placement::Elsewhere {
                connection: other.spec.connection_ref.name.clone(),
                binding,
                namespace,
            };
        }
    }
    handing_over.unwrap_or(Placement::Ours)
}

/// `"namespace team-a of widgets.example.org"` or `"widgets.example.org"`.
pub(crate) fn region(api: &str, namespace: Option<&str>) -> String {
    match namespace {
        Some(ns) => format!("namespace {ns} of {api}"),
        None => api.to_string(),
    }
}
