//! Reading credentials from a request and answering auth failures as `ApiError` JSON.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use kbind_api::service::ApiError;

use subtle::ConstantTimeEq as _;

use super::{AuthError, Caller, Via};

/// The token of an `Authorization: Bearer <token>` header (scheme case-insensitive).
pub(crate) fn bearer_token(headers: &http::HeaderMap) -> Option<&str> {
    let value = headers.get(http::header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// An error answer: the status and an [`ApiError`] body.
pub(crate) fn api_error(status: StatusCode, reason: &str, message: impl Into<String>) -> Response {
    let body = ApiError {
        code: status.as_u16(),
        reason: reason.to_owned(),
        message: message.into(),
    };
    (status, Json(body)).into_response()
}

/// Whether the request echoes `csrf_token` in [`kbind_api::service::CSRF_HEADER`] (constant time).
pub(crate) fn csrf_matches(headers: &http::HeaderMap, csrf_token: &str) -> bool {
    let echoed = headers
        .get(kbind_api::service::CSRF_HEADER)
        .map(|v| v.as_bytes())
        .unwrap_or_default();
    !csrf_token.is_empty() && bool::from(echoed.ct_eq(csrf_token.as_bytes()))
}

impl Caller {
    /// Whether this caller may make a state-changing request: bearer callers always (browsers do
    /// not send the header on their own); session callers only when the request echoes their
    /// CSRF token in [`kbind_api::service::CSRF_HEADER`].
    pub fn passes_csrf(&self, headers: &http::HeaderMap) -> bool {
        match &self.via {
            Via::Bearer => true,
            Via::Session { csrf_token } => csrf_matches(headers, csrf_token),
        }
    }
}

impl AuthError {
    /// The HTTP status this error answers with: 401, or 503 when the IdP is unreachable.
    pub fn status(&self) -> StatusCode {
        match self {
            AuthError::Unauthenticated(_) => StatusCode::UNAUTHORIZED,
            AuthError::Unavailable(_) => StatusCode::SERVICE_UNAVAILABLE,
        }
    }

    /// The JSON body the gateway answers this error with.
    pub fn api_error(&self) -> ApiError {
        let reason = match self {
            AuthError::Unauthenticated(_) => "Unauthenticated",
            AuthError::Unavailable(_) => "IdentityProviderUnavailable",
        };
        ApiError {
            code: self.status().as_u16(),
            reason: reason.into(),
            message: self.to_string(),
        }
    }
}

impl IntoResponse for AuthError {
    fn into_response(self) -> Response {
        let mut response = (self.status(), Json(self.api_error())).into_response();
        if matches!(self, AuthError::Unauthenticated(_)) {
            response
                .headers_mut()
                .insert(http::header::WWW_AUTHENTICATE, http::HeaderValue::from_static("Bearer"));
        }
        response
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::Identity;

    fn caller(via: Via) -> Caller {
        Caller {
            identity: Identity {
                subject: "oidc:https://idp#a".into(),
                name: None,
            },
            via,
        }
    }

    fn with_csrf(value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(kbind_api::service::CSRF_HEADER, value.parse().expect("ascii"));
        h
    }

    #[test]
    fn a_session_passes_csrf_only_with_its_own_token_and_bearer_always() {
        let session = caller(Via::Session {
            csrf_token: "tok-1".into(),
        });
        assert!(session.passes_csrf(&with_csrf("tok-1")));
        assert!(!session.passes_csrf(&with_csrf("tok-2")));
        assert!(!session.passes_csrf(&with_csrf("")));
        assert!(!session.passes_csrf(&http::HeaderMap::new()));
        assert!(caller(Via::Bearer).passes_csrf(&http::HeaderMap::new()));
    }

    #[test]
    fn bearer_tokens_are_read_case_insensitively_and_empty_ones_are_none() {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "BEARER  abc ".parse().expect("ascii"));
        assert_eq!(bearer_token(&h), Some("abc"));
        h.insert(http::header::AUTHORIZATION, "Bearer ".parse().expect("ascii"));
        assert_eq!(bearer_token(&h), None);
        h.insert(http::header::AUTHORIZATION, "Basic abc".parse().expect("ascii"));
        assert_eq!(bearer_token(&h), None);
    }

    #[test]
    fn auth_errors_answer_401_or_503_with_an_api_error() {
        let e = AuthError::Unauthenticated("the session has expired".into());
        assert_eq!(e.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(e.api_error().reason, "Unauthenticated");
        let response = e.into_response();
        assert!(response.headers().contains_key(http::header::WWW_AUTHENTICATE));
        let e = AuthError::Unavailable("idp down".into());
        assert_eq!(e.api_error().code, 503);
        assert_eq!(e.api_error().reason, "IdentityProviderUnavailable");
    }
}
