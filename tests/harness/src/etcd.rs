//! The one etcd server an environment's apiservers share, each under its own key prefix.

use std::path::Path;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Instant;

use crate::Error;
use crate::net::{POLL, free_port, poll_until, port_clash};
use crate::process::{Process, log_tail};

/// A running single-member etcd on loopback.
#[derive(Debug)]
pub(crate) struct Etcd {
    process: Process,
    port: u16,
}

/// Start attempts before a port clash is reported as an error.
const ATTEMPTS: usize = 3;

impl Etcd {
    /// Starts etcd with its data under `dir` and waits until `/health` says so.
    pub(crate) async fn start(binary: &Path, dir: &Path, deadline: Instant) -> Result<Self, Error> {
        let mut attempt = 0;
        loop {
            attempt += 1;
            let (client, peer) = (free_port()?, free_port()?);
            let mut process = Process::spawn("etcd", binary, &args(dir, client, peer), dir.join("etcd.log"))?;
            match wait_healthy(&mut process, client, deadline).await {
                Ok(()) => return Ok(Etcd { process, port: client }),
                Err(Error::Exited { log, .. }) if port_clash(&log) && attempt < ATTEMPTS => continue,
                Err(err) => return Err(err),
            }
        }
    }

    /// The client URL apiservers use (`--etcd-servers`).
    pub(crate) fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// The etcd process id.
    pub(crate) fn pid(&self) -> u32 {
        self.process.id()
    }
}

fn args(dir: &Path, client: u16, peer: u16) -> Vec<String> {
    let client_url = format!("http://127.0.0.1:{client}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    vec![
        "--name=kbind".into(),
        format!("--data-dir={}", dir.join("etcd-data").display()),
        format!("--listen-client-urls={client_url}"),
        format!("--advertise-client-urls={client_url}"),
        format!("--listen-peer-urls={peer_url}"),
        format!("--initial-advertise-peer-urls={peer_url}"),
        format!("--initial-cluster=kbind={peer_url}"),
        // Why: test data is thrown away; fsync on a shared disk is most of etcd's latency.
        "--unsafe-no-fsync".into(),
        "--log-level=warn".into(),
    ]
}

async fn wait_healthy(process: &mut Process, port: u16, deadline: Instant) -> Result<(), Error> {
    let log = process.log_path().to_path_buf();
    let pid = process.id();
    poll_until(
        &format!("etcd (pid {pid}) /health"),
        deadline,
        || process.check_running(),
        || log_tail(&log, 30),
        || async move { healthy(port).await.then_some(()) },
    )
    .await
}

/// Asks etcd's `/health` over plain HTTP/1.0, which needs no client library.
async fn healthy(port: u16) -> bool {
    tokio::time::timeout(POLL * 10, ask_health(port)).await.unwrap_or(false)
}

async fn ask_health(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)).await else {
        return false;
    };
    if stream
        .write_all(b"GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .is_err()
    {
        return false;
    }
    let mut response = String::new();
    stream.read_to_string(&mut response).await.is_ok() && response.contains(r#""health":"true""#)
}
