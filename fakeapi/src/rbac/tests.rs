//! Table-driven tests of RBAC authorization, aggregation, bootstrap policy, escalation and messages.

use serde_json::{Value, json};

use super::*;

fn r(groups: &[&str], resources: &[&str], verbs: &[&str]) -> Value {
    json!({"apiGroups": groups, "resources": resources, "verbs": verbs})
}

fn named_rule(groups: &[&str], resources: &[&str], verbs: &[&str], names: &[&str]) -> Value {
    let mut rule = r(groups, resources, verbs);
    rule["resourceNames"] = json!(names);
    rule
}

fn urls(paths: &[&str], verbs: &[&str]) -> Value {
    json!({"nonResourceURLs": paths, "verbs": verbs})
}

fn role(namespace: &str, name: &str, rules: Vec<Value>) -> Value {
    json!({"kind": "Role", "metadata": {"namespace": namespace, "name": name}, "rules": rules})
}

fn cluster_role(name: &str, labels: Value, rules: Vec<Value>) -> Value {
    json!({"kind": "ClusterRole", "metadata": {"name": name, "labels": labels}, "rules": rules})
}

fn aggregated(name: &str, labels: Value, selectors: Value) -> Value {
    let mut role = cluster_role(name, labels, Vec::new());
    role["aggregationRule"] = json!({"clusterRoleSelectors": selectors});
    role
}

fn user_subject(name: &str) -> Value {
    json!({"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn group_subject(name: &str) -> Value {
    json!({"kind": "Group", "apiGroup": "rbac.authorization.k8s.io", "name": name})
}

fn sa_subject(namespace: Option<&str>, name: &str) -> Value {
    match namespace {
        Some(ns) => json!({"kind": "ServiceAccount", "namespace": ns, "name": name}),
        None => json!({"kind": "ServiceAccount", "name": name}),
    }
}

fn role_binding(namespace: &str, name: &str, role_kind: &str, role_name: &str, subjects: Vec<Value>) -> Value {
    json!({
        "kind": "RoleBinding",
        "metadata": {"namespace": namespace, "name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role_kind, "name": role_name},
        "subjects": subjects,
    })
}

fn cluster_role_binding(name: &str, role_name: &str, subjects: Vec<Value>) -> Value {
    json!({
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role_name},
        "subjects": subjects,
    })
}

/// A snapshot granting `rules` to user `bob` cluster-wide.
fn bob_has(rules: Vec<Value>) -> RbacSnapshot {
    RbacSnapshot {
        cluster_roles: vec![cluster_role("r", json!({}), rules)],
        cluster_role_bindings: vec![cluster_role_binding("b", "r", vec![user_subject("bob")])],
        ..RbacSnapshot::default()
    }
}

fn get(group: &str, resource: &str) -> Attributes {
    Attributes::resource("get", group, resource)
}

#[test]
fn resource_rule_matching_table() {
    let cases: Vec<(&str, Value, Attributes, bool)> = vec![
        (
            "exact",
            r(&["apps"], &["deployments"], &["get"]),
            get("apps", "deployments"),
            true,
        ),
        (
            "verb star",
            r(&["apps"], &["deployments"], &["*"]),
            Attributes::resource("deletecollection", "apps", "deployments"),
            true,
        ),
        (
            "group star",
            r(&["*"], &["deployments"], &["get"]),
            get("example.org", "deployments"),
            true,
        ),
        (
            "resource star",
            r(&["apps"], &["*"], &["get"]),
            get("apps", "statefulsets"),
            true,
        ),
        (
            "resource star covers subresources",
            r(&[""], &["*"], &["get"]),
            get("", "pods").on_subresource("log"),
            true,
        ),
        (
            "other verb",
            r(&["apps"], &["deployments"], &["get"]),
            Attributes::resource("list", "apps", "deployments"),
            false,
        ),
        (
            "other group",
            r(&["apps"], &["deployments"], &["get"]),
            get("extensions", "deployments"),
            false,
        ),
        (
            "core group is the empty string",
            r(&[""], &["pods"], &["get"]),
            get("", "pods"),
            true,
        ),
        (
            "core rule does not match a named group",
            r(&[""], &["pods"], &["get"]),
            get("example.org", "pods"),
            false,
        ),
        (
            "resource does not grant its subresource",
            r(&[""], &["pods"], &["get"]),
            get("", "pods").on_subresource("status"),
            false,
        ),
        (
            "subresource does not grant its resource",
            r(&[""], &["pods/status"], &["get"]),
            get("", "pods"),
            false,
        ),
        (
            "resource/subresource",
            r(&[""], &["pods/status"], &["get"]),
            get("", "pods").on_subresource("status"),
            true,
        ),
        (
            "star/subresource",
            r(&["*"], &["*/scale"], &["get"]),
            get("apps", "deployments").on_subresource("scale"),
            true,
        ),
        (
            "star/subresource other subresource",
            r(&["*"], &["*/scale"], &["get"]),
            get("apps", "deployments").on_subresource("status"),
            false,
        ),
        (
            "star/subresource not the resource",
            r(&["*"], &["*/scale"], &["get"]),
            get("apps", "deployments"),
            false,
        ),
        (
            "subresource of another resource",
            r(&[""], &["pods/status"], &["get"]),
            get("", "nodes").on_subresource("status"),
            false,
        ),
        (
            "star/subresource is not a suffix match",
            r(&[""], &["*/tatus"], &["get"]),
            get("", "pods").on_subresource("status"),
            false,
        ),
        // kube has no `resource/*` glob: it is compared literally.
        (
            "resource/star is literal",
            r(&[""], &["pods/*"], &["get"]),
            get("", "pods").on_subresource("status"),
            false,
        ),
        (
            "resource rule ignores paths",
            r(&["*"], &["*"], &["*"]),
            Attributes::non_resource("get", "/healthz"),
            false,
        ),
        (
            "rule without apiGroups never matches",
            json!({"resources": ["pods"], "verbs": ["get"]}),
            get("", "pods"),
            false,
        ),
    ];
    for (name, rule, attrs, want) in cases {
        let rbac = bob_has(vec![rule]);
        assert_eq!(authorize(&UserInfo::user("bob"), &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn resource_names_table() {
    let rule = named_rule(
        &[""],
        &["configmaps"],
        &["get", "list", "watch", "create", "update"],
        &["a"],
    );
    let cm = |verb: &str| Attributes::resource(verb, "", "configmaps").in_namespace("ns1");
    let cases = [
        ("get a", cm("get").named("a"), true),
        ("get b", cm("get").named("b"), false),
        ("update a", cm("update").named("a"), true),
        ("list without a name", cm("list"), false),
        ("watch without a name", cm("watch"), false),
        ("create without a name", cm("create"), false),
        ("list with field selector metadata.name=a", cm("list").named("a"), true),
        (
            "watch with field selector metadata.name=a",
            cm("watch").named("a"),
            true,
        ),
        (
            "watch with field selector metadata.name=b",
            cm("watch").named("b"),
            false,
        ),
    ];
    let rbac = bob_has(vec![rule]);
    for (name, attrs, want) in cases {
        assert_eq!(authorize(&UserInfo::user("bob"), &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn non_resource_url_table() {
    let cases = [
        ("exact", urls(&["/apis"], &["get"]), "get", "/apis", true),
        ("exact other path", urls(&["/apis"], &["get"]), "get", "/api", false),
        ("glob", urls(&["/apis/*"], &["get"]), "get", "/apis/apps/v1", true),
        (
            "glob does not cover its stem",
            urls(&["/apis/*"], &["get"]),
            "get",
            "/apis",
            false,
        ),
        (
            "bare glob is a prefix",
            urls(&["/open*"], &["get"]),
            "get",
            "/openapi/v3",
            true,
        ),
        ("star", urls(&["*"], &["get"]), "get", "/version", true),
        (
            "verb mismatch",
            urls(&["/version"], &["get"]),
            "post",
            "/version",
            false,
        ),
        ("verb star", urls(&["/version"], &["*"]), "post", "/version", true),
        (
            "trailing slash is distinct",
            urls(&["/version"], &["get"]),
            "get",
            "/version/",
            false,
        ),
    ];
    for (name, rule, verb, path, want) in cases {
        let rbac = bob_has(vec![rule]);
        let attrs = Attributes::non_resource(verb, path);
        assert_eq!(authorize(&UserInfo::user("bob"), &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn url_rule_does_not_grant_resources() {
    let rbac = bob_has(vec![urls(&["*"], &["*"])]);
    assert!(!authorize(&UserInfo::user("bob"), &get("", "pods"), &rbac));
}

#[test]
fn binding_scope_table() {
    let rbac = RbacSnapshot {
        roles: vec![
            role("ns1", "pod-reader", vec![r(&[""], &["pods"], &["get"])]),
            role("ns2", "cm-reader", vec![r(&[""], &["configmaps"], &["get"])]),
        ],
        cluster_roles: vec![
            cluster_role("secret-reader", json!({}), vec![r(&[""], &["secrets"], &["get"])]),
            cluster_role("node-reader", json!({}), vec![r(&[""], &["nodes"], &["get"])]),
        ],
        role_bindings: vec![
            role_binding("ns1", "rb1", "Role", "pod-reader", vec![user_subject("bob")]),
            role_binding("ns1", "rb2", "ClusterRole", "secret-reader", vec![user_subject("bob")]),
            // A Role from another namespace is never used, even with the same name.
            role_binding("ns3", "rb3", "Role", "cm-reader", vec![user_subject("bob")]),
        ],
        cluster_role_bindings: vec![cluster_role_binding("crb", "node-reader", vec![user_subject("bob")])],
    };
    let bob = UserInfo::user("bob");
    let cases = [
        ("role in its namespace", get("", "pods").in_namespace("ns1"), true),
        ("role elsewhere", get("", "pods").in_namespace("ns2"), false),
        ("role at cluster scope", get("", "pods"), false),
        (
            "clusterrole via rolebinding in its namespace",
            get("", "secrets").in_namespace("ns1"),
            true,
        ),
        (
            "clusterrole via rolebinding elsewhere",
            get("", "secrets").in_namespace("ns2"),
            false,
        ),
        (
            "clusterrole via rolebinding at cluster scope",
            get("", "secrets"),
            false,
        ),
        (
            "role of another namespace",
            get("", "configmaps").in_namespace("ns3"),
            false,
        ),
        ("clusterrolebinding at cluster scope", get("", "nodes"), true),
        (
            "clusterrolebinding in any namespace",
            get("", "nodes").in_namespace("ns9"),
            true,
        ),
        (
            "empty namespace is cluster scope",
            get("", "pods").in_namespace(""),
            false,
        ),
    ];
    for (name, attrs, want) in cases {
        assert_eq!(authorize(&bob, &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn subject_table() {
    let sa = UserInfo::service_account("ns1", "robot");
    let in_group = UserInfo {
        name: "carol".into(),
        groups: vec!["team-a".into(), SYSTEM_AUTHENTICATED.into()],
    };
    let cases: Vec<(&str, Value, bool, UserInfo, bool)> = vec![
        ("user by name", user_subject("bob"), false, UserInfo::user("bob"), true),
        ("other user", user_subject("bob"), false, UserInfo::user("bobby"), false),
        ("group member", group_subject("team-a"), false, in_group.clone(), true),
        (
            "user name is not a group",
            group_subject("carol"),
            false,
            in_group,
            false,
        ),
        (
            "sa with namespace",
            sa_subject(Some("ns1"), "robot"),
            false,
            sa.clone(),
            true,
        ),
        (
            "sa in another namespace",
            sa_subject(Some("ns2"), "robot"),
            false,
            sa.clone(),
            false,
        ),
        (
            "sa without namespace takes the rolebinding's",
            sa_subject(None, "robot"),
            false,
            sa.clone(),
            true,
        ),
        (
            "sa without namespace never matches a clusterrolebinding",
            sa_subject(None, "robot"),
            true,
            sa.clone(),
            false,
        ),
        (
            "all service accounts",
            group_subject("system:serviceaccounts"),
            false,
            sa.clone(),
            true,
        ),
        (
            "service accounts of a namespace",
            group_subject("system:serviceaccounts:ns1"),
            false,
            sa.clone(),
            true,
        ),
        (
            "service accounts of another namespace",
            group_subject("system:serviceaccounts:ns2"),
            false,
            sa.clone(),
            false,
        ),
        (
            "sa user name via User subject",
            user_subject("system:serviceaccount:ns1:robot"),
            false,
            sa,
            true,
        ),
        (
            "unknown subject kind",
            json!({"kind": "Robot", "name": "bob"}),
            false,
            UserInfo::user("bob"),
            false,
        ),
    ];
    for (name, subject, cluster_wide, user, want) in cases {
        let reader = cluster_role("reader", json!({}), vec![r(&[""], &["pods"], &["list"])]);
        let rbac = if cluster_wide {
            RbacSnapshot {
                cluster_roles: vec![reader],
                cluster_role_bindings: vec![cluster_role_binding("b", "reader", vec![subject])],
                ..RbacSnapshot::default()
            }
        } else {
            RbacSnapshot {
                cluster_roles: vec![reader],
                role_bindings: vec![role_binding("ns1", "b", "ClusterRole", "reader", vec![subject])],
                ..RbacSnapshot::default()
            }
        };
        let attrs = Attributes::resource("list", "", "pods").in_namespace("ns1");
        assert_eq!(authorize(&user, &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn system_masters_is_always_allowed() {
    let attrs = Attributes::resource("delete", "example.org", "widgets").in_namespace("x");
    let decision = authorize_with_reason(&UserInfo::admin(), &attrs, &RbacSnapshot::default());
    assert!(decision.allowed);
    assert!(!authorize(&UserInfo::user("bob"), &attrs, &RbacSnapshot::default()));
}

fn aggregation_snapshot(extra: Vec<Value>) -> RbacSnapshot {
    let mut cluster_roles = vec![
        aggregated("agg", json!({}), json!([{"matchLabels": {"team": "a"}}])),
        cluster_role("pods", json!({"team": "a"}), vec![r(&[""], &["pods"], &["get"])]),
        cluster_role("svcs", json!({"team": "a"}), vec![r(&[""], &["services"], &["get"])]),
        cluster_role("nodes", json!({"team": "b"}), vec![r(&[""], &["nodes"], &["get"])]),
    ];
    cluster_roles.extend(extra);
    RbacSnapshot {
        cluster_roles,
        cluster_role_bindings: vec![cluster_role_binding("b", "agg", vec![user_subject("bob")])],
        ..RbacSnapshot::default()
    }
}

#[test]
fn aggregated_cluster_role_grants_the_union_of_selected_roles() {
    let rbac = aggregation_snapshot(Vec::new());
    let bob = UserInfo::user("bob");
    assert!(authorize(&bob, &get("", "pods"), &rbac));
    assert!(authorize(&bob, &get("", "services"), &rbac));
    assert!(!authorize(&bob, &get("", "nodes"), &rbac));
}

#[test]
fn aggregated_cluster_role_ignores_its_own_stored_rules() {
    let mut rbac = aggregation_snapshot(Vec::new());
    rbac.cluster_roles[0]["rules"] = json!([r(&[""], &["secrets"], &["get"])]);
    assert!(!authorize(&UserInfo::user("bob"), &get("", "secrets"), &rbac));
}

#[test]
fn aggregation_follows_match_expressions() {
    let mut rbac = aggregation_snapshot(Vec::new());
    rbac.cluster_roles[0]["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchExpressions": [{"key": "team", "operator": "In", "values": ["b"]}]}]});
    let bob = UserInfo::user("bob");
    assert!(authorize(&bob, &get("", "nodes"), &rbac));
    assert!(!authorize(&bob, &get("", "pods"), &rbac));
}

#[test]
fn aggregation_chains_through_aggregated_roles() {
    // agg <- mid (team=a, aggregates level=low) <- low
    let rbac = aggregation_snapshot(vec![
        aggregated("mid", json!({"team": "a"}), json!([{"matchLabels": {"level": "low"}}])),
        cluster_role(
            "low",
            json!({"level": "low"}),
            vec![r(&["apps"], &["deployments"], &["list"])],
        ),
    ]);
    let attrs = Attributes::resource("list", "apps", "deployments");
    assert!(authorize(&UserInfo::user("bob"), &attrs, &rbac));
}

#[test]
fn aggregation_with_invalid_selector_keeps_stored_rules() {
    let mut rbac = aggregation_snapshot(Vec::new());
    rbac.cluster_roles[0]["aggregationRule"] =
        json!({"clusterRoleSelectors": [{"matchExpressions": [{"key": "team", "operator": "Bogus"}]}]});
    rbac.cluster_roles[0]["rules"] = json!([r(&[""], &["secrets"], &["get"])]);
    let bob = UserInfo::user("bob");
    assert!(authorize(&bob, &get("", "secrets"), &rbac));
    assert!(!authorize(&bob, &get("", "pods"), &rbac));
}

#[test]
fn aggregated_rules_are_deduplicated_in_name_order() {
    let rbac = aggregation_snapshot(vec![cluster_role(
        "aaa",
        json!({"team": "a"}),
        vec![r(&[""], &["services"], &["get"]), r(&[""], &["endpoints"], &["get"])],
    )]);
    let aggregated = rbac.aggregated_rules();
    assert_eq!(
        aggregated.get("agg"),
        Some(&vec![
            r(&[""], &["services"], &["get"]),
            r(&[""], &["endpoints"], &["get"]),
            r(&[""], &["pods"], &["get"]),
        ])
    );
    assert_eq!(aggregated.len(), 1);
}

#[test]
fn bootstrap_policy_table() {
    let rbac = bootstrap_policy();
    let authenticated = UserInfo::user("bob");
    let anonymous = UserInfo {
        name: "system:anonymous".into(),
        groups: vec![SYSTEM_UNAUTHENTICATED.into()],
    };
    let url = |path: &str| Attributes::non_resource("get", path);
    let cases = [
        ("get /api", &authenticated, url("/api"), true),
        ("get /api/v1", &authenticated, url("/api/v1"), true),
        ("get /apis", &authenticated, url("/apis"), true),
        ("get /apis/apps/v1", &authenticated, url("/apis/apps/v1"), true),
        ("get /version", &authenticated, url("/version"), true),
        ("get /openapi/v3", &authenticated, url("/openapi/v3"), true),
        (
            "get /openapi/v3/apis/apps/v1",
            &authenticated,
            url("/openapi/v3/apis/apps/v1"),
            true,
        ),
        ("get /healthz", &authenticated, url("/healthz"), true),
        ("get /metrics", &authenticated, url("/metrics"), false),
        (
            "post /apis",
            &authenticated,
            Attributes::non_resource("post", "/apis"),
            false,
        ),
        (
            "create selfsubjectaccessreviews",
            &authenticated,
            Attributes::resource("create", "authorization.k8s.io", "selfsubjectaccessreviews"),
            true,
        ),
        (
            "create selfsubjectrulesreviews",
            &authenticated,
            Attributes::resource("create", "authorization.k8s.io", "selfsubjectrulesreviews"),
            true,
        ),
        (
            "create selfsubjectreviews",
            &authenticated,
            Attributes::resource("create", "authentication.k8s.io", "selfsubjectreviews"),
            true,
        ),
        (
            "create subjectaccessreviews",
            &authenticated,
            Attributes::resource("create", "authorization.k8s.io", "subjectaccessreviews"),
            false,
        ),
        (
            "list secrets",
            &authenticated,
            Attributes::resource("list", "", "secrets").in_namespace("default"),
            false,
        ),
        (
            "list namespaces",
            &authenticated,
            Attributes::resource("list", "", "namespaces"),
            false,
        ),
        ("anonymous get /version", &anonymous, url("/version"), true),
        ("anonymous get /apis", &anonymous, url("/apis"), false),
    ];
    for (name, user, attrs, want) in cases {
        assert_eq!(authorize(user, &attrs, &rbac), want, "{name}");
    }
}

#[test]
fn bootstrap_user_facing_roles_aggregate_by_label() {
    let mut rbac = bootstrap_policy();
    for (user, role) in [("viewer", "view"), ("editor", "edit"), ("owner", "admin")] {
        rbac.role_bindings
            .push(role_binding("ns1", user, "ClusterRole", role, vec![user_subject(user)]));
    }
    let in_ns1 =
        |verb: &str, group: &str, resource: &str| Attributes::resource(verb, group, resource).in_namespace("ns1");
    let cases = [
        ("viewer", in_ns1("list", "", "pods"), true),
        ("viewer", in_ns1("get", "", "secrets"), false),
        ("viewer", in_ns1("create", "", "configmaps"), false),
        ("viewer", in_ns1("list", "", "pods").in_namespace("ns2"), false),
        ("editor", in_ns1("get", "", "secrets"), true),
        ("editor", in_ns1("list", "apps", "deployments"), true),
        ("editor", in_ns1("create", "", "configmaps"), true),
        ("editor", in_ns1("create", "rbac.authorization.k8s.io", "roles"), false),
        ("owner", in_ns1("create", "rbac.authorization.k8s.io", "roles"), true),
        ("owner", in_ns1("delete", "", "pods"), true),
        ("owner", in_ns1("get", "", "pods").on_subresource("log"), true),
    ];
    for (user, attrs, want) in cases {
        assert_eq!(
            authorize(&UserInfo::user(user), &attrs, &rbac),
            want,
            "{user} {attrs:?}"
        );
    }
}

#[test]
fn bootstrap_aggregated_roles_are_stored_with_their_rules() {
    let rbac = bootstrap_policy();
    let rules_of = |name: &str| {
        rbac.cluster_roles
            .iter()
            .find(|r| r["metadata"]["name"] == name)
            .and_then(|r| r["rules"].as_array())
            .map(Vec::len)
            .unwrap_or_default()
    };
    let view = rules_of("view");
    let edit = rules_of("edit");
    let admin = rules_of("admin");
    assert!(
        view > 0 && edit > view && admin > edit,
        "view {view} edit {edit} admin {admin}"
    );
    let cluster_admin = rbac
        .cluster_roles
        .iter()
        .find(|r| r["metadata"]["name"] == "cluster-admin");
    assert_eq!(
        cluster_admin.map(|r| r["metadata"]["labels"]["kubernetes.io/bootstrapping"].clone()),
        Some(json!("rbac-defaults"))
    );
}

#[test]
fn rules_for_lists_cluster_and_namespace_rules() {
    let rbac = RbacSnapshot {
        roles: vec![role("ns1", "r", vec![r(&[""], &["pods"], &["get"])])],
        role_bindings: vec![role_binding("ns1", "b", "Role", "r", vec![user_subject("bob")])],
        ..bob_has(vec![r(&[""], &["nodes"], &["get"])])
    };
    let bob = UserInfo::user("bob");
    assert_eq!(rbac.rules_for(&bob, None), vec![r(&[""], &["nodes"], &["get"])]);
    assert_eq!(
        rbac.rules_for(&bob, Some("ns1")),
        vec![r(&[""], &["nodes"], &["get"]), r(&[""], &["pods"], &["get"])]
    );
}

#[test]
fn forbidden_message_table() {
    let bob = UserInfo::user("bob");
    let widgets = |verb: &str| Attributes::resource(verb, "example.org", "widgets");
    let cases = [
        (
            widgets("get").in_namespace("ns1").named("a"),
            r#"widgets.example.org "a" is forbidden: User "bob" cannot get resource "widgets" in API group "example.org" in the namespace "ns1""#,
        ),
        (
            widgets("list").in_namespace("ns1"),
            r#"widgets.example.org is forbidden: User "bob" cannot list resource "widgets" in API group "example.org" in the namespace "ns1""#,
        ),
        (
            widgets("list"),
            r#"widgets.example.org is forbidden: User "bob" cannot list resource "widgets" in API group "example.org" at the cluster scope"#,
        ),
        (
            widgets("update")
                .in_namespace("ns1")
                .named("a")
                .on_subresource("status"),
            r#"widgets.example.org "a" is forbidden: User "bob" cannot update resource "widgets/status" in API group "example.org" in the namespace "ns1""#,
        ),
        (
            Attributes::resource("get", "", "secrets")
                .in_namespace("default")
                .named("s"),
            r#"secrets "s" is forbidden: User "bob" cannot get resource "secrets" in API group "" in the namespace "default""#,
        ),
        (
            Attributes::resource("list", "", "namespaces"),
            r#"namespaces is forbidden: User "bob" cannot list resource "namespaces" in API group "" at the cluster scope"#,
        ),
        (
            Attributes::non_resource("get", "/apis"),
            r#"forbidden: User "bob" cannot get path "/apis""#,
        ),
    ];
    for (attrs, want) in cases {
        assert_eq!(forbidden_message(&bob, &attrs), want);
    }
}

#[test]
fn forbidden_message_escapes_html_and_appends_reason() {
    let user = UserInfo::user("<bob&co>");
    let attrs = Attributes::non_resource("get", "/x");
    assert_eq!(
        forbidden_message_with_reason(&user, &attrs, "RBAC: <why>"),
        r#"forbidden: User "&lt;bob&amp;co&gt;" cannot get path "/x": RBAC: <why>"#
    );
}

#[test]
fn decision_reason_names_the_granting_binding() {
    let rbac = RbacSnapshot {
        roles: vec![role("ns1", "r", vec![r(&[""], &["pods"], &["get"])])],
        role_bindings: vec![role_binding("ns1", "rb", "Role", "r", vec![sa_subject(None, "robot")])],
        ..bob_has(vec![r(&[""], &["nodes"], &["get"])])
    };
    let bob = authorize_with_reason(&UserInfo::user("bob"), &get("", "nodes"), &rbac);
    assert_eq!(
        bob.reason,
        r#"RBAC: allowed by ClusterRoleBinding "b" of ClusterRole "r" to User "bob""#
    );
    let robot = authorize_with_reason(
        &UserInfo::service_account("ns1", "robot"),
        &get("", "pods").in_namespace("ns1"),
        &rbac,
    );
    assert_eq!(
        robot.reason,
        r#"RBAC: allowed by RoleBinding "rb/ns1" of Role "r" to ServiceAccount "robot/ns1""#
    );
}

#[test]
fn denial_reason_reports_missing_roles_of_applicable_bindings() {
    let rbac = RbacSnapshot {
        role_bindings: vec![
            role_binding("ns1", "a", "Role", "gone", vec![user_subject("bob")]),
            role_binding("ns1", "b", "ClusterRole", "gone", vec![user_subject("bob")]),
            role_binding("ns1", "c", "Role", "other", vec![user_subject("alice")]),
        ],
        ..RbacSnapshot::default()
    };
    let attrs = get("", "pods").in_namespace("ns1");
    let decision = authorize_with_reason(&UserInfo::user("bob"), &attrs, &rbac);
    assert!(!decision.allowed);
    assert_eq!(
        decision.reason,
        r#"RBAC: [role.rbac.authorization.k8s.io "gone" not found, clusterrole.rbac.authorization.k8s.io "gone" not found]"#
    );
    assert_eq!(
        forbidden_message_with_reason(&UserInfo::user("bob"), &attrs, &decision.reason),
        format!(
            r#"pods is forbidden: User "bob" cannot get resource "pods" in API group "" in the namespace "ns1": {}"#,
            decision.reason
        )
    );
    let alice = authorize_with_reason(&UserInfo::user("carol"), &attrs, &rbac);
    assert_eq!(alice.reason, "");
}

/// A may_grant case: name, rules to grant, namespace, expected answer.
type GrantCase = (&'static str, Vec<Value>, Option<&'static str>, Result<(), Vec<String>>);

/// A write case: name, extra rules for bob, the written object, the old object, allowed.
type WriteCase<'a> = (&'static str, Vec<Value>, &'a Value, Option<&'a Value>, bool);

/// bob may read pods and configmaps in ns1 (through `view`-like rules) and nothing else.
fn escalation_snapshot(extra_rules: Vec<Value>) -> RbacSnapshot {
    let mut rules = vec![r(&[""], &["pods", "configmaps"], &["get", "list"])];
    rules.extend(extra_rules);
    RbacSnapshot {
        cluster_roles: vec![
            cluster_role("reader", json!({}), rules),
            cluster_role("secret-admin", json!({}), vec![r(&[""], &["secrets"], &["*"])]),
        ],
        role_bindings: vec![role_binding(
            "ns1",
            "bob-reader",
            "ClusterRole",
            "reader",
            vec![user_subject("bob")],
        )],
        ..RbacSnapshot::default()
    }
}

#[test]
fn may_grant_table() {
    let rbac = escalation_snapshot(Vec::new());
    let bob = UserInfo::user("bob");
    let cases: Vec<GrantCase> = vec![
        ("held rules", vec![r(&[""], &["pods"], &["get"])], Some("ns1"), Ok(())),
        (
            "held only in another namespace",
            vec![r(&[""], &["pods"], &["get"])],
            Some("ns2"),
            Err(vec![r#"{APIGroups:[""], Resources:["pods"], Verbs:["get"]}"#.into()]),
        ),
        (
            "rolebinding rules do not count at cluster scope",
            vec![r(&[""], &["pods"], &["list"])],
            None,
            Err(vec![r#"{APIGroups:[""], Resources:["pods"], Verbs:["list"]}"#.into()]),
        ),
        (
            "partly held",
            vec![r(&[""], &["pods", "secrets"], &["get", "delete"])],
            Some("ns1"),
            Err(vec![
                r#"{APIGroups:[""], Resources:["pods"], Verbs:["delete"]}"#.into(),
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get" "delete"]}"#.into(),
            ]),
        ),
        (
            "named subset of held rule",
            vec![named_rule(&[""], &["configmaps"], &["get"], &["x"])],
            Some("ns1"),
            Ok(()),
        ),
    ];
    for (name, rules, namespace, want) in cases {
        assert_eq!(may_grant(&bob, &rules, namespace, &rbac), want, "{name}");
    }
    let secrets = [r(&[""], &["secrets"], &["get"])];
    assert_eq!(may_grant(&UserInfo::admin(), &secrets, None, &rbac), Ok(()));
}

#[test]
fn role_escalation_is_refused_with_kube_message() {
    let rbac = escalation_snapshot(Vec::new());
    let new_role = role("ns1", "sneaky", vec![r(&[""], &["secrets"], &["get"])]);
    let err = check_role_write(&UserInfo::user("bob"), "ns1", &new_role, None, &rbac);
    assert_eq!(
        err,
        Err(GrantError::Forbidden {
            group: "rbac.authorization.k8s.io".into(),
            resource: "roles".into(),
            name: "sneaky".into(),
            message: concat!(
                r#"roles.rbac.authorization.k8s.io "sneaky" is forbidden: user "bob" (groups=["system:authenticated"]) "#,
                "is attempting to grant RBAC permissions not currently held:\n",
                r#"{APIGroups:[""], Resources:["secrets"], Verbs:["get"]}"#
            )
            .into(),
        })
    );
}

#[test]
fn role_write_table() {
    let held = role("ns1", "fine", vec![r(&[""], &["pods"], &["get"])]);
    let secret_role = role("ns1", "sneaky", vec![r(&[""], &["secrets"], &["get"])]);
    let escalate_any = r(&["rbac.authorization.k8s.io"], &["roles"], &["escalate"]);
    let escalate_named = named_rule(&["rbac.authorization.k8s.io"], &["roles"], &["escalate"], &["sneaky"]);
    let mut with_owner = secret_role.clone();
    with_owner["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "o", "uid": "u"}]);
    let cases: Vec<WriteCase> = vec![
        ("covered create", vec![], &held, None, true),
        ("escalating create", vec![], &secret_role, None, false),
        (
            "escalating create with escalate",
            vec![escalate_any.clone()],
            &secret_role,
            None,
            true,
        ),
        (
            "create is unnamed, so named escalate does not apply",
            vec![escalate_named.clone()],
            &secret_role,
            None,
            false,
        ),
        (
            "update with named escalate",
            vec![escalate_named],
            &secret_role,
            Some(&held),
            true,
        ),
        ("escalating update", vec![], &secret_role, Some(&held), false),
        (
            "update of only GC fields",
            vec![],
            &with_owner,
            Some(&secret_role),
            true,
        ),
    ];
    for (name, extra, new, old, want) in cases {
        let rbac = escalation_snapshot(extra);
        let got = check_role_write(&UserInfo::user("bob"), "ns1", new, old, &rbac);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
    }
    let rbac = escalation_snapshot(Vec::new());
    assert_eq!(
        check_role_write(&UserInfo::admin(), "ns1", &secret_role, None, &rbac),
        Ok(())
    );
}

#[test]
fn role_write_is_checked_in_the_request_namespace() {
    let rbac = escalation_snapshot(Vec::new());
    // Clients may leave metadata.namespace empty; the URL's namespace decides.
    let unplaced = json!({"kind": "Role", "metadata": {"name": "p"}, "rules": [r(&[""], &["pods"], &["get"])]});
    let bob = UserInfo::user("bob");
    assert_eq!(check_role_write(&bob, "ns1", &unplaced, None, &rbac), Ok(()));
    assert!(check_role_write(&bob, "ns2", &unplaced, None, &rbac).is_err());
}

#[test]
fn escalate_in_another_namespace_does_not_help() {
    let mut rbac = escalation_snapshot(Vec::new());
    rbac.cluster_roles.push(cluster_role(
        "escalator",
        json!({}),
        vec![r(&["rbac.authorization.k8s.io"], &["roles"], &["escalate"])],
    ));
    rbac.role_bindings.push(role_binding(
        "ns2",
        "esc",
        "ClusterRole",
        "escalator",
        vec![user_subject("bob")],
    ));
    let secret_role = role("ns1", "sneaky", vec![r(&[""], &["secrets"], &["get"])]);
    assert!(check_role_write(&UserInfo::user("bob"), "ns1", &secret_role, None, &rbac).is_err());
}

#[test]
fn cluster_role_write_table() {
    let plain = cluster_role("c", json!({}), vec![r(&[""], &["pods"], &["get"])]);
    let aggregating = aggregated("c", json!({}), json!([{"matchLabels": {"x": "y"}}]));
    let cluster_reader = r(&[""], &["pods"], &["get"]);
    let cases: Vec<WriteCase> = vec![
        ("namespace rules do not count", vec![], &plain, None, false),
        (
            "held at cluster scope",
            vec![cluster_reader.clone()],
            &plain,
            None,
            true,
        ),
        (
            "aggregation rule needs full authority",
            vec![cluster_reader.clone()],
            &aggregating,
            None,
            false,
        ),
        (
            "removing an aggregation rule too",
            vec![cluster_reader.clone()],
            &plain,
            Some(&aggregating),
            false,
        ),
        (
            "full authority may aggregate",
            vec![r(&["*"], &["*"], &["*"]), urls(&["*"], &["*"])],
            &aggregating,
            None,
            true,
        ),
        (
            "escalate on clusterroles",
            vec![r(&["rbac.authorization.k8s.io"], &["clusterroles"], &["escalate"])],
            &aggregating,
            None,
            true,
        ),
    ];
    for (name, cluster_rules, new, old, want) in cases {
        let mut rbac = escalation_snapshot(Vec::new());
        rbac.cluster_roles
            .push(cluster_role("bob-cluster", json!({}), cluster_rules));
        rbac.cluster_role_bindings.push(cluster_role_binding(
            "bob-cluster",
            "bob-cluster",
            vec![user_subject("bob")],
        ));
        let got = check_cluster_role_write(&UserInfo::user("bob"), new, old, &rbac);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
    }
}

#[test]
fn aggregation_rule_refusal_message() {
    let mut rbac = escalation_snapshot(Vec::new());
    rbac.cluster_roles.push(cluster_role(
        "bob-cluster",
        json!({}),
        vec![r(&[""], &["pods"], &["get"])],
    ));
    rbac.cluster_role_bindings.push(cluster_role_binding(
        "bob-cluster",
        "bob-cluster",
        vec![user_subject("bob")],
    ));
    let aggregating = aggregated("agg", json!({}), json!([{"matchLabels": {"x": "y"}}]));
    let err = check_cluster_role_write(&UserInfo::user("bob"), &aggregating, None, &rbac).map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err(r#"clusterroles.rbac.authorization.k8s.io "agg" is forbidden: must have cluster-admin privileges to use the aggregationRule"#.into())
    );
}

#[test]
fn role_binding_write_table() {
    let bind_to = |kind: &str, role_name: &str| role_binding("ns1", "rb", kind, role_name, vec![user_subject("eve")]);
    let reader_binding = bind_to("ClusterRole", "reader");
    let secret_binding = bind_to("ClusterRole", "secret-admin");
    let bind_any = r(&["rbac.authorization.k8s.io"], &["clusterroles"], &["bind"]);
    let bind_named = named_rule(
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["bind"],
        &["secret-admin"],
    );
    let bind_other = named_rule(
        &["rbac.authorization.k8s.io"],
        &["clusterroles"],
        &["bind"],
        &["reader"],
    );
    let cases: Vec<(&str, Vec<Value>, &Value, bool)> = vec![
        ("binding a held role", vec![], &reader_binding, true),
        ("binding a stronger role", vec![], &secret_binding, false),
        ("bind on any clusterrole", vec![bind_any], &secret_binding, true),
        ("bind on that clusterrole", vec![bind_named], &secret_binding, true),
        ("bind on another clusterrole", vec![bind_other], &secret_binding, false),
    ];
    for (name, extra, binding, want) in cases {
        let rbac = escalation_snapshot(extra);
        let got = check_role_binding_write(&UserInfo::user("bob"), "ns1", binding, None, &rbac);
        assert_eq!(got.is_ok(), want, "{name}: {got:?}");
    }
}

#[test]
fn role_binding_escalation_message_names_the_binding() {
    let rbac = escalation_snapshot(Vec::new());
    let binding = role_binding("ns1", "rb", "ClusterRole", "secret-admin", vec![user_subject("eve")]);
    let err = check_role_binding_write(&UserInfo::user("bob"), "ns1", &binding, None, &rbac).map_err(|e| e.to_string());
    assert_eq!(
        err,
        Err(concat!(
            r#"rolebindings.rbac.authorization.k8s.io "rb" is forbidden: user "bob" (groups=["system:authenticated"]) "#,
            "is attempting to grant RBAC permissions not currently held:\n",
            r#"{APIGroups:[""], Resources:["secrets"], Verbs:["*"]}"#
        )
        .into())
    );
}

#[test]
fn binding_to_a_missing_role_is_not_found() {
    let rbac = escalation_snapshot(Vec::new());
    let binding = role_binding("ns1", "rb", "Role", "ghost", vec![user_subject("eve")]);
    let err = check_role_binding_write(&UserInfo::user("bob"), "ns1", &binding, None, &rbac);
    assert_eq!(
        err.as_ref().map_err(ToString::to_string),
        Err(r#"roles.rbac.authorization.k8s.io "ghost" not found"#.to_string())
    );
    assert!(matches!(err, Err(GrantError::RoleRef(ResolveError::NotFound { .. }))));
}

#[test]
fn cluster_role_binding_needs_cluster_wide_permissions() {
    let rbac = escalation_snapshot(Vec::new());
    let binding = cluster_role_binding("crb", "reader", vec![user_subject("eve")]);
    let bob = UserInfo::user("bob");
    // bob holds the reader rules only inside ns1, so granting them everywhere escalates.
    assert!(check_cluster_role_binding_write(&bob, &binding, None, &rbac).is_err());
    let mut with_bind = escalation_snapshot(Vec::new());
    with_bind.cluster_roles.push(cluster_role(
        "binder",
        json!({}),
        vec![named_rule(
            &["rbac.authorization.k8s.io"],
            &["clusterroles"],
            &["bind"],
            &["reader"],
        )],
    ));
    // bind granted only inside a namespace does not authorize a cluster-wide binding.
    with_bind.role_bindings.push(role_binding(
        "ns1",
        "binder",
        "ClusterRole",
        "binder",
        vec![user_subject("bob")],
    ));
    assert!(check_cluster_role_binding_write(&bob, &binding, None, &with_bind).is_err());
    with_bind
        .cluster_role_bindings
        .push(cluster_role_binding("binder", "binder", vec![user_subject("bob")]));
    assert_eq!(
        check_cluster_role_binding_write(&bob, &binding, None, &with_bind),
        Ok(())
    );
}

#[test]
fn escalation_message_lists_user_and_groups() {
    let user = UserInfo::service_account("ns1", "robot");
    assert_eq!(
        escalation_message(&user, &["{A}".into(), "{B}".into()]),
        concat!(
            r#"user "system:serviceaccount:ns1:robot" (groups=["system:serviceaccounts" "system:serviceaccounts:ns1" "system:authenticated"]) "#,
            "is attempting to grant RBAC permissions not currently held:\n{A}\n{B}"
        )
    );
}
