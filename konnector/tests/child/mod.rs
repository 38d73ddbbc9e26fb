//! What every test that runs `konnector` as a child process shares: its stderr kept for failure
//! messages, the listening addresses it logs, waiting on a condition with a deadline, and helm.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

#[path = "../../../tests/support/helm.rs"]
mod helm;
#[allow(unused_imports)] // Only the chart tests render with helm.
pub use helm::helm;

/// Generous: the machine running the suite may be compiling, or running real apiservers.
pub const DEADLINE: Duration = Duration::from_secs(180);
/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(100);

/// Every stderr line of the konnectors of one test, kept for failure messages.
pub type Lines = Arc<Mutex<Vec<String>>>;

/// The collected lines, for a failure message.
pub fn dump(lines: &Lines) -> String {
    lines.lock().join("\n")
}

/// Polls `check` until it returns `Some`, or fails with `what` and the konnectors' log.
pub async fn eventually<T>(what: &str, lines: &Lines, mut check: impl AsyncFnMut() -> Option<T>) -> T {
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}; konnector log:\n{}",
            dump(lines)
        );
        tokio::time::sleep(POLL).await;
    }
}

/// Collects the child's stderr lines (prefixed with `identity`); resolves with the listening
/// addresses by server name (`metrics`, `health`) once both are logged.
pub fn follow_stderr(
    child: &mut Child,
    identity: &str,
    lines: Lines,
) -> tokio::sync::oneshot::Receiver<BTreeMap<String, SocketAddr>> {
    let stderr = child.stderr.take().expect("the child's stderr is piped");
    let (tx, rx) = tokio::sync::oneshot::channel();
    let identity = identity.to_string();
    tokio::spawn(async move {
        let mut tx = Some(tx);
        let mut addrs = BTreeMap::new();
        let mut reader = BufReader::new(stderr).lines();
        while let Ok(Some(line)) = reader.next_line().await {
            if let Ok(json) = serde_json::from_str::<Value>(&line)
                && json["message"] == "listening"
                && let (Some(server), Some(addr)) = (json["server"].as_str(), json["addr"].as_str())
                && let Ok(addr) = addr.parse()
            {
                addrs.insert(server.to_string(), addr);
                if addrs.len() == 2
                    && let Some(tx) = tx.take()
                {
                    let _ = tx.send(addrs.clone());
                }
            }
            lines.lock().push(format!("[{identity}] {line}"));
        }
    });
    rx
}

/// A `konnector run` child process.
pub struct Konnector {
    /// The process.
    pub child: Child,
    /// Where it serves `/metrics`.
    pub metrics: SocketAddr,
}

impl Konnector {
    /// Starts `konnector run` with the tests' flags plus `extra`; returns once it listens.
    pub async fn start(kubeconfig: &Path, identity: &str, extra: &[&str], lines: Lines) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_konnector"))
            .arg("run")
            .arg("--kubeconfig")
            .arg(kubeconfig)
            .args([
                "--namespace=kbind",
                "--leader-elect=true",
                "--metrics-addr=127.0.0.1:0",
                "--health-addr=127.0.0.1:0",
                "--log-format=json",
                "--log-level=info",
                &format!("--identity={identity}"),
            ])
            .args(extra)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("konnector starts");
        let addrs = follow_stderr(&mut child, identity, lines.clone());
        let addrs = tokio::time::timeout(DEADLINE, addrs)
            .await
            .unwrap_or_else(|_| panic!("konnector {identity} never logged its addresses:\n{}", dump(&lines)))
            .unwrap_or_else(|_| panic!("konnector {identity} exited before listening:\n{}", dump(&lines)));
        Self {
            child,
            metrics: addrs["metrics"],
        }
    }

    /// Sends `signal` with kill(1).
    pub fn signal(&self, signal: &str) {
        let pid = self.child.id().expect("still running").to_string();
        let sent = std::process::Command::new("kill")
            .args([signal, &pid])
            .status()
            .unwrap();
        assert!(sent.success(), "kill {signal} {pid}");
    }

    /// SIGKILL: no shutdown path runs, the leader Lease stays held.
    pub async fn kill_hard(mut self) {
        self.child.start_kill().unwrap();
        self.child.wait().await.unwrap();
    }

    /// SIGTERM, then the exit code.
    pub async fn terminate(mut self, lines: &Lines) -> Option<i32> {
        self.signal("-TERM");
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .unwrap_or_else(|_| panic!("konnector did not stop on SIGTERM:\n{}", dump(lines)))
            .unwrap();
        status.code()
    }
}
