//! One test cluster: a kube-apiserver under its own etcd prefix plus its kube-controller-manager, and a kubeconfig per user.

use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kube::config::{AuthInfo, Context, KubeConfigOptions, Kubeconfig, NamedAuthInfo, NamedCluster, NamedContext};
use kube::{Api, Client};
use tokio::time::Instant;

use crate::Error;
use crate::net::{free_port, poll_until, port_clash};
use crate::process::{Process, log_tail};
use crate::users::{CONTROLLER_MANAGER, User};
use crate::{Binaries, Pki, users::Tokens};

/// The controllers each kube-controller-manager runs: what kbind's behaviour depends on, nothing that needs nodes.
/// `clusterrole-aggregation` fills the bootstrap `admin`/`edit`/`view` roles, which are empty without it.
pub const CONTROLLERS: &str =
    "namespace,garbagecollector,serviceaccount-token,serviceaccount,clusterrole-aggregation,root-ca-cert-publisher";

/// How one cluster of an environment is run; the default is what [`crate::TestEnv::start`] gives every cluster.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct ClusterOptions {
    /// Whether the kube-apiserver serves HTTP/1.1 only (see [`ClusterOptions::http1_only`]).
    pub http1_only: bool,
}

impl ClusterOptions {
    /// Serve HTTP/1.1 only (`--disable-http2-serving`): `h2` is left out of the apiserver's ALPN, so every client
    /// (the konnector's included) takes its HTTP/1.1 fallback, as behind a proxy or load balancer without HTTP/2.
    pub fn http1_only(mut self) -> Self {
        self.http1_only = true;
        self
    }
}

/// Everything an environment's clusters share: binaries, PKI, tokens and the etcd they store in.
#[derive(Debug)]
pub(crate) struct ClusterKit {
    pub(crate) binaries: Binaries,
    pub(crate) pki: Pki,
    pub(crate) tokens: Tokens,
    pub(crate) etcd_url: String,
    pub(crate) root: PathBuf,
}

/// A running cluster of an environment.
#[derive(Debug)]
pub struct Cluster {
    index: usize,
    generation: u32,
    port: u16,
    options: ClusterOptions,
    /// How many times this generation's apiserver was started again after a stop (`TestEnv::start_apiserver`).
    restarts: u32,
    kubeconfigs: [Kubeconfig; 4],
    dir: PathBuf,
    // Why this order: fields drop in order, so the controller-manager goes before its apiserver.
    controller_manager: Process,
    apiserver: Process,
}

/// Start attempts before a port clash is reported as an error.
const ATTEMPTS: usize = 3;

impl Cluster {
    /// Starts cluster `index` (generation `generation`) on `port`, or on a free port when `None`, and waits until
    /// the apiserver is ready and the controller-manager is at work.
    pub(crate) async fn start(
        shared: &ClusterKit,
        index: usize,
        generation: u32,
        port: Option<u16>,
        options: ClusterOptions,
        deadline: Instant,
    ) -> Result<Self, Error> {
        let dir = shared.root.join(format!("cluster-{index}"));
        std::fs::create_dir_all(&dir).map_err(|e| Error::io(format!("failed to create {}", dir.display()), e))?;
        let mut attempt = 0;
        let (port, apiserver) = loop {
            attempt += 1;
            let port = match port {
                Some(port) => port,
                None => free_port()?,
            };
            let log = dir.join(format!("kube-apiserver-{generation}.log"));
            let mut apiserver = spawn_apiserver(shared, index, generation, port, &options, log)?;
            let admin = client_for(&kubeconfig(shared, index, port, User::Admin)).await?;
            match wait_ready(&mut apiserver, &admin, deadline).await {
                Ok(()) => break (port, apiserver),
                Err(Error::Exited { log, .. }) if port_clash(&log) && attempt < ATTEMPTS => continue,
                Err(err) => return Err(err),
            }
        };
        let kubeconfigs = User::ALL.map(|user| kubeconfig(shared, index, port, user));
        write_kubeconfigs(&dir, &kubeconfigs)?;
        let controller_manager = start_controller_manager(shared, index, port, generation, &dir)?;
        let mut cluster = Cluster {
            index,
            generation,
            port,
            options,
            restarts: 0,
            kubeconfigs,
            dir,
            controller_manager,
            apiserver,
        };
        cluster.wait_controllers(deadline).await?;
        Ok(cluster)
    }

    /// The index of this cluster in its environment.
    pub fn index(&self) -> usize {
        self.index
    }

    /// How many times this cluster has been replaced (0 for the first).
    pub fn generation(&self) -> u32 {
        self.generation
    }

    /// The apiserver's URL, `https://127.0.0.1:<port>`; stable across [`crate::TestEnv::replace_cluster`].
    pub fn server(&self) -> String {
        server_url(self.port)
    }

    /// The etcd key prefix this generation of the cluster stores under.
    pub fn etcd_prefix(&self) -> String {
        etcd_prefix(self.index, self.generation)
    }

    /// The kubeconfig of `user` (CA by file path, bearer token inline).
    pub fn kubeconfig(&self, user: User) -> Kubeconfig {
        self.kubeconfigs[user as usize].clone()
    }

    /// Where the kubeconfig of `user` is written, for tools that take a path.
    pub fn kubeconfig_path(&self, user: User) -> PathBuf {
        kubeconfig_path(&self.dir, user)
    }

    /// A client configuration for `user`.
    pub async fn config(&self, user: User) -> Result<kube::Config, Error> {
        Ok(kube::Config::from_custom_kubeconfig(self.kubeconfig(user), &KubeConfigOptions::default()).await?)
    }

    /// A client acting as `user`.
    pub async fn client(&self, user: User) -> Result<Client, Error> {
        Ok(Client::try_from(self.config(user).await?)?)
    }

    /// The process ids of the apiserver and controller-manager.
    pub fn pids(&self) -> [u32; 2] {
        [self.apiserver.id(), self.controller_manager.id()]
    }

    /// How this cluster is run.
    pub fn options(&self) -> &ClusterOptions {
        &self.options
    }

    /// The log file of the apiserver process running now.
    pub fn apiserver_log(&self) -> &Path {
        self.apiserver.log_path()
    }

    /// Kills the kube-apiserver (SIGKILL, as a crash or an OOM kill would); the controller-manager keeps running
    /// and retries. [`Cluster::start_apiserver`] brings it back.
    pub(crate) fn stop_apiserver(&mut self) {
        self.apiserver.kill();
    }

    /// Starts the kube-apiserver again with the same arguments after [`Cluster::stop_apiserver`]: the same port
    /// and certificates, the same etcd prefix (so the same identity and objects). Returns once `/readyz` answers
    /// ok. Does nothing while the apiserver runs.
    pub(crate) async fn start_apiserver(&mut self, shared: &ClusterKit, deadline: Instant) -> Result<(), Error> {
        if self.apiserver.exited().is_none() {
            return Ok(());
        }
        self.restarts += 1;
        let log = self.dir.join(format!(
            "kube-apiserver-{}-restart-{}.log",
            self.generation, self.restarts
        ));
        let admin = self.client(User::Admin).await?;
        loop {
            let mut apiserver = spawn_apiserver(
                shared,
                self.index,
                self.generation,
                self.port,
                &self.options,
                log.clone(),
            )?;
            match wait_ready(&mut apiserver, &admin, deadline).await {
                Ok(()) => {
                    self.apiserver = apiserver;
                    return Ok(());
                }
                // Why retry the same port: the killed process's sockets may hold it for a moment, and the address
                // must stay the one every kubeconfig names.
                Err(Error::Exited { log, .. }) if port_clash(&log) && Instant::now() < deadline => {
                    tokio::time::sleep(crate::net::POLL).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// Kills the controller-manager and apiserver, leaving the port free.
    pub(crate) fn stop(&mut self) {
        self.controller_manager.kill();
        self.apiserver.kill();
    }

    /// The port the apiserver listens on.
    pub(crate) fn port(&self) -> u16 {
        self.port
    }

    /// Waits until the serviceaccount controller has made `default/default`: the controller-manager is running.
    async fn wait_controllers(&mut self, deadline: Instant) -> Result<(), Error> {
        let admin = self.client(User::Admin).await?;
        let accounts: Api<ServiceAccount> = Api::namespaced(admin, "default");
        let log = self.controller_manager.log_path().to_path_buf();
        let what = format!(
            "kube-controller-manager of cluster {} (default service account)",
            self.index
        );
        let (controller_manager, apiserver) = (&mut self.controller_manager, &mut self.apiserver);
        poll_until(
            &what,
            deadline,
            || {
                controller_manager
                    .check_running()
                    .and_then(|()| apiserver.check_running())
            },
            || log_tail(&log, 30),
            || {
                let accounts = accounts.clone();
                async move { accounts.get_opt("default").await.ok().flatten().map(|_| ()) }
            },
        )
        .await
    }
}

fn etcd_prefix(index: usize, generation: u32) -> String {
    format!("/kbind/cluster-{index}/generation-{generation}")
}

fn server_url(port: u16) -> String {
    format!("https://127.0.0.1:{port}")
}

/// Starts generation `generation` of cluster `index`'s kube-apiserver on `port`, logging to `log`.
fn spawn_apiserver(
    shared: &ClusterKit,
    index: usize,
    generation: u32,
    port: u16,
    options: &ClusterOptions,
    log: PathBuf,
) -> Result<Process, Error> {
    let mut args = apiserver_args(shared, index, port, &etcd_prefix(index, generation));
    if options.http1_only {
        // Why the flag and not GODEBUG=http2server=0: the apiserver configures HTTP/2 itself (x/net/http2 and an
        // explicit `h2` in its TLS NextProtos), which that setting does not reach; measured on v1.35.8, the
        // server still negotiated h2 with it.
        args.push("--disable-http2-serving".into());
    }
    Process::spawn("kube-apiserver", &shared.binaries.kube_apiserver, &args, log)
}

fn apiserver_args(shared: &ClusterKit, index: usize, port: u16, etcd_prefix: &str) -> Vec<String> {
    let pki = &shared.pki;
    let token_file = shared.root.join("tokens.csv");
    vec![
        "--bind-address=127.0.0.1".into(),
        // Why: with no default route the apiserver cannot pick an address for the `kubernetes` Service itself.
        "--advertise-address=127.0.0.1".into(),
        // Why: Endpoints may not hold a loopback address, so the default reconciler would log an error every 10 s.
        "--endpoint-reconciler-type=none".into(),
        format!("--secure-port={port}"),
        format!("--etcd-servers={}", shared.etcd_url),
        format!("--etcd-prefix={etcd_prefix}"),
        format!("--tls-cert-file={}", pki.serving_cert.display()),
        format!("--tls-private-key-file={}", pki.serving_key.display()),
        format!("--client-ca-file={}", pki.ca_cert.display()),
        format!("--token-auth-file={}", token_file.display()),
        "--authorization-mode=RBAC".into(),
        format!("--service-account-key-file={}", pki.service_account_pub.display()),
        format!(
            "--service-account-signing-key-file={}",
            pki.service_account_key.display()
        ),
        format!("--service-account-issuer=https://kbind-cluster-{index}.test"),
        "--service-cluster-ip-range=10.0.0.0/24".into(),
        "--profiling=false".into(),
    ]
}

fn start_controller_manager(
    shared: &ClusterKit,
    index: usize,
    port: u16,
    generation: u32,
    dir: &Path,
) -> Result<Process, Error> {
    let kubeconfig_file = dir.join("kube-controller-manager.kubeconfig");
    let config = named_kubeconfig(
        shared,
        index,
        port,
        CONTROLLER_MANAGER,
        shared.tokens.controller_manager(),
    );
    write_json(&kubeconfig_file, &config)?;
    let args = vec![
        format!("--kubeconfig={}", kubeconfig_file.display()),
        format!("--controllers={CONTROLLERS}"),
        "--leader-elect=false".into(),
        // Why: N controller-managers on one host would fight over the default 10257; nothing scrapes it.
        "--secure-port=0".into(),
        format!(
            "--service-account-private-key-file={}",
            shared.pki.service_account_key.display()
        ),
        format!("--root-ca-file={}", shared.pki.ca_cert.display()),
        format!("--cluster-name=kbind-cluster-{index}"),
        "--profiling=false".into(),
    ];
    let log = dir.join(format!("kube-controller-manager-{generation}.log"));
    Process::spawn(
        "kube-controller-manager",
        &shared.binaries.kube_controller_manager,
        &args,
        log,
    )
}

/// Waits for `/readyz` and for the `kube-system` namespace (made by a post-start hook that `/readyz` does not cover).
async fn wait_ready(apiserver: &mut Process, admin: &Client, deadline: Instant) -> Result<(), Error> {
    let log = apiserver.log_path().to_path_buf();
    let what = format!("kube-apiserver (pid {}) /readyz", apiserver.id());
    poll_until(
        &what,
        deadline,
        || apiserver.check_running(),
        || log_tail(&log, 30),
        || async {
            let request = http::Request::get("/readyz").body(Vec::new()).ok()?;
            let body = admin.request_text(request).await.ok()?;
            (body.trim() == "ok").then_some(())
        },
    )
    .await?;
    let namespaces: Api<Namespace> = Api::all(admin.clone());
    poll_until(
        "kube-system namespace",
        deadline,
        || apiserver.check_running(),
        || log_tail(&log, 30),
        || {
            let namespaces = namespaces.clone();
            async move { namespaces.get_opt("kube-system").await.ok().flatten().map(|_| ()) }
        },
    )
    .await
}

fn kubeconfig(shared: &ClusterKit, index: usize, port: u16, user: User) -> Kubeconfig {
    named_kubeconfig(shared, index, port, user.name(), shared.tokens.of(user))
}

fn named_kubeconfig(shared: &ClusterKit, index: usize, port: u16, user: &str, token: &str) -> Kubeconfig {
    let cluster = format!("kbind-cluster-{index}");
    let context = format!("{user}@{cluster}");
    Kubeconfig {
        clusters: vec![NamedCluster {
            name: cluster.clone(),
            cluster: Some(kube::config::Cluster {
                server: Some(server_url(port)),
                certificate_authority: Some(shared.pki.ca_cert.display().to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        auth_infos: vec![NamedAuthInfo {
            name: user.to_string(),
            auth_info: Some(AuthInfo {
                token: Some(token.to_string().into()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        contexts: vec![NamedContext {
            name: context.clone(),
            context: Some(Context {
                cluster,
                user: Some(user.to_string()),
                ..Default::default()
            }),
            ..Default::default()
        }],
        current_context: Some(context),
        api_version: Some("v1".into()),
        kind: Some("Config".into()),
        ..Default::default()
    }
}

async fn client_for(kubeconfig: &Kubeconfig) -> Result<Client, Error> {
    let config = kube::Config::from_custom_kubeconfig(kubeconfig.clone(), &KubeConfigOptions::default()).await?;
    Ok(Client::try_from(config)?)
}

fn kubeconfig_path(dir: &Path, user: User) -> PathBuf {
    dir.join(format!("{}.kubeconfig", user.name()))
}

fn write_kubeconfigs(dir: &Path, kubeconfigs: &[Kubeconfig; 4]) -> Result<(), Error> {
    User::ALL
        .iter()
        .zip(kubeconfigs)
        .try_for_each(|(user, config)| write_json(&kubeconfig_path(dir, *user), config))
}

/// Kubeconfig files are YAML, and JSON is YAML.
fn write_json(path: &Path, kubeconfig: &Kubeconfig) -> Result<(), Error> {
    let text = serde_json::to_string_pretty(kubeconfig)
        .map_err(|e| Error::io(format!("failed to encode {}", path.display()), std::io::Error::other(e)))?;
    std::fs::write(path, text).map_err(|e| Error::io(format!("failed to write {}", path.display()), e))
}
