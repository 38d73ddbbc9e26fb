//! Every way a gateway request fails, as one enum with one mapping to an HTTP status and an
//! [`ApiError`] JSON body. Client mistakes go back as they are; provider failures become a
//! plain 502 whose details are logged, never echoed.

use axum::Json;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use kbind_api::service::ApiError;

use crate::auth::AuthError;
use crate::issuer::IssueError;

/// A failed gateway request. Messages never carry a credential or a pickup id.
#[derive(Debug, thiserror::Error)]
pub enum GatewayError {
    /// No credential, or one nobody recognises.
    #[error("{0}")]
    Unauthenticated(String),
    /// The identity provider cannot be reached.
    #[error("{0}")]
    AuthUnavailable(String),
    /// A browser session did not echo its CSRF token.
    #[error("this request changes state and must carry the session's CSRF token in the x-kbind-csrf header")]
    CsrfMismatch,
    /// The request is malformed; `reason` is CamelCase.
    #[error("{message}")]
    BadRequest {
        /// CamelCase reason.
        reason: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The body does not declare itself JSON (`Content-Type` missing or another type).
    #[error(
        "the request body must be JSON sent with Content-Type: application/json (this one came with {0}); with curl, add -H 'Content-Type: application/json'"
    )]
    UnsupportedMediaType(String),
    /// The body is larger than `--max-body-bytes`.
    #[error("the request body is larger than {0} bytes")]
    PayloadTooLarge(usize),
    /// The body did not arrive in full within `--body-read-timeout` (seconds).
    #[error("the request body did not arrive within {0}s")]
    BodyTimeout(u64),
    /// No Export of that name.
    #[error("no Export {0:?} on this provider; `kbind catalog` lists what can be bound")]
    ExportNotFound(String),
    /// The issuer refused or failed.
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// The issuer refused the Grant (its Ready condition said why).
    #[error("{message}")]
    Refused {
        /// The Grant condition's reason.
        reason: String,
        /// The Grant condition's message.
        message: String,
    },
    /// The issuer did not provision the Grant in time.
    #[error(
        "the issuer did not provision the grant within {0}s; check that kbind-backend runs with --issuer, then bind again"
    )]
    BindTimeout(u64),
    /// The Grant is being revoked.
    #[error("grant {0} is being revoked; bind again once it is gone")]
    GrantRevoking(String),
    /// No Grant of the caller has that name.
    #[error("you have no grant {0:?}")]
    GrantNotFound(String),
    /// The namespace is the Grant's last: dropping it would leave a Grant that binds nothing.
    #[error(
        "namespace {namespace:?} is the last of grant {grant}; revoke the grant instead (`kbind unbind` of its Connection)"
    )]
    LastNamespace {
        /// The Grant.
        grant: String,
        /// The namespace.
        namespace: String,
    },
    /// No pending pickup matches the id.
    #[error("no such pickup; bind again to get a new pickup URL")]
    PickupNotFound,
    /// The pickup was redeemed already or expired.
    #[error("{0}")]
    PickupGone(&'static str),
    /// The caller exceeded a rate limit.
    #[error("too many requests; try again in {0}s")]
    RateLimited(u64),
    /// No such route.
    #[error("no such API path")]
    RouteNotFound,
    /// The route does not take that method.
    #[error("method not allowed on this path")]
    MethodNotAllowed,
    /// A cache or dependency is not ready yet.
    #[error("{0}")]
    NotReady(String),
    /// The provider refused or failed a request.
    #[error("provider request failed: {0}")]
    Provider(#[from] kbind_cluster::Error),
}

impl GatewayError {
    /// The HTTP status and the CamelCase reason of this error.
    pub fn status_and_reason(&self) -> (StatusCode, String) {
        let (status, reason) = match self {
            GatewayError::Unauthenticated(_) => (StatusCode::UNAUTHORIZED, "Unauthenticated"),
            GatewayError::AuthUnavailable(_) => (StatusCode::SERVICE_UNAVAILABLE, "AuthUnavailable"),
            GatewayError::CsrfMismatch => (StatusCode::FORBIDDEN, "CSRFTokenMismatch"),
            GatewayError::BadRequest { reason, .. } => (StatusCode::BAD_REQUEST, *reason),
            GatewayError::UnsupportedMediaType(_) => (StatusCode::UNSUPPORTED_MEDIA_TYPE, "UnsupportedMediaType"),
            GatewayError::PayloadTooLarge(_) => (StatusCode::PAYLOAD_TOO_LARGE, "PayloadTooLarge"),
            GatewayError::BodyTimeout(_) => (StatusCode::REQUEST_TIMEOUT, "RequestTimeout"),
            GatewayError::ExportNotFound(_) => (StatusCode::NOT_FOUND, "ExportNotFound"),
            GatewayError::Issue(e) => {
                let status = match e {
                    IssueError::UnsupportedProvider(_) => StatusCode::NOT_IMPLEMENTED,
                    IssueError::Cluster(_) => StatusCode::BAD_GATEWAY,
                    _ => StatusCode::CONFLICT,
                };
                return (status, e.reason().to_string());
            }
            GatewayError::Refused { reason, .. } => {
                let status = if reason == "UnsupportedProvider" {
                    StatusCode::NOT_IMPLEMENTED
                } else {
                    StatusCode::CONFLICT
                };
                return (status, reason.clone());
            }
            GatewayError::BindTimeout(_) => (StatusCode::GATEWAY_TIMEOUT, "BindTimeout"),
            GatewayError::GrantRevoking(_) => (StatusCode::CONFLICT, "GrantRevoking"),
            GatewayError::GrantNotFound(_) => (StatusCode::NOT_FOUND, "GrantNotFound"),
            GatewayError::LastNamespace { .. } => (StatusCode::CONFLICT, "LastNamespace"),
            GatewayError::PickupNotFound => (StatusCode::NOT_FOUND, "PickupNotFound"),
            GatewayError::PickupGone(_) => (StatusCode::GONE, "PickupGone"),
            GatewayError::RateLimited(_) => (StatusCode::TOO_MANY_REQUESTS, "TooManyRequests"),
            GatewayError::RouteNotFound => (StatusCode::NOT_FOUND, "NotFound"),
            GatewayError::MethodNotAllowed => (StatusCode::METHOD_NOT_ALLOWED, "MethodNotAllowed"),
            GatewayError::NotReady(_) => (StatusCode::SERVICE_UNAVAILABLE, "NotReady"),
            GatewayError::Provider(_) => (StatusCode::BAD_GATEWAY, "ProviderError"),
        };
        (status, reason.to_string())
    }

    /// A 400 with `reason`.
    pub(crate) fn bad_request(reason: &'static str, message: impl Into<String>) -> Self {
        GatewayError::BadRequest {
            reason,
            message: message.into(),
        }
    }
}

impl From<AuthError> for GatewayError {
    fn from(err: AuthError) -> Self {
        match err {
            AuthError::Unauthenticated(message) => GatewayError::Unauthenticated(message),
            AuthError::Unavailable(message) => GatewayError::AuthUnavailable(message),
        }
    }
}

impl IntoResponse for GatewayError {
    fn into_response(self) -> Response {
        let (status, reason) = self.status_and_reason();
        let internal = matches!(
            self,
            GatewayError::Provider(_) | GatewayError::Issue(IssueError::Cluster(_))
        );
        let message = if internal {
            // Why: provider messages name internal objects and addresses; the log keeps them.
            tracing::warn!(error = %self, "provider request failed");
            "the provider cluster failed a request; try again later".to_string()
        } else {
            self.to_string()
        };
        let body = ApiError {
            code: status.as_u16(),
            reason,
            message,
        };
        let mut response = (status, Json(body)).into_response();
        if let GatewayError::RateLimited(wait) = self
            && let Ok(value) = http::HeaderValue::from_str(&wait.max(1).to_string())
        {
            response.headers_mut().insert(http::header::RETRY_AFTER, value);
        }
        response
    }
}
