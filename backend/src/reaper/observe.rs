//! What the reaper saw of each heartbeat Lease, on its own clock: when it last saw the Lease
//! change, and when it is due for reaping. Pure bookkeeping, so the rules read in one place.
//!
//! A change is a new `resourceVersion`: every renewal is a write, and a write bumps it, whatever
//! `renewTime` the consumer's (possibly skewed) clock put in it. Any other write to the Lease
//! also counts as a sign of life; that errs on the side of keeping a consumer.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};

/// One observed Lease.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Observed {
    /// The Lease's `resourceVersion` when last seen.
    pub(crate) version: String,
    /// When this reaper saw `version` first (its own clock).
    pub(crate) changed_at: Timestamp,
    /// When to reap (or retry reaping); `None` once reaped, until the Lease changes again.
    pub(crate) due: Option<Timestamp>,
}

/// Every observed `consumer-*` Lease, by consumer cluster UID (ordered, so sweeps are too).
#[derive(Debug)]
pub(crate) struct Observations {
    ttl: SignedDuration,
    leases: BTreeMap<String, Observed>,
    /// Leases seen since the watcher's last `Init` (a relist); `None` outside a relist.
    relisting: Option<BTreeSet<String>>,
}

impl Observations {
    /// No Lease observed yet; a Lease unchanged for `ttl` becomes due.
    pub(crate) fn new(ttl: Duration) -> Self {
        Self {
            ttl: SignedDuration::try_from(ttl).unwrap_or(SignedDuration::MAX),
            leases: BTreeMap::new(),
            relisting: None,
        }
    }

    /// The Lease of `consumer` was seen at `version`; a new version restarts its TTL at `now`.
    pub(crate) fn observe(&mut self, consumer: &str, version: &str, now: Timestamp) {
        if let Some(seen) = &mut self.relisting {
            seen.insert(consumer.to_string());
        }
        if self.leases.get(consumer).is_some_and(|o| o.version == version) {
            return;
        }
        let due = Some(now.saturating_add(self.ttl).unwrap_or(Timestamp::MAX));
        self.leases.insert(
            consumer.to_string(),
            Observed {
                version: version.to_string(),
                changed_at: now,
                due,
            },
        );
    }

    /// The Lease of `consumer` is gone: nothing more to wait for.
    pub(crate) fn forget(&mut self, consumer: &str) {
        self.leases.remove(consumer);
    }

    /// A relist starts: Leases it does not list again were deleted meanwhile.
    pub(crate) fn relist_started(&mut self) {
        self.relisting = Some(BTreeSet::new());
    }

    /// The relist is complete: forgets the Leases it did not list.
    pub(crate) fn relist_done(&mut self) {
        if let Some(seen) = self.relisting.take() {
            self.leases.retain(|consumer, _| seen.contains(consumer));
        }
    }

    /// The earliest due time, if any Lease is waiting.
    pub(crate) fn next_due(&self) -> Option<Timestamp> {
        self.leases.values().filter_map(|o| o.due).min()
    }

    /// The consumers due at `now`, with what was observed of them.
    pub(crate) fn due(&self, now: Timestamp) -> Vec<(String, Observed)> {
        self.leases
            .iter()
            .filter(|(_, o)| o.due.is_some_and(|due| due <= now))
            .map(|(c, o)| (c.clone(), o.clone()))
            .collect()
    }

    /// `consumer` was reaped (or reported): nothing is due until its Lease changes again.
    pub(crate) fn reaped(&mut self, consumer: &str) {
        if let Some(o) = self.leases.get_mut(consumer) {
            o.due = None;
        }
    }

    /// Reaping `consumer` failed: try again at `at`.
    pub(crate) fn retry_at(&mut self, consumer: &str, at: Timestamp) {
        if let Some(o) = self.leases.get_mut(consumer) {
            o.due = Some(at);
        }
    }

    /// How many Leases are observed.
    pub(crate) fn len(&self) -> usize {
        self.leases.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TTL: Duration = Duration::from_secs(600);

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_767_225_600 + second).unwrap()
    }

    #[test]
    fn a_lease_is_due_exactly_ttl_after_its_last_observed_change() {
        let mut obs = Observations::new(TTL);
        obs.observe("a", "1", at(0));
        obs.observe("a", "2", at(30));
        // The same version again (a relist, a resync) is no change.
        obs.observe("a", "2", at(500));
        assert_eq!(obs.next_due(), Some(at(630)));
        assert!(obs.due(at(629)).is_empty());
        let due = obs.due(at(630));
        assert_eq!(due.len(), 1);
        assert_eq!(due[0].0, "a");
        assert_eq!(due[0].1.changed_at, at(30));
    }

    #[test]
    fn a_reaped_lease_waits_for_a_change_and_a_failed_one_for_its_retry() {
        let mut obs = Observations::new(TTL);
        obs.observe("a", "1", at(0));
        obs.observe("b", "1", at(0));
        obs.reaped("a");
        obs.retry_at("b", at(660));
        assert_eq!(obs.next_due(), Some(at(660)));
        assert!(obs.due(at(10_000)).iter().all(|(c, _)| c == "b"));
        obs.observe("a", "2", at(700));
        assert_eq!(obs.due(at(1_300)).len(), 2);
    }

    #[test]
    fn a_relist_forgets_leases_deleted_meanwhile() {
        let mut obs = Observations::new(TTL);
        obs.observe("a", "1", at(0));
        obs.observe("b", "1", at(0));
        obs.relist_started();
        obs.observe("b", "1", at(100));
        obs.relist_done();
        assert_eq!(obs.len(), 1);
        // b kept its clock: the relist showed the same version.
        assert_eq!(obs.next_due(), Some(at(600)));
        obs.forget("b");
        assert_eq!(obs.next_due(), None);
    }
}
