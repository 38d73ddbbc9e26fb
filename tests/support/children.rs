//! What the tests that run the real binaries share (included by path from backend/tests and
//! cli/tests, which already depend on everything it uses, so it needs no crate of its own): `fakeapi serve` clusters, `kbind-backend run`
//! and `konnector run` as child processes with their stderr kept for failure messages, and
//! waiting on a condition with a deadline.

#![allow(dead_code)]

use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, KubeClusterClient};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Generous: the machine running the suite may be compiling, or running real apiservers.
pub const DEADLINE: Duration = Duration::from_secs(180);
/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(100);

/// Every stderr line of the children of one test, kept for failure messages.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// The collected lines, for a failure message.
pub fn dump(lines: &Lines) -> String {
    lines.lock().join("\n")
}

/// Polls `check` until it returns `Some`, or fails with `what` and the children's logs.
pub async fn eventually<T>(what: &str, lines: &Lines, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}; logs:\n{}",
            dump(lines)
        );
        tokio::time::sleep(POLL).await;
    }
}

/// A binary of another workspace package, next to this package's binary; built when missing
/// (Cargo gives a test only its own package's `CARGO_BIN_EXE_*`).
pub fn sibling_binary(package: &str, bin: &str) -> PathBuf {
    static BUILT: OnceLock<Mutex<()>> = OnceLock::new();
    let _guard = BUILT.get_or_init(|| Mutex::new(())).lock();
    // A test executable lives in `<target>/<profile>/deps/`; the workspace's binaries one level up.
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps");
    let path = profile_dir.join(bin);
    if !path.exists() {
        let mut build = std::process::Command::new(env!("CARGO"));
        build.args(["build", "-p", package, "--bin", bin]);
        if !cfg!(debug_assertions) {
            build.arg("--release");
        }
        let status = build.status().expect("cargo runs");
        assert!(status.success(), "cargo build -p {package} --bin {bin} failed");
    }
    assert!(path.exists(), "no {bin} binary at {}", path.display());
    path
}

/// Collects a child's stderr lines, prefixed with `who`.
pub fn follow_stderr(child: &mut Child, who: &str, lines: Lines) {
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let who = who.to_string();
    tokio::spawn(async move {
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            lines.lock().push(format!("[{who}] {line}"));
        }
    });
}

/// A free loopback port (the OS picks it; the tiny window before the child binds it is accepted).
pub fn free_addr() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind a free port");
    listener.local_addr().expect("local addr")
}

/// A `fakeapi serve` child process and an admin client of it.
pub struct FakeCluster {
    /// The process.
    pub child: Child,
    /// Its admin kubeconfig.
    pub kubeconfig: PathBuf,
    /// An admin client.
    pub client: KubeClusterClient,
}

impl FakeCluster {
    /// Starts `fakeapi serve` and waits for its admin kubeconfig (written atomically once it listens).
    pub async fn start(dir: &Path, name: &str, lines: &Lines) -> Self {
        let kubeconfig = dir.join(format!("{name}.kubeconfig"));
        let mut child = Command::new(sibling_binary("fakeapi", "fakeapi"))
            .args(["serve", "--addr", "127.0.0.1:0", "--name", name, "--kubeconfig"])
            .arg(&kubeconfig)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("fakeapi starts");
        follow_stderr(&mut child, name, lines.clone());
        eventually(&format!("fakeapi {name} to write its kubeconfig"), lines, async || {
            kubeconfig.exists().then_some(())
        })
        .await;
        let client = client(&kubeconfig).await;
        Self {
            child,
            kubeconfig,
            client,
        }
    }

    /// The server URL and the CA (PEM) of its admin kubeconfig.
    pub fn server_and_ca(&self) -> (String, String) {
        let text = std::fs::read_to_string(&self.kubeconfig).expect("kubeconfig readable");
        let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("kubeconfig parses");
        let cluster = kubeconfig.clusters[0].cluster.clone().expect("a cluster entry");
        let ca = cluster.certificate_authority_data.expect("inline CA data");
        let ca = base64_decode(&ca);
        (cluster.server.expect("a server"), ca)
    }
}

fn base64_decode(text: &str) -> String {
    use base64::Engine;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(text.trim())
        .expect("CA data is base64");
    String::from_utf8(bytes).expect("CA is PEM")
}

/// A client from a kubeconfig file.
pub async fn client(kubeconfig: &Path) -> KubeClusterClient {
    let text = std::fs::read_to_string(kubeconfig).expect("kubeconfig readable");
    client_from_yaml(&text).await
}

/// A client from kubeconfig text.
pub async fn client_from_yaml(text: &str) -> KubeClusterClient {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(text).expect("kubeconfig parses");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("kubeconfig usable");
    KubeClusterClient::from_config(config).expect("client builds")
}

/// A typed resource's `ApiResource`.
pub fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// A JSON value as a dynamic object.
pub fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).expect("a Kubernetes object")
}

/// The `type` condition of an object's `status.conditions`.
pub async fn condition(
    client: &dyn ClusterClient,
    res: &ApiResource,
    ns: Option<&str>,
    name: &str,
    type_: &str,
) -> Option<Condition> {
    let obj = client.get_opt(res, ns, name).await.ok()??;
    let conditions: Vec<Condition> = obj
        .data
        .pointer("/status/conditions")
        .and_then(|c| serde_json::from_value(c.clone()).ok())
        .unwrap_or_default();
    conditions.into_iter().find(|c| c.type_ == type_)
}

/// A child process killed when dropped.
pub struct Process {
    /// The process.
    pub child: Child,
}

impl Process {
    /// Starts `program` with `args`, its stderr collected into `lines` as `who`.
    pub fn start(program: &Path, args: &[String], who: &str, lines: &Lines) -> Self {
        let mut child = Command::new(program)
            .args(args)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .unwrap_or_else(|e| panic!("{} starts: {e}", program.display()));
        follow_stderr(&mut child, who, lines.clone());
        Self { child }
    }

    /// Stops the process (SIGKILL) and waits for it.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

/// The sample API `widgets.example.org` (namespaced, with a status subresource).
pub fn widgets() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// The provider's CRD of [`widgets`], labelled exported.
pub fn widgets_crd() -> Value {
    serde_json::json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org", "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}, "color": {"type": "string"}}},
                    "status": {"type": "object", "properties": {"phase": {"type": "string"}}}
                }}}
            }]
        }
    })
}

/// What a provider's platform team does once: the backend's CRDs, the exported widgets CRD, the
/// Export `widgets` and the Collection `basics`.
pub async fn offer_widgets(p: &KubeClusterClient, lines: &Lines) {
    for crd in kbind_api::backend_crds() {
        p.create_typed(&crd).await.expect("backend CRD created");
    }
    p.create(
        &erase::<CustomResourceDefinition>(),
        None,
        &object(widgets_crd()),
        &Default::default(),
    )
    .await
    .expect("widgets CRD created");
    eventually("Exports and widgets served on the provider", lines, async || {
        p.list(&erase::<kbind_api::Export>(), None, &Default::default())
            .await
            .ok()?;
        p.list(&widgets(), None, &Default::default()).await.ok().map(|_| ())
    })
    .await;
    let export = serde_json::json!({"apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "widgets"},
        "spec": {"title": "Widgets", "description": "Widgets as a service", "apis": [{"name": "widgets.example.org"}]}});
    p.create(
        &erase::<kbind_api::Export>(),
        None,
        &object(export),
        &Default::default(),
    )
    .await
    .expect("Export created");
    let collection = serde_json::json!({"apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Collection", "metadata": {"name": "basics"},
        "spec": {"title": "Basics", "description": "The everyday APIs", "exports": [{"name": "widgets"}]}});
    p.create(
        &erase::<kbind_api::Collection>(),
        None,
        &object(collection),
        &Default::default(),
    )
    .await
    .expect("Collection created");
}

/// What a consumer's admin does once: kbind's CRDs and the `namespaces` (the konnector's `kbind`
/// and the teams').
pub async fn install_kbind(c: &KubeClusterClient, namespaces: &[&str], lines: &Lines) {
    for crd in kbind_api::crds() {
        c.create_typed(&crd).await.expect("kbind CRD created");
    }
    for ns in namespaces {
        let namespace = serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}});
        c.create(&erase::<Namespace>(), None, &object(namespace), &Default::default())
            .await
            .expect("namespace created");
    }
    eventually("kbind's CRDs served on the consumer", lines, async || {
        c.list(&erase::<kbind_api::Connection>(), None, &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
}

/// `konnector run` on the consumer of `kubeconfig`, heartbeating every second (so a reaper's TTL
/// can be short), with `extra` flags.
pub fn konnector(kubeconfig: &Path, extra: &[&str], lines: &Lines) -> Process {
    let mut args: Vec<String> = vec![
        "run".into(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--namespace=kbind".into(),
        "--metrics-addr=127.0.0.1:0".into(),
        "--health-addr=127.0.0.1:0".into(),
        "--log-format=json".into(),
        "--heartbeat-interval=1s".into(),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    Process::start(&sibling_binary("konnector", "konnector"), &args, "konnector", lines)
}

/// A running `kbind-backend run`.
pub struct Backend {
    /// The process (killed when dropped).
    pub process: Process,
    /// Where it listens.
    pub addr: SocketAddr,
    /// `http://<addr>`.
    pub url: String,
}

/// Starts `kbind-backend run --gateway --issuer` (the binary at `program`) over `provider`, its
/// files in `dir`, signing in the `token,user` lines of `tokens`, with `extra` flags after the
/// common ones; returns once `/readyz` answers 200.
pub async fn start_backend(
    program: &Path,
    provider: &FakeCluster,
    dir: &Path,
    tokens: &str,
    extra: &[&str],
    lines: &Lines,
) -> Backend {
    let token_file = dir.join("tokens.csv");
    std::fs::write(&token_file, tokens).expect("token file written");
    let (server, ca) = provider.server_and_ca();
    let ca_path = dir.join("provider-ca.pem");
    std::fs::write(&ca_path, ca).expect("CA written");
    let addr = free_addr();
    let url = format!("http://{addr}");
    let mut args: Vec<String> = vec![
        "run".into(),
        "--gateway".into(),
        "--issuer".into(),
        format!("--kubeconfig={}", provider.kubeconfig.display()),
        format!("--listen={addr}"),
        format!("--public-url={url}"),
        "--provider-name=acme".into(),
        format!("--provider-url={server}"),
        format!("--provider-ca={}", ca_path.display()),
        format!("--token-file={}", token_file.display()),
    ];
    args.extend(extra.iter().map(|a| a.to_string()));
    let process = Process::start(program, &args, "backend", lines);
    eventually("the gateway to answer /readyz", lines, async || {
        (http_status(addr, "/readyz").await? == 200).then_some(())
    })
    .await;
    Backend { process, addr, url }
}

/// The status code of a plain `GET path` at `addr` (HTTP/1.1 by hand: not every crate that
/// includes this file depends on an HTTP client); `None` when nothing answers.
pub async fn http_status(addr: SocketAddr, path: &str) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut head = [0u8; 12];
    stream.read_exact(&mut head).await.ok()?;
    std::str::from_utf8(&head[9..12]).ok()?.parse().ok()
}
