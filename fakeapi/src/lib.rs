//! fakeapi: an in-process fake Kubernetes API server (kube-apiserver plus the parts of
//! kube-controller-manager kbind can observe), with real watch semantics, RBAC, faults and a
//! seeded, clock-injected world for deterministic tests.

mod admission;
pub mod bootstrap;
pub mod builtins;
pub mod client;
pub mod cluster;
pub mod controllers;
pub mod crd;
pub mod faults;
pub mod http;
mod labels;
pub mod meta;
pub mod openapi;
pub mod ops;
pub mod patch;
pub mod rbac;
mod reads;
pub mod registry;
pub mod sample;
pub mod schema;
pub mod selector;
pub mod serve;
pub mod ssa;
pub mod store;
mod strategy;
pub mod watch;

pub use client::FakeClient;
pub use cluster::{FakeCluster, FakeClusterBuilder};
pub use faults::{ErrorRule, InjectedError, Interloper, RequestRecord};
pub use ops::{Caller, Subresource};
pub use rbac::UserInfo;
pub use store::{EventType, HistoryEvent, WriteRecord};
