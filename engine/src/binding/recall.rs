//! What the binding reconciler remembers between passes, so a healthy binding does not ask the
//! consumer what this process already knows (no needless reads): which APIs' objects
//! carry no `status-stale` mark, whether a binding without related rules has any related copy
//! left, and how long to wait before looking again while its provider is not engaged.
//!
//! Everything starts unknown, so the first pass after a start (or a leader hand-over) asks once:
//! a mark or a copy left by an earlier process is still found.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use kbind_cluster::backoff::Backoff;
use parking_lot::Mutex;

use super::view::BindingView;

/// The longest wait between passes of a binding whose provider is not engaged: the syncers'
/// resync interval (engagement and Connection changes trigger a pass at once anyway).
pub(crate) const DOWN_MAX: Duration = Duration::from_secs(300);

/// Per-binding memory, keyed by kind, namespace, name and UID (a re-created binding starts over).
#[derive(Debug, Default)]
pub(crate) struct Recall {
    bindings: Mutex<BTreeMap<String, Remembered>>,
}

#[derive(Debug, Default)]
struct Remembered {
    /// APIs none of whose objects carry `status-stale` (swept since the last mark).
    clean: BTreeSet<String>,
    /// The last related pass of this binding, which had no rules, found none of its copies.
    no_copies: bool,
    /// The waits between passes while the provider is not engaged.
    down: Option<Backoff>,
    /// The waits between passes while an API waits (a CRD to be Established, a hand-over): the
    /// events it waits for wake it; this is the safety net.
    waiting: Option<Backoff>,
}

fn key(view: &BindingView) -> String {
    let r = view.reference();
    format!("{:?}/{}/{}/{}", r.kind, r.namespace.unwrap_or_default(), r.name, r.uid)
}

impl Recall {
    fn with<T>(&self, view: &BindingView, f: impl FnOnce(&mut Remembered) -> T) -> T {
        let mut map = self.bindings.lock();
        f(map.entry(key(view)).or_default())
    }

    /// Whether objects of `api` may carry a mark (unknown counts as "may").
    pub(crate) fn may_be_stale(&self, view: &BindingView, api: &str) -> bool {
        self.with(view, |r| !r.clean.contains(api))
    }

    /// A sweep found (and left) no mark on `api`'s objects.
    pub(crate) fn swept(&self, view: &BindingView, api: &str) {
        self.with(view, |r| r.clean.insert(api.to_string()));
    }

    /// `api`'s objects were (or may have been) marked.
    pub(crate) fn marked(&self, view: &BindingView, api: &str) {
        self.with(view, |r| r.clean.remove(api));
    }

    /// Whether the related pass can be skipped: no rules now, and none of the binding's copies
    /// were left by the last pass (only a rule makes a copy).
    pub(crate) fn related_idle(&self, view: &BindingView) -> bool {
        view.spec.related_resources.is_empty() && self.with(view, |r| r.no_copies)
    }

    /// What the last related pass left: `copies` of this binding on either side.
    pub(crate) fn related_done(&self, view: &BindingView, copies: usize) {
        let none = view.spec.related_resources.is_empty() && copies == 0;
        self.with(view, |r| r.no_copies = none);
    }

    /// The wait before the next pass while the provider is not engaged: the next delay of the
    /// binding's backoff (`start` makes it the first time).
    pub(crate) fn next_down_delay(&self, view: &BindingView, start: impl FnOnce() -> Backoff) -> Duration {
        self.with(view, |r| r.down.get_or_insert_with(start).next_delay())
    }

    /// The wait before the next pass while an API waits for something that an event brings
    /// (its CRD Established, another binding gone): the next delay of the binding's backoff.
    pub(crate) fn next_wait_delay(&self, view: &BindingView, start: impl FnOnce() -> Backoff) -> Duration {
        self.with(view, |r| r.waiting.get_or_insert_with(start).next_delay())
    }

    /// Nothing waits any more: the next wait backs off from the start again.
    pub(crate) fn settled(&self, view: &BindingView) {
        self.with(view, |r| r.waiting = None);
    }

    /// The provider is engaged: the next outage backs off from the start again.
    pub(crate) fn engaged(&self, view: &BindingView) {
        self.with(view, |r| r.down = None);
    }

    /// Forgets a binding that is gone.
    pub(crate) fn forget(&self, view: &BindingView) {
        self.bindings.lock().remove(&key(view));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_api::ClusterBinding;

    fn view(uid: &str) -> BindingView {
        let b: ClusterBinding = serde_json::from_value(serde_json::json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
            "metadata": {"name": "acme", "uid": uid},
            "spec": {"connectionRef": {"name": "acme"}, "apis": [{"name": "widgets.example.org"}]},
        }))
        .expect("a ClusterBinding");
        BindingView::from(&b)
    }

    #[test]
    fn staleness_is_unknown_until_swept_and_again_after_a_mark() {
        let recall = Recall::default();
        let v = view("u1");
        assert!(recall.may_be_stale(&v, "widgets.example.org"));
        recall.swept(&v, "widgets.example.org");
        assert!(!recall.may_be_stale(&v, "widgets.example.org"));
        assert!(
            recall.may_be_stale(&view("u2"), "widgets.example.org"),
            "a new UID starts over"
        );
        recall.marked(&v, "widgets.example.org");
        assert!(recall.may_be_stale(&v, "widgets.example.org"));
    }

    #[test]
    fn the_down_delay_doubles_up_to_the_resync_interval_and_resets_once_engaged() {
        let recall = Recall::default();
        let v = view("u1");
        let first = Duration::from_secs(2);
        let randomness = kbind_cluster::backoff::seeded(1);
        let start = || Backoff::new(first, DOWN_MAX, randomness.clone()).jitter(kbind_cluster::backoff::PERIOD_JITTER);
        let delays: Vec<u64> = (0..10).map(|_| recall.next_down_delay(&v, start).as_secs()).collect();
        // Doubling from 2 s to the 300 s cap, each wait grown by up to a tenth of jitter.
        for (delay, base) in delays.iter().zip([2u64, 4, 8, 16, 32, 64, 128, 256, 300, 300]) {
            assert!((base..=base + base / 10).contains(delay), "{delays:?}");
        }
        recall.engaged(&v);
        assert!(
            recall.next_down_delay(&v, start) < Duration::from_secs(3),
            "starts over once engaged"
        );
    }

    #[test]
    fn the_related_pass_is_skipped_only_without_rules_after_a_pass_that_found_no_copy() {
        let recall = Recall::default();
        let v = view("u1");
        assert!(!recall.related_idle(&v), "unknown at first");
        recall.related_done(&v, 1);
        assert!(!recall.related_idle(&v), "a copy is left to collect");
        recall.related_done(&v, 0);
        assert!(recall.related_idle(&v));
    }
}
