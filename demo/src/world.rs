//! Everything the demo runs: the two clusters, the provider's offer, kbind on the consumer,
//! kbind-backend on the provider and the konnector engine on the consumer.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use anyhow::{Context as _, anyhow, bail};
use clap::Parser;
use fakeapi::FakeCluster;
use fakeapi::sample::{widgets, widgets_crd};
use fakeapi::serve::{ClusterServeOptions, RunningServer, serve_cluster};
use kbind_api::service::path;
use kbind_backend::modules::{self, GatewayModule, Modules};
use kbind_backend::{auth, gateway, issuer, reaper};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, SystemClock};
use kbind_engine::context::Context;
use kbind_engine::engine::Engine;
use kbind_engine::remote::KubeConnector;
use serde_json::{Value, json};
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::DEFAULT_PORT;
use crate::cli::Binaries;
use crate::support::{kube_client, provider_controller, wait_for, write_file};

/// The provider's name, as the gateway shows it; the bundle's Connection is named after it.
pub const PROVIDER_NAME: &str = "demo-provider";
/// The Export the provider offers (and the CLI binds).
pub const EXPORT: &str = "widgets";
/// The consumer namespace the demo binds into. Not `default`: the provider has its own
/// `default`, which kbind may not claim for a consumer.
pub const TEAM: &str = "team-a";
/// The user the static token signs in as (`token:demo` to the gateway).
const USER: &str = "demo";

/// The running system.
pub struct World {
    /// Where the kubeconfigs, the token file and the CLI's cache live.
    pub dir: PathBuf,
    /// The consumer's admin kubeconfig (what `kbind` and kubectl use).
    pub consumer_kubeconfig: PathBuf,
    /// The provider's admin kubeconfig.
    pub provider_kubeconfig: PathBuf,
    /// The gateway's URL (API and UI).
    pub gateway_url: String,
    /// The static token that signs in to the gateway.
    pub token: String,
    /// An admin client of the provider.
    pub provider: Arc<dyn ClusterClient>,
    /// An admin client of the consumer.
    pub consumer: Arc<dyn ClusterClient>,
    provider_server: RunningServer,
    consumer_server: RunningServer,
    shutdown: CancellationToken,
    tasks: JoinSet<anyhow::Result<()>>,
}

/// Prints a step that was observed.
pub fn step(text: &str) {
    println!("  ✓ {text}");
}

/// A JSON value as a dynamic object.
pub fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building a demo object")
}

/// A typed resource's `ApiResource`.
pub fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

impl World {
    /// Starts everything; each part is printed as it comes up.
    pub async fn start(dir: &Path, port: Option<u16>) -> anyhow::Result<World> {
        // Wall time, as `fakeapi serve` without --seed: kubectl's AGE columns and creation
        // timestamps show today, not the deterministic worlds' fixed instant.
        let cluster = |name| FakeCluster::builder(name).clock(Arc::new(SystemClock)).build();
        let provider_server = serve_cluster(cluster("provider"), ClusterServeOptions::default())
            .await
            .context("serving the provider cluster")?;
        let consumer_server = serve_cluster(cluster("consumer"), ClusterServeOptions::default())
            .await
            .context("serving the consumer cluster")?;
        let provider_admin = provider_server
            .admin_kubeconfig()
            .context("the provider's admin kubeconfig")?;
        let consumer_admin = consumer_server
            .admin_kubeconfig()
            .context("the consumer's admin kubeconfig")?;
        let provider_ca = provider_server
            .ca_pem()
            .context("the provider is served without TLS; the gateway issues https kubeconfigs only")?
            .to_string();
        let provider_kubeconfig = dir.join("provider.kubeconfig");
        let consumer_kubeconfig = dir.join("consumer.kubeconfig");
        write_file(&provider_kubeconfig, &provider_admin)?;
        write_file(&consumer_kubeconfig, &consumer_admin)?;
        write_file(&dir.join("provider-ca.pem"), &provider_ca)?;
        step(&format!(
            "clusters: provider at {}, consumer at {} (fakeapi over HTTPS)",
            provider_server.url(),
            consumer_server.url()
        ));
        let provider = kube_client(&provider_admin).await?;
        let consumer = kube_client(&consumer_admin).await?;
        offer_widgets(provider.as_ref()).await?;
        step("provider: CRD widgets.example.org exported; Export widgets in Collection basics");
        install_kbind(consumer.as_ref()).await?;
        step(
            "consumer: kbind's CRDs and namespace kbind installed (what the konnector's chart does); namespace team-a",
        );

        // A restart with the same --dir keeps the token, so a `kbind login` made before still works.
        let token_file = dir.join("tokens.csv");
        let token = match kept_token(&token_file) {
            Some(token) => token,
            None => {
                let token = random_token();
                write_file(&token_file, &format!("{token},{USER}\n"))?;
                token
            }
        };
        let listener = listen(port).await?;
        let addr = listener.local_addr().context("reading the gateway's address")?;
        let gateway_url = format!("http://{addr}");

        let shutdown = CancellationToken::new();
        let mut tasks = JoinSet::new();
        start_backend(
            &mut tasks,
            &shutdown,
            provider.clone(),
            listener,
            &gateway_url,
            provider_server.url(),
            &provider_ca,
            &token_file,
        )?;
        wait_for("the gateway to answer /readyz", || async {
            let response = reqwest::get(format!("{gateway_url}{}", path::READYZ)).await.ok()?;
            response.status().is_success().then_some(())
        })
        .await?;
        step(&format!(
            "backend on the provider: gateway with the UI at {gateway_url}, issuer, reaper"
        ));

        // `konnector run`'s own defaults, leader election included: its Lease is how `kbind bind`
        // tells that a konnector runs on the consumer.
        let konnector_args = match konnector::Cli::try_parse_from(["konnector", "run", "--identity", "kbind-demo"]) {
            Ok(konnector::Cli {
                command: konnector::Command::Run(args),
            }) => *args,
            Ok(_) => bail!("`konnector run` parsed as another command"),
            Err(e) => bail!("the konnector's default flags: {e}"),
        };
        let leader = konnector_args.leader_config();
        let engine = Engine::builder(Context {
            consumer: consumer.clone(),
            connector: Arc::new(KubeConnector::default()),
            clock: Arc::new(SystemClock),
            randomness: kbind_cluster::backoff::from_entropy(),
            config: konnector_args.engine_config(),
        })
        .leader_election(leader.clone())
        .build();
        let stop = shutdown.clone().cancelled_owned();
        tasks.spawn(async move {
            engine.run_until(stop).await;
            Ok(())
        });
        // The provider's own controller for widgets: it writes the status kbind syncs down.
        let (stop, controller) = (shutdown.clone(), provider.clone());
        tasks.spawn(async move {
            tokio::select! {
                () = stop.cancelled() => {}
                () = provider_controller(controller) => {}
            }
            Ok(())
        });
        if let Some(leader) = &leader {
            let leases = erase::<k8s_openapi::api::coordination::v1::Lease>();
            wait_for("the konnector to hold its leader Lease", || async {
                let lease = consumer
                    .get_opt(&leases, Some(&leader.namespace), &leader.name)
                    .await
                    .ok()??;
                lease.data.pointer("/spec/holderIdentity").map(|_| ())
            })
            .await?;
        }
        step("konnector on the consumer; the provider's widget controller on the provider");

        Ok(World {
            dir: dir.to_path_buf(),
            consumer_kubeconfig,
            provider_kubeconfig,
            gateway_url,
            token,
            provider,
            consumer,
            provider_server,
            consumer_server,
            shutdown,
            tasks,
        })
    }

    /// Stops every part and the clusters.
    pub async fn stop(mut self) {
        self.shutdown.cancel();
        while let Some(done) = self.tasks.join_next().await {
            match done {
                Ok(Ok(())) => {}
                Ok(Err(e)) => eprintln!("kbind-demo: {e:#}"),
                Err(e) => eprintln!("kbind-demo: a part panicked: {e}"),
            }
        }
        self.provider_server.shutdown().await;
        self.consumer_server.shutdown().await;
    }

    /// What to try, in another terminal: each command runs as printed in a shell.
    pub fn print_next_steps(&self, cli: &Binaries, temporary: bool) {
        let (url, token) = (&self.gateway_url, &self.token);
        let consumer = self.consumer_kubeconfig.display();
        let provider = self.provider_kubeconfig.display();
        let path = format!(
            "\n  export PATH=\"{}:$PATH\"   # kbind and kubectl-bind (`kubectl bind ...`)",
            cli.bin_dir.display()
        );
        let kept = if temporary {
            "removed when the demo stops; pass --dir DIR to keep them"
        } else {
            "kept; a restart with the same --dir keeps the token and these paths"
        };
        println!(
            "\nThe web UI:  {url}/\
             \nSign in with the token:  {token}\
             \nConsumer kubeconfig:  {consumer}\
             \nFiles in:  {dir} ({kept})\
             \n\nTry the CLI in another terminal:\
             \n\n  export KUBECONFIG={consumer}{path}\
             \n  kbind login {url} --token {token}\
             \n  kbind catalog                                       # or: kubectl bind catalog\
             \n  kbind bind {EXPORT} --namespace {TEAM} --wait\
             \n  echo '{{\"apiVersion\": \"example.org/v1\", \"kind\": \"Widget\", \"metadata\": {{\"name\": \"hello\", \"namespace\": \"{TEAM}\"}}, \"spec\": {{\"size\": 3}}}}' | kubectl create -f -\
             \n  kubectl get widgets -A                              # status.phase comes back from the provider\
             \n  kubectl --kubeconfig {provider} get widgets -A      # the provider's copy\
             \n  kbind status\
             \n  kbind unbind {EXPORT} --yes",
            dir = self.dir.display(),
        );
    }
}

/// The gateway's listener: `--port`, else 8080, else any free port.
async fn listen(port: Option<u16>) -> anyhow::Result<tokio::net::TcpListener> {
    let at = |port| SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    match port {
        Some(port) => tokio::net::TcpListener::bind(at(port))
            .await
            .with_context(|| format!("cannot listen on 127.0.0.1:{port}; pass another --port, or --port 0 for any")),
        None => match tokio::net::TcpListener::bind(at(DEFAULT_PORT)).await {
            Ok(listener) => Ok(listener),
            Err(_) => tokio::net::TcpListener::bind(at(0))
                .await
                .context("cannot listen on any loopback port"),
        },
    }
}

/// The token of a tokens file an earlier run in the same folder wrote, when it is one.
fn kept_token(token_file: &Path) -> Option<String> {
    let text = std::fs::read_to_string(token_file).ok()?;
    let (token, user) = text.lines().next()?.split_once(',')?;
    (user == USER && token.len() == 32 && token.bytes().all(|b| b.is_ascii_hexdigit())).then(|| token.to_string())
}

/// 32 random hex digits.
fn random_token() -> String {
    let bytes: [u8; 16] = rand::random();
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// What a provider's platform team does once: the backend's CRDs, an exported API, an Export
/// and a Collection.
async fn offer_widgets(provider: &dyn ClusterClient) -> anyhow::Result<()> {
    for crd in kbind_api::backend_crds() {
        provider
            .create_typed(&crd)
            .await
            .context("creating the backend's CRDs")?;
    }
    provider
        .create(
            &erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(),
            None,
            &object(widgets_crd())?,
            &Default::default(),
        )
        .await
        .context("creating the widgets CRD")?;
    wait_for("Exports and widgets served on the provider", || async {
        provider
            .list(&erase::<kbind_api::Export>(), None, &Default::default())
            .await
            .ok()?;
        provider
            .list(&widgets(), None, &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await?;
    let export = json!({"apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": EXPORT},
        "spec": {"title": "Widgets", "description": "Widgets as a service: ask for a size and a color, the provider makes it Ready",
                 "apis": [{"name": "widgets.example.org"}]}});
    provider
        .create(
            &erase::<kbind_api::Export>(),
            None,
            &object(export)?,
            &Default::default(),
        )
        .await
        .context("creating the Export")?;
    let collection = json!({"apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Collection", "metadata": {"name": "basics"},
        "spec": {"title": "Basics", "exports": [{"name": EXPORT}]}});
    provider
        .create(
            &erase::<kbind_api::Collection>(),
            None,
            &object(collection)?,
            &Default::default(),
        )
        .await
        .context("creating the Collection")?;
    Ok(())
}

/// What a consumer's admin does once: kbind's CRDs and its namespace; and the team's namespace.
async fn install_kbind(consumer: &dyn ClusterClient) -> anyhow::Result<()> {
    for crd in kbind_api::crds() {
        consumer.create_typed(&crd).await.context("creating kbind's CRDs")?;
    }
    for name in ["kbind", TEAM] {
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}});
        consumer
            .create(
                &erase::<k8s_openapi::api::core::v1::Namespace>(),
                None,
                &object(namespace)?,
                &Default::default(),
            )
            .await
            .with_context(|| format!("creating namespace {name}"))?;
    }
    wait_for("kbind's CRDs served on the consumer", || async {
        consumer
            .list(&erase::<kbind_api::Connection>(), None, &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await
}

/// kbind-backend's three modules, started by the same wiring as `kbind-backend run --gateway
/// --issuer --reaper`; the modules' task set is joined by one task of `tasks`.
#[allow(clippy::too_many_arguments)]
fn start_backend(
    tasks: &mut JoinSet<anyhow::Result<()>>,
    shutdown: &CancellationToken,
    provider: Arc<dyn ClusterClient>,
    listener: tokio::net::TcpListener,
    public_url: &str,
    provider_url: &str,
    provider_ca: &str,
    token_file: &Path,
) -> anyhow::Result<()> {
    let config = gateway::Config::new(public_url, PROVIDER_NAME, provider_url, provider_ca)?;
    let auth_options = auth::Options {
        token_file: Some(token_file.to_path_buf()),
        ..Default::default()
    };
    let auth = auth::authenticator(&auth_options, &config.public_url)?;
    let modules = Modules {
        gateway: Some(GatewayModule { config, auth, listener }),
        issuer: true,
        reaper: Some(reaper::Options::default()),
        // The demo's tenants use team-* namespaces; the binary's default is a per-identity prefix.
        issuer_options: issuer::Options {
            claimable_namespaces: vec!["team-*".into()],
            ..issuer::Options::default()
        },
        metrics_listener: None,
    };
    let mut running = modules::start(provider, modules, shutdown);
    tasks.spawn(async move {
        while let Some(done) = running.join_next().await {
            done.map_err(|e| anyhow!("a backend module panicked: {e}"))??;
        }
        Ok(())
    });
    Ok(())
}
