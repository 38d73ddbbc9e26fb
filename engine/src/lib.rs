//! kbind's engine: Connections become engaged provider clusters (`remote`, `connection`,
//! `provider`, `leader`); bindings and sync build on them.

pub mod binding;
pub mod connection;
pub mod context;
pub mod crdpull;
pub mod engine;
pub mod events;
pub mod leader;
pub mod mapper;
mod observed;
pub mod openapi;
pub mod planted;
pub mod provider;
pub mod related;
pub mod remote;
pub mod sync;
pub mod typed;
