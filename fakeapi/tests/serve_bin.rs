//! The `fakeapi serve` binary: kubeconfigs written once listening, users, clean exit on SIGTERM.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// Kills the server if a test fails before it could stop it.
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn wait_for_file(path: &Path, child: &mut Child) {
    let started = Instant::now();
    while !path.exists() {
        if let Some(status) = child.try_wait().unwrap() {
            panic!("fakeapi exited with {status} before writing {}", path.display());
        }
        assert!(started.elapsed() < DEADLINE, "{} never appeared", path.display());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let started = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(started.elapsed() < DEADLINE, "fakeapi did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

async fn client_from(path: &Path) -> kube::Client {
    let kubeconfig = Kubeconfig::read_from(path).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .unwrap();
    kube::Client::try_from(config).unwrap()
}

fn identity_request() -> http::Request<Vec<u8>> {
    http::Request::get("/fakeapi/v1/identity").body(Vec::new()).unwrap()
}

#[tokio::test]
async fn serve_writes_kubeconfigs_once_listening_and_stops_on_sigterm() {
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("admin.kubeconfig");
    let child = Command::new(env!("CARGO_BIN_EXE_fakeapi"))
        .args([
            "serve",
            "--addr",
            "127.0.0.1:0",
            "--name",
            "bin-test",
            "--seed",
            "5",
            "--kcp-like",
            "--no-gc",
        ])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args(["--user", "alice:alice-secret-token:dev,ops"])
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut server = Running(child);
    wait_for_file(&kubeconfig, &mut server.0);

    let stdout = server.0.stdout.take().unwrap();
    let line = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        BufReader::new(stdout).read_line(&mut line).map(|_| line)
    });
    let line = tokio::time::timeout(DEADLINE, line).await.unwrap().unwrap().unwrap();
    let expected_end = format!(" kubeconfig {}\n", kubeconfig.display());
    assert!(line.starts_with("listening on https://127.0.0.1:"), "{line}");
    assert!(line.ends_with(&expected_end), "{line}");
    assert!(!line.contains("alice-secret-token"));

    let admin = client_from(&kubeconfig).await;
    let identity: Value = admin.request(identity_request()).await.unwrap();
    assert_eq!(identity["name"], "bin-test");
    assert!(!identity["uid"].as_str().unwrap().is_empty());

    let alice_path = dir.path().join("admin.kubeconfig.alice");
    let alice_yaml = std::fs::read_to_string(&alice_path).unwrap();
    assert!(alice_yaml.contains("alice-secret-token"));
    let alice = client_from(&alice_path).await;
    let err = alice.request::<Value>(identity_request()).await.unwrap_err();
    assert!(matches!(&err, kube::Error::Api(s) if s.code == 403), "{err:?}");

    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "temporary files left behind: {leftovers:?}");

    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&kubeconfig).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "a kubeconfig holds a token: owner-only, got {mode:o}");
        let pid = server.0.id().to_string();
        assert!(Command::new("kill").args(["-TERM", &pid]).status().unwrap().success());
        let status = wait_for_exit(&mut server.0);
        assert!(status.success(), "fakeapi exited with {status} on SIGTERM");
    }
}

#[test]
fn serve_fails_with_a_message_when_the_address_is_taken() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kc");
    let output = Command::new(env!("CARGO_BIN_EXE_fakeapi"))
        .args(["serve", "--addr", &addr])
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains(&format!("failed to bind {addr}")), "{stderr}");
    assert!(!kubeconfig.exists());
}

#[test]
fn serve_refuses_a_malformed_user() {
    let dir = tempfile::tempdir().unwrap();
    let output = Command::new(env!("CARGO_BIN_EXE_fakeapi"))
        .args(["serve", "--addr", "127.0.0.1:0", "--user", "alice"])
        .arg("--kubeconfig")
        .arg(dir.path().join("kc"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("expected NAME:TOKEN"), "{stderr}");
}
