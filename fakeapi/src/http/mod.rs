//! The Kubernetes REST surface of a fake cluster, as an axum `Router`: what kubectl and
//! `kube::Client` talk to (resources, watches, discovery, OpenAPI, Tables, bearer-token auth).

mod auth;
mod discovery;
mod errors;
mod media;
mod openapi;
mod paths;
pub mod protobuf;
mod query;
mod resources;
mod table;
mod watch;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::middleware;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use jiff::Timestamp;
use kbind_cluster::Error;
use serde_json::Value;

pub use errors::ApiError;

use crate::rbac::{self, Attributes, UserInfo};
use crate::registry::ResourceInfo;
use crate::{FakeCluster, meta};

/// The REST API of `cluster`: what kubectl and `kube::Client` talk to.
///
/// Every request must carry `Authorization: Bearer <token>` for a token the cluster knows
/// ([`FakeCluster::add_token`]), except `/healthz`, `/livez`, `/readyz` and `/version`; an outer
/// layer may instead put an authenticated [`UserInfo`] into the request's extensions.
pub fn router(cluster: FakeCluster) -> Router {
    Router::new()
        .route("/version", get(version))
        .route("/healthz", get(health))
        .route("/livez", get(health))
        .route("/readyz", get(health))
        .route("/openapi/v2", get(openapi::v2))
        .route("/openapi/v3", get(openapi::v3_index))
        .route("/openapi/v3/{*path}", get(openapi::v3_document))
        .fallback(resources::serve)
        .layer(middleware::from_fn_with_state(cluster.clone(), auth::authenticate))
        .with_state(cluster)
}

async fn version() -> Response {
    json_body(&discovery::version())
}

async fn health(State(cluster): State<FakeCluster>) -> Response {
    if cluster.is_partitioned() {
        return ApiError::from(Error::Transport("etcd unreachable".into())).into_response();
    }
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], "ok").into_response()
}

/// A JSON answer.
pub(crate) fn json_body(value: &Value) -> Response {
    json_with_type(value, "application/json")
}

/// A JSON answer with a specific content type (aggregated discovery, Tables).
pub(crate) fn json_with_type(value: &Value, content_type: &str) -> Response {
    let bytes = serde_json::to_vec(value).unwrap_or_default();
    ([(header::CONTENT_TYPE, content_type.to_string())], bytes).into_response()
}

/// Read access the HTTP surface needs beyond the core verbs.
impl FakeCluster {
    /// The resource served at group/version/plural.
    pub(crate) fn resource_info(&self, group: &str, version: &str, plural: &str) -> Option<ResourceInfo> {
        self.inner.lock().registry.lookup(group, version, plural).cloned()
    }

    /// The cluster clock's now.
    pub(crate) fn now(&self) -> Timestamp {
        self.inner.clock.now()
    }

    /// The stored object, without admission (to shape an answer, never to decide one).
    pub(crate) fn peek(&self, info: &ResourceInfo, namespace: Option<&str>, name: &str) -> Option<Value> {
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        self.inner
            .lock()
            .get(&info.group_resource(), &key)
            .map(|o| crate::ops::present(o, info))
    }

    /// RBAC for a non-resource request (`get /apis`, `get /openapi/v3`, ...).
    pub(crate) fn authorize_path(&self, user: &UserInfo, verb: &str, path: &str) -> Result<(), Error> {
        let attrs = Attributes {
            verb: verb.to_string(),
            path: Some(path.to_string()),
            ..Attributes::default()
        };
        let allowed = rbac::authorize(user, &attrs, &crate::admission::rbac_snapshot(&self.inner.lock()));
        if allowed {
            Ok(())
        } else {
            Err(Error::Forbidden {
                verb: verb.to_string(),
                resource: String::new(),
                message: rbac::forbidden_message(user, &attrs),
            })
        }
    }
}

/// The name and uid of an object, for a delete's success Status.
fn name_and_uid(obj: &Value) -> (String, String) {
    (
        meta::name(obj).unwrap_or_default().to_string(),
        meta::uid(obj).unwrap_or_default().to_string(),
    )
}
