//! Requests under `/api` and `/apis`: the discovery documents there, and get, list, watch,
//! create, update, patch, delete and deletecollection on resources and their subresources.

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use kbind_cluster::{ApiResource, DeleteParams, Error, Patch, Result};
use serde_json::{Value, json};

use super::errors::{ApiError, Subject, UNKNOWN_RESOURCE};
use super::media::{self, Answer};
use super::paths::{self, ResourcePath, Target};
use super::query::{self, Query};
use super::table::{self, TableOptions};
use super::{auth, discovery, json_body, json_with_type, protobuf, watch};
use crate::rbac::UserInfo;
use crate::registry::ResourceInfo;
use crate::{Caller, FakeCluster, Subresource};

/// The largest request body kube-apiserver accepts (3 MiB).
const MAX_BODY: usize = 3 * 1024 * 1024;

/// Serves every request under `/api` and `/apis` (and answers 404 elsewhere).
pub(crate) async fn serve(State(cluster): State<FakeCluster>, request: Request) -> Response {
    let (parts, body) = request.into_parts();
    let user = parts
        .extensions
        .get::<UserInfo>()
        .cloned()
        .unwrap_or_else(auth::anonymous);
    let caller = auth::caller(&parts.headers, user);
    let result = match paths::parse(parts.uri.path()) {
        Target::Resource(path) => resource(&cluster, &caller, &parts, body, path).await,
        Target::Unknown => Err(not_found()),
        target => discovery_document(&cluster, &caller, &parts, target).await,
    };
    result.unwrap_or_else(|e| e.into_response_as(status_in_protobuf(&parts.headers)))
}

/// Whether an error Status is written in protobuf: kube-apiserver can always encode a Status,
/// so it does whenever plain protobuf comes first in the Accept header, whatever the resource.
fn status_in_protobuf(headers: &HeaderMap) -> bool {
    media::negotiate_for(headers, true) == Answer::Protobuf
}

fn not_found() -> ApiError {
    ApiError::from(Error::NotFound {
        message: UNKNOWN_RESOURCE.into(),
    })
}

fn method_not_allowed() -> Error {
    Error::MethodNotAllowed {
        message: "the server does not allow this method on the requested resource".into(),
    }
}

fn not_acceptable() -> Error {
    Error::Server {
        code: 406,
        reason: "NotAcceptable".into(),
        message: "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf".into(),
    }
}

async fn discovery_document(
    cluster: &FakeCluster,
    caller: &Caller,
    parts: &Parts,
    target: Target,
) -> Result<Response, ApiError> {
    if parts.method != Method::GET {
        return Err(method_not_allowed().into());
    }
    cluster.authorize_path(&caller.user, "get", parts.uri.path())?;
    let found = cluster.discovery(caller).await?;
    let answer = media::negotiate(&parts.headers);
    if answer == Answer::NotAcceptable {
        return Err(not_acceptable().into());
    }
    let aggregated = match &answer {
        Answer::AggregatedDiscovery(v) => Some(v.as_str()),
        _ => None,
    };
    let response = match (target, aggregated) {
        (Target::CoreVersions, Some(v)) => aggregated_response(&discovery::aggregated(&found, true, v), v),
        (Target::Groups, Some(v)) => aggregated_response(&discovery::aggregated(&found, false, v), v),
        (Target::CoreVersions, None) => {
            let host = parts
                .headers
                .get(header::HOST)
                .and_then(|h| h.to_str().ok())
                .unwrap_or("127.0.0.1");
            json_body(&discovery::core_versions(&found, host))
        }
        (Target::Groups, None) => json_body(&discovery::group_list(&found)),
        (Target::Group(name), _) => json_body(&discovery::group(&found, &name)?),
        (Target::Resources { group, version }, _) => {
            let group_version = if group.is_empty() {
                version.clone()
            } else {
                format!("{group}/{version}")
            };
            if found.unavailable.contains(&group_version) {
                return Err(Error::Server {
                    code: 503,
                    reason: "ServiceUnavailable".into(),
                    message: format!("the server is currently unable to handle the request ({group_version})"),
                }
                .into());
            }
            json_body(&discovery::resource_list(&found, &group, &version)?)
        }
        (Target::Resource(_) | Target::Unknown, _) => return Err(not_found()),
    };
    Ok(response)
}

fn aggregated_response(value: &Value, version: &str) -> Response {
    json_with_type(value, &discovery::aggregated_content_type(version))
}

/// One resource request, resolved.
struct ResourceRequest<'a> {
    cluster: &'a FakeCluster,
    caller: &'a Caller,
    info: ResourceInfo,
    res: ApiResource,
    path: ResourcePath,
    query: Query,
    headers: &'a HeaderMap,
    /// Whether answers may be protobuf (a built-in kind kube-apiserver has messages for).
    protobuf: bool,
}

async fn resource(
    cluster: &FakeCluster,
    caller: &Caller,
    parts: &Parts,
    body: Body,
    path: ResourcePath,
) -> Result<Response, ApiError> {
    let query = Query::parse(parts.uri.query())?;
    let info = cluster
        .resource_info(&path.group, &path.version, &path.plural)
        .ok_or_else(not_found)?;
    let subject = Subject {
        name: path.name.clone().unwrap_or_default(),
        group: path.group.clone(),
        plural: path.plural.clone(),
        kind: info.resource.kind.clone(),
    };
    let protobuf = !info.is_custom() && protobuf::encodes(&info.api_version(), &info.resource.kind);
    let req = ResourceRequest {
        cluster,
        caller,
        res: info.resource.api_resource(),
        info,
        path,
        query,
        headers: &parts.headers,
        protobuf,
    };
    req.dispatch(&parts.method, body)
        .await
        .map_err(|e| ApiError::from(e).about(Some(subject)))
}

impl ResourceRequest<'_> {
    fn namespace(&self) -> Option<&str> {
        self.path.namespace.as_deref()
    }

    async fn dispatch(&self, method: &Method, body: Body) -> Result<Response> {
        let name = self.path.name.clone();
        let sub = self.path.subresource.clone();
        match (method, name.as_deref(), sub.as_deref()) {
            (&Method::GET, None, None) if self.query.watch || self.path.watch_prefix => self.watch(None).await,
            (&Method::GET, None, None) => self.list().await,
            (&Method::GET, Some(name), None) if self.path.watch_prefix => self.watch(Some(name)).await,
            (&Method::GET, Some(name), None) => self.get(name).await,
            (&Method::GET, Some(name), Some("status")) if self.info.has_status() => self.get_status(name).await,
            (&Method::POST, None, None) => self.create(read(body).await?).await,
            (&Method::POST, Some(name), Some(sub)) => self.create_subresource(name, sub, read(body).await?).await,
            (&Method::PUT, Some(name), None) => self.update(name, Subresource::Main, read(body).await?).await,
            (&Method::PUT, Some(name), Some("status")) if self.info.has_status() => {
                self.update(name, Subresource::Status, read(body).await?).await
            }
            (&Method::PATCH, Some(name), None) => self.patch(name, Subresource::Main, read(body).await?).await,
            (&Method::PATCH, Some(name), Some("status")) if self.info.has_status() => {
                self.patch(name, Subresource::Status, read(body).await?).await
            }
            (&Method::DELETE, Some(name), None) => self.delete(name, read(body).await?).await,
            (&Method::DELETE, None, None) => self.delete_collection(read(body).await?).await,
            (_, _, Some(sub)) if !self.info.resource.subresources.iter().any(|s| s == sub) => Err(Error::NotFound {
                message: UNKNOWN_RESOURCE.into(),
            }),
            _ => Err(method_not_allowed()),
        }
    }

    /// How reads are answered: JSON, protobuf, or a Table of this `meta.k8s.io` version.
    fn read_answer(&self) -> Result<Answer> {
        match media::negotiate_for(self.headers, self.protobuf) {
            Answer::NotAcceptable => Err(not_acceptable()),
            Answer::AggregatedDiscovery(_) => Ok(Answer::Json),
            answer => Ok(answer),
        }
    }

    /// An object (or list, or Status) in the format the client asked for (Tables aside: a
    /// write answers with the object, as JSON when a Table was asked).
    fn body(&self, code: StatusCode, value: &Value) -> Result<Response> {
        if self.read_answer()? != Answer::Protobuf {
            return Ok((code, json_body(value)).into_response());
        }
        let bytes = protobuf::encode(value)?;
        Ok((code, [(header::CONTENT_TYPE, protobuf::MEDIA_TYPE)], bytes).into_response())
    }

    fn table(&self, version: &str, objects: &[Value], list_meta: Value) -> Response {
        let options = TableOptions {
            info: &self.info,
            now: self.cluster.now(),
            include: self.query.include_object,
            version,
        };
        let content_type = format!("application/json;as=Table;v={version};g=meta.k8s.io");
        json_with_type(&table::table(&options, objects, list_meta), &content_type)
    }

    async fn get(&self, name: &str) -> Result<Response> {
        let answer = self.read_answer()?;
        let obj = self.cluster.get(self.caller, &self.res, self.namespace(), name).await?;
        match answer {
            Answer::Table(version) => {
                let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")});
                Ok(self.table(&version, std::slice::from_ref(&obj), meta))
            }
            _ => self.body(StatusCode::OK, &obj),
        }
    }

    async fn get_status(&self, name: &str) -> Result<Response> {
        self.read_answer()?;
        self.cluster
            .admit(self.caller, "get", &self.res, self.namespace(), Some(name), "status")
            .await?;
        let obj = self
            .cluster
            .peek(&self.info, self.namespace(), name)
            .ok_or_else(|| Error::not_found(&self.info.group_resource().qualified(), name))?;
        self.body(StatusCode::OK, &obj)
    }

    async fn list(&self) -> Result<Response> {
        let answer = self.read_answer()?;
        let list = self
            .cluster
            .list(self.caller, &self.res, self.namespace(), &self.query.list_params())
            .await?;
        match answer {
            Answer::Table(version) => {
                let items = list.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
                let meta = list.get("metadata").cloned().unwrap_or_else(|| json!({}));
                Ok(self.table(&version, &items, meta))
            }
            _ => self.body(StatusCode::OK, &list),
        }
    }

    async fn watch(&self, name: Option<&str>) -> Result<Response> {
        let answer = self.read_answer()?;
        self.query.check_watch_list()?;
        let mut params = self.query.watch_params();
        if let Some(name) = name {
            let pinned = format!("metadata.name={name}");
            params.field_selector = Some(match params.field_selector.take() {
                Some(other) => format!("{other},{pinned}"),
                None => pinned,
            });
        }
        let rv = self.query.resource_version.clone().unwrap_or_default();
        let events = self
            .cluster
            .watch(self.caller, &self.res, self.namespace(), &params, &rv)
            .await?;
        let transform: watch::Transform = match &answer {
            Answer::Table(version) => {
                let version = version.clone();
                let (cluster, info, include) = (self.cluster.clone(), self.info.clone(), self.query.include_object);
                Box::new(move |obj| {
                    let options = TableOptions {
                        info: &info,
                        now: cluster.now(),
                        include,
                        version: &version,
                    };
                    let meta = json!({"resourceVersion": obj.pointer("/metadata/resourceVersion")});
                    table::table(&options, std::slice::from_ref(&obj), meta)
                })
            }
            _ => Box::new(|o| o),
        };
        Ok(watch::response(events, transform, answer == Answer::Protobuf))
    }

    async fn create(&self, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let obj = decode_object(self.headers, &body, self.protobuf)?;
        self.check_kind(&obj)?;
        let created = self
            .cluster
            .create(self.caller, &self.res, self.namespace(), obj, &self.query.post_params())
            .await?;
        self.body(StatusCode::CREATED, &created)
    }

    async fn create_subresource(&self, name: &str, sub: &str, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let obj = decode_object(self.headers, &body, self.protobuf)?;
        let answer = self
            .cluster
            .create_subresource(self.caller, &self.res, self.namespace(), name, sub, &obj)
            .await?;
        self.body(StatusCode::CREATED, &answer)
    }

    async fn update(&self, name: &str, sub: Subresource, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let obj = decode_object(self.headers, &body, self.protobuf)?;
        self.check_kind(&obj)?;
        let updated = self
            .cluster
            .update(
                self.caller,
                &self.res,
                self.namespace(),
                name,
                obj,
                &self.query.post_params(),
                sub,
            )
            .await?;
        self.body(StatusCode::OK, &updated)
    }

    async fn patch(&self, name: &str, sub: Subresource, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let patch = decode_patch(self.headers, &body)?;
        let creates = matches!(patch, Patch::Apply(_))
            && sub == Subresource::Main
            && self.cluster.peek(&self.info, self.namespace(), name).is_none();
        let patched = self
            .cluster
            .patch(
                self.caller,
                &self.res,
                self.namespace(),
                name,
                &patch,
                &self.query.patch_params(),
                sub,
            )
            .await?;
        let code = if creates { StatusCode::CREATED } else { StatusCode::OK };
        self.body(code, &patched)
    }

    async fn delete(&self, name: &str, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let params = delete_params(self.headers, &self.query, &body)?;
        let before = self.cluster.peek(&self.info, self.namespace(), name);
        let outcome = self
            .cluster
            .delete(self.caller, &self.res, self.namespace(), name, &params)
            .await?;
        match (outcome, before) {
            (Some(obj), _) => self.body(StatusCode::OK, &obj),
            // Stores with `ReturnDeletedObject` answer with the object even once it is gone.
            (None, Some(obj)) if returns_deleted_object(&self.info) => self.body(StatusCode::OK, &obj),
            (None, before) => {
                let (name, uid) = before.as_ref().map(super::name_and_uid).unwrap_or_default();
                self.body(StatusCode::OK, &json!({
                    "kind": "Status",
                    "apiVersion": "v1",
                    "metadata": {},
                    "status": "Success",
                    "details": {"name": name, "group": self.info.resource.group, "kind": self.info.resource.plural, "uid": uid},
                }))
            }
        }
    }

    /// Deletes every object a list with the request's selectors returns, answering with them.
    async fn delete_collection(&self, body: Bytes) -> Result<Response> {
        self.read_answer()?;
        let params = delete_params(self.headers, &self.query, &body)?;
        let mut list_params = self.query.list_params();
        list_params.limit = None;
        list_params.continue_token = None;
        let mut list = self
            .cluster
            .list(self.caller, &self.res, self.namespace(), &list_params)
            .await?;
        let items = list.get("items").and_then(Value::as_array).cloned().unwrap_or_default();
        let mut deleted = Vec::with_capacity(items.len());
        for item in items {
            let (name, _) = super::name_and_uid(&item);
            let ns = item.pointer("/metadata/namespace").and_then(Value::as_str);
            match self.cluster.delete(self.caller, &self.res, ns, &name, &params).await {
                Ok(outcome) => deleted.push(outcome.unwrap_or(item)),
                // Deleted meanwhile: the collection delete still succeeds, as upstream.
                Err(e) if e.is_not_found() => {}
                Err(e) => return Err(e),
            }
        }
        list["items"] = Value::Array(deleted);
        self.body(StatusCode::OK, &list)
    }

    /// A body whose `kind` names another kind is refused, as the apiserver's decoder does.
    fn check_kind(&self, obj: &Value) -> Result<()> {
        match obj.get("kind").and_then(Value::as_str) {
            Some(kind) if kind != self.info.resource.kind => Err(Error::BadRequest {
                message: format!(
                    "the kind in the data ({kind}) does not match the expected kind ({})",
                    self.info.resource.kind
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// Whether kube-apiserver's store for this resource answers a finished delete with the object.
fn returns_deleted_object(info: &ResourceInfo) -> bool {
    !info.is_custom() && info.resource.group.is_empty() && info.resource.plural == "serviceaccounts"
}

async fn read(body: Body) -> Result<Bytes> {
    to_bytes(body, MAX_BODY).await.map_err(|_| Error::Server {
        code: 413,
        reason: "RequestEntityTooLarge".into(),
        message: "the request body is too large".into(),
    })
}

/// The `type/subtype` of the request's `Content-Type`, lower-cased.
fn content_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .map(|v| v.trim().to_ascii_lowercase())
        .unwrap_or_default()
}

fn unsupported_media_type(accepted: &str) -> Error {
    Error::Server {
        code: 415,
        reason: "UnsupportedMediaType".into(),
        message: format!("the body of the request was in an unknown format - accepted media types include: {accepted}"),
    }
}

/// An object body in JSON, YAML or (for built-in kinds, when `protobuf`) protobuf.
fn decode_object(headers: &HeaderMap, body: &[u8], protobuf: bool) -> Result<Value> {
    match content_type(headers).as_str() {
        "" | "application/json" => json(body),
        "application/yaml" => yaml(body),
        protobuf::MEDIA_TYPE if protobuf => protobuf::decode(body),
        // kube-apiserver has no protobuf for custom resources.
        protobuf::MEDIA_TYPE => Err(unsupported_media_type("application/json, application/yaml")),
        _ => Err(unsupported_media_type(
            "application/json, application/yaml, application/vnd.kubernetes.protobuf",
        )),
    }
}

/// A patch by its content type: JSON patch, merge patch, strategic merge patch or apply (YAML).
fn decode_patch(headers: &HeaderMap, body: &[u8]) -> Result<Patch<Value>> {
    match content_type(headers).as_str() {
        "application/json-patch+json" => {
            let ops: json_patch::Patch = serde_json::from_slice(body).map_err(|e| Error::BadRequest {
                message: format!("error decoding patch: {e}"),
            })?;
            Ok(Patch::Json(ops))
        }
        "application/merge-patch+json" => Ok(Patch::Merge(json(body)?)),
        "application/strategic-merge-patch+json" => Ok(Patch::Strategic(json(body)?)),
        "application/apply-patch+yaml" => Ok(Patch::Apply(yaml(body)?)),
        _ => Err(unsupported_media_type(
            "application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml, application/strategic-merge-patch+json",
        )),
    }
}

fn json(body: &[u8]) -> Result<Value> {
    serde_json::from_slice(body).map_err(|e| Error::BadRequest {
        message: format!("couldn't get version/kind; json parse error: {e}"),
    })
}

fn yaml(body: &[u8]) -> Result<Value> {
    // YAML is a superset of JSON, so JSON bodies sent as YAML decode here too.
    serde_saphyr::from_slice::<Value>(body).map_err(|e| Error::BadRequest {
        message: format!("error converting YAML to JSON: {e}"),
    })
}

/// Delete options: the query's, overridden by a `DeleteOptions` body (JSON or protobuf) when one
/// is sent.
fn delete_params(headers: &HeaderMap, query: &Query, body: &[u8]) -> Result<DeleteParams> {
    let mut params = query.delete_params()?;
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(params);
    }
    let options = match content_type(headers).as_str() {
        protobuf::MEDIA_TYPE => protobuf::decode(body)?,
        _ => json(body)?,
    };
    if let Some(policy) = options.get("propagationPolicy").and_then(Value::as_str) {
        params.propagation_policy = Some(query::propagation(policy)?);
    } else if let Some(orphan) = options.get("orphanDependents").and_then(Value::as_bool) {
        params.propagation_policy = Some(if orphan {
            kbind_cluster::PropagationPolicy::Orphan
        } else {
            kbind_cluster::PropagationPolicy::Background
        });
    }
    if let Some(dry_run) = options.get("dryRun").and_then(Value::as_array) {
        params.dry_run = dry_run.iter().any(|d| d == "All");
    }
    if let Some(grace) = options.get("gracePeriodSeconds").and_then(Value::as_u64) {
        params.grace_period_seconds = u32::try_from(grace).ok();
    }
    if let Some(pre) = options.get("preconditions") {
        let text = |k: &str| pre.get(k).and_then(Value::as_str).map(str::to_string);
        params.preconditions = Some(kube::api::Preconditions {
            uid: text("uid"),
            resource_version: text("resourceVersion"),
        });
    }
    Ok(params)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::errors::status_value;

    fn status_of(err: Error) -> Value {
        status_value(&ApiError::from(err).status())
    }
    use axum::http::HeaderValue;

    fn with_type(ct: &'static str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
        h
    }

    #[test]
    fn the_four_patch_types_decode_by_content_type() {
        let merge = decode_patch(&with_type("application/merge-patch+json"), br#"{"a":1}"#).unwrap();
        assert!(matches!(merge, Patch::Merge(_)));
        let json_patch = decode_patch(
            &with_type("application/json-patch+json"),
            br#"[{"op":"add","path":"/a","value":1}]"#,
        )
        .unwrap();
        assert!(matches!(json_patch, Patch::Json(_)));
        let smp = decode_patch(&with_type("application/strategic-merge-patch+json"), b"{}").unwrap();
        assert!(matches!(smp, Patch::Strategic(_)));
        let apply = decode_patch(
            &with_type("application/apply-patch+yaml"),
            b"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: \"1\"\n",
        )
        .unwrap();
        let Patch::Apply(body) = apply else { panic!("not apply") };
        assert_eq!(body["data"]["x"], "1");
        let err = decode_patch(&with_type("text/plain"), b"{}").unwrap_err();
        assert_eq!(status_of(err)["code"], 415);
    }

    #[test]
    fn delete_options_in_the_body_override_the_query() {
        let query = Query::parse(Some("propagationPolicy=Orphan")).unwrap();
        let params = delete_params(
            &HeaderMap::new(),
            &query,
            br#"{"kind":"DeleteOptions","propagationPolicy":"Foreground","dryRun":["All"],"preconditions":{"uid":"u1"}}"#,
        )
        .unwrap();
        assert_eq!(
            params.propagation_policy,
            Some(kbind_cluster::PropagationPolicy::Foreground)
        );
        assert!(params.dry_run);
        assert_eq!(params.preconditions.unwrap().uid.as_deref(), Some("u1"));
        let params = delete_params(&HeaderMap::new(), &query, b"").unwrap();
        assert_eq!(
            params.propagation_policy,
            Some(kbind_cluster::PropagationPolicy::Orphan)
        );
    }

    #[test]
    fn protobuf_bodies_are_for_built_in_kinds_only() {
        let cm = super::protobuf::encode(&json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}))
            .unwrap();
        let pb = with_type("application/vnd.kubernetes.protobuf");
        assert_eq!(decode_object(&pb, &cm, true).unwrap()["metadata"]["name"], "a");
        assert_eq!(decode_object(&pb, &cm, false).unwrap_err().code(), 415);
    }

    #[test]
    fn malformed_bodies_are_bad_requests() {
        let err = decode_object(&with_type("application/json"), b"{not json", true).unwrap_err();
        assert_eq!(err.code(), 400);
    }
}
