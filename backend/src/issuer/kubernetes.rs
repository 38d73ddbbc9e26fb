//! The in-tree issuer for a plain Kubernetes provider (contract §7): namespace claims, a
//! ServiceAccount per Grant, Roles enumerating exactly the Export's resources, the pre-created
//! heartbeat Lease, and TokenRequest tokens.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, PolicyRule, Role, RoleBinding};
use kbind_api::consts::backend::{
    ANNOTATION_CLAIMED_BY, FIELD_MANAGER, LABEL_CLAIMED_BY, LABEL_CONSUMER_CLUSTER_UID, LABEL_GRANT, MANAGED_BY,
};
use kbind_api::consts::{TRUE, label, lease_name};
use kbind_api::{Export, Grant, Issued, IssuedObject};
use kbind_cluster::identity::{IdentitySource, namespace_resource};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, Error, ListParams, PostParams,
};
use kube::api::Preconditions;
use serde_json::{Value, json};

use super::claims::{self, LABEL_MANAGED_BY, NamespaceState};
use super::rbac::{self, ResolvedApi};
use super::{Credential, IssueError, Issuer};

/// The name this issuer records in `status.issued.issuer`.
pub const ISSUER_NAME: &str = "kubernetes";

/// Flags of the in-tree Kubernetes issuer.
#[derive(clap::Args, Debug, Clone, PartialEq, Eq)]
// The group id must be unique among the flattened Options of `kbind-backend run`.
#[group(id = "issuer-options")]
#[command(next_help_heading = "Issuer")]
pub struct Options {
    /// Provider namespace holding one ServiceAccount per Grant (created when missing).
    #[arg(
        long = "grants-namespace",
        env = "KBIND_GRANTS_NAMESPACE",
        default_value = "kbind-grants"
    )]
    pub grants_namespace: String,
    /// Provider namespace of the consumers' heartbeat Leases; must match the konnector's
    /// `--lease-namespace` (created when missing).
    #[arg(long = "lease-namespace", env = "KBIND_LEASE_NAMESPACE", default_value = kbind_api::consts::lease::NAMESPACE)]
    pub lease_namespace: String,
    /// Lifetime asked for each issued token (TokenRequest `expirationSeconds`; the apiserver
    /// may cap it with --service-account-max-token-expiration). The konnector renews its token
    /// itself before it expires, so this bounds how long a leaked token works, not a binding.
    #[arg(long = "token-ttl", env = "KBIND_TOKEN_TTL", default_value = "24h", value_parser = parse_duration)]
    pub token_ttl: Duration,
    /// Provider namespaces an identity may claim: comma-separated patterns where `*` matches
    /// any run of characters and `{identity}` stands for the identity's short id (8 hex digits
    /// of its subject's SHA-256). The default `{identity}-*` gives each identity its own prefix,
    /// so no tenant can claim a name the platform will use later; `*` (or `team-*`) lets
    /// tenants choose names, and then `--unclaimable-namespaces` must list every name the
    /// platform may create. Provider namespaces are the consumer's namespaces (Identity
    /// mapping), so a prefix pattern means the consumer's namespaces carry that prefix too.
    #[arg(
        long = "claimable-namespaces",
        env = "KBIND_CLAIMABLE_NAMESPACES",
        value_delimiter = ',',
        default_value = DEFAULT_CLAIMABLE
    )]
    pub claimable_namespaces: Vec<String>,
    /// Provider namespaces no identity may claim, even before they exist (same patterns; the
    /// grants and lease namespaces are always refused). Name here what the platform will create.
    #[arg(
        long = "unclaimable-namespaces",
        env = "KBIND_UNCLAIMABLE_NAMESPACES",
        value_delimiter = ',',
        default_value = DEFAULT_UNCLAIMABLE
    )]
    pub unclaimable_namespaces: Vec<String>,
    /// How many namespaces one bind (one Grant) may claim.
    #[arg(
        long = "max-namespaces-per-bind",
        env = "KBIND_MAX_NAMESPACES_PER_BIND",
        default_value_t = 10,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub max_namespaces_per_bind: u16,
    /// How many provider namespaces one identity may hold claimed, over all its Grants.
    #[arg(
        long = "namespace-quota",
        env = "KBIND_NAMESPACE_QUOTA",
        default_value_t = 20,
        value_parser = clap::value_parser!(u16).range(1..)
    )]
    pub namespace_quota: u16,
}

/// The default of `--token-ttl`: a day (see docs/decisions.md, "Issued tokens renew themselves").
pub const DEFAULT_TOKEN_TTL: Duration = Duration::from_secs(24 * 3600);

/// The default of `--claimable-namespaces`: a prefix of each identity's own.
pub const DEFAULT_CLAIMABLE: &str = "{identity}-*";

/// The default of `--unclaimable-namespaces`: system namespaces and kbind's own.
pub const DEFAULT_UNCLAIMABLE: &str = "default,kube-*,kbind,kbind-*,openshift-*";

impl Default for Options {
    fn default() -> Self {
        Self {
            grants_namespace: "kbind-grants".into(),
            lease_namespace: kbind_api::consts::lease::NAMESPACE.into(),
            token_ttl: DEFAULT_TOKEN_TTL,
            claimable_namespaces: vec![DEFAULT_CLAIMABLE.into()],
            unclaimable_namespaces: DEFAULT_UNCLAIMABLE.split(',').map(str::to_string).collect(),
            max_namespaces_per_bind: 10,
            namespace_quota: 20,
        }
    }
}

/// Parses a humantime duration (`24h`, `30d`) of at least ten minutes (the TokenRequest minimum).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let d = humantime::parse_duration(s).map_err(|e| format!("{e} (expected a duration such as 720h or 30d)"))?;
    if d < Duration::from_secs(600) {
        return Err("a token lifetime must be at least 10m".into());
    }
    Ok(d)
}

/// Provisions Grants on a plain Kubernetes provider through an (admin-ish) provider client.
pub struct KubernetesIssuer {
    client: Arc<dyn ClusterClient>,
    options: Options,
    /// Whether the provider is kcp-like, once known (a provider does not change kind; the
    /// identity read behind it costs a discovery on a plain apiserver).
    kcp_like: tokio::sync::OnceCell<bool>,
    /// Per identity subject: the lock its claims are made under ([`KubernetesIssuer::claim_lock`]).
    claims_in_flight: parking_lot::Mutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>,
}

impl std::fmt::Debug for KubernetesIssuer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubernetesIssuer")
            .field("options", &self.options)
            .finish()
    }
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn crd_resource() -> ApiResource {
    erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>()
}

fn lease_resource() -> ApiResource {
    erase::<k8s_openapi::api::coordination::v1::Lease>()
}

fn object(value: Value) -> Result<DynamicObject, IssueError> {
    serde_json::from_value(value).map_err(|e| IssueError::Cluster(Error::Decode(e.to_string())))
}

fn issued(kind: &str, namespace: Option<&str>, name: &str) -> IssuedObject {
    IssuedObject {
        kind: kind.into(),
        namespace: namespace.map(str::to_string),
        name: name.into(),
    }
}

/// Names of what one Grant gets.
struct Names {
    grant: String,
    /// Roles and RoleBindings in claimed namespaces, the ClusterRole and ClusterRoleBinding.
    rbac: String,
    /// The Role and RoleBinding on the Lease.
    lease_rbac: String,
    /// The Role and RoleBinding, in the grants namespace, that let the ServiceAccount renew its
    /// own token.
    token_rbac: String,
    lease: String,
}

impl Names {
    fn of(grant: &Grant) -> Result<Names, IssueError> {
        let name = grant
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or_else(|| IssueError::Cluster(Error::Decode("the Grant has no name".into())))?;
        Ok(Names {
            rbac: format!("kbind:{name}"),
            lease_rbac: format!("kbind:{name}:lease"),
            token_rbac: format!("kbind:{name}:token"),
            lease: lease_name(&grant.spec.consumer_cluster_uid),
            grant: name,
        })
    }
}

impl KubernetesIssuer {
    /// An issuer acting through `client` (needs to manage Namespaces, ServiceAccounts and their
    /// tokens, RBAC, Leases, and read CRDs; and to hold every permission it grants).
    pub fn new(client: Arc<dyn ClusterClient>, options: Options) -> Self {
        Self {
            client,
            options,
            kcp_like: tokio::sync::OnceCell::new(),
            claims_in_flight: parking_lot::Mutex::new(HashMap::new()),
        }
    }

    /// The lock one identity's claims are judged and made under: concurrent binds of one identity
    /// count each other's new namespaces against its quota. Locks nobody holds are dropped.
    fn claim_lock(&self, subject: &str) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.claims_in_flight.lock();
        locks.retain(|_, lock| Arc::strong_count(lock) > 1);
        locks.entry(subject.to_string()).or_default().clone()
    }

    /// The issuer's flags.
    pub fn options(&self) -> &Options {
        &self.options
    }

    fn labels(&self, names: &Names) -> BTreeMap<String, String> {
        BTreeMap::from([
            (LABEL_GRANT.to_string(), names.grant.clone()),
            (LABEL_MANAGED_BY.to_string(), MANAGED_BY.to_string()),
        ])
    }

    /// The Export's APIs as the provider serves them; every one must be a CRD labelled exported.
    pub async fn resolve_apis(&self, export: &Export) -> Result<Vec<ResolvedApi>, IssueError> {
        let mut resolved = Vec::new();
        let mut missing = Vec::new();
        for api in &export.spec.apis {
            match self.client.get_opt(&crd_resource(), None, &api.name).await? {
                Some(crd) => match exported_api(&crd) {
                    Some(found) => resolved.push(found),
                    None => missing.push(api.name.clone()),
                },
                None => missing.push(api.name.clone()),
            }
        }
        if !missing.is_empty() {
            return Err(IssueError::ApiNotExported(missing));
        }
        Ok(resolved)
    }

    /// The operator's claim policy over these options.
    fn policy(&self) -> claims::Policy<'_> {
        claims::Policy {
            claimable: &self.options.claimable_namespaces,
            unclaimable: &self.options.unclaimable_namespaces,
            reserved: [&self.options.grants_namespace, &self.options.lease_namespace],
            max_per_bind: usize::from(self.options.max_namespaces_per_bind),
        }
    }

    /// Checks every requested namespace before anything is written: the operator's patterns and
    /// per-bind maximum, each namespace's owner, then the identity's quota.
    async fn judge_namespaces(&self, grant: &Grant) -> Result<Vec<(String, NamespaceState)>, IssueError> {
        let subject = &grant.spec.identity.subject;
        self.policy().check(subject, &grant.spec.namespaces)?;
        let mut states = Vec::new();
        let requested: BTreeSet<&String> = grant.spec.namespaces.iter().collect();
        for ns in requested {
            let state = claims::check(self.client.as_ref(), ns, subject).await?;
            states.push((ns.clone(), state));
        }
        let adding = states.iter().filter(|(_, s)| *s == NamespaceState::Missing).count();
        if adding > 0 {
            let held = claims::held_by(self.client.as_ref(), subject).await?;
            let quota = usize::from(self.options.namespace_quota);
            if held + adding > quota {
                return Err(IssueError::NamespaceQuotaExceeded { quota, held, adding });
            }
        }
        Ok(states)
    }

    /// Refuses a consumer cluster another identity bound: the Lease records the identity that
    /// first bound it, and of live Grants naming the UID under different identities the oldest
    /// wins (a bind racing another identity's cannot share the Lease either).
    async fn check_consumer(&self, grant: &Grant, names: &Names) -> Result<(), IssueError> {
        if self.check_lease_owner(grant, names).await? == LeaseProof::Proven {
            // Its konnector heartbeated under this identity: other identities' Grants naming
            // the UID (refused ones, or made by hand) cannot take it.
            return Ok(());
        }
        let subject = grant.spec.identity.subject.as_str();
        let uid = &grant.spec.consumer_cluster_uid;
        let ours = (
            grant.metadata.creation_timestamp.as_ref().map(|t| t.0),
            names.grant.as_str(),
        );
        let grants = match self.client.list(&erase::<Grant>(), None, &ListParams::default()).await {
            Ok(list) => list.items,
            // Grants not served: no Grant of anyone names this consumer.
            Err(Error::NotFound { .. }) => Vec::new(),
            Err(e) => return Err(e.into()),
        };
        let older_foreign = grants.iter().any(|g| {
            let created = g.metadata.creation_timestamp.as_ref().map(|t| t.0);
            let name = g.metadata.name.as_deref().unwrap_or_default();
            claims::consumer_subject(g, uid).is_some_and(|s| s != subject)
                && name != names.grant
                // A Grant without a creation time (not stored) is the newest.
                && match (created, ours.0) {
                    (Some(theirs), Some(mine)) => (theirs, name) < (mine, ours.1),
                    (Some(_), None) => true,
                    (None, _) => false,
                }
        });
        if older_foreign {
            return Err(IssueError::ConsumerClusterClaimed { uid: uid.clone() });
        }
        Ok(())
    }

    /// Refuses a consumer cluster whose heartbeat Lease records another identity; says whether
    /// the Lease proves the cluster this identity's.
    async fn check_lease_owner(&self, grant: &Grant, names: &Names) -> Result<LeaseProof, IssueError> {
        let lease = self
            .client
            .get_opt(&lease_resource(), Some(&self.options.lease_namespace), &names.lease)
            .await?;
        let Some(lease) = lease else {
            return Ok(LeaseProof::None);
        };
        match lease_owner(&lease) {
            Some(owner) if owner != grant.spec.identity.subject => Err(IssueError::ConsumerClusterClaimed {
                uid: grant.spec.consumer_cluster_uid.clone(),
            }),
            Some(_) if renewed(&lease) => Ok(LeaseProof::Proven),
            _ => Ok(LeaseProof::None),
        }
    }

    /// Creates the missing claimed namespaces; on a lost race (someone else's namespace appeared)
    /// removes the ones this call created and returns the refusal.
    async fn claim(
        &self,
        grant: &Grant,
        names: &Names,
        states: &[(String, NamespaceState)],
    ) -> Result<Vec<DynamicObject>, IssueError> {
        let subject = &grant.spec.identity.subject;
        let mut created: Vec<DynamicObject> = Vec::new();
        for (ns, state) in states {
            if *state == NamespaceState::Ours {
                continue;
            }
            let body = object(claims::claimed_namespace(ns, subject, &names.grant))?;
            let outcome = match self.client.create(&namespace_resource(), None, &body, &post()).await {
                Ok(made) => {
                    created.push(made);
                    Ok(())
                }
                Err(Error::AlreadyExists { .. }) => claims::check(self.client.as_ref(), ns, subject).await.map(|_| ()),
                Err(e) => Err(e.into()),
            };
            if let Err(e) = outcome {
                self.unclaim(&created).await;
                return Err(e);
            }
        }
        Ok(created)
    }

    /// Counts the identity's claims again after `created` were made: over the quota (another
    /// issuer process claimed for the same identity meanwhile), this attempt's claims go again
    /// and the bind is refused; the Grant's retry judges afresh.
    async fn recount(&self, grant: &Grant, created: &[DynamicObject]) -> Result<(), IssueError> {
        if created.is_empty() {
            return Ok(());
        }
        let held = claims::held_by(self.client.as_ref(), &grant.spec.identity.subject).await?;
        let quota = usize::from(self.options.namespace_quota);
        if held <= quota {
            return Ok(());
        }
        self.unclaim(created).await;
        Err(IssueError::NamespaceQuotaExceeded {
            quota,
            held: held - created.len(),
            adding: created.len(),
        })
    }

    /// Deletes namespaces this attempt created (still empty: nothing was issued in them yet).
    async fn unclaim(&self, created: &[DynamicObject]) {
        for ns in created {
            let (Some(name), uid) = (ns.metadata.name.as_deref(), ns.metadata.uid.clone()) else {
                continue;
            };
            let exactly = DeleteParams {
                preconditions: Some(Preconditions {
                    uid,
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            if let Err(e) = self.client.delete(&namespace_resource(), None, name, &exactly).await {
                tracing::warn!(namespace = %name, error = %e, "could not remove a namespace claimed by a refused attempt");
            }
        }
    }

    /// Creates a namespace kbind needs (grants, lease) when missing.
    async fn ensure_namespace(&self, ns: &str) -> Result<(), IssueError> {
        if self.client.get_opt(&namespace_resource(), None, ns).await?.is_some() {
            return Ok(());
        }
        let body = object(json!({
            "apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": ns, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
        }))?;
        match self.client.create(&namespace_resource(), None, &body, &post()).await {
            Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    async fn apply(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        body: Value,
    ) -> Result<(), IssueError> {
        self.client
            .apply(res, namespace, name, body, FIELD_MANAGER, true)
            .await?;
        Ok(())
    }

    async fn apply_typed<K>(&self, obj: &K) -> Result<(), IssueError>
    where
        K: kube::Resource<DynamicType = ()> + serde::Serialize,
    {
        let res = erase::<K>();
        let mut body = serde_json::to_value(obj).map_err(|e| IssueError::Cluster(Error::Decode(e.to_string())))?;
        body["apiVersion"] = json!(res.api_version);
        body["kind"] = json!(res.kind);
        let meta = obj.meta();
        let name = meta.name.clone().unwrap_or_default();
        self.apply(&res, meta.namespace.as_deref(), &name, body).await
    }

    fn meta(&self, names: &Names, namespace: Option<&str>, name: &str) -> kube::api::ObjectMeta {
        kube::api::ObjectMeta {
            name: Some(name.to_string()),
            namespace: namespace.map(str::to_string),
            labels: Some(self.labels(names)),
            ..Default::default()
        }
    }

    fn subject(&self, names: &Names) -> k8s_openapi::api::rbac::v1::Subject {
        k8s_openapi::api::rbac::v1::Subject {
            kind: "ServiceAccount".into(),
            name: names.grant.clone(),
            namespace: Some(self.options.grants_namespace.clone()),
            api_group: None,
        }
    }

    async fn apply_role(&self, names: &Names, ns: &str, name: &str, rules: Vec<PolicyRule>) -> Result<(), IssueError> {
        self.apply_typed(&Role {
            metadata: self.meta(names, Some(ns), name),
            rules: Some(rules),
        })
        .await?;
        self.apply_typed(&RoleBinding {
            metadata: self.meta(names, Some(ns), name),
            role_ref: k8s_openapi::api::rbac::v1::RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "Role".into(),
                name: name.into(),
            },
            subjects: Some(vec![self.subject(names)]),
        })
        .await
    }

    /// Removes the Grant's Roles and RoleBindings in namespaces it no longer uses (`keep`:
    /// (namespace, name) pairs still wanted).
    async fn sweep_roles(&self, names: &Names, keep: &BTreeSet<(String, String)>) -> Result<(), IssueError> {
        let selector = format!("{LABEL_GRANT}={}", names.grant);
        for res in [erase::<RoleBinding>(), erase::<Role>()] {
            let list = self
                .client
                .list(&res, None, &ListParams::default().labels(&selector))
                .await?;
            for obj in list.items {
                let (Some(ns), Some(name)) = (obj.metadata.namespace.clone(), obj.metadata.name.clone()) else {
                    continue;
                };
                if keep.contains(&(ns.clone(), name.clone())) {
                    continue;
                }
                match self
                    .client
                    .delete(&res, Some(&ns), &name, &DeleteParams::default())
                    .await
                {
                    Ok(_) | Err(Error::NotFound { .. }) => {}
                    Err(e) => return Err(e.into()),
                }
            }
        }
        Ok(())
    }

    /// Removes the Grant's Roles and RoleBindings from namespaces that are no longer claimed by
    /// its identity: judged on one complete list of its Roles and a successful read of each
    /// namespace, and only then deleted (a failed read withdraws nothing).
    async fn withdraw_unowned(&self, grant: &Grant, names: &Names) -> Result<(), IssueError> {
        let selector = format!("{LABEL_GRANT}={}", names.grant);
        let roles = self
            .client
            .list(&erase::<Role>(), None, &ListParams::default().labels(&selector))
            .await?;
        let mut withdraw = Vec::new();
        for role in roles.items {
            let (Some(ns), Some(name)) = (role.metadata.namespace, role.metadata.name) else {
                continue;
            };
            if ns == self.options.lease_namespace {
                continue;
            }
            match claims::check(self.client.as_ref(), &ns, &grant.spec.identity.subject).await {
                Ok(NamespaceState::Ours) => {}
                Ok(NamespaceState::Missing)
                | Err(IssueError::NamespaceClaimed { .. } | IssueError::NamespaceNotClaimable { .. }) => {
                    withdraw.push((ns, name));
                }
                Err(e) => return Err(e),
            }
        }
        for (ns, name) in withdraw {
            self.delete_quietly(&erase::<RoleBinding>(), Some(&ns), &name).await?;
            self.delete_quietly(&erase::<Role>(), Some(&ns), &name).await?;
        }
        Ok(())
    }

    /// Pre-creates the heartbeat Lease (never overwrites one: the konnector renews it).
    async fn ensure_lease(&self, grant: &Grant, names: &Names) -> Result<(), IssueError> {
        let ns = &self.options.lease_namespace;
        if self
            .client
            .get_opt(&lease_resource(), Some(ns), &names.lease)
            .await?
            .is_some()
        {
            return Ok(());
        }
        let body = object(json!({
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": names.lease,
                "namespace": ns,
                "labels": {
                    label::MANAGED: TRUE,
                    LABEL_CONSUMER_CLUSTER_UID: grant.spec.consumer_cluster_uid,
                    LABEL_MANAGED_BY: MANAGED_BY,
                    LABEL_CLAIMED_BY: claims::claimed_by_value(&grant.spec.identity.subject),
                },
                // The one identity that may bind this consumer cluster (check_consumer).
                "annotations": {ANNOTATION_CLAIMED_BY: grant.spec.identity.subject},
            },
            "spec": {"holderIdentity": grant.spec.consumer_cluster_uid},
        }))?;
        match self.client.create(&lease_resource(), Some(ns), &body, &post()).await {
            Ok(_) => Ok(()),
            // Another Grant's provision made it first: it must be this identity's. The Grants were
            // judged already (a racing identity's Grant is newer than ours, and refused by its own).
            Err(Error::AlreadyExists { .. }) => self.check_lease_owner(grant, names).await.map(|_| ()),
            Err(e) => Err(e.into()),
        }
    }

    async fn delete_quietly(&self, res: &ApiResource, ns: Option<&str>, name: &str) -> Result<(), IssueError> {
        match self.client.delete(res, ns, name, &DeleteParams::background()).await {
            Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }
}

fn post() -> PostParams {
    PostParams {
        field_manager: Some(FIELD_MANAGER.to_string()),
        ..PostParams::default()
    }
}

/// What a consumer's heartbeat Lease proves about whose cluster it is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum LeaseProof {
    /// Its owner is this identity and a konnector renewed it.
    Proven,
    /// Nothing: no Lease, none renewed yet, or one from before owners were recorded.
    None,
}

/// Whether a konnector ever renewed the heartbeat Lease (the issuer pre-creates it unrenewed).
fn renewed(lease: &DynamicObject) -> bool {
    lease.data.pointer("/spec/renewTime").is_some_and(|t| !t.is_null())
}

/// The identity a heartbeat Lease was pre-created for, when the issuer recorded one.
fn lease_owner(lease: &DynamicObject) -> Option<&str> {
    lease
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_CLAIMED_BY))
        .map(String::as_str)
}

/// The exported API a CRD describes; `None` unless labelled `core.kbind.io/exported=true`.
pub fn exported_api(crd: &DynamicObject) -> Option<ResolvedApi> {
    let exported = crd
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::EXPORTED))
        .is_some_and(|v| v == TRUE);
    if !exported {
        return None;
    }
    let spec = crd.data.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let plural = spec.get("names")?.get("plural")?.as_str()?.to_string();
    let namespaced = spec.get("scope").and_then(Value::as_str) != Some("Cluster");
    Some(ResolvedApi {
        name: format!("{plural}.{group}"),
        group,
        plural,
        namespaced,
    })
}

#[async_trait]
impl Issuer for KubernetesIssuer {
    fn name(&self) -> &str {
        ISSUER_NAME
    }

    async fn check_provider(&self) -> Result<(), IssueError> {
        let kcp_like = self
            .kcp_like
            .get_or_try_init(|| async {
                let identity = self.client.identity().await?;
                Ok::<_, IssueError>(identity.source == IdentitySource::LogicalCluster)
            })
            .await?;
        if *kcp_like {
            return Err(IssueError::UnsupportedProvider(
                "this provider is kcp-like (LogicalCluster \"cluster\" in core.kcp.io/v1alpha1 exists): the in-tree \
                 Kubernetes issuer cannot issue ServiceAccounts and RBAC there; run kbind-backend with an issuer for \
                 kcp (an implementation of kbind_backend::issuer::Issuer)"
                    .into(),
            ));
        }
        Ok(())
    }

    async fn provision(&self, grant: &Grant, export: &Export) -> Result<Issued, IssueError> {
        let names = Names::of(grant)?;
        // Everything that can refuse is checked before the first write.
        self.check_provider().await?;
        let apis = self.resolve_apis(export).await?;
        let cluster_scoped = apis.iter().filter(|a| !a.namespaced).map(|a| a.name.clone());
        if let Some(refusal) = IssueError::unshared(export, cluster_scoped) {
            return Err(refusal);
        }
        // Judge and claim under the identity's lock, so this process's binds count each other;
        // the count after the claim catches another issuer process racing this one.
        let lock = self.claim_lock(&grant.spec.identity.subject);
        let _claiming = lock.lock().await;
        let states = match self.judge_namespaces(grant).await {
            Ok(states) => states,
            Err(e @ (IssueError::NamespaceClaimed { .. } | IssueError::NamespaceNotClaimable { .. })) => {
                // A namespace no longer claimed by this identity (the platform took it back)
                // keeps no Role of this Grant.
                self.withdraw_unowned(grant, &names).await?;
                return Err(e);
            }
            Err(e) => return Err(e),
        };
        self.check_consumer(grant, &names).await?;

        let created = self.claim(grant, &names, &states).await?;
        self.recount(grant, &created).await?;
        drop(_claiming);
        let grants_ns = self.options.grants_namespace.clone();
        let lease_ns = self.options.lease_namespace.clone();
        self.ensure_namespace(&grants_ns).await?;
        self.ensure_namespace(&lease_ns).await?;

        // Applying an unchanged ServiceAccount keeps it (same UID), so its tokens keep working.
        self.apply_typed(&ServiceAccount {
            metadata: self.meta(&names, Some(&grants_ns), &names.grant),
            automount_service_account_token: Some(false),
            ..Default::default()
        })
        .await?;
        let mut objects = Vec::new();

        let ns_rules = rbac::namespace_rules(&apis, export);
        let mut keep = BTreeSet::from([
            (lease_ns.clone(), names.lease_rbac.clone()),
            (grants_ns.clone(), names.token_rbac.clone()),
        ]);
        let mut namespaces: Vec<String> = states.iter().map(|(ns, _)| ns.clone()).collect();
        namespaces.sort();
        if !ns_rules.is_empty() {
            for ns in &namespaces {
                self.apply_role(&names, ns, &names.rbac, ns_rules.clone()).await?;
                keep.insert((ns.clone(), names.rbac.clone()));
                objects.push(issued("Role", Some(ns), &names.rbac));
                objects.push(issued("RoleBinding", Some(ns), &names.rbac));
            }
        }

        self.apply_typed(&ClusterRole {
            metadata: self.meta(&names, None, &names.rbac),
            rules: Some(rbac::cluster_rules(&apis)),
            aggregation_rule: None,
        })
        .await?;
        self.apply_typed(&ClusterRoleBinding {
            metadata: self.meta(&names, None, &names.rbac),
            role_ref: k8s_openapi::api::rbac::v1::RoleRef {
                api_group: "rbac.authorization.k8s.io".into(),
                kind: "ClusterRole".into(),
                name: names.rbac.clone(),
            },
            subjects: Some(vec![self.subject(&names)]),
        })
        .await?;
        objects.push(issued("ClusterRole", None, &names.rbac));
        objects.push(issued("ClusterRoleBinding", None, &names.rbac));

        self.ensure_lease(grant, &names).await?;
        self.apply_role(&names, &lease_ns, &names.lease_rbac, rbac::lease_rules(&names.lease))
            .await?;
        objects.push(issued("Lease", Some(&lease_ns), &names.lease));
        objects.push(issued("Role", Some(&lease_ns), &names.lease_rbac));
        objects.push(issued("RoleBinding", Some(&lease_ns), &names.lease_rbac));

        // The konnector renews its token itself (a TokenRequest for this ServiceAccount, by
        // name); no gateway or issuer is needed for that, and revoking deletes the account.
        self.apply_role(&names, &grants_ns, &names.token_rbac, rbac::token_rules(&names.grant))
            .await?;
        objects.push(issued("Role", Some(&grants_ns), &names.token_rbac));
        objects.push(issued("RoleBinding", Some(&grants_ns), &names.token_rbac));

        // A namespace dropped from the Grant loses its Role; the namespace itself stays claimed.
        self.sweep_roles(&names, &keep).await?;

        Ok(Issued {
            issuer: ISSUER_NAME.into(),
            service_account: Some(issued("ServiceAccount", Some(&grants_ns), &names.grant)),
            namespaces,
            objects,
        })
    }

    async fn credential(&self, grant: &Grant) -> Result<Credential, IssueError> {
        let names = Names::of(grant)?;
        let ns = &self.options.grants_namespace;
        let sa = erase::<ServiceAccount>();
        let ours = self
            .client
            .get_opt(&sa, Some(ns), &names.grant)
            .await?
            .is_some_and(|sa| sa.metadata.labels.as_ref().and_then(|l| l.get(LABEL_GRANT)) == Some(&names.grant));
        if !ours {
            return Err(IssueError::NotIssued);
        }
        let body = json!({
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": self.options.token_ttl.as_secs()},
        });
        let answer = match self
            .client
            .create_subresource(&sa, Some(ns), &names.grant, "token", &body)
            .await
        {
            Ok(answer) => answer,
            Err(Error::NotFound { .. }) => return Err(IssueError::NotIssued),
            Err(e) => return Err(e.into()),
        };
        let token = answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| IssueError::Cluster(Error::Decode("the TokenRequest answer carries no token".into())))?
            .to_string();
        let expires_at = answer
            .pointer("/status/expirationTimestamp")
            .and_then(Value::as_str)
            .and_then(|t| t.parse::<jiff::Timestamp>().ok());
        Ok(Credential { token, expires_at })
    }

    async fn revoke(&self, grant: &Grant) -> Result<(), IssueError> {
        let names = Names::of(grant)?;
        // The ServiceAccount first: its tokens stop working at once.
        self.delete_quietly(
            &erase::<ServiceAccount>(),
            Some(&self.options.grants_namespace),
            &names.grant,
        )
        .await?;
        self.sweep_roles(&names, &BTreeSet::new()).await?;
        self.delete_quietly(&erase::<ClusterRoleBinding>(), None, &names.rbac)
            .await?;
        self.delete_quietly(&erase::<ClusterRole>(), None, &names.rbac).await?;
        let lease_ns = &self.options.lease_namespace;
        let lease = self
            .client
            .get_opt(&lease_resource(), Some(lease_ns), &names.lease)
            .await?;
        let owner = lease.as_ref().and_then(lease_owner);
        // A refused Grant of another identity never takes the consumer's Lease with it; an
        // owned Lease goes with its owner's last Grant (a Lease from before owners were
        // recorded, with the last Grant of any identity).
        if owner.is_some_and(|o| o != grant.spec.identity.subject) {
            return Ok(());
        }
        // A Lease a konnector renewed proves that its owner's credential ran in that consumer
        // cluster: it stays as the record of whose cluster it is, so after an unbind nobody
        // else can bind the (visible) UID and lock its owner out. A Lease never renewed proved
        // nothing and goes, so a mistyped UID binds nobody's cluster for good.
        if owner.is_some() && lease.as_ref().is_some_and(renewed) {
            return Ok(());
        }
        let others = self
            .client
            .list(&erase::<Grant>(), None, &ListParams::default())
            .await?
            .items
            .into_iter()
            .filter(|g| g.metadata.name.as_deref() != Some(names.grant.as_str()))
            .any(|g| {
                claims::consumer_subject(&g, &grant.spec.consumer_cluster_uid)
                    .is_some_and(|s| owner.is_none_or(|o| o == s))
            });
        if !others {
            self.delete_quietly(&lease_resource(), Some(lease_ns), &names.lease)
                .await?;
        }
        Ok(())
    }

    fn precheck_namespaces(&self, subject: &str, namespaces: &[String]) -> Result<(), IssueError> {
        self.policy().check(subject, namespaces)
    }
}
