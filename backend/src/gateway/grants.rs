//! The caller's own Grants: `GET /api/v1/grants` with each consumer's heartbeat age, and
//! `DELETE /api/v1/grants/<name>`, which revokes (the issuer's finalizer does the work) and says
//! whether that work is done. Someone else's Grant is answered exactly like a missing one.

use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use http::StatusCode;
use k8s_openapi::api::coordination::v1::Lease;
use kbind_api::Grant;
use kbind_api::consts::{condition, lease_name, status};
use kbind_api::service::{GrantList, GrantView};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DeleteParams, ListParams, from_dynamic};
use kube::api::Preconditions;
use serde::Serialize;

use super::http::{Authenticated, Writer};
use super::{Gateway, GatewayError};

fn grant_res() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

/// `GET /api/v1/grants`.
pub(crate) async fn list(
    State(state): State<Gateway>,
    Authenticated(caller): Authenticated,
) -> Result<Json<GrantList>, GatewayError> {
    let provider = state.provider();
    let all = provider.list(&grant_res(), None, &ListParams::default()).await?;
    let mut grants = Vec::new();
    for object in all.items {
        let grant: Grant = from_dynamic(object)?;
        if grant.spec.identity.subject != caller.identity.subject {
            continue;
        }
        let heartbeat = heartbeat_age(&state, provider, &grant.spec.consumer_cluster_uid).await;
        grants.push(view(&grant, heartbeat));
    }
    grants.sort_by(|a, b| a.name.cmp(&b.name));
    Ok(Json(GrantList { grants }))
}

/// Seconds since the consumer's Lease was renewed, by the Lease's `renewTime` and our clock.
async fn heartbeat_age(state: &Gateway, provider: &dyn ClusterClient, uid: &str) -> Option<i64> {
    let lease: Lease = match provider
        .get_typed_opt(Some(&state.config().lease_namespace), &lease_name(uid))
        .await
    {
        Ok(lease) => lease?,
        Err(e) => {
            tracing::warn!(error = %e, "failed to read a heartbeat Lease");
            return None;
        }
    };
    let renewed = lease.spec?.renew_time?.0;
    Some(state.now().duration_since(renewed).as_secs().max(0))
}

/// A Grant as its owner sees it.
pub(crate) fn view(grant: &Grant, heartbeat_age_seconds: Option<i64>) -> GrantView {
    let ready_condition = grant
        .status
        .as_ref()
        .and_then(|s| s.conditions.iter().find(|c| c.type_ == condition::READY));
    let current = grant.status.as_ref().and_then(|s| s.observed_generation) == grant.metadata.generation;
    GrantView {
        name: grant.metadata.name.clone().unwrap_or_default(),
        export: grant.spec.export.clone(),
        consumer_cluster_uid: grant.spec.consumer_cluster_uid.clone(),
        namespaces: grant.spec.namespaces.clone(),
        ready: current && ready_condition.is_some_and(|c| c.status == status::TRUE),
        reason: ready_condition.map(|c| c.reason.clone()),
        message: ready_condition.map(|c| c.message.clone()),
        heartbeat_age_seconds,
        revoking: grant.metadata.deletion_timestamp.is_some(),
        created: grant
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| kbind_cluster::clock::format_time(t.0)),
    }
}

/// How long a revoke waits for the issuer to finish (its finalizer removes the credential and
/// then the Grant goes) before answering that the revocation is still pending.
const REVOKE_WAIT: Duration = Duration::from_secs(5);

/// Whether a revoked Grant's credential is gone.
#[derive(Serialize, Debug, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RevokeState {
    /// The issuer removed what it provisioned and the Grant is gone: the credential is dead.
    Revoked,
    /// The Grant is being deleted but the issuer has not run yet: the credential still works.
    Pending,
}

/// The answer to `DELETE /api/v1/grants/<name>`: the Grant as last seen (a [`GrantView`], as
/// before), plus `state` and a `message` saying what it means.
#[derive(Serialize, Debug)]
pub(crate) struct Revocation {
    #[serde(flatten)]
    grant: GrantView,
    state: RevokeState,
    message: String,
}

/// `DELETE /api/v1/grants/{name}`: 200 with `state: revoked` once the issuer finished, or 202
/// with `state: pending` while the Grant still waits for it.
pub(crate) async fn revoke(
    State(state): State<Gateway>,
    Writer(caller): Writer,
    Path(name): Path<String>,
) -> Result<(StatusCode, Json<Revocation>), GatewayError> {
    let provider = state.provider();
    let not_found = || GatewayError::GrantNotFound(name.clone());
    if !super::is_dns_label(&name) {
        return Err(not_found());
    }
    let grant: Grant = provider.get_typed_opt(None, &name).await?.ok_or_else(not_found)?;
    // The name is derived from the owner, so a check on the subject is enough; the name check
    // guards against a Grant someone created by hand under another identity's name.
    if grant.spec.identity.subject != caller.identity.subject
        || !state.inner.naming.is_name_of(provider, &grant, &name).await?
    {
        return Err(not_found());
    }
    let params = DeleteParams {
        preconditions: Some(Preconditions {
            uid: grant.metadata.uid.clone(),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    let after = match provider.delete(&grant_res(), None, &name, &params).await {
        Ok(Some(object)) => from_dynamic::<Grant>(object)?,
        Ok(None) => {
            let mut gone = grant.clone();
            gone.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(state.now()));
            gone
        }
        Err(e) if e.is_not_found() => return Err(not_found()),
        Err(e) => return Err(e.into()),
    };
    let done = wait_gone(provider, &name, grant.metadata.uid.as_deref()).await?;
    tracing::info!(grant = %name, done, "revoked by its owner");
    let (status, state, message) = if done {
        (
            StatusCode::OK,
            RevokeState::Revoked,
            format!("grant {name} is revoked: its credential no longer works"),
        )
    } else {
        (
            StatusCode::ACCEPTED,
            RevokeState::Pending,
            format!(
                "grant {name} is being revoked, but the issuer has not removed its credential yet: it keeps \
                 working until the issuer runs (kbind-backend --issuer); the grant is listed until then"
            ),
        )
    };
    Ok((status, Json(Revocation::new(view(&after, None), state, message))))
}

impl Revocation {
    /// The answer for `grant`: its Ready condition's message gives way to the revocation's own
    /// (the body is one JSON object, and one key `message`).
    fn new(mut grant: GrantView, state: RevokeState, message: String) -> Self {
        grant.message = None;
        Self { grant, state, message }
    }
}

/// `DELETE /api/v1/grants/{name}/namespaces/{namespace}`: the Grant stops covering `namespace`;
/// the issuer withdraws its Role there (the namespace stays claimed by the identity). This is
/// the only way a Grant narrows: a bind only adds, so a binding that uses a namespace keeps
/// working until its consumer let it go (`kbind unbind --namespace` drains it first). Dropping
/// a namespace the Grant does not cover answers the Grant as it is; its last one is refused.
pub(crate) async fn drop_namespace(
    State(state): State<Gateway>,
    Writer(caller): Writer,
    Path((name, namespace)): Path<(String, String)>,
) -> Result<Json<GrantView>, GatewayError> {
    let provider = state.provider();
    let not_found = || GatewayError::GrantNotFound(name.clone());
    if !super::is_dns_label(&name) {
        return Err(not_found());
    }
    for _ in 0..5 {
        let mut grant: Grant = provider.get_typed_opt(None, &name).await?.ok_or_else(not_found)?;
        if grant.spec.identity.subject != caller.identity.subject
            || !state.inner.naming.is_name_of(provider, &grant, &name).await?
        {
            return Err(not_found());
        }
        if grant.metadata.deletion_timestamp.is_some() {
            return Err(GatewayError::GrantRevoking(name.clone()));
        }
        if !grant.spec.namespaces.contains(&namespace) {
            return Ok(Json(view(&grant, None)));
        }
        if grant.spec.namespaces.len() == 1 {
            return Err(GatewayError::LastNamespace {
                grant: name.clone(),
                namespace,
            });
        }
        grant.spec.namespaces.retain(|ns| ns != &namespace);
        // The read's resourceVersion makes this a compare-and-swap: a bind adding namespaces
        // meanwhile is not overwritten.
        match provider
            .replace(
                &grant_res(),
                None,
                &name,
                &kbind_cluster::to_dynamic(&grant)?,
                &Default::default(),
            )
            .await
        {
            Ok(written) => {
                let written: Grant = from_dynamic(written)?;
                tracing::info!(grant = %name, namespace = %namespace, "namespace dropped by its owner");
                return Ok(Json(view(&written, None)));
            }
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(kbind_cluster::Error::stale("grants.iam.kbind.io", &name).into())
}

/// Whether the Grant `name` (of `uid`) is gone within [`REVOKE_WAIT`]: its finalizer, the
/// issuer's revocation, has run.
async fn wait_gone(provider: &dyn ClusterClient, name: &str, uid: Option<&str>) -> Result<bool, GatewayError> {
    let gone = poll_grant(provider, name, REVOKE_WAIT, |grant| {
        Ok(grant.is_none_or(|g| g.metadata.uid.as_deref() != uid).then_some(()))
    })
    .await?;
    Ok(gone.is_some())
}

/// Reads Grant `name` with a doubling delay (25 ms up to 1 s) until `settle` answers `Some` or an
/// error, or `timeout` passes (`None`). A poll, not a watch: binds and revokes are rare, and a
/// poll needs no permission beyond `get`.
pub(super) async fn poll_grant<T>(
    provider: &dyn ClusterClient,
    name: &str,
    timeout: Duration,
    mut settle: impl FnMut(Option<Grant>) -> Result<Option<T>, GatewayError>,
) -> Result<Option<T>, GatewayError> {
    let deadline = tokio::time::Instant::now() + timeout;
    let mut delay = Duration::from_millis(25);
    loop {
        if let Some(done) = settle(provider.get_typed_opt(None, name).await?)? {
            return Ok(Some(done));
        }
        let now = tokio::time::Instant::now();
        if now >= deadline {
            return Ok(None);
        }
        tokio::time::sleep(delay.min(deadline - now)).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_revocation_body_has_one_message() {
        let grant = GrantView {
            name: "grant-1".into(),
            export: "widgets".into(),
            consumer_cluster_uid: "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77".into(),
            namespaces: vec!["team-a".into()],
            ready: true,
            reason: Some("AsExpected".into()),
            message: Some("issued".into()),
            heartbeat_age_seconds: None,
            revoking: true,
            created: None,
        };
        let body = serde_json::to_string(&Revocation::new(grant, RevokeState::Pending, "being revoked".into()))
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(body.matches("\"message\"").count(), 1, "{body}");
        let value: serde_json::Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(value["message"], "being revoked");
        assert_eq!(value["state"], "pending");
    }
}
