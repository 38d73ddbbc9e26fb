//! `GET /api/v1/pickup/<grant>.<secret>`: the bundle, once. The claim is a status write with a
//! resourceVersion precondition, so of any number of concurrent pickups on any number of
//! replicas exactly one wins; only then is a credential minted and the bundle assembled.

use axum::extract::rejection::PathRejection;
use axum::extract::{Path, State};
use axum::response::{IntoResponse, Response};
use http::header::{ACCEPT, CACHE_CONTROL, CONTENT_TYPE};
use http::{HeaderMap, HeaderValue};
use kbind_api::consts::DEFAULT_NAMESPACE;
use kbind_api::{Export, Grant, ResourceScope};
use kbind_cluster::clock::format_time;
use kbind_cluster::{ApiResource, ClusterClientExt, DynamicObject, PostParams, from_dynamic};

use super::bind::pickup_hash;
use super::bundle::{BundleFormat, bundle_objects};
use super::metrics::outcome;
use super::{Gateway, GatewayError, catalog, is_dns_label};
use crate::issuer::IssueError;
use subtle::ConstantTimeEq;

/// How many times a claim that met another status write is re-evaluated.
const CLAIM_ATTEMPTS: usize = 8;

/// `GET /api/v1/pickup/{id}`.
pub(crate) async fn pickup(
    State(state): State<Gateway>,
    id: Result<Path<String>, PathRejection>,
    headers: HeaderMap,
) -> Response {
    // An id that does not even decode (invalid UTF-8) cannot be a pickup: not found, as JSON
    // like every other answer, not axum's plain-text rejection.
    let Ok(Path(id)) = id else {
        state.metrics().pickup(outcome::NOT_FOUND);
        return GatewayError::PickupNotFound.into_response();
    };
    let format = if headers
        .get_all(ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .any(|v| v.contains("application/json"))
    {
        BundleFormat::Json
    } else {
        BundleFormat::Yaml
    };
    let result = redeem(&state, &id, format).await;
    state.metrics().pickup(match &result {
        Ok(_) => outcome::DELIVERED,
        Err(GatewayError::PickupGone(_)) => outcome::GONE,
        Err(GatewayError::PickupNotFound) => outcome::NOT_FOUND,
        Err(_) => outcome::FAILED,
    });
    match result {
        Ok(body) => {
            let content_type = match format {
                BundleFormat::Json => "application/json",
                BundleFormat::Yaml => "application/yaml",
            };
            let mut response = body.into_response();
            let h = response.headers_mut();
            h.insert(CONTENT_TYPE, HeaderValue::from_static(content_type));
            // The bundle carries a credential: no cache may keep it.
            h.insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
            response
        }
        Err(e) => e.into_response(),
    }
}

/// The parts of a pickup id; anything that cannot be one is simply not found.
fn parse_id(id: &str) -> Option<(&str, &str)> {
    let (grant, secret) = id.split_once('.')?;
    let plausible = grant.starts_with("grant-")
        && is_dns_label(grant)
        && !secret.is_empty()
        && secret.len() <= 128
        && secret
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    plausible.then_some((grant, secret))
}

fn grant_res() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

/// Claims the pickup and assembles the bundle.
async fn redeem(state: &Gateway, id: &str, format: BundleFormat) -> Result<String, GatewayError> {
    let (name, secret) = parse_id(id).ok_or(GatewayError::PickupNotFound)?;
    let hash = pickup_hash(secret);
    let provider = state.provider();
    for _ in 0..CLAIM_ATTEMPTS {
        let Some(mut object) = provider.get_opt(&grant_res(), None, name).await? else {
            return Err(GatewayError::PickupNotFound);
        };
        let grant: Grant = from_dynamic(object.clone())?;
        let pickup = grant
            .status
            .as_ref()
            .and_then(|s| s.pickup.as_ref())
            .filter(|p| bool::from(p.hash.as_bytes().ct_eq(hash.as_bytes())))
            .ok_or(GatewayError::PickupNotFound)?;
        if pickup.claimed_at.is_some() {
            return Err(GatewayError::PickupGone(
                "this pickup URL was used already; bind again for a new one",
            ));
        }
        let now = state.now();
        if now >= pickup.expires_at.0 {
            return Err(GatewayError::PickupGone(
                "this pickup URL expired; bind again for a new one",
            ));
        }
        if grant.metadata.deletion_timestamp.is_some() {
            return Err(GatewayError::PickupGone(
                "the grant of this pickup URL is being revoked; bind again once it is gone",
            ));
        }
        if !is_issued(&grant) {
            return Err(IssueError::NotIssued.into());
        }
        let konnector_namespace = pickup
            .konnector_namespace
            .clone()
            .unwrap_or_else(|| DEFAULT_NAMESPACE.to_string());
        let (export, scopes) = catalog::export_with_scopes(provider, &grant.spec.export).await?;

        let claimed_at = format_time(now);
        object.data["status"]["pickup"]["claimedAt"] = serde_json::Value::String(claimed_at.clone());
        match provider
            .replace_status(&grant_res(), None, name, &object, &PostParams::default())
            .await
        {
            Ok(claimed) => {
                return deliver(
                    state,
                    claimed,
                    &grant,
                    &export,
                    &scopes,
                    &konnector_namespace,
                    &hash,
                    format,
                )
                .await;
            }
            // Someone else wrote the Grant's status since we read it: maybe another pickup won,
            // maybe the issuer wrote; read again and decide again.
            Err(e) if e.is_conflict() => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Err(GatewayError::NotReady(
        "the grant changed too often to claim the pickup; try again".into(),
    ))
}

fn is_issued(grant: &Grant) -> bool {
    let Some(st) = &grant.status else { return false };
    st.issued.is_some()
        && st.observed_generation.is_some()
        && st.observed_generation == grant.metadata.generation
        && st
            .conditions
            .iter()
            .any(|c| c.type_ == kbind_api::consts::condition::READY && c.status == kbind_api::consts::status::TRUE)
}

/// After a won claim: mint the credential and render the bundle. If minting fails the claim is
/// released, so a provider hiccup does not burn the user's only URL.
#[allow(clippy::too_many_arguments)]
async fn deliver(
    state: &Gateway,
    claimed: DynamicObject,
    grant: &Grant,
    export: &Export,
    scopes: &[(String, ResourceScope)],
    konnector_namespace: &str,
    hash: &str,
    format: BundleFormat,
) -> Result<String, GatewayError> {
    let name = grant.metadata.name.clone().unwrap_or_default();
    let credential = match state.inner.issuer.credential(grant).await {
        Ok(credential) => credential,
        Err(e) => {
            release(state, claimed, hash).await;
            return Err(e.into());
        }
    };
    let bundle = bundle_objects(
        state.config(),
        &name,
        export,
        scopes,
        &grant.spec.namespaces,
        konnector_namespace,
        &credential.token,
    );
    tracing::info!(grant = %name, "pickup redeemed");
    bundle.render(format).map_err(|e| {
        tracing::warn!(grant = %name, error = %e, "failed to render a bundle");
        GatewayError::NotReady("the bundle could not be rendered".into())
    })
}

/// Undoes our claim if nothing else touched the Grant's status since (resourceVersion precondition).
async fn release(state: &Gateway, mut claimed: DynamicObject, hash: &str) {
    let ours = claimed
        .data
        .pointer("/status/pickup/hash")
        .and_then(|v| v.as_str())
        .is_some_and(|h| h == hash);
    if !ours {
        return;
    }
    if let Some(pickup) = claimed
        .data
        .pointer_mut("/status/pickup")
        .and_then(|p| p.as_object_mut())
    {
        pickup.remove("claimedAt");
    }
    let name = claimed.metadata.name.clone().unwrap_or_default();
    if let Err(e) = state
        .provider()
        .replace_status(&grant_res(), None, &name, &claimed, &PostParams::default())
        .await
    {
        tracing::warn!(grant = %name, error = %e, "failed to release the claim of a failed pickup");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_split_into_a_grant_name_and_a_secret() {
        assert_eq!(
            parse_id("grant-0123456789abcdef0123.abc_DEF-9"),
            Some(("grant-0123456789abcdef0123", "abc_DEF-9"))
        );
        for bad in [
            "",
            "grant-x",
            "grant-x.",
            ".secret",
            "other-x.secret",
            "grant-x.se/cret",
            "GRANT-x.s",
        ] {
            assert_eq!(parse_id(bad), None, "{bad:?}");
        }
    }
}
