//! kbind-backend: the optional service layer on a provider (contract §7). Its only output is the
//! one-apply bundle; once a consumer applied it, the core never needs the backend again.
//!
//! Modules, each enabled by its own flag of the binary (any subset works):
//! - [`gateway`]: the HTTP API and the embedded UI — catalog, bind, one-time pickup.
//! - [`issuer`]: the [`issuer::Issuer`] trait and the in-tree Kubernetes issuer, driven by Grants.
//! - [`reaper`]: deletes the Grants of consumers that stopped heartbeating.
//! - [`auth`]: the [`auth::Authenticator`] trait, static tokens and OIDC.
//!
//! The backend talks to the provider only through `kbind_cluster::ClusterClient`, and depends on
//! the API types, never on the engine (`cargo run -p xtask -- deps` checks it).

pub mod auth;
pub mod gateway;
pub mod issuer;
pub mod modules;
pub mod reaper;
