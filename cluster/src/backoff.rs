//! One backoff with jitter for every retry, backoff and requeue of kbind. The jitter comes from
//! an injectable random source, like the clock: a seeded one in a deterministic world, so a
//! paused-clock run replays exactly, and one seeded from the OS in a konnector, so a thousand
//! konnectors that lost one provider at the same instant do not come back at the same instant.
//!
//! Replayable also means independent of task order: tasks that run concurrently would draw
//! from one stream in whatever order the scheduler (and kube-runtime's queues) run them. So a
//! long-lived actor draws from a stream of its own ([`Randomness::fork`], by a label), and a
//! requeue of one object takes a value keyed by that object ([`Randomness::unit_for`]).
//!
//! ```
//! use std::time::Duration;
//! use kbind_cluster::backoff::{Backoff, seeded};
//!
//! let randomness = seeded(7);
//! let mut backoff = Backoff::new(Duration::from_millis(800), Duration::from_secs(30), randomness);
//! let first = backoff.next_delay();
//! assert!(first >= Duration::from_millis(800) && first < Duration::from_millis(1600));
//! ```

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

use crate::Error;

/// A source of uniformly distributed numbers in `[0, 1)`.
pub trait Randomness: Send + Sync + std::fmt::Debug {
    /// The next number of this stream.
    fn unit(&self) -> f64;

    /// A stream of its own for the actor `label` names, derived from this source's seed.
    fn fork(&self, label: &str) -> SharedRandomness;

    /// A number for `label` alone, the same every time (no stream advances).
    fn unit_for(&self, label: &str) -> f64;
}

/// A random source shared by the parts of one process or world.
pub type SharedRandomness = Arc<dyn Randomness>;

/// A seeded ChaCha stream: the same seed gives the same jitter in the same order.
#[derive(Debug)]
pub struct Seeded {
    seed: u64,
    stream: Mutex<ChaCha8Rng>,
}

impl Seeded {
    fn new(seed: u64) -> Self {
        Self {
            seed,
            stream: Mutex::new(ChaCha8Rng::seed_from_u64(seed)),
        }
    }
}

impl Randomness for Seeded {
    fn unit(&self) -> f64 {
        self.stream.lock().random::<f64>()
    }

    fn fork(&self, label: &str) -> SharedRandomness {
        Arc::new(Seeded::new(mix(self.seed, label)))
    }

    fn unit_for(&self, label: &str) -> f64 {
        // The top 53 bits as a fraction: uniform in [0, 1).
        (mix(self.seed, label) >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// `seed` and `label` mixed into a new seed: FNV-1a over the label from the seed, then
/// splitmix64's finalizer (stable across runs, platforms and Rust versions).
fn mix(seed: u64, label: &str) -> u64 {
    let mut h = seed ^ 0xcbf2_9ce4_8422_2325;
    for byte in label.bytes() {
        h ^= u64::from(byte);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h = (h ^ (h >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    h ^ (h >> 31)
}

/// A random source replaying `seed` (deterministic worlds, tests).
pub fn seeded(seed: u64) -> SharedRandomness {
    Arc::new(Seeded::new(seed))
}

/// A random source seeded from the operating system (a konnector, a backend).
pub fn from_entropy() -> SharedRandomness {
    Arc::new(Seeded::new(rand::rng().random()))
}

/// How much a backoff delay may grow by jitter: up to this fraction of itself (client-go's
/// reflector jitters its backoff by 1.0, so a herd spreads over a whole delay).
pub const BACKOFF_JITTER: f64 = 1.0;

/// How much a periodic wait (a resync backstop, a heartbeat, a requeue) may grow by jitter: a
/// tenth spreads a herd's timers apart without stretching any deadline they serve much.
pub const PERIOD_JITTER: f64 = 0.1;

/// `delay` grown by a random share of up to `fraction` of itself; never shorter, so a wait the
/// server asked for (`Retry-After`) or a deadline it protects is never cut.
pub fn jitter(randomness: &dyn Randomness, delay: Duration, fraction: f64) -> Duration {
    let grown = delay.as_secs_f64() * (1.0 + fraction.max(0.0) * randomness.unit());
    Duration::try_from_secs_f64(grown).unwrap_or(delay)
}

/// A periodic wait of `period` of the actor or object `key`, grown by up to [`PERIOD_JITTER`]:
/// the same share for the same key every time, another for each key (and each konnector).
pub fn period(randomness: &dyn Randomness, key: &str, period: Duration) -> Duration {
    let grown = period.as_secs_f64() * (1.0 + PERIOD_JITTER * randomness.unit_for(key));
    Duration::try_from_secs_f64(grown).unwrap_or(period)
}

/// The wait the server asked for with a 429's `Retry-After`, if `error` is one.
pub fn retry_after(error: &Error) -> Option<Duration> {
    match error {
        Error::TooManyRequests {
            retry_after_seconds: Some(seconds),
            ..
        } => Some(Duration::from_secs(u64::from(*seconds))),
        _ => None,
    }
}

/// The wait after a failure whose backoff says `delay` and whose server asked for `asked`
/// (a 429's `Retry-After`): never sooner than asked, and spread by the jittered backoff on top,
/// so a herd that was told the same wait does not come back in the same instant.
pub fn after_asked(delay: Duration, asked: Option<Duration>) -> Duration {
    match asked {
        Some(asked) if asked > delay => asked + delay,
        _ => delay,
    }
}

/// Exponential backoff with jitter: `initial`, doubling up to `max`, each delay grown by up to
/// [`BACKOFF_JITTER`] of itself (the base doubles, not the jittered value, so the spread never
/// compounds into a longer wait than `2 × max`).
#[derive(Debug, Clone)]
pub struct Backoff {
    initial: Duration,
    max: Duration,
    factor: f64,
    fraction: f64,
    next: Duration,
    randomness: SharedRandomness,
}

impl Backoff {
    /// A backoff from `initial` doubling up to `max`, jittered from `randomness`.
    pub fn new(initial: Duration, max: Duration, randomness: SharedRandomness) -> Self {
        Self {
            initial,
            max,
            factor: 2.0,
            fraction: BACKOFF_JITTER,
            next: initial,
            randomness,
        }
    }

    /// The same backoff growing by `factor` per failure instead of 2.
    #[must_use]
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = factor.max(1.0);
        self
    }

    /// The same backoff jittered by up to `fraction` of each delay instead of [`BACKOFF_JITTER`].
    #[must_use]
    pub fn jitter(mut self, fraction: f64) -> Self {
        self.fraction = fraction;
        self
    }

    /// The delay before the next attempt (each call is one more failure).
    pub fn next_delay(&mut self) -> Duration {
        let base = self.next.min(self.max);
        self.next = Duration::try_from_secs_f64(base.as_secs_f64() * self.factor)
            .unwrap_or(self.max)
            .min(self.max);
        jitter(self.randomness.as_ref(), base, self.fraction)
    }

    /// The delay after `error`: the next backoff, or, after a 429, the server's `Retry-After`
    /// plus that backoff (see [`after_asked`]).
    pub fn after(&mut self, error: &Error) -> Duration {
        after_asked(self.next_delay(), retry_after(error))
    }

    /// Back to `initial` (after a success).
    pub fn reset(&mut self) {
        self.next = self.initial;
    }
}

impl Iterator for Backoff {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(self.next_delay())
    }
}

impl kube::runtime::utils::Backoff for Backoff {
    fn reset(&mut self) {
        Backoff::reset(self);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_same_seed_gives_the_same_delays_and_another_seed_others() {
        let delays = |seed| {
            let mut b = Backoff::new(Duration::from_millis(800), Duration::from_secs(30), seeded(seed));
            (0..8).map(|_| b.next_delay()).collect::<Vec<_>>()
        };
        assert_eq!(delays(1), delays(1), "a seeded world must replay");
        assert_ne!(delays(1), delays(2), "jitter must depend on the seed");
    }

    #[test]
    fn delays_double_from_initial_to_max_and_jitter_only_lengthens() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(8), seeded(3));
        for base in [1u64, 2, 4, 8, 8, 8] {
            let d = b.next_delay();
            let base = Duration::from_secs(base);
            assert!(d >= base && d < base * 2, "{d:?} is not in [{base:?}, {:?})", base * 2);
        }
        b.reset();
        assert!(b.next_delay() < Duration::from_secs(2), "reset starts over");
    }

    #[test]
    fn a_herd_of_backoffs_spreads_over_the_delay() {
        let randomness = seeded(11);
        let firsts: Vec<Duration> = (0..1000)
            .map(|_| Backoff::new(Duration::from_secs(10), Duration::from_secs(60), randomness.clone()).next_delay())
            .collect();
        let mut per_second = [0usize; 20];
        for d in &firsts {
            per_second[d.as_secs() as usize] += 1;
        }
        // Ten buckets from 10 s to 20 s, each with a tenth of the herd, give or take.
        for (second, count) in per_second.iter().enumerate().skip(10) {
            assert!(
                (50..=150).contains(count),
                "second {second} holds {count} of 1000 retries: {per_second:?}"
            );
        }
    }

    #[test]
    fn retry_after_is_honoured_when_longer_than_the_backoff() {
        let mut b = Backoff::new(Duration::from_secs(1), Duration::from_secs(30), seeded(5));
        let throttled = Error::TooManyRequests {
            message: "slow down".into(),
            retry_after_seconds: Some(20),
        };
        let waited = b.after(&throttled);
        assert!(
            waited >= Duration::from_secs(20) && waited < Duration::from_secs(24),
            "{waited:?}: the asked 20 s, spread by the backoff's jittered delay on top"
        );
        let unavailable = Error::Transport("connection refused".into());
        assert!(b.after(&unavailable) < Duration::from_secs(20));
    }

    #[test]
    fn a_period_grows_by_at_most_a_tenth_and_differs_by_key() {
        let randomness = seeded(9);
        let waits: Vec<Duration> = (0..100)
            .map(|i| period(randomness.as_ref(), &format!("binding-{i}"), Duration::from_secs(30)))
            .collect();
        for d in &waits {
            assert!(*d >= Duration::from_secs(30) && *d <= Duration::from_secs(33), "{d:?}");
        }
        let distinct: std::collections::BTreeSet<_> = waits.iter().collect();
        assert!(distinct.len() > 90, "keys must spread: {distinct:?}");
        assert_eq!(
            period(randomness.as_ref(), "binding-7", Duration::from_secs(30)),
            waits[7],
            "a key's share does not depend on what was drawn before"
        );
    }

    #[test]
    fn forks_are_streams_of_their_own_whatever_the_order() {
        let a = seeded(1);
        let first: Vec<f64> = {
            let x = a.fork("link/acme");
            (0..4).map(|_| x.unit()).collect()
        };
        let b = seeded(1);
        let _ = b.fork("link/beta").unit();
        let _ = b.unit();
        let x = b.fork("link/acme");
        let again: Vec<f64> = (0..4).map(|_| x.unit()).collect();
        assert_eq!(first, again, "another actor's draws must not shift this one's");
        assert_ne!(a.fork("link/beta").unit(), a.fork("link/acme").unit());
    }
}
