//! OIDC sign-in for a native app (RFC 8252): authorization code + PKCE + state + nonce, with
//! the browser sent back to a one-shot listener on `http://127.0.0.1:<free port>/callback`.
//!
//! The issuer and the public client come from the gateway's provider metadata
//! ([`AuthMethod::issuer_url`], [`AuthMethod::client_id`]); the ID token the IdP issues is
//! what the CLI then sends to the gateway as `Authorization: Bearer`.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Query, State};
use axum::response::{Html, IntoResponse, Response};
use kbind_api::service::AuthMethod;
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, CsrfToken, IssuerUrl, Nonce, PkceCodeChallenge, RedirectUrl,
    RequestTokenError, Scope, TokenResponse as _,
};
use parking_lot::Mutex;
use serde::Deserialize;
use tokio::sync::{mpsc, oneshot};

/// The callback's path on the loopback listener (the CLI client's registered redirect URI is
/// `http://127.0.0.1/callback`; RFC 8252 §7.3 lets the port vary).
pub const CALLBACK_PATH: &str = "/callback";
/// How long [`OidcLoginOptions::default`] waits for the browser to come back.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(300);
/// A deadline for each request to the issuer.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
/// How long the listener may take to deliver the result page after the sign-in finished.
const SHUTDOWN_GRACE: Duration = Duration::from_secs(5);

/// How `kbind login` signs in with OIDC.
#[derive(Clone, Debug)]
pub struct OidcLoginOptions {
    /// PEM file of extra CA certificates to trust for the issuer (`--oidc-ca-file`), besides the
    /// built-in roots.
    pub ca_file: Option<PathBuf>,
    /// Do not try to open a browser (`--no-browser`); the URL is printed either way.
    pub no_browser: bool,
    /// How long to wait for the browser to come back to the callback (`--timeout`).
    pub timeout: Duration,
    /// The issuer the gateway must send the user to (`--oidc-issuer`); another is refused
    /// before anything is fetched from it.
    pub pinned_issuer: Option<String>,
}

impl Default for OidcLoginOptions {
    fn default() -> Self {
        Self {
            ca_file: None,
            no_browser: false,
            timeout: DEFAULT_TIMEOUT,
            pinned_issuer: None,
        }
    }
}

/// What a successful sign-in yields: the ID token the gateway accepts as a bearer token.
#[derive(Clone)]
pub struct IssuedToken {
    /// The ID token (a JWT); send it as `Authorization: Bearer <id_token>`.
    pub id_token: String,
    /// When the ID token expires (its `exp`).
    pub expires_at: Option<jiff::Timestamp>,
    /// The `sub` claim (the gateway records the caller as `oidc:<issuer>#<sub>`).
    pub subject: String,
    /// The issuer that signed it.
    pub issuer: String,
}

impl std::fmt::Debug for IssuedToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IssuedToken")
            .field("id_token", &"<redacted>")
            .field("expires_at", &self.expires_at)
            .field("subject", &self.subject)
            .field("issuer", &self.issuer)
            .finish()
    }
}

/// Why an OIDC sign-in failed. No variant carries a token, a code or a state value.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// The gateway's `oidc` method names no issuer or no client for the CLI.
    #[error(
        "the gateway {gateway} publishes no OIDC client for the CLI: ask its operator to set --oidc-cli-client-id, or sign in with a token"
    )]
    NotOffered {
        /// The gateway.
        gateway: String,
    },
    /// The CA file could not be read or holds no certificate.
    #[error("--oidc-ca-file {}: {problem}", path.display())]
    CaFile {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        problem: String,
    },
    /// The issuer's discovery document could not be fetched or is invalid.
    #[error(
        "the OIDC issuer {issuer} could not be reached or answered an invalid discovery document ({detail}): check the network, and --oidc-ca-file if it uses a private CA"
    )]
    IssuerUnreachable {
        /// The issuer URL.
        issuer: String,
        /// What failed.
        detail: String,
    },
    /// The local callback listener could not be started.
    #[error("failed to listen on 127.0.0.1 for the sign-in callback: {0}")]
    Listen(#[source] std::io::Error),
    /// Writing the sign-in URL to the terminal failed.
    #[error("failed to print the sign-in URL: {0}")]
    Output(#[source] std::io::Error),
    /// Nobody came back to the callback in time.
    #[error(
        "no sign-in came back within {} s: run `kbind login` again and finish signing in in the browser (use --no-browser and open the printed URL on a machine with a browser if none opened)",
        after.as_secs()
    )]
    Timeout {
        /// The wait.
        after: Duration,
    },
    /// The callback's `state` is not this sign-in's (a stale tab or a forged request).
    #[error("the callback's state does not belong to this sign-in: run `kbind login` again")]
    StateMismatch,
    /// The IdP redirected back with an error (e.g. `access_denied`).
    #[error("the identity provider refused the sign-in ({code}): run `kbind login` again, or ask its administrator")]
    IdentityProvider {
        /// The IdP's error code (its free-text description is not shown).
        code: String,
    },
    /// The callback names another issuer (RFC 9207 mix-up defence).
    #[error("the callback comes from another issuer than {issuer}: run `kbind login` again")]
    IssuerMismatch {
        /// The expected issuer.
        issuer: String,
    },
    /// The callback lacks the authorization code.
    #[error("the callback carries no authorization code: run `kbind login` again")]
    MalformedCallback,
    /// The token endpoint refused the code.
    #[error("the identity provider refused the authorization code ({code}): run `kbind login` again")]
    CodeRejected {
        /// The OAuth error code.
        code: String,
    },
    /// The token endpoint could not be reached or answered nonsense.
    #[error("the OIDC issuer's token endpoint failed ({detail}): run `kbind login` again")]
    TokenRequest {
        /// What failed.
        detail: String,
    },
    /// The token response carries no ID token (the `openid` scope was not granted).
    #[error("the identity provider answered without an ID token: its client for the CLI must allow the openid scope")]
    NoIdToken,
    /// The ID token does not verify.
    #[error("the identity provider's ID token was refused: {0}")]
    InvalidIdToken(String),
    /// An endpoint the gateway or its issuer named is neither https nor http on a loopback host.
    #[error(
        "refusing the {what} {url}: only https URLs (or http on 127.0.0.1/::1/localhost, for tests) are opened or sent credentials; nothing was opened"
    )]
    UnsafeUrl {
        /// Which endpoint.
        what: &'static str,
        /// Its scheme and host only (no query: it may carry state).
        url: String,
    },
    /// The gateway sends the user to another issuer than `--oidc-issuer` (or than last time).
    #[error(
        "the gateway {gateway} sends you to sign in at {announced}, not at {expected}: its ID token would be handed to that gateway. If {announced} is right, run `kbind login {gateway} --oidc-issuer {announced}`"
    )]
    IssuerNotPinned {
        /// The gateway.
        gateway: String,
        /// The issuer it announced.
        announced: String,
        /// The issuer expected.
        expected: String,
    },
}

/// Refuses a URL unless it is https, or http on a loopback host (a development issuer).
pub fn check_url(what: &'static str, url: &url::Url) -> Result<(), LoginError> {
    let loopback = match url.host() {
        Some(url::Host::Ipv4(ip)) => ip.is_loopback(),
        Some(url::Host::Ipv6(ip)) => ip.is_loopback(),
        Some(url::Host::Domain(d)) => d.eq_ignore_ascii_case("localhost"),
        None => false,
    };
    match url.scheme() {
        "https" if url.host().is_some() => Ok(()),
        "http" if loopback => Ok(()),
        scheme => Err(LoginError::UnsafeUrl {
            what,
            url: format!("{scheme}://{}", url.host_str().unwrap_or_default()),
        }),
    }
}

/// What the listener hands over: the callback's query and where to send the result page.
struct Callback {
    params: CallbackParams,
    reply: oneshot::Sender<Result<(), String>>,
}

#[derive(Deserialize, Default)]
struct CallbackParams {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    iss: Option<String>,
}

/// Signs in at the issuer `method` names (the gateway `gateway`'s `oidc` method) in a browser:
/// prints the URL to `out` (and opens it unless [`OidcLoginOptions::no_browser`]), waits for the
/// loopback callback, exchanges the code and verifies the ID token (issuer, audience, nonce,
/// expiry, signature).
pub async fn login(
    gateway: &reqwest::Url,
    method: &AuthMethod,
    opts: &OidcLoginOptions,
    out: &mut (dyn std::io::Write + Send),
) -> Result<IssuedToken, LoginError> {
    let (Some(issuer), Some(client_id)) = (method.issuer_url.as_deref(), method.client_id.as_deref()) else {
        return Err(LoginError::NotOffered {
            gateway: gateway.to_string(),
        });
    };
    if method.kind != "oidc" || client_id.trim().is_empty() {
        return Err(LoginError::NotOffered {
            gateway: gateway.to_string(),
        });
    }
    if let Some(pinned) = &opts.pinned_issuer
        && pinned.trim_end_matches('/') != issuer.trim_end_matches('/')
    {
        return Err(LoginError::IssuerNotPinned {
            gateway: gateway.to_string(),
            announced: issuer.to_owned(),
            expected: pinned.clone(),
        });
    }
    let unreachable = |detail: String| LoginError::IssuerUnreachable {
        issuer: issuer.to_owned(),
        detail,
    };
    let issuer_url = IssuerUrl::new(issuer.to_owned()).map_err(|e| unreachable(format!("not a URL: {e}")))?;
    check_url("OIDC issuer", issuer_url.url())?;
    let http = http_client(opts)?;
    let metadata = CoreProviderMetadata::discover_async(issuer_url, &http)
        .await
        .map_err(|e| unreachable(chain(&e)))?;
    // Why: the discovery document chooses where the browser goes and where the code is sent.
    check_url("authorization endpoint", metadata.authorization_endpoint().url())?;
    if let Some(token) = metadata.token_endpoint() {
        check_url("token endpoint", token.url())?;
    }

    let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0))
        .await
        .map_err(LoginError::Listen)?;
    let port = listener.local_addr().map_err(LoginError::Listen)?.port();
    let redirect = RedirectUrl::new(format!("http://127.0.0.1:{port}{CALLBACK_PATH}"))
        .map_err(|e| LoginError::Listen(std::io::Error::other(e)))?;
    let client = CoreClient::from_provider_metadata(metadata, ClientId::new(client_id.to_owned()), None)
        .set_redirect_uri(redirect);
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (authorize, state, nonce) = client
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .add_scope(Scope::new("profile".into()))
        .set_pkce_challenge(challenge)
        .url();

    check_url("authorization endpoint", &authorize)?;

    let (tx, mut rx) = mpsc::channel::<Callback>(1);
    let server = Listener::start(listener, tx);

    writeln!(out, "signing in to {gateway} at {issuer}").map_err(LoginError::Output)?;
    writeln!(out, "open this URL to sign in: {authorize}").map_err(LoginError::Output)?;
    out.flush().map_err(LoginError::Output)?;
    if !opts.no_browser {
        let url = authorize.to_string();
        // Launching a browser may block on a helper process; the wait must not stall the runtime.
        let opened = tokio::task::spawn_blocking(move || webbrowser::open(&url)).await;
        if !matches!(opened, Ok(Ok(()))) {
            writeln!(out, "no browser could be opened: open the URL above yourself").map_err(LoginError::Output)?;
        }
    }

    let callback = match tokio::time::timeout(opts.timeout, rx.recv()).await {
        Ok(Some(c)) => c,
        // The listener holds the sender until it ends, which it does only when told to.
        Ok(None) | Err(_) => {
            server.stop().await;
            return Err(LoginError::Timeout { after: opts.timeout });
        }
    };
    let result = finish(&client, &http, issuer, callback.params, state, nonce, verifier).await;
    let page = match &result {
        Ok(_) => Ok(()),
        Err(e) => Err(e.to_string()),
    };
    let _ = callback.reply.send(page);
    server.stop().await;
    result
}

type Client = CoreClient<
    openidconnect::EndpointSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointNotSet,
    openidconnect::EndpointMaybeSet,
    openidconnect::EndpointMaybeSet,
>;

/// Checks the callback, exchanges the code and verifies the ID token.
async fn finish(
    client: &Client,
    http: &reqwest::Client,
    issuer: &str,
    params: CallbackParams,
    state: CsrfToken,
    nonce: Nonce,
    verifier: openidconnect::PkceCodeVerifier,
) -> Result<IssuedToken, LoginError> {
    if let Some(error) = params.error {
        // The IdP's own error code only: its description is free text we do not echo.
        let code: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        return Err(LoginError::IdentityProvider { code });
    }
    if params.state.as_deref() != Some(state.secret().as_str()) {
        return Err(LoginError::StateMismatch);
    }
    if let Some(iss) = &params.iss
        && iss != issuer
    {
        return Err(LoginError::IssuerMismatch {
            issuer: issuer.to_owned(),
        });
    }
    let code = params.code.ok_or(LoginError::MalformedCallback)?;
    let request = client
        .exchange_code(AuthorizationCode::new(code))
        .map_err(|_| LoginError::TokenRequest {
            detail: "the issuer's discovery document names no token endpoint".into(),
        })?;
    let tokens = match request.set_pkce_verifier(verifier).request_async(http).await {
        Ok(t) => t,
        Err(RequestTokenError::ServerResponse(e)) => {
            return Err(LoginError::CodeRejected {
                code: e.error().to_string(),
            });
        }
        Err(e) => return Err(LoginError::TokenRequest { detail: chain(&e) }),
    };
    let id_token = tokens.id_token().ok_or(LoginError::NoIdToken)?;
    let claims = id_token
        .claims(&client.id_token_verifier(), &nonce)
        .map_err(|e| LoginError::InvalidIdToken(claims_problem(&e)))?;
    Ok(IssuedToken {
        id_token: id_token.to_string(),
        expires_at: jiff::Timestamp::from_second(claims.expiration().timestamp()).ok(),
        subject: claims.subject().as_str().to_owned(),
        issuer: issuer.to_owned(),
    })
}

/// The issuer's HTTP client: no redirects (openidconnect's advice against SSRF), a deadline,
/// and the extra roots of [`OidcLoginOptions::ca_file`]. TLS verification always stays on.
fn http_client(opts: &OidcLoginOptions) -> Result<reqwest::Client, LoginError> {
    let mut builder = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .timeout(REQUEST_TIMEOUT);
    if let Some(path) = &opts.ca_file {
        let bad = |problem: String| LoginError::CaFile {
            path: path.clone(),
            problem,
        };
        let pem = std::fs::read(path).map_err(|e| bad(format!("cannot be read: {e}")))?;
        let roots = reqwest::Certificate::from_pem_bundle(&pem).map_err(|e| bad(format!("is not PEM: {e}")))?;
        if roots.is_empty() {
            return Err(bad("holds no certificate".into()));
        }
        for root in roots {
            builder = builder.add_root_certificate(root);
        }
    }
    builder.build().map_err(|e| LoginError::TokenRequest {
        detail: format!("failed to build the HTTP client: {e}"),
    })
}

/// An error and its sources on one line (reqwest hides the cause in its sources).
fn chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// A short, credential-free reason an ID token was refused.
fn claims_problem(e: &ClaimsVerificationError) -> String {
    match e {
        ClaimsVerificationError::Expired(_) => "it has expired (check this machine's clock)".into(),
        ClaimsVerificationError::InvalidAudience(_) => "it was issued for another client".into(),
        ClaimsVerificationError::InvalidIssuer(_) => "it was issued by another issuer".into(),
        ClaimsVerificationError::InvalidNonce(_) => "its nonce does not match this sign-in".into(),
        ClaimsVerificationError::SignatureVerification(_) => {
            "its signature does not verify against the issuer's keys".into()
        }
        _ => "its claims do not verify".into(),
    }
}

/// The one-shot callback listener: hands the first `/callback` request over and answers it
/// with the sign-in's outcome.
struct Listener {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

type Inbox = Arc<Mutex<Option<mpsc::Sender<Callback>>>>;

impl Listener {
    fn start(listener: tokio::net::TcpListener, tx: mpsc::Sender<Callback>) -> Self {
        let inbox: Inbox = Arc::new(Mutex::new(Some(tx)));
        let app = axum::Router::new()
            .route(CALLBACK_PATH, axum::routing::get(callback))
            .with_state(inbox);
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stopped.await;
                })
                .await;
        });
        Self { stop, task }
    }

    /// Stops listening, letting the result page reach the browser first (within a grace).
    async fn stop(self) {
        let _ = self.stop.send(());
        let abort = self.task.abort_handle();
        if tokio::time::timeout(SHUTDOWN_GRACE, self.task).await.is_err() {
            abort.abort();
        }
    }
}

async fn callback(
    State(inbox): State<Inbox>,
    params: Result<Query<CallbackParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let params = params.map(|q| q.0).unwrap_or_default();
    // Only the first callback counts; a second (a reload) finds the inbox empty.
    let sender = inbox.lock().take();
    let Some(sender) = sender else {
        return page(Err("this sign-in has already finished: return to the terminal".into()));
    };
    let (reply, outcome) = oneshot::channel();
    if sender.send(Callback { params, reply }).await.is_err() {
        return page(Err("kbind stopped waiting: run `kbind login` again".into()));
    }
    page(
        outcome
            .await
            .unwrap_or_else(|_| Err("kbind stopped waiting: run `kbind login` again".into())),
    )
}

fn page(outcome: Result<(), String>) -> Response {
    let (status, text) = match outcome {
        Ok(()) => (
            axum::http::StatusCode::OK,
            "kbind: signed in. You can close this window and return to the terminal.".to_owned(),
        ),
        Err(why) => (
            axum::http::StatusCode::BAD_REQUEST,
            format!("kbind: the sign-in failed: {}", escape(&why)),
        ),
    };
    (
        status,
        [(axum::http::header::CACHE_CONTROL, "no-store")],
        Html(format!(
            "<!doctype html><meta charset=utf-8><title>kbind login</title><p>{text}</p>"
        )),
    )
        .into_response()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn checked(url: &str) -> Result<(), LoginError> {
        check_url("authorization endpoint", &url::Url::parse(url).expect("a URL"))
    }

    #[test]
    fn only_https_or_loopback_http_urls_are_opened() {
        assert!(checked("https://idp.example/authorize?x=1").is_ok());
        assert!(checked("http://127.0.0.1:5556/authorize").is_ok());
        assert!(checked("http://[::1]:5556/authorize").is_ok());
        assert!(checked("http://localhost/authorize").is_ok());
        for bad in [
            "file:///etc/passwd?response_type=code",
            "http://idp.example/authorize",
            "javascript:alert(1)",
            "ftp://127.0.0.1/x",
        ] {
            let err = checked(bad).expect_err(bad);
            assert!(err.to_string().contains("only https"), "{bad}: {err}");
            assert!(!err.to_string().contains('?'), "no query in the message: {err}");
        }
    }
}
