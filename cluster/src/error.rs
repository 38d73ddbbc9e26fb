//! Typed errors of the seam, mapped both ways to the Kubernetes `Status` wire form.

use kube::core::{Status, response::StatusCause, response::StatusDetails};

/// A result of a seam call.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// One reason an object was refused (a `Status` cause).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cause {
    /// Machine-readable reason, e.g. `FieldValueInvalid`.
    pub reason: String,
    /// Human-readable message.
    pub message: String,
    /// JSON path of the field, e.g. `spec.replicas`.
    pub field: String,
}

/// What can go wrong talking to a cluster.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Error {
    /// 404: the object or resource does not exist.
    #[error("{message}")]
    NotFound {
        /// Server message.
        message: String,
    },
    /// 409 AlreadyExists: a create named an existing object.
    #[error("{message}")]
    AlreadyExists {
        /// Server message.
        message: String,
    },
    /// 409 Conflict: a stale resourceVersion, a failed precondition or an apply conflict.
    #[error("{message}")]
    Conflict {
        /// Server message.
        message: String,
        /// Apply conflicts, one per contested field.
        causes: Vec<Cause>,
    },
    /// 403: the caller may not do `verb` on `resource`.
    #[error("{message}")]
    Forbidden {
        /// Verb refused, e.g. `create`.
        verb: String,
        /// Resource refused, e.g. `widgets.example.org` (with `/sub` for subresources).
        resource: String,
        /// Server message.
        message: String,
    },
    /// 401: the credentials were not accepted.
    #[error("{message}")]
    Unauthorized {
        /// Server message.
        message: String,
    },
    /// 422: the object failed validation.
    #[error("{message}")]
    Invalid {
        /// Server message.
        message: String,
        /// Each invalid field.
        causes: Vec<Cause>,
    },
    /// 410: the requested resourceVersion is older than the server keeps.
    #[error("{message}")]
    Gone {
        /// Server message.
        message: String,
    },
    /// 400: the request itself was malformed.
    #[error("{message}")]
    BadRequest {
        /// Server message.
        message: String,
    },
    /// 405: the verb is not supported on this resource.
    #[error("{message}")]
    MethodNotAllowed {
        /// Server message.
        message: String,
    },
    /// 429: the server asks the caller to slow down.
    #[error("{message}")]
    TooManyRequests {
        /// Server message.
        message: String,
        /// Seconds to wait, from `Retry-After` / `details.retryAfterSeconds`.
        retry_after_seconds: Option<u32>,
    },
    /// Any other error status from the server (5xx and the rest).
    #[error("{message}")]
    Server {
        /// HTTP status code.
        code: u16,
        /// Server reason.
        reason: String,
        /// Server message.
        message: String,
    },
    /// 404 without a Kubernetes `Status`: the path is not served — an API group the server does
    /// not have (kube-apiserver's own `404 page not found`) or something in front of the server
    /// (a proxy, an ingress). Never proof that an object is absent.
    #[error("{message}")]
    NotServed {
        /// What answered, cut short.
        message: String,
    },
    /// The server could not be reached or the connection broke.
    #[error("transport error: {0}")]
    Transport(String),
    /// The request did not finish in time.
    #[error("request timed out: {0}")]
    Timeout(String),
    /// The server answered something the client could not decode.
    #[error("failed to decode the server's answer: {0}")]
    Decode(String),
}

impl Error {
    /// The HTTP code this error carries on the wire (0 for client-side failures).
    pub fn code(&self) -> u16 {
        match self {
            Error::NotFound { .. } | Error::NotServed { .. } => 404,
            Error::AlreadyExists { .. } | Error::Conflict { .. } => 409,
            Error::Forbidden { .. } => 403,
            Error::Unauthorized { .. } => 401,
            Error::Invalid { .. } => 422,
            Error::Gone { .. } => 410,
            Error::BadRequest { .. } => 400,
            Error::MethodNotAllowed { .. } => 405,
            Error::TooManyRequests { .. } => 429,
            Error::Server { code, .. } => *code,
            Error::Transport(_) | Error::Timeout(_) | Error::Decode(_) => 0,
        }
    }

    /// The `Status.reason` this error carries on the wire (`InternalError` for client-side
    /// failures and a 404 without a Status).
    pub fn reason(&self) -> &str {
        match self {
            Error::NotFound { .. } => "NotFound",
            Error::AlreadyExists { .. } => "AlreadyExists",
            Error::Conflict { .. } => "Conflict",
            Error::Forbidden { .. } => "Forbidden",
            Error::Unauthorized { .. } => "Unauthorized",
            Error::Invalid { .. } => "Invalid",
            Error::Gone { .. } => "Expired",
            Error::BadRequest { .. } => "BadRequest",
            Error::MethodNotAllowed { .. } => "MethodNotAllowed",
            Error::TooManyRequests { .. } => "TooManyRequests",
            Error::Server { reason, .. } => reason,
            Error::Timeout(_) => "Timeout",
            Error::Transport(_) | Error::Decode(_) | Error::NotServed { .. } => "InternalError",
        }
    }

    /// Whether this is a 404.
    pub fn is_not_found(&self) -> bool {
        matches!(self, Error::NotFound { .. })
    }

    /// Whether this is a 409 Conflict (not AlreadyExists).
    pub fn is_conflict(&self) -> bool {
        matches!(self, Error::Conflict { .. })
    }

    /// Whether this is a 410 Gone.
    pub fn is_gone(&self) -> bool {
        matches!(self, Error::Gone { .. })
    }

    /// Whether this is a 403.
    pub fn is_forbidden(&self) -> bool {
        matches!(self, Error::Forbidden { .. })
    }

    /// Whether the failure says nothing about the object and a retry may succeed.
    pub fn is_transient(&self) -> bool {
        match self {
            Error::Transport(_) | Error::NotServed { .. } | Error::Timeout(_) | Error::TooManyRequests { .. } => true,
            Error::Server { code, .. } => *code >= 500,
            _ => false,
        }
    }

    /// A 404 for `resource` `name`, worded as kube-apiserver words it.
    pub fn not_found(resource: &str, name: &str) -> Self {
        Error::NotFound {
            message: format!("{resource} \"{name}\" not found"),
        }
    }

    /// A 409 AlreadyExists for `resource` `name`.
    pub fn already_exists(resource: &str, name: &str) -> Self {
        Error::AlreadyExists {
            message: format!("{resource} \"{name}\" already exists"),
        }
    }

    /// A 409 for a stale write.
    pub fn stale(resource: &str, name: &str) -> Self {
        Error::Conflict {
            message: format!(
                "Operation cannot be fulfilled on {resource} \"{name}\": the object has been modified; please apply your changes to the latest version and try again"
            ),
            causes: vec![],
        }
    }

    /// A 403 for `user` doing `verb` on `resource` (`group` may be empty).
    pub fn forbidden(
        user: &str,
        verb: &str,
        resource: &str,
        group: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Self {
        let full = if group.is_empty() {
            resource.to_string()
        } else {
            format!("{resource}.{group}")
        };
        let subject = match name {
            Some(n) => format!("{full} \"{n}\""),
            None => full.clone(),
        };
        let scope = match namespace {
            Some(ns) => format!("in the namespace \"{ns}\""),
            None => "at the cluster scope".to_string(),
        };
        Error::Forbidden {
            verb: verb.to_string(),
            resource: full.clone(),
            message: format!(
                "{subject} is forbidden: User \"{user}\" cannot {verb} resource \"{resource}\" in API group \"{group}\" {scope}"
            ),
        }
    }

    /// A 410 for a resourceVersion older than the history window.
    pub fn gone(rv: &str) -> Self {
        Error::Gone {
            message: format!("too old resource version: {rv}"),
        }
    }

    /// A 422 with causes.
    pub fn invalid(kind: &str, name: &str, causes: Vec<Cause>) -> Self {
        let detail = causes
            .iter()
            .map(|c| format!("{}: {}", c.field, c.message))
            .collect::<Vec<_>>()
            .join(", ");
        Error::Invalid {
            message: format!("{kind} \"{name}\" is invalid: {detail}"),
            causes,
        }
    }

    /// Builds the error a `Status` describes.
    pub fn from_status(status: &Status) -> Self {
        let message = status.message.clone();
        let causes: Vec<Cause> = status
            .details
            .as_ref()
            .map(|d| {
                d.causes
                    .iter()
                    .map(|c| Cause {
                        reason: c.reason.clone(),
                        message: c.message.clone(),
                        field: c.field.clone(),
                    })
                    .collect()
            })
            .unwrap_or_default();
        match (status.code, status.reason.as_str()) {
            (404, reason) if reason == "NotFound" || crate::planted::non_status_404_is_absent() => {
                Error::NotFound { message }
            }
            // A 404 without the apiserver's NotFound reason did not come from a resource handler
            // (kube reconstructs one as "Failed to parse error data" from a proxy's text body):
            // it says nothing about the object, and treating it as "absent" would let finalize
            // and drain release finalizers while the copy lives on.
            (404, _) => Error::NotServed {
                message: not_a_status_404(&message),
            },
            (409, "AlreadyExists") => Error::AlreadyExists { message },
            (409, _) => Error::Conflict { message, causes },
            (403, _) => {
                let (resource, group) = status
                    .details
                    .as_ref()
                    .map(|d| (d.kind.clone(), d.group.clone()))
                    .unwrap_or_default();
                let resource = if group.is_empty() {
                    resource
                } else {
                    format!("{resource}.{group}")
                };
                Error::Forbidden {
                    verb: parse_forbidden_verb(&message).unwrap_or_default(),
                    resource,
                    message,
                }
            }
            (401, _) => Error::Unauthorized { message },
            (422, _) => Error::Invalid { message, causes },
            (410, _) => Error::Gone { message },
            (400, _) => Error::BadRequest { message },
            (405, _) => Error::MethodNotAllowed { message },
            (429, _) => Error::TooManyRequests {
                message,
                retry_after_seconds: status
                    .details
                    .as_ref()
                    .map(|d| d.retry_after_seconds)
                    .filter(|s| *s > 0),
            },
            (504, _) | (_, "Timeout") => Error::Timeout(message),
            (code, reason) => Error::Server {
                code,
                reason: reason.to_string(),
                message,
            },
        }
    }

    /// The `Status` a server answers with for this error.
    pub fn to_status(&self) -> Status {
        let details = match self {
            Error::Conflict { causes, .. } | Error::Invalid { causes, .. } => details_with(causes, "", ""),
            Error::Forbidden { resource, .. } => {
                let (kind, group) = resource.split_once('.').unwrap_or((resource.as_str(), ""));
                Some(StatusDetails {
                    kind: kind.to_string(),
                    group: group.to_string(),
                    ..empty_details()
                })
            }
            Error::TooManyRequests {
                retry_after_seconds, ..
            } => Some(StatusDetails {
                retry_after_seconds: retry_after_seconds.unwrap_or(1),
                ..empty_details()
            }),
            _ => None,
        };
        let code = match self.code() {
            0 => 500,
            c => c,
        };
        let mut status = Status::failure(&self.to_string(), self.reason()).with_code(code);
        status.details = details;
        status
    }
}

/// The error text of a 404 that is not a Kubernetes `NotFound` Status (the body is cut short:
/// it comes from whatever answered in front of the server).
pub(crate) fn not_a_status_404(body: &str) -> String {
    const MAX: usize = 200;
    let mut end = body.len().min(MAX);
    while !body.is_char_boundary(end) {
        end -= 1;
    }
    format!(
        "the server answered 404 without a Kubernetes NotFound Status (a proxy or ingress in front of the API server?): {}",
        &body[..end]
    )
}

fn empty_details() -> StatusDetails {
    StatusDetails {
        name: String::new(),
        group: String::new(),
        kind: String::new(),
        uid: String::new(),
        causes: vec![],
        retry_after_seconds: 0,
    }
}

fn details_with(causes: &[Cause], kind: &str, name: &str) -> Option<StatusDetails> {
    if causes.is_empty() {
        return None;
    }
    Some(StatusDetails {
        kind: kind.to_string(),
        name: name.to_string(),
        causes: causes
            .iter()
            .map(|c| StatusCause {
                reason: c.reason.clone(),
                message: c.message.clone(),
                field: c.field.clone(),
            })
            .collect(),
        ..empty_details()
    })
}

/// Pulls the verb out of kube-apiserver's `User "u" cannot VERB resource ...` message.
fn parse_forbidden_verb(message: &str) -> Option<String> {
    let rest = message.split(" cannot ").nth(1)?;
    rest.split_whitespace().next().map(str::to_string)
}

impl From<kube::Error> for Error {
    fn from(err: kube::Error) -> Self {
        if let Some(too_large) = too_large(&err) {
            return Error::Transport(too_large.to_string());
        }
        match err {
            kube::Error::Api(status) => Error::from_status(&status),
            kube::Error::SerdeError(e) => Error::Decode(e.to_string()),
            kube::Error::HyperError(e) if e.is_timeout() => Error::Timeout(TIMED_OUT.into()),
            other => {
                // Only the errors' own texts: kube, hyper, rustls and std never put credentials
                // into these.
                let cause = transport_cause(&other);
                let text = other.to_string().to_ascii_lowercase();
                if cause == TIMED_OUT || text.contains("timed out") || text.contains("timeout") {
                    Error::Timeout(TIMED_OUT.into())
                } else {
                    Error::Transport(cause)
                }
            }
        }
    }
}

/// The cause of a request that timed out, as [`transport_cause`] words it.
pub const TIMED_OUT: &str = "timed out";
/// The longest error text [`transport_cause`] quotes when it knows no better words.
const MAX_CAUSE: usize = 200;

/// Why a request got no HTTP answer, found by walking `err`'s sources (kube → hyper →
/// std::io / rustls): `connection refused`, `connection reset by peer`, `timed out`,
/// `DNS: no such host (…)`, `TLS: certificate signed by unknown authority (invalid peer
/// certificate: UnknownIssuer)` or another `TLS: …`; else the innermost error's text, cut short.
/// Never a URL, header or body: none of these errors carry one.
pub fn transport_cause(err: &(dyn std::error::Error + 'static)) -> String {
    let mut innermost = String::new();
    let mut tls = None;
    for e in causes(err) {
        if let Some(io) = e.downcast_ref::<std::io::Error>() {
            match io.kind() {
                std::io::ErrorKind::ConnectionRefused => return "connection refused".into(),
                std::io::ErrorKind::ConnectionReset => return "connection reset by peer".into(),
                std::io::ErrorKind::TimedOut => return TIMED_OUT.into(),
                _ => {}
            }
        }
        let text = e.to_string();
        let lower = text.to_ascii_lowercase();
        if lower.contains("invalid peer certificate") {
            let words = if lower.contains("unknownissuer") {
                "certificate signed by unknown authority (invalid peer certificate: UnknownIssuer)".to_string()
            } else {
                text.clone()
            };
            return format!("TLS: {}", cut(&words));
        }
        if lower.contains("dns error")
            || lower.contains("failed to lookup address")
            || lower.contains("name or service not known")
            || lower.contains("nodename nor servname")
            || lower.contains("no such host")
        {
            innermost = text;
            for inner in causes(e).skip(1) {
                innermost = inner.to_string();
            }
            return format!("DNS: no such host ({})", cut(&innermost));
        }
        if tls.is_none()
            && (lower.contains("tls")
                || lower.contains("handshake")
                || lower.contains("certificate")
                || lower.contains("alert"))
        {
            tls = Some(text.clone());
        }
        innermost = text;
    }
    match tls {
        Some(text) => format!("TLS: {}", cut(&innermost_or(&innermost, &text))),
        None => cut(&innermost),
    }
}

fn innermost_or(innermost: &str, fallback: &str) -> String {
    if innermost.is_empty() { fallback } else { innermost }.to_string()
}

/// `text` up to [`MAX_CAUSE`] characters.
fn cut(text: &str) -> String {
    match text.char_indices().nth(MAX_CAUSE) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

/// The response cap a kube error comes from, if any (it arrives wrapped as a service or
/// watch-read error).
fn too_large(err: &kube::Error) -> Option<crate::limit::ResponseTooLarge> {
    causes(err).find_map(|e| e.downcast_ref::<crate::limit::ResponseTooLarge>().cloned())
}

/// `err` and its sources, innermost last; at most 16, so a `source` that cycles cannot hang
/// the caller (HTTP and TLS stacks nest a handful).
pub(crate) fn causes<'a>(
    err: &'a (dyn std::error::Error + 'static),
) -> impl Iterator<Item = &'a (dyn std::error::Error + 'static)> {
    std::iter::successors(Some(err), |e| e.source()).take(16)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An error with a source, as hyper's connect errors wrap io and TLS errors.
    #[derive(Debug)]
    struct Wrapped(&'static str, Box<dyn std::error::Error + Send + Sync + 'static>);

    impl std::fmt::Display for Wrapped {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str(self.0)
        }
    }

    impl std::error::Error for Wrapped {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&*self.1)
        }
    }

    #[test]
    fn the_transport_cause_is_found_in_the_source_chain() {
        use std::io::{Error as Io, ErrorKind};
        let refused = Wrapped(
            "client error (Connect)",
            Box::new(Io::from(ErrorKind::ConnectionRefused)),
        );
        assert_eq!(transport_cause(&refused), "connection refused");
        let tls = Wrapped(
            "client error (Connect)",
            Box::new(Io::new(
                ErrorKind::InvalidData,
                "invalid peer certificate: UnknownIssuer",
            )),
        );
        assert_eq!(
            transport_cause(&tls),
            "TLS: certificate signed by unknown authority (invalid peer certificate: UnknownIssuer)"
        );
        let dns = Wrapped(
            "client error (Connect)",
            Box::new(Wrapped(
                "dns error",
                Box::new(Io::other(
                    "failed to lookup address information: Name or service not known",
                )),
            )),
        );
        assert_eq!(
            transport_cause(&dns),
            "DNS: no such host (failed to lookup address information: Name or service not known)"
        );
        let slow = Wrapped("client error (Connect)", Box::new(Io::from(ErrorKind::TimedOut)));
        assert_eq!(transport_cause(&slow), TIMED_OUT);
        let other = Wrapped("client error (SendRequest)", Box::new(Io::other("broken pipe")));
        assert_eq!(transport_cause(&other), "broken pipe");
    }

    #[test]
    fn every_error_round_trips_through_status() {
        let cases = vec![
            Error::not_found("widgets.example.org", "a"),
            Error::already_exists("widgets.example.org", "a"),
            Error::stale("widgets.example.org", "a"),
            Error::forbidden("bob", "create", "widgets", "example.org", Some("ns1"), None),
            Error::gone("12"),
            Error::invalid(
                "Widget",
                "a",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value".into(),
                    field: "spec.x".into(),
                }],
            ),
            Error::TooManyRequests {
                message: "slow down".into(),
                retry_after_seconds: Some(3),
            },
            Error::Server {
                code: 500,
                reason: "InternalError".into(),
                message: "boom".into(),
            },
        ];
        for err in cases {
            let back = Error::from_status(&err.to_status());
            assert_eq!(back.code(), err.code(), "{err:?} -> {back:?}");
            assert_eq!(back.to_string(), err.to_string());
            if let (
                Error::Forbidden { verb, resource, .. },
                Error::Forbidden {
                    verb: v2, resource: r2, ..
                },
            ) = (&err, &back)
            {
                assert_eq!((verb, resource), (v2, r2));
            }
            if let (
                Error::TooManyRequests {
                    retry_after_seconds: a, ..
                },
                Error::TooManyRequests {
                    retry_after_seconds: b, ..
                },
            ) = (&err, &back)
            {
                assert_eq!(a, b);
            }
            if let (Error::Invalid { causes: a, .. }, Error::Invalid { causes: b, .. }) = (&err, &back) {
                assert_eq!(a, b);
            }
        }
    }
}
