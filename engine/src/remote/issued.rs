//! Recognising an issued token: a ServiceAccount JWT whose unverified claims say whose it is
//! and when it expires. Only such a token is renewed (contract §5); anything else (client
//! certificates, an opaque or a legacy Secret-based token without `exp`) is left alone.
//!
//! The claims are read, never trusted: the provider verifies the token on every request, and
//! all the konnector does with them is decide when to ask for a new one and for which
//! ServiceAccount (a TokenRequest that RBAC allows for that ServiceAccount only).

use base64::Engine as _;
use jiff::Timestamp;
use serde::Deserialize;

use super::{Credentials, ProviderKubeconfig};

/// The prefix of a ServiceAccount's user name, and so of its token's `sub` claim.
const SERVICE_ACCOUNT_PREFIX: &str = "system:serviceaccount:";

/// What an issued token's claims say. `Debug` shows no part of the token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IssuedToken {
    /// The ServiceAccount's namespace.
    pub namespace: String,
    /// The ServiceAccount's name.
    pub name: String,
    /// When it was issued (`iat`).
    pub issued_at: Timestamp,
    /// When it expires (`exp`).
    pub expires_at: Timestamp,
    /// The audiences it was issued for (`aud`), asked for again when it is renewed.
    pub audiences: Vec<String>,
}

#[derive(Deserialize)]
struct Claims {
    sub: Option<String>,
    exp: Option<i64>,
    iat: Option<i64>,
    #[serde(default, deserialize_with = "one_or_many")]
    aud: Vec<String>,
}

/// `aud` is a string or a list of strings (RFC 7519 §4.1.3).
fn one_or_many<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<String>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Aud {
        One(String),
        Many(Vec<String>),
    }
    Ok(match Option::<Aud>::deserialize(d)? {
        None => Vec::new(),
        Some(Aud::One(a)) => vec![a],
        Some(Aud::Many(a)) => a,
    })
}

impl IssuedToken {
    /// The claims of `token` when it is a ServiceAccount JWT with `sub`, `iat` and an `exp`
    /// after `iat`; `None` for anything else.
    pub fn parse(token: &str) -> Option<Self> {
        let mut parts = token.split('.');
        let (Some(_header), Some(payload), Some(_signature), None) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return None;
        };
        let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
            .decode(payload.trim_end_matches('='))
            .ok()?;
        let claims: Claims = serde_json::from_slice(&bytes).ok()?;
        let (namespace, name) = claims
            .sub?
            .strip_prefix(SERVICE_ACCOUNT_PREFIX)?
            .split_once(':')
            .and_then(|(ns, name)| {
                (!ns.is_empty() && !name.is_empty() && !name.contains(':')).then(|| (ns.to_string(), name.to_string()))
            })?;
        let issued_at = Timestamp::from_second(claims.iat?).ok()?;
        let expires_at = Timestamp::from_second(claims.exp?).ok()?;
        if expires_at <= issued_at {
            return None;
        }
        Some(Self {
            namespace,
            name,
            issued_at,
            expires_at,
            audiences: claims.aud,
        })
    }

    /// How long it was issued for (`exp − iat`).
    pub fn lifetime(&self) -> std::time::Duration {
        let seconds = self.expires_at.as_second().saturating_sub(self.issued_at.as_second());
        std::time::Duration::from_secs(u64::try_from(seconds).unwrap_or(0))
    }

    /// Whether `other` is a token of the same ServiceAccount.
    pub fn same_account(&self, other: &IssuedToken) -> bool {
        self.namespace == other.namespace && self.name == other.name
    }
}

impl ProviderKubeconfig {
    /// The claims of its token when it is an issued token (see [`IssuedToken::parse`]).
    pub fn issued(&self) -> Option<IssuedToken> {
        match &self.credentials {
            Credentials::Token(token) => IssuedToken::parse(token),
            Credentials::ClientCertificate { .. } => None,
        }
    }

    /// Whether `other` differs from this kubeconfig only by a newer token of the same
    /// ServiceAccount: the same server, CA and transport, both issued tokens. Such a change is
    /// a renewal, taken on by the running client without reconnecting.
    pub fn renews(&self, other: &ProviderKubeconfig) -> bool {
        self.server == other.server
            && self.ca_pem == other.ca_pem
            && self.insecure_skip_tls_verify == other.insecure_skip_tls_verify
            && match (self.issued(), other.issued()) {
                (Some(old), Some(new)) => old.same_account(&new),
                _ => false,
            }
    }
}

/// A token shaped as kube-apiserver issues them, for tests: the claims in clear, an
/// unverifiable signature.
#[cfg(any(test, feature = "testing"))]
pub fn unsigned_token(sub: &str, iat: i64, exp: i64) -> String {
    let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
    let header = b64.encode(br#"{"alg":"RS256","kid":"test"}"#);
    let claims = serde_json::json!({
        "aud": ["https://kubernetes.default.svc.cluster.local"], "exp": exp, "iat": iat, "nbf": iat,
        "iss": "https://kubernetes.default.svc.cluster.local", "sub": sub,
    });
    let payload = b64.encode(claims.to_string());
    format!("{header}.{payload}.c2lnbmF0dXJl")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_service_account_jwt_names_its_account_and_expiry() {
        let token = unsigned_token("system:serviceaccount:kbind-grants:g-123", 1_700_000_000, 1_700_086_400);
        let issued = IssuedToken::parse(&token).expect("an issued token");
        assert_eq!(
            (issued.namespace.as_str(), issued.name.as_str()),
            ("kbind-grants", "g-123")
        );
        assert_eq!(issued.expires_at.as_second(), 1_700_086_400);
        assert_eq!(issued.lifetime(), std::time::Duration::from_secs(86_400));
        assert_eq!(issued.audiences, ["https://kubernetes.default.svc.cluster.local"]);
        assert!(!format!("{issued:?}").contains(&token));
    }

    #[test]
    fn anything_else_is_not_an_issued_token() {
        let b64 = base64::engine::general_purpose::URL_SAFE_NO_PAD;
        let jwt = |claims: serde_json::Value| format!("e30.{}.c2ln", b64.encode(claims.to_string()));
        for (what, token) in [
            ("an opaque token", "kbind-admin.0123456789abcdef".to_string()),
            ("a static token with dots", "a.b.c".to_string()),
            (
                "a user's OIDC token",
                jwt(serde_json::json!({"sub": "alice", "iat": 1, "exp": 2})),
            ),
            (
                "a legacy Secret-based token (no exp)",
                jwt(serde_json::json!({"sub": "system:serviceaccount:ns:sa", "iat": 1})),
            ),
            (
                "a token without iat",
                jwt(serde_json::json!({"sub": "system:serviceaccount:ns:sa", "exp": 2})),
            ),
            (
                "an expiry before issue",
                jwt(serde_json::json!({"sub": "system:serviceaccount:ns:sa", "iat": 5, "exp": 2})),
            ),
            (
                "a malformed subject",
                jwt(serde_json::json!({"sub": "system:serviceaccount:ns", "iat": 1, "exp": 2})),
            ),
            ("four parts", format!("{}.x", jwt(serde_json::json!({})))),
        ] {
            assert_eq!(IssuedToken::parse(&token), None, "{what}");
        }
        assert!(
            IssuedToken::parse(&jwt(
                serde_json::json!({"sub": "system:serviceaccount:ns:sa", "iat": 1, "exp": 2, "aud": "one"})
            ))
            .is_some_and(|t| t.audiences == ["one"])
        );
    }

    fn kubeconfig(server: &str, ca: &[u8], credentials: Credentials) -> ProviderKubeconfig {
        ProviderKubeconfig {
            server: server.into(),
            ca_pem: Some(ca.to_vec()),
            credentials,
            insecure_skip_tls_verify: false,
        }
    }

    #[test]
    fn only_a_newer_token_of_the_same_account_on_the_same_server_is_a_renewal() {
        let sa = "system:serviceaccount:kbind-grants:g";
        let old = kubeconfig("https://p", b"ca", Credentials::Token(unsigned_token(sa, 0, 600)));
        let new = kubeconfig("https://p", b"ca", Credentials::Token(unsigned_token(sa, 400, 1000)));
        assert!(old.renews(&new));
        let other_sa = Credentials::Token(unsigned_token("system:serviceaccount:kbind-grants:h", 400, 1000));
        assert!(!old.renews(&kubeconfig("https://p", b"ca", other_sa)));
        assert!(!old.renews(&kubeconfig("https://q", b"ca", new.credentials.clone())));
        assert!(!old.renews(&kubeconfig("https://p", b"other ca", new.credentials.clone())));
        let opaque = kubeconfig("https://p", b"ca", Credentials::Token("opaque".into()));
        assert!(!opaque.renews(&new) && !old.renews(&opaque));
        let cert = kubeconfig(
            "https://p",
            b"ca",
            Credentials::ClientCertificate {
                cert_pem: b"c".to_vec(),
                key_pem: b"k".to_vec(),
            },
        );
        assert!(!cert.renews(&new) && cert.issued().is_none());
    }
}
