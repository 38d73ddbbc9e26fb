//! Whether a watch has listed once, for any number of waiters. kube-runtime's
//! `Store::wait_until_ready` keeps a single waker (a oneshot receiver): a second task polling
//! it (or a `now_or_never` check, whose no-op waker replaces the real one) leaves the first
//! waiting until its timeout. A `watch` channel wakes every waiter.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

/// Set once a watch has listed; clones share it.
#[derive(Debug, Clone)]
pub(crate) struct Listed(Arc<watch::Sender<bool>>);

impl Default for Listed {
    fn default() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }
}

impl Listed {
    /// The watch has listed (idempotent).
    pub(crate) fn mark(&self) {
        self.0.send_if_modified(|listed| !std::mem::replace(listed, true));
    }

    /// Whether the watch has listed.
    pub(crate) fn is_listed(&self) -> bool {
        *self.0.borrow()
    }

    /// Waits until the watch has listed, at most `at_most`; whether it has.
    pub(crate) async fn wait(&self, at_most: Duration) -> bool {
        let mut rx = self.0.subscribe();
        let _ = tokio::time::timeout(at_most, rx.wait_for(|listed| *listed)).await;
        self.is_listed()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn every_waiter_is_woken_and_a_check_steals_no_wake_up() {
        let listed = Listed::default();
        let waiters: Vec<_> = (0..3)
            .map(|_| {
                let listed = listed.clone();
                tokio::spawn(async move { listed.wait(Duration::from_secs(30)).await })
            })
            .collect();
        tokio::task::yield_now().await;
        assert!(!listed.is_listed(), "a check in between must not steal a wake-up");
        let start = tokio::time::Instant::now();
        listed.mark();
        for waiter in waiters {
            assert!(waiter.await.expect("the waiter"));
        }
        assert!(
            start.elapsed() < Duration::from_secs(1),
            "woken at once, not at the timeout"
        );
    }
}
