//! list+watch over the seam as a `kube_runtime::watcher::Event` stream (to be written).
