//! Field errors worded as k8s.io/apimachinery/pkg/util/validation/field words them
//! (`Error.ErrorBody`), with the field path `<nil>` for the root as the apiserver sends it.

use kbind_cluster::error::Cause;
use serde_json::Value;

fn cause(reason: &str, field: &str, message: String) -> Cause {
    let field = if field.is_empty() { "<nil>" } else { field };
    Cause {
        reason: reason.to_string(),
        message,
        field: field.to_string(),
    }
}

fn with_detail(head: String, detail: &str) -> String {
    if detail.is_empty() {
        head
    } else {
        format!("{head}: {detail}")
    }
}

/// `field.Required`: "Required value[: detail]".
pub(crate) fn required(field: &str, detail: &str) -> Cause {
    cause(
        "FieldValueRequired",
        field,
        with_detail("Required value".into(), detail),
    )
}

/// `field.Invalid`: "Invalid value: <value>[: detail]".
pub(crate) fn invalid(field: &str, value: &Value, detail: &str) -> Cause {
    cause(
        "FieldValueInvalid",
        field,
        with_detail(format!("Invalid value: {}", bad_value(value)), detail),
    )
}

/// `field.TypeInvalid`: worded like `Invalid`, with reason `FieldValueTypeInvalid`.
pub(crate) fn type_invalid(field: &str, value: &Value, detail: &str) -> Cause {
    cause(
        "FieldValueTypeInvalid",
        field,
        with_detail(format!("Invalid value: {}", bad_value(value)), detail),
    )
}

/// `field.NotSupported`: "Unsupported value: <value>: supported values: "a", "b"".
pub(crate) fn not_supported(field: &str, value: &Value, supported: &[String]) -> Cause {
    let quoted: Vec<String> = supported.iter().map(|v| go_quote(v)).collect();
    let detail = if quoted.is_empty() {
        String::new()
    } else {
        format!("supported values: {}", quoted.join(", "))
    };
    cause(
        "FieldValueNotSupported",
        field,
        with_detail(format!("Unsupported value: {}", bad_value(value)), &detail),
    )
}

/// `field.Duplicate`: "Duplicate value: <value>".
pub(crate) fn duplicate(field: &str, value: &Value) -> Cause {
    cause(
        "FieldValueDuplicate",
        field,
        format!("Duplicate value: {}", bad_value(value)),
    )
}

/// `field.Forbidden`: "Forbidden[: detail]".
pub(crate) fn forbidden(field: &str, detail: &str) -> Cause {
    cause("FieldValueForbidden", field, with_detail("Forbidden".into(), detail))
}

/// `field.TooLong`: "Too long: may not be more than N bytes".
pub(crate) fn too_long(field: &str, max: u64) -> Cause {
    cause(
        "FieldValueTooLong",
        field,
        format!("Too long: may not be more than {max} bytes"),
    )
}

/// `field.TooMany`: "Too many: <actual>: must have at most N items".
pub(crate) fn too_many(field: &str, actual: u64, max: u64) -> Cause {
    cause(
        "FieldValueTooMany",
        field,
        format!("Too many: {actual}: must have at most {max} items"),
    )
}

/// A bad value as `ErrorBody` prints it: strings quoted, numbers and booleans bare, null as
/// `"null"`, objects and lists in Go's `%#v` form.
fn bad_value(value: &Value) -> String {
    match value {
        Value::Null => "\"null\"".to_string(),
        Value::String(text) => go_quote(text),
        Value::Number(_) | Value::Bool(_) => go_sharp_v(value),
        Value::Array(_) | Value::Object(_) => go_sharp_v(value),
    }
}

/// Go's `%q` for a string (JSON string escaping is the same for everything but rare controls).
pub(crate) fn go_quote(text: &str) -> String {
    Value::String(text.to_string()).to_string()
}

/// Go's `%#v` of a decoded JSON value (`map[string]interface {}{"k":1}`, keys sorted).
fn go_sharp_v(value: &Value) -> String {
    match value {
        Value::Null => "interface {}(nil)".to_string(),
        Value::Bool(b) => b.to_string(),
        Value::Number(n) => match n.as_i64() {
            Some(i) => i.to_string(),
            None => go_float(n.as_f64().unwrap_or_default()),
        },
        Value::String(text) => go_quote(text),
        Value::Array(list) => {
            let inner: Vec<String> = list.iter().map(go_sharp_v).collect();
            format!("[]interface {{}}{{{}}}", inner.join(", "))
        }
        Value::Object(map) => {
            let mut entries: Vec<(&String, &Value)> = map.iter().collect();
            entries.sort_by_key(|(k, _)| *k);
            let inner: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", go_quote(k), go_sharp_v(v)))
                .collect();
            format!("map[string]interface {{}}{{{}}}", inner.join(", "))
        }
    }
}

/// Go's `%v` of a float64 (`strconv.FormatFloat(f, 'g', -1, 64)`): shortest digits, exponent
/// form when the decimal exponent is below -4 or at least 6 (`1e+06`, `1.5e-05`).
pub(crate) fn go_float(f: f64) -> String {
    if !f.is_finite() {
        return if f.is_nan() {
            "NaN".into()
        } else if f > 0.0 {
            "+Inf".into()
        } else {
            "-Inf".into()
        };
    }
    if f == 0.0 {
        return "0".into();
    }
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    if (-4..6).contains(&exp) {
        format!("{f}")
    } else {
        let sign = if exp < 0 { '-' } else { '+' };
        format!("{mantissa}e{sign}{:02}", exp.abs())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_float_formatting_matches_go() {
        assert_eq!(go_float(1.5), "1.5");
        assert_eq!(go_float(100000.0), "100000");
        assert_eq!(go_float(1_000_000.0), "1e+06");
        assert_eq!(go_float(1_234_567.0), "1.234567e+06");
        assert_eq!(go_float(0.00001), "1e-05");
        assert_eq!(go_float(0.0001), "0.0001");
    }
}
