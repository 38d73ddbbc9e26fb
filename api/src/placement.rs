//! The placement rule (contract §4 "Connections per API"), once for the konnector, the CLI
//! and the scenario invariants: what a binding covers of an API, whether it claims what it
//! covers, which Connection's binding wins a namespace, and which binding of one Connection
//! serves an object two of them cover.
//!
//! A binding is named here by its namespace: `Some(ns)` for a Binding, `None` for a
//! ClusterBinding (every namespace). A part of an API is named the same way: `Some(ns)` for one
//! namespace, `None` for the whole API.

use std::cmp::Ordering;

use k8s_openapi::jiff::Timestamp;

use crate::consts::{BINDING_NAMESPACES_ALL, reason};

/// Whether a binding of `binding` covers `part` of an API: a ClusterBinding covers every part,
/// a Binding only its own namespace (never the whole API).
pub fn covers(binding: Option<&str>, part: Option<&str>) -> bool {
    binding.is_none() || (part.is_some() && binding == part)
}

/// The part of an API two bindings both cover: the Binding's namespace when one is a Binding,
/// the whole API for two ClusterBindings; `None` when they cover nothing in common (Bindings of
/// two namespaces).
pub fn common<'a>(a: Option<&'a str>, b: Option<&'a str>) -> Option<Option<&'a str>> {
    let part = a.or(b);
    (covers(a, part) && covers(b, part)).then_some(part)
}

/// Whether a Connection whose binding-namespaces annotation is `allowed` lets a Binding of
/// `namespace` use it: the comma-separated list names it, or `*`. No annotation allows none.
pub fn allows_namespace(allowed: Option<&str>, namespace: &str) -> bool {
    allowed.is_some_and(|list| {
        list.split(',')
            .map(str::trim)
            .any(|n| n == BINDING_NAMESPACES_ALL || n == namespace)
    })
}

/// Whether a per-API `Synced` reason says the binding serves nothing of that API
/// ([`reason::API_REFUSALS`]).
pub fn is_refusal(reason: &str) -> bool {
    reason::API_REFUSALS.contains(&reason)
}

/// Whether a binding claims what it covers of an API: a recorded claim (`claimed`) keeps it
/// whatever the binding's conditions say now (never a takeover); without one, it claims unless
/// its per-API `Synced` condition fails with a refusal (`failing`: that condition's reason
/// while it does not hold).
pub fn claims(claimed: bool, failing: Option<&str>) -> bool {
    claimed || !failing.is_some_and(is_refusal)
}

/// Whether a per-API `Synced` reason says the binding cannot serve the API for a reason of its
/// own that no rival and no blink changes: its schema, a CRD kbind did not create, a
/// cluster-scoped API in a Binding. Reasons that only say who else serves
/// (`BoundThroughAnotherConnection`) or what is missing now (`Pending`) are not among them: a
/// status any blink rewrites decides nothing.
pub fn is_own_refusal(reason: &str) -> bool {
    [
        reason::INCOMPATIBLE_SCHEMA,
        reason::CRD_NOT_MANAGED,
        reason::SCHEMA_TOO_COMPLEX,
        reason::CLUSTER_SCOPED_API_IN_BINDING,
    ]
    .contains(&reason)
}

/// One binding's standing in the contest for a part of an API among Connections; the lesser
/// wins. A recorded claim first (the earliest, should two ever meet); then, without one, what no
/// blink changes: exported by its Connection before not, servable before not, then the oldest.
/// The namespace, name and Connection come last so two bindings created in the same second
/// still rank apart.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Standing {
    /// When the binding claimed the API (`status.boundAPIs[].claimedAt`).
    pub claimed_at: Option<Timestamp>,
    /// Whether its Connection exports the API (`status.exportedAPIs`, kept while unreachable).
    pub exported: bool,
    /// Whether nothing of its own keeps it from serving ([`is_own_refusal`]).
    pub servable: bool,
    /// The binding's `creationTimestamp`.
    pub created: Option<Timestamp>,
    /// The Binding's namespace (`None`: a ClusterBinding).
    pub namespace: Option<String>,
    /// The binding's name.
    pub name: String,
    /// Its Connection's name.
    pub connection: String,
}

impl Standing {
    #[allow(clippy::type_complexity)]
    fn key(
        &self,
    ) -> (
        bool,
        Option<Timestamp>,
        bool,
        bool,
        Option<Timestamp>,
        Option<&str>,
        &str,
        &str,
    ) {
        (
            self.claimed_at.is_none(),
            self.claimed_at,
            !self.exported,
            !self.servable,
            self.created,
            self.namespace.as_deref(),
            &self.name,
            &self.connection,
        )
    }
}

impl Ord for Standing {
    fn cmp(&self, other: &Self) -> Ordering {
        self.key().cmp(&other.key())
    }
}

impl PartialOrd for Standing {
    fn partial_cmp(&self, other: &Self) -> Option<Ordering> {
        Some(self.cmp(other))
    }
}

/// Which of one Connection's bindings serves the objects two of them cover; the lesser wins: a
/// ClusterBinding before Bindings, then the oldest, then the first by namespace and name, so
/// exactly one syncer runs per object.
pub fn precedence(
    namespace: Option<&str>,
    created: Option<Timestamp>,
    name: &str,
) -> (bool, Option<Timestamp>, Option<String>, String) {
    (
        namespace.is_some(),
        created,
        namespace.map(str::to_string),
        name.to_string(),
    )
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    /// A binding's namespace: a ClusterBinding or a Binding of one of three namespaces.
    fn binding() -> impl Strategy<Value = Option<&'static str>> {
        prop_oneof![Just(None), Just(Some("a")), Just(Some("b")), Just(Some("c"))]
    }

    fn time() -> impl Strategy<Value = Option<Timestamp>> {
        proptest::option::of((0i64..4).prop_map(|s| Timestamp::from_second(s).expect("a valid second")))
    }

    fn standing() -> impl Strategy<Value = Standing> {
        (
            time(),
            any::<bool>(),
            any::<bool>(),
            time(),
            binding(),
            prop_oneof![Just("x"), Just("y")],
            prop_oneof![Just("c1"), Just("c2")],
        )
            .prop_map(
                |(claimed_at, exported, servable, created, ns, name, connection)| Standing {
                    claimed_at,
                    exported,
                    servable,
                    created,
                    namespace: ns.map(str::to_string),
                    name: name.to_string(),
                    connection: connection.to_string(),
                },
            )
    }

    proptest! {
        #[test]
        fn a_cluster_binding_covers_all_and_a_binding_only_its_namespace(b in binding(), part in binding()) {
            let covered = covers(b, part);
            match (b, part) {
                (None, _) => prop_assert!(covered),
                (Some(_), None) => prop_assert!(!covered, "only a ClusterBinding covers the whole API"),
                (Some(ns), Some(p)) => prop_assert_eq!(covered, ns == p),
            }
        }

        #[test]
        fn the_common_part_is_covered_by_both_and_exists_when_any_part_is(a in binding(), b in binding(), part in binding()) {
            let shared = common(a, b);
            prop_assert_eq!(shared, common(b, a), "symmetric");
            if let Some(p) = shared {
                prop_assert!(covers(a, p) && covers(b, p));
            }
            // Any part both cover lies within the common part.
            if covers(a, part) && covers(b, part) {
                let p = shared.expect("a common part");
                prop_assert!(covers(p, part));
            }
        }

        #[test]
        fn a_recorded_claim_holds_whatever_the_conditions_say(reason in prop_oneof![
            proptest::sample::select(reason::API_REFUSALS.to_vec()),
            Just(reason::PENDING),
            Just(reason::SCHEMA_UPDATE_BLOCKED),
        ]) {
            prop_assert!(claims(true, Some(reason)));
            prop_assert!(claims(true, None));
            prop_assert!(claims(false, None), "a binding whose Synced holds claims");
            prop_assert_eq!(claims(false, Some(reason)), !reason::API_REFUSALS.contains(&reason));
        }

        #[test]
        fn a_recorded_claim_outranks_every_standing_without_one(a in standing(), b in standing()) {
            match (a.claimed_at, b.claimed_at) {
                (Some(_), None) => prop_assert!(a < b),
                (None, Some(_)) => prop_assert!(b < a),
                (Some(x), Some(y)) if x != y => prop_assert_eq!(a < b, x < y, "the earlier claim wins"),
                _ => {}
            }
        }

        #[test]
        fn without_claims_exported_then_servable_then_the_oldest_wins(a in standing(), b in standing()) {
            prop_assume!(a.claimed_at.is_none() && b.claimed_at.is_none());
            if a.exported != b.exported {
                prop_assert_eq!(a < b, a.exported);
            } else if a.servable != b.servable {
                prop_assert_eq!(a < b, a.servable);
            } else if a.created != b.created {
                prop_assert_eq!(a < b, a.created < b.created);
            }
        }

        #[test]
        fn standings_are_a_total_order_that_ties_only_the_same_binding(a in standing(), b in standing(), c in standing()) {
            prop_assert_eq!(a.cmp(&b), b.cmp(&a).reverse());
            prop_assert_eq!(a.cmp(&b) == Ordering::Equal, a == b);
            if a <= b && b <= c {
                prop_assert!(a <= c);
            }
        }

        #[test]
        fn within_a_connection_a_cluster_binding_goes_first_then_the_oldest(
            a in binding(), b in binding(), ta in time(), tb in time()
        ) {
            let (pa, pb) = (precedence(a, ta, "x"), precedence(b, tb, "y"));
            if a.is_none() && b.is_some() {
                prop_assert!(pa < pb);
            } else if a.is_some() == b.is_some() && ta != tb {
                prop_assert_eq!(pa < pb, ta < tb);
            }
        }
    }

    #[test]
    fn the_allowed_namespaces_are_a_list_or_every_one() {
        assert!(allows_namespace(Some("team-a, team-b"), "team-b"));
        assert!(allows_namespace(Some("*"), "anything"));
        assert!(!allows_namespace(Some("team-a"), "team-b"));
        assert!(!allows_namespace(None, "team-a"), "no annotation allows no Binding");
    }
}
