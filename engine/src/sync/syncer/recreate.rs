//! The throttle on re-creating a copy: provider deletes arrive as events, so a provider that
//! deletes every copy we make (a garbage collector, a policy controller) would otherwise meet a
//! create per event as fast as the network allows.

use std::collections::BTreeMap;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::mapper::ObjectKey;

/// Least time between two creates of the same copy.
const RECREATE_INTERVAL: Duration = Duration::from_secs(1);

/// When each copy was last created, kept for [`RECREATE_INTERVAL`].
#[derive(Debug, Default)]
pub(super) struct RecreateThrottle {
    created: Mutex<BTreeMap<ObjectKey, Instant>>,
}

impl RecreateThrottle {
    /// How long a create of `target` must wait: `None` unless the copy was created less than
    /// [`RECREATE_INTERVAL`] ago (then deleted by someone else). Records this create otherwise.
    pub(super) fn wait(&self, target: &ObjectKey) -> Option<Duration> {
        let now = Instant::now();
        let mut created = self.created.lock();
        // Pruned only when large: a first sync creates many copies within one interval.
        if created.len() > 1024 {
            created.retain(|_, at| now.duration_since(*at) < RECREATE_INTERVAL);
        }
        if let Some(left) = recreate_left(&created, target, now) {
            return Some(left);
        }
        created.insert(target.clone(), now);
        None
    }

    /// Whether `target` was created less than [`RECREATE_INTERVAL`] ago.
    pub(super) fn created_lately(&self, target: &ObjectKey) -> bool {
        let created = self.created.lock();
        recreate_left(&created, target, Instant::now()).is_some()
    }
}

/// What is left of [`RECREATE_INTERVAL`] since `target` was last created, if anything.
fn recreate_left(created: &BTreeMap<ObjectKey, Instant>, target: &ObjectKey, now: Instant) -> Option<Duration> {
    let at = created.get(target)?;
    RECREATE_INTERVAL
        .checked_sub(now.duration_since(*at))
        .filter(|left| !left.is_zero())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_copy_created_again_within_the_interval_waits_what_is_left() {
        let throttle = RecreateThrottle::default();
        let w = ObjectKey::namespaced("a", "w");
        assert_eq!(throttle.wait(&w), None, "a first create goes at once");
        assert!(throttle.created_lately(&w));
        tokio::time::advance(Duration::from_millis(300)).await;
        assert_eq!(throttle.wait(&w), Some(Duration::from_millis(700)));
        assert_eq!(
            throttle.wait(&ObjectKey::namespaced("a", "other")),
            None,
            "another copy is not held back"
        );
        tokio::time::advance(Duration::from_millis(700)).await;
        assert!(!throttle.created_lately(&w));
        assert_eq!(throttle.wait(&w), None, "after the interval it creates again");
    }
}
