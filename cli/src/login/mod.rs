//! Signing in to a gateway: `kbind login <gateway-url>` picks a method the gateway publishes in
//! `/api/v1/provider`; [`oidc`] is the browser sign-in with a loopback callback.

pub mod oidc;
