//! The RBAC a Grant's ServiceAccount gets: exactly what the konnector does on a provider
//! (engine/src, see docs/decisions.md "issuer"), for exactly the Export's APIs.

use std::collections::BTreeMap;

use k8s_openapi::api::rbac::v1::PolicyRule;
use kbind_api::{Export, RelatedKind, RelatedResourceDirection, ResourceScope};

/// Verbs on an exported resource: the syncer reads and watches (cluster-wide when allowed,
/// else per namespace), creates, server-side applies or JSON-patches, and deletes copies.
/// It never updates (PUT) a copy nor deletes a collection.
pub const SYNC_VERBS: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

/// Verbs on an exported resource's `/status`: status flows down, so reading is all.
pub const STATUS_VERBS: &[&str] = &["get"];

/// Verbs of a read-only rule.
pub const READ_VERBS: &[&str] = &["get", "list", "watch"];

/// Verbs on the heartbeat Lease: the konnector renews with get + update.
pub const LEASE_VERBS: &[&str] = &["get", "update"];

/// One API of an Export as the provider serves it.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct ResolvedApi {
    /// `<plural>.<group>` (the CRD's name).
    pub name: String,
    /// API group.
    pub group: String,
    /// Plural resource name.
    pub plural: String,
    /// Whether its objects live in namespaces.
    pub namespaced: bool,
}

impl ResolvedApi {
    /// The API's scope as the catalog reports it.
    pub fn scope(&self) -> ResourceScope {
        if self.namespaced {
            ResourceScope::Namespaced
        } else {
            ResourceScope::Cluster
        }
    }
}

fn rule(groups: &[&str], resources: &[String], verbs: &[&str], names: &[String]) -> PolicyRule {
    PolicyRule {
        api_groups: Some(groups.iter().map(|s| s.to_string()).collect()),
        resources: Some(resources.to_vec()),
        verbs: verbs.iter().map(|s| s.to_string()).collect(),
        resource_names: (!names.is_empty()).then(|| names.to_vec()),
        non_resource_urls: None,
    }
}

/// The rules of one API: its objects and its `/status`.
fn api_rules(api: &ResolvedApi) -> [PolicyRule; 2] {
    [
        rule(&[&api.group], std::slice::from_ref(&api.plural), SYNC_VERBS, &[]),
        rule(&[&api.group], &[format!("{}/status", api.plural)], STATUS_VERBS, &[]),
    ]
}

/// The Role in each claimed namespace: the Export's namespaced APIs and its related resources
/// (read for `FromProvider`, read + write for `FromConsumer`). Empty when the Export has neither.
pub fn namespace_rules(apis: &[ResolvedApi], export: &Export) -> Vec<PolicyRule> {
    let mut rules: Vec<PolicyRule> = apis.iter().filter(|a| a.namespaced).flat_map(api_rules).collect();
    // One rule per related kind the Export names (any group), read for `FromProvider`, read +
    // write when any rule of that kind is `FromConsumer`.
    let mut kinds: BTreeMap<RelatedKind, bool> = BTreeMap::new();
    for related in &export.spec.related_resources {
        *kinds.entry(related.kind()).or_default() |= related.direction == RelatedResourceDirection::FromConsumer;
    }
    for (kind, writes) in kinds {
        let verbs = if writes { SYNC_VERBS } else { READ_VERBS };
        rules.push(rule(&[&kind.group], &[kind.resource], verbs, &[]));
    }
    rules
}

/// The ClusterRole: the Export's cluster-scoped APIs, reading exactly the Export's CRDs (the
/// konnector's discovery and schema pull) and getting Namespace `kube-system` (its identity).
pub fn cluster_rules(apis: &[ResolvedApi]) -> Vec<PolicyRule> {
    let crds: Vec<String> = apis.iter().map(|a| a.name.clone()).collect();
    let mut rules = vec![
        rule(
            &["apiextensions.k8s.io"],
            &["customresourcedefinitions".to_string()],
            READ_VERBS,
            &crds,
        ),
        rule(
            &[""],
            &["namespaces".to_string()],
            &["get"],
            &["kube-system".to_string()],
        ),
    ];
    rules.extend(apis.iter().filter(|a| !a.namespaced).flat_map(api_rules));
    rules
}

/// The Role in the lease namespace: get and update on exactly the consumer's Lease.
pub fn lease_rules(lease: &str) -> Vec<PolicyRule> {
    vec![rule(
        &["coordination.k8s.io"],
        &["leases".to_string()],
        LEASE_VERBS,
        &[lease.to_string()],
    )]
}

/// The rule that lets a Grant's ServiceAccount `name` renew its own token (a TokenRequest on
/// itself, by name; the Role is in the grants namespace, where the account lives), and nothing
/// else: no other account's token, no reading of ServiceAccounts.
pub fn token_rules(name: &str) -> Vec<PolicyRule> {
    vec![rule(
        &[""],
        &["serviceaccounts/token".to_string()],
        TOKEN_VERBS,
        &[name.to_string()],
    )]
}

/// Verbs on the Grant's own `serviceaccounts/token`: the konnector renews with a create.
pub const TOKEN_VERBS: &[&str] = &["create"];

/// What the issuer module itself (the Kubernetes issuer and its controllers) needs on the
/// provider: the chart renders exactly this (`backend/tests/issuer_chart.rs` compares) and
/// `backend/tests/real_rbac.rs` runs the issuer on the chart's rendering.
#[derive(Debug, Clone, PartialEq)]
pub struct IssuerRbac {
    /// The ClusterRole. `escalate` and `bind` on Roles and ClusterRoles let it grant what it
    /// does not hold (the exported resources); they make it as powerful as an admin of RBAC,
    /// which issuing credentials is (the chart's `held` mode replaces them, see its values).
    pub cluster: Vec<PolicyRule>,
    /// The Role in the grants namespace: the Grants' ServiceAccounts and their tokens.
    pub grants_namespace: Vec<PolicyRule>,
    /// The Role in the lease namespace: the pre-created heartbeat Leases.
    pub lease_namespace: Vec<PolicyRule>,
}

/// The rule granting `escalate` and `bind` (the chart's `escalate` mode).
pub fn escalate_rule() -> PolicyRule {
    plain_rule(
        &["rbac.authorization.k8s.io"],
        &["roles", "clusterroles"],
        &["escalate", "bind"],
    )
}

fn plain_rule(groups: &[&str], resources: &[&str], verbs: &[&str]) -> PolicyRule {
    let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
    PolicyRule {
        api_groups: Some(s(groups)),
        resources: Some(s(resources)),
        verbs: s(verbs),
        resource_names: None,
        non_resource_urls: None,
    }
}

/// The issuer's least privilege (see [`IssuerRbac`]).
pub fn issuer_rbac() -> IssuerRbac {
    let r = plain_rule;
    IssuerRbac {
        cluster: vec![
            // Claims (create; list counts an identity's claims; watch sees a take-back at once;
            // delete only a namespace this attempt created), the grants and lease namespaces when
            // missing, kube-system (identity).
            r(&[""], &["namespaces"], &["get", "list", "watch", "create", "delete"]),
            r(
                &["rbac.authorization.k8s.io"],
                &["roles", "rolebindings"],
                &["list", "create", "patch", "delete"],
            ),
            r(
                &["rbac.authorization.k8s.io"],
                &["clusterroles", "clusterrolebindings"],
                &["create", "patch", "delete"],
            ),
            escalate_rule(),
            r(
                &["apiextensions.k8s.io"],
                &["customresourcedefinitions"],
                &["get", "list", "watch"],
            ),
            r(&["iam.kbind.io"], &["grants"], &["get", "list", "watch", "patch"]),
            r(&["iam.kbind.io"], &["grants/status"], &["patch"]),
            r(&["catalog.kbind.io"], &["exports"], &["get", "list", "watch"]),
            r(&["catalog.kbind.io"], &["exports/status"], &["patch"]),
        ],
        grants_namespace: vec![
            r(&[""], &["serviceaccounts"], &["get", "create", "patch", "delete"]),
            r(&[""], &["serviceaccounts/token"], &["create"]),
        ],
        lease_namespace: vec![r(&["coordination.k8s.io"], &["leases"], &["get", "create", "delete"])],
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_api::{ExportSpec, RelatedResource};

    fn api(name: &str, namespaced: bool) -> ResolvedApi {
        let (plural, group) = name.split_once('.').unwrap();
        ResolvedApi {
            name: name.into(),
            group: group.into(),
            plural: plural.into(),
            namespaced,
        }
    }

    fn export(related: Vec<RelatedResource>) -> Export {
        Export::new(
            "e",
            ExportSpec {
                title: "E".into(),
                description: None,
                icon: None,
                docs: None,
                apis: vec![],
                conflict_policy: Default::default(),
                related_resources: related,
                cluster_scoped_sharing: false,
            },
        )
    }

    fn related(group: &str, resource: &str, direction: RelatedResourceDirection) -> RelatedResource {
        RelatedResource {
            group: group.into(),
            resource: resource.into(),
            version: None,
            direction,
            selector: Default::default(),
            sync_status: false,
        }
    }

    #[test]
    fn namespaced_apis_go_to_the_namespace_role_and_cluster_apis_to_the_cluster_role() {
        let apis = [api("widgets.example.org", true), api("gadgets.example.org", false)];
        let ns = namespace_rules(&apis, &export(vec![]));
        assert_eq!(ns.len(), 2);
        assert_eq!(ns[0].resources.as_deref(), Some(&["widgets".to_string()][..]));
        assert_eq!(ns[1].resources.as_deref(), Some(&["widgets/status".to_string()][..]));
        assert_eq!(ns[1].verbs, ["get"]);
        let cluster = cluster_rules(&apis);
        assert_eq!(
            cluster[0].resource_names.as_deref(),
            Some(&["widgets.example.org".to_string(), "gadgets.example.org".to_string()][..])
        );
        assert_eq!(
            cluster[1].resource_names.as_deref(),
            Some(&["kube-system".to_string()][..])
        );
        assert_eq!(cluster[2].resources.as_deref(), Some(&["gadgets".to_string()][..]));
        assert_eq!(cluster.len(), 4);
    }

    #[test]
    fn a_grant_may_mint_tokens_for_its_own_service_account_only() {
        let rules = token_rules("g-1");
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].api_groups.as_deref(), Some(&[String::new()][..]));
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["serviceaccounts/token".to_string()][..])
        );
        assert_eq!(rules[0].verbs, ["create"]);
        assert_eq!(rules[0].resource_names.as_deref(), Some(&["g-1".to_string()][..]));
    }

    #[test]
    fn related_resources_are_read_only_from_the_provider_and_writable_from_the_consumer() {
        use RelatedResourceDirection::*;
        let rules = namespace_rules(
            &[],
            &export(vec![
                related("", "secrets", FromProvider),
                related("", "configmaps", FromConsumer),
                related("networking.k8s.io", "ingresses", FromConsumer),
            ]),
        );
        let verbs_of = |group: &str, resource: &str| {
            let found: Vec<_> = rules
                .iter()
                .filter(|r| {
                    r.api_groups.as_deref() == Some(&[group.to_string()][..])
                        && r.resources.as_deref() == Some(&[resource.to_string()][..])
                })
                .collect();
            assert_eq!(found.len(), 1, "one rule for {resource}.{group}: {rules:?}");
            found[0].verbs.clone()
        };
        assert_eq!(rules.len(), 3);
        assert_eq!(verbs_of("", "secrets"), READ_VERBS);
        assert_eq!(verbs_of("", "configmaps"), SYNC_VERBS);
        assert_eq!(verbs_of("networking.k8s.io", "ingresses"), SYNC_VERBS);
        // Both directions over one kind: the union.
        let both = namespace_rules(
            &[],
            &export(vec![
                related("", "secrets", FromProvider),
                related("", "secrets", FromConsumer),
            ]),
        );
        assert_eq!(both.len(), 1);
        assert_eq!(both[0].verbs, SYNC_VERBS);
        // The same resource name in another group is another kind.
        let two = namespace_rules(
            &[],
            &export(vec![
                related("", "secrets", FromProvider),
                related("example.org", "secrets", FromProvider),
            ]),
        );
        assert_eq!(two.len(), 2);
    }
}
