//! The wall clock the auth module reads, injectable so tests move time instead of waiting.

use std::fmt;
use std::sync::Arc;

/// A source of the current time (expiry of sealed cookies and ID tokens).
#[derive(Clone)]
pub struct Clock(Arc<dyn Fn() -> jiff::Timestamp + Send + Sync>);

impl Clock {
    /// The system clock.
    pub fn system() -> Self {
        Self(Arc::new(jiff::Timestamp::now))
    }

    /// A clock that reads `now` (tests).
    pub fn new(now: impl Fn() -> jiff::Timestamp + Send + Sync + 'static) -> Self {
        Self(Arc::new(now))
    }

    /// The current time.
    pub fn now(&self) -> jiff::Timestamp {
        (self.0)()
    }

    /// The current time as `chrono`, which `openidconnect` verifies expiry against.
    pub(crate) fn now_chrono(&self) -> chrono::DateTime<chrono::Utc> {
        let now = self.now();
        chrono::DateTime::from_timestamp(now.as_second(), now.subsec_nanosecond().unsigned_abs()).unwrap_or_default()
    }
}

impl Default for Clock {
    fn default() -> Self {
        Self::system()
    }
}

impl fmt::Debug for Clock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("Clock").field(&self.now()).finish()
    }
}
