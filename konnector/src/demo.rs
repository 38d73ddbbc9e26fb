//! `konnector demo`: the main job on an embedded default. A provider and a consumer fakeapi are
//! served over HTTPS in this process, a sample API is exported, the one-apply bundle is applied,
//! the konnector engine runs against them through the same clients a real deployment uses, and
//! a sample object goes up and its status comes back. Then it prints what to try with kubectl.

use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context as _, anyhow, bail};
use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, RunningServer, Token, UserSpec, serve_cluster};
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, KubeClusterClient, Patch, PatchParams,
};
use kbind_engine::context::{Context, EngineConfig};
use kbind_engine::engine::Engine;
use kbind_engine::remote::KubeConnector;
use serde_json::{Value, json};

/// How long each scripted step may take before the demo gives up.
const STEP_DEADLINE: Duration = Duration::from_secs(60);
/// How often a step's condition is polled.
const POLL: Duration = Duration::from_millis(200);

/// What `konnector demo` is asked to do.
#[derive(Debug, Clone)]
pub struct DemoOptions {
    /// Where the kubeconfigs go (`None`: a fresh temporary folder that is kept).
    pub dir: Option<PathBuf>,
    /// Run the scripted part, then exit (0 only if every step was observed).
    pub once: bool,
}

/// The sample API the provider exports.
pub fn widgets() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

fn crd_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building a demo object")
}

/// The provider's sample CRD, labelled exported.
pub fn widgets_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org", "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Phase", "type": "string", "jsonPath": ".status.phase"},
                ],
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "observedGeneration": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

/// What the provider grants the konnector: the exported API, CRD reads for discovery, its
/// heartbeat Lease and namespaces (least privilege, as a provider's platform team would).
pub fn provider_rbac() -> Vec<(ApiResource, Value)> {
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": "kbind-konnector"},
        "rules": [
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"], "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
        ],
    });
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "kbind-konnector"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "kbind-konnector"},
        "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "kbind-konnector"}],
    });
    vec![
        (ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()), role),
        (
            ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&()),
            binding,
        ),
    ]
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

/// Polls `check` until it yields a value, or fails naming `what`.
pub async fn wait_for<T, F, Fut>(what: &str, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + STEP_DEADLINE;
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if tokio::time::Instant::now() >= deadline {
            bail!("not observed within {}s: {what}", STEP_DEADLINE.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

fn step(text: &str) {
    println!("  ✓ {text}");
}

/// Writes `text` to `path`, readable by its owner only (kubeconfigs, tokens).
pub fn write_file(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?;
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600))
            .with_context(|| format!("restricting {}", path.display()))?;
    }
    Ok(())
}

/// A cluster client from kubeconfig text.
pub async fn kube_client(kubeconfig: &str) -> anyhow::Result<Arc<dyn ClusterClient>> {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(kubeconfig).context("reading a demo kubeconfig")?;
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .context("loading a demo kubeconfig")?;
    Ok(Arc::new(
        KubeClusterClient::from_config(config).map_err(|e| anyhow!("building a client: {e}"))?,
    ))
}

/// Plays the provider's own controller: every widget gets `phase: Ready` for its generation.
pub async fn provider_controller(provider: Arc<dyn ClusterClient>) {
    loop {
        if let Ok(list) = provider.list(&widgets(), None, &Default::default()).await {
            for w in list.items {
                let generation = w.metadata.generation.unwrap_or(0);
                let observed = w.data.pointer("/status/observedGeneration").and_then(Value::as_i64);
                if observed == Some(generation) {
                    continue;
                }
                let status = json!({"status": {"phase": "Ready", "observedGeneration": generation}});
                let _ = provider
                    .patch_status(
                        &widgets(),
                        w.metadata.namespace.as_deref(),
                        &w.metadata.name.clone().unwrap_or_default(),
                        &Patch::Merge(status),
                        &PatchParams::default(),
                    )
                    .await;
            }
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

/// The two clusters, served over HTTPS in this process.
struct Clusters {
    provider: RunningServer,
    consumer: RunningServer,
    konnector_token: String,
}

async fn start_clusters() -> anyhow::Result<Clusters> {
    let konnector_token = Token::random().map_err(|_| anyhow!("no randomness for a token"))?;
    let konnector_token_text = konnector_token.expose().to_string();
    let provider = serve_cluster(
        FakeCluster::builder("provider").build(),
        ClusterServeOptions::default().user(UserSpec {
            name: "kbind-konnector".into(),
            token: konnector_token,
            groups: Vec::new(),
        }),
    )
    .await
    .context("serving the provider")?;
    let consumer = serve_cluster(FakeCluster::builder("consumer").build(), ClusterServeOptions::default())
        .await
        .context("serving the consumer")?;
    Ok(Clusters {
        provider,
        consumer,
        konnector_token: konnector_token_text,
    })
}

/// Runs the demo.
pub async fn run(options: DemoOptions) -> anyhow::Result<()> {
    let dir = match options.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
            dir
        }
        None => std::env::temp_dir().join(format!("kbind-demo-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    println!("kbind demo: a provider and a consumer cluster (fakeapi over HTTPS) in this process");

    let clusters = start_clusters().await?;
    let provider_admin = clusters
        .provider
        .admin_kubeconfig()
        .context("the provider's admin kubeconfig")?;
    let consumer_admin = clusters
        .consumer
        .admin_kubeconfig()
        .context("the consumer's admin kubeconfig")?;
    let provider_kc = dir.join("provider.kubeconfig");
    let consumer_kc = dir.join("consumer.kubeconfig");
    write_file(&provider_kc, &provider_admin)?;
    write_file(&consumer_kc, &consumer_admin)?;
    if let Some(ca) = clusters.provider.ca_pem() {
        write_file(&dir.join("provider-ca.pem"), ca)?;
    }
    step(&format!(
        "provider at {}, consumer at {}",
        clusters.provider.url(),
        clusters.consumer.url()
    ));
    step(&format!("kubeconfigs in {}", dir.display()));

    let provider = kube_client(&provider_admin).await?;
    let consumer = kube_client(&consumer_admin).await?;

    // The provider's platform team: export the API and grant the konnector what it needs.
    provider
        .create(&crd_resource(), None, &object(widgets_crd())?, &Default::default())
        .await?;
    for (res, obj) in provider_rbac() {
        provider.create(&res, None, &object(obj)?, &Default::default()).await?;
    }
    step("provider: CRD widgets.example.org installed, labelled core.kbind.io/exported=true, konnector RBAC granted");

    // The consumer's admin: kbind's CRDs and namespace (what the Helm chart installs).
    for crd in kbind_api::crds() {
        consumer.create_typed(&crd).await?;
    }
    consumer
        .create(
            &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
            None,
            &object(namespace("kbind"))?,
            &Default::default(),
        )
        .await?;
    wait_for("kbind's CRDs are served", || async {
        consumer
            .list(
                &ApiResource::erase::<kbind_api::Connection>(&()),
                None,
                &Default::default(),
            )
            .await
            .ok()
            .map(|_| ())
    })
    .await?;
    step("consumer: kbind CRDs installed");

    // The one apply.
    let provider_for_konnector = clusters
        .provider
        .kubeconfig(&clusters.konnector_token, "kbind-konnector");
    let bundle = [
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider", "namespace": "kbind"},
               "stringData": {"kubeconfig": provider_for_konnector}}),
        json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": "provider"},
               "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "provider", "key": "kubeconfig"}}}),
        json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": "widgets"},
               "spec": {"connectionRef": {"name": "provider"}, "apis": [{"name": "widgets.example.org"}]}}),
    ];
    let resources = [
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        ApiResource::erase::<kbind_api::Connection>(&()),
        ApiResource::erase::<kbind_api::ClusterBinding>(&()),
    ];
    for (res, obj) in resources.iter().zip(bundle) {
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        consumer
            .create(res, ns.as_deref(), &object(obj)?, &Default::default())
            .await?;
    }
    step("consumer: bundle applied (Secret, Connection, ClusterBinding)");

    // The konnector, through the same clients a deployment uses.
    let ctx = Context {
        consumer: consumer.clone(),
        connector: Arc::new(KubeConnector::default()),
        clock: Arc::new(kbind_cluster::SystemClock),
        randomness: kbind_cluster::backoff::from_entropy(),
        config: EngineConfig::default(),
    };
    let engine = Engine::builder(ctx).build();
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let konnector = tokio::spawn(async move {
        engine
            .run_until(async {
                let _ = stop_rx.await;
            })
            .await;
    });
    let controller = tokio::spawn(provider_controller(provider.clone()));

    let result = scripted(&consumer, &provider).await;
    match &result {
        Ok(()) => print_next_steps(&dir, &clusters, &provider_admin),
        Err(e) => eprintln!("  ✗ {e:#}"),
    }
    if !options.once && result.is_ok() {
        println!("\nRunning until Ctrl-C.");
        let _ = tokio::signal::ctrl_c().await;
    }
    let _ = stop_tx.send(());
    let _ = konnector.await;
    controller.abort();
    clusters.provider.shutdown().await;
    clusters.consumer.shutdown().await;
    result
}

async fn ready(client: &dyn ClusterClient, res: &ApiResource, name: &str) -> Option<()> {
    let obj = client.get_opt(res, None, name).await.ok()??;
    let conds: Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> =
        serde_json::from_value(obj.data.pointer("/status/conditions")?.clone()).ok()?;
    conditions::is_true(&conds, condition::READY).then_some(())
}

/// The observed steps: Ready, CRD pulled, an object up, its status down.
async fn scripted(consumer: &Arc<dyn ClusterClient>, provider: &Arc<dyn ClusterClient>) -> anyhow::Result<()> {
    let connections = ApiResource::erase::<kbind_api::Connection>(&());
    let bindings = ApiResource::erase::<kbind_api::ClusterBinding>(&());
    wait_for("Connection provider is Ready", || {
        ready(consumer.as_ref(), &connections, "provider")
    })
    .await?;
    step("Connection provider is Ready (identity pinned, API discovered, heartbeat Lease renewed)");
    wait_for("ClusterBinding widgets is Ready", || {
        ready(consumer.as_ref(), &bindings, "widgets")
    })
    .await?;
    step("ClusterBinding widgets is Ready; CRD widgets.example.org pulled into the consumer");

    let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
                        "metadata": {"name": "hello", "namespace": "default"}, "spec": {"size": 3, "color": "blue"}});
    consumer
        .create(&widgets(), Some("default"), &object(widget)?, &Default::default())
        .await?;
    step("consumer: created widget default/hello");
    wait_for("widget default/hello on the provider", || async {
        provider
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()?
            .map(|_| ())
    })
    .await?;
    step("provider: widget default/hello arrived (spec up, with kbind's ownership markers)");
    wait_for("the provider's status on the consumer", || async {
        let obj = consumer.get_opt(&widgets(), Some("default"), "hello").await.ok()??;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await?;
    step("consumer: widget default/hello has status phase=Ready (status down)");
    Ok(())
}

fn print_next_steps(dir: &Path, clusters: &Clusters, provider_admin: &str) {
    let c = dir.join("consumer.kubeconfig");
    let p = dir.join("provider.kubeconfig");
    let token = provider_admin
        .lines()
        .find_map(|l| l.trim().strip_prefix("token: "))
        .map(|_| "$(kubectl --kubeconfig PROVIDER config view --raw -o jsonpath='{.users[0].user.token}')")
        .unwrap_or_default()
        .replace("PROVIDER", &p.display().to_string());
    let url = clusters.provider.url();
    println!(
        "\nEvery step was observed. Try, in another terminal:\n\
         \n  export KUBECONFIG={c}\
         \n  kubectl get connections,clusterbindings\
         \n  kubectl get widgets -A\
         \n  kubectl create -f - <<EOF\
         \n  {{\"apiVersion\": \"example.org/v1\", \"kind\": \"Widget\", \"metadata\": {{\"name\": \"second\", \"namespace\": \"default\"}}, \"spec\": {{\"size\": 1}}}}\
         \n  EOF\
         \n  kubectl edit widget hello\
         \n  kubectl --kubeconfig {p} get widgets -A          # the provider's copies\
         \n  kubectl delete widget second                       # deleted on the provider first\
         \n\nCut the connection and watch the stale-status annotation appear, then restore it:\
         \n  curl -s --cacert {ca} -X POST -H \"Authorization: Bearer {token}\" {url}/fakeapi/v1/partition\
         \n  kubectl get widget hello -o jsonpath='{{.metadata.annotations}}'\
         \n  curl -s --cacert {ca} -X POST -H \"Authorization: Bearer {token}\" {url}/fakeapi/v1/heal",
        ca = dir.join("provider-ca.pem").display(),
        c = c.display(),
        p = p.display(),
    );
}
