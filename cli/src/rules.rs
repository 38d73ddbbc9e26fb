//! The related-resource rules a bind agrees to, as the user sees them: each rule of each binding
//! with where it applies (a Binding's namespace, or every namespace in use for a ClusterBinding),
//! the bound APIs whose objects its references are read from, its kind, its selector in words
//! and whether status flows back. What is shown and compared is always parsed from the bundle's
//! own bindings, with the konnector's types: a field this kbind does not know refuses the bundle,
//! since it could select more than can be shown.

use std::sync::LazyLock;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kbind_api::service::CatalogExport;
use kbind_api::{RelatedResource, RelatedResourceDirection, ResourceScope};
use serde_json::Value;

use crate::output::{clean, table};

/// Where a ClusterBinding's related objects are looked for and land.
pub const ALL_IN_USE: &str = "every namespace holding objects of the bound APIs";

/// One related-resource rule of one binding.
#[derive(Debug, Clone, PartialEq)]
pub struct PlacedRule {
    /// The Binding's namespace; `None` for a ClusterBinding ([`ALL_IN_USE`]).
    pub namespace: Option<String>,
    /// The binding's APIs (`<plural>.<group>`), sorted: the objects references are read from.
    pub apis: Vec<String>,
    /// The rule as the konnector reads it.
    pub rule: RelatedResource,
}

/// The rules of a bundle binding (`Binding` or `ClusterBinding`), parsed the way the konnector
/// parses them; `what` names the binding in the error.
pub fn of_binding(binding: &Value, what: &str) -> Result<Vec<PlacedRule>, String> {
    let namespace = binding["metadata"]["namespace"].as_str().map(str::to_string);
    let mut apis: Vec<String> = binding["spec"]["apis"]
        .as_array()
        .map(|apis| {
            apis.iter()
                .filter_map(|a| a["name"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    apis.sort();
    apis.dedup();
    let rules = match &binding["spec"]["relatedResources"] {
        Value::Null => return Ok(Vec::new()),
        Value::Array(rules) => rules,
        _ => return Err(format!("{what} has relatedResources that are not a list")),
    };
    rules
        .iter()
        .enumerate()
        .map(|(i, raw)| {
            let at = format!("{what}'s relatedResources[{i}]");
            if let Some(field) = unknown_field(raw, &RULE_SCHEMA, "") {
                return Err(format!(
                    "{at} has a field this kbind does not know ({}): it may select more than can be shown; \
                     upgrade kbind, or ask the provider why its bundle carries it",
                    clean(&field)
                ));
            }
            let rule: RelatedResource = serde_json::from_value(raw.clone())
                .map_err(|e| format!("{at} is not a rule kbind can read: {}", clean(&e.to_string())))?;
            Ok(PlacedRule {
                namespace: namespace.clone(),
                apis: apis.clone(),
                rule,
            })
        })
        .collect()
}

/// The rules an honest gateway's bundle carries for `export` bound in `namespaces` (the
/// gateway's bundle builder: a ClusterBinding of the cluster-scoped APIs, a Binding of the
/// namespaced ones in each namespace, each with all of the Export's rules).
pub fn of_export(export: &CatalogExport, namespaces: &[String]) -> Vec<PlacedRule> {
    let apis_of = |scope: ResourceScope| {
        let mut names: Vec<String> = export
            .apis
            .iter()
            .filter(|a| a.scope == Some(scope))
            .map(|a| a.name.clone())
            .collect();
        names.sort();
        names.dedup();
        names
    };
    let (cluster, namespaced) = (apis_of(ResourceScope::Cluster), apis_of(ResourceScope::Namespaced));
    let mut places: Vec<(Option<String>, &Vec<String>)> = Vec::new();
    if !cluster.is_empty() {
        places.push((None, &cluster));
    }
    if !namespaced.is_empty() {
        places.extend(namespaces.iter().map(|n| (Some(n.clone()), &namespaced)));
    }
    places
        .into_iter()
        .flat_map(|(namespace, apis)| {
            export.related_resources.iter().map(move |rule| PlacedRule {
                namespace: namespace.clone(),
                apis: apis.clone(),
                rule: rule.clone(),
            })
        })
        .collect()
}

/// The rules of `bundle` that are not among those `shown` before.
pub fn unshown<'a>(bundle: &'a [PlacedRule], shown: &[PlacedRule]) -> Vec<&'a PlacedRule> {
    bundle.iter().filter(|r| !shown.contains(r)).collect()
}

/// Whether a rule only delivers Secrets or ConfigMaps of the provider into this cluster, which
/// is shown without asking; every other rule takes from this cluster or writes another kind
/// into it, and is asked for.
fn plain_delivery(rule: &RelatedResource) -> bool {
    let kind = rule.kind();
    rule.direction == RelatedResourceDirection::FromProvider
        && (kind.is_secrets() || kind == kbind_api::RelatedKind::config_maps())
}

/// What the user is asked to agree to for `rules` ("copy the above from this cluster to the
/// provider", …), or `None` when nothing needs asking.
pub fn consent(rules: &[PlacedRule]) -> Option<&'static str> {
    let takes = rules
        .iter()
        .any(|r| r.rule.direction == RelatedResourceDirection::FromConsumer);
    let writes = rules
        .iter()
        .any(|r| !plain_delivery(&r.rule) && r.rule.direction == RelatedResourceDirection::FromProvider);
    match (takes, writes) {
        (true, true) => Some(
            "copy the above from this cluster to the provider, and let the provider write the above into this cluster",
        ),
        (true, false) => Some("copy the above from this cluster to the provider"),
        (false, true) => Some("let the provider write the above into this cluster"),
        (false, false) => None,
    }
}

/// The rules as two tables, what the provider writes into this cluster (`FromProvider`) and
/// what this cluster hands to the provider (`FromConsumer`), each with its warnings; nothing
/// when there are no rules.
pub fn text(rules: &[PlacedRule]) -> String {
    let of = |direction: RelatedResourceDirection| -> Vec<&PlacedRule> {
        rules.iter().filter(|r| r.rule.direction == direction).collect()
    };
    let (brought, taken) = (
        of(RelatedResourceDirection::FromProvider),
        of(RelatedResourceDirection::FromConsumer),
    );
    let mut out = String::new();
    if !brought.is_empty() {
        out.push_str("These related-resource rules (FromProvider) copy objects of the PROVIDER into this cluster:\n");
        out.push_str(&rows_table(&brought, "INTO"));
        let mut written: Vec<String> = Vec::new();
        for kind in brought
            .iter()
            .filter(|r| !plain_delivery(&r.rule))
            .map(|r| r.rule.kind().to_string())
        {
            if !written.contains(&kind) {
                written.push(kind);
            }
        }
        if !written.is_empty() {
            out.push_str(&format!(
                "NOTE: the konnector creates, changes and deletes {} objects in this cluster for the provider, not only Secrets and ConfigMaps.\n",
                clean(&written.join(", "))
            ));
        }
        if brought.iter().any(|r| r.rule.sync_status) {
            out.push_str(
                "STATUS BACK yes: the status of the copy in this cluster is written onto the provider's object.\n",
            );
        }
    }
    if !taken.is_empty() {
        out.push_str("These related-resource rules (FromConsumer) copy objects of THIS cluster to the provider:\n");
        out.push_str(&rows_table(&taken, "FROM"));
        if taken.iter().any(|r| selects(r).everything) {
            out.push_str(
                "WARNING: a rule selects every object of its kind: every one of them in those namespaces goes to the provider.\n",
            );
        }
        if taken.iter().any(|r| r.rule.sync_status) {
            out.push_str(
                "STATUS BACK yes: the provider writes the status of its copy onto the object in this cluster.\n",
            );
        }
    }
    out
}

/// What makes two rules one row: all they show but their namespace.
#[derive(PartialEq)]
struct RowKey {
    kind: String,
    selects: String,
    status: bool,
    in_use: bool,
}

/// One row per rule and place, rules that differ only in their namespace on one row.
fn rows_table(rules: &[&PlacedRule], place: &str) -> String {
    // Each row with its namespaces, in the order first seen.
    let mut rows: Vec<(RowKey, Vec<String>)> = Vec::new();
    for rule in rules {
        let key = RowKey {
            kind: kind_text(&rule.rule),
            selects: selects(rule).text,
            status: rule.rule.sync_status,
            in_use: rule.namespace.is_none(),
        };
        let namespace = rule.namespace.clone().unwrap_or_default();
        match rows.iter_mut().find(|(k, _)| *k == key) {
            Some((_, namespaces)) if !namespaces.contains(&namespace) => namespaces.push(namespace),
            Some(_) => {}
            None => rows.push((key, vec![namespace])),
        }
    }
    let rows = rows
        .into_iter()
        .map(|(key, namespaces)| {
            let place = match (key.in_use, namespaces.as_slice()) {
                (true, _) => ALL_IN_USE.to_string(),
                (false, [one]) => format!("namespace {one}"),
                (false, many) => format!("namespaces {}", many.join(", ")),
            };
            vec![
                key.kind,
                place,
                key.selects,
                if key.status { "yes" } else { "no" }.to_string(),
            ]
        })
        .collect();
    table(&["COPIES", place, "SELECTS", "STATUS BACK"], rows)
}

/// The rule's kind as kubectl names a resource (`secrets`, `ingresses.networking.k8s.io`), with
/// its version when the rule pins one.
pub fn kind_text(rule: &RelatedResource) -> String {
    match &rule.version {
        Some(version) => format!("{} ({version})", rule.kind()),
        None => rule.kind().to_string(),
    }
}

/// A rule's selector in words.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Selects {
    /// E.g. `labels {"matchLabels":{"app":"db"}} or names at spec.passwordSecretRef.name of each
    /// databases.example.org`.
    pub text: String,
    /// Whether it takes every object of its kind (a label selector that matches all but, maybe,
    /// some labelled ones, and no names narrowing it).
    pub everything: bool,
}

/// How `rule` selects: the label and name parts (both must match), or the names found at each
/// reference path of the bound objects.
pub fn selects(rule: &PlacedRule) -> Selects {
    let selector = &rule.rule.selector;
    let labels = selector.label_selector.as_ref();
    let names = &selector.names;
    let labels_empty = labels.is_some_and(|s| {
        s.match_labels.as_ref().is_none_or(|m| m.is_empty())
            && s.match_expressions.as_ref().is_none_or(|e| e.is_empty())
    });
    let everything_but = !labels_empty && labels.is_some_and(selects_everything);
    let everything = (labels_empty || everything_but) && names.is_empty();
    let shown = |s: &LabelSelector| serde_json::to_string(s).unwrap_or_default();
    let mut parts = Vec::new();
    if everything && everything_but {
        parts.push(format!(
            "EVERY one not excluded by label (labels {})",
            labels.map(shown).unwrap_or_default()
        ));
    } else if everything {
        parts.push("EVERY one (labelSelector: {})".to_string());
    } else {
        let mut both = Vec::new();
        if let Some(s) = labels
            && !labels_empty
        {
            both.push(format!("labels {}", shown(s)));
        }
        if !names.is_empty() {
            both.push(format!("names {}", names.join(",")));
        }
        match both.as_slice() {
            [] => {}
            [one] => parts.push(one.clone()),
            _ if selector.references.is_empty() => parts.push(both.join(" and ")),
            _ => parts.push(format!("({})", both.join(" and "))),
        }
    }
    if !selector.references.is_empty() {
        let of = if rule.apis.is_empty() {
            "bound object".to_string()
        } else {
            rule.apis.join(", ")
        };
        let paths: Vec<&str> = selector.references.iter().map(|r| r.path.as_str()).collect();
        parts.push(format!("names at {} of each {of}", paths.join(" or ")));
    }
    let text = if parts.is_empty() {
        "none (empty selector)".to_string()
    } else {
        parts.join(" or ")
    };
    Selects {
        text: clean(&text),
        everything,
    }
}

/// Whether a label selector matches every object that lacks some labels: no `matchLabels` and
/// only `NotIn`/`DoesNotExist` expressions. Such a selector takes every object of its kind a
/// namespace holds unless someone labelled it to be left out.
fn selects_everything(selector: &LabelSelector) -> bool {
    selector.match_labels.as_ref().is_none_or(|m| m.is_empty())
        && selector.match_expressions.as_ref().is_none_or(|e| {
            e.iter()
                .all(|e| matches!(e.operator.as_str(), "NotIn" | "DoesNotExist"))
        })
}

/// The schema of one related-resource rule, as the consumer's API server keeps it (the
/// Binding CRD this kbind installs).
static RULE_SCHEMA: LazyLock<Value> = LazyLock::new(|| {
    kbind_api::crds()
        .into_iter()
        .find(|c| c.spec.names.kind == "Binding")
        .and_then(|crd| crd.spec.versions.into_iter().next())
        .and_then(|v| v.schema)
        .and_then(|s| s.open_api_v3_schema)
        .and_then(|s| serde_json::to_value(s).ok())
        .map(|s| s["properties"]["spec"]["properties"]["relatedResources"]["items"].clone())
        .unwrap_or(Value::Null)
});

/// The dotted name of the first field of `value` that `schema` does not declare, if any.
fn unknown_field(value: &Value, schema: &Value, at: &str) -> Option<String> {
    let join = |key: &str| {
        if at.is_empty() {
            key.to_string()
        } else {
            format!("{at}.{key}")
        }
    };
    match value {
        Value::Object(fields) => {
            let Some(properties) = schema["properties"].as_object() else {
                // A map (`matchLabels`) or an open object: any key.
                return None;
            };
            fields.iter().find_map(|(key, field)| match properties.get(key) {
                None => Some(join(key)),
                Some(inner) => unknown_field(field, inner, &join(key)),
            })
        }
        Value::Array(items) => items
            .iter()
            .find_map(|item| unknown_field(item, &schema["items"], &format!("{at}[]"))),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn binding(namespace: Option<&str>, rules: Value) -> Value {
        let mut binding = json!({"metadata": {"name": "b"},
            "spec": {"apis": [{"name": "widgets.example.org"}], "relatedResources": rules}});
        if let Some(ns) = namespace {
            binding["metadata"]["namespace"] = json!(ns);
        }
        binding
    }

    fn parsed(namespace: Option<&str>, rules: Value) -> Vec<PlacedRule> {
        of_binding(&binding(namespace, rules), "Binding b").expect("readable rules")
    }

    fn snapshot(name: &str, text: &str) {
        insta::with_settings!({snapshot_path => "../tests/snapshots", prepend_module_to_snapshot => false}, {
            insta::assert_snapshot!(name, text);
        });
    }

    #[test]
    fn every_rule_is_shown_with_its_kind_selector_references_and_status() {
        let mut rules = parsed(
            Some("team-a"),
            json!([
                {"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer", "syncStatus": true,
                 "selector": {"references": [{"path": "spec.ingressRef.name"}, {"path": "spec.tls[].ingress"}]}},
                {"resource": "secrets", "direction": "FromConsumer",
                 "selector": {"labelSelector": {"matchLabels": {"app": "shop"}}, "names": ["db"],
                              "references": [{"path": "spec.passwordSecretRef.name"}]}},
                {"resource": "configmaps", "direction": "FromConsumer", "selector": {"labelSelector": {}}},
                {"resource": "secrets", "direction": "FromProvider", "selector": {"names": ["widget-credentials"]}},
                {"group": "net.example.org", "resource": "subnets", "version": "v1beta1", "direction": "FromProvider",
                 "syncStatus": true, "selector": {"references": [{"path": "status.subnetName"}]}},
            ]),
        );
        rules.extend(parsed(
            Some("team-b"),
            json!([{"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer", "syncStatus": true,
                 "selector": {"references": [{"path": "spec.ingressRef.name"}, {"path": "spec.tls[].ingress"}]}}]),
        ));
        rules.extend(parsed(
            None,
            json!([{"resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["shared"]}}]),
        ));
        snapshot("rules__every_kind_selector_and_status", &text(&rules));
        assert_eq!(
            consent(&rules),
            Some(
                "copy the above from this cluster to the provider, and let the provider write the above into this cluster"
            )
        );
    }

    #[test]
    fn a_selector_of_exclusions_only_counts_as_everything_and_references_do_not_narrow_it() {
        let rule = |selector: Value| {
            parsed(
                Some("team-a"),
                json!([{"resource": "secrets", "direction": "FromConsumer", "selector": selector}]),
            )
            .remove(0)
        };
        for everything in [
            json!({"labelSelector": {}}),
            json!({"labelSelector": {"matchExpressions": [{"key": "private", "operator": "DoesNotExist"}]}}),
            json!({"labelSelector": {"matchLabels": {}, "matchExpressions": [{"key": "t", "operator": "NotIn", "values": ["x"]}]}}),
            json!({"labelSelector": {}, "references": [{"path": "spec.a"}]}),
        ] {
            let s = selects(&rule(everything.clone()));
            assert!(s.everything && s.text.starts_with("EVERY"), "{everything}: {s:?}");
        }
        for narrow in [
            json!({"labelSelector": {"matchLabels": {"app": "db"}}}),
            json!({"labelSelector": {"matchExpressions": [{"key": "app", "operator": "Exists"}]}}),
            json!({"labelSelector": {}, "names": ["a"]}),
            json!({"references": [{"path": "spec.a"}]}),
        ] {
            assert!(!selects(&rule(narrow.clone())).everything, "{narrow}");
        }
        assert_eq!(
            selects(&rule(json!({"references": [{"path": "spec.passwordSecretRef.name"}]}))).text,
            "names at spec.passwordSecretRef.name of each widgets.example.org"
        );
        assert_eq!(selects(&rule(json!({}))).text, "none (empty selector)");
    }

    #[test]
    fn only_plain_deliveries_go_without_asking() {
        let plain = parsed(
            Some("a"),
            json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["x"]}},
                   {"resource": "secrets", "direction": "FromProvider", "selector": {"names": ["y"]}}]),
        );
        assert_eq!(consent(&plain), None);
        let written = parsed(
            Some("a"),
            json!([{"group": "rbac.authorization.k8s.io", "resource": "rolebindings", "direction": "FromProvider",
                    "selector": {"names": ["x"]}}]),
        );
        assert_eq!(
            consent(&written),
            Some("let the provider write the above into this cluster")
        );
        assert!(text(&written).contains("rolebindings.rbac.authorization.k8s.io objects in this cluster"));
    }

    #[test]
    fn a_rule_with_a_field_this_kbind_does_not_know_or_cannot_read_refuses_the_bundle() {
        let unknown = of_binding(
            &binding(
                Some("a"),
                json!([{"resource": "secrets", "direction": "FromConsumer",
                        "selector": {"names": ["a"], "template": {"name": "{{ .spec.x }}"}}}]),
            ),
            "Binding a/b",
        )
        .expect_err("an unknown field");
        assert!(
            unknown.contains("Binding a/b's relatedResources[0]") && unknown.contains("selector.template"),
            "{unknown}"
        );
        let nested = of_binding(
            &binding(
                Some("a"),
                json!([{"resource": "secrets", "direction": "FromConsumer",
                        "selector": {"references": [{"path": "spec.a", "fromAnyNamespace": true}]}}]),
            ),
            "Binding a/b",
        )
        .expect_err("an unknown field in a list item");
        assert!(nested.contains("selector.references[].fromAnyNamespace"), "{nested}");
        // Label values are a map: any key is fine.
        parsed(
            Some("a"),
            json!([{"resource": "secrets", "direction": "FromConsumer",
                    "selector": {"labelSelector": {"matchLabels": {"anything.example/x": "y"}}}}]),
        );
        let misspelt = of_binding(
            &binding(
                Some("a"),
                json!([{"resource": "secrets", "direction": "FromConsumr", "selector": {}}]),
            ),
            "Binding a/b",
        )
        .expect_err("a direction the konnector cannot read");
        assert!(misspelt.contains("not a rule kbind can read"), "{misspelt}");
        assert!(of_binding(&binding(Some("a"), json!({"resource": "secrets"})), "Binding a/b").is_err());
    }

    #[test]
    fn control_characters_from_a_gateway_are_shown_escaped() {
        let rules = parsed(
            Some("a"),
            json!([{"resource": "secrets", "direction": "FromConsumer",
                    "selector": {"names": ["db\u{1b}[2K\u{1b}[1Aclean"], "references": [{"path": "spec.\u{9b}x"}]}}]),
        );
        let shown = text(&rules);
        assert!(!shown.chars().any(|c| c.is_control() && c != '\n'), "{shown:?}");
        assert!(shown.contains("db\\u{1b}[2K"), "{shown}");
    }

    #[test]
    fn an_honest_bundle_carries_the_rules_the_catalog_shows() {
        let export: CatalogExport = serde_json::from_value(json!({
            "name": "w", "title": "W", "namespaced": true, "ready": true,
            "apis": [{"name": "widgets.example.org", "exported": true, "scope": "Namespaced"},
                     {"name": "gadgets.example.org", "exported": true, "scope": "Cluster"}],
            "relatedResources": [{"resource": "secrets", "direction": "FromConsumer",
                                  "selector": {"references": [{"path": "spec.secretRef.name"}]}}]
        }))
        .expect("an export");
        let shown = of_export(&export, &["team-a".to_string()]);
        let rule = json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
                           "selector": {"references": [{"path": "spec.secretRef.name"}]}}]);
        let mut cluster = binding(None, rule.clone());
        cluster["spec"]["apis"] = json!([{"name": "gadgets.example.org"}]);
        let mut bundle = of_binding(&cluster, "ClusterBinding b").unwrap();
        bundle.extend(parsed(Some("team-a"), rule.clone()));
        assert!(unshown(&bundle, &shown).is_empty(), "{bundle:#?}\n{shown:#?}");
        // The same rule in a namespace not shown, or reading references of another API, is new.
        let elsewhere = parsed(Some("team-b"), rule.clone());
        assert_eq!(unshown(&elsewhere, &shown).len(), 1);
        let mut other = binding(Some("team-a"), rule);
        other["spec"]["apis"] = json!([{"name": "widgets.example.org"}, {"name": "secretthings.example.org"}]);
        assert_eq!(unshown(&of_binding(&other, "Binding b").unwrap(), &shown).len(), 1);
    }
}
