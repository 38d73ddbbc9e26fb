//! The chart renders exactly the issuer RBAC the tests run the issuer on
//! (`kbind_backend::issuer::rbac::issuer_rbac()`): its ClusterRole, and its Roles in the grants
//! and lease namespaces, with the default values (`escalate`) and with `held` delegation.
//! Without helm the test prints one line and passes, unless `KBIND_REQUIRE_HELM=1`.

mod issuer_rbac_chart;

use issuer_rbac_chart::*;
use k8s_openapi::api::rbac::v1::PolicyRule;
use kbind_backend::issuer::rbac::{escalate_rule, issuer_rbac};

#[test]
fn the_chart_renders_exactly_the_issuer_rbac_the_tests_exercise() {
    let Some(helm) = helm() else { return };
    let want = issuer_rbac();
    let rendered = render(&helm, &[]);
    assert_eq!(rules(&rendered, "ClusterRole", ISSUER), want.cluster);
    assert_eq!(
        rules(&rendered, "Role", &format!("{ISSUER}-serviceaccounts")),
        want.grants_namespace
    );
    assert_eq!(
        rules(&rendered, "Role", &format!("{ISSUER}-leases")),
        want.lease_namespace
    );
    // unclaim() deletes the namespaces a refused attempt created.
    assert!(want.cluster[0].verbs.contains(&"delete".to_string()));

    // held: no escalate/bind; the delegated groups held in full instead.
    let held = render(
        &helm,
        &["issuer.rbacDelegation=held", "issuer.delegatedGroups={example.org}"],
    );
    let verbs = ["get", "list", "watch", "create", "update", "patch", "delete"];
    let mut expected: Vec<PolicyRule> = want.cluster.into_iter().filter(|r| *r != escalate_rule()).collect();
    expected.push(PolicyRule {
        api_groups: Some(vec!["example.org".into()]),
        resources: Some(vec!["*".into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    });
    assert_eq!(rules(&held, "ClusterRole", ISSUER), expected);
}

/// With `held`, the issuer can grant a related kind only by holding it: the chart renders one
/// rule per `issuer.relatedKinds` entry (Secrets and ConfigMaps by default), nothing more, and
/// refuses an entry that is not `{group, resource}`.
#[test]
fn held_delegation_holds_exactly_the_related_kinds_listed() {
    let Some(helm) = helm() else { return };
    let held = ["issuer.rbacDelegation=held", "issuer.delegatedGroups={example.org}"];
    let cluster_role = |extra: &[&str]| {
        let mut args = set_args(&held);
        args.extend_from_slice(extra);
        let rendered = template(&helm, &args).unwrap_or_else(|e| panic!("{extra:?}: {e}"));
        rules(&rendered, "ClusterRole", ISSUER)
    };
    let verbs = ["get", "list", "watch", "create", "update", "patch", "delete"];
    let kind = |group: &str, resource: &str| PolicyRule {
        api_groups: Some(vec![group.into()]),
        resources: Some(vec![resource.into()]),
        verbs: verbs.iter().map(|v| v.to_string()).collect(),
        ..PolicyRule::default()
    };
    let without = cluster_role(&[]);
    assert_eq!(
        cluster_role(&["--set", "issuer.delegateRelatedResources=true"]),
        [without.clone(), vec![kind("", "secrets"), kind("", "configmaps")]].concat()
    );
    let ingresses = r#"issuer.relatedKinds=[{"group": "networking.k8s.io", "resource": "ingresses"}]"#;
    assert_eq!(
        cluster_role(&["--set", "issuer.delegateRelatedResources=true", "--set-json", ingresses]),
        [without.clone(), vec![kind("networking.k8s.io", "ingresses")]].concat()
    );
    assert_eq!(
        cluster_role(&["--set-json", ingresses]),
        without,
        "only with delegateRelatedResources"
    );
    let mut args = set_args(&held);
    args.extend([
        "--set",
        "issuer.delegateRelatedResources=true",
        "--set-json",
        r#"issuer.relatedKinds=[{"resource": "ingresses"}]"#,
    ]);
    let refused = template(&helm, &args).expect_err("an entry without a group");
    assert!(refused.contains("issuer.relatedKinds[0] needs a group"), "{refused}");
}

#[test]
fn the_chart_passes_the_claim_rules_to_the_gateway_and_the_issuer() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        issuer: kbind_backend::issuer::Options,
    }
    let Some(helm) = helm() else { return };
    let claims = r#"issuer.claims={"claimable": ["{identity}-*", "shared-*"], "unclaimable": ["prod", "kube-*"], "maxPerBind": 3, "quota": 5}"#;
    let rendered = template(&helm, &["--set-json", claims]).expect("helm template");
    for deployment in ["kbind-backend-gateway", "kbind-backend-controller"] {
        let args: Vec<&str> = args_of(named(&rendered, "Deployment", deployment))
            .into_iter()
            .filter(|a| a.starts_with("--grants-") || a.starts_with("--lease-") || a.contains("namespace"))
            .collect();
        let options = Cli::try_parse_from(std::iter::once("x").chain(args.iter().copied()))
            .unwrap_or_else(|e| panic!("{deployment}: {args:?}: {e}"))
            .issuer;
        assert_eq!(
            options.claimable_namespaces,
            ["{identity}-*", "shared-*"],
            "{deployment}"
        );
        assert_eq!(options.unclaimable_namespaces, ["prod", "kube-*"], "{deployment}");
        assert_eq!(
            (options.max_namespaces_per_bind, options.namespace_quota),
            (3, 5),
            "{deployment}"
        );
    }
    // Unset: the binary's defaults, no flag rendered.
    let plain = render(&helm, &[]);
    let text = serde_json::to_string(&plain).unwrap();
    assert!(!text.contains("claimable-namespaces") && !text.contains("namespace-quota"));
}
