//! A served cluster that turns into a black hole (it accepts, never answers, closes nothing),
//! seen through kbind's own transport under `KubeClusterClient`: over HTTP/2 and over the
//! HTTP/1.1 fallback a request gives up by the request timeout, and over HTTP/2 an open watch
//! ends once a keep-alive ping goes unanswered. Real sockets and the real clock: every wait is
//! bounded by a deadline far above what is expected, and nothing asserts on elapsed time.

use std::sync::Arc;
use std::time::Duration;

use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, RunningServer, serve_cluster};
use futures::StreamExt;
use kbind_cluster::transport::TransportOptions;
use kbind_cluster::{
    ApiResource, ClusterClient, DynamicObject, Error, KubeClusterClient, WatchEvent, WatchParams, with_request_timeout,
};
use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::json;

/// Every wait ends by this deadline, with a message saying what did not happen.
const DEADLINE: Duration = Duration::from_secs(20);
/// The request timeout of these clients: short, so a swallowed request gives up quickly.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(1);

async fn within<F: std::future::Future>(what: &str, future: F) -> F::Output {
    tokio::time::timeout(DEADLINE, future)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

fn configmaps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

/// A `KubeClusterClient` of the server's admin over kbind's transport with `transport`'s pings.
async fn kube_client(server: &RunningServer, transport: &TransportOptions) -> KubeClusterClient {
    let kubeconfig = Kubeconfig::from_yaml(&server.admin_kubeconfig().unwrap()).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    assert!(
        kbind_cluster::transport::supports(&config),
        "kbind's transport, not kube's"
    );
    KubeClusterClient::from_config_with_transport(config, kbind_cluster::limit::DEFAULT_MAX_RESPONSE_BYTES, transport)
        .unwrap()
}

/// A client as the konnector builds one: kbind's transport under the request timeout.
async fn bounded_client(server: &RunningServer) -> Arc<dyn ClusterClient> {
    let client = kube_client(server, &TransportOptions::default()).await;
    with_request_timeout(Arc::new(client), REQUEST_TIMEOUT)
}

async fn a_get_into_the_black_hole_times_out(options: ClusterServeOptions) {
    let cluster = FakeCluster::builder("hole").build();
    let server = serve_cluster(cluster.clone(), options).await.unwrap();
    let open = bounded_client(&server).await;
    within("a get before the hole", open.get(&namespaces(), None, "default"))
        .await
        .expect("answered before the hole");

    cluster.black_hole();
    // On the connection that was open before the hole.
    let err = within(
        "a get on an open connection to give up",
        open.get(&namespaces(), None, "default"),
    )
    .await
    .expect_err("nothing answers in the hole");
    assert!(
        matches!(&err, Error::Timeout(message) if message.starts_with("get namespaces default: no answer within")),
        "{err:?}"
    );
    // On a connection dialled into the hole (accepted, TLS never answered).
    let fresh = bounded_client(&server).await;
    let err = within(
        "a get on a new connection to give up",
        fresh.get(&namespaces(), None, "default"),
    )
    .await
    .expect_err("nothing answers in the hole");
    assert!(matches!(err, Error::Timeout(_)), "{err:?}");

    cluster.restore();
    within("a get after the hole", open.get(&namespaces(), None, "default"))
        .await
        .expect("answered once the hole is lifted");
    within(
        "a get on the new client after the hole",
        fresh.get(&namespaces(), None, "default"),
    )
    .await
    .expect("answered once the hole is lifted");
}

#[tokio::test]
async fn a_get_into_a_black_hole_times_out_over_http2() {
    a_get_into_the_black_hole_times_out(ClusterServeOptions::default()).await;
}

#[tokio::test]
async fn a_get_into_a_black_hole_times_out_over_the_http1_fallback() {
    a_get_into_the_black_hole_times_out(ClusterServeOptions::default().http1_only()).await;
}

#[tokio::test]
async fn an_open_watch_ends_by_an_unanswered_http2_ping() {
    let cluster = FakeCluster::builder("hole").build();
    let server = serve_cluster(cluster.clone(), ClusterServeOptions::default())
        .await
        .unwrap();
    let pings = TransportOptions {
        http2_keep_alive_interval: Duration::from_millis(200),
        http2_keep_alive_timeout: Duration::from_millis(500),
        ..TransportOptions::default()
    };
    // Under the request timeout as in the konnector: it bounds the opening, not the stream.
    let client = with_request_timeout(Arc::new(kube_client(&server, &pings).await), REQUEST_TIMEOUT);
    let rv = cluster.resource_version().to_string();
    let mut watch = within(
        "opening the watch",
        client.watch(
            &configmaps(),
            Some("default"),
            &WatchParams::default().fields("metadata.name=before"),
            &rv,
        ),
    )
    .await
    .unwrap();
    let cm: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "before", "namespace": "default"},
    }))
    .unwrap();
    cluster
        .admin_client()
        .create(&configmaps(), Some("default"), &cm, &Default::default())
        .await
        .unwrap();
    match within("the watch sees the ConfigMap", watch.next()).await {
        Some(Ok(WatchEvent::Added(obj))) => assert_eq!(obj.metadata.name.as_deref(), Some("before")),
        other => panic!("the watch is live before the hole, got {other:?}"),
    }

    cluster.black_hole();
    let ended = within("the watch to end by the unanswered ping", watch.next()).await;
    let ended = match ended {
        None => None,
        Some(Err(e)) => Some(e),
        Some(Ok(event)) => panic!("nothing comes out of the hole, got {event:?}"),
    };
    // kube's line reader ends quietly on some errors; the rest surface as a transport error,
    // which the watcher retries.
    if let Some(err) = ended {
        assert!(matches!(err, Error::Transport(_)), "{err:?}");
    }
}
