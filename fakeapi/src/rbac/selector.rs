//! `metav1.LabelSelector` matching (matchLabels and matchExpressions) for ClusterRole aggregation.

use serde_json::{Map, Value};

/// A label selector that `LabelSelectorAsSelector` would reject.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    /// The operator is not In, NotIn, Exists or DoesNotExist.
    #[error("{0:?} is not a valid label selector operator")]
    InvalidOperator(String),
    /// In and NotIn need values; Exists and DoesNotExist take none.
    #[error("invalid values for operator {operator:?} on key {key:?}")]
    InvalidValues {
        /// The expression's operator.
        operator: String,
        /// The expression's key.
        key: String,
    },
}

/// Whether `labels` satisfy `selector`; an empty selector selects everything.
pub fn matches(selector: &Value, labels: &Map<String, Value>) -> Result<bool, SelectorError> {
    let label = |key: &str| labels.get(key).and_then(Value::as_str);
    let mut selected = true;
    if let Some(match_labels) = selector.get("matchLabels").and_then(Value::as_object) {
        selected &= match_labels
            .iter()
            .all(|(k, v)| label(k).is_some() && label(k) == v.as_str());
    }
    let expressions = selector.get("matchExpressions").and_then(Value::as_array);
    for expression in expressions.into_iter().flatten() {
        // Every expression is validated even once the answer is known, as the conversion
        // to a selector fails as a whole.
        selected &= expression_matches(expression, &label)?;
    }
    Ok(selected)
}

fn expression_matches<'a>(expression: &Value, label: &impl Fn(&str) -> Option<&'a str>) -> Result<bool, SelectorError> {
    let key = expression.get("key").and_then(Value::as_str).unwrap_or_default();
    let operator = expression.get("operator").and_then(Value::as_str).unwrap_or_default();
    let values: Vec<&str> = expression
        .get("values")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let invalid = || SelectorError::InvalidValues {
        operator: operator.to_owned(),
        key: key.to_owned(),
    };
    let current = label(key);
    match operator {
        "In" | "NotIn" if values.is_empty() => Err(invalid()),
        "Exists" | "DoesNotExist" if !values.is_empty() => Err(invalid()),
        "In" => Ok(current.is_some_and(|v| values.contains(&v))),
        "NotIn" => Ok(current.is_none_or(|v| !values.contains(&v))),
        "Exists" => Ok(current.is_some()),
        "DoesNotExist" => Ok(current.is_none()),
        other => Err(SelectorError::InvalidOperator(other.to_owned())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels(v: Value) -> Map<String, Value> {
        v.as_object().cloned().unwrap_or_default()
    }

    #[test]
    fn selector_table() {
        let cases = [
            ("empty selects all", json!({}), json!({"a": "b"}), Ok(true)),
            (
                "matchLabels equal",
                json!({"matchLabels": {"a": "b"}}),
                json!({"a": "b"}),
                Ok(true),
            ),
            (
                "matchLabels differ",
                json!({"matchLabels": {"a": "b"}}),
                json!({"a": "c"}),
                Ok(false),
            ),
            (
                "matchLabels absent",
                json!({"matchLabels": {"a": "b"}}),
                json!({}),
                Ok(false),
            ),
            (
                "In hit",
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["x", "b"]}]}),
                json!({"a": "b"}),
                Ok(true),
            ),
            (
                "In absent",
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": ["b"]}]}),
                json!({}),
                Ok(false),
            ),
            (
                "NotIn absent label matches",
                json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}),
                json!({}),
                Ok(true),
            ),
            (
                "NotIn listed value",
                json!({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["b"]}]}),
                json!({"a": "b"}),
                Ok(false),
            ),
            (
                "Exists",
                json!({"matchExpressions": [{"key": "a", "operator": "Exists"}]}),
                json!({"a": ""}),
                Ok(true),
            ),
            (
                "DoesNotExist",
                json!({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}),
                json!({"a": "x"}),
                Ok(false),
            ),
            (
                "labels and expressions are ANDed",
                json!({"matchLabels": {"a": "b"}, "matchExpressions": [{"key": "c", "operator": "Exists"}]}),
                json!({"a": "b"}),
                Ok(false),
            ),
            (
                "In without values is invalid",
                json!({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}),
                json!({"a": "b"}),
                Err(SelectorError::InvalidValues {
                    operator: "In".into(),
                    key: "a".into(),
                }),
            ),
            (
                "unknown operator is invalid",
                json!({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["1"]}]}),
                json!({"a": "2"}),
                Err(SelectorError::InvalidOperator("Gt".into())),
            ),
        ];
        for (name, selector, lbls, want) in cases {
            assert_eq!(matches(&selector, &labels(lbls)), want, "{name}");
        }
    }
}
