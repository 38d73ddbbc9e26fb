//! What `kbind` agrees to apply from a bundle: one Secret in the konnector's namespace, one
//! Connection, ClusterBindings and Bindings — nothing else. A bundle is checked whole before
//! anything is applied, so a refused bundle leaves the consumer untouched.

use kbind_api::consts::API_VERSION;
use serde_json::Value;

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

/// Why a bundle was refused.
#[derive(Debug, thiserror::Error, PartialEq)]
#[error("refusing the bundle, nothing was applied: {0}")]
pub struct BundleRefused(pub String);

/// Checks `objects` against the allowed kinds and returns them in apply order.
pub fn check(objects: &[Value], konnector_namespace: &str) -> Result<Vec<BundleObject>, BundleRefused> {
    let mut checked = Vec::new();
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
                    return Err(BundleRefused(format!(
                        "{what} is not in the konnector's namespace {konnector_namespace:?}; pass --konnector-namespace if the konnector runs elsewhere"
                    )));
                }
            }
            (API_VERSION, "Connection" | "ClusterBinding") => {
                if namespace.is_some() {
                    return Err(BundleRefused(format!("{what} is cluster-scoped but names a namespace")));
                }
            }
            (API_VERSION, "Binding") => {
                if namespace.is_none() {
                    return Err(BundleRefused(format!("{what} is namespaced but names no namespace")));
                }
            }
            _ => {
                return Err(BundleRefused(format!(
                    "it carries {kind} {name} ({api_version}); kbind applies only a Secret in the konnector's namespace, a Connection, ClusterBindings and Bindings"
                )));
            }
        }
        checked.push(BundleObject {
            kind: kind.to_string(),
            namespace,
            name: name.to_string(),
            body: object.clone(),
        });
    }
    let count = |k: &str| checked.iter().filter(|o| o.kind == k).count();
    if count("Secret") != 1 || count("Connection") != 1 {
        return Err(BundleRefused(format!(
            "a bundle holds exactly one Secret and one Connection, this one {} and {}",
            count("Secret"),
            count("Connection")
        )));
    }
    Ok(checked)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn bundle() -> Vec<Value> {
        vec![
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "kbind"}}),
            json!({"apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": "c"}}),
            json!({"apiVersion": API_VERSION, "kind": "ClusterBinding", "metadata": {"name": "c"}}),
            json!({"apiVersion": API_VERSION, "kind": "Binding", "metadata": {"name": "c", "namespace": "team-a"}}),
        ]
    }

    #[test]
    fn a_bundle_of_allowed_kinds_is_accepted_in_order() {
        let checked = check(&bundle(), "kbind").expect("accepted");
        let kinds: Vec<_> = checked.iter().map(|o| o.kind.as_str()).collect();
        assert_eq!(kinds, ["Secret", "Connection", "ClusterBinding", "Binding"]);
    }

    #[test]
    fn a_bundle_with_a_forbidden_kind_is_refused_whole_with_the_reason() {
        let mut objects = bundle();
        objects.push(
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
            "metadata": {"name": "everything"}}),
        );
        let err = check(&objects, "kbind").expect_err("refused");
        assert!(err.0.contains("ClusterRoleBinding everything"), "{err}");
        assert!(err.to_string().contains("nothing was applied"), "{err}");
    }

    #[test]
    fn a_secret_outside_the_konnector_namespace_is_refused() {
        let mut objects = bundle();
        objects[0]["metadata"]["namespace"] = json!("kube-system");
        let err = check(&objects, "kbind").expect_err("refused");
        assert!(err.0.contains("konnector's namespace"), "{err}");
    }

    #[test]
    fn a_secret_of_the_wrong_group_or_two_connections_are_refused() {
        let mut objects = bundle();
        objects[1]["apiVersion"] = json!("evil.example/v1");
        assert!(check(&objects, "kbind").is_err());
        let mut objects = bundle();
        objects.push(json!({"apiVersion": API_VERSION, "kind": "Connection", "metadata": {"name": "d"}}));
        assert!(check(&objects, "kbind").is_err());
    }
}
