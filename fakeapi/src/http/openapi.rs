//! OpenAPI endpoints: `/openapi/v3` (index and per group-version documents) and `/openapi/v2`.
//!
//! kubectl asks for v2 only as protobuf (`application/com.github.proto-openapi.spec.v2@v1.0+protobuf`)
//! and only to fall back when v3 cannot answer; fakeapi has no protobuf encoder, so it answers
//! an empty protobuf message (a valid, empty `openapi_v2.Document`), which makes kubectl fall
//! back to its compiled-in types. JSON clients get a Swagger 2.0 document with every v3 schema.

use axum::Extension;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Response};
use kbind_cluster::{Discovery, Error};
use serde_json::{Map, Value, json};

use super::errors::ApiError;
use super::{auth, json_body, media};
use crate::FakeCluster;
use crate::rbac::UserInfo;

/// The media type kubectl asks `/openapi/v2` for (client-go's `Accept`).
const PROTO_V2_ACCEPT: &str = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
/// The content type a real kube-apiserver answers it with: `@` is not valid in a media subtype,
/// so Go's `mime.ParseMediaType` refuses the form clients ask with, and kubectl then fails with
/// "mime: unexpected content after media subtype" instead of its own error.
const PROTO_V2: &str = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf";

/// `/openapi/v2`.
pub(crate) async fn v2(
    State(cluster): State<FakeCluster>,
    Extension(user): Extension<UserInfo>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    cluster.authorize_path(&user, "get", "/openapi/v2")?;
    if media::prefers(&headers, PROTO_V2_ACCEPT) || media::prefers(&headers, PROTO_V2) {
        return Ok(([(header::CONTENT_TYPE, PROTO_V2)], Vec::<u8>::new()).into_response());
    }
    let caller = auth::caller(&headers, user);
    let documents = documents(&cluster, &caller).await?;
    let mut definitions = Map::new();
    for (_, _, doc) in &documents {
        if let Some(schemas) = doc.pointer("/components/schemas").and_then(Value::as_object) {
            for (name, schema) in schemas {
                definitions.insert(name.clone(), v2_refs(schema.clone()));
            }
        }
    }
    Ok(json_body(&json!({
        "swagger": "2.0",
        "info": {"title": "Kubernetes", "version": "v1.35.0"},
        "paths": {},
        "definitions": definitions,
    })))
}

/// `/openapi/v3`: the index of every group-version document.
pub(crate) async fn v3_index(
    State(cluster): State<FakeCluster>,
    Extension(user): Extension<UserInfo>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    cluster.authorize_path(&user, "get", "/openapi/v3")?;
    let caller = auth::caller(&headers, user);
    let documents = documents(&cluster, &caller).await?;
    Ok(json_body(&crate::openapi::root_index(&documents)))
}

/// `/openapi/v3/api/v1` and `/openapi/v3/apis/<group>/<version>`.
pub(crate) async fn v3_document(
    State(cluster): State<FakeCluster>,
    Extension(user): Extension<UserInfo>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    cluster.authorize_path(&user, "get", &format!("/openapi/v3/{path}"))?;
    let parts: Vec<&str> = path.split('/').filter(|s| !s.is_empty()).collect();
    let (group, version) = match parts.as_slice() {
        ["api", version] => ("", *version),
        ["apis", group, version] => (*group, *version),
        _ => {
            return Err(ApiError::from(Error::NotFound {
                message: super::errors::UNKNOWN_RESOURCE.into(),
            }));
        }
    };
    let caller = auth::caller(&headers, user);
    Ok(json_body(&cluster.openapi_v3(&caller, group, version).await?))
}

/// Every served group-version's document, in discovery order.
async fn documents(cluster: &FakeCluster, caller: &crate::Caller) -> Result<Vec<(String, String, Value)>, Error> {
    let discovery: Discovery = cluster.discovery(caller).await?;
    let mut out = Vec::new();
    for group in &discovery.groups {
        for version in &group.versions {
            let doc = cluster.openapi_v3(caller, &group.name, version).await?;
            out.push((group.name.clone(), version.clone(), doc));
        }
    }
    Ok(out)
}

/// Rewrites v3 `#/components/schemas/` references to v2 `#/definitions/`.
fn v2_refs(value: Value) -> Value {
    match value {
        Value::String(s) => match s.strip_prefix("#/components/schemas/") {
            Some(name) => Value::String(format!("#/definitions/{name}")),
            None => Value::String(s),
        },
        Value::Array(items) => Value::Array(items.into_iter().map(v2_refs).collect()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, v2_refs(v))).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn references_point_at_v2_definitions() {
        let schema = json!({"properties": {"metadata": {"allOf": [{"$ref": "#/components/schemas/io.k8s.X"}]}}});
        assert_eq!(
            v2_refs(schema)["properties"]["metadata"]["allOf"][0]["$ref"],
            "#/definitions/io.k8s.X"
        );
    }
}
