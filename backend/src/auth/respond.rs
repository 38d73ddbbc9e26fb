//! Reading credentials from a request and answering auth failures as `ApiError` JSON.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use kbind_api::service::ApiError;

use super::AuthError;

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
