//! Cookies sealed with the session key: encrypted and authenticated (AES-256-GCM, the cookie's
//! name bound as associated data) and carrying their own expiry, so any replica that has the key
//! can open them and nobody else can read, forge, swap or extend them.

use std::fmt;
use std::path::Path;

use cookie::{Cookie, CookieJar, SameSite};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::SetupError;
use super::clock::Clock;

/// The fewest bytes of key material `--session-key-file` must hold.
pub const MIN_KEY_BYTES: usize = 32;

/// The key every gateway replica shares: it seals the OIDC login state and the session cookies.
#[derive(Clone)]
pub struct SessionKey(cookie::Key);

impl SessionKey {
    /// A key derived (HKDF-SHA256) from at least [`MIN_KEY_BYTES`] bytes of secret material.
    pub fn from_material(material: &[u8]) -> Result<Self, SetupError> {
        let material = material.trim_ascii();
        if material.len() < MIN_KEY_BYTES {
            return Err(SetupError::SessionKey(format!(
                "it holds {} bytes, at least {MIN_KEY_BYTES} are needed (e.g. `head -c 64 /dev/urandom | base64 -w0`)",
                material.len()
            )));
        }
        Ok(Self(cookie::Key::derive_from(material)))
    }

    /// The key in a file (surrounding whitespace ignored).
    pub fn from_file(path: &Path) -> Result<Self, SetupError> {
        let material = std::fs::read(path).map_err(|source| SetupError::ReadFile {
            what: "--session-key-file",
            path: path.to_owned(),
            source,
        })?;
        Self::from_material(&material)
    }
}

impl fmt::Debug for SessionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("SessionKey(<redacted>)")
    }
}

/// Why a sealed cookie was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum OpenError {
    /// Not sealed with this key under this name, or altered.
    #[error("was not issued by this service or was altered")]
    Tampered,
    /// Sealed correctly, but its lifetime is over.
    #[error("has expired")]
    Expired,
}

#[derive(Serialize, Deserialize)]
struct Envelope<T> {
    /// Unix seconds after which the value is refused, whatever the browser kept.
    exp: i64,
    v: T,
}

/// How a sealed cookie is set.
#[derive(Clone, Debug)]
pub(crate) struct CookieSpec {
    pub name: &'static str,
    pub path: String,
    pub secure: bool,
    pub ttl: jiff::SignedDuration,
}

impl CookieSpec {
    /// The `Set-Cookie` value carrying `value` sealed, expiring `ttl` from now.
    pub fn seal<T: Serialize>(&self, key: &SessionKey, clock: &Clock, value: &T) -> String {
        let exp = clock.now().as_second().saturating_add(self.ttl.as_secs());
        let json = serde_json::to_string(&Envelope { exp, v: value })
            .unwrap_or_else(|_| unreachable!("plain structs serialize"));
        let mut jar = CookieJar::new();
        jar.private_mut(&key.0).add(Cookie::new(self.name, json));
        let sealed = jar.get(self.name).map(|c| c.value().to_owned()).unwrap_or_default();
        self.attributes(Cookie::new(self.name, sealed), self.ttl.as_secs())
    }

    /// The `Set-Cookie` value that deletes the cookie.
    pub fn clear(&self) -> String {
        self.attributes(Cookie::new(self.name, ""), 0)
    }

    fn attributes(&self, cookie: Cookie<'static>, max_age_secs: i64) -> String {
        let mut cookie = cookie;
        cookie.set_path(self.path.clone());
        cookie.set_http_only(true);
        cookie.set_secure(self.secure);
        // Lax: the OIDC callback and the redirect after it are top-level navigations from the
        // IdP's site, which Strict would strip; state-changing requests need the CSRF header.
        cookie.set_same_site(SameSite::Lax);
        cookie.set_max_age(cookie::time::Duration::seconds(max_age_secs));
        cookie.to_string()
    }

    /// The value of this cookie in the request headers: `None` when absent, else the first one
    /// that opens, or why none did.
    pub fn open<T: DeserializeOwned>(
        &self,
        key: &SessionKey,
        clock: &Clock,
        headers: &http::HeaderMap,
    ) -> Option<Result<T, OpenError>> {
        let mut outcome = None;
        for raw in request_cookies(headers, self.name) {
            let opened = open_value(key, clock, self.name, &raw);
            match opened {
                Ok(v) => return Some(Ok(v)),
                // An expired cookie says more than a stray foreign one of the same name.
                Err(e) => {
                    if outcome != Some(OpenError::Expired) {
                        outcome = Some(e);
                    }
                }
            }
        }
        outcome.map(Err)
    }
}

/// Opens one sealed value.
pub(crate) fn open_value<T: DeserializeOwned>(
    key: &SessionKey,
    clock: &Clock,
    name: &str,
    raw: &str,
) -> Result<T, OpenError> {
    let jar = CookieJar::new();
    let opened = jar
        .private(&key.0)
        .decrypt(Cookie::new(name.to_owned(), raw.to_owned()))
        .ok_or(OpenError::Tampered)?;
    let envelope: Envelope<T> = serde_json::from_str(opened.value()).map_err(|_| OpenError::Tampered)?;
    if clock.now().as_second() >= envelope.exp {
        return Err(OpenError::Expired);
    }
    Ok(envelope.v)
}

/// Every value of the cookie `name` in the request's `Cookie` headers.
pub(crate) fn request_cookies(headers: &http::HeaderMap, name: &str) -> Vec<String> {
    headers
        .get_all(http::header::COOKIE)
        .iter()
        .filter_map(|h| h.to_str().ok())
        .flat_map(|h| Cookie::split_parse(h.to_owned()))
        .filter_map(Result::ok)
        .filter(|c| c.name() == name)
        .map(|c| c.value().to_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicI64, Ordering};

    use super::*;

    #[derive(Serialize, Deserialize, Debug, PartialEq)]
    struct Payload {
        who: String,
    }

    fn stepped_clock() -> (Clock, Arc<AtomicI64>) {
        let now = Arc::new(AtomicI64::new(1_800_000_000));
        let read = now.clone();
        let clock = Clock::new(move || jiff::Timestamp::from_second(read.load(Ordering::SeqCst)).unwrap_or_default());
        (clock, now)
    }

    fn spec(name: &'static str) -> CookieSpec {
        CookieSpec {
            name,
            path: "/".into(),
            secure: true,
            ttl: jiff::SignedDuration::from_secs(600),
        }
    }

    fn key(byte: u8) -> SessionKey {
        SessionKey::from_material(&[byte; 48]).expect("48 bytes are enough")
    }

    /// The sealed value of a `Set-Cookie` line, as the browser sends it back.
    fn value_of(set_cookie: &str) -> String {
        let c = Cookie::parse(set_cookie.to_owned()).expect("a valid Set-Cookie");
        c.value().to_owned()
    }

    fn headers(name: &str, value: &str) -> http::HeaderMap {
        let mut h = http::HeaderMap::new();
        h.insert(
            http::header::COOKIE,
            format!("other=1; {name}={value}").parse().expect("ascii"),
        );
        h
    }

    fn payload() -> Payload {
        Payload { who: "alice".into() }
    }

    #[test]
    fn a_sealed_cookie_opens_with_the_same_key_on_another_replica() {
        let (clock, _) = stepped_clock();
        let set = spec("s").seal(&key(1), &clock, &payload());
        let replica_b_key = key(1);
        let got: Payload = spec("s")
            .open(&replica_b_key, &clock, &headers("s", &value_of(&set)))
            .expect("present")
            .expect("opens");
        assert_eq!(got, payload());
        assert!(!set.contains("alice"), "the payload is encrypted: {set}");
        for attribute in ["HttpOnly", "Secure", "SameSite=Lax", "Path=/", "Max-Age=600"] {
            assert!(set.contains(attribute), "{attribute} missing in {set}");
        }
    }

    #[test]
    fn a_cookie_sealed_with_another_key_is_refused_as_tampered() {
        let (clock, _) = stepped_clock();
        let set = spec("s").seal(&key(1), &clock, &payload());
        let got = spec("s").open::<Payload>(&key(2), &clock, &headers("s", &value_of(&set)));
        assert_eq!(got, Some(Err(OpenError::Tampered)));
    }

    #[test]
    fn every_altered_byte_of_a_sealed_cookie_is_refused() {
        let (clock, _) = stepped_clock();
        let value = value_of(&spec("s").seal(&key(1), &clock, &payload()));
        for i in 0..value.len() {
            let mut bytes = value.clone().into_bytes();
            bytes[i] = if bytes[i] == b'A' { b'B' } else { b'A' };
            let altered = String::from_utf8(bytes).expect("ascii");
            if altered == value {
                continue;
            }
            let got = spec("s").open::<Payload>(&key(1), &clock, &headers("s", &altered));
            assert_eq!(got, Some(Err(OpenError::Tampered)), "byte {i} altered");
        }
    }

    #[test]
    fn a_cookie_sealed_under_another_name_is_refused() {
        let (clock, _) = stepped_clock();
        let login = value_of(&spec("login").seal(&key(1), &clock, &payload()));
        let got = spec("session").open::<Payload>(&key(1), &clock, &headers("session", &login));
        assert_eq!(got, Some(Err(OpenError::Tampered)));
    }

    #[test]
    fn a_sealed_cookie_expires_on_its_own_clock_whatever_the_browser_keeps() {
        let (clock, now) = stepped_clock();
        let value = value_of(&spec("s").seal(&key(1), &clock, &payload()));
        now.fetch_add(599, Ordering::SeqCst);
        let fresh = spec("s").open::<Payload>(&key(1), &clock, &headers("s", &value));
        assert_eq!(fresh, Some(Ok(payload())));
        now.fetch_add(1, Ordering::SeqCst);
        let stale = spec("s").open::<Payload>(&key(1), &clock, &headers("s", &value));
        assert_eq!(stale, Some(Err(OpenError::Expired)));
    }

    #[test]
    fn an_absent_cookie_is_none_and_a_stray_duplicate_does_not_hide_a_good_one() {
        let (clock, _) = stepped_clock();
        assert_eq!(spec("s").open::<Payload>(&key(1), &clock, &headers("t", "x")), None);
        let good = value_of(&spec("s").seal(&key(1), &clock, &payload()));
        let mut h = http::HeaderMap::new();
        h.append(http::header::COOKIE, "s=planted".parse().expect("ascii"));
        h.append(http::header::COOKIE, format!("s={good}").parse().expect("ascii"));
        assert_eq!(spec("s").open::<Payload>(&key(1), &clock, &h), Some(Ok(payload())));
    }

    #[test]
    fn a_short_session_key_is_refused_and_its_bytes_are_not_echoed() {
        let err = SessionKey::from_material(b"  too-short-secret \n").expect_err("short");
        let text = err.to_string();
        assert!(text.contains("16 bytes"), "{text}");
        assert!(!text.contains("too-short-secret"), "{text}");
    }

    #[test]
    fn clearing_a_cookie_sets_it_empty_with_max_age_zero() {
        let set = spec("s").clear();
        assert!(set.starts_with("s=;"), "{set}");
        assert!(set.contains("Max-Age=0"), "{set}");
    }
}
