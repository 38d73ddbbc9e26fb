//! Label keys and values as kube-apiserver validates them (`ValidateLabels`): a key is a
//! qualified name (an optional DNS-1123 subdomain prefix of at most 253 characters and `/`, then
//! a name of at most 63 characters of `[A-Za-z0-9._-]` starting and ending alphanumeric); a
//! value is empty or such a name. Every refusal is a `metadata.labels` cause of a 422 Invalid.

use serde_json::Value;

use crate::schema::invalid;
use kbind_cluster::error::Cause;

/// The field every label cause names, as kube-apiserver's does.
const FIELD: &str = "metadata.labels";
/// The longest label value and name part of a key.
const MAX_NAME: usize = 63;
/// The longest key prefix (a DNS-1123 subdomain).
const MAX_PREFIX: usize = 253;

const NAME_RULE: &str = "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  or '123-abc', regex used for validation is '([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')";
const VALUE_RULE: &str = "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or '.', and must start and end with an alphanumeric character (e.g. 'MyValue',  or 'my_value',  or '12345', regex used for validation is '(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?')";
const SUBDOMAIN_RULE: &str = "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')";

/// The causes kube-apiserver gives for the object's labels (none when they are all valid).
pub(crate) fn validate(obj: &Value) -> Vec<Cause> {
    let Some(labels) = obj.pointer("/metadata/labels").and_then(Value::as_object) else {
        return Vec::new();
    };
    let mut causes = Vec::new();
    for (key, value) in labels {
        for msg in key_errors(key) {
            causes.push(invalid(FIELD, &Value::String(key.clone()), &msg));
        }
        let value = value.as_str().unwrap_or_default();
        for msg in value_errors(value) {
            causes.push(invalid(FIELD, &Value::String(value.to_string()), &msg));
        }
    }
    causes
}

fn is_name(s: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    s.chars()
        .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
        && edge(s.chars().next())
        && edge(s.chars().last())
}

fn is_subdomain(s: &str) -> bool {
    s.split('.').all(|part| {
        !part.is_empty()
            && part
                .chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !part.starts_with('-')
            && !part.ends_with('-')
    })
}

/// `IsQualifiedName`'s messages for a label key.
fn key_errors(key: &str) -> Vec<String> {
    let parts: Vec<&str> = key.split('/').collect();
    let (prefix, name) = match parts.as_slice() {
        [name] => (None, *name),
        [prefix, name] => (Some(*prefix), *name),
        _ => {
            return vec![format!(
                "a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )];
        }
    };
    let mut errors = Vec::new();
    if let Some(prefix) = prefix {
        if prefix.is_empty() {
            errors.push("prefix part must be non-empty".to_string());
        } else {
            if prefix.len() > MAX_PREFIX {
                errors.push(format!("prefix part must be no more than {MAX_PREFIX} bytes"));
            }
            if !is_subdomain(prefix) {
                errors.push(format!("prefix part {SUBDOMAIN_RULE}"));
            }
        }
    }
    if name.is_empty() {
        errors.push("name part must be non-empty".to_string());
    } else if name.len() > MAX_NAME {
        errors.push(format!("name part must be no more than {MAX_NAME} bytes"));
    }
    if !is_name(name) {
        errors.push(format!("name part {NAME_RULE}"));
    }
    errors
}

/// `IsValidLabelValue`'s messages.
fn value_errors(value: &str) -> Vec<String> {
    let mut errors = Vec::new();
    if value.len() > MAX_NAME {
        errors.push(format!("must be no more than {MAX_NAME} bytes"));
    }
    if !value.is_empty() && !is_name(value) {
        errors.push(VALUE_RULE.to_string());
    }
    errors
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn messages(labels: Value) -> Vec<String> {
        validate(&json!({"metadata": {"labels": labels}}))
            .into_iter()
            .map(|c| {
                assert_eq!(c.field, FIELD);
                c.message
            })
            .collect()
    }

    #[test]
    fn valid_labels_pass() {
        let long_prefix = format!("{}.example", "a".repeat(200));
        let ok = json!({
            "app": "web", "example.com/My_name.1": "", "k": "A-b_c.9",
            long_prefix + "/x": "z".repeat(63),
        });
        assert_eq!(messages(ok), Vec::<String>::new());
    }

    #[test]
    fn values_and_keys_are_refused_as_kube_apiserver_refuses_them() {
        let long = "v".repeat(64);
        assert_eq!(
            messages(json!({"a": long})),
            vec![format!("Invalid value: \"{long}\": must be no more than 63 bytes")]
        );
        assert_eq!(
            messages(json!({"a": "-x"})),
            vec![format!("Invalid value: \"-x\": {VALUE_RULE}")]
        );
        assert_eq!(
            messages(json!({"Example.com/a": "v"})),
            vec![format!(
                "Invalid value: \"Example.com/a\": prefix part {SUBDOMAIN_RULE}"
            )]
        );
        assert_eq!(
            messages(json!({"a/b/c": "v"}))[0],
            format!(
                "Invalid value: \"a/b/c\": a qualified name {NAME_RULE} with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
            )
        );
        let name = "n".repeat(64);
        assert_eq!(
            messages(json!({name.clone(): "v"})),
            vec![format!(
                "Invalid value: \"{name}\": name part must be no more than 63 bytes"
            )]
        );
        assert_eq!(
            messages(json!({"/a": "v"})),
            vec!["Invalid value: \"/a\": prefix part must be non-empty".to_string()]
        );
        let prefix = format!("{}.example", "p".repeat(250));
        assert_eq!(
            messages(json!({format!("{prefix}/a"): "v"})),
            vec![format!(
                "Invalid value: \"{prefix}/a\": prefix part must be no more than 253 bytes"
            )]
        );
    }
}
