//! PolicyRule parsing, request matching, the escalation "covers" check and Go-style rule rendering.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

use super::Attributes;

/// The wildcard that matches every verb, API group, resource or non-resource URL.
const ALL: &str = "*";

/// One `rbac.authorization.k8s.io/v1` PolicyRule.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PolicyRule {
    /// `verbs`.
    pub verbs: Vec<String>,
    /// `apiGroups`.
    pub api_groups: Vec<String>,
    /// `resources`, possibly `resource/subresource`.
    pub resources: Vec<String>,
    /// `resourceNames`.
    pub resource_names: Vec<String>,
    /// `nonResourceURLs`.
    pub non_resource_urls: Vec<String>,
}

impl PolicyRule {
    /// Reads a rule from its JSON form; absent or malformed lists read as empty.
    pub fn from_value(rule: &Value) -> Self {
        Self {
            verbs: strings(rule, "verbs"),
            api_groups: strings(rule, "apiGroups"),
            resources: strings(rule, "resources"),
            resource_names: strings(rule, "resourceNames"),
            non_resource_urls: strings(rule, "nonResourceURLs"),
        }
    }

    /// Reads the `rules` list of a Role or ClusterRole.
    pub fn list_from(role: &Value) -> Vec<Self> {
        role.get("rules")
            .and_then(Value::as_array)
            .map(|rules| rules.iter().map(Self::from_value).collect())
            .unwrap_or_default()
    }

    /// The JSON form, omitting empty optional lists as the API server does.
    pub fn to_value(&self) -> Value {
        let mut out = Map::new();
        out.insert("verbs".into(), json!(self.verbs));
        let optional = [
            ("apiGroups", &self.api_groups),
            ("resources", &self.resources),
            ("resourceNames", &self.resource_names),
            ("nonResourceURLs", &self.non_resource_urls),
        ];
        for (key, list) in optional {
            if !list.is_empty() {
                out.insert(key.into(), json!(list));
            }
        }
        Value::Object(out)
    }

    /// Whether this rule allows the request (kube's `RuleAllows`).
    pub fn allows(&self, attrs: &Attributes) -> bool {
        if !self.verb_matches(&attrs.verb) {
            return false;
        }
        match &attrs.path {
            Some(path) => self.non_resource_url_matches(path),
            None => {
                self.api_group_matches(&attrs.api_group)
                    && self.resource_matches(&attrs.resource, &attrs.subresource)
                    && self.resource_name_matches(attrs.name.as_deref().unwrap_or(""))
            }
        }
    }

    fn verb_matches(&self, verb: &str) -> bool {
        self.verbs.iter().any(|v| v == ALL || v == verb)
    }

    fn api_group_matches(&self, group: &str) -> bool {
        self.api_groups.iter().any(|g| g == ALL || g == group)
    }

    fn resource_matches(&self, resource: &str, subresource: &str) -> bool {
        let combined = if subresource.is_empty() {
            resource.to_owned()
        } else {
            format!("{resource}/{subresource}")
        };
        self.resources.iter().any(|r| {
            r == ALL || *r == combined || (!subresource.is_empty() && r.strip_prefix("*/") == Some(subresource))
        })
    }

    /// A rule without names matches any request; a rule with names only matches a request naming
    /// one of them, so an unnamed list or create never matches.
    fn resource_name_matches(&self, name: &str) -> bool {
        self.resource_names.is_empty() || self.resource_names.iter().any(|n| n == name)
    }

    fn non_resource_url_matches(&self, path: &str) -> bool {
        self.non_resource_urls.iter().any(|url| url_covers(url, path))
    }

    /// kube's `CompactString`: `{APIGroups:["apps"], Resources:["deployments"], Verbs:["get"]}`.
    pub fn compact_string(&self) -> String {
        let fields = [
            ("APIGroups", &self.api_groups),
            ("Resources", &self.resources),
            ("NonResourceURLs", &self.non_resource_urls),
            ("ResourceNames", &self.resource_names),
            ("Verbs", &self.verbs),
        ];
        let parts: Vec<String> = fields
            .iter()
            .filter(|(_, list)| !list.is_empty())
            .map(|(label, list)| format!("{label}:{}", go_quote_list(list)))
            .collect();
        format!("{{{}}}", parts.join(", "))
    }
}

fn strings(obj: &Value, key: &str) -> Vec<String> {
    obj.get(key)
        .and_then(Value::as_array)
        .map(|items| items.iter().filter_map(Value::as_str).map(str::to_owned).collect())
        .unwrap_or_default()
}

/// A non-resource URL pattern covers a path exactly, as `*`, or as a `prefix*` glob.
fn url_covers(pattern: &str, path: &str) -> bool {
    if pattern == ALL || pattern == path {
        return true;
    }
    pattern.ends_with('*') && path.starts_with(pattern.trim_end_matches('*'))
}

/// Splits a rule into rules of one group, resource, verb and name (or one URL and verb), so that
/// each piece is either wholly covered by a single owner rule or not at all.
fn breakdown(rule: &PolicyRule) -> Vec<PolicyRule> {
    let mut pieces = Vec::new();
    for group in &rule.api_groups {
        for resource in &rule.resources {
            for verb in &rule.verbs {
                let piece = |names: Vec<String>| PolicyRule {
                    verbs: vec![verb.clone()],
                    api_groups: vec![group.clone()],
                    resources: vec![resource.clone()],
                    resource_names: names,
                    non_resource_urls: Vec::new(),
                };
                if rule.resource_names.is_empty() {
                    pieces.push(piece(Vec::new()));
                } else {
                    pieces.extend(rule.resource_names.iter().map(|n| piece(vec![n.clone()])));
                }
            }
        }
    }
    for url in &rule.non_resource_urls {
        for verb in &rule.verbs {
            pieces.push(PolicyRule {
                verbs: vec![verb.clone()],
                non_resource_urls: vec![url.clone()],
                ..PolicyRule::default()
            });
        }
    }
    pieces
}

fn has(set: &[String], item: &str) -> bool {
    set.iter().any(|s| s == item)
}

fn has_all(set: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|w| has(set, w))
}

fn resources_cover(owner: &[String], wanted: &[String]) -> bool {
    if has(owner, ALL) || has_all(owner, wanted) {
        return true;
    }
    wanted.iter().all(|path| {
        has(owner, path)
            || path
                .split_once('/')
                .is_some_and(|(_, sub)| has(owner, &format!("*/{sub}")))
    })
}

fn urls_cover(owner: &[String], wanted: &[String]) -> bool {
    wanted.iter().all(|path| owner.iter().any(|o| url_covers(o, path)))
}

/// Whether `owner` covers `piece` (a rule of at most one verb, resource and name).
fn rule_covers(owner: &PolicyRule, piece: &PolicyRule) -> bool {
    let verbs = has(&owner.verbs, ALL) || has_all(&owner.verbs, &piece.verbs);
    let groups = has(&owner.api_groups, ALL) || has_all(&owner.api_groups, &piece.api_groups);
    let names = if piece.resource_names.is_empty() {
        owner.resource_names.is_empty()
    } else {
        owner.resource_names.is_empty() || has_all(&owner.resource_names, &piece.resource_names)
    };
    verbs
        && groups
        && resources_cover(&owner.resources, &piece.resources)
        && names
        && urls_cover(&owner.non_resource_urls, &piece.non_resource_urls)
}

/// kube's `Covers`: the pieces of `wanted` that no rule of `owner` covers (empty when covered).
pub fn uncovered(owner: &[PolicyRule], wanted: &[PolicyRule]) -> Vec<PolicyRule> {
    wanted
        .iter()
        .flat_map(breakdown)
        .filter(|piece| !owner.iter().any(|o| rule_covers(o, piece)))
        .collect()
}

/// kube's `CompactRules`: merges single group/resource rules that differ only by verb.
pub fn compact(rules: Vec<PolicyRule>) -> Vec<PolicyRule> {
    let mut compacted = Vec::new();
    let mut simple: BTreeMap<(String, String), PolicyRule> = BTreeMap::new();
    for rule in rules {
        let is_simple = rule.resource_names.is_empty()
            && rule.non_resource_urls.is_empty()
            && rule.api_groups.len() == 1
            && rule.resources.len() == 1;
        if !is_simple {
            compacted.push(rule);
            continue;
        }
        let key = (rule.api_groups[0].clone(), rule.resources[0].clone());
        match simple.get_mut(&key) {
            Some(existing) => existing.verbs.extend(rule.verbs),
            None => {
                simple.insert(key, rule);
            }
        }
    }
    compacted.extend(simple.into_values());
    compacted
}

/// The missing rules as kube lists them in an escalation error: compacted, rendered, sorted, unique.
pub fn describe_missing(missing: Vec<PolicyRule>) -> Vec<String> {
    let set: BTreeSet<String> = compact(missing).iter().map(PolicyRule::compact_string).collect();
    set.into_iter().collect()
}

/// Go's `%q` of one string.
pub fn go_quote(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if (c as u32) < 0x20 || c as u32 == 0x7f => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// Go's `%q` of a `[]string`: `["a" "b"]`.
pub fn go_quote_list(items: &[String]) -> String {
    let quoted: Vec<String> = items.iter().map(|s| go_quote(s)).collect();
    format!("[{}]", quoted.join(" "))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            api_groups: groups.iter().map(|s| s.to_string()).collect(),
            resources: resources.iter().map(|s| s.to_string()).collect(),
            ..PolicyRule::default()
        }
    }

    fn named(mut r: PolicyRule, names: &[&str]) -> PolicyRule {
        r.resource_names = names.iter().map(|s| s.to_string()).collect();
        r
    }

    fn urls(paths: &[&str], verbs: &[&str]) -> PolicyRule {
        PolicyRule {
            verbs: verbs.iter().map(|s| s.to_string()).collect(),
            non_resource_urls: paths.iter().map(|s| s.to_string()).collect(),
            ..PolicyRule::default()
        }
    }

    #[test]
    fn rule_round_trips_through_json_omitting_empty_lists() {
        let value = json!({"apiGroups": [""], "resources": ["pods"], "verbs": ["get"]});
        let parsed = PolicyRule::from_value(&value);
        assert_eq!(parsed, rule(&[""], &["pods"], &["get"]));
        assert_eq!(parsed.to_value(), value);
    }

    #[test]
    fn covers_table() {
        struct Case {
            name: &'static str,
            owner: Vec<PolicyRule>,
            wanted: Vec<PolicyRule>,
            missing: usize,
        }
        let cases = [
            Case {
                name: "exact match",
                owner: vec![rule(&["apps"], &["deployments"], &["get", "list"])],
                wanted: vec![rule(&["apps"], &["deployments"], &["get"])],
                missing: 0,
            },
            Case {
                name: "star everything",
                owner: vec![rule(&["*"], &["*"], &["*"])],
                wanted: vec![rule(&["x"], &["y/z"], &["escalate"])],
                missing: 0,
            },
            Case {
                name: "extra verb is missing",
                owner: vec![rule(&["apps"], &["deployments"], &["get"])],
                wanted: vec![rule(&["apps"], &["deployments"], &["get", "delete"])],
                missing: 1,
            },
            Case {
                name: "star subresource covers one subresource",
                owner: vec![rule(&[""], &["*/status"], &["update"])],
                wanted: vec![rule(&[""], &["pods/status"], &["update"])],
                missing: 0,
            },
            Case {
                name: "star subresource does not cover the resource",
                owner: vec![rule(&[""], &["*/status"], &["update"])],
                wanted: vec![rule(&[""], &["pods"], &["update"])],
                missing: 1,
            },
            Case {
                name: "named owner cannot grant unnamed",
                owner: vec![named(rule(&[""], &["secrets"], &["get"]), &["a"])],
                wanted: vec![rule(&[""], &["secrets"], &["get"])],
                missing: 1,
            },
            Case {
                name: "unnamed owner grants named",
                owner: vec![rule(&[""], &["secrets"], &["get"])],
                wanted: vec![named(rule(&[""], &["secrets"], &["get"]), &["a", "b"])],
                missing: 0,
            },
            Case {
                name: "named owner grants a subset of names",
                owner: vec![named(rule(&[""], &["secrets"], &["get"]), &["a"])],
                wanted: vec![named(rule(&[""], &["secrets"], &["get"]), &["a", "b"])],
                missing: 1,
            },
            Case {
                name: "url glob covers",
                owner: vec![urls(&["/apis/*"], &["get"])],
                wanted: vec![urls(&["/apis/apps/v1"], &["get"])],
                missing: 0,
            },
            Case {
                name: "resource rule does not cover url",
                owner: vec![rule(&["*"], &["*"], &["*"])],
                wanted: vec![urls(&["/healthz"], &["get"])],
                missing: 1,
            },
            Case {
                name: "url rule does not cover resource",
                owner: vec![urls(&["*"], &["*"])],
                wanted: vec![rule(&[""], &["pods"], &["get"])],
                missing: 1,
            },
            Case {
                name: "pieces may be covered by different owner rules",
                owner: vec![rule(&[""], &["pods"], &["get"]), rule(&[""], &["pods"], &["list"])],
                wanted: vec![rule(&[""], &["pods"], &["get", "list"])],
                missing: 0,
            },
        ];
        for case in cases {
            assert_eq!(
                uncovered(&case.owner, &case.wanted).len(),
                case.missing,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn missing_rules_are_compacted_by_group_resource_and_sorted() {
        let missing = uncovered(
            &[],
            &[
                rule(&["apps"], &["deployments"], &["get", "list"]),
                rule(&[""], &["secrets"], &["get"]),
                urls(&["/metrics"], &["get"]),
            ],
        );
        assert_eq!(
            describe_missing(missing),
            vec![
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#.to_string(),
                r#"{APIGroups:["apps"], Resources:["deployments"], Verbs:["get" "list"]}"#.to_string(),
                r#"{NonResourceURLs:["/metrics"], Verbs:["get"]}"#.to_string(),
            ]
        );
    }

    #[test]
    fn compact_string_lists_names_before_verbs() {
        let r = named(rule(&[""], &["configmaps"], &["get"]), &["cm"]);
        assert_eq!(
            r.compact_string(),
            r#"{APIGroups:[""], Resources:["configmaps"], ResourceNames:["cm"], Verbs:["get"]}"#
        );
    }

    #[test]
    fn go_quote_escapes_like_go() {
        assert_eq!(go_quote("a\"b\\c\nd"), r#""a\"b\\c\nd""#);
        assert_eq!(go_quote_list(&[]), "[]");
    }
}
