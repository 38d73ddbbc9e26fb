//! `KubeClusterClient` against a hostile or misconfigured server on loopback: a proxy's
//! plain-text 404 is not "absent", and a body without end is refused at the cap instead of
//! filling memory.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, Error, KubeClusterClient, WatchParams,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the server answers: a function of method and path (query included) to raw bytes
/// after the status line and headers, plus the head itself.
type Answer = Arc<dyn Fn(&str, &str) -> Reply + Send + Sync>;

/// One scripted HTTP/1.1 reply.
enum Reply {
    /// A complete answer: status line, content type and body (with its length).
    Whole {
        status: &'static str,
        content_type: &'static str,
        body: Vec<u8>,
    },
    /// A 200 whose chunked body streams `chunk` for ever (until the client hangs up).
    Endless { chunk: Vec<u8> },
}

/// Serves `answer` on a loopback port until the test ends.
async fn serve(answer: Answer) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind loopback");
    let addr = listener.local_addr().expect("local address");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            tokio::spawn(handle(stream, answer.clone()));
        }
    });
    addr
}

async fn handle(mut stream: TcpStream, answer: Answer) {
    loop {
        let Some((method, path)) = read_request(&mut stream).await else {
            return;
        };
        let written = match answer(&method, &path) {
            Reply::Whole {
                status,
                content_type,
                body,
            } => {
                let head = format!(
                    "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n",
                    body.len()
                );
                let mut out = head.into_bytes();
                out.extend_from_slice(&body);
                stream.write_all(&out).await
            }
            Reply::Endless { chunk } => {
                let head = "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ntransfer-encoding: chunked\r\n\r\n";
                if stream.write_all(head.as_bytes()).await.is_err() {
                    return;
                }
                let mut framed = format!("{:x}\r\n", chunk.len()).into_bytes();
                framed.extend_from_slice(&chunk);
                framed.extend_from_slice(b"\r\n");
                // Until the client gives up and closes the connection.
                while stream.write_all(&framed).await.is_ok() {}
                return;
            }
        };
        if written.is_err() {
            return;
        }
    }
}

/// Reads one request head (and its body, if it declares one); `None` once the client hangs up.
async fn read_request(stream: &mut TcpStream) -> Option<(String, String)> {
    let mut buf = Vec::new();
    let mut byte = [0u8; 1];
    while !buf.ends_with(b"\r\n\r\n") {
        if stream.read(&mut byte).await.ok()? == 0 {
            return None;
        }
        buf.push(byte[0]);
    }
    let head = String::from_utf8_lossy(&buf).to_string();
    let mut words = head.split_whitespace();
    let method = words.next()?.to_string();
    let path = words.next()?.to_string();
    let length = head
        .lines()
        .find_map(|l| {
            let (name, value) = l.split_once(':')?;
            name.eq_ignore_ascii_case("content-length")
                .then(|| value.trim().parse::<usize>().ok())
                .flatten()
        })
        .unwrap_or(0);
    let mut body = vec![0u8; length];
    stream.read_exact(&mut body).await.ok()?;
    Some((method, path))
}

fn client(addr: SocketAddr, limit: Option<u64>) -> KubeClusterClient {
    let config = kube::Config::new(format!("http://{addr}").parse().expect("loopback URL"));
    match limit {
        Some(limit) => KubeClusterClient::from_config_with_limit(config, limit),
        None => KubeClusterClient::from_config(config),
    }
    .expect("a client for a plain-http loopback server")
}

fn widgets() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// Fails the test with `what` if `fut` does not finish within a few seconds.
async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(20), fut)
        .await
        .unwrap_or_else(|_| panic!("timed out: {what}"))
}

fn plain_not_found() -> Answer {
    Arc::new(|_, _| Reply::Whole {
        status: "404 Not Found",
        content_type: "text/plain; charset=utf-8",
        body: b"404 page not found\n".to_vec(),
    })
}

#[tokio::test]
async fn plain_text_404_is_not_absent() {
    let addr = serve(plain_not_found()).await;
    let client = client(addr, None);
    let res = widgets();

    let read = within("get", client.get_opt(&res, Some("ns1"), "a")).await;
    let err = read.expect_err("a proxy's 404 must not read as an absent object");
    assert!(!err.is_not_found(), "{err:?}");
    assert!(
        matches!(&err, Error::NotServed { message } if message.contains("without a Kubernetes NotFound Status") && message.contains("404 page not found")),
        "{err:?}"
    );
    assert!(err.is_transient(), "whatever is in front of the server may route again");

    let deleted = within(
        "delete",
        client.delete(&res, Some("ns1"), "a", &DeleteParams::background()),
    )
    .await;
    let err = deleted.expect_err("a proxy's 404 on delete is not a completed delete");
    assert!(!err.is_not_found(), "{err:?}");

    // kube's own watch path reconstructs the text into a Status of its own; still not absent.
    let watch = within("watch", client.watch(&res, Some("ns1"), &WatchParams::default(), "0")).await;
    let err = watch.err().expect("the watch cannot start");
    assert!(!err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn a_kubernetes_not_found_status_is_absent() {
    let addr = serve(Arc::new(|_, _| Reply::Whole {
        status: "404 Not Found",
        content_type: "application/json",
        body: br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"widgets.example.org \"a\" not found","reason":"NotFound","details":{"name":"a","group":"example.org","kind":"widgets"},"code":404}"#.to_vec(),
    }))
    .await;
    let client = client(addr, None);
    let read = within("get", client.get_opt(&widgets(), Some("ns1"), "a")).await;
    assert!(matches!(read, Ok(None)), "{read:?}");
}

#[tokio::test]
async fn a_json_404_that_is_not_a_status_is_not_absent() {
    let addr = serve(Arc::new(|_, _| Reply::Whole {
        status: "404 Not Found",
        content_type: "application/json",
        body: br#"{"error":"no route","code":404,"message":"not here"}"#.to_vec(),
    }))
    .await;
    let err = within("get", client(addr, None).get_opt(&widgets(), Some("ns1"), "a"))
        .await
        .expect_err("only kind Status is the apiserver's word");
    assert!(!err.is_not_found(), "{err:?}");
}

#[tokio::test]
async fn an_oversized_answer_is_refused_at_the_cap() {
    // Declared too large: refused before reading.
    let addr = serve(Arc::new(|_, _| Reply::Whole {
        status: "200 OK",
        content_type: "application/json",
        body: vec![b' '; 4096],
    }))
    .await;
    let err = within("get", client(addr, Some(1024)).get(&widgets(), Some("ns1"), "a"))
        .await
        .expect_err("4 KiB over a 1 KiB cap");
    assert!(
        matches!(&err, Error::Transport(text) if text.contains("exceeds the limit of 1024 bytes")),
        "{err:?}"
    );

    // Without an end (chunked, no length): stops at the cap instead of reading for ever.
    let addr = serve(Arc::new(|_, _| Reply::Endless {
        chunk: vec![b' '; 64 * 1024],
    }))
    .await;
    let err = within(
        "list of an endless body",
        client(addr, Some(1024 * 1024)).list(&widgets(), None, &Default::default()),
    )
    .await
    .expect_err("an endless body cannot be a list");
    assert!(
        matches!(&err, Error::Transport(text) if text.contains("exceeds the limit of 1048576 bytes")),
        "{err:?}"
    );
}

#[tokio::test]
async fn a_watch_event_without_end_is_refused_but_a_long_watch_is_not() {
    // One event that never ends (no newline): refused at the cap.
    let addr = serve(Arc::new(|_, _| Reply::Endless {
        chunk: vec![b' '; 64 * 1024],
    }))
    .await;
    let client_small = client(addr, Some(1024 * 1024));
    let mut events = within(
        "watch start",
        client_small.watch(&widgets(), None, &WatchParams::default(), "1"),
    )
    .await
    .expect("the watch starts with a 200");
    let item = within("the oversized event", events.next()).await;
    let err = item.expect("an error item, not the end").expect_err("not an event");
    assert!(
        err.to_string()
            .contains("exceeds the limit of 1048576 bytes for one watch event"),
        "{err:?}"
    );

    // Many small events add up past the cap without tripping it.
    let event = br#"{"type":"BOOKMARK","object":{"apiVersion":"example.org/v1","kind":"Widget","metadata":{"resourceVersion":"7"}}}"#;
    let mut line = event.to_vec();
    line.push(b'\n');
    let addr = serve(Arc::new(move |_, _| Reply::Endless { chunk: line.clone() })).await;
    let client_tiny = client(addr, Some(1024));
    let events = within(
        "watch start",
        client_tiny.watch(&widgets(), None, &WatchParams::default(), "1"),
    )
    .await
    .expect("the watch starts");
    let seen: Vec<_> = within("many small events", events.take(100).collect()).await;
    assert!(seen.iter().all(Result::is_ok), "{:?}", seen.iter().find(|e| e.is_err()));
    assert_eq!(seen.len(), 100, "100 events of ~110 bytes pass a 1 KiB per-event cap");
}
