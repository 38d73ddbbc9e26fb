//! Request paths under `/api` and `/apis`, parsed as kube-apiserver's request-info factory does.

use percent_encoding::percent_decode_str;

/// What a path under `/api` or `/apis` addresses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Target {
    /// `/api`: the core group's versions.
    CoreVersions,
    /// `/apis`: every other group.
    Groups,
    /// `/apis/<group>`: one group.
    Group(String),
    /// `/api/v1` or `/apis/<group>/<version>`: the resources of one group-version.
    Resources {
        /// Group, empty for core.
        group: String,
        /// Version.
        version: String,
    },
    /// A resource request.
    Resource(ResourcePath),
    /// Nothing kube-apiserver serves.
    Unknown,
}

/// The parts of a resource request's path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ResourcePath {
    /// Group, empty for core.
    pub group: String,
    /// Version.
    pub version: String,
    /// Namespace for namespaced requests (and namespace-scoped collections).
    pub namespace: Option<String>,
    /// Plural resource name.
    pub plural: String,
    /// Object name for item requests.
    pub name: Option<String>,
    /// Subresource, e.g. `status`.
    pub subresource: Option<String>,
    /// The deprecated `/watch/` path prefix was used (a watch regardless of the query).
    pub watch_prefix: bool,
}

/// Parses a request path.
pub(crate) fn parse(path: &str) -> Target {
    let segments: Vec<String> = path
        .split('/')
        .filter(|s| !s.is_empty())
        .map(|s| percent_decode_str(s).decode_utf8_lossy().into_owned())
        .collect();
    let parts: Vec<&str> = segments.iter().map(String::as_str).collect();
    match parts.as_slice() {
        ["api"] => Target::CoreVersions,
        ["apis"] => Target::Groups,
        ["apis", group] => Target::Group(group.to_string()),
        ["api", version] => Target::Resources {
            group: String::new(),
            version: version.to_string(),
        },
        ["apis", group, version] => Target::Resources {
            group: group.to_string(),
            version: version.to_string(),
        },
        ["api", version, rest @ ..] => resource("", version, rest),
        ["apis", group, version, rest @ ..] => resource(group, version, rest),
        _ => Target::Unknown,
    }
}

/// The resource part of a path: `[watch/][namespaces/<ns>/]<plural>[/<name>[/<subresource>]]`.
fn resource(group: &str, version: &str, rest: &[&str]) -> Target {
    let (watch_prefix, rest) = match rest {
        ["watch", tail @ ..] => (true, tail),
        _ => (false, rest),
    };
    // `namespaces/<ns>` is a namespace scope only when a resource follows; otherwise it is the
    // namespace object itself (`/api/v1/namespaces/<name>`, `.../<name>/status`).
    let (namespace, rest) = match rest {
        ["namespaces", ns, tail @ ..] if !tail.is_empty() && !matches!(tail, ["status" | "finalize"]) => {
            (Some(ns.to_string()), tail)
        }
        _ => (None, rest),
    };
    let (plural, name, subresource) = match rest {
        [plural] => (plural, None, None),
        [plural, name] => (plural, Some(name.to_string()), None),
        [plural, name, sub] => (plural, Some(name.to_string()), Some(sub.to_string())),
        _ => return Target::Unknown,
    };
    Target::Resource(ResourcePath {
        group: group.to_string(),
        version: version.to_string(),
        namespace,
        plural: plural.to_string(),
        name,
        subresource,
        watch_prefix,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn res(group: &str, ns: Option<&str>, plural: &str, name: Option<&str>, sub: Option<&str>) -> Target {
        Target::Resource(ResourcePath {
            group: group.into(),
            version: "v1".into(),
            namespace: ns.map(Into::into),
            plural: plural.into(),
            name: name.map(Into::into),
            subresource: sub.map(Into::into),
            watch_prefix: false,
        })
    }

    #[test]
    fn discovery_paths_are_recognised() {
        assert_eq!(parse("/api"), Target::CoreVersions);
        assert_eq!(parse("/apis/"), Target::Groups);
        assert_eq!(parse("/apis/apps"), Target::Group("apps".into()));
        assert_eq!(
            parse("/apis/apps/v1"),
            Target::Resources {
                group: "apps".into(),
                version: "v1".into()
            }
        );
        assert_eq!(
            parse("/api/v1"),
            Target::Resources {
                group: "".into(),
                version: "v1".into()
            }
        );
    }

    #[test]
    fn namespaced_and_cluster_scoped_paths_parse() {
        assert_eq!(
            parse("/api/v1/namespaces/ns1/configmaps"),
            res("", Some("ns1"), "configmaps", None, None)
        );
        assert_eq!(
            parse("/api/v1/namespaces/ns1/configmaps/a"),
            res("", Some("ns1"), "configmaps", Some("a"), None)
        );
        assert_eq!(
            parse("/apis/apps/v1/namespaces/ns1/deployments/d/status"),
            res("apps", Some("ns1"), "deployments", Some("d"), Some("status"))
        );
        assert_eq!(
            parse("/apis/apps/v1/deployments"),
            res("apps", None, "deployments", None, None)
        );
    }

    #[test]
    fn namespace_objects_are_not_namespace_scopes() {
        assert_eq!(parse("/api/v1/namespaces"), res("", None, "namespaces", None, None));
        assert_eq!(
            parse("/api/v1/namespaces/ns1"),
            res("", None, "namespaces", Some("ns1"), None)
        );
        assert_eq!(
            parse("/api/v1/namespaces/ns1/finalize"),
            res("", None, "namespaces", Some("ns1"), Some("finalize"))
        );
    }

    #[test]
    fn watch_prefix_and_escapes_are_understood() {
        let Target::Resource(path) = parse("/api/v1/watch/namespaces/ns1/configmaps") else {
            panic!("not a resource path");
        };
        assert!(path.watch_prefix);
        assert_eq!(path.namespace.as_deref(), Some("ns1"));
        assert_eq!(
            parse("/apis/rbac.authorization.k8s.io/v1/clusterroles/system%3Abasic-user"),
            Target::Resource(ResourcePath {
                group: "rbac.authorization.k8s.io".into(),
                version: "v1".into(),
                namespace: None,
                plural: "clusterroles".into(),
                name: Some("system:basic-user".into()),
                subresource: None,
                watch_prefix: false,
            })
        );
        assert_eq!(parse("/api/v1/a/b/c/d"), Target::Unknown);
        assert_eq!(parse("/metrics"), Target::Unknown);
    }
}
