//! The Kubernetes REST surface of a fake cluster, as an axum `Router` (to be written).

use axum::Router;

use crate::FakeCluster;

/// The REST API of `cluster`: what kubectl and `kube::Client` talk to.
pub fn router(_cluster: FakeCluster) -> Router {
    Router::new()
}
