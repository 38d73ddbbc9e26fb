//! The embedded web UI: the files of `web/static/`, compiled into the binary (no build step),
//! served for every path the API does not claim. Only `web/static/` is embedded: `web/` also holds
//! the browser tests and their `node_modules`, which must never reach the binary.

use axum::http::{HeaderValue, Method, Uri, header};
use axum::response::{IntoResponse, Response};
use include_dir::{Dir, include_dir};

use super::GatewayError;

static WEB: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/../web/static");

/// Serves `web/static/<path>`; a path without a file extension is a page of the single-page app and
/// gets `index.html`. Unknown `/api/` paths are JSON 404s.
pub(crate) async fn serve(method: Method, uri: Uri) -> Response {
    let path = uri.path().trim_start_matches('/');
    if path == "api" || path.starts_with("api/") {
        return GatewayError::RouteNotFound.into_response();
    }
    if method != Method::GET && method != Method::HEAD {
        return GatewayError::MethodNotAllowed.into_response();
    }
    let last = path.rsplit('/').next().unwrap_or_default();
    let file = if path.is_empty() || !last.contains('.') {
        WEB.get_file("index.html")
    } else {
        WEB.get_file(path)
    };
    let Some(file) = file else {
        return GatewayError::RouteNotFound.into_response();
    };
    let name = file.path().to_string_lossy();
    let mut response = file.contents().into_response();
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(content_type(&name)));
    headers.insert(header::X_CONTENT_TYPE_OPTIONS, HeaderValue::from_static("nosniff"));
    headers.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    headers.insert(header::CONTENT_SECURITY_POLICY, HeaderValue::from_static(CSP));
    headers.insert(header::REFERRER_POLICY, HeaderValue::from_static("no-referrer"));
    response
}

/// The UI has no inline script or style and talks only to its own origin; downloads are `blob:`
/// links it makes itself.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; \
                   img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'";

fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next().unwrap_or_default() {
        "html" => "text/html; charset=utf-8",
        "css" => "text/css; charset=utf-8",
        "js" | "mjs" => "text/javascript; charset=utf-8",
        "json" => "application/json",
        "svg" => "image/svg+xml",
        "png" => "image/png",
        "ico" => "image/x-icon",
        "woff2" => "font/woff2",
        _ => "application/octet-stream",
    }
}
