//! Serving over a real loopback socket: verified TLS for `kube::Client`, HTTP/2 through ALPN,
//! plain HTTP only when asked, and shutdown.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::routing::get;
use fakeapi::FakeCluster;
use fakeapi::serve::{
    Certificates, ClusterServeOptions, ServeConfig, Transport, UserSpec, render_kubeconfig, serve, serve_cluster,
};
use futures::stream;
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_rustls::rustls::{self, ClientConfig, RootCertStore, pki_types::ServerName};

/// Every wait in these tests ends by this deadline, with a message saying what did not happen.
const DEADLINE: Duration = Duration::from_secs(20);

async fn client_from(kubeconfig: &str) -> kube::Client {
    let kubeconfig = Kubeconfig::from_yaml(kubeconfig).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn get_request(path: &str) -> http::Request<Vec<u8>> {
    http::Request::get(path).body(Vec::new()).unwrap()
}

async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

/// A router answering `/version` as kube-apiserver does.
fn version_router() -> Router {
    Router::new().route(
        "/version",
        get(|| async {
            axum::Json(json!({
                "major": "1", "minor": "35", "gitVersion": "v1.35.0-fakeapi", "gitCommit": "", "gitTreeState": "clean",
                "buildDate": "2025-01-01T00:00:00Z", "goVersion": "go1.24", "compiler": "gc", "platform": "linux/amd64",
            }))
        }),
    )
}

#[tokio::test]
async fn kube_client_from_the_admin_kubeconfig_reaches_the_admin_api_over_verified_tls() {
    let cluster = FakeCluster::builder("tls-test").build();
    let alice: UserSpec = "alice:alice-token:dev".parse().unwrap();
    let options = ClusterServeOptions::default().user(alice);
    let server = serve_cluster(cluster.clone(), options).await.unwrap();
    assert!(server.url().starts_with("https://127.0.0.1:"), "{}", server.url());
    assert_eq!(
        server.addr().port(),
        server.url().rsplit(':').next().unwrap().parse::<u16>().unwrap()
    );

    let admin = client_from(&server.admin_kubeconfig().unwrap()).await;
    let identity: Value = within("GET identity", admin.request(get_request("/fakeapi/v1/identity")))
        .await
        .unwrap();
    assert_eq!(identity, json!({"name": "tls-test", "uid": cluster.identity_uid()}));

    // The same server, another user: authenticated, but not an admin.
    let alice = client_from(&server.user_kubeconfig("alice").unwrap()).await;
    let err = within(
        "alice GET identity",
        alice.request::<Value>(get_request("/fakeapi/v1/identity")),
    )
    .await
    .unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err:?}");
    server.shutdown().await;
}

#[tokio::test]
async fn version_is_served_to_a_client_trusting_the_ca_and_refused_with_another_ca() {
    let server = serve(ServeConfig::new(version_router()).name("versioned"))
        .await
        .unwrap();
    let trusted = client_from(&server.kubeconfig("any-token", "tester")).await;
    let info = within("GET /version", trusted.apiserver_version()).await.unwrap();
    assert_eq!(info.git_version, "v1.35.0-fakeapi");

    let other_ca = Certificates::generate("impostor").unwrap().ca_pem;
    assert_ne!(Some(other_ca.as_str()), server.ca_pem());
    let wrong = render_kubeconfig("versioned", server.url(), Some(&other_ca), "tester", "any-token");
    let untrusting = client_from(&wrong).await;
    let err = within("GET /version with a wrong CA", untrusting.apiserver_version())
        .await
        .unwrap_err();
    assert!(
        !matches!(err, kube::Error::Api(_)),
        "no HTTP answer may pass an unverified server: {err:?}"
    );
}

#[tokio::test]
async fn plain_http_on_the_tls_port_gets_the_kube_apiserver_answer() {
    let server = serve(ServeConfig::new(version_router())).await.unwrap();
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut answer = String::new();
    within("the plain HTTP answer", stream.read_to_string(&mut answer))
        .await
        .unwrap();
    assert_eq!(
        answer,
        "HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n"
    );
}

#[tokio::test]
async fn insecure_http_serves_plain_http_only_when_asked() {
    let cluster = FakeCluster::builder("plain").build();
    let options = ClusterServeOptions::default().transport(Transport::InsecureHttp);
    let server = serve_cluster(cluster.clone(), options).await.unwrap();
    assert!(server.url().starts_with("http://127.0.0.1:"));
    assert_eq!(server.ca_pem(), None);
    let kubeconfig = server.admin_kubeconfig().unwrap();
    assert!(!kubeconfig.contains("certificate-authority-data"));

    let client = client_from(&kubeconfig).await;
    let identity: Value = within("GET identity", client.request(get_request("/fakeapi/v1/identity")))
        .await
        .unwrap();
    assert_eq!(identity["uid"], cluster.identity_uid());
}

async fn negotiated_protocol(server: &fakeapi::serve::RunningServer, offered: &[&[u8]]) -> Option<Vec<u8>> {
    let mut roots = RootCertStore::empty();
    let pem = server.ca_pem().unwrap().as_bytes();
    for cert in pem_certificates(pem) {
        roots.add(cert).unwrap();
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = offered.iter().map(|p| p.to_vec()).collect();
    let connector = tokio_rustls::TlsConnector::from(Arc::new(config));
    let tcp = TcpStream::connect(server.addr()).await.unwrap();
    let name = ServerName::try_from("localhost").unwrap();
    let tls = within("TLS handshake", connector.connect(name, tcp)).await.unwrap();
    tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec)
}

fn pem_certificates(pem: &[u8]) -> Vec<rustls::pki_types::CertificateDer<'static>> {
    use rustls::pki_types::pem::PemObject;
    rustls::pki_types::CertificateDer::pem_slice_iter(pem)
        .collect::<Result<_, _>>()
        .unwrap()
}

#[tokio::test]
async fn tls_offers_http2_and_http1_through_alpn() {
    let server = serve(ServeConfig::new(version_router())).await.unwrap();
    assert_eq!(
        negotiated_protocol(&server, &[b"h2", b"http/1.1"]).await,
        Some(b"h2".to_vec())
    );
    assert_eq!(
        negotiated_protocol(&server, &[b"http/1.1"]).await,
        Some(b"http/1.1".to_vec())
    );
}

#[tokio::test]
async fn http1_only_leaves_http2_out_of_alpn() {
    let server = serve(ServeConfig::new(version_router()).http1_only()).await.unwrap();
    assert_eq!(
        negotiated_protocol(&server, &[b"h2", b"http/1.1"]).await,
        Some(b"http/1.1".to_vec())
    );
}

/// A response that never ends, like a watch.
fn endless_router() -> Router {
    Router::new().route(
        "/watch",
        get(|| async {
            let ticks = stream::unfold(0u64, |n| async move {
                tokio::time::sleep(Duration::from_millis(20)).await;
                Some((Ok::<_, std::io::Error>(format!("{n}\n")), n + 1))
            });
            Body::from_stream(ticks)
        }),
    )
}

#[tokio::test]
async fn shutdown_closes_endless_responses_after_the_grace_period_and_stops_accepting() {
    let config = ServeConfig::new(endless_router())
        .transport(Transport::InsecureHttp)
        .grace_period(Duration::from_millis(200));
    let server = serve(config).await.unwrap();
    let addr = server.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"GET /watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 256];
    let n = within("the first bytes of the stream", stream.read(&mut buf))
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));

    within("shutdown", server.shutdown()).await;
    // The open stream ends (EOF or reset) rather than hanging.
    within("the stream to close", async {
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => continue,
            }
        }
    })
    .await;
    assert!(TcpStream::connect(addr).await.is_err(), "the listener should be closed");
}

#[tokio::test]
async fn dropping_the_server_stops_it() {
    let server = serve(ServeConfig::new(version_router()).grace_period(Duration::from_millis(100)))
        .await
        .unwrap();
    let addr = server.addr();
    drop(server);
    within("the listener to close after drop", async {
        while TcpStream::connect(addr).await.is_ok() {
            tokio::task::yield_now().await;
        }
    })
    .await;
}

#[tokio::test]
async fn users_with_a_repeated_name_or_token_are_refused_before_serving() {
    let cluster = FakeCluster::builder("dupes").build();
    let same_name = ClusterServeOptions::default()
        .user("alice:one".parse().unwrap())
        .user("alice:two".parse().unwrap());
    let err = serve_cluster(cluster.clone(), same_name).await.unwrap_err();
    assert!(
        matches!(err, fakeapi::serve::Error::DuplicateUser { ref user } if user == "alice"),
        "{err:?}"
    );

    let same_token = ClusterServeOptions::default()
        .user("alice:shared".parse().unwrap())
        .user("bob:shared".parse().unwrap());
    let err = serve_cluster(cluster.clone(), same_token).await.unwrap_err();
    assert!(
        matches!(err, fakeapi::serve::Error::DuplicateToken { ref user } if user == "bob"),
        "{err:?}"
    );
    assert_eq!(
        cluster.authenticate("shared"),
        None,
        "nothing is registered when serving is refused"
    );
    assert!(!format!("{err}").contains("shared"), "errors never show tokens");
}

/// kbind's transport (kbind_cluster::transport) multiplexes a client's requests over HTTP/2,
/// and the server caps streams per connection (kube-apiserver: 100). More watches than that
/// must all start: the transport dials another connection instead of queueing them behind
/// watches that only end at their timeout, minutes later.
#[tokio::test]
async fn more_watches_than_one_http2_connection_carries_all_start_through_kbinds_transport() {
    use kbind_cluster::{ClusterClient, WatchEvent, WatchParams};

    let cluster = FakeCluster::builder("streams").seed(5).build();
    let server = serve_cluster(cluster.clone(), ClusterServeOptions::default())
        .await
        .unwrap();
    let kubeconfig = Kubeconfig::from_yaml(&server.admin_kubeconfig().unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    let client = kbind_cluster::KubeClusterClient::from_config(config).unwrap();
    let configmaps = kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());

    let watches = fakeapi::serve::HTTP2_MAX_STREAMS as usize + 30;
    let mut streams = Vec::with_capacity(watches);
    for i in 0..watches {
        let params = WatchParams::default().fields(&format!("metadata.name=cm-{i}"));
        let stream = within(
            "opening a watch",
            client.watch(&configmaps, Some("default"), &params, "0"),
        )
        .await
        .unwrap_or_else(|e| panic!("watch {i} refused: {e}"));
        streams.push(stream);
    }
    let admin = cluster.admin_client();
    for i in 0..watches {
        let cm = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": format!("cm-{i}"), "namespace": "default"},
        }))
        .unwrap();
        admin
            .create(&configmaps, Some("default"), &cm, &Default::default())
            .await
            .unwrap();
    }
    for (i, stream) in streams.iter_mut().enumerate() {
        let event = within(&format!("watch {i} of {watches} sees its ConfigMap"), async {
            loop {
                match futures::StreamExt::next(stream).await {
                    Some(Ok(WatchEvent::Added(obj))) => return obj,
                    Some(Ok(_)) => continue,
                    other => panic!("watch {i} ended: {other:?}"),
                }
            }
        })
        .await;
        assert_eq!(event.metadata.name.as_deref(), Some(format!("cm-{i}").as_str()));
    }
}
