//! ServiceAccounts: `serviceaccounts/token` (TokenRequest) issues a bearer token the cluster
//! then authenticates as the ServiceAccount.

use kbind_cluster::error::Cause;
use kbind_cluster::{Error, Result};
use serde_json::{Value, json};

use super::Strategy;
use crate::cluster::{Inner, Token};
use crate::meta;
use crate::rbac::UserInfo;
use crate::registry::ResourceInfo;

/// A TokenRequest's lifetime when it asks for none (kube-apiserver's default).
const DEFAULT_TOKEN_SECONDS: i64 = 3600;

/// The shortest lifetime a TokenRequest may ask for (kube-apiserver refuses less).
const MIN_TOKEN_SECONDS: i64 = 600;

/// The issuer and default audience of the tokens (kube-apiserver's in-cluster default).
const DEFAULT_AUDIENCE: &str = "https://kubernetes.default.svc.cluster.local";

/// The strategy of `serviceaccounts`.
pub(crate) struct ServiceAccounts;

impl Strategy for ServiceAccounts {
    fn create_subresource(
        &self,
        cluster: &Inner,
        info: &ResourceInfo,
        ns: &str,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value> {
        if subresource != "token" {
            return Err(Error::MethodNotAllowed {
                message: format!("create is not supported on {}/{subresource}", info.resource.plural),
            });
        }
        issue_token(cluster, info, ns, name, body)
    }
}

/// Answers a TokenRequest for the ServiceAccount `ns/name` and remembers the token it issues.
fn issue_token(cluster: &Inner, info: &ResourceInfo, ns: &str, name: &str, body: &Value) -> Result<Value> {
    let seconds = body
        .pointer("/spec/expirationSeconds")
        .and_then(Value::as_i64)
        .unwrap_or(DEFAULT_TOKEN_SECONDS);
    if seconds < MIN_TOKEN_SECONDS {
        // kube-apiserver's ValidateTokenRequest, as a 422.
        return Err(Error::Invalid {
            message: format!(
                "TokenRequest.authentication.k8s.io \"\" is invalid: spec.expirationSeconds: Invalid value: {seconds}: \
                 may not specify a duration less than 10 minutes"
            ),
            causes: vec![Cause {
                reason: "FieldValueInvalid".into(),
                message: "may not specify a duration less than 10 minutes".into(),
                field: "spec.expirationSeconds".into(),
            }],
        });
    }
    let issued = cluster.clock.now();
    let expires = issued
        .checked_add(jiff::SignedDuration::from_secs(seconds))
        .map_err(|_| Error::BadRequest {
            message: "spec.expirationSeconds is out of range".into(),
        })?;
    let audiences = match body.pointer("/spec/audiences").and_then(Value::as_array) {
        Some(list) if !list.is_empty() => Value::Array(list.clone()),
        _ => json!([DEFAULT_AUDIENCE]),
    };
    let (token, sa_uid, user) = {
        let mut state = cluster.lock();
        let sa = state
            .get(&info.group_resource(), &(ns.to_string(), name.to_string()))
            .cloned()
            .ok_or_else(|| Error::not_found("serviceaccounts", name))?;
        let mut raw = [0u8; 32];
        rand::RngCore::fill_bytes(&mut state.rng, &mut raw);
        let user = UserInfo {
            name: format!("system:serviceaccount:{ns}:{name}"),
            groups: vec![
                "system:serviceaccounts".into(),
                format!("system:serviceaccounts:{ns}"),
                "system:authenticated".into(),
            ],
        };
        let uid = meta::uid(&sa).map(str::to_string);
        let claims = json!({
            "aud": audiences,
            "exp": expires.as_second(),
            "iat": issued.as_second(),
            "nbf": issued.as_second(),
            "iss": DEFAULT_AUDIENCE,
            "jti": raw[..16].iter().map(|b| format!("{b:02x}")).collect::<String>(),
            "kubernetes.io": {"namespace": ns, "serviceaccount": {"name": name, "uid": uid}},
            "sub": user.name,
        });
        (service_account_jwt(&claims, &raw[16..]), uid, user)
    };
    {
        let mut tokens = cluster.tokens.lock();
        // Expired tokens are never accepted again: forgetting them keeps a long run's map small.
        tokens.retain(|_, t| t.expires.is_none_or(|at| at > issued));
        tokens.insert(
            token.clone(),
            Token {
                user,
                service_account: sa_uid,
                expires: Some(expires),
            },
        );
    }
    let mut answer = body.clone();
    answer["apiVersion"] = json!("authentication.k8s.io/v1");
    answer["kind"] = json!("TokenRequest");
    answer["status"] = json!({"token": token, "expirationTimestamp": kbind_cluster::clock::format_time(expires)});
    Ok(answer)
}

/// A token shaped as kube-apiserver's: a JWT with these claims, signed with `signature` (random
/// bytes nobody verifies: the cluster looks tokens up, and the randomness makes them unguessable).
fn service_account_jwt(claims: &Value, signature: &[u8]) -> String {
    use base64::Engine as _;
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    format!(
        "{}.{}.{}",
        b64.encode(br#"{"alg":"RS256","kid":"fakeapi"}"#),
        b64.encode(claims.to_string()),
        b64.encode(signature)
    )
}
