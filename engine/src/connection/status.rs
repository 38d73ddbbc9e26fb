//! What one reconcile observed, turned into the Connection's status and written with a merge
//! patch on the status subresource (only when something changed).

pub(crate) use crate::observed::Observed;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::conditions::{self, ConditionStatus};
use kbind_api::consts::{condition, field_manager, reason};
use kbind_api::{Connection, ConnectionStatus, ExportedApi, SchemaSource};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use kube::ResourceExt;
use serde_json::{Value, json};

use super::finalize::Waiting;

/// Everything a reconcile learnt about one Connection.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub secret_valid: Observed,
    pub connected: Observed,
    /// `Some(message)` when a verb was refused on the provider.
    pub permission_denied: Option<String>,
    pub schema_in_sync: Observed,
    /// UIDs to pin (only written when the status has none yet).
    pub remote_uid: Option<String>,
    pub local_uid: Option<String>,
    /// Fresh discovery results; `None` keeps what the status has.
    pub exported: Option<(Vec<ExportedApi>, SchemaSource)>,
    /// When the issued token in use expires (`None`: not an issued token, or none accepted).
    pub credential_expires_at: Option<jiff::Timestamp>,
    /// What the last failed renewal of the credential met, while renewals fail.
    pub renewal_failed: Option<String>,
}

impl Report {
    /// A report whose every condition waits for the Secret.
    pub(crate) fn pending() -> Self {
        Self {
            secret_valid: Observed::new(
                ConditionStatus::Unknown,
                reason::PENDING,
                "checking the kubeconfig Secret",
            ),
            connected: Observed::not(reason::PENDING, "waiting for a valid kubeconfig Secret"),
            permission_denied: None,
            schema_in_sync: Observed::not(reason::PENDING, "waiting for the provider"),
            remote_uid: None,
            local_uid: None,
            exported: None,
            credential_expires_at: None,
            renewal_failed: None,
        }
    }

    /// The Ready condition: SecretValid ∧ Connected ∧ ¬PermissionDenied.
    pub(crate) fn ready(&self) -> Observed {
        if !self.secret_valid.holds() {
            return Observed::not(self.secret_valid.reason, self.secret_valid.message.clone());
        }
        if !self.connected.holds() {
            return Observed::not(self.connected.reason, self.connected.message.clone());
        }
        if let Some(message) = &self.permission_denied {
            return Observed::not(reason::FORBIDDEN, message.clone());
        }
        Observed::ok("the provider is connected with the pinned identity")
    }
}

/// The status `report` gives `conn` at `now`.
pub(crate) fn desired_status(conn: &Connection, report: &Report, now: &Time) -> ConnectionStatus {
    let mut status = conn.status.clone().unwrap_or_default();
    if status.remote_cluster_uid.is_none() {
        status.remote_cluster_uid = report.remote_uid.clone();
    }
    if status.local_cluster_uid.is_none() {
        status.local_cluster_uid = report.local_uid.clone();
    }
    if let Some((apis, source)) = &report.exported {
        status.exported_apis = apis.clone();
        status.active_schema_source = Some(*source);
    }
    status.credential_expires_at = report.credential_expires_at.map(Time);
    let generation = conn.metadata.generation;
    let denied = match &report.permission_denied {
        Some(message) => Observed::new(ConditionStatus::True, reason::FORBIDDEN, message.clone()),
        None => Observed::not(reason::AS_EXPECTED, "no provider request was refused"),
    };
    for (type_, observed) in [
        (condition::SECRET_VALID, &report.secret_valid),
        (condition::CONNECTED, &report.connected),
        (condition::SCHEMA_IN_SYNC, &report.schema_in_sync),
        (condition::PERMISSION_DENIED, &denied),
        (condition::READY, &report.ready()),
    ] {
        let cond = conditions::new(
            type_,
            observed.status,
            observed.reason,
            observed.message.clone(),
            generation,
        );
        conditions::set(&mut status.conditions, cond, now);
    }
    status
}

/// The status of a deleted Connection waiting for its bindings: what `report` observed of the
/// provider, and Ready=False with `DeletionBlocked` (naming the first blocked binding and its
/// cause) while a binding cannot drain, else `DrainingBindings`.
pub(crate) fn draining_status(
    conn: &Connection,
    report: &Report,
    bindings: &[Waiting],
    now: &Time,
) -> ConnectionStatus {
    let mut status = desired_status(conn, report, now);
    let waiting = format!(
        "waiting for {} binding(s) of this Connection to go: {}",
        bindings.len(),
        named(bindings)
    );
    let (reason, message) = match bindings.iter().find_map(|b| Some((&b.binding, b.blocked.as_ref()?))) {
        Some((binding, why)) => (reason::DELETION_BLOCKED, format!("{waiting}; {binding} cannot: {why}")),
        None => (
            reason::DRAINING_BINDINGS,
            format!(
                "{waiting}. Delete them (their provider copies are deleted first), or annotate them {}={} to \
                 release them without draining",
                kbind_api::consts::annotation::DELETION_POLICY,
                kbind_api::consts::DELETION_POLICY_ORPHAN
            ),
        ),
    };
    let ready = conditions::new(
        condition::READY,
        ConditionStatus::False,
        reason,
        message,
        conn.metadata.generation,
    );
    conditions::set(&mut status.conditions, ready, now);
    status
}

/// The most bindings a message names; the rest are counted.
const NAMED_BINDINGS: usize = 5;

/// `a, b, c` or `a, b, c, d, e and 3 more`.
fn named(bindings: &[Waiting]) -> String {
    let names: Vec<&str> = bindings
        .iter()
        .take(NAMED_BINDINGS)
        .map(|b| b.binding.as_str())
        .collect();
    let rest = bindings.len().saturating_sub(NAMED_BINDINGS);
    if rest == 0 {
        names.join(", ")
    } else {
        format!("{} and {rest} more", names.join(", "))
    }
}

/// Writes `status` when it differs from the Connection's current one.
pub(crate) async fn write_status(
    consumer: &dyn ClusterClient,
    conn: &Connection,
    status: ConnectionStatus,
) -> kbind_cluster::Result<()> {
    if conn.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let mut body = serde_json::to_value(&status).map_err(|e| kbind_cluster::Error::Decode(e.to_string()))?;
    // A merge patch leaves absent keys alone: emptied fields must be sent as null to clear.
    if let Some(map) = body.as_object_mut() {
        for key in ["exportedAPIs", "activeSchemaSource", "credentialExpiresAt"] {
            map.entry(key).or_insert(Value::Null);
        }
    }
    let params = PatchParams {
        field_manager: Some(field_manager::KONNECTOR.to_string()),
        ..PatchParams::default()
    };
    consumer
        .patch_status(
            &super::connection_resource(),
            None,
            &conn.name_any(),
            &Patch::Merge(json!({ "status": body })),
            &params,
        )
        .await
        .map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::jiff::Timestamp;

    fn connection() -> Connection {
        serde_json::from_value(json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": "acme", "generation": 3},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "acme"}},
            "status": {"remoteClusterUID": "pinned-remote", "localClusterUID": "pinned-local"},
        }))
        .unwrap()
    }

    fn at(second: i64) -> Time {
        Time(Timestamp::from_second(second).unwrap())
    }

    fn waiting(binding: &str, blocked: Option<&str>) -> Waiting {
        Waiting {
            binding: binding.into(),
            blocked: blocked.map(Into::into),
        }
    }

    #[test]
    fn a_deleted_connection_says_which_binding_cannot_drain_and_why() {
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::not(
            reason::UNAUTHORIZED,
            "the provider refuses the credentials (HTTP 401 Unauthorized)",
        );
        let bindings = [
            waiting("Binding team-a/w", None),
            waiting(
                "ClusterBinding acme",
                Some("failed to read default/w1 on the provider (HTTP 401 Unauthorized)"),
            ),
        ];
        let status = draining_status(&connection(), &report, &bindings, &at(1));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", "DeletionBlocked")
        );
        assert!(
            ready.message.contains("2 binding(s)") && ready.message.contains("ClusterBinding acme cannot"),
            "{}",
            ready.message
        );
        assert!(ready.message.contains("HTTP 401"), "{}", ready.message);
        let connected = conditions::find(&status.conditions, condition::CONNECTED).unwrap();
        assert_eq!(
            connected.reason, "Unauthorized",
            "Connected stays true to what the provider answers"
        );

        let status = draining_status(&connection(), &report, &[waiting("acme", None)], &at(2));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(ready.reason, "DrainingBindings");
    }

    #[test]
    fn a_draining_connection_names_its_bindings_and_the_way_out() {
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::ok("connected");
        let two = [waiting("Binding team-a/w", None), waiting("ClusterBinding acme", None)];
        let status = draining_status(&connection(), &report, &two, &at(1));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(ready.reason, "DrainingBindings");
        for want in [
            "2 binding(s)",
            "Binding team-a/w, ClusterBinding acme",
            "Delete them",
            "core.kbind.io/deletion-policy=Orphan",
        ] {
            assert!(ready.message.contains(want), "no {want:?} in: {}", ready.message);
        }
        let many: Vec<Waiting> = (0..8).map(|i| waiting(&format!("Binding ns/b{i}"), None)).collect();
        let status = draining_status(&connection(), &report, &many, &at(2));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert!(
            ready.message.contains("Binding ns/b4 and 3 more") && !ready.message.contains("b5"),
            "{}",
            ready.message
        );
    }

    #[test]
    fn pinned_uids_are_never_replaced() {
        let mut report = Report::pending();
        report.remote_uid = Some("other-remote".into());
        report.local_uid = Some("other-local".into());
        let status = desired_status(&connection(), &report, &at(1));
        assert_eq!(status.remote_cluster_uid.as_deref(), Some("pinned-remote"));
        assert_eq!(status.local_cluster_uid.as_deref(), Some("pinned-local"));
    }

    #[test]
    fn ready_follows_secret_connected_and_permission() {
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report.connected = Observed::ok("connected");
        let status = desired_status(&connection(), &report, &at(1));
        assert!(conditions::is_true(&status.conditions, condition::READY));
        assert_eq!(
            conditions::find(&status.conditions, condition::READY)
                .unwrap()
                .observed_generation,
            Some(3)
        );

        report.permission_denied = Some("the provider credentials may not get leases".into());
        let status = desired_status(&connection(), &report, &at(2));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert_eq!((ready.status.as_str(), ready.reason.as_str()), ("False", "Forbidden"));
        assert!(conditions::is_true(&status.conditions, condition::PERMISSION_DENIED));

        report.permission_denied = None;
        report.connected = Observed::not(reason::PROVIDER_UNREACHABLE, "down");
        let status = desired_status(&connection(), &report, &at(3));
        let ready = conditions::find(&status.conditions, condition::READY).unwrap();
        assert_eq!(ready.reason, "ProviderUnreachable");
    }
}
