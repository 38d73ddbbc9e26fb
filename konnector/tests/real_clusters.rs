//! The `konnector` binary on real kube-apiservers (issue #8), installed the way a user would: the chart's RBAC on
//! the consumer, a ServiceAccount token minted with TokenRequest as its only credential, and a provider credential
//! with `provider_rbac()`-style least privilege in the one-apply bundle. Driven only through the Kubernetes API.
//!
//! The clusters come from `kbind-testenv`; without the Go-built binaries each test prints one line and passes,
//! unless `KBIND_REQUIRE_REAL_K8S=1`. helm renders the chart; without it the same, unless `KBIND_REQUIRE_HELM=1`.
//! The tests take turns (one lock): each starts two or three apiservers, and the machine running them is small.
//!
//! Stories: the POC flow; ownerReferences and tool markers against the real garbage collector; conflicts between
//! two consumers; a kill -9 restart; nothing of kbind on the provider; `kubectl delete -f` of the bundle.
//!
//! What real kube-apiservers did differently from fakeapi, as far as these stories can tell:
//! - The first list of a just-created CRD's resource answered 429 TooManyRequests (its storage still
//!   initialising) where fakeapi answers 404 until the CRD is Established and then serves it. The engine's
//!   `related::namespaces_in_use` treats only 404 as "not served yet", so the first binding pass logs "related
//!   resources not converged" once and retries; nothing else notices. Left as it is.
//! - Timing: the Connection reconciler's `Ready=False, DrainingBindings` on a deleted Connection reached the
//!   provider loop before the binding drained, which disengaged the provider and left the binding in
//!   `DeletionBlocked` for good; the fakeapi scenarios, which delete the bundle in every order, never hit it. Fixed in the engine (a draining
//!   Connection stays engaged; regression test in engine/src/provider/tests.rs).
//! - Least privilege, which fakeapi e2e (konnector as admin, provider user with every right) never exercised: with
//!   the chart's RBAC a ClusterBinding without related resources failed every pass listing consumer Secrets, and
//!   with `provider_rbac()` an unbind failed listing provider Secrets and never finished. Both fixed in the engine
//!   (regression tests in engine/tests/related.rs and scenarios' namespace_scoped_credentials.rs).
//! - The same as fakeapi, checked here because a difference would break kbind: a restricted caller gets 403, not
//!   404, for the unserved `core.kcp.io` LogicalCluster probe (RBAC before routing); the heartbeat Lease's POST is
//!   404 until the konnector creates the provider namespace `kbind`; status written through `/status` leaves
//!   `metadata.generation` alone and a spec change bumps it, so `observedGeneration` is only told apart from the
//!   consumer generation after provider drift (reverted by the konnector, generation +2); kbind's per-object
//!   `Synced` condition is pruned from a Widget, whose schema has no `status.conditions`; TokenRequest-minted
//!   ServiceAccount JWTs work as inline kubeconfig tokens on both sides; the garbage collector removes a provider
//!   object naming the consumer's owner, and on the consumer deletes an owned Widget in the background, which the
//!   syncer finalizer holds until the copy is gone.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::ByteString;
use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, KubeClusterClient, Patch, PatchParams,
    PostParams,
};
use kbind_testenv::{Cluster, TestEnv, User};
use konnector::demo::{provider_rbac, widgets, widgets_crd};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Generous: real servers on a machine that may be compiling at the same time.
const DEADLINE: Duration = Duration::from_secs(180);
const POLL: Duration = Duration::from_millis(200);
/// Keep in step with hack/helm/build.sh.
const HELM_VERSION: &str = "v3.22.0";
/// The chart's release name and namespace; the release's full name names its ServiceAccount.
const RELEASE: &str = "konnector";
const NAMESPACE: &str = "kbind";
/// Where the provider admin keeps the consumers' ServiceAccounts.
const PROVIDER_ACCOUNTS: &str = "kbind-consumers";

/// One story at a time: each starts its own apiservers.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Every stderr line of the konnectors of one test, kept for failure messages.
type Lines = Arc<Mutex<Vec<String>>>;

fn dump(lines: &Lines) -> String {
    let lines = lines.lock().unwrap();
    let skip = lines.len().saturating_sub(200);
    lines[skip..].join("\n")
}

/// Polls `check` until it returns `Some`, or fails with `what` and the konnectors' log.
async fn eventually<T>(what: &str, lines: &Lines, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}; konnector log:\n{}",
            dump(lines)
        );
        tokio::time::sleep(POLL).await;
    }
}

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap()
}

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

/// The helm binary, or `None` (after one line on stderr) when it is absent and not required; as in chart.rs.
fn helm() -> Option<PathBuf> {
    let path = std::env::var_os("KBIND_HELM").map(PathBuf::from).unwrap_or_else(|| {
        let cache = std::env::var_os("KBIND_TOOLS_CACHE")
            .map(PathBuf::from)
            .unwrap_or_else(|| {
                PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/kbind-tools")
            });
        cache.join(format!("helm-{HELM_VERSION}/helm"))
    });
    if path.is_file() {
        return Some(path);
    }
    let required = std::env::var("KBIND_REQUIRE_HELM").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KBIND_REQUIRE_HELM=1 but there is no helm at {}: run hack/helm/build.sh",
        path.display()
    );
    eprintln!("skipped: no helm at {} (hack/helm/build.sh builds it)", path.display());
    None
}

/// `helm template` of the chart, narrowed to the sample API's group as the README advises, CRDs included.
fn render_chart(helm: &Path) -> Vec<Value> {
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

fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap()
}

/// The resource of each kind the chart's install needs.
fn resource_of(kind: &str) -> ApiResource {
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

async fn create(client: &KubeClusterClient, value: Value) -> DynamicObject {
    let kind = kind_of(&value).to_string();
    let namespace = value["metadata"]["namespace"].as_str().map(str::to_string);
    let res = match kind.as_str() {
        "Namespace" => erase::<k8s_openapi::api::core::v1::Namespace>(),
        "Secret" => erase::<k8s_openapi::api::core::v1::Secret>(),
        "ConfigMap" => erase::<k8s_openapi::api::core::v1::ConfigMap>(),
        "Connection" => erase::<kbind_api::Connection>(),
        "ClusterBinding" => erase::<kbind_api::ClusterBinding>(),
        "Widget" => widgets(),
        other => resource_of(other),
    };
    let name = value["metadata"]["name"].as_str().unwrap_or_default().to_string();
    client
        .create(&res, namespace.as_deref(), &object(value), &PostParams::default())
        .await
        .unwrap_or_else(|e| panic!("creating {kind} {name}: {e}"))
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// A client acting as `user` on `cluster`, through the same seam the konnector uses.
async fn client_as(cluster: &Cluster, user: User) -> KubeClusterClient {
    KubeClusterClient::from_config(cluster.config(user).await.unwrap()).unwrap()
}

/// Waits until `res` can be listed on `client`: a new CRD is served once it is Established.
async fn served(client: &KubeClusterClient, res: &ApiResource, lines: &Lines) {
    eventually(&format!("{} served", res.plural), lines, async || {
        client.list(res, None, &Default::default()).await.ok().map(|_| ())
    })
    .await;
}

/// A TokenRequest-minted token for ServiceAccount `namespace/name`, asked for by the cluster's admin.
async fn service_account_token(cluster: &Cluster, namespace: &str, name: &str) -> String {
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

/// A kubeconfig with inline credentials only (DESIGN.md §5): the cluster's server and CA, and `token`.
fn inline_kubeconfig(cluster: &Cluster, user: &str, token: &str) -> String {
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
        "clusters": [{"name": name, "cluster": {"server": cluster.server(), "certificate-authority-data": ca}}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": user, "context": {"cluster": name, "user": user}}],
        "current-context": user,
    });
    serde_json::to_string_pretty(&kubeconfig).unwrap()
}

/// The provider admin's part: export the sample API and give each consumer its own ServiceAccount, bound to the
/// demo's least-privilege ClusterRole. Returns one inline kubeconfig per consumer.
async fn prepare_provider(cluster: &Cluster, consumers: usize, lines: &Lines) -> Vec<String> {
    let admin = client_as(cluster, User::Admin).await;
    create(&admin, widgets_crd()).await;
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
    for (res, mut rbac) in provider_rbac() {
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
        kubeconfigs.push(inline_kubeconfig(cluster, name, &token));
    }
    kubeconfigs
}

/// One consumer cluster with kbind installed from the chart and the bundle applied.
struct Consumer {
    admin: KubeClusterClient,
    /// The konnector's own kubeconfig: the chart's ServiceAccount, never admin.
    kubeconfig: PathBuf,
    uid: String,
}

impl Consumer {
    /// What `helm install` and the consumer admin do: CRDs, namespace, the chart's RBAC, then the one apply.
    async fn install(
        cluster: &Cluster,
        chart: &[Value],
        provider_kubeconfig: &str,
        conflict_policy: &str,
        dir: &Path,
        lines: &Lines,
    ) -> Self {
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

        let bundle = [
            json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider", "namespace": NAMESPACE},
                   "stringData": {"kubeconfig": provider_kubeconfig}}),
            json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": "provider"},
                   "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": "provider", "key": "kubeconfig"}}}),
            json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": "widgets"},
                   "spec": {"connectionRef": {"name": "provider"}, "apis": [{"name": "widgets.example.org"}],
                            "conflictPolicy": conflict_policy}}),
        ];
        for item in bundle {
            create(&admin, item).await;
        }
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
    async fn wait_ready(&self, lines: &Lines) {
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

    async fn create_widget(&self, name: &str, size: i64) -> DynamicObject {
        create(&self.admin, widget(name, size)).await
    }

    async fn resize_widget(&self, name: &str, size: i64) {
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

    async fn delete_widget(&self, name: &str) {
        self.admin
            .delete(&widgets(), Some("default"), name, &DeleteParams::default())
            .await
            .unwrap();
    }

    async fn widget(&self, name: &str) -> Option<DynamicObject> {
        self.admin.get_opt(&widgets(), Some("default"), name).await.unwrap()
    }

    async fn konnector(&self, identity: &str, lines: &Lines) -> Konnector {
        Konnector::start(&self.kubeconfig, identity, lines.clone()).await
    }
}

fn widget(name: &str, size: i64) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Widget",
           "metadata": {"name": name, "namespace": "default"}, "spec": {"size": size, "color": "blue"}})
}

fn conditions(obj: &DynamicObject) -> Vec<Condition> {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default()
}

fn has_condition(obj: &DynamicObject, type_: &str, status: &str) -> bool {
    conditions(obj).iter().any(|c| c.type_ == type_ && c.status == status)
}

fn annotation<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

fn spec(obj: &DynamicObject) -> &Value {
    &obj.data["spec"]
}

/// Widgets in `default` by name, `None` if the list fails.
async fn widgets_on(client: &KubeClusterClient) -> Option<BTreeMap<String, DynamicObject>> {
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
struct World {
    // Why this order: fields drop in order, so the konnectors' clients go before the servers.
    consumers: Vec<Consumer>,
    provider: KubeClusterClient,
    lines: Lines,
    _dir: tempfile::TempDir,
    _env: TestEnv,
    started: std::time::Instant,
    name: &'static str,
}

impl World {
    /// Starts `1 + policies.len()` clusters (the provider first), or `None` when the binaries or helm are
    /// missing and not required; one consumer per conflict policy.
    async fn start(name: &'static str, policies: &[&str]) -> Option<Self> {
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
        })
    }

    fn consumer(&self) -> &Consumer {
        &self.consumers[0]
    }

    async fn copy(&self, name: &str) -> Option<DynamicObject> {
        self.provider.get_opt(&widgets(), Some("default"), name).await.unwrap()
    }

    /// Waits for the provider copy of `name` for which `holds` is true.
    async fn copy_where(&self, what: &str, name: &str, holds: impl Fn(&DynamicObject) -> bool) -> DynamicObject {
        eventually(what, &self.lines, async || {
            let copy = self.provider.get_opt(&widgets(), Some("default"), name).await.ok()??;
            holds(&copy).then_some(copy)
        })
        .await
    }

    /// Plays the provider's controller: a status for the copy's current generation.
    async fn report_status(&self, name: &str, phase: &str) -> i64 {
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

/// A `konnector run` child process.
struct Konnector {
    child: Child,
}

impl Konnector {
    async fn start(kubeconfig: &Path, identity: &str, lines: Lines) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_konnector"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--namespace=kbind",
                "--leader-elect=true",
                "--metrics-addr=127.0.0.1:0",
                "--health-addr=127.0.0.1:0",
                "--log-format=json",
                "--log-level=info",
                &format!("--identity={identity}"),
            ])
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("konnector starts");
        let listening = follow_stderr(&mut child, identity, lines.clone());
        tokio::time::timeout(DEADLINE, listening)
            .await
            .unwrap_or_else(|_| panic!("konnector {identity} never logged its addresses:\n{}", dump(&lines)))
            .unwrap_or_else(|_| panic!("konnector {identity} exited before listening:\n{}", dump(&lines)));
        Self { child }
    }

    /// SIGKILL: no shutdown path runs, the leader Lease stays held.
    async fn kill_hard(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }
}

/// Collects stderr lines (tagged with the konnector's identity); signals once both servers listen.
fn follow_stderr(child: &mut Child, identity: &str, lines: Lines) -> tokio::sync::oneshot::Receiver<()> {
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = tokio::sync::oneshot::channel();
    let identity = identity.to_string();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut servers = Vec::<SocketAddr>::new();
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if let Ok(json) = serde_json::from_str::<Value>(&line)
                && json["message"] == "listening"
                && let Some(addr) = json["addr"].as_str()
            {
                servers.push(addr.parse().unwrap());
                if servers.len() == 2
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(());
                }
            }
            lines.lock().unwrap().push(format!("[{identity}] {line}"));
        }
    });
    rx
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_poc_flow_runs_on_real_clusters_under_least_privilege() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("the_poc_flow", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("poc", &lines).await;
    consumer.wait_ready(&lines).await;

    let pulled: CustomResourceDefinition = kbind_cluster::from_dynamic(
        consumer
            .admin
            .get(&erase::<CustomResourceDefinition>(), None, "widgets.example.org")
            .await
            .unwrap(),
    )
    .unwrap();
    let labels = pulled.metadata.labels.clone().unwrap_or_default();
    assert_eq!(labels.get("core.kbind.io/managed").map(String::as_str), Some("true"));
    let annotations = pulled.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.get("core.kbind.io/connection").map(String::as_str),
        Some("provider")
    );
    assert!(
        pulled.spec.versions[0]
            .subresources
            .as_ref()
            .is_some_and(|s| s.status.is_some()),
        "the pulled CRD keeps the status subresource"
    );

    let created = consumer.create_widget("hello", 3).await;
    let copy = world.copy_where("the copy on the provider", "hello", |_| true).await;
    assert_eq!(spec(&copy), &json!({"size": 3, "color": "blue"}));
    assert_eq!(
        annotation(&copy, "core.kbind.io/consumer-object-uid"),
        created.metadata.uid.as_deref()
    );
    assert_eq!(
        annotation(&copy, "core.kbind.io/consumer-cluster-uid"),
        Some(consumer.uid.as_str())
    );
    let managers: Vec<(&str, &str)> = copy
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|m| (m.manager.as_deref().unwrap_or(""), m.operation.as_deref().unwrap_or("")))
        .collect();
    assert_eq!(
        managers,
        [("kbind-konnector", "Apply")],
        "spec went up by server-side apply"
    );

    // Drift on the provider is reverted: two provider generations for none on the consumer, so the status
    // translation below is visible.
    world
        .provider
        .patch(
            &widgets(),
            Some("default"),
            "hello",
            &Patch::Merge(json!({"spec": {"size": 99}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let reverted = world
        .copy_where("the drift reverted", "hello", |c| {
            c.data.pointer("/spec/size") == Some(&json!(3)) && c.metadata.generation >= Some(3)
        })
        .await;
    assert_eq!(annotation(&reverted, "core.kbind.io/consumer-generation"), Some("1"));

    let provider_generation = world.report_status("hello", "Ready").await;
    assert!(provider_generation >= 3);
    eventually("status Ready for generation 1 on the consumer", &lines, async || {
        let obj = consumer.widget("hello").await?;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(obj)
    })
    .await;
    let obj = consumer.widget("hello").await.unwrap();
    assert_eq!(obj.metadata.generation, Some(1));
    assert_eq!(
        obj.data.pointer("/status/observedGeneration"),
        Some(&json!(1)),
        "observedGeneration {provider_generation} on the provider is the consumer's generation 1"
    );

    consumer.resize_widget("hello", 5).await;
    let updated = world
        .copy_where("the new size on the provider", "hello", |c| {
            c.data.pointer("/spec/size") == Some(&json!(5))
        })
        .await;
    assert_eq!(annotation(&updated, "core.kbind.io/consumer-generation"), Some("2"));
    world.report_status("hello", "Resized").await;
    let resized = eventually("status Resized on the consumer", &lines, async || {
        let obj = consumer.widget("hello").await?;
        (obj.data.pointer("/status/phase") == Some(&json!("Resized"))).then_some(obj)
    })
    .await;
    assert_eq!(resized.data.pointer("/status/observedGeneration"), Some(&json!(2)));

    consumer.delete_widget("hello").await;
    eventually("the copy and the consumer object gone", &lines, async || {
        let copy = world
            .provider
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?;
        let original = consumer
            .admin
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?;
        (copy.is_none() && original.is_none()).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_of_kbind_runs_or_is_defined_on_the_provider() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("core_only", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("core-only", &lines).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("core", 1).await;
    world.copy_where("the copy on the provider", "core", |_| true).await;
    // The heartbeat is the last thing a working konnector writes on the provider.
    let lease = eventually("the heartbeat Lease on the provider", &lines, async || {
        let name = format!("consumer-{}", consumer.uid);
        world
            .provider
            .get_opt(
                &erase::<k8s_openapi::api::coordination::v1::Lease>(),
                Some("kbind"),
                &name,
            )
            .await
            .ok()?
    })
    .await;
    assert_eq!(
        lease.data.pointer("/spec/holderIdentity"),
        Some(&json!(consumer.uid)),
        "the Lease names the consumer"
    );

    let crds = world
        .provider
        .list(&erase::<CustomResourceDefinition>(), None, &Default::default())
        .await
        .unwrap();
    let names: Vec<String> = crds.items.into_iter().filter_map(|c| c.metadata.name).collect();
    assert_eq!(names, ["widgets.example.org"], "the provider's only CRD is its own");
    assert!(!names.iter().any(|n| n.ends_with(".kbind.io")));

    for res in [
        erase::<k8s_openapi::api::core::v1::Pod>(),
        erase::<k8s_openapi::api::apps::v1::Deployment>(),
    ] {
        let list = world.provider.list(&res, None, &Default::default()).await.unwrap();
        let kbind: Vec<String> = list
            .items
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .filter(|n| n.contains("kbind") || n.contains("konnector"))
            .collect();
        assert!(kbind.is_empty(), "{} on the provider: {kbind:?}", res.plural);
    }
    // The konnector's provider identity can create none of that: least privilege is what keeps it core-only.
    for (group, resource) in [
        ("apiextensions.k8s.io", "customresourcedefinitions"),
        ("apps", "deployments"),
        ("", "pods"),
    ] {
        assert!(
            !provider_may(&world, group, resource, "create").await,
            "the consumer's provider credential may create {resource}"
        );
    }
    assert!(provider_may(&world, "example.org", "widgets", "create").await);
}

/// Whether consumer 1's provider ServiceAccount may `verb` `resource` cluster-wide (a SubjectAccessReview).
async fn provider_may(world: &World, group: &str, resource: &str, verb: &str) -> bool {
    let review = json!({
        "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
        "spec": {
            "user": format!("system:serviceaccount:{PROVIDER_ACCOUNTS}:consumer-1"),
            "groups": ["system:serviceaccounts", format!("system:serviceaccounts:{PROVIDER_ACCOUNTS}"), "system:authenticated"],
            "resourceAttributes": {"group": group, "resource": resource, "verb": verb},
        },
    });
    let res = erase::<k8s_openapi::api::authorization::v1::SubjectAccessReview>();
    let answer = world
        .provider
        .create(&res, None, &object(review), &PostParams::default())
        .await
        .unwrap();
    answer.data.pointer("/status/allowed") == Some(&json!(true))
}

/// Metadata a consumer's tooling puts on its objects, none of which may reach the provider (DESIGN.md §4).
const TOOL_LABELS: [(&str, &str); 2] = [
    ("app.kubernetes.io/managed-by", "Helm"),
    ("argocd.argoproj.io/instance", "shop"),
];
const TOOL_ANNOTATIONS: [(&str, &str); 4] = [
    ("meta.helm.sh/release-name", "shop"),
    ("meta.helm.sh/release-namespace", "default"),
    (
        "argocd.argoproj.io/tracking-id",
        "shop:example.org/Widget:default/owned",
    ),
    ("kubectl.kubernetes.io/last-applied-configuration", "{}"),
];

fn keys(map: Option<&BTreeMap<String, String>>) -> Vec<&str> {
    map.into_iter().flat_map(|m| m.keys()).map(String::as_str).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn owner_references_and_tool_markers_never_reach_the_provider_while_the_garbage_collector_runs() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("metadata", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("metadata", &lines).await;
    consumer.wait_ready(&lines).await;

    let owner = create(
        &consumer.admin,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "owner", "namespace": "default"}}),
    )
    .await;
    let owner_uid = owner.metadata.uid.clone().unwrap();
    let owner_ref = json!({"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid,
                           "blockOwnerDeletion": true});
    let mut labels: BTreeMap<&str, &str> = TOOL_LABELS.into_iter().collect();
    labels.insert("team", "a");
    let mut annotations: BTreeMap<&str, &str> = TOOL_ANNOTATIONS.into_iter().collect();
    annotations.insert("note", "up");
    let mut owned = widget("owned", 1);
    owned["metadata"]["labels"] = json!(labels);
    owned["metadata"]["annotations"] = json!(annotations);
    owned["metadata"]["ownerReferences"] = json!([owner_ref]);
    let original = create(&consumer.admin, owned).await;

    let copy = world.copy_where("the copy on the provider", "owned", |_| true).await;
    let copied_labels = copy.metadata.labels.as_ref();
    assert_eq!(copied_labels.and_then(|l| l.get("team")).map(String::as_str), Some("a"));
    assert_eq!(keys(copied_labels), ["core.kbind.io/managed", "team"]);
    let copied_annotations = copy.metadata.annotations.as_ref();
    assert_eq!(annotation(&copy, "note"), Some("up"));
    for key in keys(copied_annotations) {
        assert!(
            key == "note" || key.starts_with("core.kbind.io/"),
            "annotation {key} reached the provider"
        );
    }
    assert!(
        copy.metadata.owner_references.is_none(),
        "{:?}",
        copy.metadata.owner_references
    );
    assert!(copy.metadata.finalizers.is_none(), "{:?}", copy.metadata.finalizers);

    // The provider's garbage collector at work: an object there naming the consumer's owner is collected.
    // Had the ownerReference been copied, the copy would go the same way.
    let mut probe =
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gc-probe", "namespace": "default"}});
    probe["metadata"]["ownerReferences"] =
        json!([{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner_uid}]);
    create(&world.provider, probe).await;
    let configmaps = erase::<k8s_openapi::api::core::v1::ConfigMap>();
    eventually(
        "the provider's garbage collector to remove the probe",
        &lines,
        async || {
            let probe = world
                .provider
                .get_opt(&configmaps, Some("default"), "gc-probe")
                .await
                .ok()?;
            probe.is_none().then_some(())
        },
    )
    .await;

    // A metadata change goes up filtered too, and the copy is still the one first created.
    consumer
        .admin
        .patch(
            &widgets(),
            Some("default"),
            "owned",
            &Patch::Merge(
                json!({"metadata": {"labels": {"team": "b"}, "annotations": {"helm.sh/resource-policy": "keep"}},
                                 "spec": {"size": 2}}),
            ),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let updated = world
        .copy_where("team=b and size 2 on the provider", "owned", |c| {
            c.data.pointer("/spec/size") == Some(&json!(2))
                && c.metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get("team"))
                    .map(String::as_str)
                    == Some("b")
        })
        .await;
    assert_eq!(
        updated.metadata.uid, copy.metadata.uid,
        "the garbage collector left the copy alone"
    );
    assert_eq!(annotation(&updated, "helm.sh/resource-policy"), None);
    assert!(updated.metadata.owner_references.is_none());
    let on_consumer = consumer.widget("owned").await.unwrap();
    assert_eq!(
        on_consumer.metadata.owner_references.as_ref().map(Vec::len),
        Some(1),
        "the consumer object keeps its owner"
    );

    // Deleting the owner: the consumer's garbage collector deletes the widget, the konnector its copy.
    consumer
        .admin
        .delete(&configmaps, Some("default"), "owner", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the owned widget and its copy gone", &lines, async || {
        let copy = world
            .provider
            .get_opt(&widgets(), Some("default"), "owned")
            .await
            .ok()?;
        let original = consumer
            .admin
            .get_opt(&widgets(), Some("default"), "owned")
            .await
            .ok()?;
        (copy.is_none() && original.is_none()).then_some(())
    })
    .await;
    assert!(original.metadata.uid.is_some());
}

/// The `reason` of the conflict annotation on consumer `c`'s widget `name`, once it has one.
async fn conflict_on(consumer: &Consumer, name: &str, lines: &Lines, reason: &str) -> DynamicObject {
    eventually(&format!("{name} annotated {reason}"), lines, async || {
        let obj = consumer.widget(name).await?;
        (annotation(&obj, "core.kbind.io/conflict") == Some(reason)).then_some(obj)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_writer_wins_and_the_second_consumer_sees_the_conflict_without_touching_it() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("conflicts", &["Fail", "Adopt"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let (first, second) = (&world.consumers[0], &world.consumers[1]);
    let _k1 = first.konnector("first", &lines).await;
    let _k2 = second.konnector("second", &lines).await;
    first.wait_ready(&lines).await;
    second.wait_ready(&lines).await;

    // A provider object kbind never wrote: Fail leaves it alone, Adopt takes it over.
    create(&world.provider, widget("foreign", 7)).await;
    let foreign = world.copy("foreign").await.unwrap();
    first.create_widget("foreign", 1).await;
    conflict_on(first, "foreign", &lines, "ForeignObjectExists").await;
    let untouched = world.copy("foreign").await.unwrap();
    assert_eq!(untouched.metadata.resource_version, foreign.metadata.resource_version);

    // First writer wins.
    let mine = first.create_widget("shared", 1).await;
    let copy = world
        .copy_where("consumer 1's copy", "shared", |c| {
            annotation(c, "core.kbind.io/consumer-cluster-uid") == Some(first.uid.as_str())
        })
        .await;
    second.create_widget("shared", 2).await;
    // No per-object condition: the Widget schema has no status.conditions, so the server prunes it (as fakeapi does).
    conflict_on(second, "shared", &lines, "OwnedByAnother").await;
    let binding = eventually("Conflicts on consumer 2's binding", &lines, async || {
        let b = second
            .admin
            .get_opt(&erase::<kbind_api::ClusterBinding>(), None, "widgets")
            .await
            .ok()??;
        has_condition(&b, "Conflicts", "True").then_some(b)
    })
    .await;
    let count = binding
        .data
        .pointer("/status/boundAPIs/0/conflictCount")
        .and_then(Value::as_i64);
    assert!(count >= Some(1), "conflictCount {count:?}");
    let events = eventually("a Warning Event on consumer 2's widget", &lines, async || {
        let list = second
            .admin
            .list(
                &erase::<k8s_openapi::api::events::v1::Event>(),
                Some("default"),
                &Default::default(),
            )
            .await
            .ok()?;
        let found: Vec<DynamicObject> = list
            .items
            .into_iter()
            .filter(|e| e.data["reason"] == "OwnedByAnother" && e.data["regarding"]["name"] == "shared")
            .collect();
        (!found.is_empty()).then_some(found)
    })
    .await;
    assert_eq!(events[0].data["type"], "Warning");
    assert_eq!(events[0].data["reportingController"], "kbind-konnector");

    // Nothing of the first is touched, and it keeps syncing.
    let now = world.copy("shared").await.unwrap();
    assert_eq!(
        now.metadata.resource_version, copy.metadata.resource_version,
        "the copy was written"
    );
    assert_eq!(spec(&now), &json!({"size": 1, "color": "blue"}));
    assert_eq!(
        annotation(&now, "core.kbind.io/consumer-object-uid"),
        mine.metadata.uid.as_deref()
    );
    first.resize_widget("shared", 10).await;
    world
        .copy_where("consumer 1's resize", "shared", |c| {
            c.data.pointer("/spec/size") == Some(&json!(10))
        })
        .await;

    // Adopt stamps a marker-less object, and then it is consumer 2's.
    second.create_widget("foreign", 2).await;
    let adopted = world
        .copy_where("consumer 2 adopting the foreign object", "foreign", |c| {
            annotation(c, "core.kbind.io/consumer-cluster-uid") == Some(second.uid.as_str())
                && c.data.pointer("/spec/size") == Some(&json!(2))
        })
        .await;
    assert_eq!(adopted.metadata.uid, foreign.metadata.uid, "adopted, not re-created");

    // Consumer 2 deleting its conflicted object leaves consumer 1's copy where it is.
    second.delete_widget("shared").await;
    eventually("consumer 2's conflicted widget gone", &lines, async || {
        second
            .admin
            .get_opt(&widgets(), Some("default"), "shared")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let after = world.copy("shared").await.expect("consumer 1's copy survives");
    assert_eq!(after.metadata.uid, copy.metadata.uid);
    assert_eq!(
        annotation(&after, "core.kbind.io/consumer-cluster-uid"),
        Some(first.uid.as_str())
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_konnector_killed_mid_changes_converges_after_restart_without_losing_or_duplicating() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("restart", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let konnector = consumer.konnector("restarting", &lines).await;
    consumer.wait_ready(&lines).await;

    let names: Vec<String> = (0..16).map(|i| format!("w-{i:02}")).collect();
    for (i, name) in names.iter().enumerate() {
        consumer.create_widget(name, i as i64).await;
    }
    let synced_at_kill = eventually("the first copies on the provider", &lines, async || {
        let copies = widgets_on(&world.provider).await?;
        (!copies.is_empty()).then_some(copies.len())
    })
    .await;
    konnector.kill_hard().await;
    eprintln!(
        "restart: killed with {synced_at_kill} of {} copies on the provider",
        names.len()
    );

    // While it is down: four updated, four deleted (those it had finalized stay terminating).
    for name in &names[..4] {
        consumer.resize_widget(name, 100).await;
    }
    for name in &names[12..] {
        consumer.delete_widget(name).await;
    }
    let _konnector = consumer.konnector("restarting", &lines).await;

    let surviving = &names[..12];
    eventually(
        "the provider to hold exactly the 12 survivors with the latest spec",
        &lines,
        async || {
            let copies = widgets_on(&world.provider).await?;
            let originals = widgets_on(&consumer.admin).await?;
            let converged = copies.keys().eq(surviving.iter())
                && originals.keys().eq(surviving.iter())
                && originals.values().all(|o| o.metadata.deletion_timestamp.is_none())
                && surviving.iter().all(|n| spec(&copies[n]) == spec(&originals[n]));
            converged.then_some(())
        },
    )
    .await;
    let copies = widgets_on(&world.provider).await.unwrap();
    let originals = widgets_on(&consumer.admin).await.unwrap();
    for (i, name) in surviving.iter().enumerate() {
        let want = if i < 4 { 100 } else { i as i64 };
        assert_eq!(originals[name].data.pointer("/spec/size"), Some(&json!(want)), "{name}");
        assert_eq!(
            annotation(&copies[name], "core.kbind.io/consumer-object-uid"),
            originals[name].metadata.uid.as_deref(),
            "{name}: one copy per consumer object"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_the_bundle_converges_under_least_privilege() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("unbind", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("unbind", &lines).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("leaving", 1).await;
    world.copy_where("the copy on the provider", "leaving", |_| true).await;

    // `kubectl delete -f bundle.yaml`: the Secret, the Connection and the ClusterBinding, in file order.
    let secrets = erase::<k8s_openapi::api::core::v1::Secret>();
    let bundle = [
        (secrets.clone(), Some(NAMESPACE), "provider"),
        (erase::<kbind_api::Connection>(), None, "provider"),
        (erase::<kbind_api::ClusterBinding>(), None, "widgets"),
    ];
    for (res, ns, name) in &bundle {
        consumer
            .admin
            .delete(res, *ns, name, &DeleteParams::default())
            .await
            .unwrap();
    }
    eventually(
        "the bundle, the pulled CRD, the widget and its copy gone",
        &lines,
        async || {
            for (res, ns, name) in &bundle {
                if consumer.admin.get_opt(res, *ns, name).await.ok()?.is_some() {
                    return None;
                }
            }
            let crd = consumer
                .admin
                .get_opt(&erase::<CustomResourceDefinition>(), None, "widgets.example.org")
                .await
                .ok()?;
            let copy = world.copy("leaving").await;
            (crd.is_none() && copy.is_none()).then_some(())
        },
    )
    .await;
}
