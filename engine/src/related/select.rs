//! Which objects a related-resource selector picks: `names` and `labelSelector`, both when
//! both are set; nothing when neither is (the API's documented semantics).

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};
use kbind_api::RelatedResourceSelector;

/// Whether `selector` picks the object called `name` with `labels`.
pub fn selects(selector: &RelatedResourceSelector, name: &str, labels: &BTreeMap<String, String>) -> bool {
    if selector.label_selector.is_none() && selector.names.is_empty() {
        return false;
    }
    let by_name = selector.names.is_empty() || selector.names.iter().any(|n| n == name);
    let by_labels = selector
        .label_selector
        .as_ref()
        .is_none_or(|s| label_selector_matches(s, labels));
    by_name && by_labels
}

/// Kubernetes label-selector semantics: every `matchLabels` pair and every requirement must
/// hold; an empty selector matches everything. An invalid requirement matches nothing, as the
/// API server would have refused it.
pub fn label_selector_matches(selector: &LabelSelector, labels: &BTreeMap<String, String>) -> bool {
    let pairs = selector
        .match_labels
        .iter()
        .flatten()
        .all(|(k, v)| labels.get(k) == Some(v));
    pairs
        && selector
            .match_expressions
            .iter()
            .flatten()
            .all(|r| requirement_holds(r, labels))
}

fn requirement_holds(r: &LabelSelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    let values = r.values.as_deref().unwrap_or_default();
    let value = labels.get(&r.key);
    match r.operator.as_str() {
        "In" => !values.is_empty() && value.is_some_and(|v| values.contains(v)),
        "NotIn" => !values.is_empty() && value.is_none_or(|v| !values.contains(v)),
        "Exists" => values.is_empty() && value.is_some(),
        "DoesNotExist" => values.is_empty() && value.is_none(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn selector(value: serde_json::Value) -> RelatedResourceSelector {
        serde_json::from_value(value).unwrap()
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect()
    }

    #[test]
    fn an_empty_selector_selects_nothing() {
        assert!(!selects(&selector(json!({})), "a", &labels(&[("x", "y")])));
    }

    #[test]
    fn an_empty_label_selector_selects_everything() {
        let s = selector(json!({"labelSelector": {}}));
        assert!(selects(&s, "a", &labels(&[])));
        assert!(selects(&s, "b", &labels(&[("x", "y")])));
    }

    #[test]
    fn names_select_exactly_those_names() {
        let s = selector(json!({"names": ["db", "cache"]}));
        assert!(selects(&s, "db", &labels(&[])));
        assert!(selects(&s, "cache", &labels(&[("any", "thing")])));
        assert!(!selects(&s, "dbx", &labels(&[])));
    }

    #[test]
    fn names_and_labels_must_both_match_when_both_are_set() {
        let s = selector(json!({"names": ["db"], "labelSelector": {"matchLabels": {"share": "yes"}}}));
        assert!(selects(&s, "db", &labels(&[("share", "yes")])));
        assert!(!selects(&s, "db", &labels(&[("share", "no")])));
        assert!(!selects(&s, "other", &labels(&[("share", "yes")])));
    }

    #[test]
    fn match_labels_needs_every_pair() {
        let s = selector(json!({"labelSelector": {"matchLabels": {"a": "1", "b": "2"}}}));
        assert!(selects(&s, "x", &labels(&[("a", "1"), ("b", "2"), ("c", "3")])));
        assert!(!selects(&s, "x", &labels(&[("a", "1")])));
        assert!(!selects(&s, "x", &labels(&[("a", "1"), ("b", "3")])));
    }

    #[test]
    fn match_expressions_follow_kubernetes_operators() {
        let expr = |op: &str, values: serde_json::Value| {
            selector(
                json!({"labelSelector": {"matchExpressions": [{"key": "tier", "operator": op, "values": values}]}}),
            )
        };
        let front = labels(&[("tier", "front")]);
        let back = labels(&[("tier", "back")]);
        let none = labels(&[]);
        let in_ = expr("In", json!(["front", "edge"]));
        assert!(selects(&in_, "x", &front));
        assert!(!selects(&in_, "x", &back));
        assert!(!selects(&in_, "x", &none));
        let not_in = expr("NotIn", json!(["front"]));
        assert!(!selects(&not_in, "x", &front));
        assert!(selects(&not_in, "x", &back));
        assert!(selects(&not_in, "x", &none), "NotIn matches a missing key");
        let exists = expr("Exists", json!([]));
        assert!(selects(&exists, "x", &back));
        assert!(!selects(&exists, "x", &none));
        let absent = expr("DoesNotExist", json!([]));
        assert!(!selects(&absent, "x", &back));
        assert!(selects(&absent, "x", &none));
    }

    #[test]
    fn invalid_requirements_match_nothing() {
        let bad_op =
            selector(json!({"labelSelector": {"matchExpressions": [{"key": "t", "operator": "Gt", "values": ["1"]}]}}));
        assert!(!selects(&bad_op, "x", &labels(&[("t", "2")])));
        let in_without_values =
            selector(json!({"labelSelector": {"matchExpressions": [{"key": "t", "operator": "In", "values": []}]}}));
        assert!(!selects(&in_without_values, "x", &labels(&[("t", "2")])));
        let exists_with_values = selector(
            json!({"labelSelector": {"matchExpressions": [{"key": "t", "operator": "Exists", "values": ["2"]}]}}),
        );
        assert!(!selects(&exists_with_values, "x", &labels(&[("t", "2")])));
    }
}
