//! The credential the Kubernetes issuer mints, tried on a real kube-apiserver (kbind-testenv):
//! every verb × every resource and subresource from discovery × {a claimed namespace, an
//! unclaimed namespace, all namespaces / cluster scope}, plus named objects (the exported CRDs,
//! `kube-system`, our Lease and another consumer's, the tokens of our ServiceAccount and of
//! another), through SelfSubjectAccessReview; every allowed answer is then tried for real. The
//! allowed set must be exactly the Grant's, on top of what any authenticated caller may do
//! (measured with a bare ServiceAccount, not assumed): among it, minting a token of its own
//! ServiceAccount (the konnector's renewal) and of no other. The Grant controller provisions
//! (finalizer, status, the Export's status) and, when the Grant is deleted, revokes: the token
//! stops working, and so does the one it minted for itself. The issuer and its controller run
//! as a ServiceAccount holding exactly the issuer RBAC the chart renders with its default values.
//! Tenant isolation on the same apiserver: an Export with cluster-scoped APIs and no
//! `spec.clusterScopedSharing` issues nothing; namespaces the operator's rules refuse, one that
//! existed before, and more than a bind may claim are refused with nothing created; a consumer
//! cluster another identity bound is refused and keeps its Lease.
//!
//! Without the binaries the test prints one line and passes, unless `KBIND_REQUIRE_REAL_K8S=1`.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::authorization::v1::{ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec};
use kbind_api::consts::backend::{LABEL_CONSUMER_CLUSTER_UID, LABEL_EXPORT, LABEL_GRANT};
use kbind_api::{
    BoundApiRef, Export, ExportSpec, Grant, GrantIdentity, GrantSpec, RelatedReference, RelatedResource,
    RelatedResourceDirection, RelatedResourceSelector, grant_name,
};
use kbind_backend::issuer::{Issuer, KubernetesIssuer, Options, run_controller};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, Error, KubeClusterClient, ListParams,
    Patch, PatchParams, PostParams, WatchParams,
};
use kbind_testenv::{TestEnv, User};

mod issuer_rbac_chart;
use serde_json::{Value, json};

const CONSUMER: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
const OTHER_CONSUMER: &str = "7d0e8c1f-2b3a-4c5d-8e9f-a0b1c2d3e4f5";
const CLAIMED: &str = "team-a";
const UNCLAIMED: &str = "team-z";
const VERBS: [&str; 8] = [
    "get",
    "list",
    "watch",
    "create",
    "update",
    "patch",
    "delete",
    "deletecollection",
];

use kbind_scenarios::apis::crd;

fn obj(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a valid object")
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
enum Scope {
    /// One namespace.
    In(&'static str),
    /// All namespaces (namespaced resources) or the cluster (cluster-scoped ones).
    All,
}

impl std::fmt::Display for Scope {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Scope::In(ns) => write!(f, "ns/{ns}"),
            Scope::All => f.write_str("cluster"),
        }
    }
}

/// One row of the table: a resource (with subresource), a scope and maybe a name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
struct Row {
    group: String,
    resource: String,
    subresource: String,
    scope: Scope,
    name: Option<String>,
}

impl std::fmt::Display for Row {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let group = if self.group.is_empty() {
            String::new()
        } else {
            format!(".{}", self.group)
        };
        let sub = if self.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", self.subresource)
        };
        write!(f, "{}{group}{sub} @ {}", self.resource, self.scope)?;
        if let Some(n) = &self.name {
            write!(f, " name={n}")?;
        }
        Ok(())
    }
}

async fn allowed(client: &kube::Client, row: &Row, verb: &str) -> bool {
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                group: Some(row.group.clone()),
                resource: Some(row.resource.clone()),
                subresource: (!row.subresource.is_empty()).then(|| row.subresource.clone()),
                namespace: match row.scope {
                    Scope::In(ns) => Some(ns.to_string()),
                    Scope::All => None,
                },
                name: row.name.clone(),
                verb: Some(verb.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let api: kube::Api<SelfSubjectAccessReview> = kube::Api::all(client.clone());
    let answer = api
        .create(&kube::api::PostParams::default(), &review)
        .await
        .expect("SelfSubjectAccessReview");
    answer.status.is_some_and(|s| s.allowed)
}

/// Every (row, verb) `client` may do.
async fn allowed_set(client: &kube::Client, rows: &[Row]) -> BTreeSet<(Row, &'static str)> {
    let pairs: Vec<(Row, &'static str)> = rows
        .iter()
        .flat_map(|r| VERBS.iter().map(move |v| (r.clone(), *v)))
        .collect();
    futures::stream::iter(pairs)
        .map(|(row, verb)| async move { allowed(client, &row, verb).await.then_some((row, verb)) })
        .buffer_unordered(16)
        .filter_map(|x| async move { x })
        .collect()
        .await
}

fn token_config(base: &kube::Config, token: &str) -> kube::Config {
    let mut config = base.clone();
    config.auth_info = kube::config::AuthInfo {
        token: Some(token.to_string().into()),
        ..Default::default()
    };
    config
}

async fn wait_served(admin: &dyn ClusterClient, res: &ApiResource) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin.list(res, None, &ListParams::default()).await.is_err() {
        assert!(Instant::now() < deadline, "{} is never served", res.plural);
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn res(group: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: "v1".into(),
        api_version: if group.is_empty() {
            "v1".into()
        } else {
            format!("{group}/v1")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

/// What the Grant below should allow, written out by hand (not derived from the issuer's code).
fn expected_by_grant(lease: &str, service_account: &str) -> BTreeSet<(Row, &'static str)> {
    let row = |group: &str, resource: &str, sub: &str, scope: Scope, name: Option<&str>| Row {
        group: group.into(),
        resource: resource.into(),
        subresource: sub.into(),
        scope,
        name: name.map(str::to_string),
    };
    let sync = ["get", "list", "watch", "create", "patch", "delete"];
    let mut set = BTreeSet::new();
    let mut add = |r: Row, verbs: &[&'static str]| {
        for v in verbs {
            set.insert((r.clone(), *v));
        }
    };
    add(row("example.org", "widgets", "", Scope::In(CLAIMED), None), &sync);
    add(
        row("example.org", "widgets", "status", Scope::In(CLAIMED), None),
        &["get"],
    );
    add(
        row("", "secrets", "", Scope::In(CLAIMED), None),
        &["get", "list", "watch"],
    );
    add(row("", "configmaps", "", Scope::In(CLAIMED), None), &sync);
    // A related kind of another group (FromConsumer): read and write, in the claimed namespace.
    add(
        row("networking.k8s.io", "ingresses", "", Scope::In(CLAIMED), None),
        &sync,
    );
    add(row("example.org", "gadgets", "", Scope::All, None), &sync);
    add(row("example.org", "gadgets", "status", Scope::All, None), &["get"]);
    for name in ["widgets.example.org", "gadgets.example.org"] {
        add(
            row(
                "apiextensions.k8s.io",
                "customresourcedefinitions",
                "",
                Scope::All,
                Some(name),
            ),
            &["get", "list", "watch"],
        );
    }
    add(row("", "namespaces", "", Scope::All, Some("kube-system")), &["get"]);
    add(
        row("coordination.k8s.io", "leases", "", Scope::In("kbind"), Some(lease)),
        &["get", "update"],
    );
    // The konnector renews its own token: a TokenRequest on its own ServiceAccount only.
    add(
        row(
            "",
            "serviceaccounts",
            "token",
            Scope::In("kbind-grants"),
            Some(service_account),
        ),
        &["create"],
    );
    set
}

/// Does `verb` on `row` for real; `Err` only on 401/403 (any other answer means RBAC let it through).
async fn try_for_real(
    client: &dyn ClusterClient,
    kube_client: &kube::Client,
    row: &Row,
    verb: &str,
) -> Result<(), Error> {
    let r = res(&row.group, "Unknown", &row.resource);
    let r = match (row.group.as_str(), row.resource.as_str()) {
        ("example.org", "widgets") => res("example.org", "Widget", "widgets"),
        ("example.org", "gadgets") => res("example.org", "Gadget", "gadgets"),
        ("", "secrets") => res("", "Secret", "secrets"),
        ("", "configmaps") => res("", "ConfigMap", "configmaps"),
        ("networking.k8s.io", "ingresses") => res("networking.k8s.io", "Ingress", "ingresses"),
        ("", "namespaces") => res("", "Namespace", "namespaces"),
        ("coordination.k8s.io", "leases") => res("coordination.k8s.io", "Lease", "leases"),
        ("apiextensions.k8s.io", _) => {
            erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>()
        }
        _ => r,
    };
    let ns = match row.scope {
        Scope::In(ns) => Some(ns),
        Scope::All => None,
    };
    let name = row.name.clone().unwrap_or_else(|| "probe".into());
    let answer = match (verb, row.subresource.as_str()) {
        ("create", "token") => {
            let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}});
            client
                .create_subresource(
                    &erase::<k8s_openapi::api::core::v1::ServiceAccount>(),
                    ns,
                    &name,
                    "token",
                    &request,
                )
                .await
                .map(|_| ())
        }
        ("get", "") => client.get(&r, ns, &name).await.map(|_| ()),
        ("get", "status") => {
            let api: kube::Api<DynamicObject> = match ns {
                Some(ns) => kube::Api::namespaced_with(kube_client.clone(), ns, &r),
                None => kube::Api::all_with(kube_client.clone(), &r),
            };
            match api.get_status(&name).await {
                Err(kube::Error::Api(status)) if status.code == 401 || status.code == 403 => Err(Error::Forbidden {
                    verb: "get".into(),
                    resource: format!("{}/status", r.plural),
                    message: status.message,
                }),
                _ => Ok(()),
            }
        }
        ("list", _) if row.name.is_some() => client
            .list(&r, ns, &ListParams::default().fields(&format!("metadata.name={name}")))
            .await
            .map(|_| ()),
        ("list", _) => client.list(&r, ns, &ListParams::default()).await.map(|_| ()),
        ("watch", _) => {
            let mut params = WatchParams::default().timeout(1);
            if row.name.is_some() {
                params = params.fields(&format!("metadata.name={name}"));
            }
            match client.watch(&r, ns, &params, "0").await {
                Ok(stream) => stream.try_collect::<Vec<_>>().await.map(|_| ()),
                Err(e) => Err(e),
            }
        }
        ("create", _) => {
            let mut body = json!({"apiVersion": r.api_version, "kind": r.kind, "metadata": {"name": format!("probe-{}", row.resource)}});
            if let Some(ns) = ns {
                body["metadata"]["namespace"] = json!(ns);
            }
            client
                .create(&r, ns, &obj(body), &PostParams::default())
                .await
                .map(|_| ())
        }
        ("update", _) => {
            let current = client.get(&r, ns, &name).await?;
            client
                .replace(&r, ns, &name, &current, &PostParams::default())
                .await
                .map(|_| ())
        }
        ("patch", _) => client
            .patch(
                &r,
                ns,
                &name,
                &Patch::Merge(json!({"metadata": {"labels": {"probe": "yes"}}})),
                &PatchParams::default(),
            )
            .await
            .map(|_| ()),
        ("delete", _) => client.delete(&r, ns, &name, &DeleteParams::default()).await.map(|_| ()),
        (other, sub) => panic!("no real request for {other} on /{sub}"),
    };
    match answer {
        Err(e @ (Error::Forbidden { .. } | Error::Unauthorized { .. })) => Err(e),
        _ => Ok(()),
    }
}

/// A client acting as the chart's controller ServiceAccount, holding exactly the issuer RBAC
/// the chart renders with its default values (`issuer_chart.rs` pins it to `issuer_rbac()`).
async fn backend_client(
    admin: &dyn ClusterClient,
    admin_config: &kube::Config,
    helm: &std::path::Path,
) -> Arc<dyn ClusterClient> {
    let ns = issuer_rbac_chart::NAMESPACE;
    let namespace = obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
    admin
        .create(
            &res("", "Namespace", "namespaces"),
            None,
            &namespace,
            &PostParams::default(),
        )
        .await
        .expect("the backend's namespace");
    for doc in issuer_rbac_chart::issuer_objects(&issuer_rbac_chart::render(helm, &[])) {
        let kind = doc["kind"].as_str().expect("a kind").to_string();
        let (group, plural) = match kind.as_str() {
            "Namespace" => ("", "namespaces"),
            "ServiceAccount" => ("", "serviceaccounts"),
            "ClusterRole" => ("rbac.authorization.k8s.io", "clusterroles"),
            "ClusterRoleBinding" => ("rbac.authorization.k8s.io", "clusterrolebindings"),
            "Role" => ("rbac.authorization.k8s.io", "roles"),
            _ => ("rbac.authorization.k8s.io", "rolebindings"),
        };
        let object = obj(doc);
        let namespace = object.metadata.namespace.clone();
        admin
            .create(
                &res(group, &kind, plural),
                namespace.as_deref(),
                &object,
                &PostParams::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("the chart's {kind}: {e}"));
    }
    let sa = erase::<k8s_openapi::api::core::v1::ServiceAccount>();
    let token = admin
        .create_subresource(
            &sa,
            Some(ns),
            issuer_rbac_chart::CONTROLLER,
            "token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .expect("the backend's token")["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    Arc::new(KubeClusterClient::from_config(token_config(admin_config, &token)).expect("backend client"))
}

/// Creates the Grant of `subject` for `export` on consumer `uid` and returns its name.
async fn create_grant(
    admin: &dyn ClusterClient,
    subject: &str,
    export: &str,
    uid: &str,
    namespaces: &[&str],
) -> String {
    let name = grant_name(subject, export, uid);
    let mut grant = Grant::new(
        &name,
        GrantSpec {
            identity: GrantIdentity {
                subject: subject.into(),
                name: None,
            },
            export: export.into(),
            consumer_cluster_uid: uid.into(),
            namespaces: namespaces.iter().map(|n| n.to_string()).collect(),
        },
    );
    grant.metadata.labels = Some([(LABEL_CONSUMER_CLUSTER_UID.to_string(), uid.to_string())].into());
    admin.create_typed(&grant).await.expect("Grant");
    name
}

/// The `Ready=False` condition the controller gives Grant `name`, waited for with a deadline.
async fn refusal(admin: &dyn ClusterClient, name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let grant = admin.get_typed::<Grant>(None, name).await.expect("the Grant");
        let status = grant.status.unwrap_or_default();
        if let Some(c) = kbind_api::conditions::find(&status.conditions, "Ready")
            && c.status == "False"
        {
            return c.clone();
        }
        assert!(Instant::now() < deadline, "Grant {name} was never refused: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Tenant isolation cases (quotas, claims, take-backs), through the controller running on the chart's issuer RBAC,
/// while alice's Grant (consumer [`CONSUMER`], namespace [`CLAIMED`]) holds Lease `lease`.
async fn isolation(admin: &dyn ClusterClient, lease: &str) {
    let export = |name: &str, apis: &[&str]| {
        Export::new(
            name,
            ExportSpec {
                title: name.into(),
                description: None,
                icon: None,
                docs: None,
                apis: apis.iter().map(|n| BoundApiRef { name: n.to_string() }).collect(),
                conflict_policy: Default::default(),
                related_resources: vec![],
                cluster_scoped_sharing: false,
            },
        )
    };
    admin
        .create_typed(&export("private-gadgets", &["gadgets.example.org"]))
        .await
        .expect("Export");
    admin
        .create_typed(&export("plain", &["widgets.example.org"]))
        .await
        .expect("Export");
    let sa = erase::<k8s_openapi::api::core::v1::ServiceAccount>();
    let namespaces = res("", "Namespace", "namespaces");
    let fresh = "3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e6f";
    let too_many: Vec<String> = (0..11).map(|i| format!("bulk-{i}")).collect();
    let too_many: Vec<&str> = too_many.iter().map(String::as_str).collect();
    let cases: [(&str, &str, &str, &[&str], &str); 5] = [
        ("private-gadgets", "token:bob", fresh, &[], "ClusterScopedNotShared"),
        ("plain", "token:bob", fresh, &["kube-future"], "NamespaceNotAllowed"),
        ("plain", "token:carol", fresh, &[UNCLAIMED], "NamespaceNotAvailable"),
        ("plain", "token:dave", fresh, &too_many, "TooManyNamespaces"),
        (
            "plain",
            "token:mallory",
            CONSUMER,
            &["team-m"],
            "ConsumerClusterClaimed",
        ),
    ];
    for (export, subject, uid, wanted, reason) in cases {
        let name = create_grant(admin, subject, export, uid, wanted).await;
        let c = refusal(admin, &name).await;
        assert_eq!(c.reason, reason, "{subject} {export} {wanted:?}: {}", c.message);
        // Nothing was issued: no ServiceAccount (so no token), no namespace claimed.
        assert!(
            admin.get_opt(&sa, Some("kbind-grants"), &name).await.unwrap().is_none(),
            "{reason}"
        );
        for ns in wanted.iter().filter(|ns| **ns != UNCLAIMED) {
            assert!(
                admin.get_opt(&namespaces, None, ns).await.unwrap().is_none(),
                "{reason}: {ns} was created"
            );
        }
        admin
            .delete(&erase::<Grant>(), None, &name, &DeleteParams::default())
            .await
            .expect("delete the refused Grant");
    }
    // The Export says why before anyone binds.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let status = admin
            .get_typed::<Export>(None, "private-gadgets")
            .await
            .unwrap()
            .status
            .unwrap_or_default();
        if kbind_api::conditions::find(&status.conditions, "Ready")
            .is_some_and(|c| c.reason == "ClusterScopedNotShared")
        {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the Export never said ClusterScopedNotShared: {status:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Mallory's refused Grant is revoked (its finalizer goes) without taking alice's Lease.
    let mallorys = grant_name("token:mallory", "plain", CONSUMER);
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin
        .get_opt(&erase::<Grant>(), None, &mallorys)
        .await
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "mallory's refused Grant stays");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept = admin
        .get(&res("coordination.k8s.io", "Lease", "leases"), Some("kbind"), lease)
        .await
        .expect("alice's Lease is kept");
    assert_eq!(
        kept.metadata
            .annotations
            .unwrap_or_default()
            .get("iam.kbind.io/claimed-by")
            .map(String::as_str),
        Some("token:alice")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_issued_credential_reaches_exactly_what_the_grant_allows() {
    let Some(env) = TestEnv::start_or_skip(1).await.expect("kbind-testenv") else {
        return;
    };
    let Some(helm) = issuer_rbac_chart::helm() else { return };
    let cluster = env.cluster(0);
    let admin_config = cluster.config(User::Admin).await.expect("admin config");
    let admin: Arc<dyn ClusterClient> =
        Arc::new(KubeClusterClient::from_config(admin_config.clone()).expect("admin client"));

    for c in kbind_api::backend_crds() {
        admin.create_typed(&c).await.expect("backend CRD");
    }
    for c in [
        crd("widgets", "Widget", "Namespaced", true),
        crd("gadgets", "Gadget", "Cluster", true),
        crd("secretthings", "SecretThing", "Namespaced", false),
    ] {
        admin
            .create(
                &erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
                ),
                None,
                &obj(c),
                &PostParams::default(),
            )
            .await
            .expect("CRD");
    }
    for r in [
        erase::<Grant>(),
        erase::<Export>(),
        res("example.org", "Widget", "widgets"),
        res("example.org", "Gadget", "gadgets"),
    ] {
        wait_served(admin.as_ref(), &r).await;
    }
    admin
        .create(
            &res("", "Namespace", "namespaces"),
            None,
            &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": UNCLAIMED}})),
            &PostParams::default(),
        )
        .await
        .expect("an unclaimed namespace");

    let export = Export::new(
        "widgets",
        ExportSpec {
            title: "Widgets".into(),
            description: None,
            icon: None,
            docs: None,
            apis: ["widgets.example.org", "gadgets.example.org"]
                .iter()
                .map(|n| BoundApiRef { name: n.to_string() })
                .collect(),
            conflict_policy: Default::default(),
            related_resources: vec![
                RelatedResource {
                    group: String::new(),
                    resource: "secrets".into(),
                    version: None,
                    direction: RelatedResourceDirection::FromProvider,
                    selector: Default::default(),
                    sync_status: false,
                },
                RelatedResource {
                    group: String::new(),
                    resource: "configmaps".into(),
                    version: None,
                    direction: RelatedResourceDirection::FromConsumer,
                    selector: Default::default(),
                    sync_status: false,
                },
                RelatedResource {
                    group: "networking.k8s.io".into(),
                    resource: "ingresses".into(),
                    version: None,
                    direction: RelatedResourceDirection::FromConsumer,
                    selector: RelatedResourceSelector {
                        references: vec![RelatedReference {
                            path: "spec.ingressRef.name".into(),
                        }],
                        ..Default::default()
                    },
                    sync_status: true,
                },
            ],
            cluster_scoped_sharing: true,
        },
    );
    admin.create_typed(&export).await.expect("Export");
    let name = grant_name("token:alice", "widgets", CONSUMER);
    let mut grant = Grant::new(
        &name,
        GrantSpec {
            identity: GrantIdentity {
                subject: "token:alice".into(),
                name: None,
            },
            export: "widgets".into(),
            consumer_cluster_uid: CONSUMER.into(),
            namespaces: vec![CLAIMED.into()],
        },
    );
    grant.metadata.labels = Some(
        [
            (LABEL_GRANT.to_string(), name.clone()),
            (LABEL_EXPORT.to_string(), "widgets".to_string()),
            (LABEL_CONSUMER_CLUSTER_UID.to_string(), CONSUMER.to_string()),
        ]
        .into(),
    );
    admin.create_typed(&grant).await.expect("Grant");

    // The issuer runs as a ServiceAccount holding exactly the chart's issuer RBAC.
    let backend = backend_client(admin.as_ref(), &admin_config, &helm).await;
    let issuer = Arc::new(KubernetesIssuer::new(
        backend.clone(),
        Options {
            claimable_namespaces: vec!["*".into()],
            ..Options::default()
        },
    ));
    issuer.check_provider().await.expect("a plain Kubernetes provider");
    // The Grant controller provisions it (finalizer, status) as in production.
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let controller = tokio::spawn(run_controller(backend.clone(), issuer.clone(), async move {
        let _ = stopped.await;
    }));
    let began = Instant::now();
    let deadline = began + Duration::from_secs(60);
    let grant = loop {
        let current = admin.get_typed::<Grant>(None, &name).await.expect("the Grant");
        let ready = current.status.as_ref().is_some_and(|s| {
            s.observed_generation == current.metadata.generation
                && kbind_api::conditions::is_true(&s.conditions, "Ready")
        });
        if ready {
            break current;
        }
        assert!(
            Instant::now() < deadline,
            "the Grant never became Ready: {:?}",
            current.status
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let provision_time = began.elapsed();
    assert!(
        grant
            .metadata
            .finalizers
            .as_deref()
            .unwrap_or_default()
            .iter()
            .any(|f| f == "iam.kbind.io/issuer"),
        "the issuer's finalizer is on the Grant"
    );
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let current = admin.get_typed::<Export>(None, "widgets").await.expect("the Export");
        let status = current.status.unwrap_or_default();
        if kbind_api::conditions::is_true(&status.conditions, "Ready") {
            assert!(status.apis.iter().all(|a| a.exported), "{:?}", status.apis);
            break;
        }
        assert!(Instant::now() < deadline, "the Export never became Ready: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    issuer
        .provision(&grant, &export)
        .await
        .expect("provisioned again (idempotent)");
    let began = Instant::now();
    let credential = issuer.credential(&grant).await.expect("a token");
    let credential_time = began.elapsed();
    let lease = format!("consumer-{CONSUMER}");
    let other_lease = format!("consumer-{OTHER_CONSUMER}");
    admin
        .create(
            &res("coordination.k8s.io", "Lease", "leases"),
            Some("kbind"),
            &obj(json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": other_lease, "namespace": "kbind"}, "spec": {}})),
            &PostParams::default(),
        )
        .await
        .expect("another consumer's Lease");

    // A bare ServiceAccount: what any authenticated caller may do without the Grant.
    let sa = erase::<k8s_openapi::api::core::v1::ServiceAccount>();
    admin
        .create(&sa, Some("kbind-grants"), &obj(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "bare", "namespace": "kbind-grants"}})), &PostParams::default())
        .await
        .expect("a bare ServiceAccount");
    let bare_token = admin
        .create_subresource(
            &sa,
            Some("kbind-grants"),
            "bare",
            "token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}}),
        )
        .await
        .expect("bare token")["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();

    let granted = kube::Client::try_from(token_config(&admin_config, &credential.token)).expect("grant client");
    let bare = kube::Client::try_from(token_config(&admin_config, &bare_token)).expect("bare client");
    let granted_seam = KubeClusterClient::new(granted.clone());

    // Every resource and subresource the apiserver serves, by (group, resource).
    let discovery = admin.discovery().await.expect("discovery");
    let mut resources: BTreeMap<(String, String, String), bool> = BTreeMap::new();
    for r in &discovery.resources {
        resources.insert((r.group.clone(), r.plural.clone(), String::new()), r.namespaced);
        for sub in &r.subresources {
            resources.insert((r.group.clone(), r.plural.clone(), sub.clone()), r.namespaced);
        }
    }
    let mut rows = Vec::new();
    for ((group, resource, subresource), namespaced) in &resources {
        let scopes: &[Scope] = if *namespaced {
            &[Scope::In(CLAIMED), Scope::In(UNCLAIMED), Scope::All]
        } else {
            &[Scope::All]
        };
        for scope in scopes {
            rows.push(Row {
                group: group.clone(),
                resource: resource.clone(),
                subresource: subresource.clone(),
                scope: scope.clone(),
                name: None,
            });
        }
    }
    let named = |group: &str, resource: &str, scope: Scope, name: &str| Row {
        group: group.into(),
        resource: resource.into(),
        subresource: String::new(),
        scope,
        name: Some(name.into()),
    };
    for crd_name in [
        "widgets.example.org",
        "gadgets.example.org",
        "secretthings.example.org",
        "grants.iam.kbind.io",
    ] {
        rows.push(named(
            "apiextensions.k8s.io",
            "customresourcedefinitions",
            Scope::All,
            crd_name,
        ));
    }
    for ns in ["kube-system", "default", CLAIMED, UNCLAIMED] {
        rows.push(named("", "namespaces", Scope::All, ns));
    }
    rows.push(named("coordination.k8s.io", "leases", Scope::In("kbind"), &lease));
    rows.push(named("coordination.k8s.io", "leases", Scope::In("kbind"), &other_lease));
    // Tokens of its own ServiceAccount and of another one in the same namespace.
    for account in [name.as_str(), "bare"] {
        rows.push(Row {
            subresource: "token".into(),
            ..named("", "serviceaccounts", Scope::In("kbind-grants"), account)
        });
    }

    let began = Instant::now();
    let by_grant = allowed_set(&granted, &rows).await;
    let baseline = allowed_set(&bare, &rows).await;
    let review_time = began.elapsed();
    let beyond: BTreeSet<(Row, &'static str)> = by_grant.difference(&baseline).cloned().collect();
    let expected = expected_by_grant(&lease, &name);

    // The table for the closing note.
    let mut table: BTreeMap<Row, BTreeSet<&'static str>> = BTreeMap::new();
    for (row, verb) in &by_grant {
        table.entry(row.clone()).or_default().insert(verb);
    }
    println!(
        "\nallowed for the Grant's token ({} rows × {} verbs reviewed, {} allowed, {} beyond a bare ServiceAccount)",
        rows.len(),
        VERBS.len(),
        by_grant.len(),
        beyond.len()
    );
    println!("| resource @ scope | {} |", VERBS.join(" | "));
    println!("|---|{}", "---|".repeat(VERBS.len()));
    for (row, verbs) in &table {
        let cells: Vec<&str> = VERBS
            .iter()
            .map(|v| match (verbs.contains(v), baseline.contains(&(row.clone(), *v))) {
                (true, true) => "any",
                (true, false) => "yes",
                _ => "·",
            })
            .collect();
        println!("| {row} | {} |", cells.join(" | "));
    }
    println!("(\"any\": also allowed to a bare ServiceAccount; every other row: nothing allowed)");
    println!(
        "provision {provision_time:?}, credential {credential_time:?}, {} reviews in {review_time:?}",
        2 * rows.len() * VERBS.len()
    );

    let missing: Vec<String> = expected.difference(&beyond).map(|(r, v)| format!("{v} {r}")).collect();
    let extra: Vec<String> = beyond.difference(&expected).map(|(r, v)| format!("{v} {r}")).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "the Grant's reach differs:\n  missing: {missing:#?}\n  extra: {extra:#?}"
    );

    // Every allowed (row, verb) beyond the baseline, tried for real with the token.
    for (row, verb) in &beyond {
        if let Err(e) = try_for_real(&granted_seam, &granted, row, verb).await {
            panic!("{verb} {row}: SelfSubjectAccessReview allowed it but the request was refused: {e}");
        }
    }
    // The Export's Ingress rule: a real Ingress created and changed in the claimed namespace.
    let ingresses = res("networking.k8s.io", "Ingress", "ingresses");
    let ingress = |ns: &str| {
        obj(json!({"apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "shop", "namespace": ns},
            "spec": {"defaultBackend": {"service": {"name": "shop", "port": {"number": 80}}}}}))
    };
    granted_seam
        .create(&ingresses, Some(CLAIMED), &ingress(CLAIMED), &PostParams::default())
        .await
        .expect("the Grant creates an Ingress in its namespace");
    granted_seam
        .patch(
            &ingresses,
            Some(CLAIMED),
            "shop",
            &Patch::Merge(json!({"metadata": {"labels": {"copied": "yes"}}})),
            &PatchParams::default(),
        )
        .await
        .expect("the Grant changes an Ingress in its namespace");
    // And a few the Grant must not reach, for real.
    let widgets = res("example.org", "Widget", "widgets");
    let services = res("", "Service", "services");
    for (what, answer) in [
        ("create a widget in the unclaimed namespace", granted_seam.create(&widgets, Some(UNCLAIMED), &obj(json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": UNCLAIMED}})), &PostParams::default()).await.map(|_| ())),
        ("list widgets in all namespaces", granted_seam.list(&widgets, None, &ListParams::default()).await.map(|_| ())),
        ("get another consumer's Lease", granted_seam.get(&res("coordination.k8s.io", "Lease", "leases"), Some("kbind"), &other_lease).await.map(|_| ())),
        ("list CRDs", granted_seam.list(&erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(), None, &ListParams::default()).await.map(|_| ())),
        ("read a Secret in the unclaimed namespace", granted_seam.list(&res("", "Secret", "secrets"), Some(UNCLAIMED), &ListParams::default()).await.map(|_| ())),
        ("create an Ingress in the unclaimed namespace", granted_seam.create(&ingresses, Some(UNCLAIMED), &ingress(UNCLAIMED), &PostParams::default()).await.map(|_| ())),
        ("list Ingresses in all namespaces", granted_seam.list(&ingresses, None, &ListParams::default()).await.map(|_| ())),
        ("list Services in the claimed namespace", granted_seam.list(&services, Some(CLAIMED), &ListParams::default()).await.map(|_| ())),
        ("create a Service in the claimed namespace", granted_seam.create(&services, Some(CLAIMED), &obj(json!({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "shop", "namespace": CLAIMED}, "spec": {"ports": [{"port": 80}]}})), &PostParams::default()).await.map(|_| ())),
        ("mint a token of another ServiceAccount", granted_seam.create_subresource(&sa, Some("kbind-grants"), "bare", "token", &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {}})).await.map(|_| ())),
        ("read its own ServiceAccount", granted_seam.get(&sa, Some("kbind-grants"), &name).await.map(|_| ())),
    ] {
        assert!(matches!(answer, Err(Error::Forbidden { .. })), "{what}: {answer:?}");
    }
    // Its own token it renews itself, as the konnector does: a new token of the same
    // ServiceAccount, for the lifetime asked, that works on its own.
    let renewed = granted_seam
        .create_subresource(
            &sa,
            Some("kbind-grants"),
            &name,
            "token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}),
        )
        .await
        .expect("the issued credential renews itself")["status"]["token"]
        .as_str()
        .expect("a token")
        .to_string();
    let renewed_seam = KubeClusterClient::from_config(token_config(&admin_config, &renewed)).expect("renewed client");
    renewed_seam
        .get(&widgets, Some(CLAIMED), "anything")
        .await
        .map(|_| ())
        .or_else(|e| if e.is_not_found() { Ok(()) } else { Err(e) })
        .expect("the renewed token reaches what the Grant allows");
    // The identity the konnector pins reads through the credential.
    assert_eq!(
        granted_seam.identity().await.expect("identity").uid,
        admin.identity().await.unwrap().uid
    );

    let began = Instant::now();
    isolation(admin.as_ref(), &lease).await;
    println!("isolation cases (5 refused Grants, their revoke) {:?}", began.elapsed());

    // Alice's konnector heartbeats, so her Lease proves the consumer cluster hers.
    admin
        .patch(
            &res("coordination.k8s.io", "Lease", "leases"),
            Some("kbind"),
            &lease,
            &Patch::Merge(json!({"spec": {"renewTime": "2026-12-05T10:00:00.000000Z"}})),
            &PatchParams::default(),
        )
        .await
        .expect("the heartbeat");

    // Deleted: the controller revokes through the finalizer, then the Grant goes and the token
    // stops working.
    admin
        .delete(&erase::<Grant>(), None, &name, &DeleteParams::default())
        .await
        .expect("delete the Grant");
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin
        .get_opt(&erase::<Grant>(), None, &name)
        .await
        .expect("read")
        .is_some()
    {
        assert!(Instant::now() < deadline, "the deleted Grant stays");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // Every token of the ServiceAccount ends with it, the renewed one too.
    for (which, client) in [("issued", &granted_seam), ("renewed", &renewed_seam)] {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            match client.get(&widgets, Some(CLAIMED), "anything").await {
                Err(Error::Unauthorized { .. }) => break,
                other => assert!(
                    Instant::now() < deadline,
                    "the {which} token still works after revoke: {other:?}"
                ),
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
    let began = Instant::now();
    round_two(admin.as_ref(), &lease).await;
    println!(
        "round-two isolation cases (pre-claim, quota race, take-back) {:?}",
        began.elapsed()
    );
    let _ = stop.send(());
    controller.await.expect("the controller stops");
}

/// The final Ready condition of Grant `name` (True, or False with a refusal), with a deadline.
async fn settled(admin: &dyn ClusterClient, name: &str) -> k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let grant = admin.get_typed::<Grant>(None, name).await.expect("the Grant");
        let current = grant
            .status
            .as_ref()
            .is_some_and(|s| s.observed_generation == grant.metadata.generation);
        let status = grant.status.unwrap_or_default();
        if let Some(c) = kbind_api::conditions::find(&status.conditions, "Ready")
            && current
            && (c.status == "True" || kbind_backend::issuer::reason::GRANT_REFUSALS.contains(&c.reason.as_str()))
        {
            return c.clone();
        }
        assert!(Instant::now() < deadline, "Grant {name} never settled: {status:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Isolation cases after an unbind, through the controller on the chart's issuer RBAC, after alice
/// (whose konnector heartbeated Lease `lease`) unbound: her consumer cluster cannot be
/// pre-claimed; one identity's concurrent Grants stay within its quota; a take-back is acted on
/// by the namespace watch the chart's RBAC allows.
async fn round_two(admin: &dyn ClusterClient, lease: &str) {
    let leases = res("coordination.k8s.io", "Lease", "leases");
    assert!(
        admin.get_opt(&leases, Some("kbind"), lease).await.unwrap().is_some(),
        "a heartbeated Lease outlives its owner's last Grant"
    );
    let mallorys = create_grant(admin, "token:mallory", "plain", CONSUMER, &["team-m2"]).await;
    assert_eq!(settled(admin, &mallorys).await.reason, "ConsumerClusterClaimed");
    let alices = create_grant(admin, "token:alice", "plain", CONSUMER, &[CLAIMED]).await;
    let ready = settled(admin, &alices).await;
    assert_eq!(ready.status, "True", "alice binds her cluster again: {}", ready.message);

    // Three Grants of erin's, ten new namespaces each, created at once; the quota is 20.
    let erin: Vec<String> = futures::future::join_all((0..3).map(|i| async move {
        let names: Vec<String> = (0..10).map(|j| format!("erin-{i}-{j}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let uid = format!("3c4d5e6f-7a8b-4c9d-8e0f-1a2b3c4d5e7{i}");
        create_grant(admin, "token:erin", "plain", &uid, &names).await
    }))
    .await;
    let mut issued = Vec::new();
    for name in &erin {
        let c = settled(admin, name).await;
        match c.status.as_str() {
            "True" => issued.push(name.clone()),
            _ => assert_eq!(c.reason, "NamespaceQuotaExceeded", "{name}: {}", c.message),
        }
    }
    let held = admin
        .list(&res("", "Namespace", "namespaces"), None, &ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .filter(|ns| ns.metadata.name.as_deref().is_some_and(|n| n.starts_with("erin-")))
        .count();
    assert!(
        (1..=2).contains(&issued.len()) && held <= 20,
        "{} Grants issued, {held} namespaces held against a quota of 20",
        issued.len()
    );

    // The platform takes one of erin's namespaces back: her RoleBinding there goes by event.
    let taken = admin
        .get_typed::<Grant>(None, &issued[0])
        .await
        .unwrap()
        .spec
        .namespaces[0]
        .clone();
    let role_binding = format!("kbind:{}", issued[0]);
    let bindings = res("rbac.authorization.k8s.io", "RoleBinding", "rolebindings");
    assert!(
        admin
            .get_opt(&bindings, Some(&taken), &role_binding)
            .await
            .unwrap()
            .is_some()
    );
    admin
        .patch(
            &res("", "Namespace", "namespaces"),
            None,
            &taken,
            &Patch::Merge(json!({"metadata": {"labels": {"iam.kbind.io/claimed-by": null}}})),
            &PatchParams::default(),
        )
        .await
        .expect("taken back");
    let deadline = Instant::now() + Duration::from_secs(60);
    while admin
        .get_opt(&bindings, Some(&taken), &role_binding)
        .await
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "the take-back waits for the resync");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The RoleBinding goes before the status says why: until the controller's status write
    // lands, the Grant still reads settled and Ready, so wait for the reason itself.
    loop {
        let ready = settled(admin, &issued[0]).await;
        if ready.reason == "NamespaceNotAvailable" {
            break;
        }
        assert!(Instant::now() < deadline, "the taken-back Grant stays {ready:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
