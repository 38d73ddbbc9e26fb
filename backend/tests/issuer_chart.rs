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
    assert_eq!(rules(&rendered, "Role", &format!("{ISSUER}-leases")), want.lease_namespace);
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
