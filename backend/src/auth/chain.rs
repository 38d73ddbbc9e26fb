//! Several sign-in methods tried in order: the first that recognises a request decides.

use std::sync::Arc;

use async_trait::async_trait;
use kbind_api::service::AuthMethod;

use super::{AuthError, Authenticator, Caller};

/// The enabled methods, tried in order. A method that recognises the credential but finds it
/// invalid ends the search with 401; a request with an `Authorization` header that no method
/// recognises is 401 too, never anonymous.
pub struct Chain {
    methods: Vec<Arc<dyn Authenticator>>,
}

impl std::fmt::Debug for Chain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kinds: Vec<String> = self.methods.iter().map(|m| m.method().kind).collect();
        f.debug_struct("Chain").field("methods", &kinds).finish()
    }
}

impl Chain {
    /// A chain of `methods`, tried in this order.
    pub fn new(methods: Vec<Arc<dyn Authenticator>>) -> Self {
        Self { methods }
    }

    /// Every method, as the provider metadata (`GET /api/v1/provider`) lists them.
    pub fn methods(&self) -> Vec<AuthMethod> {
        self.methods.iter().map(|m| m.method()).collect()
    }

    /// The methods, in the order they are tried.
    pub fn members(&self) -> &[Arc<dyn Authenticator>] {
        &self.methods
    }
}

#[async_trait]
impl Authenticator for Chain {
    /// The first method; the provider metadata wants [`Chain::methods`].
    fn method(&self) -> AuthMethod {
        self.methods.first().map(|m| m.method()).unwrap_or_else(|| AuthMethod {
            kind: "none".into(),
            login_path: None,
            ..Default::default()
        })
    }

    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
        for method in &self.methods {
            if let Some(caller) = method.authenticate(headers).await? {
                return Ok(Some(caller));
            }
        }
        if headers.contains_key(http::header::AUTHORIZATION) {
            return Err(AuthError::Unauthenticated(
                "the Authorization header carries no valid credential: use `Bearer <token>` with a token from the token file or an ID token of the provider's OIDC issuer".into(),
            ));
        }
        Ok(None)
    }

    fn routes(&self) -> axum::Router {
        self.methods
            .iter()
            .fold(axum::Router::new(), |router, m| router.merge(m.routes()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::{Identity, Via};

    /// A method that answers one fixed way, to test the chain's order and short-circuit.
    struct Fixed(&'static str, Result<Option<&'static str>, &'static str>);

    #[async_trait]
    impl Authenticator for Fixed {
        fn method(&self) -> AuthMethod {
            AuthMethod {
                kind: self.0.into(),
                login_path: None,
                ..Default::default()
            }
        }

        async fn authenticate(&self, _: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
            match self.1 {
                Ok(None) => Ok(None),
                Ok(Some(subject)) => Ok(Some(Caller {
                    identity: Identity {
                        subject: subject.into(),
                        name: None,
                    },
                    via: Via::Bearer,
                })),
                Err(why) => Err(AuthError::Unauthenticated(why.into())),
            }
        }
    }

    fn chain(methods: Vec<Fixed>) -> Chain {
        Chain::new(
            methods
                .into_iter()
                .map(|m| Arc::new(m) as Arc<dyn Authenticator>)
                .collect(),
        )
    }

    fn with_authorization() -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(http::header::AUTHORIZATION, "Bearer x".parse().expect("ascii"));
        h
    }

    #[tokio::test]
    async fn the_first_method_that_recognises_wins() {
        let c = chain(vec![
            Fixed("a", Ok(None)),
            Fixed("b", Ok(Some("b:x"))),
            Fixed("c", Ok(Some("c:x"))),
        ]);
        let got = c.authenticate(&with_authorization()).await.expect("ok");
        assert_eq!(got.map(|c| c.identity.subject), Some("b:x".into()));
        assert_eq!(
            c.methods().into_iter().map(|m| m.kind).collect::<Vec<_>>(),
            ["a", "b", "c"]
        );
    }

    #[tokio::test]
    async fn a_recognised_but_invalid_credential_never_falls_through() {
        let c = chain(vec![Fixed("a", Err("expired")), Fixed("b", Ok(Some("b:x")))]);
        let err = c.authenticate(&with_authorization()).await.expect_err("401");
        assert_eq!(err.status(), http::StatusCode::UNAUTHORIZED);
        assert_eq!(err.to_string(), "expired");
    }

    #[tokio::test]
    async fn an_authorization_header_nobody_recognises_is_401_and_no_credential_is_anonymous() {
        let c = chain(vec![Fixed("a", Ok(None))]);
        let err = c.authenticate(&with_authorization()).await.expect_err("401");
        assert!(matches!(err, AuthError::Unauthenticated(_)));
        let anonymous = c.authenticate(&http::HeaderMap::new()).await.expect("ok");
        assert_eq!(anonymous, None);
    }
}
