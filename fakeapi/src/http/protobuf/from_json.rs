//! fakeapi's JSON objects to protobuf messages, the inverse of [`super::to_json`].

use std::collections::{HashMap, HashSet};

use jiff::Timestamp;
use kbind_cluster::Error;
use prost_reflect::{
    DynamicMessage, FieldDescriptor, Kind, MapKey, MessageDescriptor, ReflectMessage, Value as PbValue,
};
use serde_json::{Map, Value};

use super::schema::Schema;
use super::to_json::{
    CRD_JSON, FIELDS_V1, INT_OR_STRING, MICRO_TIME, PROPS_OR_ARRAY, PROPS_OR_BOOL, PROPS_OR_STRING_ARRAY, QUANTITY,
    RAW_EXTENSION, TIME,
};
use super::unencodable;

/// The message `desc` holding `json`; a key the message does not know is an error.
pub(super) fn message(schema: &Schema, desc: &MessageDescriptor, json: &Value) -> Result<DynamicMessage, Error> {
    let mut msg = DynamicMessage::new(desc.clone());
    if custom(schema, desc, json, &mut msg)? {
        return Ok(msg);
    }
    if schema.is_wrapper(desc) {
        if let Some(items) = desc.get_field_by_name("items") {
            msg.set_field(&items, field_value(schema, &items, json)?);
        }
        return Ok(msg);
    }
    let object = json
        .as_object()
        .ok_or_else(|| unencodable(&format!("{} is not an object", desc.name())))?;
    let mut used = HashSet::new();
    fill(schema, desc, object, &mut msg, &mut used)?;
    if let Some(key) = object
        .keys()
        .find(|k| !used.contains(k.as_str()) && !matches!(k.as_str(), "apiVersion" | "kind"))
    {
        return Err(unencodable(&format!(
            "{}.{key} is not in the Kubernetes v1.35 schema",
            desc.name()
        )));
    }
    Ok(msg)
}

fn fill<'a>(
    schema: &Schema,
    desc: &MessageDescriptor,
    object: &'a Map<String, Value>,
    msg: &mut DynamicMessage,
    used: &mut HashSet<&'a str>,
) -> Result<(), Error> {
    for field in desc.fields() {
        let go = schema.go_field(desc, field.number());
        if go.is_some_and(|g| g.inline) {
            let Some(inner_desc) = field.kind().as_message().cloned() else {
                continue;
            };
            let mut inner = DynamicMessage::new(inner_desc.clone());
            fill(schema, &inner_desc, object, &mut inner, used)?;
            msg.set_field(&field, PbValue::Message(inner));
            continue;
        }
        let key = go.map_or(field.name(), |g| g.json.as_str());
        let Some((key, value)) = object.get_key_value(key) else {
            continue;
        };
        used.insert(key.as_str());
        if value.is_null() {
            // Go writes a non-pointer struct even when it is zero (a `null` Time), and nothing
            // for a nil pointer.
            if let (Some(inner), false) = (field.kind().as_message(), go.is_some_and(|g| g.pointer))
                && !field.is_list()
                && !field.is_map()
            {
                msg.set_field(&field, PbValue::Message(DynamicMessage::new(inner.clone())));
            }
            continue;
        }
        let value = field_value(schema, &field, value)?;
        msg.set_field(&field, value);
    }
    Ok(())
}

fn field_value(schema: &Schema, field: &FieldDescriptor, json: &Value) -> Result<PbValue, Error> {
    let mismatch = |want: &str| unencodable(&format!("{} is not {want}", field.full_name()));
    if field.is_map() {
        let object = json.as_object().ok_or_else(|| mismatch("an object"))?;
        let value_field = field
            .kind()
            .as_message()
            .map(MessageDescriptor::map_entry_value_field)
            .ok_or_else(|| mismatch("a map"))?;
        let mut out = HashMap::new();
        for (k, v) in object {
            out.insert(
                MapKey::String(k.clone()),
                kind_value(schema, &value_field, &value_field.kind(), v)?,
            );
        }
        return Ok(PbValue::Map(out));
    }
    if field.is_list() {
        let items = json.as_array().ok_or_else(|| mismatch("an array"))?;
        let kind = field.kind();
        return items
            .iter()
            .map(|v| kind_value(schema, field, &kind, v))
            .collect::<Result<Vec<_>, _>>()
            .map(PbValue::List);
    }
    kind_value(schema, field, &field.kind(), json)
}

fn kind_value(schema: &Schema, field: &FieldDescriptor, kind: &Kind, json: &Value) -> Result<PbValue, Error> {
    let mismatch = |want: &str| unencodable(&format!("{} is not {want}: {json}", field.full_name()));
    let int = || json.as_i64().ok_or_else(|| mismatch("an integer"));
    Ok(match kind {
        Kind::Message(desc) => PbValue::Message(message(schema, desc, json)?),
        Kind::String => PbValue::String(json.as_str().ok_or_else(|| mismatch("a string"))?.to_string()),
        Kind::Bool => PbValue::Bool(json.as_bool().ok_or_else(|| mismatch("a boolean"))?),
        Kind::Int32 | Kind::Sint32 | Kind::Sfixed32 => {
            PbValue::I32(i32::try_from(int()?).map_err(|_| mismatch("an int32"))?)
        }
        Kind::Int64 | Kind::Sint64 | Kind::Sfixed64 => PbValue::I64(int()?),
        Kind::Uint32 | Kind::Fixed32 => PbValue::U32(u32::try_from(int()?).map_err(|_| mismatch("a uint32"))?),
        Kind::Uint64 | Kind::Fixed64 => PbValue::U64(json.as_u64().ok_or_else(|| mismatch("a uint64"))?),
        Kind::Double => PbValue::F64(json.as_f64().ok_or_else(|| mismatch("a number"))?),
        Kind::Float => PbValue::F32(json.as_f64().ok_or_else(|| mismatch("a number"))? as f32),
        Kind::Bytes => {
            use base64::Engine;
            let text = json.as_str().ok_or_else(|| mismatch("base64"))?;
            let bytes = base64::engine::general_purpose::STANDARD
                .decode(text)
                .map_err(|_| mismatch("base64"))?;
            PbValue::Bytes(bytes.into())
        }
        Kind::Enum(_) => PbValue::EnumNumber(i32::try_from(int()?).map_err(|_| mismatch("an enum"))?),
    })
}

fn put(msg: &mut DynamicMessage, name: &str, value: PbValue) -> Result<(), Error> {
    msg.try_set_field_by_name(name, value)
        .map_err(|e| unencodable(&e.to_string()))
}

fn sub_message(schema: &Schema, msg: &DynamicMessage, name: &str, json: &Value) -> Result<PbValue, Error> {
    let field = msg
        .descriptor()
        .get_field_by_name(name)
        .ok_or_else(|| unencodable(&format!("{} has no {name}", msg.descriptor().name())))?;
    field_value(schema, &field, json)
}

/// Fills `msg` for the Go types with their own JSON; false for any other message.
fn custom(schema: &Schema, desc: &MessageDescriptor, json: &Value, msg: &mut DynamicMessage) -> Result<bool, Error> {
    let bad = |want: &str| unencodable(&format!("{} is not {want}: {json}", desc.name()));
    match desc.full_name() {
        TIME | MICRO_TIME => {
            let text = json.as_str().ok_or_else(|| bad("a timestamp"))?;
            let ts: Timestamp = text.parse().map_err(|_| bad("an RFC 3339 timestamp"))?;
            put(msg, "seconds", PbValue::I64(ts.as_second()))?;
            put(msg, "nanos", PbValue::I32(ts.subsec_nanosecond()))?;
        }
        QUANTITY => {
            let text = match json {
                Value::String(s) => s.clone(),
                Value::Number(n) => n.to_string(),
                _ => return Err(bad("a quantity")),
            };
            put(msg, "string", PbValue::String(text))?;
        }
        INT_OR_STRING => match json {
            Value::String(s) => {
                put(msg, "type", PbValue::I64(1))?;
                put(msg, "strVal", PbValue::String(s.clone()))?;
            }
            other => {
                let n = other
                    .as_i64()
                    .and_then(|n| i32::try_from(n).ok())
                    .ok_or_else(|| bad("an int or string"))?;
                put(msg, "type", PbValue::I64(0))?;
                put(msg, "intVal", PbValue::I32(n))?;
            }
        },
        RAW_EXTENSION | CRD_JSON | FIELDS_V1 => {
            let raw = serde_json::to_vec(json).map_err(|e| unencodable(&e.to_string()))?;
            let name = if desc.full_name() == FIELDS_V1 { "Raw" } else { "raw" };
            put(msg, name, PbValue::Bytes(raw.into()))?;
        }
        PROPS_OR_ARRAY => {
            let name = if json.is_array() { "jSONSchemas" } else { "schema" };
            let value = sub_message(schema, msg, name, json)?;
            put(msg, name, value)?;
        }
        PROPS_OR_BOOL => match json {
            Value::Bool(b) => put(msg, "allows", PbValue::Bool(*b))?,
            other => {
                let value = sub_message(schema, msg, "schema", other)?;
                put(msg, "allows", PbValue::Bool(true))?;
                put(msg, "schema", value)?;
            }
        },
        PROPS_OR_STRING_ARRAY => {
            let name = if json.is_array() { "property" } else { "schema" };
            let value = sub_message(schema, msg, name, json)?;
            put(msg, name, value)?;
        }
        _ => return Ok(false),
    }
    Ok(true)
}
