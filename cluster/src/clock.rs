//! An injectable clock, so every timestamp and timer can run on tokio's paused clock in tests.

use std::sync::Arc;

use jiff::Timestamp;

/// A source of wall-clock time.
pub trait Clock: Send + Sync + std::fmt::Debug {
    /// The current wall-clock time.
    fn now(&self) -> Timestamp;
}

/// A clock shared between the parts of one world.
pub type SharedClock = Arc<dyn Clock>;

/// The real system clock.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        Timestamp::now()
    }
}

/// A clock that starts at a fixed instant and advances with tokio's clock, so a paused tokio
/// runtime (`start_paused = true`) makes timestamps deterministic.
#[derive(Debug, Clone)]
pub struct TokioClock {
    base: Timestamp,
    start: tokio::time::Instant,
}

impl TokioClock {
    /// A clock reading `base` now and advancing with `tokio::time`.
    pub fn starting_at(base: Timestamp) -> Self {
        Self {
            base,
            start: tokio::time::Instant::now(),
        }
    }

    /// A clock starting at 2026-01-01T00:00:00Z, the default for deterministic worlds.
    pub fn fixed() -> Self {
        Self::starting_at(Timestamp::from_second(1_767_225_600).unwrap_or(Timestamp::UNIX_EPOCH))
    }
}

impl Clock for TokioClock {
    fn now(&self) -> Timestamp {
        let elapsed = tokio::time::Instant::now().saturating_duration_since(self.start);
        let span = jiff::SignedDuration::try_from(elapsed).unwrap_or(jiff::SignedDuration::ZERO);
        self.base.checked_add(span).unwrap_or(self.base)
    }
}

/// Formats a timestamp the way the Kubernetes API does (RFC 3339, second precision, `Z`).
pub fn format_time(ts: Timestamp) -> String {
    ts.strftime("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn tokio_clock_advances_with_paused_time() {
        let clock = TokioClock::fixed();
        let before = clock.now();
        tokio::time::advance(std::time::Duration::from_secs(90)).await;
        assert_eq!(clock.now().as_second() - before.as_second(), 90);
        assert_eq!(format_time(before), "2026-01-01T00:00:00Z");
    }
}
