//! Kubernetes' protobuf encoding for every built-in kind fakeapi serves, from the v1.35
//! descriptors (see [`schema`]): request bodies are decoded into the JSON kube-apiserver would
//! store, and answers are encoded from fakeapi's JSON when a client asks for protobuf.
//!
//! The wire form (apimachinery's `runtime/serializer/protobuf`): `k8s\0` then a `runtime.Unknown`
//! whose `typeMeta` names the kind and whose `raw` is the object's message. A watch stream is a
//! sequence of frames, each a 4-byte big-endian length and a bare `metav1.WatchEvent` whose
//! object is such an envelope.
//!
//! JSON is Go's `encoding/json` of the Go type: field names and `omitempty` come from the Go
//! types, and the types that write their own JSON (Time, MicroTime, Quantity, IntOrString,
//! RawExtension, FieldsV1, the CRD schema unions) are mapped here, once. A field the descriptors
//! do not know is refused rather than dropped, in both directions.

mod from_json;
mod schema;
mod to_json;

use kbind_cluster::Error;
use prost::Message;
use prost_reflect::{DynamicMessage, MessageDescriptor, Value as PbValue};
use serde_json::{Value, json};

use schema::schema;

/// The media type of Kubernetes protobuf.
pub const MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The media type of a protobuf watch stream.
pub const WATCH_MEDIA_TYPE: &str = "application/vnd.kubernetes.protobuf;stream=watch";

/// The 4-byte prefix of every Kubernetes protobuf message.
const MAGIC: &[u8] = b"k8s\0";
const UNKNOWN: &str = "k8s.io.apimachinery.pkg.runtime.Unknown";
const WATCH_EVENT: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.WatchEvent";

/// Decodes a protobuf request body (envelope and object) into the object's JSON form.
pub fn decode(body: &[u8]) -> Result<Value, Error> {
    let envelope = body
        .strip_prefix(MAGIC)
        .ok_or_else(|| malformed("missing the k8s protobuf prefix"))?;
    let unknown = DynamicMessage::decode(message(UNKNOWN)?, envelope).map_err(|e| malformed(&e.to_string()))?;
    let type_meta = match unknown.get_field_by_name("typeMeta").as_deref() {
        Some(PbValue::Message(m)) => m.clone(),
        _ => DynamicMessage::new(message("k8s.io.apimachinery.pkg.runtime.TypeMeta")?),
    };
    let (api_version, kind) = (string_field(&type_meta, "apiVersion"), string_field(&type_meta, "kind"));
    if !string_field(&unknown, "contentEncoding").is_empty() {
        return Err(malformed("content encodings are not supported"));
    }
    let raw = match unknown.get_field_by_name("raw").map(|v| v.into_owned()) {
        Some(PbValue::Bytes(raw)) => raw,
        _ => Default::default(),
    };
    let desc = schema().message_of(&api_version, &kind).ok_or_else(|| Error::Server {
        code: 415,
        reason: "UnsupportedMediaType".into(),
        message: format!("fakeapi cannot decode {kind} ({api_version}) from protobuf; send application/json"),
    })?;
    let object = DynamicMessage::decode(desc, raw).map_err(|e| malformed(&e.to_string()))?;
    let mut value = to_json::message(schema(), &object)?;
    if let Some(map) = value.as_object_mut() {
        map.insert("apiVersion".into(), json!(api_version));
        map.insert("kind".into(), json!(kind));
    }
    Ok(value)
}

/// Whether fakeapi can answer `apiVersion`/`kind` in protobuf (built-in kinds, lists, Status).
pub fn encodes(api_version: &str, kind: &str) -> bool {
    schema().message_of(api_version, kind).is_some()
}

/// Encodes a JSON object (its `apiVersion` and `kind` name the message) as a protobuf body.
pub fn encode(object: &Value) -> Result<Vec<u8>, Error> {
    let field = |name: &str| object.get(name).and_then(Value::as_str).unwrap_or_default();
    let (api_version, kind) = (field("apiVersion"), field("kind"));
    let desc = schema()
        .message_of(api_version, kind)
        .ok_or_else(|| unencodable(&format!("no protobuf message for {kind} ({api_version})")))?;
    let raw = from_json::message(schema(), &desc, object)?.encode_to_vec();
    envelope(api_version, kind, raw)
}

/// One frame of a protobuf watch stream: a `WatchEvent` of `event_type` carrying `object`.
pub fn watch_frame(event_type: &str, object: &Value) -> Result<Vec<u8>, Error> {
    let desc = message(WATCH_EVENT)?;
    let mut event = DynamicMessage::new(desc.clone());
    event
        .try_set_field_by_name("type", PbValue::String(event_type.to_string()))
        .map_err(|e| unencodable(&e.to_string()))?;
    let raw_extension = desc
        .get_field_by_name("object")
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or_else(|| unencodable("WatchEvent has no object"))?;
    let mut ext = DynamicMessage::new(raw_extension);
    ext.try_set_field_by_name("raw", PbValue::Bytes(encode(object)?.into()))
        .map_err(|e| unencodable(&e.to_string()))?;
    event
        .try_set_field_by_name("object", PbValue::Message(ext))
        .map_err(|e| unencodable(&e.to_string()))?;
    let payload = event.encode_to_vec();
    let len = u32::try_from(payload.len()).map_err(|_| unencodable("watch event too large"))?;
    Ok([len.to_be_bytes().as_slice(), &payload].concat())
}

/// The event type and object of one protobuf watch frame (its 4-byte length included), as JSON.
pub fn decode_watch_frame(frame: &[u8]) -> Result<(String, Value), Error> {
    let (len, payload) = frame
        .split_first_chunk::<4>()
        .ok_or_else(|| malformed("watch frame shorter than its length"))?;
    if usize::try_from(u32::from_be_bytes(*len)).ok() != Some(payload.len()) {
        return Err(malformed("watch frame length does not match its payload"));
    }
    let event = DynamicMessage::decode(message(WATCH_EVENT)?, payload).map_err(|e| malformed(&e.to_string()))?;
    let raw = match event.get_field_by_name("object").as_deref() {
        Some(PbValue::Message(ext)) => match ext.get_field_by_name("raw").as_deref() {
            Some(PbValue::Bytes(raw)) => raw.clone(),
            _ => Default::default(),
        },
        _ => Default::default(),
    };
    Ok((string_field(&event, "type"), decode(&raw)?))
}

/// Splits a protobuf watch body into its frames (each with its 4-byte length); a trailing
/// partial frame is left out.
pub fn watch_frames(body: &[u8]) -> Vec<&[u8]> {
    let mut frames = Vec::new();
    let mut rest = body;
    while let Some((len, _)) = rest.split_first_chunk::<4>() {
        let end = usize::try_from(u32::from_be_bytes(*len))
            .unwrap_or(usize::MAX)
            .saturating_add(4);
        if end > rest.len() {
            break;
        }
        let (frame, tail) = rest.split_at(end);
        frames.push(frame);
        rest = tail;
    }
    frames
}

fn envelope(api_version: &str, kind: &str, raw: Vec<u8>) -> Result<Vec<u8>, Error> {
    let desc = message(UNKNOWN)?;
    let type_meta_desc = desc
        .get_field_by_name("typeMeta")
        .and_then(|f| f.kind().as_message().cloned())
        .ok_or_else(|| unencodable("runtime.Unknown has no typeMeta"))?;
    let mut type_meta = DynamicMessage::new(type_meta_desc);
    let mut unknown = DynamicMessage::new(desc);
    let set = |m: &mut DynamicMessage, name: &str, v: PbValue| {
        m.try_set_field_by_name(name, v)
            .map_err(|e| unencodable(&e.to_string()))
    };
    set(&mut type_meta, "apiVersion", PbValue::String(api_version.into()))?;
    set(&mut type_meta, "kind", PbValue::String(kind.into()))?;
    set(&mut unknown, "typeMeta", PbValue::Message(type_meta))?;
    set(&mut unknown, "raw", PbValue::Bytes(raw.into()))?;
    // Go writes its non-pointer strings even when empty.
    set(&mut unknown, "contentEncoding", PbValue::String(String::new()))?;
    set(&mut unknown, "contentType", PbValue::String(String::new()))?;
    Ok([MAGIC, &unknown.encode_to_vec()].concat())
}

fn string_field(message: &DynamicMessage, name: &str) -> String {
    match message.get_field_by_name(name).as_deref() {
        Some(PbValue::String(s)) => s.clone(),
        _ => String::new(),
    }
}

fn message(name: &str) -> Result<MessageDescriptor, Error> {
    schema()
        .message(name)
        .ok_or_else(|| unencodable(&format!("the descriptors lack {name}")))
}

fn malformed(why: &str) -> Error {
    Error::BadRequest {
        message: format!("unable to decode protobuf body: {why}"),
    }
}

fn unencodable(why: &str) -> Error {
    Error::Server {
        code: 500,
        reason: "InternalError".into(),
        message: format!("fakeapi cannot encode the answer in protobuf: {why}"),
    }
}

#[cfg(test)]
mod tests;
