//! Against the real `kbind-backend` binary over `fakeapi serve`, as a hostile tenant would try
//! them: wrong tokens from an address every tenant shares (an ingress)
//! do not lock a valid token out of sign-in, and slow request bodies on every connection slot
//! are cut off by `--body-read-timeout`, so `/healthz` answers again.

#[path = "../../tests/support/children.rs"]
mod children;

use std::net::SocketAddr;
use std::time::Duration;

use children::*;
use kbind_api::service::path;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

const TOKEN: &str = "alice-secret-token-0123456789abcdef";

/// A provider cluster with kbind's CRDs and the gateway on it.
struct World {
    _dir: tempfile::TempDir,
    lines: Lines,
    _provider: FakeCluster,
    _backend: Process,
    addr: SocketAddr,
}

impl World {
    /// `kbind-backend run --gateway --issuer` with `extra` flags, once `/readyz` answers.
    async fn start(extra: &[&str]) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
        offer_widgets(&provider.client, &lines).await;
        let backend = start_backend(
            std::path::Path::new(env!("CARGO_BIN_EXE_kbind-backend")),
            &provider,
            dir.path(),
            &format!("{TOKEN},alice\n"),
            extra,
            &lines,
        )
        .await;
        World {
            _dir: dir,
            lines,
            _provider: provider,
            addr: backend.addr,
            _backend: backend.process,
        }
    }

    fn url(&self, path: &str) -> String {
        format!("http://{}{path}", self.addr)
    }
}

/// `GET /api/v1/whoami` with `token`, optionally as forwarded for `client`: the status.
async fn whoami(world: &World, http: &reqwest::Client, token: &str, client: Option<&str>) -> u16 {
    let mut request = http.get(world.url(path::WHOAMI)).bearer_auth(token);
    if let Some(client) = client {
        request = request.header("x-forwarded-for", client);
    }
    let response = request
        .send()
        .await
        .unwrap_or_else(|e| panic!("whoami: {e}\n{}", dump(&world.lines)));
    response.status().as_u16()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_tokens_from_a_shared_address_never_lock_a_valid_token_out() {
    // One trusted proxy: requests with X-Forwarded-For count against the address it names,
    // requests without it against the peer (127.0.0.1 for every request of this test).
    let world = World::start(&["--trusted-proxies=1"]).await;
    let http = reqwest::Client::new();
    for client in [None, Some("203.0.113.7")] {
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(whoami(&world, &http, "a-wrong-token", client).await);
        }
        // The repeated wrong token is throttled (the attacker's own problem)...
        assert_eq!(statuses[0], 401, "{client:?}: {statuses:?}");
        assert!(statuses.contains(&429), "{client:?}: never throttled: {statuses:?}");
        // ...and a valid token from the same address still signs in.
        assert_eq!(
            whoami(&world, &http, TOKEN, client).await,
            200,
            "{client:?}: a valid token was refused after 40 wrong ones\n{}",
            dump(&world.lines)
        );
    }
    // Many different wrong tokens (a guesser) do not lock the valid one out either.
    for i in 0..40 {
        whoami(&world, &http, &format!("guess-{i}"), None).await;
    }
    assert_eq!(whoami(&world, &http, TOKEN, None).await, 200);
}

/// Reads one connection until the server closes it; `None` after `deadline`.
async fn read_to_close(mut stream: impl tokio::io::AsyncRead + Unpin, deadline: Duration) -> Option<String> {
    let mut answer = Vec::new();
    let read = tokio::time::timeout(deadline, stream.read_to_end(&mut answer))
        .await
        .ok()?;
    match read {
        Ok(_) => {}
        // A server that closed with unread bytes pending resets the connection: closed too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("reading a slow connection: {e}"),
    }
    Some(String::from_utf8_lossy(&answer).into_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_bodies_beyond_max_connections_time_out_and_healthz_answers_again() {
    const SLOTS: usize = 4;
    let world = World::start(&[
        &format!("--max-connections={SLOTS}"),
        "--body-read-timeout=2s",
        "--header-read-timeout=60s",
    ])
    .await;
    // More slow binds than slots: whole headers, then a body trickled a byte at a time, for as
    // long as the server lets the connection live (what a slowloris tenant does).
    let mut slow = Vec::new();
    for _ in 0..SLOTS + 2 {
        let mut stream = tokio::net::TcpStream::connect(world.addr).await.expect("connect");
        let head = format!(
            "POST {} HTTP/1.1\r\nHost: kbind\r\nAuthorization: Bearer {TOKEN}\r\n\
             Content-Type: application/json\r\nContent-Length: 100000\r\n\r\n{{",
            path::BIND
        );
        stream.write_all(head.as_bytes()).await.expect("send headers");
        let (read, mut write) = stream.into_split();
        tokio::spawn(async move {
            // The attack's own pace, not synchronisation: it stops when the server closes.
            while write.write_all(b" ").await.is_ok() {
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        });
        slow.push(read);
    }
    // A health check behind them all is answered once the body timeout freed the slots.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(120))
        .build()
        .expect("client");
    let health = http
        .get(world.url(path::HEALTHZ))
        .send()
        .await
        .unwrap_or_else(|e| panic!("/healthz did not answer: {e}\n{}", dump(&world.lines)));
    assert_eq!(health.status().as_u16(), 200);
    // Every slow client got a 408 (or a reset, if the close raced its next byte).
    for (i, read) in slow.into_iter().enumerate() {
        let answer = read_to_close(read, DEADLINE)
            .await
            .unwrap_or_else(|| panic!("slow client {i} was never disconnected\n{}", dump(&world.lines)));
        assert!(
            answer.is_empty() || answer.starts_with("HTTP/1.1 408"),
            "slow client {i}: {answer}"
        );
    }
}
