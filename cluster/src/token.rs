//! A bearer token that a running client reads on every request, so a renewed credential takes
//! effect at once: no new client, no new connection, no restarted watch.

use std::sync::Arc;

use http::HeaderValue;
use parking_lot::RwLock;

/// A bearer token shared between whoever renews it and the clients that send it; clones share
/// one value. `Debug` never shows the token.
#[derive(Clone, Default)]
pub struct BearerToken(Arc<RwLock<String>>);

impl std::fmt::Debug for BearerToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("BearerToken(<redacted>)")
    }
}

/// Why a token cannot be sent.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("the bearer token is not a valid HTTP header value (it must be visible ASCII)")]
pub struct InvalidToken;

impl BearerToken {
    /// A token starting as `token`.
    pub fn new(token: impl Into<String>) -> Self {
        Self(Arc::new(RwLock::new(token.into())))
    }

    /// The current token.
    pub fn get(&self) -> String {
        self.0.read().clone()
    }

    /// Replaces the token for every request sent from now on.
    pub fn set(&self, token: impl Into<String>) {
        *self.0.write() = token.into();
    }

    /// The `Authorization` header of the current token, marked sensitive (kept out of hyper's
    /// and h2's debug output and HPACK's table).
    pub fn header(&self) -> Result<HeaderValue, InvalidToken> {
        let token = self.0.read();
        let mut value = HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| InvalidToken)?;
        value.set_sensitive(true);
        Ok(value)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_token_and_debug_hides_it() {
        let token = BearerToken::new("first-s3cret");
        let client_side = token.clone();
        token.set("second-s3cret");
        assert_eq!(client_side.get(), "second-s3cret");
        assert_eq!(client_side.header().unwrap(), "Bearer second-s3cret");
        assert!(client_side.header().unwrap().is_sensitive());
        assert!(!format!("{client_side:?}").contains("s3cret"));
    }

    #[test]
    fn a_token_that_cannot_be_a_header_is_refused() {
        assert_eq!(BearerToken::new("line\nbreak").header(), Err(InvalidToken));
    }
}
