//! Errors as kube-apiserver answers them: a JSON `Status` with the matching HTTP code (and
//! `Retry-After` on 429).

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kbind_cluster::Error;
use kube::core::Status;
use kube::core::response::StatusDetails;
use serde_json::{Value, json};

/// The object an error is about, for the `details` of its `Status`.
#[derive(Debug, Clone, Default)]
pub(crate) struct Subject {
    /// Object name.
    pub name: String,
    /// API group.
    pub group: String,
    /// Plural resource (what `details.kind` carries for most reasons).
    pub plural: String,
    /// Kind (what `details.kind` carries for `Invalid`).
    pub kind: String,
}

/// An error answer.
#[derive(Debug)]
pub struct ApiError {
    error: Error,
    subject: Option<Subject>,
}

impl ApiError {
    /// The error, about `subject` (its name and resource go into the Status details).
    pub(crate) fn about(mut self, subject: Option<Subject>) -> Self {
        if self.subject.is_none() {
            self.subject = subject;
        }
        self
    }

    /// The `Status` kube-apiserver would send.
    pub fn status(&self) -> Status {
        let mut status = match &self.error {
            // A cluster cut off by a fault answers as an apiserver that lost its storage would.
            Error::Transport(message) => Status::failure(message, "ServiceUnavailable").with_code(503),
            other => other.to_status(),
        };
        if let Some(subject) = &self.subject
            && status.message != UNKNOWN_RESOURCE
        {
            fill_details(&mut status, &self.error, subject);
        }
        status
    }
}

impl From<Error> for ApiError {
    fn from(error: Error) -> Self {
        Self { error, subject: None }
    }
}

/// The message of a 404 for a path no resource is served at.
pub(crate) const UNKNOWN_RESOURCE: &str = "the server could not find the requested resource";

fn fill_details(status: &mut Status, error: &Error, subject: &Subject) {
    let kind = match error {
        Error::NotFound { .. } | Error::AlreadyExists { .. } | Error::Conflict { .. } => &subject.plural,
        Error::Invalid { .. } => &subject.kind,
        _ => return,
    };
    let details = status.details.get_or_insert_with(|| StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: vec![],
        retry_after_seconds: 0,
    });
    details.name = subject.name.clone();
    details.group = subject.group.clone();
    details.kind = kind.clone();
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        status_response(&self.status())
    }
}

impl ApiError {
    /// The answer, its Status in protobuf when `protobuf` (JSON should that fail).
    pub(crate) fn into_response_as(self, protobuf: bool) -> Response {
        let status = self.status();
        if !protobuf {
            return status_response(&status);
        }
        match super::protobuf::encode(&status_value(&status)) {
            Ok(bytes) => with_status_headers(
                &status,
                ([(header::CONTENT_TYPE, super::protobuf::MEDIA_TYPE)], bytes).into_response(),
            ),
            Err(_) => status_response(&status),
        }
    }
}

/// A `Status` as the JSON body kube-apiserver sends, with its code as the HTTP status.
pub(crate) fn status_response(status: &Status) -> Response {
    with_status_headers(status, super::json_body(&status_value(status)))
}

/// `body` with the Status's HTTP code (and `Retry-After` on 429).
fn with_status_headers(status: &Status, body: Response) -> Response {
    let code = StatusCode::from_u16(status.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let mut response = (code, body).into_response();
    if code == StatusCode::TOO_MANY_REQUESTS {
        let seconds = status
            .details
            .as_ref()
            .map(|d| d.retry_after_seconds)
            .filter(|s| *s > 0)
            .unwrap_or(1);
        if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
    }
    response
}

/// The wire form of a `Status`: kind, apiVersion and empty metadata included.
pub(crate) fn status_value(status: &Status) -> Value {
    let mut value = serde_json::to_value(status).unwrap_or_else(|_| json!({}));
    if let Some(map) = value.as_object_mut() {
        map.insert("kind".into(), json!("Status"));
        map.insert("apiVersion".into(), json!("v1"));
        map.insert("metadata".into(), json!({}));
    }
    value
}

/// The 401 kube-apiserver answers a request it cannot authenticate with.
pub(crate) fn unauthorized() -> Response {
    ApiError::from(Error::Unauthorized {
        message: "Unauthorized".into(),
    })
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn not_found_names_the_object_in_its_details() {
        let err = ApiError::from(Error::not_found("configmaps", "a")).about(Some(Subject {
            name: "a".into(),
            group: String::new(),
            plural: "configmaps".into(),
            kind: "ConfigMap".into(),
        }));
        let body = status_value(&err.status());
        assert_eq!(body["kind"], "Status");
        assert_eq!(body["code"], 404);
        assert_eq!(body["reason"], "NotFound");
        assert_eq!(body["details"], json!({"name": "a", "kind": "configmaps"}));
    }

    #[test]
    fn too_many_requests_carries_retry_after() {
        let err = ApiError::from(Error::TooManyRequests {
            message: "slow down".into(),
            retry_after_seconds: Some(7),
        });
        let response = err.into_response();
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(response.headers()[header::RETRY_AFTER], "7");
    }

    #[test]
    fn a_partitioned_cluster_answers_503() {
        let response = ApiError::from(Error::Transport("cut off".into())).into_response();
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    }
}
