//! The HTTP cause of a failed provider request, worded for conditions, Events and logs: the
//! status code and the reason the code stands for (and, for a 403, the verb and resource the
//! client asked for). Never the server's free text: a hostile or chatty server may echo what
//! the request carried, and credentials never reach a message (contract §5, §8.7).

use kbind_cluster::Error;

/// The longest server-chosen `reason` (a `Status.reason` of a 5xx) quoted as is.
const MAX_REASON: usize = 64;

/// `HTTP 401 Unauthorized`, `HTTP 403 Forbidden: may not delete widgets.example.org`, … or, when
/// no HTTP answer came, what happened instead.
pub(crate) fn http_cause(e: &Error) -> String {
    match e {
        Error::Forbidden { verb, resource, .. } => format!("HTTP 403 Forbidden: may not {verb} {resource}"),
        Error::NotServed { .. } => {
            "HTTP 404 without a Kubernetes Status (a proxy or ingress in front of the API server?)".into()
        }
        // The HTTP name of 410; its Status reason is `Expired`.
        Error::Gone { .. } => "HTTP 410 Gone".into(),
        Error::Server { code, reason, .. } => {
            // A Status reason is one CamelCase word; anything else is not quoted.
            let word =
                !reason.is_empty() && reason.len() <= MAX_REASON && reason.chars().all(|c| c.is_ascii_alphanumeric());
            if word {
                format!("HTTP {code} {reason}")
            } else {
                format!("HTTP {code}")
            }
        }
        // The transport cause is the client's own words (connection refused, TLS, DNS), never
        // the server's: kbind_cluster builds it from the error chain.
        Error::Transport(cause) => format!("no HTTP answer: {}", transport_words(cause)),
        Error::Timeout(_) => "no HTTP answer: the request timed out".into(),
        Error::Decode(_) => "an answer that could not be decoded".into(),
        _ => format!("HTTP {} {}", e.code(), e.reason()),
    }
}

/// What a transport error says, as messages may quote it: the client's words for the cause
/// (`connection refused`, `TLS: …`, `DNS: …`); anything that looks like it could carry a URL
/// or user info reads `transport error` instead.
pub(crate) fn transport_words(cause: &str) -> &str {
    if cause.is_empty() || cause.contains("://") || cause.contains('@') {
        "transport error"
    } else {
        cause
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_names_code_and_reason_and_never_the_servers_text() {
        let secret = "token-abc123";
        let cases = [
            (
                Error::Unauthorized {
                    message: format!("bad token {secret}"),
                },
                "HTTP 401 Unauthorized",
            ),
            (
                Error::Forbidden {
                    verb: "delete".into(),
                    resource: "widgets.example.org".into(),
                    message: format!("User {secret} cannot delete"),
                },
                "HTTP 403 Forbidden: may not delete widgets.example.org",
            ),
            (
                Error::Server {
                    code: 503,
                    reason: "ServiceUnavailable".into(),
                    message: secret.into(),
                },
                "HTTP 503 ServiceUnavailable",
            ),
            (
                Error::Server {
                    code: 500,
                    reason: format!("echo {secret}"),
                    message: String::new(),
                },
                "HTTP 500",
            ),
        ];
        for (error, want) in cases {
            let cause = http_cause(&error);
            assert_eq!(cause, want);
            assert!(!cause.contains(secret));
        }
        assert!(!http_cause(&Error::Transport(format!("dial https://{secret}@x"))).contains(secret));
    }
}
