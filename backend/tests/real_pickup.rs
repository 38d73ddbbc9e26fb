//! Two `kbind-backend run --gateway` processes on one real kube-apiserver (kbind-testenv) split
//! 100 concurrent pickups of one URL: exactly one gets the bundle, whose kubeconfig works against
//! the API server; the other 99 get a clear 410 with an `ApiError` body. The Grant is provisioned
//! by the controller double of tests/gateway_support (the issuer controller is another module).
//! Skips when the Kubernetes binaries are missing, unless KBIND_REQUIRE_REAL_K8S=1.

mod gateway_support;

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use gateway_support::*;
use kbind_api::service::{ApiError, BindResponse};
use kbind_cluster::{ApiResource, ClusterClient, KubeClusterClient, SystemClock};
use kbind_testenv::{TestEnv, User};
use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::process::{Child, Command};

const DEADLINE: Duration = Duration::from_secs(120);
const UID: &str = "7d2f3c4b-5a6e-4f70-8a91-b2c3d4e5f607";

/// One HTTP/1.1 exchange on a fresh connection: (status, body).
async fn http(addr: SocketAddr, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr)
        .await
        .unwrap_or_else(|e| panic!("connect {addr}: {e}"));
    let mut request = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n");
    for (name, value) in headers {
        request.push_str(&format!("{name}: {value}\r\n"));
    }
    request.push_str(&format!("Content-Length: {}\r\n\r\n{body}", body.len()));
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    let status = response
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP response: {response}"));
    let body = response
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    (status, body)
}

/// Starts a gateway replica and returns it with the address it logged.
async fn replica(env: &TestEnv, dir: &std::path::Path, name: &str) -> (Child, SocketAddr) {
    replica_with(env, dir, name, &[]).await
}

/// [`replica`] with `extra` flags (`--issuer`: the real issuer in the same process).
async fn replica_with(env: &TestEnv, dir: &std::path::Path, name: &str, extra: &[&str]) -> (Child, SocketAddr) {
    let cluster = env.cluster(0);
    let ca = cluster
        .kubeconfig(User::Admin)
        .clusters
        .first()
        .and_then(|c| c.cluster.as_ref()?.certificate_authority.clone())
        .expect("the admin kubeconfig names its CA file");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kbind-backend"))
        .arg("run")
        .arg("--gateway")
        .arg("--kubeconfig")
        .arg(cluster.kubeconfig_path(User::Admin))
        .arg("--token-file")
        .arg(dir.join("tokens.csv"))
        .args([
            "--listen=127.0.0.1:0",
            "--public-url=http://kbind.test",
            "--provider-name=real",
            &format!("--provider-url={}", cluster.server()),
            &format!("--provider-ca={ca}"),
            // The story binds team-a; the default claimable pattern is a per-identity prefix.
            "--claimable-namespaces=*",
            "--pickup-rate=600000",
            "--pickup-burst=1000",
            "--log-format=json",
            "--log-level=info",
        ])
        .args(extra)
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap_or_else(|e| panic!("spawn {name}: {e}"));
    let stderr = child.stderr.take().expect("stderr is piped");
    let mut lines = BufReader::new(stderr).lines();
    let addr = tokio::time::timeout(DEADLINE, async {
        let mut seen = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            if let Ok(log) = serde_json::from_str::<Value>(&line)
                && log["message"] == "gateway listening"
                && let Some(addr) = log["addr"].as_str().and_then(|a| a.parse::<SocketAddr>().ok())
            {
                return addr;
            }
            seen.push(line);
        }
        panic!("{name} exited before listening:\n{}", seen.join("\n"));
    })
    .await
    .unwrap_or_else(|_| panic!("{name} never logged its address"));
    // Keep draining stderr so the child never blocks on a full pipe.
    tokio::spawn(async move { while let Ok(Some(_)) = lines.next_line().await {} });
    (child, addr)
}

async fn create(client: &dyn ClusterClient, res: ApiResource, value: Value) {
    let obj = serde_json::from_value(value).unwrap();
    client
        .create(&res, None, &obj, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
}

/// Retries `what` until it succeeds or the deadline passes.
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    tokio::time::timeout(DEADLINE, async {
        while !f().await {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{what} did not happen within {DEADLINE:?}"));
}

/// What the provider's admin does once on the real apiserver: kbind's namespaces, the backend's
/// CRDs, the exported widgets CRD and the `widgets` Export; the admin client.
async fn offer(env: &TestEnv) -> Arc<dyn ClusterClient> {
    let kube = env.cluster(0).client(User::Admin).await.expect("an admin client");
    let admin: Arc<dyn ClusterClient> = Arc::new(KubeClusterClient::new(kube));
    let ns_res = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    for ns in ["kbind", GRANTS_NAMESPACE] {
        create(
            admin.as_ref(),
            ns_res.clone(),
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    let crd_res = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    for crd in kbind_api::backend_crds() {
        create(admin.as_ref(), crd_res.clone(), serde_json::to_value(crd).unwrap()).await;
    }
    create(
        admin.as_ref(),
        crd_res,
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": "widgets.example.org", "labels": {"core.kbind.io/exported": "true"}},
            "spec": {"group": "example.org", "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]},
        }),
    )
    .await;
    let export_res = ApiResource::erase::<kbind_api::Export>(&());
    let export = json!({
        "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "widgets"},
        "spec": {"title": "Widgets", "apis": [{"name": "widgets.example.org"}]},
    });
    eventually("the Export CRD to be served", || {
        let (admin, export_res, export) = (admin.clone(), export_res.clone(), export.clone());
        async move {
            let obj = serde_json::from_value(export).unwrap();
            admin.create(&export_res, None, &obj, &Default::default()).await.is_ok()
        }
    })
    .await;
    admin
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_replicas_split_100_concurrent_pickups_and_exactly_one_gets_the_bundle() {
    let Some(env) = TestEnv::start_or_skip(1).await.expect("the test environment starts") else {
        return;
    };
    let admin = offer(&env).await;
    let _controller = spawn_controller(admin.clone(), Arc::new(SystemClock));

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tokens.csv"),
        "alice-secret-token-0123456789abcdef,alice\n",
    )
    .unwrap();
    let (mut a, addr_a) = replica(&env, dir.path(), "replica A").await;
    let (mut b, addr_b) = replica(&env, dir.path(), "replica B").await;

    let body = json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["team-a"]}).to_string();
    let auth = [
        ("Authorization", "Bearer alice-secret-token-0123456789abcdef"),
        ("Content-Type", "application/json"),
    ];
    let (status, reply) = http(addr_a, "POST", "/api/v1/bind", &auth, &body).await;
    assert_eq!(status, 201, "{reply}");
    let bound: BindResponse = serde_json::from_str(&reply).unwrap();
    let path = bound
        .pickup_url
        .strip_prefix("http://kbind.test")
        .expect("the pickup URL starts with --public-url")
        .to_string();

    let pickups = (0..100).map(|i| {
        let addr = if i % 2 == 0 { addr_a } else { addr_b };
        let path = path.clone();
        tokio::spawn(async move { http(addr, "GET", &path, &[], "").await })
    });
    let answers: Vec<(u16, String)> = futures::future::join_all(pickups)
        .await
        .into_iter()
        .map(|r| r.expect("a pickup task"))
        .collect();
    let bundles: Vec<&String> = answers.iter().filter(|(s, _)| *s == 200).map(|(_, b)| b).collect();
    let gone: Vec<&String> = answers.iter().filter(|(s, _)| *s == 410).map(|(_, b)| b).collect();
    let others: Vec<&(u16, String)> = answers.iter().filter(|(s, _)| *s != 200 && *s != 410).collect();
    println!(
        "pickup race: {} bundle, {} gone, {} other, over two replicas",
        bundles.len(),
        gone.len(),
        others.len()
    );
    assert!(others.is_empty(), "unexpected answers: {others:?}");
    assert_eq!(bundles.len(), 1, "exactly one pickup gets the bundle");
    assert_eq!(gone.len(), 99);
    for body in gone {
        let error: ApiError = serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"));
        assert_eq!((error.code, error.reason.as_str()), (410, "PickupGone"), "{body}");
    }

    // The bundle's kubeconfig reaches the API server as the Grant's ServiceAccount.
    let issued = issued_client(bundles[0]).await;
    let review_res = ApiResource {
        group: "authentication.k8s.io".into(),
        version: "v1".into(),
        api_version: "authentication.k8s.io/v1".into(),
        kind: "SelfSubjectReview".into(),
        plural: "selfsubjectreviews".into(),
    };
    let review = serde_json::from_value(
        json!({"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview", "metadata": {}}),
    )
    .unwrap();
    let me = issued
        .create(&review_res, None, &review, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("the issued token authenticates: {e}"));
    assert_eq!(
        me.data["status"]["userInfo"]["username"],
        format!("system:serviceaccount:{GRANTS_NAMESPACE}:{}", bound.grant)
    );

    for (child, name) in [(&mut a, "replica A"), (&mut b, "replica B")] {
        let pid = child.id().expect("the replica runs");
        let killed = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status()
            .unwrap();
        assert!(killed.success());
        let status = tokio::time::timeout(DEADLINE, child.wait())
            .await
            .unwrap_or_else(|_| panic!("{name} did not stop on SIGTERM"))
            .unwrap();
        assert!(status.success(), "{name} exited with {status}");
    }
}

/// The kubeconfig of a picked-up bundle (YAML documents) as a client.
async fn issued_client(bundle: &str) -> KubeClusterClient {
    let docs: Vec<Value> = serde_saphyr::from_multiple(bundle).unwrap_or_else(|e| panic!("{e}: {bundle}"));
    let kubeconfig = docs[0]["stringData"]["kubeconfig"]
        .as_str()
        .expect("the Secret carries a kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(
        kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap(),
        &Default::default(),
    )
    .await
    .unwrap();
    KubeClusterClient::from_config(config).unwrap()
}

/// On a real kube-apiserver with the real issuer: a second bind of the same Export for another
/// namespace adds it to the Grant, and the credential the first bind issued keeps working in
/// the first namespace (replacing the Grant's namespaces would take the live binding's Role at
/// once). Narrowing is its own call, after which the credential
/// is refused there and still works in the other namespace.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_bind_keeps_the_first_namespace_working_and_narrowing_is_explicit() {
    let Some(env) = TestEnv::start_or_skip(1).await.expect("the test environment starts") else {
        return;
    };
    let _admin = offer(&env).await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("tokens.csv"),
        "alice-secret-token-0123456789abcdef,alice\n",
    )
    .unwrap();
    let (_gateway, addr) = replica_with(&env, dir.path(), "gateway with issuer", &["--issuer"]).await;
    let auth = [
        ("Authorization", "Bearer alice-secret-token-0123456789abcdef"),
        ("Content-Type", "application/json"),
    ];
    let bind = |ns: &str| json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": [ns]}).to_string();
    let (status, reply) = http(addr, "POST", "/api/v1/bind", &auth, &bind("team-a")).await;
    assert_eq!(status, 201, "{reply}");
    let first: BindResponse = serde_json::from_str(&reply).unwrap();
    assert_eq!(first.outcome, Some(kbind_api::service::BindOutcome::Created));
    let path = first.pickup_url.strip_prefix("http://kbind.test").unwrap().to_string();
    let (status, bundle) = http(addr, "GET", &path, &[], "").await;
    assert_eq!(status, 200, "{bundle}");
    let issued = issued_client(&bundle).await;
    let widgets = ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    };
    let lists = |ns: &'static str| {
        let (issued, widgets) = (issued.clone(), widgets.clone());
        async move { issued.list(&widgets, Some(ns), &Default::default()).await }
    };
    // The apiserver's RBAC cache follows new Roles within moments.
    eventually("the first bind's credential to work in team-a", || async {
        lists("team-a").await.is_ok()
    })
    .await;

    let (status, reply) = http(addr, "POST", "/api/v1/bind", &auth, &bind("team-b")).await;
    assert_eq!(status, 201, "{reply}");
    let second: BindResponse = serde_json::from_str(&reply).unwrap();
    assert_eq!(second.outcome, Some(kbind_api::service::BindOutcome::Updated));
    assert_eq!(
        second.namespaces,
        Some(vec!["team-a".to_string(), "team-b".to_string()])
    );
    eventually("the credential to reach team-b", || async {
        lists("team-b").await.is_ok()
    })
    .await;
    assert!(
        lists("team-a").await.is_ok(),
        "the second bind left the first namespace's binding working"
    );

    let (status, reply) = http(
        addr,
        "DELETE",
        &format!("/api/v1/grants/{}/namespaces/team-a", first.grant),
        &auth,
        "",
    )
    .await;
    assert_eq!(status, 200, "{reply}");
    eventually("the credential to be refused in team-a", || async {
        matches!(lists("team-a").await, Err(kbind_cluster::Error::Forbidden { .. }))
    })
    .await;
    assert!(lists("team-b").await.is_ok(), "team-b still works");
}
