//! Label and field selectors in their query-string form, parsed into kube's `Selector` for
//! matching (kube-core matches selectors but does not parse the string form).

use std::collections::{BTreeMap, BTreeSet};

use kbind_cluster::Error;
use kube::core::{Expression, Selector, SelectorExt};
use serde_json::Value;

/// A parsed label selector.
#[derive(Debug, Clone, Default)]
pub struct LabelSelector(Selector);

impl LabelSelector {
    /// Parses `app=a,tier!=b,env in (x,y),!legacy,gpu`.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut exprs = Vec::new();
        for term in split_terms(text) {
            let term = term.trim();
            if term.is_empty() {
                continue;
            }
            exprs.push(parse_term(term).ok_or_else(|| bad_selector(text))?);
        }
        Ok(Self(exprs.into_iter().collect()))
    }

    /// Whether the object's labels match.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.matches(&labels_of(obj))
    }
}

/// A parsed field selector (`metadata.name=a,metadata.namespace!=b`).
#[derive(Debug, Clone, Default)]
pub struct FieldSelector(Vec<(String, bool, String)>);

impl FieldSelector {
    /// Parses the selector; only `=`, `==` and `!=` exist for fields.
    pub fn parse(text: &str) -> Result<Self, Error> {
        let mut terms = Vec::new();
        for term in text.split(',').map(str::trim).filter(|t| !t.is_empty()) {
            let (key, equal, value) = if let Some((k, v)) = term.split_once("!=") {
                (k, false, v)
            } else if let Some((k, v)) = term.split_once("==") {
                (k, true, v)
            } else if let Some((k, v)) = term.split_once('=') {
                (k, true, v)
            } else {
                return Err(bad_selector(text));
            };
            terms.push((key.trim().to_string(), equal, value.trim().to_string()));
        }
        Ok(Self(terms))
    }

    /// The name an `metadata.name=x` term pins, if any (RBAC sees it as a named request).
    pub fn pinned_name(&self) -> Option<&str> {
        self.0
            .iter()
            .find(|(k, eq, _)| k == "metadata.name" && *eq)
            .map(|(_, _, v)| v.as_str())
    }

    /// Whether the object's fields match.
    pub fn matches(&self, obj: &Value) -> bool {
        self.0.iter().all(|(key, equal, value)| {
            let actual = field_value(obj, key);
            (actual.as_deref() == Some(value.as_str()) || (actual.is_none() && value.is_empty())) == *equal
        })
    }
}

/// The labels of an object.
pub fn labels_of(obj: &Value) -> BTreeMap<String, String> {
    obj.pointer("/metadata/labels")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

fn field_value(obj: &Value, key: &str) -> Option<String> {
    let pointer = format!("/{}", key.replace('.', "/"));
    match obj.pointer(&pointer)? {
        Value::String(s) => Some(s.clone()),
        Value::Null => None,
        other => Some(other.to_string()),
    }
}

/// Splits on commas that are not inside `( … )`.
fn split_terms(text: &str) -> Vec<&str> {
    let mut terms = Vec::new();
    let (mut depth, mut start) = (0usize, 0usize);
    for (i, c) in text.char_indices() {
        match c {
            '(' => depth += 1,
            ')' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                terms.push(&text[start..i]);
                start = i + 1;
            }
            _ => {}
        }
    }
    terms.push(&text[start..]);
    terms
}

fn parse_term(term: &str) -> Option<Expression> {
    if let Some(key) = term.strip_prefix('!') {
        return valid_key(key.trim()).then(|| Expression::DoesNotExist(key.trim().to_string()));
    }
    for (op, negate) in [(" notin ", true), (" in ", false)] {
        if let Some((key, set)) = term.split_once(op) {
            let set = set.trim().strip_prefix('(')?.strip_suffix(')')?;
            let values: BTreeSet<String> = set
                .split(',')
                .map(|v| v.trim().to_string())
                .filter(|v| !v.is_empty())
                .collect();
            let key = key.trim().to_string();
            if !valid_key(&key) {
                return None;
            }
            return Some(if negate {
                Expression::NotIn(key, values)
            } else {
                Expression::In(key, values)
            });
        }
    }
    if let Some((k, v)) = term.split_once("!=") {
        return valid_key(k.trim()).then(|| Expression::NotEqual(k.trim().to_string(), v.trim().to_string()));
    }
    if let Some((k, v)) = term.split_once("==").or_else(|| term.split_once('=')) {
        return valid_key(k.trim()).then(|| Expression::Equal(k.trim().to_string(), v.trim().to_string()));
    }
    valid_key(term).then(|| Expression::Exists(term.to_string()))
}

fn valid_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_ascii_alphanumeric() || "-_./".contains(c))
}

fn bad_selector(text: &str) -> Error {
    Error::BadRequest {
        message: format!("unable to parse requirement: invalid selector: {text:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn obj(labels: Value) -> Value {
        json!({"metadata": {"name": "a", "namespace": "ns1", "labels": labels}})
    }

    #[test]
    fn label_selectors_match_like_the_apiserver() {
        let o = obj(json!({"app": "web", "tier": "front"}));
        for (sel, want) in [
            ("app=web", true),
            ("app==web", true),
            ("app!=web", false),
            ("app in (web,db)", true),
            ("app notin (web)", false),
            ("tier", true),
            ("!tier", false),
            ("!missing", true),
            ("app=web,tier in (front, back)", true),
            ("app=web,tier=back", false),
            ("", true),
        ] {
            assert_eq!(LabelSelector::parse(sel).unwrap().matches(&o), want, "{sel}");
        }
    }

    #[test]
    fn malformed_label_selector_is_a_bad_request() {
        assert!(matches!(
            LabelSelector::parse("app in web"),
            Err(Error::BadRequest { .. })
        ));
        assert!(matches!(LabelSelector::parse("a b"), Err(Error::BadRequest { .. })));
    }

    #[test]
    fn field_selectors_match_metadata() {
        let o = obj(json!({}));
        assert!(FieldSelector::parse("metadata.name=a").unwrap().matches(&o));
        assert!(!FieldSelector::parse("metadata.name!=a").unwrap().matches(&o));
        assert!(
            FieldSelector::parse("metadata.namespace==ns1,metadata.name=a")
                .unwrap()
                .matches(&o)
        );
        assert_eq!(
            FieldSelector::parse("metadata.name=a").unwrap().pinned_name(),
            Some("a")
        );
        assert!(FieldSelector::parse("metadata.name").is_err());
    }
}
