//! OpenID Connect: authorization code + PKCE for browsers, ID tokens as bearer tokens for CLIs.
//!
//! Replicas share nothing but the session key: the login state (state, nonce, PKCE verifier)
//! travels in a short-lived cookie sealed with it, so the IdP's callback may land on any replica;
//! the session is a sealed cookie too. Routes: [`LOGIN_PATH`], [`CALLBACK_PATH`],
//! [`LOGOUT_PATH`].

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use axum::extract::{Query, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use http::StatusCode;
use kbind_api::service::{AuthMethod, CSRF_HEADER};
use openidconnect::core::{CoreAuthenticationFlow, CoreClient, CoreIdToken, CoreProviderMetadata};
use openidconnect::{
    AuthorizationCode, ClaimsVerificationError, ClientId, ClientSecret, CsrfToken, IssuerUrl, Nonce,
    OAuth2TokenResponse as _, PkceCodeChallenge, PkceCodeVerifier, RedirectUrl, RequestTokenError, Scope,
    SignatureVerificationError, TokenResponse as _,
};
use rand::RngCore as _;
use serde::{Deserialize, Serialize};
use subtle::ConstantTimeEq as _;
use tokio::sync::Mutex;

use super::clock::Clock;
use super::respond::{api_error, bearer_token};
use super::sealed::{CookieSpec, OpenError, SessionKey};
use super::{AuthError, Authenticator, Caller, Identity, Via};

/// `GET`: starts a browser sign-in (redirects to the IdP). `?return_to=/path` picks where the
/// browser lands afterwards (a path on this gateway; default the public URL's path).
pub const LOGIN_PATH: &str = "/auth/oidc/login";
/// `GET`: the IdP redirects here with the authorization code.
pub const CALLBACK_PATH: &str = "/auth/oidc/callback";
/// `POST`: ends the browser session (clears the cookie); `204`.
pub const LOGOUT_PATH: &str = "/auth/logout";
/// The session cookie's name.
pub const SESSION_COOKIE: &str = "kbind_session";
/// The login-state cookie's name (lives from login to callback).
pub const LOGIN_COOKIE: &str = "kbind_oidc_login";
/// How long a browser session lasts before signing in again.
pub const SESSION_TTL: jiff::SignedDuration = jiff::SignedDuration::from_hours(8);
/// How long a sign-in at the IdP may take.
pub const LOGIN_TTL: jiff::SignedDuration = jiff::SignedDuration::from_mins(10);
/// The least time between two fetches of the IdP's discovery document and keys.
const REFRESH_MIN_INTERVAL: Duration = Duration::from_secs(30);

/// What OIDC needs; built from [`super::Options`].
#[derive(Clone, Debug)]
pub struct OidcConfig {
    /// The issuer, exactly as the IdP writes it in `iss`.
    pub issuer: IssuerUrl,
    /// This gateway's client id (the audience of its ID tokens).
    pub client_id: ClientId,
    /// The public native client `kbind login` signs in as (published in the provider metadata);
    /// its ID tokens are accepted as bearer tokens beside the gateway's own.
    pub cli_client_id: Option<ClientId>,
    /// The client secret; `None` for a public client (PKCE alone).
    pub client_secret: Option<ClientSecret>,
    /// Where the IdP sends the browser back: `<public-url>/auth/oidc/callback`.
    pub redirect_url: RedirectUrl,
    /// The path of the public URL (the session cookie's path).
    pub cookie_path: String,
    /// Whether cookies are `Secure` (the public URL is https).
    pub secure_cookies: bool,
    /// The key every replica shares.
    pub key: SessionKey,
    /// Extra CA certificates (PEM) to trust for the IdP, besides the built-in roots.
    pub extra_roots: Vec<reqwest::Certificate>,
}

/// The OIDC sign-in method.
#[derive(Clone)]
pub struct Oidc {
    inner: Arc<Inner>,
}

struct Inner {
    cfg: OidcConfig,
    clock: Clock,
    http: reqwest::Client,
    login: CookieSpec,
    session: CookieSpec,
    discovered: Mutex<Option<Discovered>>,
}

struct Discovered {
    metadata: CoreProviderMetadata,
    at: tokio::time::Instant,
}

/// What the login cookie carries from login to callback.
#[derive(Serialize, Deserialize)]
struct LoginState {
    state: String,
    nonce: String,
    pkce_verifier: String,
    return_to: String,
}

/// What the session cookie carries.
#[derive(Serialize, Deserialize)]
struct Session {
    subject: String,
    name: Option<String>,
    csrf: String,
}

impl std::fmt::Debug for Oidc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Oidc")
            .field("issuer", &self.inner.cfg.issuer.as_str())
            .field("client_id", &self.inner.cfg.client_id.as_str())
            .finish_non_exhaustive()
    }
}

impl Oidc {
    /// The method; the IdP is contacted on first use, not here.
    pub fn new(cfg: OidcConfig, clock: Clock) -> Result<Self, super::SetupError> {
        let mut http = reqwest::Client::builder()
            // openidconnect's advice: following redirects would turn IdP URLs into SSRF.
            .redirect(reqwest::redirect::Policy::none())
            .timeout(Duration::from_secs(10));
        for root in &cfg.extra_roots {
            http = http.add_root_certificate(root.clone());
        }
        let http = http
            .build()
            .map_err(|e| super::SetupError::Oidc(format!("failed to build the HTTP client: {e}")))?;
        let login_path = cfg.redirect_url.url().path().to_owned();
        let login = CookieSpec {
            name: LOGIN_COOKIE,
            path: login_path,
            secure: cfg.secure_cookies,
            ttl: LOGIN_TTL,
        };
        let session = CookieSpec {
            name: SESSION_COOKIE,
            path: cfg.cookie_path.clone(),
            secure: cfg.secure_cookies,
            ttl: SESSION_TTL,
        };
        Ok(Self {
            inner: Arc::new(Inner {
                cfg,
                clock,
                http,
                login,
                session,
                discovered: Mutex::new(None),
            }),
        })
    }
}

impl Inner {
    /// The IdP's discovery document and keys, fetched once; `refresh` fetches again when the
    /// last fetch is older than [`REFRESH_MIN_INTERVAL`] (the IdP rotated its keys).
    async fn metadata(&self, refresh: bool) -> Result<CoreProviderMetadata, AuthError> {
        let mut cached = self.discovered.lock().await;
        if let Some(d) = cached.as_ref()
            && (!refresh || d.at.elapsed() < REFRESH_MIN_INTERVAL)
        {
            return Ok(d.metadata.clone());
        }
        let metadata = CoreProviderMetadata::discover_async(self.cfg.issuer.clone(), &self.http)
            .await
            .map_err(|e| {
                tracing::warn!(issuer = %self.cfg.issuer.as_str(), error = %e, "OIDC discovery failed");
                AuthError::Unavailable(format!(
                    "the OIDC issuer {} could not be reached or answered an invalid discovery document",
                    self.cfg.issuer.as_str()
                ))
            })?;
        *cached = Some(Discovered {
            metadata: metadata.clone(),
            at: tokio::time::Instant::now(),
        });
        Ok(metadata)
    }

    fn client(
        &self,
        metadata: CoreProviderMetadata,
    ) -> openidconnect::core::CoreClient<
        openidconnect::EndpointSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointNotSet,
        openidconnect::EndpointMaybeSet,
        openidconnect::EndpointMaybeSet,
    > {
        CoreClient::from_provider_metadata(metadata, self.cfg.client_id.clone(), self.cfg.client_secret.clone())
            .set_redirect_uri(self.cfg.redirect_url.clone())
    }

    fn subject(&self, sub: &str) -> String {
        format!("oidc:{}#{sub}", self.cfg.issuer.as_str())
    }

    /// Verifies an ID token presented as a bearer token: signature by the IdP's keys, issuer,
    /// audience = our client id or the CLI's, expiry on our clock. Any nonce is accepted (the
    /// CLI checked its own).
    async fn verify_bearer(&self, token: &str) -> Result<Identity, AuthError> {
        let invalid = |why: &str| {
            AuthError::Unauthenticated(format!(
                "the bearer token is not a valid ID token of {} for client {}: {why}",
                self.cfg.issuer.as_str(),
                self.cfg.client_id.as_str()
            ))
        };
        let id_token: CoreIdToken = token.parse().map_err(|_| invalid("it is malformed"))?;
        let mut refresh = false;
        loop {
            let metadata = self.metadata(refresh).await?;
            let clock = self.clock.clone();
            let client = self.client(metadata.clone());
            let verifier = client.id_token_verifier().set_time_fn(move || clock.now_chrono());
            let mut verified = id_token.claims(&verifier, |_: Option<&Nonce>| Ok(()));
            // One audience per verifier: the CLI's public client is tried when the gateway's is
            // not the token's audience.
            if let (Err(ClaimsVerificationError::InvalidAudience(_)), Some(cli)) = (&verified, &self.cfg.cli_client_id)
            {
                let clock = self.clock.clone();
                let cli_client = CoreClient::from_provider_metadata(metadata, cli.clone(), None);
                let cli_verifier = cli_client.id_token_verifier().set_time_fn(move || clock.now_chrono());
                verified = id_token.claims(&cli_verifier, |_: Option<&Nonce>| Ok(()));
            }
            match verified {
                Ok(claims) => {
                    return Ok(Identity {
                        subject: self.subject(claims.subject().as_str()),
                        name: display_name(claims),
                    });
                }
                Err(ClaimsVerificationError::SignatureVerification(SignatureVerificationError::NoMatchingKey))
                    if !refresh =>
                {
                    refresh = true
                }
                Err(e) => return Err(invalid(&claims_problem(&e))),
            }
        }
    }
}

/// A short, credential-free reason an ID token was refused.
fn claims_problem(e: &ClaimsVerificationError) -> String {
    match e {
        ClaimsVerificationError::Expired(_) => "it has expired".into(),
        ClaimsVerificationError::InvalidAudience(_) => "it was issued for another client".into(),
        ClaimsVerificationError::InvalidIssuer(_) => "it was issued by another issuer".into(),
        ClaimsVerificationError::InvalidNonce(_) => "its nonce does not match this sign-in".into(),
        ClaimsVerificationError::SignatureVerification(_) => {
            "its signature does not verify against the issuer's keys".into()
        }
        _ => "its claims do not verify".into(),
    }
}

fn display_name(claims: &openidconnect::core::CoreIdTokenClaims) -> Option<String> {
    claims
        .name()
        .and_then(|n| n.get(None))
        .map(|n| n.as_str().to_owned())
        .or_else(|| claims.preferred_username().map(|u| u.as_str().to_owned()))
        .or_else(|| claims.email().map(|e| e.as_str().to_owned()))
}

fn random_token() -> String {
    use base64::Engine as _;
    let mut bytes = [0u8; 32];
    rand::rng().fill_bytes(&mut bytes);
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(bytes)
}

/// A `return_to` that stays on this gateway: an absolute path, not `//host` or `/\host`.
fn safe_return_to(raw: Option<&str>, default: &str) -> String {
    match raw {
        Some(p)
            if p.starts_with('/')
                && !p.starts_with("//")
                && !p.starts_with("/\\")
                && !p.chars().any(|c| c.is_control()) =>
        {
            p.to_owned()
        }
        _ => default.to_owned(),
    }
}

fn unauthenticated(reason: &str, message: impl Into<String>) -> Response {
    api_error(StatusCode::UNAUTHORIZED, reason, message)
}

fn redirect_with_cookies(location: &str, cookies: &[String]) -> Response {
    let mut response = (StatusCode::SEE_OTHER, [(http::header::LOCATION, location)]).into_response();
    for c in cookies {
        if let Ok(v) = http::HeaderValue::from_str(c) {
            response.headers_mut().append(http::header::SET_COOKIE, v);
        }
    }
    response
        .headers_mut()
        .insert(http::header::CACHE_CONTROL, http::HeaderValue::from_static("no-store"));
    response
}

#[derive(Deserialize)]
struct LoginParams {
    return_to: Option<String>,
}

async fn login(
    State(inner): State<Arc<Inner>>,
    params: Result<Query<LoginParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let return_to = safe_return_to(
        params.ok().and_then(|q| q.0.return_to).as_deref(),
        &inner.cfg.cookie_path,
    );
    let metadata = match inner.metadata(false).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let (challenge, verifier) = PkceCodeChallenge::new_random_sha256();
    let (url, state, nonce) = inner
        .client(metadata)
        .authorize_url(
            CoreAuthenticationFlow::AuthorizationCode,
            CsrfToken::new_random,
            Nonce::new_random,
        )
        .add_scope(Scope::new("profile".into()))
        .set_pkce_challenge(challenge)
        .url();
    let login_state = LoginState {
        state: state.secret().clone(),
        nonce: nonce.secret().clone(),
        pkce_verifier: verifier.secret().clone(),
        return_to,
    };
    let cookie = inner.login.seal(&inner.cfg.key, &inner.clock, &login_state);
    redirect_with_cookies(url.as_str(), &[cookie])
}

#[derive(Deserialize)]
struct CallbackParams {
    code: Option<String>,
    state: Option<String>,
    error: Option<String>,
    /// RFC 9207: the IdP names itself in the response (mix-up defence), when it supports it.
    iss: Option<String>,
}

async fn callback(
    State(inner): State<Arc<Inner>>,
    headers: http::HeaderMap,
    params: Result<Query<CallbackParams>, axum::extract::rejection::QueryRejection>,
) -> Response {
    let Ok(Query(params)) = params else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the callback's query string is malformed",
        );
    };
    let params_iss = params.iss;
    if let Some(error) = params.error {
        // The IdP's own error code only: its description is free text we do not echo.
        let code: String = error
            .chars()
            .filter(|c| c.is_ascii_alphanumeric() || *c == '_')
            .take(64)
            .collect();
        return unauthenticated(
            "OIDCLoginFailed",
            format!("the identity provider refused the sign-in ({code}): start again at {LOGIN_PATH}"),
        );
    }
    let (Some(code), Some(state)) = (params.code, params.state) else {
        return api_error(
            StatusCode::BAD_REQUEST,
            "BadRequest",
            "the callback needs the `code` and `state` the identity provider sends",
        );
    };
    let login_state: LoginState = match inner.login.open(&inner.cfg.key, &inner.clock, &headers) {
        Some(Ok(s)) => s,
        None => {
            return unauthenticated(
                "OIDCLoginStateMissing",
                format!("no sign-in is in progress in this browser: start again at {LOGIN_PATH}"),
            );
        }
        Some(Err(OpenError::Expired)) => {
            return unauthenticated(
                "OIDCLoginExpired",
                format!(
                    "the sign-in took longer than {} minutes: start again at {LOGIN_PATH}",
                    LOGIN_TTL.as_secs() / 60
                ),
            );
        }
        Some(Err(OpenError::Tampered)) => {
            return unauthenticated(
                "OIDCLoginStateInvalid",
                format!("the sign-in state cookie was not issued by this service: start again at {LOGIN_PATH}"),
            );
        }
    };
    if !bool::from(state.as_bytes().ct_eq(login_state.state.as_bytes())) {
        return unauthenticated(
            "OIDCStateMismatch",
            format!("the callback's state does not belong to this browser's sign-in: start again at {LOGIN_PATH}"),
        );
    }
    if let Some(iss) = &params_iss
        && iss != inner.cfg.issuer.as_str()
    {
        return unauthenticated(
            "OIDCIssuerMismatch",
            format!(
                "the callback comes from another issuer than {}: start again at {LOGIN_PATH}",
                inner.cfg.issuer.as_str()
            ),
        );
    }
    let metadata = match inner.metadata(false).await {
        Ok(m) => m,
        Err(e) => return e.into_response(),
    };
    let client = inner.client(metadata);
    let exchange = match client.exchange_code(AuthorizationCode::new(code)) {
        Ok(request) => {
            request
                .set_pkce_verifier(PkceCodeVerifier::new(login_state.pkce_verifier))
                .request_async(&inner.http)
                .await
        }
        Err(_) => {
            return AuthError::Unavailable("the OIDC issuer's discovery document names no token endpoint".into())
                .into_response();
        }
    };
    let tokens = match exchange {
        Ok(t) => t,
        Err(RequestTokenError::ServerResponse(e)) => {
            return unauthenticated(
                "OIDCCodeRejected",
                format!(
                    "the identity provider refused the authorization code ({}): it was used already or has expired; start again at {LOGIN_PATH}",
                    e.error()
                ),
            );
        }
        Err(e) => {
            tracing::warn!(error = %e, "OIDC token request failed");
            return AuthError::Unavailable(
                "the OIDC issuer's token endpoint could not be reached or answered nonsense".into(),
            )
            .into_response();
        }
    };
    // The access token is not needed: the ID token says who signed in.
    let _ = tokens.access_token();
    let Some(id_token) = tokens.id_token() else {
        return unauthenticated("OIDCTokenInvalid", "the identity provider answered without an ID token");
    };
    let clock = inner.clock.clone();
    let verifier = client.id_token_verifier().set_time_fn(move || clock.now_chrono());
    let nonce = Nonce::new(login_state.nonce);
    let claims = match id_token.claims(&verifier, &nonce) {
        Ok(c) => c,
        Err(e) => {
            return unauthenticated(
                "OIDCTokenInvalid",
                format!("the identity provider's ID token was refused: {}", claims_problem(&e)),
            );
        }
    };
    let session = Session {
        subject: inner.subject(claims.subject().as_str()),
        name: display_name(claims),
        csrf: random_token(),
    };
    let set_session = inner.session.seal(&inner.cfg.key, &inner.clock, &session);
    redirect_with_cookies(&login_state.return_to, &[set_session, inner.login.clear()])
}

async fn logout(State(inner): State<Arc<Inner>>, headers: http::HeaderMap) -> Response {
    // A valid session must prove the request is its own (a cross-site form cannot set the
    // header); a broken or absent one is cleared either way.
    if let Some(Ok(session)) = inner.session.open::<Session>(&inner.cfg.key, &inner.clock, &headers)
        && !super::respond::csrf_matches(&headers, &session.csrf)
    {
        return api_error(
            StatusCode::FORBIDDEN,
            "CSRFTokenMismatch",
            format!("signing out needs the session's CSRF token in the {CSRF_HEADER} header"),
        );
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    if let Ok(v) = http::HeaderValue::from_str(&inner.session.clear()) {
        response.headers_mut().insert(http::header::SET_COOKIE, v);
    }
    response
}

#[async_trait]
impl Authenticator for Oidc {
    fn method(&self) -> AuthMethod {
        AuthMethod {
            kind: "oidc".into(),
            login_path: Some(LOGIN_PATH.into()),
            issuer_url: Some(self.inner.cfg.issuer.as_str().to_owned()),
            client_id: self.inner.cfg.cli_client_id.as_ref().map(|c| c.as_str().to_owned()),
        }
    }

    /// A bearer token that is a JWT is this method's (verified, else 401); otherwise the session
    /// cookie (opened, else 401); otherwise `None`.
    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
        if let Some(token) = bearer_token(headers) {
            if token.split('.').count() != 3 {
                return Ok(None);
            }
            let identity = self.inner.verify_bearer(token).await?;
            return Ok(Some(Caller {
                identity,
                via: Via::Bearer,
            }));
        }
        let inner = &self.inner;
        match inner.session.open::<Session>(&inner.cfg.key, &inner.clock, headers) {
            None => Ok(None),
            Some(Ok(s)) => Ok(Some(Caller {
                identity: Identity {
                    subject: s.subject,
                    name: s.name,
                },
                via: Via::Session { csrf_token: s.csrf },
            })),
            Some(Err(OpenError::Expired)) => Err(AuthError::Unauthenticated(format!(
                "the session has expired: sign in again at {LOGIN_PATH}"
            ))),
            Some(Err(OpenError::Tampered)) => Err(AuthError::Unauthenticated(format!(
                "the session cookie was not issued by this service: sign in again at {LOGIN_PATH}"
            ))),
        }
    }

    fn routes(&self) -> axum::Router {
        axum::Router::new()
            .route(LOGIN_PATH, get(login))
            .route(CALLBACK_PATH, get(callback))
            .route(LOGOUT_PATH, post(logout))
            .with_state(self.inner.clone())
    }
}

#[cfg(test)]
mod tests {
    use tower::ServiceExt as _;

    use super::*;

    /// An OIDC method whose issuer does not answer (nothing listens on port 1).
    fn unreachable_idp() -> Oidc {
        let cfg = OidcConfig {
            issuer: IssuerUrl::new("http://127.0.0.1:1".into()).expect("url"),
            client_id: ClientId::new("kbind".into()),
            cli_client_id: None,
            client_secret: None,
            redirect_url: RedirectUrl::new("https://kbind.example/auth/oidc/callback".into()).expect("url"),
            cookie_path: "/".into(),
            secure_cookies: true,
            key: SessionKey::from_material(&[7; 32]).expect("key"),
            extra_roots: Vec::new(),
        };
        Oidc::new(cfg, Clock::system()).expect("builds")
    }

    #[tokio::test]
    async fn an_unreachable_idp_is_503_with_an_api_error_and_sets_nothing() {
        let oidc = unreachable_idp();
        let request = http::Request::get(LOGIN_PATH)
            .body(axum::body::Body::empty())
            .expect("request");
        let response = oidc.routes().oneshot(request).await.expect("answers");
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(response.headers().get(http::header::SET_COOKIE).is_none());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        let error: kbind_api::service::ApiError = serde_json::from_slice(&body).expect("ApiError JSON");
        assert_eq!(error.reason, "IdentityProviderUnavailable");

        let mut headers = http::HeaderMap::new();
        use base64::Engine as _;
        let b64 = |json: &str| base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(json);
        let jwt = format!(
            "{}.{}.{}",
            b64(r#"{"alg":"RS256","kid":"k1"}"#),
            b64(r#"{"iss":"http://127.0.0.1:1","aud":"kbind","sub":"a","exp":4102444800,"iat":1}"#),
            b64("signature")
        );
        let bearer = format!("Bearer {jwt}");
        headers.insert(http::header::AUTHORIZATION, bearer.parse().expect("ascii"));
        let err = oidc.authenticate(&headers).await.expect_err("cannot verify");
        assert!(matches!(err, AuthError::Unavailable(_)), "{err:?}");
    }

    #[tokio::test]
    async fn a_callback_without_login_state_is_401_before_the_idp_is_asked() {
        let oidc = unreachable_idp();
        let request = http::Request::get(format!("{CALLBACK_PATH}?code=c&state=s"))
            .body(axum::body::Body::empty())
            .expect("request");
        let response = oidc.routes().oneshot(request).await.expect("answers");
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED);
        assert!(response.headers().get(http::header::SET_COOKIE).is_none());
        let body = axum::body::to_bytes(response.into_body(), 1 << 16).await.expect("body");
        let error: kbind_api::service::ApiError = serde_json::from_slice(&body).expect("ApiError JSON");
        assert_eq!(error.reason, "OIDCLoginStateMissing");
    }

    #[test]
    fn return_to_stays_on_this_gateway() {
        assert_eq!(safe_return_to(Some("/ui/catalog?x=1"), "/"), "/ui/catalog?x=1");
        for hostile in ["https://evil.example", "//evil.example", "/\\evil.example", "ui", ""] {
            assert_eq!(safe_return_to(Some(hostile), "/kbind"), "/kbind", "{hostile:?}");
        }
        assert_eq!(safe_return_to(None, "/"), "/");
    }
}
