//! Per-client rate limits: binds, pickups and failed sign-ins, each a GCRA limiter; a refusal is
//! a 429 with an `ApiError` body and `Retry-After`. Binds and pickups are keyed by the client's
//! address; failed sign-ins by the address *and* a fingerprint of the presented credential.
//!
//! Why the credential is in the failed-sign-in key: behind an ingress (or a NAT) every tenant
//! has the same address, so a throttle keyed by the address alone lets anyone lock every tenant
//! out of sign-in with a few wrong tokens; letting valid credentials bypass it instead makes
//! it a no-op against guessing (each guess is still checked). Guessing is defeated by the
//! credentials' entropy (signed OIDC tokens, static tokens of at least 32 characters), not by
//! this throttle; what it stops is a client hammering the authenticators (and the identity
//! provider) with the same refused credential. A throttled credential is refused before it is
//! checked; any other credential from the same address is checked as usual, so a tenant can
//! only be refused with its own credential, which an attacker does not have.
//!
//! The limiter is small and hand-written rather than `governor`'s because the failed-sign-in
//! throttle must ask "is this client blocked?" before checking a credential, without spending a
//! cell (governor has no such peek), and because it runs on tokio's clock, so tests drive it with
//! the paused clock. Clients whose allowance is full again are forgotten, so the map holds only
//! clients seen within one burst window, and never more than [`MAX_CLIENTS`].

use std::collections::HashMap;
use std::hash::Hash;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use parking_lot::Mutex;
use sha2::{Digest, Sha256};
use tokio::time::Instant;

use super::{GatewayError, Rate};

/// How often the map of clients is swept of those whose allowance is full again.
const PRUNE_EVERY: Duration = Duration::from_secs(60);

/// How many clients one limiter remembers at most. Beyond it a new client is not recorded (it is
/// not limited) until the full allowances are swept out: every limit here is a courtesy to the
/// gateway's neighbours, not a security boundary, so memory is bounded by failing open. With the
/// credential in the failed-sign-in key, anyone can mint new keys at will, hence the bound.
pub(crate) const MAX_CLIENTS: usize = 100_000;

/// How often a full map may be swept outside the regular [`PRUNE_EVERY`]: a sweep is linear in
/// the map, so it must not run on every request of a flood.
const PRUNE_WHEN_FULL_EVERY: Duration = Duration::from_secs(1);

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

/// What a failed sign-in counts against: the client and a fingerprint of its credential.
pub(crate) type CredentialKey = (ClientKey, [u8; 16]);

/// The failed-sign-in key of a request: [`client_key`] and the first 16 bytes of SHA-256 over
/// every `Authorization` and `Cookie` value as sent (a credential the authenticators may read).
/// The raw bytes, not a parsed token: a variant of someone's credential is another key, and
/// identical bytes authenticate identically, so only the credential's holder can share its key.
pub(crate) fn credential_key(
    headers: &http::HeaderMap,
    peer: Option<SocketAddr>,
    trusted_proxies: usize,
) -> CredentialKey {
    let mut hash = Sha256::new();
    for name in [http::header::AUTHORIZATION, http::header::COOKIE] {
        for value in headers.get_all(&name) {
            // Lengths delimit the values, so no two different header sets hash the same input.
            hash.update(name.as_str().as_bytes());
            hash.update((value.len() as u64).to_be_bytes());
            hash.update(value.as_bytes());
        }
    }
    let digest = hash.finalize();
    let mut fingerprint = [0u8; 16];
    fingerprint.copy_from_slice(&digest[..16]);
    (client_key(headers, peer, trusted_proxies), fingerprint)
}

/// The peer address axum's connect-info put on the request, if any.
pub(crate) fn peer_of(extensions: &http::Extensions) -> Option<SocketAddr> {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map(|ConnectInfo(addr)| *addr)
}

/// A keyed GCRA limiter: `rate.burst` requests at once, then one per `60s / rate.per_minute`.
#[derive(Debug)]
pub(crate) struct Limiter<K = ClientKey> {
    /// Time between two requests once the burst is spent.
    interval: Duration,
    /// How far ahead of now a client's theoretical arrival time may be and still pass.
    tolerance: Duration,
    /// How many clients are remembered at most.
    capacity: usize,
    state: Mutex<Clients<K>>,
}

#[derive(Debug)]
struct Clients<K> {
    /// Per client: the theoretical arrival time of its next request (GCRA's TAT).
    next: HashMap<K, Instant>,
    next_prune: Instant,
    last_prune: Instant,
}

impl<K: Hash + Eq + Copy> Limiter<K> {
    /// A limiter for `rate` (a zero rate or burst counts as one).
    pub(crate) fn new(rate: Rate) -> Self {
        Self::with_capacity(rate, MAX_CLIENTS)
    }

    /// A limiter for `rate` remembering at most `capacity` clients.
    pub(crate) fn with_capacity(rate: Rate, capacity: usize) -> Self {
        let interval = Duration::from_secs(60) / rate.per_minute.max(1);
        let now = Instant::now();
        Limiter {
            interval,
            tolerance: interval * (rate.burst.max(1) - 1),
            capacity,
            state: Mutex::new(Clients {
                next: HashMap::new(),
                next_prune: now + PRUNE_EVERY,
                last_prune: now,
            }),
        }
    }

    /// Whether `key` may make a request now, without spending anything; `Err` is the wait.
    pub(crate) fn check(&self, key: K) -> Result<(), Duration> {
        let now = Instant::now();
        let state = self.state.lock();
        match state.next.get(&key) {
            Some(tat) => self.verdict(*tat, now),
            None => Ok(()),
        }
    }

    /// Spends one request of `key`'s allowance; `Err` is the wait when none is left.
    pub(crate) fn take(&self, key: K) -> Result<(), Duration> {
        let now = Instant::now();
        let mut state = self.state.lock();
        let full = state.next.len() >= self.capacity && !state.next.contains_key(&key);
        if now >= state.next_prune || (full && now >= state.last_prune + PRUNE_WHEN_FULL_EVERY) {
            // A client whose next arrival time has passed has its whole burst back: forgetting
            // it changes nothing it may do.
            state.next.retain(|_, tat| *tat > now);
            state.next_prune = now + PRUNE_EVERY;
            state.last_prune = now;
        }
        let tat = state.next.get(&key).copied().unwrap_or(now).max(now);
        self.verdict(tat, now)?;
        if state.next.len() >= self.capacity && !state.next.contains_key(&key) {
            // Full of clients still within their burst: this one goes unrecorded (see MAX_CLIENTS).
            return Ok(());
        }
        state.next.insert(key, tat + self.interval);
        Ok(())
    }

    /// How many clients the limiter remembers.
    #[cfg(test)]
    pub(crate) fn clients(&self) -> usize {
        self.state.lock().next.len()
    }

    fn verdict(&self, tat: Instant, now: Instant) -> Result<(), Duration> {
        let allowed_from = tat.checked_sub(self.tolerance).unwrap_or(tat);
        if allowed_from <= now {
            Ok(())
        } else {
            Err(allowed_from - now)
        }
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

    #[test]
    fn the_credential_fingerprint_separates_credentials_not_clients() {
        let peer = Some(PEER.parse().expect("addr"));
        let with = |pairs: &[(&str, &str)]| {
            let mut h = http::HeaderMap::new();
            for (name, value) in pairs {
                let name = http::HeaderName::from_bytes(name.as_bytes()).expect("a header name");
                h.append(name, value.parse().expect("ascii"));
            }
            credential_key(&h, peer, 0)
        };
        let wrong = with(&[("authorization", "Bearer wrong")]);
        assert_eq!(wrong, with(&[("authorization", "Bearer wrong")]));
        assert_eq!(wrong.0, ip("10.0.0.9"));
        assert_ne!(wrong, with(&[("authorization", "Bearer right")]));
        assert_ne!(wrong, with(&[("authorization", "Bearer wrong ")]));
        assert_ne!(wrong, with(&[("cookie", "Bearer wrong")]));
        assert_ne!(
            with(&[("authorization", "ab"), ("authorization", "c")]),
            with(&[("authorization", "a"), ("authorization", "bc")])
        );
        // Other headers are not part of the credential.
        assert_eq!(wrong, with(&[("authorization", "Bearer wrong"), ("user-agent", "x")]));
    }

    #[tokio::test(start_paused = true)]
    async fn a_full_limiter_stays_bounded_and_fails_open() {
        let limiter = Limiter::with_capacity(
            Rate {
                per_minute: 60,
                burst: 1,
            },
            3,
        );
        for i in 0..3u32 {
            assert_eq!(limiter.take(Some(IpAddr::from(i.to_be_bytes()))), Ok(()));
        }
        let late = ip("192.0.2.1");
        // Nobody's allowance is back: the newcomer passes unrecorded, every time.
        assert_eq!(limiter.take(late), Ok(()));
        assert_eq!(limiter.take(late), Ok(()));
        assert_eq!(limiter.clients(), 3);
        // Those already recorded are still limited.
        assert!(limiter.take(Some(IpAddr::from(0u32.to_be_bytes()))).is_err());
        // Once allowances are back, a newcomer is recorded again (without waiting PRUNE_EVERY).
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(limiter.take(late), Ok(()));
        assert_eq!(limiter.clients(), 1);
        assert!(limiter.take(late).is_err());
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
