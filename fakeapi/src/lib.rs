//! fakeapi: an in-process fake Kubernetes API server (kube-apiserver plus the parts of
//! kube-controller-manager kbind can observe), with real watch semantics, RBAC, faults and a
//! seeded, clock-injected world for deterministic tests.

pub mod builtins;
pub mod crd;
pub mod openapi;
pub mod patch;
pub mod rbac;
pub mod schema;
pub mod ssa;
