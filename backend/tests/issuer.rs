//! The Kubernetes issuer and its controllers on a fakeapi provider in process (paused clock):
//! what a Grant gets, refusals that leave nothing behind, re-bind, revoke, the finalizer, kcp.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use fakeapi::{FakeCluster, UserInfo};
use kbind_api::consts::backend::{ISSUER_FINALIZER, LABEL_CONSUMER_CLUSTER_UID, LABEL_EXPORT, LABEL_GRANT};
use kbind_api::{
    BoundApiRef, Export, ExportSpec, Grant, GrantIdentity, GrantSpec, RelatedResource, RelatedResourceDirection,
    grant_name,
};
use kbind_backend::issuer::{
    IssueError, Issuer, KubernetesIssuer, Metrics, Options, run_controller, run_controller_with_metrics,
};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, Error, ListParams, PostParams,
};
use serde_json::{Value, json};

const CONSUMER: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
const OTHER_CONSUMER: &str = "7d0e8c1f-2b3a-4c5d-8e9f-a0b1c2d3e4f5";

use kbind_scenarios::apis::crd;

fn res(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version: if group.is_empty() {
            version.into()
        } else {
            format!("{group}/{version}")
        },
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn widgets() -> ApiResource {
    res("example.org", "v1", "Widget", "widgets")
}
fn gadgets() -> ApiResource {
    res("example.org", "v1", "Gadget", "gadgets")
}
fn namespaces() -> ApiResource {
    res("", "v1", "Namespace", "namespaces")
}
fn leases() -> ApiResource {
    res("coordination.k8s.io", "v1", "Lease", "leases")
}
fn crds() -> ApiResource {
    res(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}

fn obj(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a valid object")
}

struct Provider {
    cluster: FakeCluster,
    admin: Arc<dyn ClusterClient>,
    issuer: Arc<KubernetesIssuer>,
}

async fn provider_with(cluster: FakeCluster, kcp_like: bool) -> Provider {
    let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
    for mut c in kbind_api::backend_crds() {
        // kube-apiserver defaults listKind; fakeapi does not, and re-establishes for ever.
        c.spec.names.list_kind = Some(format!("{}List", c.spec.names.kind));
        admin.create_typed(&c).await.expect("backend CRD");
    }
    if !kcp_like {
        for c in [
            crd("widgets", "Widget", "Namespaced", true),
            crd("gadgets", "Gadget", "Cluster", true),
            crd("secretthings", "SecretThing", "Namespaced", false),
        ] {
            admin
                .create(&crds(), None, &obj(c), &PostParams::default())
                .await
                .expect("CRD");
        }
    }
    let mut served = vec![ApiResource::erase::<Grant>(&()), ApiResource::erase::<Export>(&())];
    if !kcp_like {
        served.extend([widgets(), gadgets()]);
    }
    for r in served {
        let mut tries = 0;
        while admin.list(&r, None, &ListParams::default()).await.is_err() {
            tries += 1;
            assert!(tries < 1000, "{} is never served", r.plural);
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }
    // These stories name their namespaces freely (team-a, q0-1); the default is per-identity.
    let options = Options {
        claimable_namespaces: vec!["*".into()],
        ..Options::default()
    };
    let issuer = Arc::new(KubernetesIssuer::new(admin.clone(), options));
    Provider { cluster, admin, issuer }
}

async fn provider() -> Provider {
    provider_with(FakeCluster::builder("provider").seed(7).build(), false).await
}

fn export(name: &str, apis: &[&str], related: Vec<RelatedResource>) -> Export {
    Export::new(
        name,
        ExportSpec {
            title: name.into(),
            description: None,
            icon: None,
            docs: None,
            apis: apis.iter().map(|a| BoundApiRef { name: a.to_string() }).collect(),
            conflict_policy: Default::default(),
            related_resources: related,
            cluster_scoped_sharing: false,
        },
    )
}

/// `export` with `spec.clusterScopedSharing` set.
fn shared(mut e: Export) -> Export {
    e.spec.cluster_scoped_sharing = true;
    e
}

fn grant(subject: &str, export: &str, consumer: &str, namespaces: &[&str]) -> Grant {
    let name = grant_name(subject, export, consumer);
    let mut g = Grant::new(
        &name,
        GrantSpec {
            identity: GrantIdentity {
                subject: subject.into(),
                name: None,
            },
            export: export.into(),
            consumer_cluster_uid: consumer.into(),
            namespaces: namespaces.iter().map(|s| s.to_string()).collect(),
        },
    );
    g.metadata.labels = Some(
        [
            (LABEL_GRANT.to_string(), name.clone()),
            (LABEL_EXPORT.to_string(), export.to_string()),
            (LABEL_CONSUMER_CLUSTER_UID.to_string(), consumer.to_string()),
        ]
        .into(),
    );
    g
}

/// Widgets with gadgets (cluster-scoped, shared by opt-in) and related resources.
fn widgets_export() -> Export {
    shared(export(
        "widgets",
        &["widgets.example.org", "gadgets.example.org"],
        vec![
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
        ],
    ))
}

/// Every (kind, namespace, name) labelled as issued for `grant`.
async fn issued_objects(p: &Provider, grant: &str) -> BTreeSet<(String, String, String)> {
    let selector = format!("{LABEL_GRANT}={grant}");
    let mut found = BTreeSet::new();
    for r in [
        res("", "v1", "ServiceAccount", "serviceaccounts"),
        res("rbac.authorization.k8s.io", "v1", "Role", "roles"),
        res("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings"),
        res("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles"),
        res(
            "rbac.authorization.k8s.io",
            "v1",
            "ClusterRoleBinding",
            "clusterrolebindings",
        ),
        leases(),
        namespaces(),
    ] {
        let list = p
            .admin
            .list(&r, None, &ListParams::default().labels(&selector))
            .await
            .expect("list");
        for o in list.items {
            found.insert((
                r.kind.clone(),
                o.metadata.namespace.unwrap_or_default(),
                o.metadata.name.unwrap_or_default(),
            ));
        }
    }
    found
}

async fn namespace_names(p: &Provider) -> BTreeSet<String> {
    p.admin
        .list(&namespaces(), None, &ListParams::default())
        .await
        .expect("namespaces")
        .items
        .into_iter()
        .filter_map(|n| n.metadata.name)
        .collect()
}

/// A client acting with exactly the token `issuer.credential` minted.
async fn token_client(p: &Provider, g: &Grant) -> (String, Arc<dyn ClusterClient>) {
    let credential = p.issuer.credential(g).await.expect("credential");
    let user: UserInfo = p
        .cluster
        .authenticate(&credential.token)
        .expect("the token authenticates");
    (credential.token, Arc::new(p.cluster.client(user)))
}

fn kinds(set: &BTreeSet<(String, String, String)>) -> Vec<String> {
    set.iter().map(|(k, ns, n)| format!("{k} {ns}/{n}")).collect()
}

#[tokio::test(start_paused = true)]
async fn provision_creates_exactly_the_grants_objects_and_the_token_reaches_exactly_them() {
    let p = provider().await;
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    let issued = p.issuer.provision(&g, &widgets_export()).await.expect("provisioned");
    let name = g.metadata.name.clone().unwrap();
    let rbac = format!("kbind:{name}");
    let lease_rbac = format!("kbind:{name}:lease");
    let token_rbac = format!("kbind:{name}:token");
    let lease = format!("consumer-{CONSUMER}");

    let expected: BTreeSet<(String, String, String)> = [
        ("ServiceAccount", "kbind-grants", name.as_str()),
        ("Role", "team-a", rbac.as_str()),
        ("RoleBinding", "team-a", rbac.as_str()),
        ("Role", "kbind", lease_rbac.as_str()),
        ("RoleBinding", "kbind", lease_rbac.as_str()),
        ("Role", "kbind-grants", token_rbac.as_str()),
        ("RoleBinding", "kbind-grants", token_rbac.as_str()),
        ("ClusterRole", "", rbac.as_str()),
        ("ClusterRoleBinding", "", rbac.as_str()),
    ]
    .iter()
    .map(|(k, ns, n)| (k.to_string(), ns.to_string(), n.to_string()))
    .collect();
    assert_eq!(kinds(&issued_objects(&p, &name).await), kinds(&expected));
    assert_eq!(issued.namespaces, ["team-a"]);
    assert_eq!(issued.issuer, "kubernetes");
    assert_eq!(issued.objects.len(), 9, "{:?}", issued.objects);

    // The claimed namespace, the lease and grants namespaces, and the pre-created Lease.
    let ns = p.admin.get(&namespaces(), None, "team-a").await.expect("claimed");
    let labels = ns.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels.get("iam.kbind.io/claimed-by"),
        Some(&kbind_backend::issuer::claims::claimed_by_value("token:alice"))
    );
    assert_eq!(
        labels.get("app.kubernetes.io/managed-by").map(String::as_str),
        Some("kbind-backend")
    );
    assert_eq!(
        ns.metadata
            .annotations
            .unwrap_or_default()
            .get("iam.kbind.io/claimed-by")
            .map(String::as_str),
        Some("token:alice")
    );
    let l = p
        .admin
        .get(&leases(), Some("kbind"), &lease)
        .await
        .expect("lease pre-created");
    assert_eq!(
        l.metadata
            .labels
            .unwrap_or_default()
            .get("core.kbind.io/managed")
            .map(String::as_str),
        Some("true")
    );

    // What the token can do (fakeapi authorizes with RBAC).
    let (_, as_grant) = token_client(&p, &g).await;
    let widget = |ns: &str| {
        obj(json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w", "namespace": ns}}))
    };
    as_grant
        .create(&widgets(), Some("team-a"), &widget("team-a"), &PostParams::default())
        .await
        .expect("create a widget in the claimed namespace");
    p.admin
        .create(
            &namespaces(),
            None,
            &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let refused = as_grant
        .create(&widgets(), Some("team-b"), &widget("team-b"), &PostParams::default())
        .await;
    assert!(matches!(refused, Err(Error::Forbidden { .. })), "{refused:?}");
    assert!(matches!(
        as_grant.list(&widgets(), None, &ListParams::default()).await,
        Err(Error::Forbidden { .. })
    ));
    let gadget = obj(json!({"apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g"}}));
    as_grant
        .create(&gadgets(), None, &gadget, &PostParams::default())
        .await
        .expect("cluster-scoped API");
    as_grant
        .get(&crds(), None, "widgets.example.org")
        .await
        .expect("read the exported CRD");
    assert!(matches!(
        as_grant.get(&crds(), None, "secretthings.example.org").await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        as_grant.get(&crds(), None, "grants.iam.kbind.io").await,
        Err(Error::Forbidden { .. })
    ));
    let identity = as_grant.identity().await.expect("identity");
    assert_eq!(identity.uid, p.cluster.identity_uid());
    assert!(matches!(
        as_grant.list(&namespaces(), None, &ListParams::default()).await,
        Err(Error::Forbidden { .. })
    ));
    // The Lease: get + update on exactly ours.
    let mut mine = as_grant
        .get(&leases(), Some("kbind"), &lease)
        .await
        .expect("get our lease");
    mine.data["spec"]["renewTime"] = json!("2026-01-01T00:00:00.000000Z");
    as_grant
        .replace(&leases(), Some("kbind"), &lease, &mine, &PostParams::default())
        .await
        .expect("renew");
    let other = obj(
        json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": format!("consumer-{OTHER_CONSUMER}"), "namespace": "kbind"}, "spec": {}}),
    );
    p.admin
        .create(&leases(), Some("kbind"), &other, &PostParams::default())
        .await
        .unwrap();
    assert!(matches!(
        as_grant
            .get(&leases(), Some("kbind"), &format!("consumer-{OTHER_CONSUMER}"))
            .await,
        Err(Error::Forbidden { .. })
    ));
    // Its own token, renewed by itself (a TokenRequest on its own ServiceAccount, by name),
    // and no other account's.
    let service_accounts = res("", "v1", "ServiceAccount", "serviceaccounts");
    let token_request =
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 86400}});
    let renewed = as_grant
        .create_subresource(&service_accounts, Some("kbind-grants"), &name, "token", &token_request)
        .await
        .expect("the Grant's ServiceAccount renews its own token");
    let renewed = renewed["status"]["token"].as_str().expect("a token");
    assert_eq!(
        p.cluster.authenticate(renewed).map(|u| u.name),
        Some(format!("system:serviceaccount:kbind-grants:{name}"))
    );
    p.admin
        .create(
            &service_accounts,
            Some("kbind-grants"),
            &obj(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "other", "namespace": "kbind-grants"}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    assert!(matches!(
        as_grant
            .create_subresource(
                &service_accounts,
                Some("kbind-grants"),
                "other",
                "token",
                &token_request
            )
            .await,
        Err(Error::Forbidden { .. })
    ));
    assert!(matches!(
        as_grant.get(&service_accounts, Some("kbind-grants"), &name).await,
        Err(Error::Forbidden { .. })
    ));
    // Related: secrets read-only, configmaps writable, in the claimed namespace only.
    as_grant
        .list(
            &res("", "v1", "Secret", "secrets"),
            Some("team-a"),
            &ListParams::default(),
        )
        .await
        .expect("list secrets");
    let secret = obj(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s", "namespace": "team-a"}}));
    assert!(matches!(
        as_grant
            .create(
                &res("", "v1", "Secret", "secrets"),
                Some("team-a"),
                &secret,
                &PostParams::default()
            )
            .await,
        Err(Error::Forbidden { .. })
    ));
    let cm = obj(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "team-a"}}));
    as_grant
        .create(
            &res("", "v1", "ConfigMap", "configmaps"),
            Some("team-a"),
            &cm,
            &PostParams::default(),
        )
        .await
        .expect("write a configmap (FromConsumer)");
}

#[tokio::test(start_paused = true)]
async fn a_namespace_claimed_by_another_identity_is_refused_and_nothing_is_created() {
    let p = provider().await;
    let alice = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.issuer.provision(&alice, &widgets_export()).await.expect("alice");
    let before = namespace_names(&p).await;
    // Bob asks for a free namespace and Alice's: refused before anything is written.
    let bob = grant("token:bob", "widgets", OTHER_CONSUMER, &["free-one", "team-a"]);
    let err = p.issuer.provision(&bob, &widgets_export()).await.expect_err("refused");
    assert!(
        matches!(&err, IssueError::NamespaceClaimed { namespace } if namespace == "team-a"),
        "{err:?}"
    );
    assert_eq!(err.reason(), "NamespaceNotAvailable");
    assert!(
        issued_objects(&p, bob.metadata.name.as_deref().unwrap())
            .await
            .is_empty()
    );
    assert_eq!(namespace_names(&p).await, before, "no namespace was created");
    assert!(
        p.admin
            .get_opt(&leases(), Some("kbind"), &format!("consumer-{OTHER_CONSUMER}"))
            .await
            .unwrap()
            .is_none()
    );

    // An existing namespace kbind did not create.
    p.admin
        .create(
            &namespaces(),
            None,
            &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "legacy"}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let carol = grant("token:carol", "widgets", OTHER_CONSUMER, &["legacy"]);
    let err = p
        .issuer
        .provision(&carol, &widgets_export())
        .await
        .expect_err("refused");
    assert!(matches!(err, IssueError::NamespaceNotClaimable { .. }), "{err:?}");
    assert!(
        issued_objects(&p, carol.metadata.name.as_deref().unwrap())
            .await
            .is_empty()
    );
    // kbind's own namespaces and the system ones are not claimable either, even before they exist.
    for own in [
        "kbind",
        "kbind-grants",
        "kube-system",
        "kube-future",
        "default",
        "openshift-x",
    ] {
        let g = grant("token:carol", "widgets", OTHER_CONSUMER, &[own]);
        let err = p.issuer.provision(&g, &widgets_export()).await.expect_err(own);
        assert!(matches!(err, IssueError::NamespaceNotAllowed { .. }), "{own}: {err:?}");
    }
    // Alice may use her namespace again for another consumer cluster.
    let alice2 = grant("token:alice", "widgets", OTHER_CONSUMER, &["team-a"]);
    p.issuer
        .provision(&alice2, &widgets_export())
        .await
        .expect("same identity");
}

#[tokio::test(start_paused = true)]
async fn an_api_the_provider_does_not_export_is_refused_with_nothing_created() {
    let p = provider().await;
    let e = export(
        "mixed",
        &["widgets.example.org", "secretthings.example.org", "nothere.example.org"],
        vec![],
    );
    let g = grant("token:alice", "mixed", CONSUMER, &["team-a"]);
    let err = p.issuer.provision(&g, &e).await.expect_err("refused");
    assert!(
        matches!(&err, IssueError::ApiNotExported(apis) if apis == &["secretthings.example.org", "nothere.example.org"]),
        "{err:?}"
    );
    assert!(issued_objects(&p, g.metadata.name.as_deref().unwrap()).await.is_empty());
    assert!(!namespace_names(&p).await.contains("team-a"));
}

#[tokio::test(start_paused = true)]
async fn a_rebind_with_other_namespaces_moves_the_roles_and_keeps_the_old_token_working() {
    let p = provider().await;
    let mut g = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.issuer.provision(&g, &widgets_export()).await.expect("first");
    let name = g.metadata.name.clone().unwrap();
    let sa_uid = |p: &Provider| {
        let admin = p.admin.clone();
        let name = name.clone();
        async move {
            admin
                .get(
                    &res("", "v1", "ServiceAccount", "serviceaccounts"),
                    Some("kbind-grants"),
                    &name,
                )
                .await
                .unwrap()
                .metadata
                .uid
        }
    };
    let uid_before = sa_uid(&p).await;
    let (old_token, _) = token_client(&p, &g).await;

    g.spec.namespaces = vec!["team-b".into(), "team-c".into()];
    p.issuer.provision(&g, &widgets_export()).await.expect("re-bind");
    p.issuer.provision(&g, &widgets_export()).await.expect("idempotent");
    assert_eq!(sa_uid(&p).await, uid_before, "the ServiceAccount was not replaced");
    assert!(
        p.cluster.authenticate(&old_token).is_some(),
        "the old token still works"
    );
    let rbac = format!("kbind:{name}");
    let roles: Vec<String> = issued_objects(&p, &name)
        .await
        .into_iter()
        .filter(|(k, _, n)| k == "Role" && *n == rbac)
        .map(|(_, ns, _)| ns)
        .collect();
    assert_eq!(roles, ["team-b", "team-c"]);
    assert!(
        namespace_names(&p).await.contains("team-a"),
        "a namespace once claimed stays"
    );
    // The old token now reaches team-b, not team-a.
    let user = p.cluster.authenticate(&old_token).unwrap();
    let as_grant = p.cluster.client(user);
    as_grant
        .list(&widgets(), Some("team-b"), &ListParams::default())
        .await
        .expect("team-b");
    assert!(matches!(
        as_grant.list(&widgets(), Some("team-a"), &ListParams::default()).await,
        Err(Error::Forbidden { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn revoke_removes_everything_but_claimed_namespaces_and_a_lease_another_grant_uses() {
    let p = provider().await;
    let a = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    let b = grant("token:alice", "gadgets", CONSUMER, &[]);
    p.admin.create_typed(&a).await.unwrap();
    p.admin.create_typed(&b).await.unwrap();
    p.issuer.provision(&a, &widgets_export()).await.unwrap();
    p.issuer
        .provision(&b, &shared(export("gadgets", &["gadgets.example.org"], vec![])))
        .await
        .unwrap();
    let (token, _) = token_client(&p, &a).await;
    let lease = format!("consumer-{CONSUMER}");

    // Revocation runs while a Grant is being deleted (the finalizer); these have none.
    p.admin
        .delete(
            &ApiResource::erase::<Grant>(&()),
            None,
            a.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    p.issuer.revoke(&a).await.expect("revoke");
    p.issuer.revoke(&a).await.expect("revoke is idempotent");
    assert!(issued_objects(&p, a.metadata.name.as_deref().unwrap()).await.is_empty());
    assert!(p.cluster.authenticate(&token).is_none(), "the token stopped working");
    assert!(
        namespace_names(&p).await.contains("team-a"),
        "the claimed namespace stays"
    );
    assert!(
        p.admin
            .get_opt(&leases(), Some("kbind"), &lease)
            .await
            .unwrap()
            .is_some(),
        "the other Grant of this consumer still heartbeats on the Lease"
    );
    assert!(!issued_objects(&p, b.metadata.name.as_deref().unwrap()).await.is_empty());

    p.admin
        .delete(
            &ApiResource::erase::<Grant>(&()),
            None,
            b.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    p.issuer.revoke(&b).await.expect("revoke the last");
    assert!(
        p.admin
            .get_opt(&leases(), Some("kbind"), &lease)
            .await
            .unwrap()
            .is_none(),
        "the last Grant's Lease goes"
    );
}

#[tokio::test(start_paused = true)]
async fn a_kcp_like_provider_is_unsupported() {
    let p = provider_with(FakeCluster::builder("kcp").kcp_like(true).seed(7).build(), true).await;
    let err = p.issuer.check_provider().await.expect_err("unsupported");
    assert!(matches!(err, IssueError::UnsupportedProvider(_)), "{err:?}");
    assert_eq!(err.reason(), "UnsupportedProvider");
    assert!(err.to_string().contains("kcp-like"), "{err}");
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    assert!(matches!(
        p.issuer.provision(&g, &widgets_export()).await,
        Err(IssueError::UnsupportedProvider(_))
    ));
    assert!(issued_objects(&p, g.metadata.name.as_deref().unwrap()).await.is_empty());
}

// ---- the controllers ----

struct Running {
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

fn start(p: &Provider) -> Running {
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run_controller(p.admin.clone(), p.issuer.clone(), async move {
        let _ = rx.await;
    }));
    Running { stop: Some(tx), task }
}

impl Running {
    async fn stop(mut self) {
        if let Some(tx) = self.stop.take() {
            let _ = tx.send(());
        }
        tokio::time::timeout(Duration::from_secs(60), &mut self.task)
            .await
            .expect("the controller stops on shutdown")
            .expect("no panic");
    }
}

/// Polls `check` until it holds, within 60 s of (paused, auto-advancing) logical time.
async fn eventually<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn get_grant(p: &Provider, name: &str) -> Option<Grant> {
    p.admin.get_typed_opt::<Grant>(None, name).await.unwrap()
}

fn ready(g: &Grant) -> Option<(String, String, String)> {
    let status = g.status.as_ref()?;
    (status.observed_generation == g.metadata.generation).then_some(())?;
    let c = kbind_api::conditions::find(&status.conditions, "Ready")?;
    Some((c.status.clone(), c.reason.clone(), c.message.clone()))
}

#[tokio::test(start_paused = true)]
async fn the_controller_issues_a_grant_and_a_deleted_grant_waits_for_it_to_revoke() {
    let p = provider().await;
    p.admin.create_typed(&widgets_export()).await.unwrap();
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    let name = g.metadata.name.clone().unwrap();
    p.admin.create_typed(&g).await.unwrap();

    let running = start(&p);
    let issued = eventually("the Grant Ready", || async {
        let g = get_grant(&p, &name).await?;
        let (status, reason, _) = ready(&g)?;
        (status == "True").then_some(())?;
        assert_eq!(reason, "AsExpected");
        Some(g)
    })
    .await;
    assert!(
        issued
            .metadata
            .finalizers
            .unwrap_or_default()
            .iter()
            .any(|f| f == ISSUER_FINALIZER)
    );
    let status = issued.status.unwrap();
    assert_eq!(
        status.issued.as_ref().map(|i| i.namespaces.clone()),
        Some(vec!["team-a".to_string()])
    );
    assert!(!issued_objects(&p, &name).await.is_empty());
    running.stop().await;

    // Deleted while no issuer runs: the finalizer keeps it, and what it was given.
    p.admin
        .delete(&ApiResource::erase::<Grant>(&()), None, &name, &DeleteParams::default())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(30)).await;
    let waiting = get_grant(&p, &name).await.expect("the finalizer keeps the Grant");
    assert!(waiting.metadata.deletion_timestamp.is_some());
    assert!(!issued_objects(&p, &name).await.is_empty());

    let running = start(&p);
    eventually("the Grant gone", || async {
        get_grant(&p, &name).await.is_none().then_some(())
    })
    .await;
    assert!(
        issued_objects(&p, &name).await.is_empty(),
        "revoked before the finalizer went"
    );
    assert!(namespace_names(&p).await.contains("team-a"));
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_controller_reports_a_refusal_on_the_grant_and_creates_nothing() {
    let p = provider().await;
    p.admin.create_typed(&widgets_export()).await.unwrap();
    let alice = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.issuer.provision(&alice, &widgets_export()).await.unwrap();
    let before = namespace_names(&p).await;
    let bob = grant("token:bob", "widgets", OTHER_CONSUMER, &["team-x", "team-a"]);
    let name = bob.metadata.name.clone().unwrap();
    p.admin.create_typed(&bob).await.unwrap();
    let missing = grant("token:bob", "nope", OTHER_CONSUMER, &[]);
    p.admin.create_typed(&missing).await.unwrap();

    let running = start(&p);
    let (status, reason, message) = eventually("a refusal", || async { ready(&get_grant(&p, &name).await?) }).await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "NamespaceNotAvailable"));
    assert!(message.contains("team-a"), "{message}");
    // Whose it is stays unsaid: the same words as for a namespace the platform made.
    assert!(
        message.contains("not available") && !message.contains("identity") && !message.contains("kbind"),
        "{message}"
    );
    let (_, reason, _) = eventually("ExportNotFound", || async {
        ready(&get_grant(&p, missing.metadata.name.as_deref()?).await?)
    })
    .await;
    assert_eq!(reason, "ExportNotFound");
    assert!(issued_objects(&p, &name).await.is_empty());
    assert_eq!(namespace_names(&p).await, before);
    running.stop().await;
}

/// `kbind_issuer_reconcile_errors_total{controller}` of `metrics`.
fn reconcile_errors(metrics: &Metrics, controller: &str) -> Option<u64> {
    let mut registry = prometheus_client::registry::Registry::default();
    metrics.register(&mut registry);
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let series = format!("kbind_issuer_reconcile_errors_total{{controller=\"{controller}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(&series)?.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn the_controller_counts_what_keeps_it_from_issuing_and_not_a_tenants_refusal() {
    let p = provider().await;
    p.admin.create_typed(&widgets_export()).await.unwrap();
    let alice = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.issuer.provision(&alice, &widgets_export()).await.unwrap();
    let bob = grant("token:bob", "widgets", OTHER_CONSUMER, &["team-a"]);
    let refused = bob.metadata.name.clone().unwrap();
    p.admin.create_typed(&bob).await.unwrap();

    let metrics = Metrics::default();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run_controller_with_metrics(
        p.admin.clone(),
        p.issuer.clone(),
        metrics.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    let (_, reason, _) = eventually("the refusal", || async { ready(&get_grant(&p, &refused).await?) }).await;
    assert_eq!(reason, "NamespaceNotAvailable");
    assert_eq!(
        reconcile_errors(&metrics, "grant"),
        Some(0),
        "a tenant's refusal is not an error"
    );
    assert_eq!(reconcile_errors(&metrics, "export"), Some(0));
    let _ = tx.send(());
    task.await.unwrap();

    // An issuer whose ServiceAccount holds no RBAC: every provision is Forbidden.
    let powerless: Arc<dyn ClusterClient> =
        Arc::new(p.cluster.client(UserInfo::service_account("kbind-system", "powerless")));
    let issuer = Arc::new(KubernetesIssuer::new(
        powerless,
        Options {
            claimable_namespaces: vec!["*".into()],
            ..Options::default()
        },
    ));
    let carol = grant("token:carol", "widgets", OTHER_CONSUMER, &["team-c"]);
    let forbidden = carol.metadata.name.clone().unwrap();
    p.admin.create_typed(&carol).await.unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run_controller_with_metrics(
        p.admin.clone(),
        issuer,
        metrics.clone(),
        async move {
            let _ = rx.await;
        },
    ));
    let (status, reason, _) = eventually("the Forbidden Grant", || async {
        ready(&get_grant(&p, &forbidden).await?)
    })
    .await;
    assert_eq!((status.as_str(), reason.as_str()), ("False", "Forbidden"));
    let counted = eventually("the error counted", || async {
        reconcile_errors(&metrics, "grant").filter(|n| *n >= 1)
    })
    .await;
    assert!(counted >= 1);
    let _ = tx.send(());
    task.await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_export_status_names_the_apis_the_provider_does_not_export() {
    let p = provider().await;
    let e = shared(export(
        "mixed",
        &["widgets.example.org", "gadgets.example.org", "secretthings.example.org"],
        vec![],
    ));
    p.admin.create_typed(&e).await.unwrap();
    let running = start(&p);
    let get = || async { p.admin.get_typed_opt::<Export>(None, "mixed").await.unwrap() };
    let status = eventually("the Export status", || async {
        let s = get().await?.status?;
        (!s.apis.is_empty()).then_some(s)
    })
    .await;
    let apis: Vec<(String, bool, Option<String>)> = status
        .apis
        .iter()
        .map(|a| (a.name.clone(), a.exported, a.scope.map(|s| format!("{s:?}"))))
        .collect();
    assert_eq!(
        apis,
        [
            ("widgets.example.org".to_string(), true, Some("Namespaced".to_string())),
            ("gadgets.example.org".to_string(), true, Some("Cluster".to_string())),
            ("secretthings.example.org".to_string(), false, None),
        ]
    );
    let c = kbind_api::conditions::find(&status.conditions, "Ready").unwrap();
    assert_eq!((c.status.as_str(), c.reason.as_str()), ("False", "APINotExported"));
    assert!(
        c.message.contains("secretthings.example.org") && !c.message.contains("widgets"),
        "{}",
        c.message
    );

    // The provider exports it: the Export becomes Ready.
    let patch = json!({"metadata": {"labels": {"core.kbind.io/exported": "true"}}});
    p.admin
        .patch(
            &crds(),
            None,
            "secretthings.example.org",
            &kbind_cluster::Patch::Merge(patch),
            &Default::default(),
        )
        .await
        .unwrap();
    eventually("the Export Ready", || async {
        let s = get().await?.status?;
        kbind_api::conditions::is_true(&s.conditions, "Ready").then_some(())
    })
    .await;
    running.stop().await;
}

#[test]
fn options_defaults_and_flags() {
    use clap::Parser;
    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        issuer: Options,
    }
    let d = Cli::parse_from(["x"]).issuer;
    assert_eq!(d, Options::default());
    assert_eq!(d.token_ttl, Duration::from_secs(24 * 3600));
    let o = Cli::parse_from([
        "x",
        "--grants-namespace",
        "g",
        "--lease-namespace",
        "l",
        "--token-ttl",
        "30d",
    ])
    .issuer;
    assert_eq!((o.grants_namespace.as_str(), o.lease_namespace.as_str()), ("g", "l"));
    assert_eq!(o.token_ttl, Duration::from_secs(30 * 86400));
    assert!(Cli::try_parse_from(["x", "--token-ttl", "1m"]).is_err());
    assert_eq!(d.claimable_namespaces, ["{identity}-*"]);
    assert_eq!(
        d.unclaimable_namespaces,
        ["default", "kube-*", "kbind", "kbind-*", "openshift-*"]
    );
    assert_eq!((d.max_namespaces_per_bind, d.namespace_quota), (10, 20));
    let o = Cli::parse_from([
        "x",
        "--claimable-namespaces",
        "{identity}-*,shared-*",
        "--unclaimable-namespaces",
        "prod",
        "--max-namespaces-per-bind",
        "3",
        "--namespace-quota",
        "5",
    ])
    .issuer;
    assert_eq!(o.claimable_namespaces, ["{identity}-*", "shared-*"]);
    assert_eq!(o.unclaimable_namespaces, ["prod"]);
    assert_eq!((o.max_namespaces_per_bind, o.namespace_quota), (3, 5));
    assert!(Cli::try_parse_from(["x", "--namespace-quota", "0"]).is_err());
}

#[tokio::test(start_paused = true)]
async fn grants_follow_their_export_and_a_deleted_role_comes_back() {
    let p = provider().await;
    let plain = export("widgets", &["widgets.example.org"], vec![]);
    p.admin.create_typed(&plain).await.unwrap();
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    let name = g.metadata.name.clone().unwrap();
    p.admin.create_typed(&g).await.unwrap();
    let running = start(&p);
    let role_res = res("rbac.authorization.k8s.io", "v1", "Role", "roles");
    let rbac = format!("kbind:{name}");
    let role_resources = |p: &Provider| {
        let (admin, role_res, rbac) = (p.admin.clone(), role_res.clone(), rbac.clone());
        async move {
            let role = admin.get_opt(&role_res, Some("team-a"), &rbac).await.unwrap()?;
            let mut found: Vec<String> = role.data["rules"]
                .as_array()?
                .iter()
                .flat_map(|r| r["resources"].as_array().cloned().unwrap_or_default())
                .filter_map(|v| v.as_str().map(str::to_string))
                .collect();
            found.sort();
            Some(found)
        }
    };
    let first = eventually("the Role", || async { role_resources(&p).await }).await;
    assert_eq!(first, ["widgets", "widgets/status"]);

    // The Export gains a related resource: the Grant's Role follows without touching the Grant.
    let mut current = p.admin.get_typed_opt::<Export>(None, "widgets").await.unwrap().unwrap();
    current.spec.related_resources = widgets_export().spec.related_resources;
    p.admin
        .replace(
            &ApiResource::erase::<Export>(&()),
            None,
            "widgets",
            &kbind_cluster::to_dynamic(&current).unwrap(),
            &PostParams::default(),
        )
        .await
        .unwrap();
    eventually("the Role follows the Export", || async {
        let r = role_resources(&p).await?;
        (r == ["configmaps", "secrets", "widgets", "widgets/status"]).then_some(())
    })
    .await;

    // Someone deletes the ClusterRole: the periodic re-provision puts it back.
    let cr = res("rbac.authorization.k8s.io", "v1", "ClusterRole", "clusterroles");
    p.admin
        .delete(&cr, None, &rbac, &DeleteParams::default())
        .await
        .unwrap();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(15 * 60);
    loop {
        if p.admin.get_opt(&cr, None, &rbac).await.unwrap().is_some() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the ClusterRole never came back"
        );
        tokio::time::sleep(Duration::from_secs(5)).await;
    }
    running.stop().await;
}

#[tokio::test(start_paused = true)]
async fn provisioning_an_unchanged_grant_again_writes_nothing() {
    let p = provider().await;
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a", "team-b"]);
    p.issuer.provision(&g, &widgets_export()).await.unwrap();
    let writes = p.cluster.write_log().len();
    assert!(writes > 0, "the write log records writes");
    let requests = p.cluster.request_log().len();
    p.issuer.provision(&g, &widgets_export()).await.unwrap();
    let new_writes = p.cluster.write_log().len() - writes;
    let new_requests = p.cluster.request_log_from(requests);
    println!(
        "re-provision of an unchanged Grant (2 namespaces): {} requests",
        new_requests.len()
    );
    assert_eq!(
        new_writes,
        0,
        "an unchanged Grant was written: {:?}",
        &p.cluster.write_log()[writes..]
    );
}

/// A namespace as the admin makes it.
async fn admin_namespace(p: &Provider, name: &str) {
    p.admin
        .create(
            &namespaces(),
            None,
            &obj(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cluster_scoped_export_is_not_issued_unless_it_opts_in_to_sharing() {
    let p = provider().await;
    let gadgets_only = export("gadgets", &["gadgets.example.org"], vec![]);
    let mixed = export("widgets", &["widgets.example.org", "gadgets.example.org"], vec![]);
    for (e, namespaces) in [(&gadgets_only, &[][..]), (&mixed, &["team-a"][..])] {
        let g = grant("token:alice", e.metadata.name.as_deref().unwrap(), CONSUMER, namespaces);
        let err = p.issuer.provision(&g, e).await.expect_err("not shared");
        assert!(
            matches!(&err, IssueError::ClusterScopedNotShared(apis) if apis == &["gadgets.example.org"]),
            "{err:?}"
        );
        assert_eq!(err.reason(), "ClusterScopedNotShared");
        assert!(err.to_string().contains("spec.clusterScopedSharing"), "{err}");
        assert!(issued_objects(&p, g.metadata.name.as_deref().unwrap()).await.is_empty());
    }
    assert!(!namespace_names(&p).await.contains("team-a"), "nothing was claimed");

    // The Export's status says so before anyone binds; opting in makes it Ready.
    p.admin.create_typed(&gadgets_only).await.unwrap();
    let running = start(&p);
    let reason = |wanted: &'static str| {
        let admin = p.admin.clone();
        move || {
            let admin = admin.clone();
            async move {
                let s = admin.get_typed_opt::<Export>(None, "gadgets").await.unwrap()?.status?;
                let c = kbind_api::conditions::find(&s.conditions, "Ready")?.clone();
                (c.reason == wanted).then_some(c)
            }
        }
    };
    let c = eventually("ClusterScopedNotShared", reason("ClusterScopedNotShared")).await;
    assert_eq!(c.status, "False");
    assert!(c.message.contains("gadgets.example.org"), "{}", c.message);
    let mut current = p.admin.get_typed_opt::<Export>(None, "gadgets").await.unwrap().unwrap();
    current.spec.cluster_scoped_sharing = true;
    p.admin
        .replace(
            &ApiResource::erase::<Export>(&()),
            None,
            "gadgets",
            &kbind_cluster::to_dynamic(&current).unwrap(),
            &PostParams::default(),
        )
        .await
        .unwrap();
    eventually("Ready once shared", reason("AsExpected")).await;
    running.stop().await;
    let g = grant("token:alice", "gadgets", CONSUMER, &[]);
    p.issuer
        .provision(&g, &shared(gadgets_only))
        .await
        .expect("shared by opt-in");
}

#[tokio::test(start_paused = true)]
async fn claims_follow_the_operators_patterns_per_bind_maximum_and_quota() {
    // Defaults: any name but the reserved ones, at most 10 per bind, 20 per identity.
    let p = provider().await;
    let many: Vec<String> = (0..11).map(|i| format!("ns-{i}")).collect();
    let many: Vec<&str> = many.iter().map(String::as_str).collect();
    let g = grant("token:mallory", "widgets", CONSUMER, &many);
    let err = p.issuer.provision(&g, &widgets_export()).await.expect_err("too many");
    assert!(
        matches!(err, IssueError::TooManyNamespaces { max: 10, asked: 11 }),
        "{err:?}"
    );
    assert!(!namespace_names(&p).await.contains("ns-0"), "nothing was claimed");
    // 20 per identity, counted over its Grants (other consumer clusters too).
    for (i, uid) in [CONSUMER, OTHER_CONSUMER].iter().enumerate() {
        let names: Vec<String> = (0..10).map(|j| format!("q{i}-{j}")).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let g = grant("token:mallory", &format!("w{i}"), uid, &names);
        p.issuer.provision(&g, &widgets_export()).await.expect("within quota");
    }
    let g = grant("token:mallory", "w3", CONSUMER, &["q0-0", "one-more"]);
    let err = p.issuer.provision(&g, &widgets_export()).await.expect_err("over quota");
    assert!(
        matches!(
            err,
            IssueError::NamespaceQuotaExceeded {
                quota: 20,
                held: 20,
                adding: 1
            }
        ),
        "{err:?}"
    );
    assert!(!namespace_names(&p).await.contains("one-more"));
    // Namespaces it holds already may be bound again at no cost.
    let g = grant("token:mallory", "w3", CONSUMER, &["q0-0", "q1-9"]);
    p.issuer.provision(&g, &widgets_export()).await.expect("held ones");
    // Another identity has its own quota.
    let g = grant(
        "token:alice",
        "widgets",
        "11111111-2222-4333-8444-555555555555",
        &["alice-1"],
    );
    p.issuer
        .provision(&g, &widgets_export())
        .await
        .expect("alice's own quota");

    // A namespace that existed before any claim is never claimed, even by a pattern allowing it.
    admin_namespace(&p, "cert-manager").await;
    let g = grant(
        "token:alice",
        "widgets",
        "11111111-2222-4333-8444-555555555555",
        &["cert-manager"],
    );
    let err = p
        .issuer
        .provision(&g, &widgets_export())
        .await
        .expect_err("pre-existing");
    assert!(matches!(err, IssueError::NamespaceNotClaimable { .. }), "{err:?}");

    // The operator gives each identity a prefix and reserves platform names.
    let options = Options {
        claimable_namespaces: vec!["{identity}-*".into()],
        unclaimable_namespaces: vec!["monitoring".into(), "kube-*".into()],
        max_namespaces_per_bind: 2,
        namespace_quota: 3,
        ..Options::default()
    };
    let issuer = KubernetesIssuer::new(p.admin.clone(), options);
    let prefix = kbind_backend::issuer::claims::identity_id("token:bob");
    let own = |n: u8| format!("{prefix}-{n}");
    const BOBS: &str = "33333333-4444-4555-8666-777777777777";
    for squat in ["prod", "monitoring", "team-a2"] {
        let g = grant("token:bob", "widgets", BOBS, &[squat]);
        let err = issuer.provision(&g, &widgets_export()).await.expect_err(squat);
        assert!(
            matches!(&err, IssueError::NamespaceNotAllowed { namespace, .. } if namespace == squat),
            "{err:?}"
        );
        assert_eq!(err.reason(), "NamespaceNotAllowed");
    }
    let err = issuer
        .precheck_namespaces("token:bob", &["prod".into()])
        .expect_err("the gateway's pre-check");
    assert!(err.to_string().contains(&format!("{prefix}-*")), "{err}");
    let g = grant("token:bob", "widgets", BOBS, &[&own(1), &own(2)]);
    issuer.provision(&g, &widgets_export()).await.expect("bob's prefix");
    let g = grant("token:bob", "gadgets", BOBS, &[&own(3), &own(4)]);
    let err = issuer.provision(&g, &widgets_export()).await.expect_err("quota 3");
    assert!(
        matches!(
            err,
            IssueError::NamespaceQuotaExceeded {
                quota: 3,
                held: 2,
                adding: 2
            }
        ),
        "{err:?}"
    );
    // Alice cannot use Bob's prefix.
    let g = grant("token:alice", "widgets", CONSUMER, &[&own(5)]);
    assert!(matches!(
        issuer.provision(&g, &widgets_export()).await,
        Err(IssueError::NamespaceNotAllowed { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn a_consumer_cluster_bound_by_one_identity_is_refused_to_another_and_keeps_its_lease() {
    let p = provider().await;
    let lease = format!("consumer-{CONSUMER}");
    let alice = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.admin.create_typed(&alice).await.unwrap();
    p.issuer.provision(&alice, &widgets_export()).await.expect("alice");
    let owned = p.admin.get(&leases(), Some("kbind"), &lease).await.unwrap();
    assert_eq!(
        owned
            .metadata
            .annotations
            .unwrap_or_default()
            .get("iam.kbind.io/claimed-by")
            .map(String::as_str),
        Some("token:alice")
    );

    // Bob names Alice's consumer cluster: refused before anything is written.
    let bob = grant("token:bob", "widgets", CONSUMER, &["team-b"]);
    p.admin.create_typed(&bob).await.unwrap();
    let err = p.issuer.provision(&bob, &widgets_export()).await.expect_err("refused");
    assert!(
        matches!(&err, IssueError::ConsumerClusterClaimed { uid } if uid == CONSUMER),
        "{err:?}"
    );
    assert_eq!(err.reason(), "ConsumerClusterClaimed");
    let bobs = bob.metadata.name.clone().unwrap();
    assert!(
        issued_objects(&p, &bobs).await.is_empty(),
        "bob got no Role on alice's Lease"
    );
    assert!(!namespace_names(&p).await.contains("team-b"));
    // Revoking Bob's refused Grant leaves Alice's Lease.
    p.admin
        .delete(&ApiResource::erase::<Grant>(&()), None, &bobs, &DeleteParams::default())
        .await
        .unwrap();
    p.issuer.revoke(&bob).await.unwrap();
    assert!(
        p.admin
            .get_opt(&leases(), Some("kbind"), &lease)
            .await
            .unwrap()
            .is_some()
    );

    // Without a Lease yet (Alice's Grant stored but not provisioned), her older Grant wins.
    let carol_uid = "22222222-3333-4444-8555-666666666666";
    let first = grant("token:carol", "widgets", carol_uid, &["team-c"]);
    p.admin.create_typed(&first).await.unwrap();
    let dave = grant("token:dave", "widgets", carol_uid, &["team-d"]);
    let err = p
        .issuer
        .provision(&dave, &widgets_export())
        .await
        .expect_err("carol's first");
    assert!(matches!(err, IssueError::ConsumerClusterClaimed { .. }), "{err:?}");
    p.issuer.provision(&first, &widgets_export()).await.expect("carol");
}

#[tokio::test(start_paused = true)]
async fn a_namespace_the_platform_takes_back_keeps_no_role_of_the_grant() {
    let p = provider().await;
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a", "team-b"]);
    p.issuer.provision(&g, &widgets_export()).await.expect("alice");
    let (_, as_grant) = token_client(&p, &g).await;
    as_grant
        .list(&widgets(), Some("team-a"), &ListParams::default())
        .await
        .expect("alice reads her namespace");
    // The platform takes team-a back: it removes the claim.
    p.admin
        .patch(
            &namespaces(),
            None,
            "team-a",
            &kbind_cluster::Patch::Merge(json!({"metadata": {
                "labels": {"iam.kbind.io/claimed-by": null},
                "annotations": {"iam.kbind.io/claimed-by": null},
            }})),
            &Default::default(),
        )
        .await
        .unwrap();
    let err = p
        .issuer
        .provision(&g, &widgets_export())
        .await
        .expect_err("not hers any more");
    assert!(
        matches!(&err, IssueError::NamespaceNotClaimable { namespace } if namespace == "team-a"),
        "{err:?}"
    );
    let name = g.metadata.name.clone().unwrap();
    let left = kinds(&issued_objects(&p, &name).await);
    assert!(!left.iter().any(|o| o.contains(" team-a/")), "{left:?}");
    assert!(
        left.iter().any(|o| o == &format!("Role team-b/kbind:{name}")),
        "{left:?}"
    );
    assert!(matches!(
        as_grant.list(&widgets(), Some("team-a"), &ListParams::default()).await,
        Err(Error::Forbidden { .. })
    ));
    as_grant
        .list(&widgets(), Some("team-b"), &ListParams::default())
        .await
        .expect("her other namespace still works");
}

/// A take-back is acted on by event: the platform removes the claim label and the Grant's Role
/// goes within seconds (of the paused clock), long before the 10-minute resync.
#[tokio::test(start_paused = true)]
async fn the_controller_withdraws_a_taken_back_namespace_at_once() {
    let p = provider().await;
    p.admin.create_typed(&widgets_export()).await.unwrap();
    let g = grant("token:alice", "widgets", CONSUMER, &["team-a", "team-b"]);
    let name = g.metadata.name.clone().unwrap();
    p.admin.create_typed(&g).await.unwrap();
    let running = start(&p);
    eventually("the Grant Ready", || async {
        let (status, _, _) = ready(&get_grant(&p, &name).await?)?;
        (status == "True").then_some(())
    })
    .await;
    let (_, as_grant) = token_client(&p, &g).await;
    as_grant
        .list(&widgets(), Some("team-a"), &ListParams::default())
        .await
        .expect("alice reads her namespace");
    // Let the controller settle, so only an event can wake it before its resync.
    tokio::time::sleep(Duration::from_secs(30)).await;
    let taken_at = tokio::time::Instant::now();
    p.admin
        .patch(
            &namespaces(),
            None,
            "team-a",
            &kbind_cluster::Patch::Merge(json!({"metadata": {"labels": {"iam.kbind.io/claimed-by": null}}})),
            &Default::default(),
        )
        .await
        .unwrap();
    let (status, reason, message) = eventually("the take-back refused", || async {
        let (status, reason, message) = ready(&get_grant(&p, &name).await?)?;
        (status == "False").then_some((status, reason, message))
    })
    .await;
    assert_eq!(
        (status.as_str(), reason.as_str()),
        ("False", "NamespaceNotAvailable"),
        "{message}"
    );
    // `eventually` gives up after 60 s; the resync would have taken 600 s.
    assert!(taken_at.elapsed() < Duration::from_secs(60));
    let left = kinds(&issued_objects(&p, &name).await);
    assert!(!left.iter().any(|o| o.contains(" team-a/")), "{left:?}");
    assert!(matches!(
        as_grant.list(&widgets(), Some("team-a"), &ListParams::default()).await,
        Err(Error::Forbidden { .. })
    ));
    running.stop().await;
}

/// Concurrent binds of one identity cannot together exceed its quota: each of three Grants adds
/// ten new namespaces against a quota of 20, all provisioned at once, round after round.
#[tokio::test(start_paused = true)]
async fn concurrent_claims_of_one_identity_stay_within_its_quota() {
    for round in 0..5 {
        let p = provider().await;
        // Every request takes a while, so the three provisions interleave as on a real server.
        p.cluster.set_latency(Some(Duration::from_millis(5)));
        let grants: Vec<Grant> = (0..3)
            .map(|i| {
                let names: Vec<String> = (0..10).map(|j| format!("r{round}-g{i}-{j}")).collect();
                let names: Vec<&str> = names.iter().map(String::as_str).collect();
                grant("token:mallory", &format!("w{i}"), CONSUMER, &names)
            })
            .collect();
        let export = widgets_export();
        let outcomes = futures::future::join_all(grants.iter().map(|g| p.issuer.provision(g, &export))).await;
        let issued = outcomes.iter().filter(|o| o.is_ok()).count();
        for refused in outcomes.iter().filter_map(|o| o.as_ref().err()) {
            assert!(
                matches!(refused, IssueError::NamespaceQuotaExceeded { quota: 20, .. }),
                "round {round}: {refused:?}"
            );
        }
        let held = namespace_names(&p)
            .await
            .into_iter()
            .filter(|ns| ns.starts_with(&format!("r{round}-")))
            .count();
        assert!(
            issued <= 2,
            "round {round}: {issued} of 3 binds issued against a quota of 20"
        );
        assert!(
            held <= 20,
            "round {round}: {held} namespaces held against a quota of 20"
        );
        assert!(issued >= 1, "round {round}: the quota lets one bind through");
    }
}

/// A consumer cluster's UID is visible (provider copies carry it), so after its owner unbinds
/// another identity could bind it and lock the owner out. A Lease a konnector renewed is the
/// proof of whose cluster it is: it outlives the owner's last Grant, and only the owner binds
/// the UID again. A Lease never renewed proves nothing and goes with the last Grant.
#[tokio::test(start_paused = true)]
async fn a_consumer_cluster_its_konnector_heartbeated_cannot_be_pre_claimed_after_an_unbind() {
    let p = provider().await;
    let lease = format!("consumer-{CONSUMER}");
    let alice = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.admin.create_typed(&alice).await.unwrap();
    p.issuer.provision(&alice, &widgets_export()).await.expect("alice");
    // Alice's konnector heartbeats.
    p.admin
        .patch(
            &leases(),
            Some("kbind"),
            &lease,
            &kbind_cluster::Patch::Merge(json!({"spec": {"renewTime": "2026-12-05T10:00:00.000000Z"}})),
            &Default::default(),
        )
        .await
        .unwrap();
    // Alice unbinds: her Grant is revoked.
    p.admin
        .delete(
            &ApiResource::erase::<Grant>(&()),
            None,
            alice.metadata.name.as_deref().unwrap(),
            &DeleteParams::default(),
        )
        .await
        .unwrap();
    p.issuer.revoke(&alice).await.unwrap();
    assert!(
        issued_objects(&p, alice.metadata.name.as_deref().unwrap())
            .await
            .is_empty(),
        "the credential is gone"
    );
    // Mallory read the UID off a provider copy and binds it first.
    let mallory = grant("token:mallory", "widgets", CONSUMER, &["team-m"]);
    p.admin.create_typed(&mallory).await.unwrap();
    let err = p
        .issuer
        .provision(&mallory, &widgets_export())
        .await
        .expect_err("not mallory's cluster");
    assert!(
        matches!(&err, IssueError::ConsumerClusterClaimed { uid } if uid == CONSUMER),
        "{err:?}"
    );
    assert!(!namespace_names(&p).await.contains("team-m"));
    p.issuer.revoke(&mallory).await.unwrap();
    // Alice binds her cluster again.
    let again = grant("token:alice", "widgets", CONSUMER, &["team-a"]);
    p.issuer
        .provision(&again, &widgets_export())
        .await
        .expect("alice again");

    // A Lease no konnector renewed goes with its last Grant: a mistyped UID is nobody's.
    let typo = "33333333-4444-4555-8666-777777777777";
    let bob = grant("token:bob", "widgets", typo, &["team-b"]);
    p.issuer.provision(&bob, &widgets_export()).await.expect("bob");
    p.issuer.revoke(&bob).await.unwrap();
    assert!(
        p.admin
            .get_opt(&leases(), Some("kbind"), &format!("consumer-{typo}"))
            .await
            .unwrap()
            .is_none()
    );
    let carol = grant("token:carol", "widgets", typo, &["team-c"]);
    p.issuer.provision(&carol, &widgets_export()).await.expect("carol");
}
