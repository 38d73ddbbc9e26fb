//! Run (1) of the conformance suite: every case on a fresh in-process fakeapi cluster.

use std::sync::Arc;

use kbind_conformance::{InProcessTarget, Target};

/// A fresh fake per case, so cases cannot see each other's faults.
async fn in_process() -> Arc<dyn Target> {
    Arc::new(InProcessTarget::new(1))
}

kbind_conformance::conformance_tests!(in_process);
