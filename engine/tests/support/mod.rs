//! Shared setup for the engine's integration tests: a Connector that routes kubeconfig servers
//! to fake clusters, resource and object helpers, polling, and an engaged-provider harness.

// Each test binary includes this module and uses a subset of it.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use base64::Engine as _;
use fakeapi::{FakeCluster, UserInfo};
use kbind_api::Connection;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, PostParams, SharedClock, to_dynamic,
};
use kbind_engine::Links;
use kbind_engine::context::{Context, EngineConfig};
use kbind_engine::provider::EngagedProvider;
use kbind_engine::remote::{Connector, Credentials, ProviderKubeconfig};
use parking_lot::Mutex;
use serde_json::{Value, json};

pub const SERVER: &str = "https://provider.fake";
pub const CA: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";
pub const OTHER_CA: &str = "-----BEGIN CERTIFICATE-----\nAwQF\n-----END CERTIFICATE-----\n";
pub const ADMIN_TOKEN: &str = "provider-admin-token-s3cret";
pub const NOBODY_TOKEN: &str = "provider-nobody-token-s3cret";
/// The token the engaged-provider harness puts in the Connection's kubeconfig.
pub const KONNECTOR_TOKEN: &str = "t0ken";

/// Routes kubeconfig servers to fake clusters; refuses a CA that differs from the one the
/// server presents (what rustls verification would do before any request is sent).
#[derive(Default)]
pub struct FakeConnector {
    routes: Mutex<BTreeMap<String, (FakeCluster, String)>>,
    pub calls: AtomicUsize,
}

impl FakeConnector {
    /// Serves `server` from `cluster`, presenting `ca`.
    pub fn route(&self, server: &str, cluster: &FakeCluster, ca: &str) {
        self.routes
            .lock()
            .insert(server.to_string(), (cluster.clone(), ca.to_string()));
    }

    /// How many connections were attempted.
    pub fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl Connector for FakeConnector {
    async fn connect(
        &self,
        kc: &ProviderKubeconfig,
        _: &kbind_cluster::BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let (cluster, ca) = self
            .routes
            .lock()
            .get(&kc.server)
            .cloned()
            .ok_or_else(|| Error::Transport("no route to host".into()))?;
        if kc.ca_pem.as_deref() != Some(ca.as_bytes()) {
            return Err(Error::Transport("invalid peer certificate: UnknownIssuer".into()));
        }
        let Credentials::Token(token) = &kc.credentials else {
            return Err(Error::Unauthorized {
                message: "Unauthorized".into(),
            });
        };
        let user = cluster.authenticate(token).ok_or_else(|| Error::Unauthorized {
            message: "Unauthorized".into(),
        })?;
        Ok(Arc::new(cluster.client(user)))
    }
}

pub fn res(group: &str, version: &str, kind: &str, plural: &str) -> ApiResource {
    let api_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    ApiResource {
        group: group.into(),
        version: version.into(),
        api_version,
        kind: kind.into(),
        plural: plural.into(),
    }
}

pub fn secrets() -> ApiResource {
    res("", "v1", "Secret", "secrets")
}

pub fn leases() -> ApiResource {
    res("coordination.k8s.io", "v1", "Lease", "leases")
}

pub fn connections() -> ApiResource {
    ApiResource::erase::<Connection>(&())
}

pub fn crds() -> ApiResource {
    res(
        "apiextensions.k8s.io",
        "v1",
        "CustomResourceDefinition",
        "customresourcedefinitions",
    )
}

pub fn widgets() -> ApiResource {
    res("example.org", "v1", "Widget", "widgets")
}

pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// Waits until `check` holds, polling on the (paused) tokio clock; fails after `limit`.
pub async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out after {limit:?} waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

pub fn kubeconfig(server: &str, ca: &str, cluster_extra: &str, user: &str) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: p\nclusters:\n- name: p\n  cluster:\n    server: {server}\n    certificate-authority-data: {}\n{cluster_extra}contexts:\n- name: p\n  context: {{cluster: p, user: u}}\nusers:\n- name: u\n  user:\n{user}",
        b64.encode(ca)
    )
}

pub fn token_kubeconfig(token: &str) -> String {
    kubeconfig(SERVER, CA, "", &format!("    token: {token}\n"))
}

/// Installs the kbind CRDs on the consumer.
pub async fn install_kbind_crds(admin: &Arc<dyn ClusterClient>) {
    for mut crd in kbind_api::crds() {
        // The apiserver defaults these on create; fakeapi's establishing controller
        // compares acceptedNames with spec.names and would otherwise never settle.
        let names = &mut crd.spec.names;
        names.list_kind.get_or_insert_with(|| format!("{}List", names.kind));
        names.singular.get_or_insert_with(|| names.kind.to_lowercase());
        admin
            .create(&crds(), None, &to_dynamic(&crd).unwrap(), &PostParams::default())
            .await
            .unwrap();
    }
}

pub async fn create_namespace(client: &Arc<dyn ClusterClient>, name: &str) {
    client
        .create(
            &res("", "v1", "Namespace", "namespaces"),
            None,
            &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
}

/// Aborts the spawned engine task when the test's world goes away.
pub struct AbortOnDrop(pub tokio::task::JoinHandle<()>);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Who the konnector is on each side and what its kubeconfig Secret carries.
pub struct Engagement {
    /// The konnector's user on the consumer.
    pub consumer_user: UserInfo,
    /// The user the kubeconfig's token authenticates on the provider.
    pub provider_user: UserInfo,
    /// Labels on the kubeconfig Secret `kbind/acme`.
    pub secret_labels: Value,
}

/// A provider engaged through Connection `acme`, with the Connection reconciler running.
pub struct Engaged {
    pub ctx: Context,
    pub engaged: Arc<EngagedProvider>,
    pub task: AbortOnDrop,
}

impl Engagement {
    /// Creates Secret `kbind/acme` and Connection `acme` on the consumer (whose kbind CRDs and
    /// namespace `kbind` must exist), grants the provider user what an issuer grants a
    /// konnector besides the test's own RBAC (its heartbeat Lease, reading the identity and
    /// the CRDs), runs the Connection reconciler and waits until its link engages the provider.
    pub async fn engage(self, consumer: &FakeCluster, provider: &FakeCluster, clock: SharedClock) -> Engaged {
        let connector = Arc::new(FakeConnector::default());
        connector.route(SERVER, provider, CA);
        self.engage_through(consumer, provider, clock, connector).await
    }

    /// [`Engagement::engage`] with the provider reached through `connector`.
    pub async fn engage_through(
        self,
        consumer: &FakeCluster,
        provider: &FakeCluster,
        clock: SharedClock,
        connector: Arc<dyn Connector>,
    ) -> Engaged {
        let admin: Arc<dyn ClusterClient> = Arc::new(consumer.admin_client());
        grant_link(provider, &self.provider_user, &consumer.identity_uid()).await;
        provider.add_token(KONNECTOR_TOKEN, self.provider_user);
        let ctx = Context {
            consumer: Arc::new(consumer.client(self.consumer_user)),
            connector,
            clock,
            randomness: kbind_cluster::backoff::seeded(3),
            config: EngineConfig::default(),
        };
        let links = Links::new();
        let task = {
            let (ctx, links) = (ctx.clone(), links.clone());
            AbortOnDrop(tokio::spawn(async move {
                let (stores, feed) = kbind_engine::connection::stores::ConsumerStores::new(&ctx);
                tokio::join!(feed, kbind_engine::connection::run_shared(ctx.clone(), stores, links));
            }))
        };
        admin
            .create(
                &secrets(),
                Some("kbind"),
                &object(json!({"apiVersion": "v1", "kind": "Secret",
                    "metadata": {"name": "acme", "namespace": "kbind", "labels": self.secret_labels},
                    "stringData": {"kubeconfig": token_kubeconfig(KONNECTOR_TOKEN)}})),
                &PostParams::default(),
            )
            .await
            .unwrap();
        let served = admin.clone();
        eventually("Connections to be served", Duration::from_secs(60), || {
            let served = served.clone();
            async move { served.list(&connections(), None, &Default::default()).await.is_ok() }
        })
        .await;
        admin
            .create(
                &connections(),
                None,
                &object(json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
                    "metadata": {"name": "acme"},
                    "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "acme", "key": "kubeconfig"}}})),
                &PostParams::default(),
            )
            .await
            .unwrap();
        eventually("the provider to be engaged", Duration::from_secs(120), || {
            let engaged = links.get("acme").is_some();
            async move { engaged }
        })
        .await;
        let engaged = links.get("acme").unwrap();
        Engaged { ctx, engaged, task }
    }
}

/// What an issuer grants a konnector on the provider besides the Export's resources (contract
/// §7): its heartbeat Lease `kbind/consumer-<consumer_uid>` (pre-created), reading the identity
/// object and the CRDs.
pub async fn grant_link(provider: &FakeCluster, user: &UserInfo, consumer_uid: &str) {
    let padmin: Arc<dyn ClusterClient> = Arc::new(provider.admin_client());
    let subject = if let Some(sa) = user.name.strip_prefix("system:serviceaccount:") {
        let (namespace, name) = sa.split_once(':').unwrap_or(("default", sa));
        json!([{"kind": "ServiceAccount", "namespace": namespace, "name": name}])
    } else {
        json!([{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": user.name}])
    };
    let lease = format!("consumer-{consumer_uid}");
    let rbac = |kind: &str| {
        res(
            "rbac.authorization.k8s.io",
            "v1",
            kind,
            &format!("{}s", kind.to_lowercase()),
        )
    };
    if padmin
        .get_opt(&res("", "v1", "Namespace", "namespaces"), None, "kbind")
        .await
        .ok()
        .flatten()
        .is_none()
    {
        create_namespace(&padmin, "kbind").await;
    }
    let objects = [
        (
            leases(),
            json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": lease, "namespace": "kbind", "labels": {"core.kbind.io/managed": "true"}},
                "spec": {"holderIdentity": consumer_uid}}),
        ),
        (
            rbac("Role"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                "metadata": {"name": "konnector-link", "namespace": "kbind"},
                "rules": [{"apiGroups": ["coordination.k8s.io"], "resources": ["leases"],
                    "resourceNames": [lease], "verbs": ["get", "update"]}]}),
        ),
        (
            rbac("RoleBinding"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                "metadata": {"name": "konnector-link", "namespace": "kbind"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "konnector-link"}}),
        ),
        (
            rbac("ClusterRole"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
                "metadata": {"name": "konnector-link"},
                "rules": [
                    {"apiGroups": [""], "resources": ["namespaces"], "resourceNames": ["kube-system"], "verbs": ["get"]},
                    {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"],
                     "verbs": ["get", "list", "watch"]}]}),
        ),
        (
            rbac("ClusterRoleBinding"),
            json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                "metadata": {"name": "konnector-link"}, "subjects": subject,
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "konnector-link"}}),
        ),
    ];
    for (resource, body) in objects {
        let namespace = body["metadata"]["namespace"].as_str().map(str::to_string);
        match padmin
            .create(&resource, namespace.as_deref(), &object(body), &PostParams::default())
            .await
        {
            Ok(_) | Err(Error::AlreadyExists { .. }) => {}
            Err(e) => panic!("granting the link's RBAC on the provider: {e}"),
        }
    }
}

/// The konnector's identity on the provider in most tests.
pub fn konnector() -> UserInfo {
    UserInfo {
        name: "konnector".into(),
        groups: vec!["system:masters".into()],
    }
}

/// The `widgets.example.org` CRD (namespaced, status subresource, schemaless spec and status).
pub fn widget_crd() -> DynamicObject {
    object(json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}],
        },
    }))
}

/// Installs `widgets.example.org` through `client` and waits until it is served.
pub async fn serve_widgets(client: &Arc<dyn ClusterClient>) {
    client
        .create(&crds(), None, &widget_crd(), &PostParams::default())
        .await
        .unwrap();
    eventually("widgets to be served", Duration::from_secs(120), || {
        let client = client.clone();
        async move { client.list(&widgets(), None, &Default::default()).await.is_ok() }
    })
    .await;
}
