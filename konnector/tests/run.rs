//! `konnector run` as a child process against a fakeapi consumer served over HTTPS: it leads,
//! answers `/healthz`, `/readyz` and `/metrics`, counts Connections, and on SIGTERM releases
//! its leader Lease and exits 0.

mod child;

use child::*;
use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;

use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, RunningServer, serve_cluster};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::Namespace;
use kbind_api::Connection;
use kbind_cluster::ClusterClientExt;
use kube::api::ObjectMeta;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::process::Command;

const IDENTITY: &str = "konnector-under-test";

/// A plain HTTP/1.1 GET: (status, body), `None` if the connection fails.
async fn get(addr: SocketAddr, path: &str) -> Option<(u16, String)> {
    let mut stream = TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let status = response.split(' ').nth(1)?.parse().ok()?;
    let body = response.split_once("\r\n\r\n")?.1.to_string();
    Some((status, body))
}

fn connection(name: &str) -> Connection {
    serde_json::from_value(serde_json::json!({
        "apiVersion": "core.kbind.io/v1alpha1",
        "kind": "Connection",
        "metadata": {"name": name},
        "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "missing", "key": "kubeconfig"}},
    }))
    .unwrap()
}

/// A consumer served over HTTPS with the kbind namespace and CRDs, and its admin kubeconfig file.
async fn consumer() -> (FakeCluster, RunningServer, tempfile::NamedTempFile) {
    let cluster = FakeCluster::builder("consumer").build();
    let admin = cluster.admin_client();
    admin
        .create_typed(&Namespace {
            metadata: ObjectMeta {
                name: Some("kbind".into()),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        })
        .await
        .unwrap();
    for crd in kbind_api::crds() {
        admin.create_typed(&crd).await.unwrap();
    }
    let server = serve_cluster(cluster.clone(), ClusterServeOptions::default())
        .await
        .unwrap();
    let kubeconfig = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(kubeconfig.path(), server.admin_kubeconfig().unwrap()).unwrap();
    (cluster, server, kubeconfig)
}

/// The leader Lease's holder; the Lease must exist.
async fn lease_holder(cluster: &FakeCluster) -> Option<String> {
    let lease: Lease = cluster
        .admin_client()
        .get_typed(Some("kbind"), "kbind-konnector")
        .await
        .expect("the leader Lease exists");
    lease.spec?.holder_identity
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_serves_health_and_metrics_and_releases_its_lease_on_sigterm() {
    let (cluster, server, kubeconfig) = consumer().await;
    let admin = cluster.admin_client();

    let mut child = Command::new(env!("CARGO_BIN_EXE_konnector"))
        .arg("run")
        .arg("--kubeconfig")
        .arg(kubeconfig.path())
        .args([
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-format=json",
            "--log-level=info",
            &format!("--identity={IDENTITY}"),
            "--allow-insecure-providers",
        ])
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let lines: Lines = Arc::default();
    let addrs = follow_stderr(&mut child, IDENTITY, lines.clone());
    let addrs = tokio::time::timeout(DEADLINE, addrs)
        .await
        .unwrap_or_else(|_| panic!("konnector never logged its addresses:\n{}", dump(&lines)))
        .unwrap_or_else(|_| panic!("konnector exited before listening:\n{}", dump(&lines)));
    let (health, metrics) = (addrs["health"], addrs["metrics"]);

    assert_eq!(get(health, "/healthz").await.map(|r| r.0), Some(200));
    eventually("/readyz to answer 200", &lines, || async {
        (get(health, "/readyz").await?.0 == 200).then_some(())
    })
    .await;
    let scrape = || async move { get(metrics, "/metrics").await.map(|r| r.1) };
    eventually("kbind_leader 1", &lines, || async {
        scrape().await?.lines().any(|l| l == "kbind_leader 1").then_some(())
    })
    .await;
    assert_eq!(lease_holder(&cluster).await.as_deref(), Some(IDENTITY));

    admin.create_typed(&connection("acme")).await.unwrap();
    eventually("a not-ready Connection in kbind_connections", &lines, || async {
        let text = scrape().await?;
        let counted = text.lines().any(|l| l == "kbind_connections{state=\"not_ready\"} 1");
        let ready_zero = text.lines().any(|l| l == "kbind_connections{state=\"ready\"} 0");
        (counted && ready_zero).then_some(())
    })
    .await;
    let text = scrape().await.unwrap();
    for name in ["kbind_engaged_providers 0", "kbind_syncers 0"] {
        assert!(text.lines().any(|l| l == name), "missing {name} in\n{text}");
    }

    let pid = child.id().unwrap().to_string();
    let killed = std::process::Command::new("kill")
        .args(["-TERM", &pid])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .unwrap_or_else(|_| panic!("konnector did not stop on SIGTERM:\n{}", dump(&lines)))
        .unwrap();
    assert_eq!(status.code(), Some(0), "konnector log:\n{}", dump(&lines));
    assert_eq!(lease_holder(&cluster).await, None, "the leader Lease was not released");
    assert!(
        get(health, "/healthz").await.is_none(),
        "the health server outlived the process"
    );
    let log = dump(&lines);
    assert!(
        log.lines()
            .any(|l| l.contains("\"level\":\"WARN\"") && l.contains("DEVELOPMENT MODE")),
        "no warning for --allow-insecure-providers:\n{log}"
    );
    let token = server.admin_kubeconfig().unwrap();
    let token = token.lines().find_map(|l| l.trim().strip_prefix("token: ")).unwrap();
    assert!(!log.contains(token.trim_matches('"')), "the consumer token was logged");
}

/// The library path an out-of-tree binary takes: flags as a value, a custom mapper, and its own
/// shutdown future instead of signals.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_library_runs_with_a_custom_mapper_until_its_shutdown_future() {
    struct Prefix;
    impl konnector::Mapper for Prefix {
        fn to_provider(&self, _: &konnector::ApiResource, key: &konnector::ObjectKey) -> konnector::ObjectKey {
            konnector::ObjectKey {
                name: format!("c1-{}", key.name),
                ..key.clone()
            }
        }
        fn to_consumer(&self, _: &konnector::ApiResource, key: &konnector::ObjectKey) -> Option<konnector::ObjectKey> {
            let name = key.name.strip_prefix("c1-")?.to_string();
            Some(konnector::ObjectKey { name, ..key.clone() })
        }
    }
    let (cluster, _server, kubeconfig) = consumer().await;
    let mut args = konnector::RunArgs::defaults();
    args.kubeconfig = Some(kubeconfig.path().into());
    args.metrics_addr = "127.0.0.1:0".parse().unwrap();
    args.health_addr = "127.0.0.1:0".parse().unwrap();
    args.identity = Some("in-process".into());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(
        konnector::Konnector::from_args(args)
            .mapper(Prefix)
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(),
    );
    let lines = Lines::default();
    eventually("the in-process konnector to lead", &lines, || async {
        let lease: Lease = cluster
            .admin_client()
            .get_typed_opt(Some("kbind"), "kbind-konnector")
            .await
            .ok()??;
        (lease.spec?.holder_identity.as_deref() == Some("in-process")).then_some(())
    })
    .await;
    stop.send(()).unwrap();
    let result = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("run() returns after shutdown");
    result.unwrap().unwrap();
    assert_eq!(lease_holder(&cluster).await, None, "the leader Lease was not released");
}
