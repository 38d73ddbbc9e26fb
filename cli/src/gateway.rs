//! The gateway's HTTP API as the CLI calls it, with every [`ApiError`] turned into a
//! [`CliError`] whose exit code and message say what to do next.

use kbind_api::service::{ApiError, BindRequest, BindResponse, Catalog, GrantList, ProviderInfo, WhoAmI, path};
use serde::de::DeserializeOwned;
use serde_json::Value;

use crate::error::{CliError, Result};

/// A client of one gateway, with or without a bearer token.
pub struct Gateway {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl Gateway {
    /// A client of `base` (a URL without trailing slash), authenticated with `token` when given.
    pub fn new(base: &str, token: Option<String>) -> Result<Self> {
        let http = reqwest::Client::builder()
            .timeout(std::time::Duration::from_secs(60))
            .build()
            .map_err(|e| CliError::failed("cannot build an HTTP client", e))?;
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            token,
            http,
        })
    }

    /// The gateway's URL.
    pub fn base(&self) -> &str {
        &self.base
    }

    /// `GET /api/v1/provider`.
    pub async fn provider(&self) -> Result<ProviderInfo> {
        self.get_json(path::PROVIDER).await
    }

    /// `GET /api/v1/provider`, for `login`: an answer that is not a provider description (a web
    /// page, another API) says the URL is not a kbind gateway and what it answered instead.
    pub async fn probe(&self) -> Result<ProviderInfo> {
        let req = self.http.get(format!("{}{}", self.base, path::PROVIDER));
        let response = send(req, &self.base).await?;
        let status = response.status();
        let content_type = response
            .headers()
            .get(reqwest::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(|v| v.split(';').next().unwrap_or(v).trim().to_string());
        let bytes = response
            .bytes()
            .await
            .map_err(|e| CliError::failed("the gateway's answer broke off", e.without_url()))?;
        if status.is_success()
            && let Ok(info) = serde_json::from_slice::<ProviderInfo>(&bytes)
        {
            return Ok(info);
        }
        // A kbind error body (503 NotReady, 429, ...) is a gateway that said no, not another server.
        if !status.is_success()
            && let Ok(error) = serde_json::from_slice::<ApiError>(&bytes)
        {
            return Err(map_api_error(&error, &self.base));
        }
        let what = match content_type {
            Some(t) if !t.is_empty() => format!("HTTP {} with {t}", status.as_u16()),
            _ => format!("HTTP {} without a content type", status.as_u16()),
        };
        Err(CliError::Failed(format!(
            "{} is not a kbind gateway (GET {} answered {what}, not a provider description); check the URL: it is the gateway's address, e.g. https://kbind.example.com",
            self.base,
            path::PROVIDER
        )))
    }

    /// `GET /api/v1/whoami`.
    pub async fn whoami(&self) -> Result<WhoAmI> {
        self.get_json(path::WHOAMI).await
    }

    /// `GET /api/v1/catalog`.
    pub async fn catalog(&self) -> Result<Catalog> {
        self.get_json(path::CATALOG).await
    }

    /// `GET /api/v1/grants`.
    pub async fn grants(&self) -> Result<GrantList> {
        self.get_json(path::GRANTS).await
    }

    /// `POST /api/v1/bind`.
    pub async fn bind(&self, request: &BindRequest) -> Result<BindResponse> {
        let req = self.authed(self.http.post(format!("{}{}", self.base, path::BIND)).json(request));
        decode(send(req, &self.base).await?, &self.base).await
    }

    /// `DELETE /api/v1/grants/<name>/namespaces/<namespace>`: the Grant stops covering it.
    pub async fn drop_namespace(&self, grant: &str, namespace: &str) -> Result<()> {
        let url = format!("{}{}/{grant}/namespaces/{namespace}", self.base, path::GRANTS);
        let response = send(self.authed(self.http.delete(url)), &self.base).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(api_error(response, &self.base).await)
        }
    }

    /// `DELETE /api/v1/grants/<name>`.
    pub async fn revoke(&self, grant: &str) -> Result<()> {
        let req = self.authed(self.http.delete(format!("{}{}/{grant}", self.base, path::GRANTS)));
        let response = send(req, &self.base).await?;
        if response.status().is_success() {
            Ok(())
        } else {
            Err(api_error(response, &self.base).await)
        }
    }

    async fn get_json<T: DeserializeOwned>(&self, p: &str) -> Result<T> {
        let req = self.authed(self.http.get(format!("{}{p}", self.base)));
        decode(send(req, &self.base).await?, &self.base).await
    }

    fn authed(&self, req: reqwest::RequestBuilder) -> reqwest::RequestBuilder {
        match &self.token {
            Some(token) => req.bearer_auth(token),
            None => req,
        }
    }
}

/// Picks a bundle up (no authentication: the URL is the capability) and returns its objects.
/// The URL never appears in an error.
pub async fn pickup(url: &str) -> Result<Vec<Value>> {
    let parsed = reqwest::Url::parse(url).map_err(|_| {
        CliError::Usage("the pickup URL is not a URL; copy it again from `kbind bind` or the web UI".into())
    })?;
    if !matches!(parsed.scheme(), "http" | "https") {
        return Err(CliError::Usage(
            "the pickup URL is not an http(s) URL; copy it again from `kbind bind` or the web UI".into(),
        ));
    }
    let origin = parsed.origin().ascii_serialization();
    let http = reqwest::Client::builder()
        .timeout(std::time::Duration::from_secs(60))
        .build()
        .map_err(|e| CliError::failed("cannot build an HTTP client", e))?;
    let req = http.get(parsed).header(reqwest::header::ACCEPT, "application/json");
    let list: Value = decode(send(req, &origin).await?, &origin).await?;
    match list.get("items").and_then(Value::as_array) {
        Some(items) => Ok(items.clone()),
        None => Err(CliError::Failed(
            "the pickup answered something that is not a bundle; check that the URL is a kbind pickup URL".into(),
        )),
    }
}

async fn send(req: reqwest::RequestBuilder, base: &str) -> Result<reqwest::Response> {
    // Why `without_url`: a pickup URL is a capability and must not reach error text.
    req.send().await.map_err(|e| {
        if let Some(plain) = base.strip_prefix("https://")
            && speaks_no_tls(&e)
        {
            return CliError::Failed(format!(
                "the server at {base} does not speak TLS; is it http://{plain}?"
            ));
        }
        CliError::Failed(format!(
            "cannot reach the gateway at {base}: {}; check the URL and that kbind-backend runs",
            e.without_url()
        ))
    })
}

/// Whether the TLS handshake failed because the server answered in plain text: rustls reads
/// the first bytes of "HTTP/1.1 400" as a record of an unknown content type.
fn speaks_no_tls(e: &reqwest::Error) -> bool {
    let mut cause: Option<&dyn std::error::Error> = Some(e);
    while let Some(c) = cause {
        let text = c.to_string();
        if text.contains("InvalidContentType") || text.contains("wrong version number") {
            return true;
        }
        cause = c.source();
    }
    false
}

/// `gateway`: the gateway's URL (an origin for a pickup, whose URL is a capability), for messages.
async fn decode<T: DeserializeOwned>(response: reqwest::Response, gateway: &str) -> Result<T> {
    if !response.status().is_success() {
        return Err(api_error(response, gateway).await);
    }
    let bytes = response
        .bytes()
        .await
        .map_err(|e| CliError::failed("the gateway's answer broke off", e.without_url()))?;
    serde_json::from_slice(&bytes).map_err(|e| {
        CliError::failed(
            "the gateway answered something unexpected (is the URL a kbind gateway?)",
            e,
        )
    })
}

async fn api_error(response: reqwest::Response, gateway: &str) -> CliError {
    let status = response.status().as_u16();
    let body = response.bytes().await.unwrap_or_default();
    let error: ApiError = serde_json::from_slice(&body).unwrap_or(ApiError {
        code: status,
        reason: "Unknown".into(),
        message: format!("the gateway answered HTTP {status} without a kbind error body; is the URL a kbind gateway?"),
    });
    map_api_error(&error, gateway)
}

/// The CLI error for an error of the gateway at `gateway`: its exit code and what to do next.
pub fn map_api_error(error: &ApiError, gateway: &str) -> CliError {
    let message = &error.message;
    let reason = &error.reason;
    match (error.code, reason.as_str()) {
        (401, _) => CliError::Unauthorized(format!(
            "the gateway at {gateway} did not accept your credential ({message}); run `kbind login {gateway}` again"
        )),
        (403, _) => CliError::Unauthorized(format!("the gateway refused access: {message}")),
        // The gateway's message says which it is (used, expired, Grant being revoked) and what to
        // do; adding "works once" here was wrong for an expired URL and doubled the advice.
        (_, "PickupGone") => CliError::Refused(format!("{message} (PickupGone)")),
        (_, "TooManyRequests") => CliError::Refused(format!("{message} (TooManyRequests)")),
        (code, _) if (400..500).contains(&code) => CliError::Refused(format!("{message} ({reason})")),
        _ => CliError::Failed(format!("the gateway failed: {message} ({reason}); try again later")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, reason: &str) -> ApiError {
        ApiError {
            code,
            reason: reason.into(),
            message: "m".into(),
        }
    }

    #[test]
    fn gateway_errors_map_to_documented_exit_codes() {
        assert_eq!(map_api_error(&api(401, "Unauthenticated"), "http://gw").exit_code(), 3);
        assert_eq!(map_api_error(&api(404, "ExportNotFound"), "http://gw").exit_code(), 5);
        assert_eq!(map_api_error(&api(409, "NamespaceClaimed"), "http://gw").exit_code(), 5);
        assert_eq!(map_api_error(&api(410, "PickupGone"), "http://gw").exit_code(), 5);
        assert_eq!(map_api_error(&api(502, "ProviderError"), "http://gw").exit_code(), 1);
        assert_eq!(
            map_api_error(&api(410, "PickupGone"), "http://gw").to_string(),
            "m (PickupGone)",
            "the gateway's message alone: it says used or expired, and what to do"
        );
        // A stale credential names the gateway to log in to again, not a placeholder.
        let stale = map_api_error(&api(401, "Unauthenticated"), "http://gw").to_string();
        assert!(stale.contains("run `kbind login http://gw` again"), "{stale}");
    }
}
