//! `POST /api/v1/bind`: validate (no writes) → the Export and its APIs → namespace pre-check →
//! the issuer's provider check → create or update the Grant → wait for the issuer → store the
//! pickup's hash → answer the one-time URL. A failure after this request wrote the Grant undoes
//! the write (deletes a Grant it created, restores namespaces it changed): nothing half-created.

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use base64::Engine;
use http::StatusCode;
use kbind_api::consts::backend::{LABEL_CONSUMER_CLUSTER_UID, LABEL_EXPORT, LABEL_GRANT, MANAGED_BY};
use kbind_api::consts::{DEFAULT_NAMESPACE, condition, status};
use kbind_api::service::{BindOutcome, BindRequest, BindResponse};
use kbind_api::{Grant, GrantIdentity, GrantSpec, ResourceScope};
use kbind_cluster::clock::format_time;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, Error as ClusterError, Patch, PatchParams, PostParams,
    to_dynamic,
};
use kube::api::{ObjectMeta, Preconditions};
use rand::RngCore;
use sha2::{Digest, Sha256};

use super::grants::poll_grant;
use super::http::Writer;
use super::metrics::outcome;
use super::{Gateway, GatewayError, catalog, is_dns_label, is_dns_subdomain};
use crate::auth::Caller;
use crate::issuer::{IssueError, claims, reason};

/// How many times a write that lost a race with another writer is retried.
const WRITE_ATTEMPTS: usize = 5;

/// A bind request that passed validation.
struct Validated {
    export: String,
    consumer_cluster_uid: String,
    namespaces: Vec<String>,
    konnector_namespace: String,
}

/// `POST /api/v1/bind`.
pub(crate) async fn bind(
    State(state): State<Gateway>,
    Writer(caller): Writer,
    headers: http::HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<(StatusCode, Json<BindResponse>), GatewayError> {
    let result = match json_content_type(&headers) {
        Ok(()) => run(&state, &caller, body).await,
        Err(e) => Err(e),
    };
    state.metrics().bind(match &result {
        Ok(_) => outcome::BOUND,
        Err(e) if e.status_and_reason().0.is_client_error() => outcome::REFUSED,
        Err(_) => outcome::FAILED,
    });
    result.map(|response| (StatusCode::CREATED, Json(response)))
}

/// Refuses a body that does not declare itself JSON. Why strict, a missing header included:
/// a browser sends `text/plain` (or no type, for a Blob) cross-origin without a CORS preflight,
/// so only `application/json` (with parameters such as `charset`) proves a client meant JSON.
fn json_content_type(headers: &http::HeaderMap) -> Result<(), GatewayError> {
    let Some(value) = headers.get(http::header::CONTENT_TYPE) else {
        return Err(GatewayError::UnsupportedMediaType("no Content-Type".into()));
    };
    let text = value.to_str().unwrap_or("");
    let essence = text.split(';').next().unwrap_or("").trim();
    if essence.eq_ignore_ascii_case("application/json") {
        return Ok(());
    }
    // Only a short, printable value is echoed back: it is the client's own header.
    let shown: String = essence.chars().filter(|c| c.is_ascii_graphic()).take(64).collect();
    Err(GatewayError::UnsupportedMediaType(if shown.is_empty() {
        "an unreadable Content-Type".into()
    } else {
        format!("Content-Type: {shown}")
    }))
}

async fn run(
    state: &Gateway,
    caller: &Caller,
    body: Result<Bytes, BytesRejection>,
) -> Result<BindResponse, GatewayError> {
    let body = body.map_err(|rejection| {
        if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
            GatewayError::PayloadTooLarge(state.config().max_body_bytes)
        } else {
            GatewayError::bad_request("MalformedRequest", "the request body could not be read")
        }
    })?;
    let request = validate(&body)?;
    let provider = state.provider();
    let (export, scopes) = catalog::export_with_scopes(provider, &request.export).await?;
    let cluster_scoped = scopes
        .iter()
        .filter(|(_, scope)| *scope == ResourceScope::Cluster)
        .map(|(api, _)| api.clone());
    if let Some(refusal) = IssueError::unshared(&export, cluster_scoped) {
        return Err(refusal.into());
    }
    let namespaced = scopes.iter().any(|(_, scope)| *scope == ResourceScope::Namespaced);
    if namespaced && request.namespaces.is_empty() {
        return Err(GatewayError::bad_request(
            "NamespacesRequired",
            format!(
                "Export {:?} has namespaced APIs: name the namespaces the consumer uses in \"namespaces\"",
                request.export
            ),
        ));
    }
    if !namespaced && !request.namespaces.is_empty() {
        return Err(GatewayError::bad_request(
            "NamespacesNotAllowed",
            format!(
                "Export {:?} has only cluster-scoped APIs: leave \"namespaces\" empty",
                request.export
            ),
        ));
    }
    state
        .inner
        .issuer
        .precheck_namespaces(&caller.identity.subject, &request.namespaces)?;
    precheck_namespaces(provider, &caller.identity.subject, &request.namespaces).await?;
    precheck_consumer(provider, &caller.identity.subject, &request.consumer_cluster_uid).await?;
    state.inner.issuer.check_provider().await?;

    let name = state
        .inner
        .naming
        .name_for(
            provider,
            &caller.identity.subject,
            &request.export,
            &request.consumer_cluster_uid,
        )
        .await?;
    let upsert = upsert_grant(state, &name, caller, &request).await?;
    let outcome = async {
        wait_issued(state, &name).await?;
        store_pickup(state, &name, &request.konnector_namespace).await
    }
    .await;
    match outcome {
        Ok((secret, expires_at)) => {
            let (outcome, namespaces) = match &upsert {
                Upsert::Created { namespaces, .. } => (BindOutcome::Created, namespaces.clone()),
                Upsert::Updated { namespaces, .. } => (BindOutcome::Updated, namespaces.clone()),
                Upsert::Unchanged { namespaces } => (BindOutcome::Unchanged, namespaces.clone()),
            };
            tracing::info!(grant = %name, export = %request.export, ?outcome, "bound");
            Ok(BindResponse {
                grant: name.clone(),
                pickup_url: format!(
                    "{}{}/{name}.{secret}",
                    state.config().public_url,
                    kbind_api::service::path::PICKUP
                ),
                expires_at,
                outcome: Some(outcome),
                namespaces: Some(namespaces),
            })
        }
        Err(e) => {
            undo(provider, &name, upsert).await;
            Err(e)
        }
    }
}

/// What [`upsert_grant`] did, so a failed bind can undo it.
enum Upsert {
    /// Created by this request, with the UID it got (an undo deletes exactly that Grant).
    Created {
        uid: Option<String>,
        namespaces: Vec<String>,
    },
    /// Namespaces were added to an existing Grant.
    Updated {
        previous_namespaces: Vec<String>,
        namespaces: Vec<String>,
    },
    /// The Grant held every namespace asked for.
    Unchanged { namespaces: Vec<String> },
}

/// Undoes this request's write to the Grant: a Grant it created must not outlive the failed
/// request (its deletion goes through the issuer's finalizer, which removes what was
/// provisioned); namespaces it added go again, so a refused re-bind leaves the working Grant
/// as it was. Best effort: the request already failed with its own error.
async fn undo(provider: &dyn ClusterClient, name: &str, upsert: Upsert) {
    let result = match upsert {
        Upsert::Unchanged { .. } => Ok(()),
        Upsert::Created { uid, .. } => match provider
            .delete(
                &grant_res(),
                None,
                name,
                &DeleteParams {
                    preconditions: Some(Preconditions {
                        uid,
                        resource_version: None,
                    }),
                    ..DeleteParams::default()
                },
            )
            .await
        {
            Err(e) if !e.is_not_found() => Err(e),
            _ => Ok(()),
        },
        Upsert::Updated {
            previous_namespaces,
            namespaces: written,
        } => {
            async {
                let Some(mut grant) = provider.get_typed_opt::<Grant>(None, name).await? else {
                    return Ok(());
                };
                let mut current = grant.spec.namespaces.clone();
                current.sort();
                // Someone changed it again since: theirs stands.
                if current != written || grant.metadata.deletion_timestamp.is_some() {
                    return Ok(());
                }
                grant.spec.namespaces = previous_namespaces;
                provider
                    .replace(&grant_res(), None, name, &to_dynamic(&grant)?, &PostParams::default())
                    .await
                    .map(|_| ())
            }
            .await
        }
    };
    if let Err(e) = result {
        tracing::warn!(grant = %name, error = %e, "failed to undo the grant write of a failed bind");
    }
}

fn grant_res() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

/// Parses and checks the body; nothing is written before this passes.
fn validate(body: &[u8]) -> Result<Validated, GatewayError> {
    let request: BindRequest = serde_json::from_slice(body).map_err(|e| {
        GatewayError::bad_request("MalformedRequest", format!("the body is not a valid bind request: {e}"))
    })?;
    if !is_dns_subdomain(&request.export) {
        return Err(GatewayError::bad_request(
            "InvalidExport",
            format!("{:?} is not an Export name", request.export),
        ));
    }
    let uid = &request.consumer_cluster_uid;
    let canonical = uuid::Uuid::parse_str(uid).map(|u| u.hyphenated().to_string());
    if canonical.as_deref() != Ok(uid.as_str()) {
        return Err(GatewayError::bad_request(
            "InvalidConsumerClusterUID",
            "consumerClusterUID must be the consumer's kube-system Namespace UID, a lower-case UUID like 0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77 (kubectl get ns kube-system -o jsonpath='{.metadata.uid}')",
        ));
    }
    let mut namespaces = request.namespaces.clone();
    namespaces.sort();
    namespaces.dedup();
    if let Some(bad) = namespaces.iter().find(|ns| !is_dns_label(ns)) {
        return Err(GatewayError::bad_request(
            "InvalidNamespace",
            format!("{bad:?} is not a namespace name (lower-case letters, digits and '-', at most 63)"),
        ));
    }
    let konnector_namespace = request
        .konnector_namespace
        .clone()
        .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
    if !is_dns_label(&konnector_namespace) {
        return Err(GatewayError::bad_request(
            "InvalidNamespace",
            format!("konnectorNamespace {konnector_namespace:?} is not a namespace name"),
        ));
    }
    Ok(Validated {
        export: request.export,
        consumer_cluster_uid: request.consumer_cluster_uid,
        namespaces,
        konnector_namespace,
    })
}

/// Refuses namespaces another identity claimed, or that exist without kbind having created them
/// for this identity (also one the platform took back): the issuer's own judgement
/// ([`claims::check`]), so a re-bind is refused here rather than answered with a pickup the
/// issuer would not honour. The issuer checks again when it claims them.
async fn precheck_namespaces(
    provider: &dyn ClusterClient,
    subject: &str,
    namespaces: &[String],
) -> Result<(), GatewayError> {
    for namespace in namespaces {
        claims::check(provider, namespace, subject).await?;
    }
    Ok(())
}

/// Refuses a consumer cluster UID another identity's live Grant names (the UID is the
/// caller's word; the issuer decides races, see `KubernetesIssuer::check_consumer`).
async fn precheck_consumer(provider: &dyn ClusterClient, subject: &str, uid: &str) -> Result<(), GatewayError> {
    let selector = format!("{LABEL_CONSUMER_CLUSTER_UID}={uid}");
    let grants = provider
        .list(
            &grant_res(),
            None,
            &kbind_cluster::ListParams::default().labels(&selector),
        )
        .await?;
    let foreign = grants
        .items
        .iter()
        .any(|g| claims::consumer_subject(g, uid).is_some_and(|s| s != subject));
    if foreign {
        return Err(IssueError::ConsumerClusterClaimed { uid: uid.to_string() }.into());
    }
    Ok(())
}

/// A label value standing for `text`: itself when it fits a label value (63 characters), else
/// `sha256-` and the first 40 hex digits of its digest (an object name may be 253 long).
fn label_value(text: &str) -> String {
    if text.len() <= 63 {
        return text.to_string();
    }
    // The claimed-by label's value is those 40 hex digits.
    format!("sha256-{}", claims::claimed_by_value(text))
}

/// Waits until the terminating Grant `name` is gone, at most the bind timeout; past it the
/// bind answers `GrantRevoking` (the issuer, which removes its finalizer, may not be running).
async fn wait_deleted(state: &Gateway, name: &str) -> Result<(), GatewayError> {
    let timeout = state.config().bind_timeout;
    poll_grant(state.provider(), name, timeout, |grant| {
        Ok(grant
            .is_none_or(|g| g.metadata.deletion_timestamp.is_none())
            .then_some(()))
    })
    .await?
    .ok_or_else(|| GatewayError::GrantRevoking(name.to_string()))
}

/// Creates the Grant, or updates an existing one's namespaces.
async fn upsert_grant(
    state: &Gateway,
    name: &str,
    caller: &Caller,
    request: &Validated,
) -> Result<Upsert, GatewayError> {
    let provider = state.provider();
    for _ in 0..WRITE_ATTEMPTS {
        match provider.get_typed_opt::<Grant>(None, name).await? {
            None => {
                let grant = Grant {
                    metadata: ObjectMeta {
                        name: Some(name.to_string()),
                        labels: Some(
                            [
                                (LABEL_GRANT.to_string(), name.to_string()),
                                (LABEL_EXPORT.to_string(), label_value(&request.export)),
                                (
                                    LABEL_CONSUMER_CLUSTER_UID.to_string(),
                                    request.consumer_cluster_uid.clone(),
                                ),
                                ("app.kubernetes.io/managed-by".to_string(), MANAGED_BY.to_string()),
                            ]
                            .into(),
                        ),
                        ..ObjectMeta::default()
                    },
                    spec: GrantSpec {
                        identity: GrantIdentity {
                            subject: caller.identity.subject.clone(),
                            name: caller.identity.name.clone(),
                        },
                        export: request.export.clone(),
                        consumer_cluster_uid: request.consumer_cluster_uid.clone(),
                        namespaces: request.namespaces.clone(),
                    },
                    status: None,
                };
                match provider
                    .create(&grant_res(), None, &to_dynamic(&grant)?, &PostParams::default())
                    .await
                {
                    Ok(created) => {
                        return Ok(Upsert::Created {
                            uid: created.metadata.uid,
                            namespaces: request.namespaces.clone(),
                        });
                    }
                    // Another replica created it first: update that one.
                    Err(ClusterError::AlreadyExists { .. }) => continue,
                    Err(e) => return Err(e.into()),
                }
            }
            Some(existing) => {
                if existing.metadata.deletion_timestamp.is_some() {
                    // An earlier revoke, or the undo of a refused bind, is still running: once
                    // it is done this bind starts afresh and gets its own answer, not ours.
                    wait_deleted(state, name).await?;
                    continue;
                }
                // A bind adds namespaces: one the Grant holds keeps working for the binding that
                // uses it (narrowing is `DELETE /api/v1/grants/<name>/namespaces/<ns>`, after
                // the consumer let that namespace go).
                let mut current = existing.spec.namespaces.clone();
                current.sort();
                current.dedup();
                let mut union = current.clone();
                union.extend(request.namespaces.iter().cloned());
                union.sort();
                union.dedup();
                if union == current {
                    return Ok(Upsert::Unchanged { namespaces: current });
                }
                let previous_namespaces = existing.spec.namespaces.clone();
                let mut updated = existing;
                updated.spec.namespaces = union.clone();
                match provider
                    .replace(&grant_res(), None, name, &to_dynamic(&updated)?, &PostParams::default())
                    .await
                {
                    Ok(_) => {
                        return Ok(Upsert::Updated {
                            previous_namespaces,
                            namespaces: union,
                        });
                    }
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => return Err(e.into()),
                }
            }
        }
    }
    Err(ClusterError::stale("grants.iam.kbind.io", name).into())
}

/// What the Grant's status says about its current spec.
enum Issuance {
    Issued,
    Refused { reason: String, message: String },
    Pending,
}

fn issuance(grant: &Grant) -> Issuance {
    let Some(st) = &grant.status else {
        return Issuance::Pending;
    };
    if st.observed_generation.is_none() || st.observed_generation != grant.metadata.generation {
        return Issuance::Pending;
    }
    let Some(ready) = st.conditions.iter().find(|c| c.type_ == condition::READY) else {
        return Issuance::Pending;
    };
    if ready.status == status::TRUE && st.issued.is_some() {
        Issuance::Issued
    } else if ready.status == status::FALSE && reason::GRANT_REFUSALS.contains(&ready.reason.as_str()) {
        Issuance::Refused {
            reason: ready.reason.clone(),
            message: ready.message.clone(),
        }
    } else {
        Issuance::Pending
    }
}

/// Waits until the issuer provisioned the Grant's current generation, refused it, or the
/// deadline passed.
async fn wait_issued(state: &Gateway, name: &str) -> Result<(), GatewayError> {
    let timeout = state.config().bind_timeout;
    poll_grant(state.provider(), name, timeout, |grant| match grant {
        Some(grant) if grant.metadata.deletion_timestamp.is_none() => match issuance(&grant) {
            Issuance::Issued => Ok(Some(())),
            Issuance::Refused { reason, message } => Err(GatewayError::Refused { reason, message }),
            Issuance::Pending => Ok(None),
        },
        _ => Err(GatewayError::GrantRevoking(name.to_string())),
    })
    .await?
    .ok_or(GatewayError::BindTimeout(timeout.as_secs()))
}

/// `sha256:<hex>` of a pickup secret: all the provider ever stores of it.
pub(crate) fn pickup_hash(secret: &str) -> String {
    let digest = Sha256::digest(secret.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    format!("sha256:{hex}")
}

/// Stores a fresh pickup on the Grant (replacing any earlier one, whose URL stops working);
/// returns the secret and the expiry.
async fn store_pickup(
    state: &Gateway,
    name: &str,
    konnector_namespace: &str,
) -> Result<(String, String), GatewayError> {
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    let secret = base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes);
    let ttl = jiff::SignedDuration::try_from(state.config().pickup_ttl).unwrap_or(jiff::SignedDuration::from_secs(300));
    let expires = state.now().checked_add(ttl).unwrap_or(state.now());
    let expires_at = format_time(expires);
    let patch = serde_json::json!({
        "status": {"pickup": {
            "hash": pickup_hash(&secret),
            "expiresAt": expires_at,
            "konnectorNamespace": konnector_namespace,
            "claimedAt": null,
        }}
    });
    state
        .provider()
        .patch_status(&grant_res(), None, name, &Patch::Merge(patch), &PatchParams::default())
        .await?;
    Ok((secret, expires_at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(value: serde_json::Value) -> Vec<u8> {
        serde_json::to_vec(&value).unwrap()
    }

    #[test]
    fn validation_normalises_namespaces_and_defaults_the_konnector_namespace() {
        let ok = validate(&body(serde_json::json!({
            "export": "widgets",
            "consumerClusterUID": "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77",
            "namespaces": ["b", "a", "b"],
        })))
        .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(ok.namespaces, ["a", "b"]);
        assert_eq!(ok.konnector_namespace, "kbind");
    }

    #[test]
    fn validation_refuses_what_a_grant_could_not_hold() {
        let cases = [
            (
                serde_json::json!({"export": "w", "consumerClusterUID": "not-a-uuid"}),
                "InvalidConsumerClusterUID",
            ),
            (
                serde_json::json!({"export": "w", "consumerClusterUID": "0C1B5A3E-7F2D-4C4E-9A63-2D1F0E9B8A77"}),
                "InvalidConsumerClusterUID",
            ),
            (
                serde_json::json!({"export": "W!", "consumerClusterUID": "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77"}),
                "InvalidExport",
            ),
            (
                serde_json::json!({"export": "w", "consumerClusterUID": "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77", "namespaces": ["Team"]}),
                "InvalidNamespace",
            ),
            (
                serde_json::json!({"export": "w", "consumerClusterUID": "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77", "extra": 1}),
                "MalformedRequest",
            ),
        ];
        for (value, reason) in cases {
            match validate(&body(value.clone())) {
                Err(GatewayError::BadRequest { reason: got, .. }) => assert_eq!(got, reason, "{value}"),
                other => panic!("{value}: {:?}", other.err()),
            }
        }
    }

    #[test]
    fn pickup_hashes_are_sha256_hex() {
        assert_eq!(
            pickup_hash("abc"),
            "sha256:ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
        );
    }
}
