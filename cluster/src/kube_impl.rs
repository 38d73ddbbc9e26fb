//! `ClusterClient` over the `kube` crate: one `kube::Client`, dynamic objects addressed by GVR.
//!
//! Requests are built with kube's own URL builder (`kube::core::Request`, the one `kube::Api`
//! uses), so paths and query parameters are exactly kube's. One-shot verbs are sent with
//! `Client::send` instead of `Api` because kube drops response headers on errors and the
//! apiserver's priority-and-fairness 429 carries its delay only in the `Retry-After` header
//! (its body is plain text). Watches go through `kube::Api::watch`, which owns the tricky
//! line-framing and end-of-stream handling.

use async_trait::async_trait;
use http::{HeaderMap, StatusCode, header};
use http_body_util::BodyExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{APIGroupList, APIResourceList, APIVersions};
use kube::{
    Client, Resource,
    api::{
        ApiResource, DeleteParams, DynamicObject, ListParams, ObjectList, Patch, PatchParams, PostParams, WatchEvent,
        WatchParams,
    },
    core::{
        Request, Status,
        discovery::v2::{ACCEPT_AGGREGATED_DISCOVERY_V2, APIGroupDiscovery, APIGroupDiscoveryList},
    },
};
use serde::de::DeserializeOwned;

use crate::transport::TransportOptions;
use crate::{ApiGroupInfo, ClusterClient, DiscoveredResource, Discovery, Error, Result, WatchStream};

/// A [`ClusterClient`] talking to a real API server through a `kube::Client`.
#[derive(Clone)]
pub struct KubeClusterClient {
    client: Client,
}

impl std::fmt::Debug for KubeClusterClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The client holds credentials in its middleware; print nothing of it.
        f.debug_struct("KubeClusterClient").finish_non_exhaustive()
    }
}

impl KubeClusterClient {
    /// Wraps an already configured `kube::Client`.
    pub fn new(client: Client) -> Self {
        Self { client }
    }

    /// Builds a client from a `kube::Config` with kube's silent retries of 429/503/504 switched
    /// off: kube 5 retries up to 15 times with delays up to 1000 s, which would hide an
    /// unreachable provider from the engine, whose reconcilers own every backoff.
    /// Response bodies are capped at [`DEFAULT_MAX_RESPONSE_BYTES`](crate::limit::DEFAULT_MAX_RESPONSE_BYTES).
    pub fn from_config(config: kube::Config) -> Result<Self, Error> {
        Self::from_config_with_limit(config, crate::limit::DEFAULT_MAX_RESPONSE_BYTES)
    }

    /// [`from_config`](Self::from_config) with response bodies capped at `max_response_bytes`
    /// (per event for watches): a server cannot make the client buffer without end.
    pub fn from_config_with_limit(config: kube::Config, max_response_bytes: u64) -> Result<Self, Error> {
        Self::from_config_with_transport(config, max_response_bytes, &TransportOptions::default())
    }

    /// [`from_config_with_limit`](Self::from_config_with_limit) with `transport`'s keepalive
    /// settings instead of the defaults (a config kube's own stack serves ignores them).
    pub fn from_config_with_transport(
        mut config: kube::Config,
        max_response_bytes: u64,
        transport: &TransportOptions,
    ) -> Result<Self, Error> {
        config.default_retry = false;
        let limit = crate::limit::ResponseLimitLayer::new(max_response_bytes);
        let client = if crate::transport::supports(&config) {
            crate::transport::client_builder_with(&config, transport)
                .map_err(|e| Error::Transport(e.to_string()))?
                .with_layer(&limit)
                .build()
        } else {
            kube::client::ClientBuilder::try_from(config)
                .map_err(|e| Error::Transport(e.to_string()))?
                .with_layer(&limit)
                .build()
        };
        Ok(Self::new(client))
    }

    /// [`from_config_with_limit`](Self::from_config_with_limit), authenticating with `bearer`
    /// instead of `config`'s credentials: the token is read on every request, so one renewed
    /// with [`BearerToken::set`](crate::BearerToken::set) is used at once, on the same
    /// connections and without restarting a watch. Only for configs [`supports`](crate::transport::supports)
    /// covers (no proxy, TLS server name or exec plugin).
    pub fn from_config_with_bearer(
        mut config: kube::Config,
        max_response_bytes: u64,
        bearer: crate::BearerToken,
    ) -> Result<Self, Error> {
        if !crate::transport::supports(&config) {
            return Err(Error::BadRequest {
                message:
                    "a renewable bearer token needs a direct connection (no proxy, TLS server name or exec plugin)"
                        .into(),
            });
        }
        bearer
            .header()
            .map_err(|e| Error::BadRequest { message: e.to_string() })?;
        config.default_retry = false;
        config.auth_info = kube::config::AuthInfo::default();
        let limit = crate::limit::ResponseLimitLayer::new(max_response_bytes);
        let client = crate::transport::client_builder_with_bearer(&config, &TransportOptions::default(), Some(bearer))
            .map_err(|e| Error::Transport(e.to_string()))?
            .with_layer(&limit)
            .build();
        Ok(Self::new(client))
    }

    /// The underlying `kube::Client`.
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// kube's request builder for the collection of `res` in `namespace` (all namespaces if `None`).
    fn request(res: &ApiResource, namespace: Option<&str>) -> Request {
        Request::new(DynamicObject::url_path(res, namespace))
    }

    /// Sends a request; an error answer becomes the typed error, a successful one is returned
    /// with its body unread (a watch streams it).
    async fn respond(&self, request: http::Request<Vec<u8>>) -> Result<http::Response<kube::client::Body>> {
        let response = self.client.send(request.map(kube::client::Body::from)).await?;
        let code = response.status();
        if code.is_client_error() || code.is_server_error() {
            let retry_after = retry_after_seconds(response.headers());
            let body = response.into_body().collect().await?.to_bytes();
            return Err(error_from_response(code, retry_after, &body));
        }
        Ok(response)
    }

    /// Sends a request and returns the body of a successful answer.
    async fn send(&self, request: http::Request<Vec<u8>>) -> Result<bytes::Bytes> {
        Ok(self.respond(request).await?.into_body().collect().await?.to_bytes())
    }

    /// Sends a request and decodes the JSON answer.
    async fn send_json<T: DeserializeOwned>(&self, request: http::Request<Vec<u8>>) -> Result<T> {
        let body = self.send(request).await?;
        decode(&body)
    }

    /// GETs `path` with an `Accept` header and decodes the JSON answer.
    async fn get_json<T: DeserializeOwned>(&self, path: &str, accept: &str) -> Result<T> {
        let request = http::Request::get(path)
            .header(header::ACCEPT, accept)
            .body(Vec::new())
            .map_err(|e| Error::BadRequest {
                message: format!("failed to build request for {path}: {e}"),
            })?;
        self.send_json(request).await
    }

    /// Discovery through the aggregated endpoints (one request each for `/api` and `/apis`).
    fn aggregated_discovery(core: APIGroupDiscoveryList, apis: APIGroupDiscoveryList) -> Discovery {
        let mut discovery = Discovery::default();
        for group in core.items.into_iter().chain(apis.items) {
            add_aggregated_group(&mut discovery, group);
        }
        discovery
    }

    /// Discovery through the legacy per-group-version endpoints, for servers without aggregation.
    async fn legacy_discovery(&self, core: APIVersions) -> Result<Discovery> {
        let mut discovery = Discovery::default();
        if let Some(preferred) = core.versions.first() {
            discovery.groups.push(ApiGroupInfo {
                name: String::new(),
                versions: core.versions.clone(),
                preferred_version: preferred.clone(),
            });
        }
        for version in &core.versions {
            let list: APIResourceList = self.get_json(&format!("/api/{version}"), JSON).await?;
            add_legacy_resources(&mut discovery, "", version, list);
        }
        let groups: APIGroupList = self.get_json("/apis", JSON).await?;
        for group in groups.groups {
            let versions: Vec<String> = group.versions.iter().map(|v| v.version.clone()).collect();
            let preferred_version = group
                .preferred_version
                .as_ref()
                .map(|p| p.version.clone())
                .or_else(|| versions.first().cloned())
                .unwrap_or_default();
            for gv in &group.versions {
                match self
                    .get_json::<APIResourceList>(&format!("/apis/{}", gv.group_version), JSON)
                    .await
                {
                    Ok(list) => add_legacy_resources(&mut discovery, &group.name, &gv.version, list),
                    // An unavailable aggregated APIService must not hide every other group
                    // (client-go reports these as partial discovery failures, kubectl goes on),
                    // but the answer says it is partial: nobody may read it as "nothing else".
                    Err(e) if !matches!(e, Error::Unauthorized { .. }) => {
                        tracing::warn!(group_version = %gv.group_version, error = %e, "skipping undiscoverable group version");
                        discovery.unavailable.push(gv.group_version.clone());
                    }
                    Err(e) => return Err(e),
                }
            }
            discovery.groups.push(ApiGroupInfo {
                name: group.name,
                versions,
                preferred_version,
            });
        }
        Ok(discovery)
    }
}

const JSON: &str = "application/json";

#[async_trait]
impl ClusterClient for KubeClusterClient {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).get(name, &Default::default())?;
        self.send_json(request).await
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        let request = Self::request(res, namespace).list(params)?;
        self.send_json(request).await
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        let mut request = Self::request(res, namespace).watch(params, resource_version)?;
        // Servers from 1.37 gzip watch streams one member per event, which the decompression
        // layer cannot read (kube-client does the same).
        request
            .headers_mut()
            .insert(header::ACCEPT_ENCODING, http::HeaderValue::from_static("identity"));
        Ok(crate::kube_watch::events(self.respond(request).await?.into_body()))
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).create(params, encode(obj)?)?;
        self.send_json(request).await
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).replace(name, params, encode(obj)?)?;
        self.send_json(request).await
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).replace_subresource("status", name, params, encode(obj)?)?;
        self.send_json(request).await
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).patch(name, params, patch)?;
        self.send_json(request).await
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let request = Self::request(res, namespace).patch_subresource("status", name, params, patch)?;
        self.send_json(request).await
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        let request = Self::request(res, namespace).delete(name, params)?;
        let body: serde_json::Value = self.send_json(request).await?;
        // The server answers with the object while finalizers hold it, a Status once it is gone.
        if body.get("kind").and_then(|k| k.as_str()) == Some("Status") {
            return Ok(None);
        }
        serde_json::from_value(body)
            .map(Some)
            .map_err(|e| Error::Decode(e.to_string()))
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let data = serde_json::to_vec(body).map_err(|e| Error::Decode(e.to_string()))?;
        let request =
            Self::request(res, namespace).create_subresource(subresource, name, &PostParams::default(), data)?;
        self.send_json(request).await
    }

    async fn discovery(&self) -> Result<Discovery> {
        // A server without aggregated discovery ignores the profile and answers the legacy
        // `APIVersions`, so the answer's kind picks the path.
        let core: serde_json::Value = self.get_json("/api", ACCEPT_AGGREGATED_DISCOVERY_V2).await?;
        if core.get("kind").and_then(|k| k.as_str()) == Some("APIGroupDiscoveryList") {
            let core: APIGroupDiscoveryList = serde_json::from_value(core).map_err(|e| Error::Decode(e.to_string()))?;
            let apis: APIGroupDiscoveryList = self.get_json("/apis", ACCEPT_AGGREGATED_DISCOVERY_V2).await?;
            return Ok(Self::aggregated_discovery(core, apis));
        }
        let core: APIVersions = serde_json::from_value(core).map_err(|e| Error::Decode(e.to_string()))?;
        self.legacy_discovery(core).await
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value> {
        let path = if group.is_empty() {
            format!("/openapi/v3/api/{version}")
        } else {
            format!("/openapi/v3/apis/{group}/{version}")
        };
        self.get_json(&path, JSON).await
    }
}

impl From<kube::core::request::Error> for Error {
    fn from(err: kube::core::request::Error) -> Self {
        // kube refuses to build requests the apiserver would reject as malformed.
        Error::BadRequest {
            message: format!("failed to build request: {err}"),
        }
    }
}

/// Maps one item of kube's watch stream onto the seam: server `ERROR` events become typed errors.
pub(crate) fn watch_item(item: kube::Result<WatchEvent<DynamicObject>>) -> Result<WatchEvent<DynamicObject>> {
    match item {
        Ok(WatchEvent::Error(status)) => Err(Error::from_status(&status)),
        Ok(event) => Ok(event),
        Err(e) => Err(Error::from(e)),
    }
}

/// Serializes an object as a request body.
fn encode(obj: &DynamicObject) -> Result<Vec<u8>> {
    serde_json::to_vec(obj).map_err(|e| Error::Decode(e.to_string()))
}

/// Decodes a JSON answer.
fn decode<T: DeserializeOwned>(body: &[u8]) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| Error::Decode(e.to_string()))
}

/// The delay of a `Retry-After: <seconds>` header (the apiserver never sends the date form).
fn retry_after_seconds(headers: &HeaderMap) -> Option<u32> {
    headers
        .get(header::RETRY_AFTER)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .filter(|s| *s > 0)
}

/// The typed error for an error answer: its `Status` body if it has one, else its code and text.
fn error_from_response(code: StatusCode, retry_after: Option<u32>, body: &[u8]) -> Error {
    // Only the apiserver's own `Status` can say "absent": a proxy's `404 page not found` (or
    // any other body) must not release a finalizer whose provider copy still exists.
    if code == StatusCode::NOT_FOUND && !is_status_object(body) && !crate::planted::non_status_404_is_absent() {
        return Error::NotServed {
            message: crate::error::not_a_status_404(String::from_utf8_lossy(body).trim()),
        };
    }
    let mut status = match serde_json::from_slice::<Status>(body) {
        Ok(status) if status.code != 0 || !status.message.is_empty() => status,
        // Plain-text answers come from filters in front of the handlers (priority and
        // fairness, max-in-flight) and from proxies.
        _ => {
            let text = String::from_utf8_lossy(body).trim().to_string();
            // "Service Unavailable" → "ServiceUnavailable", the apiserver's StatusReason spelling.
            let reason = code.canonical_reason().unwrap_or_default().replace(' ', "");
            Status::failure(&text, &reason)
        }
    };
    if status.code == 0 {
        status.code = code.as_u16();
    }
    let mut err = Error::from_status(&status);
    if let Error::TooManyRequests {
        retry_after_seconds, ..
    } = &mut err
        && retry_after_seconds.is_none()
    {
        *retry_after_seconds = retry_after;
    }
    err
}

/// Whether `body` is a Kubernetes `Status` object (`kind: Status`), as every apiserver handler answers errors.
fn is_status_object(body: &[u8]) -> bool {
    serde_json::from_slice::<serde_json::Value>(body)
        .is_ok_and(|v| v.get("kind").and_then(serde_json::Value::as_str) == Some("Status"))
}

/// Folds one aggregated-discovery group into `discovery` (versions arrive in preference order).
fn add_aggregated_group(discovery: &mut Discovery, group: APIGroupDiscovery) {
    let name = group.metadata.and_then(|m| m.name).unwrap_or_default();
    let versions: Vec<String> = group.versions.iter().filter_map(|v| v.version.clone()).collect();
    let Some(preferred_version) = versions.first().cloned() else {
        return;
    };
    for version in group.versions {
        let Some(version_name) = version.version else {
            continue;
        };
        // The aggregator could not refresh this group-version (its APIService is unavailable):
        // what it lists may be out of date, so the answer is partial.
        if version.freshness.as_deref() == Some("Stale") {
            discovery.unavailable.push(if name.is_empty() {
                version_name.clone()
            } else {
                format!("{name}/{version_name}")
            });
        }
        for resource in version.resources {
            // Without a kind the resource cannot become an `ApiResource`; the apiserver always
            // sends one for top-level resources.
            let (Some(plural), Some(kind)) = (resource.resource, resource.response_kind.and_then(|k| k.kind)) else {
                continue;
            };
            discovery.resources.push(DiscoveredResource {
                group: name.clone(),
                version: version_name.clone(),
                kind,
                plural,
                singular: resource.singular_resource.unwrap_or_default(),
                namespaced: resource.scope.as_deref() == Some("Namespaced"),
                verbs: resource.verbs,
                subresources: resource
                    .subresources
                    .into_iter()
                    .filter_map(|s| s.subresource)
                    .collect(),
                short_names: resource.short_names,
                categories: resource.categories,
            });
        }
    }
    discovery.groups.push(ApiGroupInfo {
        name,
        versions,
        preferred_version,
    });
}

/// Folds one legacy `APIResourceList` into `discovery`, attaching `plural/sub` entries to their parent.
fn add_legacy_resources(discovery: &mut Discovery, group: &str, version: &str, list: APIResourceList) {
    let first = discovery.resources.len();
    let (subresources, resources): (Vec<_>, Vec<_>) = list.resources.into_iter().partition(|r| r.name.contains('/'));
    for r in resources {
        discovery.resources.push(DiscoveredResource {
            group: group.to_string(),
            version: version.to_string(),
            kind: r.kind,
            plural: r.name,
            singular: r.singular_name,
            namespaced: r.namespaced,
            verbs: r.verbs,
            subresources: vec![],
            short_names: r.short_names.unwrap_or_default(),
            categories: r.categories.unwrap_or_default(),
        });
    }
    for sub in subresources {
        let Some((parent, name)) = sub.name.split_once('/') else {
            continue;
        };
        if let Some(owner) = discovery.resources[first..].iter_mut().find(|r| r.plural == parent) {
            owner.subresources.push(name.to_string());
        }
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use parking_lot::Mutex;
    use std::{collections::BTreeMap, sync::Arc};

    use kube::api::{Preconditions, PropagationPolicy};
    use serde_json::json;

    use super::*;
    use crate::error::Cause;

    /// One request as the fake server saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        path: String,
        query: BTreeMap<String, String>,
        accept: String,
        content_type: String,
        body: serde_json::Value,
    }

    /// A canned answer: status code (0: the connection fails), headers, body.
    type Answer = (u16, Vec<(&'static str, String)>, String);

    type Log = Arc<Mutex<Vec<Seen>>>;

    fn ok(body: serde_json::Value) -> Answer {
        (200, vec![], body.to_string())
    }

    fn status(code: u16, reason: &str, message: &str, details: serde_json::Value) -> Answer {
        let body = json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "code": code, "reason": reason, "message": message, "details": details,
        });
        (code, vec![("content-type", JSON.to_string())], body.to_string())
    }

    fn percent_decode(s: &str) -> String {
        let bytes = s.replace('+', " ").into_bytes();
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            if bytes[i] == b'%' && i + 2 < bytes.len() {
                let hex = std::str::from_utf8(&bytes[i + 1..i + 3]).unwrap();
                out.push(u8::from_str_radix(hex, 16).unwrap());
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).unwrap()
    }

    fn parse_query(query: Option<&str>) -> BTreeMap<String, String> {
        query
            .unwrap_or_default()
            .split('&')
            .filter(|p| !p.is_empty())
            .map(|pair| {
                let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
                (percent_decode(k), percent_decode(v))
            })
            .collect()
    }

    /// A `KubeClusterClient` over an in-process tower service that records each request and
    /// answers it with `answer`.
    fn fake(answer: impl Fn(&Seen) -> Answer + Send + Sync + 'static) -> (KubeClusterClient, Log) {
        let log: Log = Arc::default();
        let record = log.clone();
        let answer = Arc::new(answer);
        let service = tower::service_fn(move |request: http::Request<kube::client::Body>| {
            let record = record.clone();
            let answer = answer.clone();
            async move {
                let (parts, body) = request.into_parts();
                let bytes = body.collect().await?.to_bytes();
                let header = |name| {
                    parts
                        .headers
                        .get(name)
                        .map(|v: &http::HeaderValue| v.to_str().unwrap().to_string())
                        .unwrap_or_default()
                };
                let seen = Seen {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_string(),
                    query: parse_query(parts.uri.query()),
                    accept: header(header::ACCEPT),
                    content_type: header(header::CONTENT_TYPE),
                    body: serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null),
                };
                record.lock().push(seen.clone());
                let (code, headers, body) = answer(&seen);
                if code == 0 {
                    return Err(kube::Error::Service("connection refused".into()));
                }
                let mut response = http::Response::builder().status(code);
                for (name, value) in headers {
                    response = response.header(name, value);
                }
                Ok::<_, kube::Error>(response.body(kube::client::Body::from(body.into_bytes())).unwrap())
            }
        });
        (KubeClusterClient::new(Client::new(service, "default")), log)
    }

    fn seen(log: &Log) -> Vec<Seen> {
        log.lock().clone()
    }

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn configmaps() -> ApiResource {
        ApiResource {
            group: String::new(),
            version: "v1".into(),
            api_version: "v1".into(),
            kind: "ConfigMap".into(),
            plural: "configmaps".into(),
        }
    }

    fn widget_json(name: &str, rv: &str) -> serde_json::Value {
        json!({
            "apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": "ns1", "resourceVersion": rv},
            "spec": {"size": 1},
        })
    }

    fn echo_widget(_: &Seen) -> Answer {
        ok(widget_json("a", "7"))
    }

    #[tokio::test]
    async fn get_addresses_namespaced_cluster_and_core_paths() {
        let (client, log) = fake(echo_widget);
        let obj = client.get(&widgets(), Some("ns1"), "a").await.unwrap();
        assert_eq!(obj.metadata.resource_version.as_deref(), Some("7"));
        assert_eq!(obj.data["spec"]["size"], 1);
        client.get(&widgets(), None, "a").await.unwrap();
        client.get(&configmaps(), Some("ns1"), "a").await.unwrap();
        let paths: Vec<(String, String)> = seen(&log).into_iter().map(|s| (s.method, s.path)).collect();
        assert_eq!(
            paths,
            [
                (
                    "GET".to_string(),
                    "/apis/example.org/v1/namespaces/ns1/widgets/a".to_string()
                ),
                ("GET".to_string(), "/apis/example.org/v1/widgets/a".to_string()),
                ("GET".to_string(), "/api/v1/namespaces/ns1/configmaps/a".to_string()),
            ]
        );
    }

    #[tokio::test]
    async fn list_sends_selectors_paging_and_resource_version() {
        let (client, log) = fake(|_| {
            ok(json!({
                "apiVersion": "example.org/v1", "kind": "WidgetList",
                "metadata": {"resourceVersion": "12", "continue": "c2"},
                "items": [widget_json("a", "3"), widget_json("b", "4")],
            }))
        });
        let params = ListParams::default()
            .labels("app=web,tier!=db")
            .fields("metadata.name=a")
            .limit(2)
            .continue_token("c1");
        let list = client.list(&widgets(), Some("ns1"), &params).await.unwrap();
        assert_eq!(list.metadata.resource_version.as_deref(), Some("12"));
        assert_eq!(list.metadata.continue_.as_deref(), Some("c2"));
        assert_eq!(list.items.len(), 2);
        client
            .list(&widgets(), None, &ListParams::default().match_any())
            .await
            .unwrap();
        let requests = seen(&log);
        assert_eq!(requests[0].path, "/apis/example.org/v1/namespaces/ns1/widgets");
        let expected: BTreeMap<String, String> = [
            ("labelSelector", "app=web,tier!=db"),
            ("fieldSelector", "metadata.name=a"),
            ("limit", "2"),
            ("continue", "c1"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        assert_eq!(requests[0].query, expected);
        assert_eq!(requests[1].path, "/apis/example.org/v1/widgets");
        assert_eq!(requests[1].query.get("resourceVersion").map(String::as_str), Some("0"));
        assert_eq!(
            requests[1].query.get("resourceVersionMatch").map(String::as_str),
            Some("NotOlderThan")
        );
    }

    #[tokio::test]
    async fn watch_sends_watch_params_and_maps_events_and_gone() {
        let lines = [
            json!({"type": "ADDED", "object": widget_json("a", "6")}),
            json!({"type": "MODIFIED", "object": widget_json("a", "7")}),
            json!({"type": "BOOKMARK", "object": {"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"resourceVersion": "9"}}}),
            json!({"type": "DELETED", "object": widget_json("a", "10")}),
            json!({"type": "ERROR", "object": {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                "code": 410, "reason": "Expired", "message": "too old resource version: 5 (11)"}}),
        ];
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        let (client, log) = fake(move |_| (200, vec![], body.clone()));
        let params = WatchParams::default().labels("app=web").timeout(120);
        let stream = client.watch(&widgets(), Some("ns1"), &params, "5").await.unwrap();
        let items: Vec<_> = stream.collect().await;
        assert_eq!(items.len(), 5);
        assert!(matches!(&items[0], Ok(WatchEvent::Added(o)) if o.metadata.resource_version.as_deref() == Some("6")));
        assert!(matches!(&items[1], Ok(WatchEvent::Modified(_))));
        assert!(matches!(&items[2], Ok(WatchEvent::Bookmark(b)) if b.metadata.resource_version == "9"));
        assert!(matches!(&items[3], Ok(WatchEvent::Deleted(_))));
        assert!(matches!(&items[4], Err(Error::Gone { message }) if message.contains("too old")));
        let request = &seen(&log)[0];
        assert_eq!(request.path, "/apis/example.org/v1/namespaces/ns1/widgets");
        for (k, v) in [
            ("watch", "true"),
            ("resourceVersion", "5"),
            ("allowWatchBookmarks", "true"),
            ("timeoutSeconds", "120"),
            ("labelSelector", "app=web"),
        ] {
            assert_eq!(
                request.query.get(k).map(String::as_str),
                Some(v),
                "{k} in {:?}",
                request.query
            );
        }
    }

    #[tokio::test]
    async fn create_and_replace_send_the_object_with_dry_run_and_field_manager() {
        let (client, log) = fake(echo_widget);
        let obj: DynamicObject = serde_json::from_value(widget_json("a", "")).unwrap();
        let params = PostParams {
            dry_run: true,
            field_manager: Some("kbind".into()),
        };
        client.create(&widgets(), Some("ns1"), &obj, &params).await.unwrap();
        client
            .replace(&widgets(), Some("ns1"), "a", &obj, &PostParams::default())
            .await
            .unwrap();
        client
            .replace_status(&widgets(), Some("ns1"), "a", &obj, &PostParams::default())
            .await
            .unwrap();
        let requests = seen(&log);
        let shape: Vec<(&str, &str)> = requests.iter().map(|s| (s.method.as_str(), s.path.as_str())).collect();
        assert_eq!(
            shape,
            [
                ("POST", "/apis/example.org/v1/namespaces/ns1/widgets"),
                ("PUT", "/apis/example.org/v1/namespaces/ns1/widgets/a"),
                ("PUT", "/apis/example.org/v1/namespaces/ns1/widgets/a/status"),
            ]
        );
        assert_eq!(requests[0].query.get("dryRun").map(String::as_str), Some("All"));
        assert_eq!(requests[0].query.get("fieldManager").map(String::as_str), Some("kbind"));
        assert!(requests[1].query.is_empty(), "{:?}", requests[1].query);
        for request in &requests {
            assert_eq!(request.content_type, JSON);
            assert_eq!(request.body["metadata"]["name"], "a");
            assert_eq!(request.body["spec"]["size"], 1);
        }
    }

    #[tokio::test]
    async fn patches_send_content_type_field_manager_and_force() {
        let (client, log) = fake(echo_widget);
        let apply = Patch::Apply(json!({"apiVersion": "example.org/v1", "kind": "Widget", "spec": {"size": 2}}));
        client
            .patch(
                &widgets(),
                Some("ns1"),
                "a",
                &apply,
                &PatchParams::apply("kbind").force(),
            )
            .await
            .unwrap();
        let merge = Patch::Merge(json!({"status": {"ready": true}}));
        client
            .patch_status(&widgets(), None, "a", &merge, &PatchParams::default().dry_run())
            .await
            .unwrap();
        let requests = seen(&log);
        assert_eq!(requests[0].method, "PATCH");
        assert_eq!(requests[0].path, "/apis/example.org/v1/namespaces/ns1/widgets/a");
        assert_eq!(requests[0].content_type, "application/apply-patch+yaml");
        assert_eq!(requests[0].query.get("fieldManager").map(String::as_str), Some("kbind"));
        assert_eq!(requests[0].query.get("force").map(String::as_str), Some("true"));
        assert_eq!(requests[0].body["spec"]["size"], 2);
        assert_eq!(requests[1].path, "/apis/example.org/v1/widgets/a/status");
        assert_eq!(requests[1].content_type, "application/merge-patch+json");
        assert_eq!(requests[1].query.get("dryRun").map(String::as_str), Some("All"));
        assert!(!requests[1].query.contains_key("force"));
    }

    #[tokio::test]
    async fn malformed_requests_are_refused_before_sending() {
        let (client, log) = fake(echo_widget);
        let merge = Patch::Merge(json!({"spec": {}}));
        let forced = PatchParams {
            force: true,
            ..PatchParams::default()
        };
        let err = client
            .patch(&widgets(), Some("ns1"), "a", &merge, &forced)
            .await
            .unwrap_err();
        assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");
        let err = client.get(&widgets(), Some("ns1"), "").await.unwrap_err();
        assert!(matches!(err, Error::BadRequest { .. }), "{err:?}");
        assert!(seen(&log).is_empty());
    }

    #[tokio::test]
    async fn delete_sends_options_and_returns_the_object_until_it_is_gone() {
        let (client, log) = fake(|s: &Seen| {
            if s.body["preconditions"]["resourceVersion"] == "7" {
                let mut obj = widget_json("a", "8");
                obj["metadata"]["finalizers"] = json!(["example.org/cleanup"]);
                obj["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
                ok(obj)
            } else {
                ok(
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success",
                    "details": {"name": "a", "group": "example.org", "kind": "widgets", "uid": "u-1"}}),
                )
            }
        });
        let params = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Foreground),
            preconditions: Some(Preconditions {
                uid: Some("u-1".into()),
                resource_version: Some("7".into()),
            }),
            dry_run: true,
            ..DeleteParams::default()
        };
        let held = client.delete(&widgets(), Some("ns1"), "a", &params).await.unwrap();
        assert_eq!(
            held.and_then(|o| o.metadata.finalizers),
            Some(vec!["example.org/cleanup".to_string()])
        );
        let gone = client
            .delete(&widgets(), Some("ns1"), "a", &DeleteParams::background())
            .await
            .unwrap();
        assert!(gone.is_none());
        let requests = seen(&log);
        assert_eq!(requests[0].method, "DELETE");
        assert_eq!(requests[0].path, "/apis/example.org/v1/namespaces/ns1/widgets/a");
        assert_eq!(
            requests[0].body["preconditions"],
            json!({"uid": "u-1", "resourceVersion": "7"})
        );
        assert_eq!(requests[0].body["propagationPolicy"], "Foreground");
        assert_eq!(requests[0].body["dryRun"], json!(["All"]));
        assert_eq!(requests[1].body["propagationPolicy"], "Background");
    }

    #[tokio::test]
    async fn create_subresource_posts_a_token_request() {
        let (client, log) = fake(|s: &Seen| {
            let mut answer = s.body.clone();
            answer["status"] = json!({"token": "t0k3n", "expirationTimestamp": "2026-01-01T01:00:00Z"});
            ok(answer)
        });
        let serviceaccounts = ApiResource {
            kind: "ServiceAccount".into(),
            plural: "serviceaccounts".into(),
            ..configmaps()
        };
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": ["https://kbind.io"], "expirationSeconds": 3600}});
        let answer = client
            .create_subresource(&serviceaccounts, Some("ns1"), "konnector", "token", &request)
            .await
            .unwrap();
        assert_eq!(answer["status"]["token"], "t0k3n");
        let sent = &seen(&log)[0];
        assert_eq!(
            (sent.method.as_str(), sent.path.as_str()),
            ("POST", "/api/v1/namespaces/ns1/serviceaccounts/konnector/token")
        );
        assert_eq!(sent.body["spec"]["expirationSeconds"], 3600);
    }

    fn aggregated(kind_of_answer: &Seen) -> Answer {
        let resource = |plural: &str, kind: &str, group: &str, scope: &str| {
            json!({"resource": plural, "responseKind": {"group": group, "version": "v1", "kind": kind},
                "scope": scope, "singularResource": kind.to_lowercase(), "verbs": ["get", "list", "watch", "create"]})
        };
        match kind_of_answer.path.as_str() {
            "/api" => {
                let mut cm = resource("configmaps", "ConfigMap", "", "Namespaced");
                cm["shortNames"] = json!(["cm"]);
                ok(
                    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
                    "items": [{"metadata": {}, "versions": [{"version": "v1", "resources": [cm]}]}]}),
                )
            }
            _ => {
                let mut w1 = resource("widgets", "Widget", "example.org", "Namespaced");
                w1["categories"] = json!(["all"]);
                w1["subresources"] = json!([{"subresource": "status", "verbs": ["get", "patch", "update"]}]);
                let mut w0 = resource("widgets", "Widget", "example.org", "Namespaced");
                w0["responseKind"]["version"] = json!("v1beta1");
                let gadgets = resource("gadgets", "Gadget", "example.org", "Cluster");
                ok(
                    json!({"kind": "APIGroupDiscoveryList", "apiVersion": "apidiscovery.k8s.io/v2", "metadata": {},
                    "items": [{"metadata": {"name": "example.org"}, "versions": [
                        {"version": "v1", "resources": [w1, gadgets]},
                        {"version": "v1beta1", "resources": [w0], "freshness": "Stale"},
                    ]}]}),
                )
            }
        }
    }

    #[tokio::test]
    async fn discovery_reads_the_aggregated_documents() {
        let (client, log) = fake(aggregated);
        let discovery = client.discovery().await.unwrap();
        let requests = seen(&log);
        assert_eq!(
            requests.iter().map(|s| s.path.as_str()).collect::<Vec<_>>(),
            ["/api", "/apis"]
        );
        assert!(
            requests[0]
                .accept
                .contains("g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList")
        );
        assert_eq!(
            discovery.groups,
            [
                ApiGroupInfo {
                    name: String::new(),
                    versions: vec!["v1".into()],
                    preferred_version: "v1".into()
                },
                ApiGroupInfo {
                    name: "example.org".into(),
                    versions: vec!["v1".into(), "v1beta1".into()],
                    preferred_version: "v1".into()
                },
            ]
        );
        let cm = discovery.find("", "configmaps").unwrap();
        assert_eq!((cm.kind.as_str(), cm.namespaced), ("ConfigMap", true));
        assert_eq!(cm.short_names, ["cm"]);
        let widget = discovery.find("example.org", "widgets").unwrap();
        assert_eq!(widget.version, "v1");
        assert!(widget.has_status());
        assert_eq!(widget.categories, ["all"]);
        assert_eq!(widget.singular, "widget");
        assert_eq!(widget.verbs, ["get", "list", "watch", "create"]);
        assert!(
            !discovery
                .find_version("example.org", "v1beta1", "widgets")
                .unwrap()
                .has_status()
        );
        assert!(!discovery.find("example.org", "gadgets").unwrap().namespaced);
        assert_eq!(
            discovery.unavailable,
            ["example.org/v1beta1"],
            "a stale group-version makes it partial"
        );
    }

    fn legacy(request: &Seen) -> Answer {
        let resource = |name: &str, kind: &str, namespaced: bool| json!({"name": name, "singularName": "", "namespaced": namespaced, "kind": kind, "verbs": ["get", "list"]});
        match request.path.as_str() {
            "/api" => ok(json!({"kind": "APIVersions", "versions": ["v1"], "serverAddressByClientCIDRs": []})),
            "/api/v1" => {
                let mut pods = resource("pods", "Pod", true);
                pods["shortNames"] = json!(["po"]);
                pods["categories"] = json!(["all"]);
                ok(json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
                    pods, resource("pods/status", "Pod", true), resource("namespaces", "Namespace", false)]}))
            }
            "/apis" => ok(json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": [{
                "name": "example.org",
                "versions": [{"groupVersion": "example.org/v1beta1", "version": "v1beta1"},
                             {"groupVersion": "example.org/v1", "version": "v1"}],
                "preferredVersion": {"groupVersion": "example.org/v1", "version": "v1"}}]})),
            "/apis/example.org/v1" => ok(json!({"kind": "APIResourceList", "groupVersion": "example.org/v1",
                "resources": [resource("widgets", "Widget", true), resource("widgets/status", "Widget", true)]})),
            _ => (503, vec![], "service unavailable".into()),
        }
    }

    #[tokio::test]
    async fn discovery_falls_back_to_legacy_documents_and_skips_unavailable_versions() {
        let (client, log) = fake(legacy);
        let discovery = client.discovery().await.unwrap();
        let paths: Vec<String> = seen(&log).into_iter().map(|s| s.path).collect();
        assert_eq!(
            paths,
            [
                "/api",
                "/api/v1",
                "/apis",
                "/apis/example.org/v1beta1",
                "/apis/example.org/v1"
            ]
        );
        let pods = discovery.find("", "pods").unwrap();
        assert_eq!(pods.subresources, ["status"]);
        assert_eq!(
            (pods.short_names.clone(), pods.categories.clone()),
            (vec!["po".to_string()], vec!["all".to_string()])
        );
        assert!(!discovery.find("", "namespaces").unwrap().namespaced);
        assert!(discovery.find("", "pods/status").is_none());
        let widgets = discovery.find("example.org", "widgets").unwrap();
        assert_eq!(widgets.version, "v1");
        assert!(widgets.has_status());
        assert_eq!(discovery.groups[1].preferred_version, "v1");
        assert_eq!(discovery.groups[1].versions, ["v1beta1", "v1"]);
        assert_eq!(
            discovery.unavailable,
            ["example.org/v1beta1"],
            "the skipped version is reported"
        );
        assert!(!discovery.is_complete());
    }

    #[tokio::test]
    async fn openapi_v3_reads_the_group_version_document() {
        let (client, log) = fake(|s: &Seen| ok(json!({"openapi": "3.0.0", "info": {"title": s.path}})));
        let core = client.openapi_v3("", "v1").await.unwrap();
        let group = client.openapi_v3("example.org", "v1").await.unwrap();
        assert_eq!(core["info"]["title"], "/openapi/v3/api/v1");
        assert_eq!(group["info"]["title"], "/openapi/v3/apis/example.org/v1");
        assert!(seen(&log).iter().all(|s| s.method == "GET" && s.accept == JSON));
    }

    async fn error_for(answer: Answer) -> Error {
        let (client, _) = fake(move |_| answer.clone());
        client.get(&widgets(), Some("ns1"), "a").await.unwrap_err()
    }

    #[tokio::test]
    async fn error_answers_map_to_typed_errors() {
        let not_found = error_for(status(
            404,
            "NotFound",
            "widgets.example.org \"a\" not found",
            json!({}),
        ))
        .await;
        assert!(matches!(&not_found, Error::NotFound { message } if message == "widgets.example.org \"a\" not found"));

        let exists = error_for(status(
            409,
            "AlreadyExists",
            "widgets.example.org \"a\" already exists",
            json!({}),
        ))
        .await;
        assert!(matches!(exists, Error::AlreadyExists { .. }), "{exists:?}");

        let conflict = error_for(status(
            409,
            "Conflict",
            "Apply failed with 1 conflict",
            json!({"causes": [
            {"reason": "FieldManagerConflict", "message": "conflict with \"other\"", "field": ".spec.size"}]}),
        ))
        .await;
        assert!(
            matches!(&conflict, Error::Conflict { causes, .. } if causes.len() == 1 && causes[0].field == ".spec.size"),
            "{conflict:?}"
        );

        let forbidden = error_for(status(
            403,
            "Forbidden",
            "widgets.example.org \"a\" is forbidden: User \"bob\" cannot get resource \"widgets\" in API group \"example.org\" in the namespace \"ns1\"",
            json!({"name": "a", "group": "example.org", "kind": "widgets"}),
        ))
        .await;
        assert!(
            matches!(&forbidden, Error::Forbidden { verb, resource, .. } if verb == "get" && resource == "widgets.example.org"),
            "{forbidden:?}"
        );

        let gone = error_for(status(410, "Expired", "too old resource version: 1 (5)", json!({}))).await;
        assert!(gone.is_gone(), "{gone:?}");

        let invalid = error_for(status(
            422,
            "Invalid",
            "Widget.example.org \"a\" is invalid: spec.size: Invalid value",
            json!({
            "name": "a", "group": "example.org", "kind": "Widget",
            "causes": [{"reason": "FieldValueInvalid", "message": "Invalid value: -1", "field": "spec.size"}]}),
        ))
        .await;
        let Error::Invalid { causes, .. } = &invalid else {
            panic!("{invalid:?}")
        };
        assert_eq!(
            causes,
            &[Cause {
                reason: "FieldValueInvalid".into(),
                message: "Invalid value: -1".into(),
                field: "spec.size".into()
            }]
        );

        let unauthorized = error_for(status(401, "Unauthorized", "Unauthorized", json!({}))).await;
        assert!(matches!(unauthorized, Error::Unauthorized { .. }), "{unauthorized:?}");
    }

    #[tokio::test]
    async fn too_many_requests_takes_its_delay_from_retry_after_or_details() {
        // Priority and fairness answers plain text and puts the delay only in the header.
        let throttled = error_for((
            429,
            vec![("retry-after", "7".into()), ("content-type", "text/plain".into())],
            "Too many requests, please try again later.\n".into(),
        ))
        .await;
        assert!(
            matches!(&throttled, Error::TooManyRequests { retry_after_seconds: Some(7), message } if message == "Too many requests, please try again later."),
            "{throttled:?}"
        );
        assert!(throttled.is_transient());

        let mut with_details = status(429, "TooManyRequests", "slow down", json!({"retryAfterSeconds": 3}));
        with_details.1.push(("retry-after", "3".into()));
        let detailed = error_for(with_details).await;
        assert!(
            matches!(
                detailed,
                Error::TooManyRequests {
                    retry_after_seconds: Some(3),
                    ..
                }
            ),
            "{detailed:?}"
        );
    }

    #[tokio::test]
    async fn plain_server_failures_and_broken_connections_are_typed() {
        let unavailable = error_for((503, vec![], "upstream connect error".into())).await;
        assert!(
            matches!(&unavailable, Error::Server { code: 503, reason, message } if message == "upstream connect error" && reason == "ServiceUnavailable"),
            "{unavailable:?}"
        );
        assert!(unavailable.is_transient());
        let refused = error_for((0, vec![], String::new())).await;
        assert!(
            matches!(&refused, Error::Transport(text) if text.contains("connection refused")),
            "{refused:?}"
        );
        let garbage = error_for((200, vec![], "{not json".into())).await;
        assert!(matches!(garbage, Error::Decode(_)), "{garbage:?}");
    }

    #[tokio::test]
    async fn debug_output_reveals_nothing_of_the_client() {
        let rendered = format!(
            "{:?}",
            KubeClusterClient::new(Client::new(
                tower::service_fn(|_: http::Request<kube::client::Body>| async {
                    Err::<http::Response<kube::client::Body>, kube::Error>(kube::Error::Service("unused".into()))
                }),
                "default",
            ))
        );
        assert_eq!(rendered, "KubeClusterClient { .. }");
    }
}
