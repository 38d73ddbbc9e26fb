//! OIDC end to end against an independent, certified OpenID provider: the npm package
//! `oidc-provider`, run by node from `hack/oidc` (installed from its committed lockfile by
//! `npm ci --prefix hack/oidc`), serving https with a CA this test generates and the gateway
//! trusts through `--oidc-ca-file`.
//!
//! Two "replicas" of the auth routes (each its own `authenticator()` and listener, sharing only
//! the session key file) stand in for two gateway pods behind one public URL. Time moves on an
//! injected clock, never by waiting. Without node or `hack/oidc/node_modules` the test prints one
//! line and passes, unless `KBIND_REQUIRE_OIDC=1` (CI), where it fails.

use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

#[path = "../../tests/support/oidc_provider.rs"]
mod oidc_provider;

use axum::extract::State;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use base64::Engine as _;
use http::StatusCode;
use kbind_api::service::{ApiError, CSRF_HEADER, WhoAmI, path};
use kbind_backend::auth::{self, AuthError, Authenticator, Clock, Options, Via};
use oidc_provider::{Provider, provider_available, write_pki};
use sha2::Digest as _;

const CLIENT_ID: &str = "kbind-gateway";
const CLIENT_SECRET: &str = "test-client-secret-7c1f";
const ACCOUNT: &str = "alice";
const ACCOUNT_NAME: &str = "Alice Example";
/// The provider's ID token lifetime; the test moves the gateways' clock past it.
const ID_TOKEN_TTL_SECS: i64 = 300;
/// A deadline for every request, so a hung provider fails the test instead of hanging CI.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// A static token, to show both methods work side by side.
const STATIC_TOKEN: &str = "static-token-for-bob-2d9e-0123456789abcdef";

async fn start_provider(redirect_uri: &str, cert: &Path, key: &Path) -> Provider {
    let env = [
        ("OIDC_CLIENT_ID", CLIENT_ID.to_owned()),
        ("OIDC_CLIENT_SECRET", CLIENT_SECRET.to_owned()),
        ("OIDC_REDIRECT_URIS", redirect_uri.to_owned()),
        ("OIDC_ACCOUNT", ACCOUNT.to_owned()),
        ("OIDC_ACCOUNT_NAME", ACCOUNT_NAME.to_owned()),
        ("OIDC_ID_TOKEN_TTL", ID_TOKEN_TTL_SECS.to_string()),
    ];
    oidc_provider::start_provider(&env, cert, key).await
}

/// What a gateway does with the chain: mounts its routes and authenticates `/api/v1/whoami`.
fn replica_app(chain: Arc<auth::Chain>) -> axum::Router {
    let routes = chain.routes();
    let authenticator: Arc<dyn Authenticator> = chain;
    axum::Router::new()
        .route(path::WHOAMI, get(whoami))
        .with_state(authenticator)
        .merge(routes)
}

async fn whoami(State(auth): State<Arc<dyn Authenticator>>, headers: http::HeaderMap) -> Response {
    match auth.authenticate(&headers).await {
        Ok(Some(caller)) => axum::Json(WhoAmI {
            subject: caller.identity.subject,
            name: caller.identity.name,
            csrf_token: match caller.via {
                Via::Session { csrf_token } => Some(csrf_token),
                Via::Bearer => None,
            },
        })
        .into_response(),
        Ok(None) => AuthError::Unauthenticated("sign in first".into()).into_response(),
        Err(e) => e.into_response(),
    }
}

fn serve(listener: tokio::net::TcpListener, app: axum::Router) {
    tokio::spawn(async move {
        axum::serve(listener, app).await.expect("replica serves");
    });
}

fn location(response: &reqwest::Response) -> String {
    response
        .headers()
        .get(http::header::LOCATION)
        .and_then(|l| l.to_str().ok())
        .unwrap_or_else(|| panic!("a redirect with a Location, got {}", response.status()))
        .to_owned()
}

/// The value of cookie `name` in the response's `Set-Cookie` headers.
fn set_cookie(response: &reqwest::Response, name: &str) -> Option<String> {
    response
        .headers()
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find_map(|v| {
            let (pair, _) = v.split_once(';').unwrap_or((v, ""));
            let (n, value) = pair.split_once('=')?;
            (n.trim() == name).then(|| value.trim().to_owned())
        })
}

/// Follows the IdP's redirects (login and consent granted without a human) until it sends the
/// browser to `redirect_uri`; returns that URL, code and state in its query.
async fn through_the_idp(browser: &reqwest::Client, start: &str, redirect_uri: &str) -> url::Url {
    let mut at = url::Url::parse(start).expect("an absolute URL");
    for _ in 0..10 {
        if at.as_str().starts_with(redirect_uri) {
            return at;
        }
        let response = browser.get(at.clone()).send().await.expect("the IdP answers");
        let status = response.status();
        if !status.is_redirection() {
            let body = response.text().await.unwrap_or_default();
            panic!("the IdP answered {status} at {at}: {body}");
        }
        at = at.join(&location(&response)).expect("a valid Location");
    }
    panic!("the IdP did not send the browser back to {redirect_uri} within 10 redirects");
}

async fn api_error(response: reqwest::Response) -> ApiError {
    let status = response.status();
    let body = response.text().await.expect("a body");
    let error: ApiError =
        serde_json::from_str(&body).unwrap_or_else(|e| panic!("a JSON ApiError body for {status}, got {body:?}: {e}"));
    assert_eq!(error.code, status.as_u16(), "{error:?}");
    error
}

fn no_cookie_set(response: &reqwest::Response) {
    let set: Vec<_> = response.headers().get_all(http::header::SET_COOKIE).iter().collect();
    assert!(set.is_empty(), "a refused request set cookies: {set:?}");
}

fn with_query(url: &url::Url, key: &str, value: &str) -> url::Url {
    let mut out = url.clone();
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == key { value.to_owned() } else { v.into_owned() };
            (k.into_owned(), v)
        })
        .collect();
    out.query_pairs_mut().clear().extend_pairs(pairs);
    out
}

/// `url` with its origin swapped for `origin` (the load balancer picked that replica).
fn on(origin: &str, url: &url::Url) -> String {
    format!("{origin}{}?{}", url.path(), url.query().unwrap_or_default())
}

/// `value` with one character changed (first or last), to tamper with a sealed or signed value.
fn altered(value: &str, at_end: bool) -> String {
    let (keep, old) = if at_end {
        (&value[..value.len() - 1], &value[value.len() - 1..])
    } else {
        (&value[1..], &value[..1])
    };
    let new = if old == "A" { "B" } else { "A" };
    if at_end {
        format!("{keep}{new}")
    } else {
        format!("{new}{keep}")
    }
}

struct Setup {
    a: String,
    b: String,
    redirect_uri: String,
    provider: Provider,
    browser: reqwest::Client,
    gateway: reqwest::Client,
    clock_offset: Arc<AtomicI64>,
    _dir: tempfile::TempDir,
}

async fn setup() -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, cert, key) = write_pki(dir.path());
    let listener_a = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind A");
    let listener_b = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind B");
    let a = format!("http://{}", listener_a.local_addr().expect("addr"));
    let b = format!("http://{}", listener_b.local_addr().expect("addr"));
    // Both replicas sit behind one public URL; here it is A's address.
    let redirect_uri = format!("{a}{}", auth::oidc::CALLBACK_PATH);
    let provider = start_provider(&redirect_uri, &cert, &key).await;

    let session_key = dir.path().join("session.key");
    let mut material = [0u8; 48];
    rand::fill(&mut material);
    std::fs::write(&session_key, base64::engine::general_purpose::STANDARD.encode(material))
        .expect("write session key");
    let secret = dir.path().join("client.secret");
    std::fs::write(&secret, format!("{CLIENT_SECRET}\n")).expect("write secret");
    let tokens = dir.path().join("tokens.csv");
    let mut f = std::fs::File::create(&tokens).expect("token file");
    writeln!(f, "# test tokens\n{STATIC_TOKEN},bob").expect("write tokens");
    let opts = Options {
        token_file: Some(tokens),
        oidc_issuer_url: Some(provider.issuer.clone()),
        oidc_client_id: Some(CLIENT_ID.into()),
        oidc_cli_client_id: None,
        oidc_client_secret_file: Some(secret),
        oidc_redirect_url: None,
        oidc_ca_file: Some(ca.clone()),
        session_key_file: Some(session_key),
    };
    let clock_offset = Arc::new(AtomicI64::new(0));
    for listener in [listener_a, listener_b] {
        let offset = clock_offset.clone();
        let clock =
            Clock::new(move || jiff::Timestamp::now() + jiff::SignedDuration::from_secs(offset.load(Ordering::SeqCst)));
        let chain = auth::authenticator_with_clock(&opts, &a, clock).expect("auth options valid");
        serve(listener, replica_app(chain));
    }
    let ca_pem = std::fs::read(&ca).expect("read CA");
    let ca_cert = reqwest::Certificate::from_pem(&ca_pem).expect("PEM");
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .add_root_certificate(ca_cert)
        .build()
        .expect("browser client");
    // The gateway's cookies are handled by hand, so each request shows exactly what it carries.
    let gateway = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT)
        .build()
        .expect("gateway client");
    Setup {
        a,
        b,
        redirect_uri,
        provider,
        browser,
        gateway,
        clock_offset,
        _dir: dir,
    }
}

impl Setup {
    /// Starts a browser sign-in on `origin`: the login-state cookie and the callback URL the IdP
    /// sends the browser to.
    async fn sign_in_at(&self, origin: &str) -> (String, url::Url) {
        let response = self
            .gateway
            .get(format!("{origin}{}", auth::oidc::LOGIN_PATH))
            .send()
            .await
            .expect("login answers");
        assert_eq!(response.status(), StatusCode::SEE_OTHER);
        let login_cookie = set_cookie(&response, auth::oidc::LOGIN_COOKIE).expect("the login-state cookie");
        let authorize = location(&response);
        assert!(
            authorize.starts_with(&self.provider.issuer),
            "login redirects to the IdP: {authorize}"
        );
        for param in ["code_challenge=", "code_challenge_method=S256", "nonce=", "state="] {
            assert!(authorize.contains(param), "{param} missing in {authorize}");
        }
        let callback = through_the_idp(&self.browser, &authorize, &self.redirect_uri).await;
        (login_cookie, callback)
    }

    async fn callback(&self, origin: &str, callback: &url::Url, login_cookie: &str) -> reqwest::Response {
        self.gateway
            .get(on(origin, callback))
            .header(
                http::header::COOKIE,
                format!("{}={login_cookie}", auth::oidc::LOGIN_COOKIE),
            )
            .send()
            .await
            .expect("callback answers")
    }

    async fn whoami(&self, origin: &str, header: (http::HeaderName, String)) -> reqwest::Response {
        self.gateway
            .get(format!("{origin}{}", path::WHOAMI))
            .header(header.0, header.1)
            .send()
            .await
            .expect("whoami answers")
    }

    fn session(value: &str) -> (http::HeaderName, String) {
        (http::header::COOKIE, format!("{}={value}", auth::oidc::SESSION_COOKIE))
    }

    fn bearer(token: &str) -> (http::HeaderName, String) {
        (http::header::AUTHORIZATION, format!("Bearer {token}"))
    }

    /// An ID token the way a CLI gets one: its own code + PKCE flow with the IdP.
    async fn cli_id_token(&self) -> String {
        let verifier = format!("cli-verifier-{}", uuid::Uuid::new_v4().simple());
        let challenge =
            base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(sha2::Sha256::digest(verifier.as_bytes()));
        let mut authorize = url::Url::parse(&format!("{}/auth", self.provider.issuer)).expect("url");
        authorize
            .query_pairs_mut()
            .append_pair("client_id", CLIENT_ID)
            .append_pair("redirect_uri", &self.redirect_uri)
            .append_pair("response_type", "code")
            .append_pair("scope", "openid profile")
            .append_pair("state", "cli-state")
            .append_pair("nonce", "cli-nonce")
            .append_pair("code_challenge", &challenge)
            .append_pair("code_challenge_method", "S256");
        let back = through_the_idp(&self.browser, authorize.as_str(), &self.redirect_uri).await;
        let code = back
            .query_pairs()
            .find(|(k, _)| k == "code")
            .map(|(_, v)| v.into_owned())
            .expect("a code");
        let response = self
            .browser
            .post(format!("{}/token", self.provider.issuer))
            .basic_auth(CLIENT_ID, Some(CLIENT_SECRET))
            .form(&[
                ("grant_type", "authorization_code"),
                ("code", &code),
                ("redirect_uri", &self.redirect_uri),
                ("code_verifier", &verifier),
            ])
            .send()
            .await
            .expect("token endpoint answers");
        assert_eq!(response.status(), StatusCode::OK, "token exchange");
        let body: serde_json::Value = response.json().await.expect("JSON");
        body["id_token"].as_str().expect("an id_token").to_owned()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn oidc_sign_in_across_replicas_and_id_tokens_as_bearer_against_oidc_provider() {
    if !provider_available("the OIDC end-to-end test") {
        return;
    }
    let s = setup().await;
    let subject = format!("oidc:{}#{ACCOUNT}", s.provider.issuer);

    // Login on replica A, callback on replica B (sharing only the session key).
    let (login_cookie, callback) = s.sign_in_at(&s.a).await;
    let response = s.callback(&s.b, &callback, &login_cookie).await;
    assert_eq!(response.status(), StatusCode::SEE_OTHER, "callback on B");
    assert_eq!(location(&response), "/");
    let session = set_cookie(&response, auth::oidc::SESSION_COOKIE).expect("a session cookie");
    assert_eq!(
        set_cookie(&response, auth::oidc::LOGIN_COOKIE).as_deref(),
        Some(""),
        "the login-state cookie is cleared"
    );
    let session_line = response
        .headers()
        .get_all(http::header::SET_COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .find(|l| l.starts_with(auth::oidc::SESSION_COOKIE))
        .expect("session Set-Cookie")
        .to_owned();
    for attribute in ["HttpOnly", "SameSite=Lax", "Path=/"] {
        assert!(session_line.contains(attribute), "{attribute} missing: {session_line}");
    }
    assert!(
        !session_line.contains("Secure"),
        "an http public URL sets no Secure: {session_line}"
    );

    // The session works on both replicas.
    let mut csrf_tokens = Vec::new();
    for origin in [&s.a, &s.b] {
        let response = s.whoami(origin, Setup::session(&session)).await;
        assert_eq!(response.status(), StatusCode::OK, "session on {origin}");
        let me: WhoAmI = response.json().await.expect("WhoAmI");
        assert_eq!(me.subject, subject);
        assert_eq!(me.name.as_deref(), Some(ACCOUNT_NAME));
        csrf_tokens.push(me.csrf_token.expect("a session has a CSRF token"));
    }
    assert_eq!(csrf_tokens[0], csrf_tokens[1], "one session, one CSRF token");

    // The same code again (same URL, same login-state cookie): the IdP refuses it.
    let replay = s.callback(&s.a, &callback, &login_cookie).await;
    assert_eq!(replay.status(), StatusCode::UNAUTHORIZED, "replayed code");
    no_cookie_set(&replay);
    let error = api_error(replay).await;
    assert_eq!(error.reason, "OIDCCodeRejected", "{error:?}");

    // A wrong state is refused before the code is spent: the right one still works after it.
    let (login_cookie, callback) = s.sign_in_at(&s.a).await;
    let forged = with_query(&callback, "state", "forged-state");
    let response = s.callback(&s.b, &forged, &login_cookie).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "wrong state");
    no_cookie_set(&response);
    assert_eq!(api_error(response).await.reason, "OIDCStateMismatch");
    // Another browser's sign-in state with this callback (login CSRF): refused too.
    let (other_cookie, _) = s.sign_in_at(&s.b).await;
    let response = s.callback(&s.b, &callback, &other_cookie).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "another browser's state");
    no_cookie_set(&response);
    assert_eq!(api_error(response).await.reason, "OIDCStateMismatch");
    // A callback naming another issuer (RFC 9207 mix-up): refused.
    let mixed_up = with_query(&callback, "iss", "https://evil.example");
    let response = s.callback(&s.b, &mixed_up, &login_cookie).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "another issuer");
    no_cookie_set(&response);
    assert_eq!(api_error(response).await.reason, "OIDCIssuerMismatch");
    // No login-state cookie, and a tampered one.
    let response = s.gateway.get(on(&s.b, &callback)).send().await.expect("answers");
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    no_cookie_set(&response);
    assert_eq!(api_error(response).await.reason, "OIDCLoginStateMissing");
    let response = s.callback(&s.b, &callback, &altered(&login_cookie, false)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    no_cookie_set(&response);
    assert_eq!(api_error(response).await.reason, "OIDCLoginStateInvalid");
    let response = s.callback(&s.b, &callback, &login_cookie).await;
    assert_eq!(
        response.status(),
        StatusCode::SEE_OTHER,
        "the real state after the failures"
    );

    // A tampered session cookie is 401, not anonymous.
    let response = s.whoami(&s.a, Setup::session(&altered(&session, true))).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "tampered session");
    assert_eq!(api_error(response).await.reason, "Unauthenticated");

    // An ID token as a bearer token (a CLI), on both replicas: the same subject as the browser.
    let id_token = s.cli_id_token().await;
    for origin in [&s.a, &s.b] {
        let response = s.whoami(origin, Setup::bearer(&id_token)).await;
        assert_eq!(response.status(), StatusCode::OK, "ID token on {origin}");
        let me: WhoAmI = response.json().await.expect("WhoAmI");
        assert_eq!(me.subject, subject);
        assert_eq!(me.csrf_token, None, "a bearer caller has no CSRF token");
    }
    // Its signature altered: 401, and the token is not echoed.
    let (head, signature) = id_token.rsplit_once('.').expect("a JWT");
    let forged = format!("{head}.{}", altered(signature, false));
    let response = s.whoami(&s.a, Setup::bearer(&forged)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "forged ID token");
    let error = api_error(response).await;
    assert!(!error.message.contains(signature), "{error:?}");
    // The static token method works beside OIDC; an unknown opaque token is 401.
    let response = s.whoami(&s.b, Setup::bearer(STATIC_TOKEN)).await;
    assert_eq!(response.status(), StatusCode::OK);
    let me: WhoAmI = response.json().await.expect("WhoAmI");
    assert_eq!(me.subject, "token:bob");
    let response = s.whoami(&s.b, Setup::bearer("not-a-known-token")).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
    let error = api_error(response).await;
    assert!(!error.message.contains("not-a-known-token"), "{error:?}");

    // Logout needs the CSRF token, then clears the cookie.
    let logout = format!("{}{}", s.b, auth::oidc::LOGOUT_PATH);
    let (cookie_name, cookie_value) = Setup::session(&session);
    let response = s
        .gateway
        .post(&logout)
        .header(cookie_name.clone(), cookie_value.clone())
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), StatusCode::FORBIDDEN, "logout without CSRF");
    no_cookie_set(&response);
    let response = s
        .gateway
        .post(&logout)
        .header(cookie_name, cookie_value)
        .header(CSRF_HEADER, &csrf_tokens[0])
        .send()
        .await
        .expect("answers");
    assert_eq!(response.status(), StatusCode::NO_CONTENT, "logout");
    assert_eq!(set_cookie(&response, auth::oidc::SESSION_COOKIE).as_deref(), Some(""));

    // The ID token's lifetime passes on the gateways' clock: refused as expired.
    s.clock_offset.store(ID_TOKEN_TTL_SECS, Ordering::SeqCst);
    let response = s.whoami(&s.a, Setup::bearer(&id_token)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "expired ID token");
    let error = api_error(response).await;
    assert!(error.message.contains("expired"), "{error:?}");
    // The browser session (8 h) outlives it, until its own end.
    let response = s.whoami(&s.b, Setup::session(&session)).await;
    assert_eq!(response.status(), StatusCode::OK, "session within 8 h");
    s.clock_offset
        .store(auth::oidc::SESSION_TTL.as_secs(), Ordering::SeqCst);
    let response = s.whoami(&s.b, Setup::session(&session)).await;
    assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "expired session");
    assert!(api_error(response).await.message.contains("expired"));
}
