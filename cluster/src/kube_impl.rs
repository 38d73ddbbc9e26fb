//! `ClusterClient` over the `kube` crate (to be written).
