//! Events on a Connection: a Warning once per transition into a bad state (SecretValid=False,
//! ClusterIdentityChanged, ProviderUnreachable, Unauthorized, PermissionDenied), a Normal `Ready` once it
//! becomes Ready again. Notes are built from reasons and names only: never from a condition
//! message, a kubeconfig or a server's error text. The one exception is what the link says of
//! an unreachable provider: its `host:port` and the client's own words for the cause
//! (`link::classify_at`), so the Event says where and why.

use std::collections::BTreeSet;

use kbind_api::Connection;
use kbind_api::conditions::{self, ConditionStatus};
use kbind_api::consts::{condition, reason, status};
use kube::ResourceExt;

use super::status::Report;
use crate::events::EventType;

/// The reason of the Warning Event of a failed credential renewal.
pub(crate) const CREDENTIAL_RENEWAL_FAILED: &str = "CredentialRenewalFailed";

/// A bad state of a Connection that deserves a Warning Event.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub(crate) enum BadState {
    /// `SecretValid=False`, with the condition's reason.
    SecretInvalid(String),
    /// `Connected=False`, reason `ClusterIdentityChanged`.
    IdentityChanged,
    /// `Connected=False`, reason `ProviderUnreachable`.
    Unreachable,
    /// `Connected=False`, reason `Unauthorized` (the credentials are refused).
    Unauthorized,
    /// `PermissionDenied=True`.
    Denied,
    /// `Connected=False`, reason `CredentialExpired`.
    CredentialExpired,
    /// Renewing the credential failed (the Connection stays connected on the current token).
    RenewalFailed,
}

/// What the Events of a Connection have announced so far.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Announced {
    bad: BTreeSet<BadState>,
    ready: bool,
    /// What the link said of an unreachable provider (where and why), for the Warning's note.
    unreachable: Option<String>,
    /// What the failed renewal met (verb, resource, HTTP cause), for the Warning's note.
    renewal_failed: Option<String>,
}

/// One Event to publish.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Announcement {
    pub kind: EventType,
    pub reason: String,
    pub note: String,
}

impl Announced {
    /// What the Connection's written conditions say (what an earlier reconcile, maybe of
    /// another process, already announced).
    pub(crate) fn from_status(conn: &Connection) -> Self {
        let conds = conn
            .status
            .as_ref()
            .map(|s| s.conditions.as_slice())
            .unwrap_or_default();
        let is = |type_: &str, want: &str| conditions::find(conds, type_).is_some_and(|c| c.status == want);
        let reason_of = |type_: &str| conditions::find(conds, type_).map(|c| c.reason.clone());
        let mut bad = BTreeSet::new();
        if is(condition::SECRET_VALID, status::FALSE) {
            bad.insert(BadState::SecretInvalid(
                reason_of(condition::SECRET_VALID).unwrap_or_default(),
            ));
        }
        if is(condition::CONNECTED, status::FALSE) {
            bad.extend(connected_bad(reason_of(condition::CONNECTED).as_deref()));
        }
        if is(condition::PERMISSION_DENIED, status::TRUE) {
            bad.insert(BadState::Denied);
        }
        Self {
            bad,
            ready: is(condition::READY, status::TRUE),
            unreachable: None,
            renewal_failed: None,
        }
    }

    /// What one reconcile's report says.
    pub(crate) fn from_report(report: &Report) -> Self {
        let mut bad = BTreeSet::new();
        if report.secret_valid.status == ConditionStatus::False {
            bad.insert(BadState::SecretInvalid(report.secret_valid.reason.to_string()));
        }
        if report.connected.status == ConditionStatus::False {
            bad.extend(connected_bad(Some(report.connected.reason)));
        }
        if report.permission_denied.is_some() {
            bad.insert(BadState::Denied);
        }
        let unreachable = (report.connected.status == ConditionStatus::False
            && report.connected.reason == reason::PROVIDER_UNREACHABLE)
            .then(|| report.connected.message.clone());
        if report.renewal_failed.is_some() {
            bad.insert(BadState::RenewalFailed);
        }
        Self {
            bad,
            ready: report.ready().holds(),
            unreachable,
            renewal_failed: report.renewal_failed.clone(),
        }
    }

    /// The Events for going from `self` to `next`: one per newly entered bad state, and a
    /// Normal one on becoming Ready.
    pub(crate) fn transitions(&self, next: &Announced, conn: &Connection) -> Vec<Announcement> {
        let name = conn.name_any();
        let mut events: Vec<Announcement> = next
            .bad
            .difference(&self.bad)
            .map(|state| warning(state, &name, conn, next))
            .collect();
        if next.ready && !self.ready {
            events.push(Announcement {
                kind: EventType::Normal,
                reason: condition::READY.to_string(),
                note: format!("Connection {name} is ready: the provider is connected with the pinned identity"),
            });
        }
        events
    }
}

fn connected_bad(why: Option<&str>) -> Option<BadState> {
    match why? {
        reason::CLUSTER_IDENTITY_CHANGED => Some(BadState::IdentityChanged),
        reason::PROVIDER_UNREACHABLE => Some(BadState::Unreachable),
        reason::UNAUTHORIZED => Some(BadState::Unauthorized),
        reason::CREDENTIAL_EXPIRED => Some(BadState::CredentialExpired),
        _ => None,
    }
}

fn warning(state: &BadState, name: &str, conn: &Connection, next: &Announced) -> Announcement {
    let unreachable = next.unreachable.as_deref();
    let (reason, note) = match state {
        BadState::SecretInvalid(why) => {
            let secret = &conn.spec.kubeconfig_secret_ref;
            (
                why.clone(),
                format!(
                    "the kubeconfig Secret {}/{} of Connection {name} is not usable ({why}); see the SecretValid condition",
                    secret.namespace, secret.name
                ),
            )
        }
        BadState::IdentityChanged => (
            reason::CLUSTER_IDENTITY_CHANGED.to_string(),
            format!(
                "a cluster's identity differs from the one pinned by Connection {name}; nothing is written to the \
                 provider (see the Connected condition)"
            ),
        ),
        BadState::Unreachable => (
            reason::PROVIDER_UNREACHABLE.to_string(),
            match unreachable {
                Some(why) => format!("Connection {name}: {why} (see the Connected condition)"),
                None => format!(
                    "the provider of Connection {name} cannot be reached; retrying (see the Connected condition)"
                ),
            },
        ),
        BadState::Unauthorized => (
            reason::UNAUTHORIZED.to_string(),
            format!(
                "the provider refuses the credentials of Connection {name} (HTTP 401): revoked or expired? Nothing \
                 is deleted because of it (see the Connected condition)"
            ),
        ),
        BadState::CredentialExpired => (
            reason::CREDENTIAL_EXPIRED.to_string(),
            format!(
                "the issued token of Connection {name} expired before it could be renewed and the provider refuses \
                 it: run `kbind bind` again or `kbind redeem` a new pickup. Nothing is deleted because of it (see \
                 the Connected condition)"
            ),
        ),
        BadState::RenewalFailed => (
            CREDENTIAL_RENEWAL_FAILED.to_string(),
            match next.renewal_failed.as_deref() {
                Some(why) => format!("renewing the credential of Connection {name} failed: {why}; retrying"),
                None => format!("renewing the credential of Connection {name} failed; retrying"),
            },
        ),
        BadState::Denied => (
            condition::PERMISSION_DENIED.to_string(),
            format!(
                "the provider refused a request made with the credentials of Connection {name}; see the \
                 PermissionDenied condition"
            ),
        ),
    };
    Announcement {
        kind: EventType::Warning,
        reason,
        note,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::observed::Observed;
    use serde_json::json;

    fn connection(conditions: serde_json::Value) -> Connection {
        serde_json::from_value(json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": "acme"},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "acme-kubeconfig"}},
            "status": {"conditions": conditions},
        }))
        .unwrap()
    }

    fn condition(type_: &str, status: &str, reason: &str) -> serde_json::Value {
        json!({"type": type_, "status": status, "reason": reason, "message": "m",
               "lastTransitionTime": "2026-01-01T00:00:00Z"})
    }

    fn reasons(events: &[Announcement]) -> Vec<(EventType, &str)> {
        events.iter().map(|e| (e.kind, e.reason.as_str())).collect()
    }

    #[test]
    fn refused_credentials_are_announced_as_unauthorized() {
        let conn = connection(json!([]));
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::not(
            reason::UNAUTHORIZED,
            "the provider refuses the credentials (HTTP 401 Unauthorized)",
        );
        let events = Announced::default().transitions(&Announced::from_report(&report), &conn);
        assert_eq!(reasons(&events), [(EventType::Warning, "Unauthorized")]);
        assert!(events[0].note.contains("401"), "{}", events[0].note);
    }

    #[test]
    fn each_bad_state_is_announced_when_entered_only() {
        let conn = connection(json!([]));
        let mut report = Report::pending();
        report.secret_valid = Observed::not(reason::SECRET_NOT_FOUND, "Secret kbind/acme-kubeconfig not found");
        let first = Announced::from_report(&report);
        let events = Announced::default().transitions(&first, &conn);
        assert_eq!(reasons(&events), [(EventType::Warning, "SecretNotFound")]);
        assert!(events[0].note.contains("kbind/acme-kubeconfig"), "{}", events[0].note);
        assert!(
            first.transitions(&first, &conn).is_empty(),
            "no Event while the state stays"
        );

        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::not(reason::PROVIDER_UNREACHABLE, "down");
        report.permission_denied = Some("may not get leases".into());
        let second = Announced::from_report(&report);
        let events = first.transitions(&second, &conn);
        assert_eq!(
            reasons(&events),
            [
                (EventType::Warning, "ProviderUnreachable"),
                (EventType::Warning, "PermissionDenied")
            ]
        );
        assert!(
            events.iter().all(|e| !e.note.contains("leases")),
            "notes carry no server text"
        );
    }

    #[test]
    fn an_unreachable_provider_is_announced_with_where_and_why() {
        let conn = connection(json!([]));
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        let failure = crate::link::classify_at(
            &kbind_cluster::Error::Transport("connection refused".into()),
            Some("127.0.0.1:6443"),
        );
        let crate::link::Failure::Unreachable(message) = failure else {
            panic!("a transport error is unreachable: {failure:?}");
        };
        report.connected = Observed::not(reason::PROVIDER_UNREACHABLE, message);
        let events = Announced::default().transitions(&Announced::from_report(&report), &conn);
        assert_eq!(reasons(&events), [(EventType::Warning, "ProviderUnreachable")]);
        assert!(
            events[0].note.contains("127.0.0.1:6443") && events[0].note.contains("connection refused"),
            "{}",
            events[0].note
        );
    }

    #[test]
    fn becoming_ready_again_is_a_normal_event() {
        let conn = connection(json!([]));
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::not(reason::CLUSTER_IDENTITY_CHANGED, "changed");
        let broken = Announced::from_report(&report);
        report.connected = Observed::ok("connected");
        let ready = Announced::from_report(&report);
        assert_eq!(
            reasons(&broken.transitions(&ready, &conn)),
            [(EventType::Normal, "Ready")]
        );
        assert!(ready.transitions(&ready, &conn).is_empty());
    }

    #[test]
    fn written_conditions_count_as_announced() {
        let conn = connection(json!([
            condition("SecretValid", "True", "AsExpected"),
            condition("Connected", "False", "ClusterIdentityChanged"),
            condition("PermissionDenied", "False", "AsExpected"),
            condition("Ready", "False", "ClusterIdentityChanged"),
        ]));
        let before = Announced::from_status(&conn);
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::not(reason::CLUSTER_IDENTITY_CHANGED, "changed");
        let after = Announced::from_report(&report);
        assert_eq!(before, after);
        assert!(
            before.transitions(&after, &conn).is_empty(),
            "a restart does not repeat Events"
        );
    }
}
