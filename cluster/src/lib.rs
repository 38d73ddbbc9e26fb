//! The ClusterClient seam: the narrow, dynamic, object-safe API through which kbind's engine
//! talks to a cluster, with its `kube` implementation and the one list+watch → watcher-event
//! conversion every consumer of the seam shares.

pub mod backoff;
pub mod client;
pub mod clock;
pub mod discovery;
pub mod error;
pub mod identity;
pub mod kube_impl;
mod kube_watch;
pub mod layer;
pub mod limit;
pub mod planted;
pub mod timeout;
pub mod token;
pub mod transport;
pub mod watcher;

pub use client::{ClusterClient, ClusterClientExt, WatchStream, from_dynamic, to_dynamic};
pub use clock::{Clock, SharedClock, SystemClock, TokioClock};
pub use discovery::{ApiGroupInfo, DiscoveredResource, Discovery};
pub use error::{Error, Result};
pub use identity::{ClusterIdentity, IdentitySource};
pub use kube_impl::KubeClusterClient;
pub use layer::{Layer, Request};
pub use timeout::{REQUEST_TIMEOUT, RequestTimeout, with_request_timeout};
pub use token::BearerToken;
pub use watcher::{BackoffPolicy, WatcherConfig, into_seam_error, watcher};

pub use kube::api::{
    ApiResource, DeleteParams, DynamicObject, GetParams, ListParams, ObjectList, Patch, PatchParams, PostParams,
    PropagationPolicy, WatchEvent, WatchParams,
};
