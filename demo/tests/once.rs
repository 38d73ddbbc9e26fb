//! `kbind-demo --once`, run as the real binary: login → catalog → bind → an object synced both
//! ways → status → unbind through the kbind CLI in process; exit 0 only if every step was observed.

use std::time::Duration;

use tokio::process::Command;

/// Generous: the machine running the suite may be compiling.
const DEADLINE: Duration = Duration::from_secs(300);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn once_observes_every_step_of_the_cli_path() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = Command::new(env!("CARGO_BIN_EXE_kbind-demo"))
        .args(["--once", "--port", "0", "--dir"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
        .env_remove("KUBECONFIG")
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(DEADLINE, run)
        .await
        .expect("kbind-demo --once finished in time")
        .expect("kbind-demo runs");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "kbind-demo --once exited {}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    for step in [
        "kbind login",
        "kbind catalog",
        "kbind bind",
        "provider: widget team-a/hello arrived",
        "status phase=Ready from the provider",
        "kbind status",
        "kbind unbind",
        "Every step was observed.",
    ] {
        assert!(stdout.contains(step), "no {step:?} in:\n{stdout}");
    }
}
