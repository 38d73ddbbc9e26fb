//! What `kbind` agrees to apply from a bundle: one Secret in the konnector's namespace, one
//! Connection whose `kubeconfigSecretRef` is that Secret, ClusterBindings and Bindings of that
//! Connection — nothing else, all labelled for one Grant. A bundle is untrusted (a gateway
//! chose it): it is checked whole against what was asked for before anything is applied, so a
//! refused bundle leaves the consumer untouched.

use std::collections::BTreeSet;

use kbind_api::consts::backend::LABEL_GRANT;
use kbind_api::consts::{API_VERSION, DEFAULT_KUBECONFIG_KEY, annotation};
use serde_json::Value;

use crate::rules::{self, PlacedRule};

/// An object of a checked bundle.
#[derive(Debug, Clone, PartialEq)]
pub struct BundleObject {
    /// `Secret`, `Connection`, `ClusterBinding` or `Binding`.
    pub kind: String,
    /// Its namespace (Secret and Binding).
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
    /// The object as applied.
    pub body: Value,
}

/// What the bundle must match: what this run asked for.
#[derive(Debug, Clone, Copy)]
pub struct Expected<'a> {
    /// The konnector's namespace on the consumer (`--konnector-namespace`).
    pub konnector_namespace: &'a str,
    /// The namespaces asked for (`bind`, or `redeem --namespace`); `None` when nobody said
    /// (`redeem` without `--namespace`): then they are shown and confirmed.
    pub namespaces: Option<&'a [String]>,
    /// The Grant the gateway said it created (`bind`).
    pub grant: Option<&'a str>,
}

/// A bundle that passed [`check`].
#[derive(Debug, Clone, PartialEq)]
pub struct CheckedBundle {
    /// The objects, in apply order.
    pub objects: Vec<BundleObject>,
    /// The Grant every object is labelled for.
    pub grant: String,
    /// The Connection's name.
    pub connection: String,
    /// The Bindings' namespaces, sorted.
    pub namespaces: Vec<String>,
    /// Every related-resource rule of every binding, read from the bundle as the konnector
    /// reads it: what is shown and compared with what the catalog said.
    pub related: Vec<PlacedRule>,
}

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("refusing the bundle, nothing was applied: {0}")]
pub struct BundleRefused(pub String);

fn refuse<T>(why: impl Into<String>) -> Result<T, BundleRefused> {
    Err(BundleRefused(why.into()))
}

/// Whether kbind ever binds in `namespace`: never in `kube-*` nor the konnector's own (it
/// holds provider credentials).
pub fn namespace_allowed(namespace: &str, konnector_namespace: &str) -> bool {
    !namespace.starts_with("kube-") && namespace != konnector_namespace
}

/// Checks `objects` against the allowed kinds and against `expected`; returns them in apply order.
pub fn check(objects: &[Value], expected: Expected<'_>) -> Result<CheckedBundle, BundleRefused> {
    let konnector_namespace = expected.konnector_namespace;
    let mut checked = Vec::new();
    let mut grants = BTreeSet::new();
    for (i, object) in objects.iter().enumerate() {
        let kind = object["kind"].as_str().unwrap_or_default();
        let api_version = object["apiVersion"].as_str().unwrap_or_default();
        let name = object["metadata"]["name"]
            .as_str()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| BundleRefused(format!("object {} ({kind}) has no name", i + 1)))?;
        let namespace = object["metadata"]["namespace"].as_str().map(str::to_string);
        let what = format!("{kind} {name}");
        match (api_version, kind) {
            ("v1", "Secret") => {
                if namespace.as_deref() != Some(konnector_namespace) {
                    return refuse(format!(
                        "{what} is not in the konnector's namespace {konnector_namespace:?}; pass --konnector-namespace if the konnector runs elsewhere"
                    ));
                }
            }
            (API_VERSION, "Connection" | "ClusterBinding") => {
                if namespace.is_some() {
                    return refuse(format!("{what} is cluster-scoped but names a namespace"));
                }
            }
            (API_VERSION, "Binding") => match namespace.as_deref() {
                None => return refuse(format!("{what} is namespaced but names no namespace")),
                Some(ns) if !namespace_allowed(ns, konnector_namespace) => {
                    return refuse(format!(
                        "{what} is in namespace {ns:?}; kbind never binds in kube-* or the konnector's namespace"
                    ));
                }
                Some(_) => {}
            },
            _ => {
                return refuse(format!(
                    "it carries {kind} {name} ({api_version}); kbind applies only a Secret in the konnector's namespace, a Connection, ClusterBindings and Bindings"
                ));
            }
        }
        match object["metadata"]["labels"][LABEL_GRANT].as_str() {
            Some(g) if !g.is_empty() => grants.insert(g.to_string()),
            _ => return refuse(format!("{what} has no {LABEL_GRANT} label")),
        };
        checked.push(BundleObject {
            kind: kind.to_string(),
            namespace,
            name: name.to_string(),
            body: object.clone(),
        });
    }
    let of = |k: &str| checked.iter().filter(|o| o.kind == k).collect::<Vec<_>>();
    let (secrets, connections) = (of("Secret"), of("Connection"));
    let ([secret], [connection]) = (secrets.as_slice(), connections.as_slice()) else {
        return refuse(format!(
            "a bundle holds exactly one Secret and one Connection, this one {} and {}",
            secrets.len(),
            connections.len()
        ));
    };
    let grant = match (grants.len(), grants.first()) {
        (1, Some(g)) => g.clone(),
        _ => {
            return refuse(format!(
                "its objects are labelled for different Grants ({})",
                grants.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    };
    if let Some(asked) = expected.grant
        && asked != grant
    {
        return refuse(format!(
            "its objects are labelled for Grant {grant}, but the gateway created Grant {asked}"
        ));
    }
    check_secret_ref(secret, connection)?;
    let bindings: Vec<&BundleObject> = checked.iter().filter(|o| o.kind.ends_with("Binding")).collect();
    for binding in &bindings {
        let referenced = binding.body["spec"]["connectionRef"]["name"].as_str();
        if referenced != Some(connection.name.as_str()) {
            return refuse(format!(
                "{} {} references Connection {:?}, not the bundle's {}",
                binding.kind,
                binding.name,
                referenced.unwrap_or_default(),
                connection.name
            ));
        }
    }
    let namespaces = check_namespaces(&checked, connection, expected)?;
    let mut related = Vec::new();
    for binding in &bindings {
        let what = match &binding.namespace {
            Some(ns) => format!("{} {ns}/{}", binding.kind, binding.name),
            None => format!("{} {}", binding.kind, binding.name),
        };
        related.extend(rules::of_binding(&binding.body, &what).map_err(BundleRefused)?);
    }
    Ok(CheckedBundle {
        grant,
        connection: connection.name.clone(),
        namespaces,
        related,
        objects: checked,
    })
}

/// The Connection's credential must be the bundle's own Secret (in the konnector's namespace,
/// under a key it holds), never another Secret of the consumer.
fn check_secret_ref(secret: &BundleObject, connection: &BundleObject) -> Result<(), BundleRefused> {
    let reference = &connection.body["spec"]["kubeconfigSecretRef"];
    let (ns, name) = (reference["namespace"].as_str(), reference["name"].as_str());
    if ns != secret.namespace.as_deref() || name != Some(secret.name.as_str()) {
        return refuse(format!(
            "Connection {} takes its credential from Secret {}/{}, not from the bundle's Secret {}/{}",
            connection.name,
            ns.unwrap_or("?"),
            name.unwrap_or("?"),
            secret.namespace.as_deref().unwrap_or_default(),
            secret.name
        ));
    }
    let key = reference["key"].as_str().unwrap_or(DEFAULT_KUBECONFIG_KEY);
    let holds = ["stringData", "data"].iter().any(|f| !secret.body[f][key].is_null());
    if !holds {
        return refuse(format!("Secret {} holds no key {key:?}", secret.name));
    }
    Ok(())
}

/// The Bindings' namespaces equal the Connection's `binding-namespaces` (never `*`) and, when
/// known, the namespaces asked for; a bundle without Bindings allows none.
fn check_namespaces(
    objects: &[BundleObject],
    connection: &BundleObject,
    expected: Expected<'_>,
) -> Result<Vec<String>, BundleRefused> {
    let mut in_bindings = BTreeSet::new();
    for binding in objects.iter().filter(|o| o.kind == "Binding") {
        let ns = binding.namespace.clone().unwrap_or_default();
        if !in_bindings.insert(ns.clone()) {
            return refuse(format!("it holds two Bindings in namespace {ns:?}"));
        }
    }
    let annotated = connection.body["metadata"]["annotations"][annotation::BINDING_NAMESPACES].as_str();
    let allowed: BTreeSet<String> = annotated
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|n| !n.is_empty())
        .map(str::to_string)
        .collect();
    if allowed != in_bindings {
        return refuse(format!(
            "Connection {} allows Bindings in {:?} ({}), but the bundle's Bindings are in [{}]",
            connection.name,
            annotated.unwrap_or_default(),
            annotation::BINDING_NAMESPACES,
            in_bindings.iter().cloned().collect::<Vec<_>>().join(",")
        ));
    }
    if let Some(asked) = expected.namespaces {
        let asked: BTreeSet<String> = asked.iter().cloned().collect();
        if asked != in_bindings {
            return refuse(format!(
                "it binds in namespaces [{}], but [{}] were asked for",
                in_bindings.iter().cloned().collect::<Vec<_>>().join(","),
                asked.into_iter().collect::<Vec<_>>().join(",")
            ));
        }
    }
    Ok(in_bindings.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn labels() -> Value {
        json!({LABEL_GRANT: "g-1"})
    }

    fn bundle() -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "s", "namespace": "kbind", "labels": labels()},
                "stringData": {"kubeconfig": "x"}}),
            json!({"apiVersion": API_VERSION, "kind": "Connection",
                "metadata": {"name": "c", "labels": labels(),
                    "annotations": {annotation::BINDING_NAMESPACES: "team-a"}},
                "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "s", "key": "kubeconfig"}}}),
            json!({"apiVersion": API_VERSION, "kind": "ClusterBinding",
                "metadata": {"name": "c", "labels": labels()}, "spec": {"connectionRef": {"name": "c"}}}),
            json!({"apiVersion": API_VERSION, "kind": "Binding",
                "metadata": {"name": "c", "namespace": "team-a", "labels": labels()},
                "spec": {"connectionRef": {"name": "c"}}}),
        ]
    }

    fn asked(namespaces: &[String]) -> Expected<'_> {
        Expected {
            konnector_namespace: "kbind",
            namespaces: Some(namespaces),
            grant: Some("g-1"),
        }
    }

    fn team_a() -> Vec<String> {
        vec!["team-a".to_string()]
    }

    #[test]
    fn a_bundle_of_allowed_kinds_is_accepted_in_order() {
        let ns = team_a();
        let checked = check(&bundle(), asked(&ns)).expect("accepted");
        let kinds: Vec<_> = checked.objects.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["Secret", "Connection", "ClusterBinding", "Binding"]);
        assert_eq!(checked.grant, "g-1");
        assert_eq!(checked.namespaces, ["team-a"]);
        assert!(checked.related.is_empty());
    }

    #[test]
    fn a_bundle_with_a_forbidden_kind_is_refused_whole_with_the_reason() {
        let mut objects = bundle();
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "everything"}}),
        );
        let ns = team_a();
        let err = check(&objects, asked(&ns)).expect_err("refused");
        assert!(err.0.contains("ClusterRoleBinding everything"), "{err}");
        assert!(err.to_string().contains("nothing was applied"), "{err}");
    }

    #[test]
    fn a_secret_outside_the_konnector_namespace_is_refused() {
        let mut objects = bundle();
        objects[0]["metadata"]["namespace"] = json!("kube-system");
        let ns = team_a();
        let err = check(&objects, asked(&ns)).expect_err("refused");
        assert!(err.0.contains("konnector's namespace"), "{err}");
    }

    #[test]
    fn a_secret_of_the_wrong_group_or_two_connections_are_refused() {
        let ns = team_a();
        let mut objects = bundle();
        objects[1]["apiVersion"] = json!("evil.example/v1");
        assert!(check(&objects, asked(&ns)).is_err());
        let mut objects = bundle();
        objects.push(json!({"apiVersion": API_VERSION, "kind": "Connection",
            "metadata": {"name": "d", "labels": labels()}}));
        assert!(check(&objects, asked(&ns)).is_err());
    }

    #[test]
    fn a_connection_naming_another_secret_is_refused() {
        let ns = team_a();
        let mut objects = bundle();
        objects[1]["spec"]["kubeconfigSecretRef"] = json!({"namespace": "kube-system", "name": "victim-secret"});
        let err = check(&objects, asked(&ns)).expect_err("refused");
        assert!(err.0.contains("kube-system/victim-secret"), "{err}");
        let mut objects = bundle();
        objects[1]["spec"]["kubeconfigSecretRef"]["key"] = json!("other");
        assert!(check(&objects, asked(&ns)).is_err(), "a key the Secret lacks");
    }

    #[test]
    fn namespaces_must_equal_what_was_asked_and_the_annotation() {
        let ns = team_a();
        let mut objects = bundle();
        objects[1]["metadata"]["annotations"][annotation::BINDING_NAMESPACES] = json!("*");
        let err = check(&objects, asked(&ns)).expect_err("a wildcard");
        assert!(err.0.contains(annotation::BINDING_NAMESPACES), "{err}");

        let mut objects = bundle();
        objects[3]["metadata"]["namespace"] = json!("kube-system");
        let err = check(&objects, asked(&ns)).expect_err("kube-system");
        assert!(err.0.contains("kube-system"), "{err}");

        let mut objects = bundle();
        objects[3]["metadata"]["namespace"] = json!("prod");
        objects[1]["metadata"]["annotations"][annotation::BINDING_NAMESPACES] = json!("prod");
        let err = check(&objects, asked(&ns)).expect_err("another namespace than asked");
        assert!(err.0.contains("[team-a] were asked for"), "{err}");

        // redeem without --namespace: any namespace but kube-*/the konnector's, consistent.
        let open = Expected {
            namespaces: None,
            grant: None,
            ..asked(&ns)
        };
        assert_eq!(check(&objects, open).expect("consistent").namespaces, ["prod"]);
    }

    #[test]
    fn every_object_is_labelled_for_the_grant_the_gateway_named() {
        let ns = team_a();
        let mut objects = bundle();
        objects[2]["metadata"]["labels"][LABEL_GRANT] = json!("g-2");
        assert!(
            check(&objects, asked(&ns))
                .expect_err("two grants")
                .0
                .contains("different Grants")
        );
        let objects = bundle();
        let other = Expected {
            grant: Some("g-9"),
            ..asked(&ns)
        };
        assert!(check(&objects, other).is_err());
        let mut objects = bundle();
        objects[2]["metadata"]["labels"] = json!({});
        assert!(check(&objects, asked(&ns)).is_err());
    }

    #[test]
    fn a_binding_of_another_connection_is_refused() {
        let ns = team_a();
        let mut objects = bundle();
        objects[3]["spec"]["connectionRef"]["name"] = json!("someone-elses");
        assert!(check(&objects, asked(&ns)).is_err());
    }

    #[test]
    fn related_rules_are_read_from_every_binding_and_an_unreadable_one_refuses_the_bundle() {
        let ns = team_a();
        let mut objects = bundle();
        objects[2]["spec"]["apis"] = json!([{"name": "gadgets.example.org"}]);
        objects[2]["spec"]["relatedResources"] =
            json!([{"resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["x"]}}]);
        objects[3]["spec"]["relatedResources"] = json!([
            {"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
             "selector": {"references": [{"path": "spec.ingressRef.name"}]}},
        ]);
        let related = check(&objects, asked(&ns)).expect("accepted").related;
        assert_eq!(related.len(), 2, "{related:?}");
        assert_eq!(
            (related[0].namespace.as_deref(), related[0].apis.as_slice()),
            (None, &["gadgets.example.org".to_string()][..])
        );
        assert_eq!(related[1].namespace.as_deref(), Some("team-a"));
        assert_eq!(related[1].rule.kind().to_string(), "ingresses.networking.k8s.io");

        objects[3]["spec"]["relatedResources"][0]["selector"]["template"] = json!("{{ .spec }}");
        let err = check(&objects, asked(&ns)).expect_err("a field kbind does not know");
        assert!(
            err.0.contains("Binding team-a/c's relatedResources[0]") && err.0.contains("selector.template"),
            "{err}"
        );
    }
}
