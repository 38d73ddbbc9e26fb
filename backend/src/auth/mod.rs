//! Who is calling: the [`Authenticator`] trait and the in-tree methods.

use async_trait::async_trait;
use kbind_api::service::AuthMethod;

mod chain;
mod clock;
pub mod oidc;
mod options;
mod respond;
mod sealed;
mod static_tokens;

pub use chain::Chain;
pub use clock::Clock;
pub use oidc::{Oidc, OidcConfig};
pub use options::{Options, SetupError, authenticator, authenticator_with_clock};
pub(crate) use respond::bearer_token;
pub use sealed::{MIN_KEY_BYTES, SessionKey};
pub use static_tokens::{MIN_TOKEN_CHARS, StaticTokens};

/// An authenticated identity.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Identity {
    /// Stable subject Grants are recorded under (`token:<name>`, `oidc:<issuer>#<sub>`).
    pub subject: String,
    /// Display name, when known.
    pub name: Option<String>,
}

/// How a request proved its identity; browser sessions must also pass the CSRF check.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Via {
    /// An `Authorization: Bearer` header (CLI, scripts): not sent by browsers on their own.
    Bearer,
    /// A session cookie; state-changing requests must echo `csrf_token` in
    /// [`kbind_api::service::CSRF_HEADER`].
    Session {
        /// The session's CSRF token.
        csrf_token: String,
    },
}

/// The caller of one request.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Caller {
    /// Who.
    pub identity: Identity,
    /// How.
    pub via: Via,
}

/// Why a request could not be authenticated. Messages never contain the presented credential.
#[derive(Debug, thiserror::Error)]
pub enum AuthError {
    /// The presented credential is invalid, expired or unknown (HTTP 401).
    #[error("{0}")]
    Unauthenticated(String),
    /// The identity provider could not be reached or answered nonsense (HTTP 503).
    #[error("{0}")]
    Unavailable(String),
}

/// A sign-in method: recognises callers from request headers, and may add login routes.
#[async_trait]
pub trait Authenticator: Send + Sync + 'static {
    /// The method as the provider metadata lists it.
    fn method(&self) -> AuthMethod;

    /// The caller of a request; `Ok(None)` when the request carries nothing this method knows.
    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError>;

    /// Routes this method adds (absolute paths, e.g. `/auth/oidc/login`).
    fn routes(&self) -> axum::Router {
        axum::Router::new()
    }
}
