//! Run (2) of the conformance suite: every case on a fresh fakeapi served by its REST router,
//! through `kube::Client` and the seam's kube implementation.

use std::sync::Arc;

use kbind_conformance::{HttpTarget, Target};

/// A fresh fake per case behind its HTTP surface.
async fn over_http() -> Arc<dyn Target> {
    Arc::new(HttpTarget::new(1))
}

kbind_conformance::conformance_tests!(over_http);
