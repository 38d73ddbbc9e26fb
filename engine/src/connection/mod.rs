//! The Connection reconciler (to be written): SecretValid, Connected, PermissionDenied,
//! discovery into exportedAPIs, the heartbeat Lease, Ready, and the cleanup finalizers.

use crate::context::Context;

/// Runs the Connection reconciler until the future is dropped.
pub async fn run(_ctx: Context) {
    std::future::pending::<()>().await
}
