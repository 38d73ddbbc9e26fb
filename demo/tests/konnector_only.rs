//! `kbind-demo --konnector-only` as a new user runs it: `--once` observes every scripted step and
//! exits 0; left running, cutting the provider through the fault API marks the consumer object
//! `status-stale`, healing clears it, and Ctrl-C stops the demo cleanly.

use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use fakeapi::sample::widgets;
use kbind_cluster::{ClusterClientExt, KubeClusterClient};
use parking_lot::Mutex;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Generous: the Connection reconciler notices a cut at its next heartbeat (30 s).
const DEADLINE: Duration = Duration::from_secs(150);

async fn client(path: &std::path::Path) -> (kube::Client, KubeClusterClient) {
    let text = std::fs::read_to_string(path).expect("the demo wrote its kubeconfig");
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&text).expect("a valid kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a usable kubeconfig");
    let seam = KubeClusterClient::from_config(config.clone()).expect("a client");
    (kube::Client::try_from(config).expect("a client"), seam)
}

async fn eventually(what: &str, output: &Arc<Mutex<Vec<String>>>, mut check: impl AsyncFnMut() -> bool) {
    let start = tokio::time::Instant::now();
    while !check().await {
        assert!(
            start.elapsed() < DEADLINE,
            "timed out waiting for {what}; demo output:\n{}",
            output.lock().join("\n")
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn demo_once_observes_every_step_and_exits_0() {
    let dir = tempfile::tempdir().unwrap();
    let out = tokio::time::timeout(
        DEADLINE,
        Command::new(env!("CARGO_BIN_EXE_kbind-demo"))
            .args(["--konnector-only", "--once", "--dir"])
            .arg(dir.path())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .expect("the demo finishes")
    .expect("the demo runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "exit {:?}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    for step in [
        "Connection provider is Ready",
        "ClusterBinding widgets is Ready",
        "created widget default/hello",
        "widget default/hello arrived",
        "has status phase=Ready",
        "Every step was observed",
    ] {
        assert!(stdout.contains(step), "missing {step:?} in:\n{stdout}");
    }
    for file in ["consumer.kubeconfig", "provider.kubeconfig"] {
        let meta = std::fs::metadata(dir.path().join(file)).expect("kubeconfig written");
        assert_eq!(
            std::os::unix::fs::PermissionsExt::mode(&meta.permissions()) & 0o077,
            0,
            "{file} is private"
        );
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn a_cut_marks_status_stale_healing_clears_it_and_ctrl_c_stops_the_demo() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_kbind-demo"))
        .args(["--konnector-only", "--dir"])
        .arg(dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("the demo starts");
    let output = Arc::new(Mutex::new(Vec::new()));
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let collected = output.clone();
    let (running_tx, running_rx) = tokio::sync::oneshot::channel();
    tokio::spawn(async move {
        let mut running_tx = Some(running_tx);
        while let Ok(Some(line)) = lines.next_line().await {
            if line.contains("Running until Ctrl-C")
                && let Some(tx) = running_tx.take()
            {
                let _ = tx.send(());
            }
            collected.lock().push(line);
        }
    });
    tokio::time::timeout(DEADLINE, running_rx)
        .await
        .expect("the scripted part finishes")
        .expect("the demo prints its next steps");

    let (provider_admin, _) = client(&dir.path().join("provider.kubeconfig")).await;
    let (_, consumer) = client(&dir.path().join("consumer.kubeconfig")).await;
    let stale = async || {
        consumer
            .get_opt(&widgets(), Some("default"), "hello")
            .await
            .ok()
            .flatten()
            .and_then(|w| w.metadata.annotations)
            .is_some_and(|a| a.contains_key("core.kbind.io/status-stale"))
    };
    assert!(!stale().await, "not stale while connected");

    let post = |path: &'static str| http::Request::post(path).body(Vec::new()).unwrap();
    provider_admin
        .request_text(post("/fakeapi/v1/partition"))
        .await
        .expect("partition");
    eventually("the status-stale annotation", &output, async || stale().await).await;

    provider_admin
        .request_text(post("/fakeapi/v1/heal"))
        .await
        .expect("heal");
    eventually("the annotation to go after healing", &output, async || !stale().await).await;

    let interrupted = std::process::Command::new("kill")
        .args(["-INT", &child.id().expect("running").to_string()])
        .status()
        .expect("kill runs");
    assert!(interrupted.success());
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("the demo stops on Ctrl-C")
        .expect("wait");
    assert!(status.success(), "exit {status:?}");
}
