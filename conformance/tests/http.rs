//! Run (2) of the conformance suite: every case on a fresh fakeapi served over HTTPS on
//! loopback, through `kube::Client` and the seam's kube implementation.

use std::sync::Arc;

use kbind_conformance::{HttpTarget, Target};

/// A fresh fake per case behind its own HTTPS server.
async fn over_https() -> Arc<dyn Target> {
    match HttpTarget::start(1).await {
        Ok(target) => Arc::new(target),
        Err(e) => panic!("failed to serve fakeapi over HTTPS: {e}"),
    }
}

kbind_conformance::conformance_tests!(over_https);
