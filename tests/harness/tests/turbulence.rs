//! The harness's turbulence: an apiserver that serves HTTP/1.1 only, one stopped and started again as the same
//! cluster, and API Priority and Fairness throttling chosen users.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Namespace;
use kbind_testenv::{ClusterOptions, TestEnv, User};
use kube::api::{ObjectMeta, PostParams};
use kube::{Api, Client};
use tokio_rustls::rustls;

/// The ALPN protocol the apiserver of `env`'s cluster `index` picks when offered HTTP/2 and HTTP/1.1, as the
/// konnector's transport offers them.
async fn negotiated(env: &TestEnv, index: usize) -> Option<Vec<u8>> {
    let config = env.cluster(index).config(User::Admin).await.unwrap();
    let mut roots = rustls::RootCertStore::empty();
    for der in config.root_cert.iter().flatten() {
        roots.add(rustls::pki_types::CertificateDer::from(der.clone())).unwrap();
    }
    let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    let server = env.cluster(index).server();
    let addr = server.trim_start_matches("https://");
    let tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
    let stream = tokio_rustls::TlsConnector::from(Arc::new(tls))
        .connect(name, tcp)
        .await
        .unwrap();
    stream.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

/// A client of `user` that reports a 429 instead of retrying it.
async fn unretried(env: &TestEnv, user: User) -> Client {
    let mut config = env.cluster(0).config(user).await.unwrap();
    config.default_retry = false;
    Client::try_from(config).unwrap()
}

/// The status of a discovery request (which every authenticated user may make) and its `Retry-After`.
async fn discovery_status(client: &Client) -> (u16, Option<String>) {
    let request = http::Request::get("/api")
        .body(kube::client::Body::from(Vec::<u8>::new()))
        .unwrap();
    let response = client.send(request).await.unwrap();
    let retry_after = response
        .headers()
        .get("Retry-After")
        .and_then(|v| v.to_str().ok())
        .map(str::to_string);
    (response.status().as_u16(), retry_after)
}

async fn kube_system_uid(env: &TestEnv) -> String {
    let admin = env.cluster(0).client(User::Admin).await.unwrap();
    Api::<Namespace>::all(admin)
        .get("kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http1_only_restart_and_throttle() {
    let options = [ClusterOptions::default(), ClusterOptions::default().http1_only()];
    let Some(mut env) = TestEnv::start_or_skip_with(&options).await.unwrap() else {
        return;
    };

    assert_eq!(
        negotiated(&env, 0).await.as_deref(),
        Some(&b"h2"[..]),
        "HTTP/2 by default"
    );
    assert_eq!(
        negotiated(&env, 1).await.as_deref(),
        Some(&b"http/1.1"[..]),
        "HTTP/1.1 only when asked"
    );

    // Stopped and started again: the same address, identity and objects.
    let uid = kube_system_uid(&env).await;
    let server = env.cluster(0).server();
    let admin = Api::<Namespace>::all(env.cluster(0).client(User::Admin).await.unwrap());
    let kept = Namespace {
        metadata: ObjectMeta {
            name: Some("kept".into()),
            ..Default::default()
        },
        ..Default::default()
    };
    admin.create(&PostParams::default(), &kept).await.unwrap();
    env.stop_apiserver(0).unwrap();
    assert!(admin.get("kept").await.is_err(), "nothing answers while stopped");
    env.start_apiserver(0).await.unwrap();
    assert_eq!(env.cluster(0).server(), server);
    assert_eq!(kube_system_uid(&env).await, uid, "the same cluster");
    let admin = Api::<Namespace>::all(env.cluster(0).client(User::Admin).await.unwrap());
    assert!(admin.get_opt("kept").await.unwrap().is_some(), "its objects kept");
    env.restart_apiserver(0).await.unwrap();
    assert_eq!(kube_system_uid(&env).await, uid);

    // Throttled: alice gets 429 with a Retry-After, bob and the admin are served; lifted, alice is too.
    let alice = unretried(&env, User::Alice).await;
    let bob = unretried(&env, User::Bob).await;
    assert_eq!(discovery_status(&alice).await.0, 200);
    let throttle = env
        .cluster(0)
        .throttle(
            "alice",
            vec![serde_json::json!({"kind": "User", "user": {"name": "alice"}})],
        )
        .await
        .unwrap();
    let (status, retry_after) = discovery_status(&alice).await;
    assert_eq!(status, 429);
    assert!(
        retry_after.is_some_and(|s| s.parse::<u32>().is_ok_and(|n| n >= 1)),
        "a Retry-After in seconds"
    );
    assert_eq!(
        throttle.retry_after(),
        Some("1"),
        "the first rejection asks for a second"
    );
    assert_eq!(discovery_status(&bob).await.0, 200, "only the chosen subjects");
    assert!(admin.get_opt("kept").await.unwrap().is_some(), "the admin is exempt");
    throttle.lift().await.unwrap();
    assert_eq!(discovery_status(&alice).await.0, 200);
}
