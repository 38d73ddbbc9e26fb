//! kbind's engine: Connections become provider links and engaged provider clusters (`remote`,
//! `connection`, `link`, `provider`, `leader`); bindings and sync build on them.
//!
//! The main items are re-exported here, as kube-runtime does: build an [`Engine`] over a
//! [`Context`] (the consumer cluster, a [`Connector`] to providers, a clock, an
//! [`EngineConfig`]), optionally with a custom [`Mapper`] and a [`SyncObserver`], and run it.
//! Each module keeps its own error type ([`ReconcileError`], [`BindingError`],
//! [`SyncError`], …), also re-exported here.
//!
//! ```no_run
//! use std::sync::Arc;
//!
//! use kbind_cluster::{ApiResource, KubeClusterClient, SystemClock};
//! use kbind_engine::{Context, Engine, EngineConfig, KubeConnector, Mapper, ObjectKey};
//!
//! /// Provider copies are named `c1-<consumer name>`.
//! struct Prefix;
//!
//! impl Mapper for Prefix {
//!     fn to_provider(&self, _: &ApiResource, key: &ObjectKey) -> ObjectKey {
//!         ObjectKey { name: format!("c1-{}", key.name), ..key.clone() }
//!     }
//!     fn to_consumer(&self, _: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
//!         Some(ObjectKey { name: key.name.strip_prefix("c1-")?.to_string(), ..key.clone() })
//!     }
//! }
//!
//! # async fn run(shutdown: impl Future<Output = ()>) -> Result<(), Box<dyn std::error::Error>> {
//! let consumer = KubeClusterClient::from_config(kube::Config::infer().await?)?;
//! let ctx = Context {
//!     consumer: Arc::new(consumer),
//!     connector: Arc::new(KubeConnector { allow_insecure: false, ..KubeConnector::default() }),
//!     clock: Arc::new(SystemClock),
//!     randomness: kbind_cluster::backoff::from_entropy(),
//!     config: EngineConfig::default(),
//! };
//! let engine = Engine::builder(ctx).with_mapper(Prefix).build();
//! engine.run_until(shutdown).await;
//! # Ok(())
//! # }
//! ```

pub mod binding;
mod cause;
pub mod connection;
pub mod context;
pub mod crdpull;
pub mod engine;
pub mod events;
mod finalizers;
pub mod leader;
pub mod link;
mod listed;
pub mod mapper;
mod observed;
pub mod openapi;
mod ownership;
pub mod planted;
pub mod provider;
pub mod related;
pub mod remote;
pub mod sync;
pub mod typed;

pub use binding::BindingError;
pub use connection::ReconcileError;
pub use context::{Context, EngineConfig};
pub use crdpull::SchemaError as CrdSchemaError;
pub use engine::{Engine, EngineBuilder};
pub use events::EventError;
pub use leader::LeaderConfig;
pub use link::{CredentialReport, LinkState, Links};
pub use mapper::{Identity, Mapper, ObjectKey};
pub use openapi::SchemaError as OpenApiSchemaError;
pub use related::RelatedError;
pub use remote::{Connector, KubeConnector};
pub use sync::{NoObserver, SyncError, SyncObserver, Syncers};
