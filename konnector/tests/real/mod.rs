//! What the real-cluster stories share: clusters from kbind-testenv, the chart installed on each consumer with a
//! TokenRequest-minted ServiceAccount token as the konnector's only credential, the provider admin's part, and
//! `konnector run` children.

#![allow(dead_code)]

pub use crate::child::*;
pub use std::collections::BTreeMap;
pub use std::net::SocketAddr;
pub use std::path::{Path, PathBuf};

pub use fakeapi::sample::{provider_rbac, widgets, widgets_crd};
pub use k8s_openapi::ByteString;
pub use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
pub use k8s_openapi::api::core::v1::ServiceAccount;
pub use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
pub use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
pub use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, KubeClusterClient, Patch, PatchParams,
    PostParams,
};
pub use kbind_testenv::{Cluster, TestEnv, User};
pub use serde_json::{Value, json};

/// The chart's release name and namespace; the release's full name names its ServiceAccount.
pub const RELEASE: &str = "konnector";
pub const NAMESPACE: &str = "kbind";
/// Where the provider admin keeps the consumers' ServiceAccounts.
pub const PROVIDER_ACCOUNTS: &str = "kbind-consumers";

/// One story at a time: each starts its own apiservers.
pub static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

pub fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// `helm template` of the chart, narrowed to the sample API's group as the README advises, CRDs included.
pub fn render_chart(helm: &Path) -> Vec<Value> {
    let output = std::process::Command::new(helm)
        .arg("template")
        .arg(RELEASE)
        .arg(repo_root().join("deploy/charts/konnector"))
        .args([
            "--namespace",
            NAMESPACE,
            "--include-crds",
            "--set",
            "boundGroups={example.org}",
        ])
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "helm template failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
    documents.into_iter().filter(|doc| !doc.is_null()).collect()
}

pub fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap()
}

/// The resource of each kind the chart's install needs.
pub fn resource_of(kind: &str) -> ApiResource {
    use k8s_openapi::api::rbac::v1::{ClusterRole, ClusterRoleBinding, Role, RoleBinding};
    match kind {
        "CustomResourceDefinition" => erase::<CustomResourceDefinition>(),
        "ServiceAccount" => erase::<ServiceAccount>(),
        "ClusterRole" => erase::<ClusterRole>(),
        "ClusterRoleBinding" => erase::<ClusterRoleBinding>(),
        "Role" => erase::<Role>(),
        "RoleBinding" => erase::<RoleBinding>(),
        other => panic!("the install does not create {other}"),
    }
}

pub async fn create(client: &KubeClusterClient, value: Value) -> DynamicObject {
    let kind = kind_of(&value).to_string();
    let namespace = value["metadata"]["namespace"].as_str().map(str::to_string);
    let res = match kind.as_str() {
        "Namespace" => erase::<k8s_openapi::api::core::v1::Namespace>(),
        "Secret" => erase::<k8s_openapi::api::core::v1::Secret>(),
        "ConfigMap" => erase::<k8s_openapi::api::core::v1::ConfigMap>(),
        "Connection" => erase::<kbind_api::Connection>(),
        "ClusterBinding" => erase::<kbind_api::ClusterBinding>(),
        "Binding" => erase::<kbind_api::Binding>(),
        "Widget" => widgets(),
        other => resource_of(other),
    };
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
    client
        .create(&res, namespace.as_deref(), &object(value), &PostParams::default())
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"))
}

pub fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A client acting as `user` on `cluster`, through the same seam the konnector uses.
pub async fn client_as(cluster: &Cluster, user: User) -> KubeClusterClient {
    KubeClusterClient::from_config(cluster.config(user).await.unwrap()).unwrap()
}

/// Waits until `res` can be listed on `client`: a new CRD is served once it is Established.
pub async fn served(client: &KubeClusterClient, res: &ApiResource, lines: &Lines) {
    eventually(&format!("{} served", res.plural), lines, async || {
        client.list(res, None, &Default::default()).await.ok().map(|_| ())
    })
    .await;
}

/// A TokenRequest-minted token for ServiceAccount `namespace/name`, asked for by the cluster's admin.
pub async fn service_account_token(cluster: &Cluster, namespace: &str, name: &str) -> String {
    let admin = cluster.client(User::Admin).await.unwrap();
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(admin, namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let minted = accounts
        .create_token_request(name, &PostParams::default(), &request)
        .await
        .unwrap();
    minted.status.expect("a TokenRequest answers with a status").token
}

/// A kubeconfig with inline credentials only (contract §5): the cluster's server and CA, and `token`.
pub fn inline_kubeconfig(cluster: &Cluster, user: &str, token: &str) -> String {
    inline_kubeconfig_at(cluster, &cluster.server(), user, token)
}

/// Like [`inline_kubeconfig`], but naming `server` (e.g. a [`FaultProxy`] in front of the cluster).
pub fn inline_kubeconfig_at(cluster: &Cluster, server: &str, user: &str, token: &str) -> String {
    let admin = cluster.kubeconfig(User::Admin);
    let ca_path = admin.clusters[0]
        .cluster
        .as_ref()
        .and_then(|c| c.certificate_authority.clone())
        .expect("the harness names its CA file");
    let ca = ByteString(std::fs::read(ca_path).unwrap());
    let name = format!("kbind-cluster-{}", cluster.index());
    let kubeconfig = json!({
        "apiVersion": "v1", "kind": "Config",
        "clusters": [{"name": name, "cluster": {"server": server, "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": name, "user": user}}],
        "current-context": user,
    });
    serde_json::to_string_pretty(&kubeconfig).unwrap()
}

/// The provider admin's part: export the sample API and give each consumer its own ServiceAccount, bound to the
/// demo's least-privilege ClusterRole. Returns one inline kubeconfig per consumer.
pub async fn prepare_provider(cluster: &Cluster, consumers: usize, lines: &Lines) -> Vec<String> {
    prepare_provider_with(cluster, consumers, true, lines).await
}

/// `prepare_provider`, binding `provider_rbac()`'s ClusterRole to the consumers only when `cluster_rbac`; without
/// it the ServiceAccounts may do nothing until a story grants them something.
pub async fn prepare_provider_with(
    cluster: &Cluster,
    consumers: usize,
    cluster_rbac: bool,
    lines: &Lines,
) -> Vec<String> {
    provider_side(
        cluster,
        &cluster.server(),
        widgets_crd(),
        consumers,
        cluster_rbac,
        lines,
    )
    .await
}

/// Like [`prepare_provider`], but the kubeconfigs name `server`.
pub async fn prepare_provider_at(cluster: &Cluster, server: &str, consumers: usize, lines: &Lines) -> Vec<String> {
    provider_side(cluster, server, widgets_crd(), consumers, true, lines).await
}

/// Like [`prepare_provider_at`] for one consumer, exporting `crd` (a widgets CRD) instead of the sample's.
pub async fn prepare_provider_exporting(cluster: &Cluster, server: &str, crd: Value, lines: &Lines) -> String {
    provider_side(cluster, server, crd, 1, true, lines).await.remove(0)
}

/// The provider admin's part, with kubeconfigs naming `server`.
async fn provider_side(
    cluster: &Cluster,
    server: &str,
    crd: Value,
    consumers: usize,
    cluster_rbac: bool,
    lines: &Lines,
) -> Vec<String> {
    let admin = client_as(cluster, User::Admin).await;
    create(&admin, crd).await;
    create(&admin, namespace(PROVIDER_ACCOUNTS)).await;
    let names: Vec<String> = (1..=consumers).map(|i| format!("consumer-{i}")).collect();
    for name in &names {
        create(
            &admin,
            json!({"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": name, "namespace": PROVIDER_ACCOUNTS}}),
        )
        .await;
    }
    for (res, mut rbac) in provider_rbac().into_iter().filter(|_| cluster_rbac) {
        if rbac["kind"] == "ClusterRoleBinding" {
            let subjects: Vec<Value> = names
                .iter()
                .map(|n| json!({"kind": "ServiceAccount", "name": n, "namespace": PROVIDER_ACCOUNTS}))
                .collect();
            rbac["subjects"] = Value::Array(subjects);
        }
        admin
            .create(&res, None, &object(rbac), &PostParams::default())
            .await
            .unwrap();
    }
    served(&admin, &widgets(), lines).await;
    let mut kubeconfigs = Vec::new();
    for name in &names {
        let token = service_account_token(cluster, PROVIDER_ACCOUNTS, name).await;
        kubeconfigs.push(inline_kubeconfig_at(cluster, server, name, &token));
    }
    kubeconfigs
}

/// One consumer cluster with kbind installed from the chart and the bundle applied.
pub struct Consumer {
    pub admin: KubeClusterClient,
    /// The konnector's own kubeconfig: the chart's ServiceAccount, never admin.
    pub kubeconfig: PathBuf,
    pub uid: String,
}

impl Consumer {
    /// What `helm install` and the consumer admin do: CRDs, namespace, the chart's RBAC, then the one apply.
    pub async fn install(
        cluster: &Cluster,
        chart: &[Value],
        provider_kubeconfig: &str,
        conflict_policy: &str,
        dir: &Path,
        lines: &Lines,
    ) -> Self {
        let consumer = Self::install_chart(cluster, chart, dir, lines).await;
        for item in bundle(provider_kubeconfig, conflict_policy) {
            create(&consumer.admin, item).await;
        }
        consumer
    }

    /// What `helm install` and the consumer admin do before the bundle: CRDs, namespace, the chart's RBAC.
    pub async fn install_chart(cluster: &Cluster, chart: &[Value], dir: &Path, lines: &Lines) -> Self {
        let admin = client_as(cluster, User::Admin).await;
        let (crds, rest): (Vec<&Value>, Vec<&Value>) =
            chart.iter().partition(|o| kind_of(o) == "CustomResourceDefinition");
        assert!(!crds.is_empty(), "the chart renders its CRDs");
        for crd in crds {
            create(&admin, crd.clone()).await;
        }
        served(&admin, &erase::<kbind_api::Connection>(), lines).await;
        served(&admin, &erase::<kbind_api::ClusterBinding>(), lines).await;
        create(&admin, namespace(NAMESPACE)).await;
        let rbac_kinds = [
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Role",
            "RoleBinding",
        ];
        for kind in rbac_kinds {
            let of_kind: Vec<&&Value> = rest.iter().filter(|o| kind_of(o) == kind).collect();
            assert_eq!(of_kind.len(), 1, "one {kind} rendered");
            create(&admin, (*of_kind[0]).clone()).await;
        }
        let token = service_account_token(cluster, NAMESPACE, RELEASE).await;
        let kubeconfig = dir.join(format!("konnector-{}.kubeconfig", cluster.index()));
        std::fs::write(&kubeconfig, inline_kubeconfig(cluster, "konnector", &token)).unwrap();
        let uid = admin
            .get(&erase::<k8s_openapi::api::core::v1::Namespace>(), None, "kube-system")
            .await
            .unwrap()
            .metadata
            .uid
            .unwrap();
        Self { admin, kubeconfig, uid }
    }

    /// Waits until the Connection and the ClusterBinding are Ready and the consumer serves the pulled widgets.
    pub async fn wait_ready(&self, lines: &Lines) {
        for (res, name) in [
            (erase::<kbind_api::Connection>(), "provider"),
            (erase::<kbind_api::ClusterBinding>(), "widgets"),
        ] {
            eventually(&format!("{} {name} Ready", res.kind), lines, async || {
                let obj = self.admin.get_opt(&res, None, name).await.ok()??;
                has_condition(&obj, "Ready", "True").then_some(())
            })
            .await;
        }
        served(&self.admin, &widgets(), lines).await;
    }

    pub async fn create_widget(&self, name: &str, size: i64) -> DynamicObject {
        create(&self.admin, widget(name, size)).await
    }

    pub async fn resize_widget(&self, name: &str, size: i64) {
        self.admin
            .patch(
                &widgets(),
                Some("default"),
                name,
                &Patch::Merge(json!({"spec": {"size": size}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
    }

    pub async fn delete_widget(&self, name: &str) {
        self.admin
            .delete(&widgets(), Some("default"), name, &DeleteParams::default())
            .await
            .unwrap();
    }

    pub async fn widget(&self, name: &str) -> Option<DynamicObject> {
        self.admin.get_opt(&widgets(), Some("default"), name).await.unwrap()
    }

    pub async fn konnector(&self, identity: &str, lines: &Lines) -> Konnector {
        Konnector::start(&self.kubeconfig, identity, &[], lines.clone()).await
    }
}

/// The one-apply bundle (contract §1) in file order: Secret `provider`, Connection `provider`, ClusterBinding
/// `widgets`.
pub fn bundle(provider_kubeconfig: &str, conflict_policy: &str) -> [Value; 3] {
    named_bundle("provider", "widgets", provider_kubeconfig, conflict_policy)
}

/// A bundle whose Secret and Connection are named `connection` and whose ClusterBinding is `binding`.
pub fn named_bundle(connection: &str, binding: &str, provider_kubeconfig: &str, conflict_policy: &str) -> [Value; 3] {
    [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": connection, "namespace": NAMESPACE},
               "stringData": {"kubeconfig": provider_kubeconfig}}),
        json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": connection},
               "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": connection, "key": "kubeconfig"}}}),
        json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": binding},
               "spec": {"connectionRef": {"name": connection}, "apis": [{"name": "widgets.example.org"}],
                        "conflictPolicy": conflict_policy}}),
    ]
}

/// RBAC objects giving `subject` `rules`: a Role and RoleBinding in `namespace`, or a ClusterRole and
/// ClusterRoleBinding when it is `None`.
pub fn grant(name: &str, namespace: Option<&str>, subject: Value, rules: Value) -> [Value; 2] {
    let (role, binding) = match namespace {
        Some(_) => ("Role", "RoleBinding"),
        None => ("ClusterRole", "ClusterRoleBinding"),
    };
    let mut objects = [
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": role, "metadata": {"name": name}, "rules": rules}),
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": binding, "metadata": {"name": name},
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": role, "name": name},
               "subjects": [subject]}),
    ];
    if let Some(ns) = namespace {
        for o in &mut objects {
            o["metadata"]["namespace"] = json!(ns);
        }
    }
    objects
}

/// The consumer's konnector: the chart's ServiceAccount.
pub fn konnector_subject() -> Value {
    json!({"kind": "ServiceAccount", "name": RELEASE, "namespace": NAMESPACE})
}

/// Consumer `n`'s (from 1) ServiceAccount on the provider.
pub fn provider_subject(n: usize) -> Value {
    json!({"kind": "ServiceAccount", "name": format!("consumer-{n}"), "namespace": PROVIDER_ACCOUNTS})
}

pub fn widget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size, "color": "blue"}})
}

pub fn conditions(obj: &DynamicObject) -> Vec<Condition> {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

pub fn has_condition(obj: &DynamicObject, type_: &str, status: &str) -> bool {
    conditions(obj).iter().any(|c| c.type_ == type_ && c.status == status)
}

pub fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

pub fn spec(obj: &DynamicObject) -> &Value {
    &obj.data["spec"]
}

/// Widgets in `default` by name, `None` if the list fails.
pub async fn widgets_on(client: &KubeClusterClient) -> Option<BTreeMap<String, DynamicObject>> {
    let list = client
        .list(&widgets(), Some("default"), &Default::default())
        .await
        .ok()?;
    Some(
        list.items
            .into_iter()
            .map(|w| (w.metadata.name.clone().unwrap_or_default(), w))
            .collect(),
    )
}

/// A started story: its clusters, the provider admin, the consumers and a folder for kubeconfigs.
pub struct World {
    // Why this order: fields drop in order, so the konnectors' clients go before the servers.
    pub consumers: Vec<Consumer>,
    pub provider: KubeClusterClient,
    pub lines: Lines,
    pub _dir: tempfile::TempDir,
    pub _env: TestEnv,
    pub started: std::time::Instant,
    pub name: &'static str,
    /// Each consumer's provider kubeconfig, for bundles a story applies itself.
    pub provider_kubeconfigs: Vec<String>,
}

impl World {
    /// Starts `1 + policies.len()` clusters (the provider first), or `None` when the binaries or helm are
    /// missing and not required; one consumer per conflict policy.
    pub async fn start(name: &'static str, policies: &[&str]) -> Option<Self> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let env = TestEnv::start_or_skip(1 + policies.len()).await.unwrap()?;
        eprintln!(
            "{name}: {} clusters ready in {:.1?}",
            1 + policies.len(),
            env.startup_time()
        );
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        let kubeconfigs = prepare_provider(env.cluster(0), policies.len(), &lines).await;
        let mut consumers = Vec::new();
        for (i, (policy, kubeconfig)) in policies.iter().zip(&kubeconfigs).enumerate() {
            consumers.push(Consumer::install(env.cluster(i + 1), &chart, kubeconfig, policy, dir.path(), &lines).await);
        }
        let provider = client_as(env.cluster(0), User::Admin).await;
        Some(Self {
            consumers,
            provider,
            lines,
            _dir: dir,
            _env: env,
            started,
            name,
            provider_kubeconfigs: kubeconfigs,
        })
    }

    /// Like `start` with `consumers` consumers, but no bundle applied: the story applies its own. The provider
    /// ServiceAccounts get `provider_rbac()` only when `cluster_rbac`.
    pub async fn start_bare(name: &'static str, consumers: usize, cluster_rbac: bool) -> Option<Self> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let env = TestEnv::start_or_skip(1 + consumers).await.unwrap()?;
        eprintln!("{name}: {} clusters ready in {:.1?}", 1 + consumers, env.startup_time());
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        let kubeconfigs = prepare_provider_with(env.cluster(0), consumers, cluster_rbac, &lines).await;
        let mut installed = Vec::new();
        for i in 0..consumers {
            installed.push(Consumer::install_chart(env.cluster(i + 1), &chart, dir.path(), &lines).await);
        }
        let provider = client_as(env.cluster(0), User::Admin).await;
        Some(Self {
            consumers: installed,
            provider,
            lines,
            _dir: dir,
            _env: env,
            started,
            name,
            provider_kubeconfigs: kubeconfigs,
        })
    }

    /// The provider's cluster, for clients acting as someone else.
    pub fn provider_cluster(&self) -> &Cluster {
        self._env.cluster(0)
    }

    pub fn consumer(&self) -> &Consumer {
        &self.consumers[0]
    }

    pub async fn copy(&self, name: &str) -> Option<DynamicObject> {
        self.provider.get_opt(&widgets(), Some("default"), name).await.unwrap()
    }

    /// Waits for the provider copy of `name` for which `holds` is true.
    pub async fn copy_where(&self, what: &str, name: &str, holds: impl Fn(&DynamicObject) -> bool) -> DynamicObject {
        eventually(what, &self.lines, async || {
            let copy = self.provider.get_opt(&widgets(), Some("default"), name).await.ok()??;
            holds(&copy).then_some(copy)
        })
        .await
    }

    /// Plays the provider's controller: a status for the copy's current generation.
    pub async fn report_status(&self, name: &str, phase: &str) -> i64 {
        let copy = self.copy(name).await.expect("the copy exists");
        let generation = copy.metadata.generation.unwrap();
        self.provider
            .patch_status(
                &widgets(),
                Some("default"),
                name,
                &Patch::Merge(json!({"status": {"phase": phase, "observedGeneration": generation}})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        generation
    }
}

impl Drop for World {
    fn drop(&mut self) {
        eprintln!("{}: finished in {:.1?}", self.name, self.started.elapsed());
    }
}

pub use kbind_testenv::FaultProxy;

/// The apiserver address of `cluster`, for a [`FaultProxy`] to forward to.
pub fn apiserver_addr(cluster: &Cluster) -> SocketAddr {
    let server = cluster.server();
    server.trim_start_matches("https://").parse().unwrap()
}

impl World {
    /// Like [`World::start`], but the provider kubeconfig in every bundle names a [`FaultProxy`] in front of the
    /// provider; the provider admin's own client goes straight to the cluster.
    pub async fn start_behind_proxy(name: &'static str, policies: &[&str]) -> Option<(Self, FaultProxy)> {
        Self::start_behind_proxy_with(name, policies, kbind_testenv::ClusterOptions::default()).await
    }

    /// Like [`World::start_behind_proxy`], the provider's apiserver run as `provider` says (e.g. HTTP/1.1 only).
    pub async fn start_behind_proxy_with(
        name: &'static str,
        policies: &[&str],
        provider: kbind_testenv::ClusterOptions,
    ) -> Option<(Self, FaultProxy)> {
        let started = std::time::Instant::now();
        let helm = helm()?;
        let mut options = vec![provider];
        options.resize(1 + policies.len(), kbind_testenv::ClusterOptions::default());
        let env = TestEnv::start_or_skip_with(&options).await.unwrap()?;
        eprintln!(
            "{name}: {} clusters ready in {:.1?}",
            1 + policies.len(),
            env.startup_time()
        );
        let proxy = FaultProxy::start(apiserver_addr(env.cluster(0))).await.unwrap();
        let chart = render_chart(&helm);
        let dir = tempfile::tempdir().unwrap();
        let lines = Lines::default();
        let kubeconfigs = prepare_provider_at(env.cluster(0), &proxy.server(), policies.len(), &lines).await;
        let mut consumers = Vec::new();
        for (i, (policy, kubeconfig)) in policies.iter().zip(&kubeconfigs).enumerate() {
            consumers.push(Consumer::install(env.cluster(i + 1), &chart, kubeconfig, policy, dir.path(), &lines).await);
        }
        let provider = client_as(env.cluster(0), User::Admin).await;
        let world = Self {
            consumers,
            provider,
            provider_kubeconfigs: kubeconfigs,
            lines,
            _dir: dir,
            _env: env,
            started,
            name,
        };
        Some((world, proxy))
    }
}
