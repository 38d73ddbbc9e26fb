//! Per-client rate limits: binds, pickups and failed sign-ins, each a GCRA limiter keyed by the
//! client's address; a refusal is a 429 with an `ApiError` body and `Retry-After`.
//!
//! The limiter is small and hand-written rather than `governor`'s because the failed-sign-in
//! throttle must ask "is this client blocked?" before checking a credential, without spending a
//! cell (governor has no such peek), and because it runs on tokio's clock, so tests drive it with
//! the paused clock. Clients whose allowance is full again are forgotten, so the map holds only
//! clients seen within one burst window.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use tokio::time::Instant;

use super::{GatewayError, Rate};

/// How often the map of clients is swept of those whose allowance is full again.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// Who a request counts against: the address the nearest untrusted hop connected from, or
/// `None` when the request carries no peer address (in-process tests share one key).
pub(crate) type ClientKey = Option<IpAddr>;

/// The client address of a request behind `trusted_proxies` reverse proxies.
///
/// Each proxy appends the address it was connected from to `X-Forwarded-For`, so with `n`
/// trusted proxies the client is the `n`-th entry from the right; every entry left of it was
/// written by the client and is ignored. With no trusted proxy the peer address is the client.
/// A header shorter than `n` means a trusted proxy did not append: its leftmost entry is then
/// the nearest hop known. An unparsable entry at that position falls back to the peer address
/// (stricter: every client behind that proxy shares its allowance).
pub(crate) fn client_key(headers: &http::HeaderMap, peer: Option<SocketAddr>, trusted_proxies: usize) -> ClientKey {
    let peer = peer.map(|addr| addr.ip());
    if trusted_proxies == 0 {
        return peer;
    }
    // Several header lines are one comma-separated list, in order (RFC 9110 §5.3).
    let hops: Vec<&str> = headers
        .get_all("x-forwarded-for")
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|hop| !hop.is_empty())
        .collect();
    // Fewer hops than trusted proxies: the first one is the nearest the client could reach.
    let Some(hop) = hops.get(hops.len().saturating_sub(trusted_proxies)) else {
        return peer;
    };
    hop.parse::<IpAddr>().ok().or(peer)
}

/// The peer address axum's connect-info put on the request, if any.
pub(crate) fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}

/// A keyed GCRA limiter: `rate.burst` requests at once, then one per `60s / rate.per_minute`.
#[derive(Debug)]
pub(crate) struct Limiter {
    /// Time between two requests once the burst is spent.
    interval: Duration,
    /// How far ahead of now a client's theoretical arrival time may be and still pass.
    tolerance: Duration,
    state: Mutex<Clients>,
}

#[derive(Debug)]
struct Clients {
    /// Per client: the theoretical arrival time of its next request (GCRA's TAT).
    next: HashMap<ClientKey, Instant>,
    next_prune: Instant,
}

impl Limiter {
    /// A limiter for `rate` (a zero rate or burst counts as one).
    pub(crate) fn new(rate: Rate) -> Self {
        let interval = Duration::from_secs(60) / rate.per_minute.max(1);
        Limiter {
            interval,
            tolerance: interval * (rate.burst.max(1) - 1),
            state: Mutex::new(Clients {
                next: HashMap::new(),
                next_prune: Instant::now() + PRUNE_EVERY,
            }),
        }
    }

    /// Whether `key` may make a request now, without spending anything; `Err` is the wait.
    pub(crate) fn check(&self, key: ClientKey) -> Result<(), Duration> {
        let now = Instant::now();
        let state = self.lock();
        match state.next.get(&key) {
            Some(tat) => self.verdict(*tat, now),
            None => Ok(()),
        }
    }

    /// Spends one request of `key`'s allowance; `Err` is the wait when none is left.
    pub(crate) fn take(&self, key: ClientKey) -> Result<(), Duration> {
        let now = Instant::now();
        let mut state = self.lock();
        if now >= state.next_prune {
            // A client whose next arrival time has passed has its whole burst back: forgetting
            // it changes nothing it may do.
            state.next.retain(|_, tat| *tat > now);
            state.next_prune = now + PRUNE_EVERY;
        }
        let tat = state.next.get(&key).copied().unwrap_or(now).max(now);
        self.verdict(tat, now)?;
        state.next.insert(key, tat + self.interval);
        Ok(())
    }

    /// How many clients the limiter remembers.
    #[cfg(test)]
    pub(crate) fn clients(&self) -> usize {
        self.lock().next.len()
    }

    fn verdict(&self, tat: Instant, now: Instant) -> Result<(), Duration> {
        let allowed_from = tat.checked_sub(self.tolerance).unwrap_or(tat);
        if allowed_from <= now {
            Ok(())
        } else {
            Err(allowed_from - now)
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Clients> {
        // The state is a map of instants: a panic mid-update cannot leave it inconsistent.
        self.state.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

/// A 429 telling the client how long to wait (whole seconds, at least one).
pub(crate) fn refusal(wait: Duration) -> GatewayError {
    GatewayError::RateLimited(wait.as_secs() + u64::from(wait.subsec_nanos() > 0))
}

/// One route's limit: the limiter and how many proxies in front are trusted.
#[derive(Clone, Debug)]
pub(crate) struct RouteLimit {
    limiter: Arc<Limiter>,
    trusted_proxies: usize,
}

impl RouteLimit {
    /// `rate` per client behind `trusted_proxies` proxies.
    pub(crate) fn new(rate: Rate, trusted_proxies: usize) -> Self {
        RouteLimit {
            limiter: Arc::new(Limiter::new(rate)),
            trusted_proxies,
        }
    }
}

/// The middleware enforcing a [`RouteLimit`] (`axum::middleware::from_fn_with_state`).
pub(crate) async fn enforce(State(limit): State<RouteLimit>, request: Request, next: Next) -> Response {
    let key = client_key(request.headers(), peer_of(request.extensions()), limit.trusted_proxies);
    match limit.limiter.take(key) {
        Ok(()) => next.run(request).await,
        Err(wait) => refusal(wait).into_response(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(xff: &[&str]) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        for line in xff {
            h.append("x-forwarded-for", line.parse().expect("ascii"));
        }
        h
    }

    fn ip(text: &str) -> ClientKey {
        Some(text.parse().expect("an address"))
    }

    const PEER: &str = "10.0.0.9:443";

    #[test]
    fn the_client_is_the_rightmost_hop_no_trusted_proxy_wrote() {
        let peer = Some(PEER.parse().expect("addr"));
        // No trusted proxy: the header is the client's own text and is ignored.
        assert_eq!(client_key(&headers(&["1.2.3.4"]), peer, 0), ip("10.0.0.9"));
        // One proxy: it appended the client's address last; what the client wrote is left of it.
        let forged = headers(&["6.6.6.6, 7.7.7.7, 203.0.113.5"]);
        assert_eq!(client_key(&forged, peer, 1), ip("203.0.113.5"));
        // Two proxies: the second from the right; several header lines are one list.
        let two = headers(&["6.6.6.6, 203.0.113.5", "10.1.1.1"]);
        assert_eq!(client_key(&two, peer, 2), ip("203.0.113.5"));
        // Fewer entries than proxies: the leftmost is the nearest hop known.
        assert_eq!(client_key(&headers(&["203.0.113.5"]), peer, 2), ip("203.0.113.5"));
        // No header, or garbage where the client address should be: the peer.
        assert_eq!(client_key(&headers(&[]), peer, 1), ip("10.0.0.9"));
        assert_eq!(client_key(&headers(&["1.1.1.1, nonsense"]), peer, 1), ip("10.0.0.9"));
        assert_eq!(client_key(&headers(&["2001:db8::1"]), None, 1), ip("2001:db8::1"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_client_gets_its_burst_then_one_per_interval_and_check_spends_nothing() {
        let limiter = Limiter::new(Rate {
            per_minute: 6,
            burst: 2,
        });
        let a = ip("192.0.2.1");
        assert_eq!(limiter.check(a), Ok(()));
        assert_eq!(limiter.take(a), Ok(()));
        assert_eq!(limiter.take(a), Ok(()));
        assert_eq!(limiter.check(a), Err(Duration::from_secs(10)));
        assert_eq!(limiter.take(a), Err(Duration::from_secs(10)));
        // Another client is not affected.
        assert_eq!(limiter.take(ip("192.0.2.2")), Ok(()));
        tokio::time::advance(Duration::from_secs(4)).await;
        assert_eq!(limiter.check(a), Err(Duration::from_secs(6)));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert_eq!(limiter.check(a), Ok(()));
        assert_eq!(limiter.take(a), Ok(()));
        assert!(limiter.take(a).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn clients_with_their_allowance_back_are_forgotten() {
        let limiter = Limiter::new(Rate {
            per_minute: 60,
            burst: 5,
        });
        for i in 0..1000u32 {
            assert_eq!(limiter.take(Some(IpAddr::from(i.to_be_bytes()))), Ok(()));
        }
        assert_eq!(limiter.clients(), 1000);
        tokio::time::advance(PRUNE_EVERY).await;
        assert_eq!(limiter.take(ip("192.0.2.1")), Ok(()));
        assert_eq!(limiter.clients(), 1, "only the client seen since is remembered");
    }
}
