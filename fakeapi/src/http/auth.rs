//! Authentication by bearer token, and the `Caller` a request acts as.

use axum::extract::{Request, State};
use axum::http::{HeaderMap, header};
use axum::middleware::Next;
use axum::response::Response;

use super::errors::unauthorized;
use crate::rbac::{SYSTEM_UNAUTHENTICATED, UserInfo};
use crate::{Caller, FakeCluster};

/// The paths an unauthenticated client may reach (kube-apiserver's `system:public-info-viewer`).
const PUBLIC_PATHS: [&str; 4] = ["/healthz", "/livez", "/readyz", "/version"];

/// Puts the request's [`UserInfo`] into its extensions, or answers 401.
///
/// A `UserInfo` already present (put there by an outer layer, e.g. one that authenticated a TLS
/// client certificate) is kept. A request without credentials is anonymous only on the public
/// paths; an unknown token is always a 401.
pub(crate) async fn authenticate(State(cluster): State<FakeCluster>, mut request: Request, next: Next) -> Response {
    if request.extensions().get::<UserInfo>().is_none() {
        let user = match bearer_token(request.headers()) {
            Some(token) => cluster.authenticate(token),
            None if is_public(request.uri().path()) => Some(anonymous()),
            None => None,
        };
        let Some(user) = user else {
            return unauthorized();
        };
        request.extensions_mut().insert(user);
    }
    next.run(request).await
}

/// The caller of an authenticated request: its user and the field manager its User-Agent names.
pub(crate) fn caller(headers: &HeaderMap, user: UserInfo) -> Caller {
    let agent = headers
        .get(header::USER_AGENT)
        .and_then(|v| v.to_str().ok())
        .filter(|a| !a.is_empty())
        // kube-apiserver's name for a client without a User-Agent (`utilnet.GetHTTPClient`).
        .unwrap_or("unknown");
    Caller::new(user, agent)
}

/// The user of anonymous requests.
pub(crate) fn anonymous() -> UserInfo {
    UserInfo {
        name: "system:anonymous".into(),
        groups: vec![SYSTEM_UNAUTHENTICATED.into()],
    }
}

fn bearer_token(headers: &HeaderMap) -> Option<&str> {
    let value = headers.get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

fn is_public(path: &str) -> bool {
    PUBLIC_PATHS
        .iter()
        .any(|p| path == *p || path.strip_prefix(p).is_some_and(|rest| rest.starts_with('/')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    #[test]
    fn bearer_tokens_are_read_case_insensitively() {
        let mut headers = HeaderMap::new();
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("bearer abc"));
        assert_eq!(bearer_token(&headers), Some("abc"));
        headers.insert(header::AUTHORIZATION, HeaderValue::from_static("Basic abc"));
        assert_eq!(bearer_token(&headers), None);
    }

    #[test]
    fn only_health_and_version_are_public() {
        assert!(is_public("/healthz"));
        assert!(is_public("/readyz/ping"));
        assert!(is_public("/version"));
        assert!(!is_public("/versionx"));
        assert!(!is_public("/api"));
    }
}
