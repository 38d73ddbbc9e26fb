//! `kbind-demo --konnector-only`: the konnector alone, without the service layer. A provider and
//! a consumer fakeapi are served over HTTPS in this process, the sample API is exported, the
//! one-apply bundle is applied, the konnector engine runs against them through the same clients a
//! real deployment uses, and a sample object goes up and its status comes back. Then it prints
//! what to try with kubectl, including cutting the provider off through fakeapi's fault API.

use std::path::Path;
use std::sync::Arc;

use anyhow::{Context as _, anyhow};
use fakeapi::FakeCluster;
use fakeapi::sample::{provider_rbac, widgets, widgets_crd};
use fakeapi::serve::{ClusterServeOptions, RunningServer, Token, UserSpec, serve_cluster};
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use kbind_engine::context::{Context, EngineConfig};
use kbind_engine::engine::Engine;
use kbind_engine::remote::KubeConnector;
use serde_json::{Value, json};

use crate::support::{kube_client, provider_controller, wait_for, write_file};

fn crd_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building a demo object")
}

fn namespace(name: &str) -> Value {
    json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
}

fn step(text: &str) {
    println!("  ✓ {text}");
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

/// Runs the konnector-only demo with its files in `dir`: the scripted steps, then (unless
/// `once`) until Ctrl-C.
pub async fn run(dir: &Path, once: bool) -> anyhow::Result<()> {
    println!(
        "kbind-demo --konnector-only: a provider and a consumer cluster (fakeapi over HTTPS) and the konnector in this process"
    );

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

    let mut result = scripted(&consumer, &provider).await;
    if result.is_ok() {
        print_next_steps(dir, &clusters, &provider_admin);
        if !once {
            result = until_interrupted().await;
        }
    }
    let _ = stop_tx.send(());
    let _ = konnector.await;
    controller.abort();
    clusters.provider.shutdown().await;
    clusters.consumer.shutdown().await;
    result
}

async fn until_interrupted() -> anyhow::Result<()> {
    // Why before printing: a Ctrl-C right after "Running until Ctrl-C" must find the handler.
    let interrupted = crate::interrupt().context("cannot wait for Ctrl-C; stop the process another way")?;
    println!("\nRunning until Ctrl-C.");
    interrupted.await;
    Ok(())
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
