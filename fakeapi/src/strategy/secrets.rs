//! Secrets: `stringData` is folded into `data` and `type` defaults to `Opaque`.

use serde_json::{Value, json};

use super::Strategy;
use crate::registry::ResourceInfo;

/// The strategy of `secrets`.
pub(crate) struct Secrets;

impl Strategy for Secrets {
    fn normalize(&self, _info: &ResourceInfo, obj: &mut Value) {
        fold_string_data(obj);
    }
}

/// Secrets store `stringData` as base64 `data` and default `type` to `Opaque`, as the
/// apiserver's conversion does; `stringData` is never stored or returned.
fn fold_string_data(secret: &mut Value) {
    use base64::Engine as _;
    let Some(map) = secret.as_object_mut() else { return };
    if let Some(Value::Object(strings)) = map.remove("stringData") {
        let data = map.entry("data").or_insert_with(|| json!({}));
        if !data.is_object() {
            *data = json!({});
        }
        for (key, value) in strings {
            let text = value.as_str().unwrap_or_default();
            data[key.as_str()] = json!(base64::engine::general_purpose::STANDARD.encode(text));
        }
    }
    if map.get("type").and_then(Value::as_str).is_none_or(str::is_empty) {
        map.insert("type".into(), json!("Opaque"));
    }
}
