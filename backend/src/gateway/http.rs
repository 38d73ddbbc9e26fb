//! Request plumbing shared by the routes: who is calling (and the CSRF check for browser
//! sessions), the log-and-metrics middleware that only ever names route templates, and the small
//! routes (provider metadata, whoami, health).

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, MatchedPath, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use http::StatusCode;
use http::request::Parts;
use kbind_api::Export;
use kbind_api::service::{ProviderInfo, WhoAmI, path};
use kbind_cluster::{ApiResource, ListParams};

use super::{Gateway, GatewayError, ratelimit};
use crate::auth::{AuthError, Authenticator, Caller, Via};

/// How long the provider check's answer is reused: `/api/v1/provider` needs no sign-in, so
/// it must not turn every anonymous request into provider requests.
const PROVIDER_CHECK_TTL: Duration = Duration::from_secs(30);

/// An authenticated caller.
pub(crate) struct Authenticated(pub Caller);

impl FromRequestParts<Gateway> for Authenticated {
    type Rejection = GatewayError;

    async fn from_request_parts(parts: &mut Parts, state: &Gateway) -> Result<Self, Self::Rejection> {
        // A credential that was refused too often from this client is refused again without
        // being checked; any other credential is checked, so nobody can throttle a credential
        // they do not hold (see ratelimit's module doc).
        let client = ratelimit::credential_key(
            &parts.headers,
            ratelimit::peer_of(&parts.extensions),
            state.config().trusted_proxies,
        );
        let failures = &state.inner.auth_failures;
        failures.check(client).map_err(ratelimit::refusal)?;
        // The chain's rule: the first method that recognises the request decides; a recognised
        // but invalid credential is refused, never passed on to the next method.
        match state.inner.authenticators.authenticate(&parts.headers).await {
            Ok(Some(caller)) => Ok(Authenticated(caller)),
            Ok(None) => Err(GatewayError::Unauthenticated(
                "sign in first: send a bearer token, or log in through the web UI".into(),
            )),
            Err(e @ AuthError::Unauthenticated(_)) => {
                // Only a credential that was presented and refused counts: no credential at
                // all, or an identity provider that is down, is not a guess.
                failures.take(client).map_err(ratelimit::refusal)?;
                Err(e.into())
            }
            Err(e) => Err(e.into()),
        }
    }
}

/// An authenticated caller allowed to change state: a browser session must echo its CSRF token.
pub(crate) struct Writer(pub Caller);

impl FromRequestParts<Gateway> for Writer {
    type Rejection = GatewayError;

    async fn from_request_parts(parts: &mut Parts, state: &Gateway) -> Result<Self, Self::Rejection> {
        let Authenticated(caller) = Authenticated::from_request_parts(parts, state).await?;
        check_csrf(&caller, &parts.headers)?;
        Ok(Writer(caller))
    }
}

/// Bearer callers pass (browsers never add that header on their own); a session must send
/// its token in [`kbind_api::service::CSRF_HEADER`].
pub(crate) fn check_csrf(caller: &Caller, headers: &http::HeaderMap) -> Result<(), GatewayError> {
    if caller.passes_csrf(headers) {
        Ok(())
    } else {
        Err(GatewayError::CsrfMismatch)
    }
}

/// Logs and counts every request by its route template, never by its URI: pickup ids are
/// capabilities and must not reach logs or metrics.
pub(crate) async fn observe(State(state): State<Gateway>, request: Request, next: Next) -> Response {
    let route = request
        .extensions()
        .get::<MatchedPath>()
        .map(|m| m.as_str().to_string())
        .unwrap_or_else(|| "unmatched".to_string());
    let method = request.method().clone();
    let started = tokio::time::Instant::now();
    let response = next.run(request).await;
    let elapsed = started.elapsed();
    let status = response.status();
    state
        .metrics()
        .observe_request(method.as_str(), &route, status.as_u16(), elapsed);
    let probe = [path::HEALTHZ, path::READYZ, path::METRICS].contains(&route.as_str());
    if status.is_server_error() {
        tracing::warn!(%method, %route, status = status.as_u16(), elapsed_ms = elapsed.as_millis() as u64, "request failed");
    } else if probe {
        // Probes and scrapes come every few seconds; they would drown the requests users make.
        tracing::debug!(%method, %route, status = status.as_u16(), elapsed_ms = elapsed.as_millis() as u64, "request");
    } else {
        tracing::info!(%method, %route, status = status.as_u16(), elapsed_ms = elapsed.as_millis() as u64, "request");
    }
    response
}

/// Gives every request body `timeout` from its headers to arrive in full, so a slow body cannot
/// hold a connection slot (`--max-connections`) for longer. hyper has no body timer, and a
/// per-chunk idle timer would not do: a byte every few seconds keeps it alive. A route reading
/// its body past the deadline gets an error; whatever it answered is replaced by a 408 that
/// closes the connection, which frees the slot (the rest of the body is never read).
pub(crate) async fn body_deadline(State(timeout): State<Duration>, request: Request, next: Next) -> Response {
    let expired = Arc::new(AtomicBool::new(false));
    let (parts, body) = request.into_parts();
    let body = Body::new(DeadlineBody {
        inner: body,
        deadline: Box::pin(tokio::time::sleep(timeout)),
        expired: expired.clone(),
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    if !expired.load(Ordering::Acquire) {
        return response;
    }
    let seconds = timeout.as_secs() + u64::from(timeout.subsec_nanos() > 0);
    let mut response = GatewayError::BodyTimeout(seconds).into_response();
    response
        .headers_mut()
        .insert(http::header::CONNECTION, http::HeaderValue::from_static("close"));
    response
}

/// A request body that fails once its deadline passes while it is still waiting for data.
struct DeadlineBody {
    inner: Body,
    deadline: Pin<Box<tokio::time::Sleep>>,
    /// Set when the deadline cut the body off, for [`body_deadline`]'s answer.
    expired: Arc<AtomicBool>,
}

/// The error a body cut off by its deadline yields to the route reading it.
#[derive(Debug, thiserror::Error)]
#[error("the request body did not arrive in time")]
struct BodyTimedOut;

impl hyper::body::Body for DeadlineBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<hyper::body::Frame<Bytes>, axum::Error>>> {
        let this = self.get_mut();
        // Data already there is delivered even past the deadline: only waiting is cut off.
        if let Poll::Ready(frame) = Pin::new(&mut this.inner).poll_frame(cx) {
            return Poll::Ready(frame);
        }
        if this.deadline.as_mut().poll(cx).is_ready() {
            this.expired.store(true, Ordering::Release);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.inner.size_hint()
    }
}

/// The JSON 405 every route answers for a method it does not take.
pub(crate) async fn method_not_allowed() -> GatewayError {
    GatewayError::MethodNotAllowed
}

/// `GET /api/v1/provider`.
pub(crate) async fn provider(State(state): State<Gateway>) -> Json<ProviderInfo> {
    let config = state.config();
    Json(ProviderInfo {
        name: config.provider_name.clone(),
        provider_url: config.provider_url.clone(),
        auth_methods: state.inner.authenticators.methods(),
        issuer: state.inner.issuer.name().to_string(),
        unavailable: unavailable(&state).await,
        version: env!("CARGO_PKG_VERSION").to_string(),
    })
}

/// Why binding cannot work on this provider, from the issuer; cached briefly.
async fn unavailable(state: &Gateway) -> Option<String> {
    let mut cached = state.inner.provider_check.lock().await;
    if let Some((at, answer)) = cached.as_ref()
        && at.elapsed() < PROVIDER_CHECK_TTL
    {
        return answer.clone();
    }
    let answer = match state.inner.issuer.check_provider().await {
        Ok(()) => None,
        // A provider hiccup says nothing about whether binding can work.
        Err(crate::issuer::IssueError::Cluster(e)) => {
            tracing::warn!(error = %e, "the issuer could not check the provider");
            return None;
        }
        Err(e) => Some(e.to_string()),
    };
    *cached = Some((tokio::time::Instant::now(), answer.clone()));
    answer
}

/// `GET /api/v1/whoami`.
pub(crate) async fn whoami(Authenticated(caller): Authenticated) -> Json<WhoAmI> {
    Json(WhoAmI {
        subject: caller.identity.subject,
        name: caller.identity.name,
        csrf_token: match caller.via {
            Via::Bearer => None,
            Via::Session { csrf_token } => Some(csrf_token),
        },
    })
}

/// `GET /healthz`: the process serves.
pub(crate) async fn healthz() -> &'static str {
    "ok"
}

/// `GET /readyz`: the provider answers and the catalog caches are filled.
pub(crate) async fn readyz(State(state): State<Gateway>) -> Response {
    let probe = ListParams::default().limit(1);
    let res = ApiResource::erase::<Export>(&());
    match state.provider().list(&res, None, &probe).await {
        Err(e) => {
            tracing::warn!(error = %e, "readiness: the provider does not answer");
            (StatusCode::SERVICE_UNAVAILABLE, "the provider does not answer").into_response()
        }
        Ok(_) if !state.inner.catalog.is_ready() => {
            (StatusCode::SERVICE_UNAVAILABLE, "the catalog is not cached yet").into_response()
        }
        Ok(_) => "ok".into_response(),
    }
}
