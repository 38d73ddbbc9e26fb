//! The admin API of a served cluster (`/fakeapi/v1/...`): faults, users and inspection,
//! reachable only with the admin token.

use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post, put};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::users::{Token, UserSpec};
use crate::{ErrorRule, FakeCluster, InjectedError};

/// The path prefix of every admin route.
pub const ADMIN_PREFIX: &str = "/fakeapi/v1";

/// The Kubernetes verbs an injected error can be limited to.
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

#[derive(Clone)]
struct AdminState {
    cluster: FakeCluster,
    admin_token: Token,
}

/// The admin API of `cluster`, under [`ADMIN_PREFIX`], for requests bearing `admin_token`.
pub fn admin_router(cluster: FakeCluster, admin_token: Token) -> Router {
    let state = AdminState { cluster, admin_token };
    Router::new()
        .route(&path("partition"), post(partition))
        .route(&path("heal"), post(heal))
        .route(&path("latency"), put(set_latency))
        .route(&path("errors"), post(inject_error).delete(clear_errors))
        .route(&path("drop-watches"), post(drop_watches))
        .route(&path("compact"), post(compact))
        .route(&path("replace"), post(replace))
        .route(&path("garbage-collector"), put(set_garbage_collector))
        .route(&path("users"), post(add_user))
        .route(&path("identity"), get(identity))
        .route(&path("writes"), get(writes))
        .route_layer(middleware::from_fn_with_state(state.clone(), require_admin))
        .with_state(state)
}

fn path(route: &str) -> String {
    format!("{ADMIN_PREFIX}/{route}")
}

/// An admin API failure, answered as a Kubernetes `Status`.
#[derive(Debug)]
enum AdminError {
    Unauthorized,
    Forbidden { user: String, verb: String, path: String },
    BadRequest(String),
    TokenTaken,
}

impl IntoResponse for AdminError {
    fn into_response(self) -> Response {
        let (code, reason, message) = match self {
            Self::Unauthorized => (StatusCode::UNAUTHORIZED, "Unauthorized", "Unauthorized".to_string()),
            // kube-apiserver's wording for a non-resource URL RBAC refuses.
            Self::Forbidden { user, verb, path } => (
                StatusCode::FORBIDDEN,
                "Forbidden",
                format!("forbidden: User \"{user}\" cannot {verb} path \"{path}\""),
            ),
            Self::BadRequest(message) => (StatusCode::BAD_REQUEST, "BadRequest", message),
            Self::TokenTaken => (
                StatusCode::CONFLICT,
                "AlreadyExists",
                "the token is already registered to a user".to_string(),
            ),
        };
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {},
            "status": "Failure", "message": message, "reason": reason, "code": code.as_u16(),
        });
        (code, axum::Json(body)).into_response()
    }
}

type AdminResult<T = StatusCode> = Result<T, AdminError>;

async fn require_admin(State(state): State<AdminState>, request: Request, next: Next) -> Response {
    let Some(token) = bearer_token(&request) else {
        return AdminError::Unauthorized.into_response();
    };
    if state.admin_token.matches(token) {
        return next.run(request).await;
    }
    match state.cluster.authenticate(token) {
        Some(user) => AdminError::Forbidden {
            user: user.name,
            verb: request.method().as_str().to_ascii_lowercase(),
            path: request.uri().path().to_string(),
        }
        .into_response(),
        None => AdminError::Unauthorized.into_response(),
    }
}

fn bearer_token(request: &Request) -> Option<&str> {
    let value = request.headers().get(header::AUTHORIZATION)?.to_str().ok()?;
    let (scheme, token) = value.split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Parses a JSON body, answering a Kubernetes-style 400 for what does not fit.
fn parse<T: DeserializeOwned>(body: &Bytes) -> AdminResult<T> {
    serde_json::from_slice(body).map_err(|e| AdminError::BadRequest(format!("invalid request body: {e}")))
}

async fn partition(State(state): State<AdminState>) -> StatusCode {
    tracing::info!(cluster = state.cluster.name(), "admin: partition");
    state.cluster.partition();
    StatusCode::NO_CONTENT
}

async fn heal(State(state): State<AdminState>) -> StatusCode {
    tracing::info!(cluster = state.cluster.name(), "admin: heal");
    state.cluster.heal();
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct LatencyRequest {
    /// Milliseconds added before every answer; `null` or 0 removes the latency.
    ms: Option<u64>,
}

async fn set_latency(State(state): State<AdminState>, body: Bytes) -> AdminResult {
    let request: LatencyRequest = parse(&body)?;
    let latency = request.ms.filter(|ms| *ms > 0).map(Duration::from_millis);
    tracing::info!(cluster = state.cluster.name(), ?latency, "admin: set latency");
    state.cluster.set_latency(latency);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
struct ErrorRequest {
    verb: Option<String>,
    resource: Option<String>,
    code: u16,
    retry_after_seconds: Option<u32>,
    times: Option<u32>,
}

impl ErrorRequest {
    fn into_rule(self) -> AdminResult<ErrorRule> {
        if let Some(verb) = self.verb.as_deref().filter(|v| !VERBS.contains(v)) {
            return Err(AdminError::BadRequest(format!(
                "verb {verb:?} is not one of {}",
                VERBS.join(", ")
            )));
        }
        if self.resource.as_deref() == Some("") {
            return Err(AdminError::BadRequest(
                "resource must not be empty (omit it for all)".into(),
            ));
        }
        if self.retry_after_seconds.is_some() && self.code != 429 {
            return Err(AdminError::BadRequest(
                "retryAfterSeconds only applies to code 429".into(),
            ));
        }
        let error = match self.code {
            500 => InjectedError::Internal,
            429 => InjectedError::TooManyRequests {
                retry_after_seconds: self.retry_after_seconds.unwrap_or(1),
            },
            403 => InjectedError::Forbidden,
            other => {
                return Err(AdminError::BadRequest(format!(
                    "code {other} is not one of 500, 429, 403"
                )));
            }
        };
        let rule = ErrorRule::new(self.verb.as_deref(), self.resource.as_deref(), error);
        match self.times {
            None => Ok(rule),
            Some(0) => Err(AdminError::BadRequest(
                "times must be at least 1 (omit it for always)".into(),
            )),
            Some(n) => Ok(rule.times(n)),
        }
    }
}

async fn inject_error(State(state): State<AdminState>, body: Bytes) -> AdminResult {
    let rule = parse::<ErrorRequest>(&body)?.into_rule()?;
    tracing::info!(cluster = state.cluster.name(), ?rule, "admin: inject error");
    state.cluster.inject_error(rule);
    Ok(StatusCode::NO_CONTENT)
}

async fn clear_errors(State(state): State<AdminState>) -> StatusCode {
    tracing::info!(cluster = state.cluster.name(), "admin: clear injected errors");
    state.cluster.clear_errors();
    StatusCode::NO_CONTENT
}

async fn drop_watches(State(state): State<AdminState>) -> StatusCode {
    tracing::info!(cluster = state.cluster.name(), "admin: drop watches");
    state.cluster.drop_watches();
    StatusCode::NO_CONTENT
}

async fn compact(State(state): State<AdminState>) -> StatusCode {
    tracing::info!(cluster = state.cluster.name(), "admin: compact");
    state.cluster.compact();
    StatusCode::NO_CONTENT
}

async fn replace(State(state): State<AdminState>) -> axum::Json<Value> {
    state.cluster.replace_with_fresh();
    let identity = identity_of(&state.cluster);
    tracing::info!(cluster = state.cluster.name(), uid = %identity["uid"], "admin: replaced with a fresh cluster");
    axum::Json(identity)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct GarbageCollectorRequest {
    enabled: bool,
}

async fn set_garbage_collector(State(state): State<AdminState>, body: Bytes) -> AdminResult {
    let request: GarbageCollectorRequest = parse(&body)?;
    tracing::info!(
        cluster = state.cluster.name(),
        enabled = request.enabled,
        "admin: garbage collector"
    );
    state.cluster.set_garbage_collector(request.enabled);
    Ok(StatusCode::NO_CONTENT)
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct UserRequest {
    name: String,
    token: String,
    #[serde(default)]
    groups: Vec<String>,
}

async fn add_user(State(state): State<AdminState>, body: Bytes) -> AdminResult<(StatusCode, axum::Json<Value>)> {
    let request: UserRequest = parse(&body)?;
    let spec = UserSpec::new(&request.name, &request.token, request.groups)
        .map_err(|e| AdminError::BadRequest(e.to_string()))?;
    // Re-pointing a token (the admin's above all) at another user would be a takeover.
    if state.admin_token.matches(spec.token.expose()) || state.cluster.authenticate(spec.token.expose()).is_some() {
        return Err(AdminError::TokenTaken);
    }
    let user = spec.user_info();
    tracing::info!(cluster = state.cluster.name(), user = %user.name, groups = ?user.groups, "admin: add user");
    state.cluster.add_token(spec.token.expose(), user.clone());
    Ok((
        StatusCode::CREATED,
        axum::Json(json!({"name": user.name, "groups": user.groups})),
    ))
}

async fn identity(State(state): State<AdminState>) -> axum::Json<Value> {
    axum::Json(identity_of(&state.cluster))
}

fn identity_of(cluster: &FakeCluster) -> Value {
    json!({"name": cluster.name(), "uid": cluster.identity_uid()})
}

async fn writes(State(state): State<AdminState>) -> axum::Json<Value> {
    axum::Json(json!(state.cluster.write_log()))
}
