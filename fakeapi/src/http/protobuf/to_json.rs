//! Protobuf messages to the JSON Go's `encoding/json` writes for the same Go value.

use jiff::Timestamp;
use kbind_cluster::Error;
use prost_reflect::{DynamicMessage, FieldDescriptor, Kind, MapKey, ReflectMessage, Value as PbValue};
use serde_json::{Map, Value, json};

use super::malformed;
use super::schema::{GoField, Schema};

/// The Go types (by message) that write their own JSON, each mapped here.
#[cfg(test)]
pub(super) const CUSTOM: &[&str] = &[
    TIME,
    MICRO_TIME,
    QUANTITY,
    INT_OR_STRING,
    RAW_EXTENSION,
    FIELDS_V1,
    CRD_JSON,
    PROPS_OR_ARRAY,
    PROPS_OR_BOOL,
    PROPS_OR_STRING_ARRAY,
];

pub(super) const TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.Time";
pub(super) const MICRO_TIME: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.MicroTime";
pub(super) const QUANTITY: &str = "k8s.io.apimachinery.pkg.api.resource.Quantity";
pub(super) const INT_OR_STRING: &str = "k8s.io.apimachinery.pkg.util.intstr.IntOrString";
pub(super) const RAW_EXTENSION: &str = "k8s.io.apimachinery.pkg.runtime.RawExtension";
pub(super) const FIELDS_V1: &str = "k8s.io.apimachinery.pkg.apis.meta.v1.FieldsV1";
pub(super) const CRD_JSON: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSON";
pub(super) const PROPS_OR_ARRAY: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrArray";
pub(super) const PROPS_OR_BOOL: &str = "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrBool";
pub(super) const PROPS_OR_STRING_ARRAY: &str =
    "k8s.io.apiextensions_apiserver.pkg.apis.apiextensions.v1.JSONSchemaPropsOrStringArray";

/// A message as Go's JSON; `Null` where Go writes `null` (a zero Time, say).
pub(super) fn message(schema: &Schema, msg: &DynamicMessage) -> Result<Value, Error> {
    let desc = msg.descriptor();
    if let Some(unknown) = msg.unknown_fields().next() {
        return Err(malformed(&format!(
            "field {} of {} is not in fakeapi's Kubernetes v1.35 schema",
            unknown.number(),
            desc.full_name()
        )));
    }
    if let Some(value) = custom(schema, msg)? {
        return Ok(value);
    }
    if schema.is_wrapper(&desc) {
        return Ok(msg
            .get_field_by_name("items")
            .map(|v| value(schema, &v))
            .transpose()?
            .unwrap_or(Value::Null));
    }
    let mut out = Map::new();
    for (field, value_pb) in msg.fields() {
        let go = go_field(schema, &field);
        let value = value(schema, value_pb)?;
        if go.inline {
            if let Value::Object(inner) = value {
                out.extend(inner);
            }
            continue;
        }
        // A Go struct is never omitted unless `omitzero`; one that writes `null` (a zero Time)
        // is written so.
        if value.is_null() && (go.omitzero || !matches!(field.kind(), Kind::Message(_))) {
            continue;
        }
        if (go.omitempty || go.omitzero) && !go.pointer && is_empty(&field, &value) {
            continue;
        }
        out.insert(go.json.clone(), value);
    }
    Ok(Value::Object(out))
}

/// The Go facts of a field, or the proto name as a field Go writes (for messages Go never
/// reaches from a served kind, which still decode faithfully).
fn go_field(schema: &Schema, field: &FieldDescriptor) -> GoField {
    schema
        .go_field(field.parent_message(), field.number())
        .cloned()
        .unwrap_or_else(|| GoField {
            json: field.name().to_string(),
            omitempty: true,
            omitzero: false,
            pointer: false,
            inline: false,
        })
}

/// What Go's `omitempty` leaves out: zero scalars and empty lists and maps (never a struct).
fn is_empty(field: &FieldDescriptor, value: &Value) -> bool {
    if field.is_list() || field.is_map() {
        return value.as_array().is_some_and(Vec::is_empty) || value.as_object().is_some_and(Map::is_empty);
    }
    if matches!(field.kind(), Kind::Message(_)) {
        return false;
    }
    match value {
        Value::Bool(b) => !b,
        Value::Number(n) => n.as_f64() == Some(0.0),
        Value::String(s) => s.is_empty(),
        _ => false,
    }
}

fn value(schema: &Schema, value: &PbValue) -> Result<Value, Error> {
    Ok(match value {
        PbValue::Bool(b) => json!(b),
        PbValue::I32(n) => json!(n),
        PbValue::I64(n) => json!(n),
        PbValue::U32(n) => json!(n),
        PbValue::U64(n) => json!(n),
        PbValue::F32(n) => float(f64::from(*n)),
        PbValue::F64(n) => float(*n),
        PbValue::String(s) => json!(s),
        PbValue::Bytes(b) => json!(base64(b)),
        PbValue::EnumNumber(n) => json!(n),
        PbValue::Message(m) => message(schema, m)?,
        PbValue::List(items) => Value::Array(items.iter().map(|v| self::value(schema, v)).collect::<Result<_, _>>()?),
        PbValue::Map(entries) => {
            let mut out = Map::new();
            for (key, v) in entries {
                let key = match key {
                    MapKey::String(s) => s.clone(),
                    MapKey::Bool(b) => b.to_string(),
                    MapKey::I32(n) => n.to_string(),
                    MapKey::I64(n) => n.to_string(),
                    MapKey::U32(n) => n.to_string(),
                    MapKey::U64(n) => n.to_string(),
                };
                out.insert(key, self::value(schema, v)?);
            }
            Value::Object(out)
        }
    })
}

/// A float as Go writes it: integral values without a fraction (`0`, not `0.0`).
fn float(n: f64) -> Value {
    // Beyond 2^53 integral floats stay floats (Go switches to exponent form there too).
    if n.fract() == 0.0 && n.abs() < 9_007_199_254_740_992.0 {
        return json!(n as i64);
    }
    json!(n)
}

fn int(msg: &DynamicMessage, name: &str) -> i64 {
    match msg.get_field_by_name(name).as_deref() {
        Some(PbValue::I64(n)) => *n,
        Some(PbValue::I32(n)) => i64::from(*n),
        _ => 0,
    }
}

fn set(msg: &DynamicMessage, name: &str) -> Option<PbValue> {
    let field = msg.descriptor().get_field_by_name(name)?;
    msg.has_field(&field).then(|| msg.get_field(&field).into_owned())
}

fn embedded_json(msg: &DynamicMessage, name: &str) -> Result<Value, Error> {
    match set(msg, name) {
        Some(PbValue::Bytes(raw)) if !raw.is_empty() => {
            serde_json::from_slice(&raw).map_err(|e| malformed(&format!("embedded JSON: {e}")))
        }
        _ => Ok(Value::Null),
    }
}

/// The JSON of the Go types with their own `MarshalJSON`, or `None` for any other message.
fn custom(schema: &Schema, msg: &DynamicMessage) -> Result<Option<Value>, Error> {
    let desc = msg.descriptor();
    Ok(Some(match desc.full_name() {
        TIME | MICRO_TIME => {
            let (seconds, nanos) = (int(msg, "seconds"), int(msg, "nanos"));
            if seconds == 0 && nanos == 0 {
                return Ok(Some(Value::Null));
            }
            let ts =
                Timestamp::new(seconds, i32::try_from(nanos).unwrap_or(0)).map_err(|e| malformed(&e.to_string()))?;
            if desc.full_name() == TIME {
                json!(kbind_cluster::clock::format_time(ts))
            } else {
                json!(ts.strftime("%Y-%m-%dT%H:%M:%S.%6fZ").to_string())
            }
        }
        QUANTITY => match set(msg, "string") {
            Some(PbValue::String(s)) => json!(s),
            _ => json!("0"),
        },
        INT_OR_STRING => {
            if int(msg, "type") == 1 {
                match set(msg, "strVal") {
                    Some(PbValue::String(s)) => json!(s),
                    _ => json!(""),
                }
            } else {
                json!(int(msg, "intVal"))
            }
        }
        RAW_EXTENSION | CRD_JSON => embedded_json(msg, "raw")?,
        FIELDS_V1 => embedded_json(msg, "Raw")?,
        PROPS_OR_ARRAY => match (set(msg, "jSONSchemas"), set(msg, "schema")) {
            (Some(list), _) => value(schema, &list)?,
            (None, Some(schema_pb)) => value(schema, &schema_pb)?,
            (None, None) => Value::Null,
        },
        PROPS_OR_BOOL => match set(msg, "schema") {
            Some(schema_pb) => value(schema, &schema_pb)?,
            None => json!(matches!(set(msg, "allows"), Some(PbValue::Bool(true)))),
        },
        PROPS_OR_STRING_ARRAY => match (set(msg, "property"), set(msg, "schema")) {
            (Some(list), _) => value(schema, &list)?,
            (None, Some(schema_pb)) => value(schema, &schema_pb)?,
            (None, None) => Value::Null,
        },
        _ => return Ok(None),
    }))
}

/// Standard base64 with padding, as Go writes `[]byte`.
pub(super) fn base64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}
