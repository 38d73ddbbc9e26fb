//! Sync latency: when a syncer first saw an unprocessed change of each object, how long until
//! the change was written up (spec) and down (status), and how many objects wait for a
//! reconcile. Times come from tokio's clock, so tests on a paused clock measure exactly.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::time::Instant;

use crate::mapper::ObjectKey;

/// Sees how long syncing takes, per API (`<plural>.<group>`); the konnector turns this into
/// histograms. Called on the syncer's task: implementations must not block.
pub trait SyncObserver: Send + Sync {
    /// A triggered change of one object reached the provider (the apply completed).
    fn spec_up(&self, api: &str, latency: Duration);
    /// A triggered change of one object brought the provider status down (the consumer status
    /// write completed).
    fn status_down(&self, api: &str, latency: Duration);
}

/// Observes nothing: the default of an engine built without an observer.
#[derive(Debug, Clone, Copy, Default)]
pub struct NoObserver;

impl SyncObserver for NoObserver {
    fn spec_up(&self, _api: &str, _latency: Duration) {}

    fn status_down(&self, _api: &str, _latency: Duration) {}
}

/// Per syncer: objects triggered and not yet picked up (the queue), and objects picked up whose
/// reconcile failed (waiting for the retry, which keeps measuring from the first trigger).
#[derive(Debug, Default)]
pub(crate) struct PendingTriggers {
    inner: Mutex<Triggers>,
}

#[derive(Debug, Default)]
struct Triggers {
    queued: BTreeMap<ObjectKey, Instant>,
    retrying: BTreeMap<ObjectKey, Instant>,
    /// resourceVersions of the syncer's own consumer writes (finalizer, status) whose watch
    /// events are echoes, not changes.
    own: BTreeMap<ObjectKey, BTreeSet<String>>,
    /// The status our latest status write set and the resourceVersion it produced, until its
    /// echo arrives: a reconcile that runs before that reads a store without it.
    status: BTreeMap<ObjectKey, (String, Value)>,
}

impl PendingTriggers {
    /// A change of `key` was seen now; an earlier unprocessed change keeps its time.
    pub(crate) fn trigger(&self, key: ObjectKey) {
        self.inner.lock().queued.entry(key).or_insert_with(Instant::now);
    }

    /// A consumer watch event of `key` at `resource_version`: a change unless it is the echo of
    /// the syncer's own write.
    pub(crate) fn consumer_event(&self, key: ObjectKey, resource_version: Option<&str>) {
        let mut triggers = self.inner.lock();
        if triggers
            .status
            .get(&key)
            .is_none_or(|(rv, _)| Some(rv.as_str()) == resource_version)
        {
            triggers.status.remove(&key);
        }
        if let Some(own) = triggers.own.get_mut(&key) {
            if resource_version.is_some_and(|rv| own.remove(rv)) {
                return;
            }
            // Events arrive in order: older own writes will not show up any more.
            triggers.own.remove(&key);
            triggers.status.remove(&key);
        }
        triggers.queued.entry(key).or_insert_with(Instant::now);
    }

    /// The syncer wrote `key` on the consumer, producing `resource_version`.
    pub(crate) fn own_write(&self, key: ObjectKey, resource_version: Option<String>) {
        if let Some(rv) = resource_version {
            self.inner.lock().own.entry(key).or_default().insert(rv);
        }
    }

    /// The syncer wrote `status` into `key`'s status, producing `resource_version`.
    pub(crate) fn own_status(&self, key: ObjectKey, resource_version: Option<String>, status: Value) {
        let Some(rv) = resource_version else {
            return;
        };
        let mut triggers = self.inner.lock();
        triggers.own.entry(key.clone()).or_default().insert(rv.clone());
        triggers.status.insert(key, (rv, status));
    }

    /// Whether our status write of exactly `status` into `key` has not reached the store yet
    /// (and nobody wrote the object since).
    pub(crate) fn status_in_flight(&self, key: &ObjectKey, status: &Value) -> bool {
        let triggers = self.inner.lock();
        triggers
            .status
            .get(key)
            .is_some_and(|(rv, written)| written == status && triggers.own.get(key).is_some_and(|own| own.contains(rv)))
    }

    /// A reconcile of `key` starts: the time of the first unprocessed change, if any (`None`
    /// for a periodic resync with nothing new).
    pub(crate) fn pick_up(&self, key: &ObjectKey) -> Option<Instant> {
        let mut triggers = self.inner.lock();
        let queued = triggers.queued.remove(key);
        let retrying = triggers.retrying.remove(key);
        match (queued, retrying) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The reconcile that picked up the change of `since` failed: the retry measures from it.
    pub(crate) fn retry(&self, key: ObjectKey, since: Instant) {
        let mut triggers = self.inner.lock();
        let at = triggers.retrying.entry(key).or_insert(since);
        *at = (*at).min(since);
    }

    /// The object is gone: nothing will reconcile it.
    pub(crate) fn forget(&self, key: &ObjectKey) {
        let mut triggers = self.inner.lock();
        triggers.queued.remove(key);
        triggers.retrying.remove(key);
        triggers.own.remove(key);
        triggers.status.remove(key);
    }

    /// Objects triggered and not yet picked up.
    pub(crate) fn depth(&self) -> usize {
        self.inner.lock().queued.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(name: &str) -> ObjectKey {
        ObjectKey::namespaced("a", name)
    }

    #[tokio::test(start_paused = true)]
    async fn the_first_unprocessed_change_sets_the_time() {
        let pending = PendingTriggers::default();
        let first = Instant::now();
        pending.trigger(key("w"));
        tokio::time::advance(Duration::from_secs(3)).await;
        pending.trigger(key("w"));
        pending.trigger(key("x"));
        assert_eq!(pending.depth(), 2, "one entry per object, however often triggered");
        tokio::time::advance(Duration::from_secs(2)).await;
        let since = pending.pick_up(&key("w")).unwrap();
        assert_eq!(since, first);
        assert_eq!(since.elapsed(), Duration::from_secs(5));
        assert_eq!(pending.depth(), 1);
        assert_eq!(
            pending.pick_up(&key("w")),
            None,
            "a resync without a change has no start"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_reconcile_keeps_measuring_from_the_first_change_without_counting_as_queued() {
        let pending = PendingTriggers::default();
        let first = Instant::now();
        pending.trigger(key("w"));
        let since = pending.pick_up(&key("w")).unwrap();
        pending.retry(key("w"), since);
        assert_eq!(pending.depth(), 0, "a retry waits, it is not queued");
        tokio::time::advance(Duration::from_secs(5)).await;
        pending.trigger(key("w"));
        assert_eq!(pending.depth(), 1);
        assert_eq!(pending.pick_up(&key("w")), Some(first), "the older start wins");
        assert_eq!(pending.pick_up(&key("w")), None);
    }

    #[test]
    fn our_status_is_in_flight_until_its_echo_or_someone_elses_write() {
        let pending = PendingTriggers::default();
        let ready = serde_json::json!({"phase": "Ready"});
        pending.own_write(key("w"), Some("4".into()));
        pending.own_status(key("w"), Some("5".into()), ready.clone());
        assert!(pending.status_in_flight(&key("w"), &ready), "the store has not seen it");
        assert!(
            !pending.status_in_flight(&key("w"), &serde_json::json!({"phase": "Gone"})),
            "another status is not the one written"
        );
        assert!(!pending.status_in_flight(&key("x"), &ready), "another object");
        pending.consumer_event(key("w"), Some("4"));
        assert!(
            pending.status_in_flight(&key("w"), &ready),
            "the echo of an earlier write (the finalizer) leaves it in flight"
        );
        pending.consumer_event(key("w"), Some("5"));
        assert!(!pending.status_in_flight(&key("w"), &ready), "the store has it now");

        pending.own_status(key("w"), Some("7".into()), ready.clone());
        pending.consumer_event(key("w"), Some("6"));
        assert!(
            !pending.status_in_flight(&key("w"), &ready),
            "someone else wrote the object: compare with what the store shows"
        );
        pending.own_status(key("w"), Some("9".into()), ready.clone());
        pending.forget(&key("w"));
        assert!(
            !pending.status_in_flight(&key("w"), &ready),
            "a deleted object forgets it"
        );
    }

    #[test]
    fn echoes_of_own_writes_are_not_changes() {
        let pending = PendingTriggers::default();
        pending.own_write(key("w"), Some("5".into()));
        pending.own_write(key("w"), Some("6".into()));
        pending.consumer_event(key("w"), Some("5"));
        pending.consumer_event(key("w"), Some("6"));
        assert_eq!(pending.depth(), 0, "both writes were ours");
        pending.consumer_event(key("w"), Some("6"));
        assert_eq!(pending.depth(), 1, "an echo is skipped once only");
        pending.pick_up(&key("w"));
        pending.own_write(key("w"), Some("8".into()));
        pending.consumer_event(key("w"), Some("7"));
        assert_eq!(pending.depth(), 1, "someone else's write is a change");
        pending.pick_up(&key("w"));
        pending.consumer_event(key("w"), Some("8"));
        assert_eq!(
            pending.depth(),
            1,
            "own writes older than a foreign event are forgotten"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn forgotten_objects_leave_the_queue() {
        let pending = PendingTriggers::default();
        pending.trigger(key("w"));
        pending.retry(key("x"), Instant::now());
        pending.forget(&key("w"));
        pending.forget(&key("x"));
        assert_eq!(pending.depth(), 0);
        assert_eq!(pending.pick_up(&key("x")), None);
    }
}
