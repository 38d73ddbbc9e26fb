//! Sets of field paths as structured-merge-diff keeps them, with the `fieldsV1` wire form.
//!
//! A path element is kept in its `fieldsV1` spelling (`f:name`, `k:{"name":"a"}`, `v:"x"`,
//! `i:0`): that spelling is canonical, orders deterministically and needs no conversion.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value};

/// One step of a path, spelled as in `fieldsV1`.
pub type PathElement = String;

/// A set of paths: the elements that are members at this level, and the sets below each element.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FieldSet {
    members: BTreeSet<PathElement>,
    children: BTreeMap<PathElement, FieldSet>,
}

/// The element for a map field or struct field.
pub fn field(name: &str) -> PathElement {
    format!("f:{name}")
}

/// The element for a list-map item: its key fields as a JSON object (keys sorted, as SMD writes them).
pub fn key(fields: &[(String, Value)]) -> PathElement {
    let mut sorted: Vec<&(String, Value)> = fields.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let object: Map<String, Value> = sorted.into_iter().map(|(k, v)| (k.clone(), v.clone())).collect();
    format!("k:{}", Value::Object(object))
}

/// The element for a set item.
pub fn value(item: &Value) -> PathElement {
    format!("v:{item}")
}

/// The element for an item of a list addressed by position.
pub fn index(i: usize) -> PathElement {
    format!("i:{i}")
}

/// An element as kube-apiserver prints it in conflict messages (`.spec`, `[name="a"]`, `[="x"]`).
pub fn display_element(pe: &str) -> String {
    if let Some(name) = pe.strip_prefix("f:") {
        return format!(".{name}");
    }
    if let Some(json) = pe.strip_prefix("k:")
        && let Ok(Value::Object(fields)) = serde_json::from_str::<Value>(json)
    {
        let parts: Vec<String> = fields
            .iter()
            .map(|(k, v)| format!("{k}={}", display_value(v)))
            .collect();
        return format!("[{}]", parts.join(","));
    }
    if let Some(json) = pe.strip_prefix("v:")
        && let Ok(v) = serde_json::from_str::<Value>(json)
    {
        return format!("[={}]", display_value(&v));
    }
    if let Some(i) = pe.strip_prefix("i:") {
        return format!("[{i}]");
    }
    pe.to_string()
}

/// A whole path as kube-apiserver prints it (`.spec.containers[name="a"].image`).
pub fn display_path(path: &[PathElement]) -> String {
    path.iter().map(|pe| display_element(pe)).collect()
}

fn display_value(v: &Value) -> String {
    // SMD quotes strings (Go %q) and prints everything else as is; JSON quoting agrees for
    // the strings that occur in keys.
    v.to_string()
}

impl FieldSet {
    /// The empty set.
    pub fn new() -> Self {
        Self::default()
    }

    /// Whether no path is in the set.
    pub fn is_empty(&self) -> bool {
        self.members.is_empty() && self.children.values().all(FieldSet::is_empty)
    }

    /// Adds `path` (a path of no elements is ignored: the root is never a member).
    pub fn insert(&mut self, path: &[PathElement]) {
        match path {
            [] => {}
            [last] => {
                self.members.insert(last.clone());
            }
            [first, rest @ ..] => self.children.entry(first.clone()).or_default().insert(rest),
        }
    }

    /// Whether `path` is in the set.
    #[cfg(test)]
    pub fn has(&self, path: &[PathElement]) -> bool {
        match path {
            [] => false,
            [last] => self.members.contains(last),
            [first, rest @ ..] => self.children.get(first).is_some_and(|c| c.has(rest)),
        }
    }

    /// Whether the element `pe` directly below is a member.
    pub fn has_member(&self, pe: &str) -> bool {
        self.members.contains(pe)
    }

    /// The paths below `pe`, relative to it.
    pub fn child(&self, pe: &str) -> Option<&FieldSet> {
        self.children.get(pe).filter(|c| !c.is_empty())
    }

    /// Marks `pe` as a member at this level.
    pub fn insert_member(&mut self, pe: PathElement) {
        self.members.insert(pe);
    }

    /// Sets the paths below `pe` (dropping them when empty).
    pub fn set_child(&mut self, pe: PathElement, child: FieldSet) {
        if child.is_empty() {
            self.children.remove(&pe);
        } else {
            self.children.insert(pe, child);
        }
    }

    /// The elements that have paths below them.
    pub fn child_elements(&self) -> impl Iterator<Item = &PathElement> {
        self.children.keys()
    }

    /// Paths in either set.
    pub fn union(&self, other: &FieldSet) -> FieldSet {
        let mut out = self.clone();
        out.members.extend(other.members.iter().cloned());
        for (pe, child) in &other.children {
            let merged = match out.children.get(pe) {
                Some(mine) => mine.union(child),
                None => child.clone(),
            };
            out.set_child(pe.clone(), merged);
        }
        out
    }

    /// Paths of `self` that are not in `other` (exact paths: a member of `other` does not
    /// remove what lies below it in `self`).
    pub fn difference(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.difference(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            let rest = match other.children.get(pe) {
                Some(theirs) => child.difference(theirs),
                None => child.clone(),
            };
            out.set_child(pe.clone(), rest);
        }
        out
    }

    /// Paths in both sets.
    pub fn intersection(&self, other: &FieldSet) -> FieldSet {
        let mut out = FieldSet {
            members: self.members.intersection(&other.members).cloned().collect(),
            children: BTreeMap::new(),
        };
        for (pe, child) in &self.children {
            if let Some(theirs) = other.children.get(pe) {
                out.set_child(pe.clone(), child.intersection(theirs));
            }
        }
        out
    }

    /// Every path, members of a level before the levels below (SMD's iteration order).
    pub fn paths(&self) -> Vec<Vec<PathElement>> {
        let mut out = Vec::new();
        self.collect_paths(&mut Vec::new(), &mut out);
        out
    }

    fn collect_paths(&self, prefix: &mut Vec<PathElement>, out: &mut Vec<Vec<PathElement>>) {
        for pe in &self.members {
            let mut path = prefix.clone();
            path.push(pe.clone());
            out.push(path);
        }
        for (pe, child) in &self.children {
            prefix.push(pe.clone());
            child.collect_paths(prefix, out);
            prefix.pop();
        }
    }

    /// The `fieldsV1` form: one JSON object per level, `"."` marking an element that is a
    /// member and also has paths below it.
    pub fn to_fields_v1(&self) -> Value {
        let mut out = Map::new();
        for pe in &self.members {
            out.insert(pe.clone(), Value::Object(Map::new()));
        }
        for (pe, child) in &self.children {
            if child.is_empty() {
                continue;
            }
            let Value::Object(mut below) = child.to_fields_v1() else {
                continue;
            };
            if self.members.contains(pe) {
                below.insert(".".to_string(), Value::Object(Map::new()));
            }
            out.insert(pe.clone(), Value::Object(below));
        }
        Value::Object(out)
    }

    /// Parses the `fieldsV1` form.
    pub fn from_fields_v1(v: &Value) -> Result<FieldSet, String> {
        let Value::Object(entries) = v else {
            return Err(format!("expected an object in fieldsV1, got {v}"));
        };
        let mut out = FieldSet::new();
        for (pe, below) in entries {
            if pe == "." {
                continue;
            }
            if !["f:", "k:", "v:", "i:"].iter().any(|p| pe.starts_with(p)) {
                return Err(format!("unknown path element {pe:?} in fieldsV1"));
            }
            let Value::Object(inner) = below else {
                return Err(format!("expected an object under {pe:?} in fieldsV1"));
            };
            if inner.is_empty() || inner.contains_key(".") {
                out.members.insert(pe.clone());
            }
            out.set_child(pe.clone(), FieldSet::from_fields_v1(below)?);
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn p(elems: &[&str]) -> Vec<PathElement> {
        elems.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn fields_v1_round_trips_with_dot_for_members_that_have_children() {
        let v = json!({
            "f:metadata": {"f:labels": {".": {}, "f:app": {}}},
            "f:spec": {"f:containers": {"k:{\"name\":\"a\"}": {".": {}, "f:image": {}, "f:name": {}}}},
        });
        let set = FieldSet::from_fields_v1(&v).unwrap();
        assert!(set.has(&p(&["f:metadata", "f:labels"])));
        assert!(set.has(&p(&["f:metadata", "f:labels", "f:app"])));
        assert!(!set.has(&p(&["f:metadata"])));
        assert!(set.has(&p(&["f:spec", "f:containers", "k:{\"name\":\"a\"}"])));
        assert_eq!(set.to_fields_v1(), v);
    }

    #[test]
    fn malformed_fields_v1_is_refused() {
        assert!(FieldSet::from_fields_v1(&json!({"spec": {}})).is_err());
        assert!(FieldSet::from_fields_v1(&json!({"f:spec": 1})).is_err());
        assert!(FieldSet::from_fields_v1(&json!([])).is_err());
    }

    #[test]
    fn set_algebra_works_on_exact_paths() {
        let mut a = FieldSet::new();
        a.insert(&p(&["f:spec", "f:a"]));
        a.insert(&p(&["f:spec", "f:b"]));
        a.insert(&p(&["f:spec"]));
        let mut b = FieldSet::new();
        b.insert(&p(&["f:spec", "f:b"]));
        b.insert(&p(&["f:spec", "f:c"]));

        let diff = a.difference(&b);
        assert_eq!(diff.paths(), vec![p(&["f:spec"]), p(&["f:spec", "f:a"])]);
        let both = a.intersection(&b);
        assert_eq!(both.paths(), vec![p(&["f:spec", "f:b"])]);
        let all = a.union(&b);
        assert_eq!(all.paths().len(), 4);
        assert!(a.difference(&a).is_empty());
        assert!(a.difference(&a).to_fields_v1() == json!({}));
    }

    #[test]
    fn keys_are_encoded_sorted_and_displayed_like_kube_apiserver() {
        let pe = key(&[("protocol".into(), json!("TCP")), ("containerPort".into(), json!(80))]);
        assert_eq!(pe, r#"k:{"containerPort":80,"protocol":"TCP"}"#);
        let path = vec![field("spec"), field("ports"), pe, field("name")];
        assert_eq!(
            display_path(&path),
            r#".spec.ports[containerPort=80,protocol="TCP"].name"#
        );
        assert_eq!(display_element(&value(&json!("x"))), r#"[="x"]"#);
        assert_eq!(display_element(&index(3)), "[3]");
    }
}
