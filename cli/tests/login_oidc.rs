//! `kbind login` with OIDC end to end against an independent, certified OpenID provider: the
//! npm package `oidc-provider` run by node from `hack/oidc` (as backend/tests/oidc.rs does),
//! serving https with a CA this test generates and the CLI trusts through its CA file option.
//! The "browser" is an HTTP client that follows the printed URL through the provider's login
//! and consent (granted without a human) to the CLI's loopback callback.
//!
//! Without node or `hack/oidc/node_modules` the provider tests print one line and pass, unless
//! `KBIND_REQUIRE_OIDC=1` (CI), where they fail.

use std::path::PathBuf;
use std::time::Duration;

#[path = "../../tests/support/oidc_provider.rs"]
mod oidc_provider;

use kbind_api::service::AuthMethod;
use kbind_backend::auth::{self, AuthError, Authenticator as _, Options};
use kbind_cli::login::oidc::{IssuedToken, LoginError, OidcLoginOptions, login};
use oidc_provider::{Provider, provider_available, start_provider, write_pki};

const GATEWAY_CLIENT_ID: &str = "kbind-gateway";
const GATEWAY_CLIENT_SECRET: &str = "test-client-secret-7c1f";
const CLI_CLIENT_ID: &str = "kbind-cli";
const ACCOUNT: &str = "alice";
/// A deadline for every wait, so a hung provider fails the test instead of hanging CI.
const DEADLINE: Duration = Duration::from_secs(30);
const URL_LINE: &str = "open this URL to sign in: ";

/// The provider, its CA and a gateway's auth chain that trusts it; dropping it ends node.
struct Setup {
    issuer: String,
    ca: PathBuf,
    /// The auth chain of a gateway configured with `--oidc-cli-client-id`.
    gateway: std::sync::Arc<auth::Chain>,
    /// The same gateway without it (only its own client's ID tokens).
    gateway_without_cli: std::sync::Arc<auth::Chain>,
    browser: reqwest::Client,
    _node: Provider,
    _dir: tempfile::TempDir,
}

/// Starts the provider (every sign-in declined when `deny`) and a gateway's auth chain.
async fn setup(deny: bool) -> Setup {
    let dir = tempfile::tempdir().expect("temp dir");
    let (ca, cert, key) = write_pki(dir.path());
    let env = [
        ("OIDC_CLIENT_ID", GATEWAY_CLIENT_ID.to_owned()),
        ("OIDC_CLIENT_SECRET", GATEWAY_CLIENT_SECRET.to_owned()),
        (
            "OIDC_REDIRECT_URIS",
            "https://kbind.example/auth/oidc/callback".to_owned(),
        ),
        ("OIDC_CLI_CLIENT_ID", CLI_CLIENT_ID.to_owned()),
        ("OIDC_ACCOUNT", ACCOUNT.to_owned()),
        ("OIDC_DENY", if deny { "1" } else { "0" }.to_owned()),
    ];
    let node = start_provider(&env, &cert, &key).await;
    let issuer = node.issuer.clone();

    let key_file = dir.path().join("session.key");
    std::fs::write(&key_file, "k".repeat(48)).expect("write session key");
    let secret = dir.path().join("client.secret");
    std::fs::write(&secret, GATEWAY_CLIENT_SECRET).expect("write secret");
    let mut opts = Options {
        oidc_issuer_url: Some(issuer.clone()),
        oidc_client_id: Some(GATEWAY_CLIENT_ID.into()),
        oidc_cli_client_id: Some(CLI_CLIENT_ID.into()),
        oidc_client_secret_file: Some(secret),
        oidc_ca_file: Some(ca.clone()),
        session_key_file: Some(key_file),
        ..Options::default()
    };
    let gateway = auth::authenticator(&opts, "https://kbind.example").expect("gateway auth options");
    opts.oidc_cli_client_id = None;
    let gateway_without_cli = auth::authenticator(&opts, "https://kbind.example").expect("gateway auth options");

    let ca_pem = std::fs::read(&ca).expect("read CA");
    let browser = reqwest::Client::builder()
        .cookie_store(true)
        .redirect(reqwest::redirect::Policy::none())
        .timeout(DEADLINE)
        .add_root_certificate(reqwest::Certificate::from_pem(&ca_pem).expect("PEM"))
        .build()
        .expect("browser client");
    Setup {
        issuer,
        ca,
        gateway,
        gateway_without_cli,
        browser,
        _node: node,
        _dir: dir,
    }
}

impl Setup {
    /// The `oidc` method the gateway publishes in `/api/v1/provider`.
    fn method(&self) -> AuthMethod {
        self.gateway
            .methods()
            .into_iter()
            .find(|m| m.kind == "oidc")
            .expect("the gateway offers oidc")
    }

    fn options(&self, timeout: Duration) -> OidcLoginOptions {
        OidcLoginOptions {
            ca_file: Some(self.ca.clone()),
            no_browser: true,
            timeout,
            ..OidcLoginOptions::default()
        }
    }

    /// Follows the IdP's redirects from `start` until they point at the CLI's loopback callback.
    async fn through_the_idp(&self, start: &str) -> reqwest::Url {
        let mut at = reqwest::Url::parse(start).expect("an absolute URL");
        for _ in 0..10 {
            if at.as_str().starts_with("http://127.0.0.1:") {
                return at;
            }
            let response = self.browser.get(at.clone()).send().await.expect("the IdP answers");
            let status = response.status();
            let Some(location) = response.headers().get(http::header::LOCATION).cloned() else {
                let body = response.text().await.unwrap_or_default();
                panic!("the IdP answered {status} without a redirect at {at}: {body}");
            };
            at = at
                .join(location.to_str().expect("an ASCII Location"))
                .expect("a valid Location");
        }
        panic!("the IdP did not send the browser to the loopback callback within 10 redirects");
    }
}

/// The CLI's output: each line goes to the test as it is printed.
struct Lines {
    buf: Vec<u8>,
    tx: tokio::sync::mpsc::UnboundedSender<String>,
}

impl std::io::Write for Lines {
    fn write(&mut self, data: &[u8]) -> std::io::Result<usize> {
        self.buf.extend_from_slice(data);
        while let Some(end) = self.buf.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = self.buf.drain(..=end).collect();
            let _ = self.tx.send(String::from_utf8_lossy(&line).trim_end().to_owned());
        }
        Ok(data.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn gateway_url() -> reqwest::Url {
    reqwest::Url::parse("https://kbind.example").expect("url")
}

/// Runs `login` while `browse` plays the browser with the printed sign-in URL; returns both.
async fn login_with<F, Fut, T>(
    method: &AuthMethod,
    opts: &OidcLoginOptions,
    browse: F,
) -> (Result<IssuedToken, LoginError>, T)
where
    F: FnOnce(reqwest::Url) -> Fut,
    Fut: std::future::Future<Output = T>,
{
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    let mut out = Lines { buf: Vec::new(), tx };
    let gateway = gateway_url();
    let cli = login(&gateway, method, opts, &mut out);
    let browser = async {
        let url = tokio::time::timeout(DEADLINE, async {
            loop {
                let line = rx
                    .recv()
                    .await
                    .expect("the CLI printed the sign-in URL before it ended");
                if let Some(url) = line.strip_prefix(URL_LINE) {
                    return reqwest::Url::parse(url).expect("the printed URL parses");
                }
            }
        })
        .await
        .expect("the CLI printed the sign-in URL in time");
        browse(url).await
    };
    tokio::join!(cli, browser)
}

/// `url` with query parameter `key` set to `value`.
fn with_query(url: &reqwest::Url, key: &str, value: &str) -> reqwest::Url {
    let pairs: Vec<(String, String)> = url
        .query_pairs()
        .map(|(k, v)| {
            let v = if k == key { value.to_owned() } else { v.into_owned() };
            (k.into_owned(), v)
        })
        .collect();
    let mut out = url.clone();
    out.query_pairs_mut().clear().extend_pairs(pairs);
    out
}

/// Visits the loopback callback like a browser: its status and page.
async fn visit(url: &reqwest::Url) -> (u16, String) {
    let response = reqwest::Client::new()
        .get(url.clone())
        .timeout(DEADLINE)
        .send()
        .await
        .expect("the callback listener answers");
    (response.status().as_u16(), response.text().await.expect("a page"))
}

fn bearer(token: &str) -> http::HeaderMap {
    let mut headers = http::HeaderMap::new();
    headers.insert(
        http::header::AUTHORIZATION,
        format!("Bearer {token}").parse().expect("ASCII"),
    );
    headers
}

fn redirect_port(authorize: &reqwest::Url) -> u16 {
    authorize
        .query_pairs()
        .find(|(k, _)| k == "redirect_uri")
        .map(|(_, v)| reqwest::Url::parse(&v).expect("redirect_uri is a URL"))
        .and_then(|u| u.port())
        .expect("redirect_uri names its port")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn signs_in_at_oidc_provider_and_the_gateway_accepts_the_id_token() {
    if !provider_available("the OIDC login test") {
        return;
    }
    let s = &setup(false).await;
    let method = s.method();
    assert_eq!(method.issuer_url.as_deref(), Some(s.issuer.as_str()));
    assert_eq!(method.client_id.as_deref(), Some(CLI_CLIENT_ID));
    let json = serde_json::to_value(&method).expect("JSON");
    assert_eq!(json["issuerURL"], s.issuer.as_str(), "{json}");
    assert_eq!(json["clientID"], CLI_CLIENT_ID, "{json}");

    // The private CA is trusted only when given: TLS verification is never skipped.
    let mut sink = Vec::new();
    let untrusted = OidcLoginOptions {
        ca_file: None,
        ..s.options(DEADLINE)
    };
    let err = login(&gateway_url(), &method, &untrusted, &mut sink)
        .await
        .expect_err("an issuer with an unknown CA");
    assert!(matches!(err, LoginError::IssuerUnreachable { .. }), "{err:?}");
    assert!(err.to_string().contains("--oidc-ca-file"), "{err}");

    let (token, (authorize, (status, page))) = login_with(&method, &s.options(DEADLINE), |url| async move {
        let callback = s.through_the_idp(url.as_str()).await;
        (url, visit(&callback).await)
    })
    .await;
    let token = token.expect("signed in");
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("signed in"), "{page}");

    // The request the browser was sent with: this client, PKCE S256, state, nonce, loopback.
    let query: std::collections::HashMap<_, _> = authorize.query_pairs().into_owned().collect();
    assert!(authorize.as_str().starts_with(&s.issuer), "{authorize}");
    assert_eq!(query.get("client_id").map(String::as_str), Some(CLI_CLIENT_ID));
    assert_eq!(query.get("code_challenge_method").map(String::as_str), Some("S256"));
    for param in ["code_challenge", "state", "nonce"] {
        assert!(
            query.get(param).is_some_and(|v| v.len() >= 16),
            "{param} in {authorize}"
        );
    }
    let redirect = reqwest::Url::parse(&query["redirect_uri"]).expect("redirect_uri");
    assert_eq!(redirect.scheme(), "http");
    assert_eq!(redirect.host_str(), Some("127.0.0.1"));
    assert_eq!(redirect.path(), "/callback");

    assert_eq!(token.subject, ACCOUNT);
    assert_eq!(token.issuer, s.issuer);
    assert!(
        token.expires_at.is_some_and(|t| t > jiff::Timestamp::now()),
        "{token:?}"
    );
    assert!(
        !format!("{token:?}").contains(&token.id_token),
        "Debug redacts the token"
    );

    // The gateway accepts it as a bearer token: the same subject a browser session gets.
    let caller = s
        .gateway
        .authenticate(&bearer(&token.id_token))
        .await
        .expect("the gateway accepts the CLI's ID token")
        .expect("a caller");
    assert_eq!(caller.identity.subject, format!("oidc:{}#{ACCOUNT}", s.issuer));
    // A gateway that does not name the CLI's client refuses its audience.
    let err = s
        .gateway_without_cli
        .authenticate(&bearer(&token.id_token))
        .await
        .expect_err("another audience");
    assert!(matches!(err, AuthError::Unauthenticated(_)), "{err:?}");
    assert!(err.to_string().contains("another client"), "{err}");

    // The listener is gone once the sign-in is over.
    let gone = tokio::net::TcpStream::connect(("127.0.0.1", redirect_port(&authorize))).await;
    assert!(gone.is_err(), "the callback listener still accepts connections");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_callback_with_another_state_fails_the_sign_in() {
    if !provider_available("the OIDC login test") {
        return;
    }
    let s = &setup(false).await;
    let (token, (status, page)) = login_with(&s.method(), &s.options(DEADLINE), |url| async move {
        let callback = s.through_the_idp(url.as_str()).await;
        assert!(callback.query_pairs().any(|(k, _)| k == "code"), "{callback}");
        visit(&with_query(&callback, "state", "forged-state")).await
    })
    .await;
    let err = token.expect_err("a forged state");
    assert!(matches!(err, LoginError::StateMismatch), "{err:?}");
    assert_eq!(status, 400);
    assert!(page.contains("state does not belong"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idp_that_declines_fails_the_sign_in_with_its_error_code() {
    if !provider_available("the OIDC login test") {
        return;
    }
    let s = &setup(true).await;
    let (token, (status, page)) = login_with(&s.method(), &s.options(DEADLINE), |url| async move {
        let callback = s.through_the_idp(url.as_str()).await;
        assert!(
            callback
                .query_pairs()
                .any(|(k, v)| k == "error" && v == "access_denied"),
            "{callback}"
        );
        visit(&callback).await
    })
    .await;
    let err = token.expect_err("declined");
    assert!(
        matches!(&err, LoginError::IdentityProvider { code } if code == "access_denied"),
        "{err:?}"
    );
    assert!(
        !err.to_string().contains("declined"),
        "the IdP's free text is not echoed: {err}"
    );
    assert_eq!(status, 400);
    assert!(page.contains("access_denied"), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_callback_within_the_timeout_is_a_timeout_and_stops_listening() {
    if !provider_available("the OIDC login test") {
        return;
    }
    let s = &setup(false).await;
    let opts = s.options(Duration::from_secs(1));
    // A deadline on the whole sign-in: a login that never times out fails here instead of hanging.
    let (token, authorize) = tokio::time::timeout(DEADLINE, login_with(&s.method(), &opts, |url| async move { url }))
        .await
        .expect("login gave up by itself");
    let err = token.expect_err("nobody came back");
    assert!(
        matches!(err, LoginError::Timeout { after } if after == Duration::from_secs(1)),
        "{err:?}"
    );
    assert!(err.to_string().contains("kbind login"), "{err}");
    let gone = tokio::net::TcpStream::connect(("127.0.0.1", redirect_port(&authorize))).await;
    assert!(gone.is_err(), "the callback listener still accepts connections");
}

#[tokio::test]
async fn an_unreachable_issuer_is_a_clear_error() {
    // Nothing listens on port 1.
    let method = AuthMethod {
        kind: "oidc".into(),
        issuer_url: Some("http://127.0.0.1:1".into()),
        client_id: Some(CLI_CLIENT_ID.into()),
        ..AuthMethod::default()
    };
    let mut out = Vec::new();
    let opts = OidcLoginOptions {
        no_browser: true,
        ..OidcLoginOptions::default()
    };
    let err = login(&gateway_url(), &method, &opts, &mut out)
        .await
        .expect_err("unreachable");
    assert!(
        matches!(&err, LoginError::IssuerUnreachable { issuer, .. } if issuer == "http://127.0.0.1:1"),
        "{err:?}"
    );
    assert!(out.is_empty(), "no sign-in URL before discovery worked");
}

#[tokio::test]
async fn a_gateway_without_a_cli_client_offers_no_oidc_login() {
    // Old provider metadata (before issuerURL and clientID) still parses.
    let old: AuthMethod =
        serde_json::from_str(r#"{"type":"oidc","loginPath":"/auth/oidc/login"}"#).expect("old JSON parses");
    assert_eq!(old.issuer_url, None);
    assert_eq!(old.client_id, None);
    let mut out = Vec::new();
    let err = login(&gateway_url(), &old, &OidcLoginOptions::default(), &mut out)
        .await
        .expect_err("not offered");
    assert!(matches!(err, LoginError::NotOffered { .. }), "{err:?}");
    assert!(err.to_string().contains("--oidc-cli-client-id"), "{err}");
}
