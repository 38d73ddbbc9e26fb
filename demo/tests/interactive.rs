//! `kbind-demo` without `--once`, run as the real binary: it prints the UI URL, the token, the
//! consumer kubeconfig and the CLI commands, serves the gateway's API and the UI, and stops
//! cleanly on Ctrl-C (SIGINT). The printed commands run as printed in a shell (the `kbind` and
//! `kubectl-bind` it links included), a restart with the same `--dir` keeps the token and the
//! paths, messages name the gateway, the clusters' clock is today's, and without `--dir` nothing is
//! left in the temporary folder.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use kbind_api::service::{ProviderInfo, WhoAmI, path};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// Generous: the machine running the suite may be compiling.
const DEADLINE: Duration = Duration::from_secs(300);

/// The text after `label` on the line that starts with it.
fn after<'a>(lines: &'a [String], label: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no line starting {label:?} in:\n{}", lines.join("\n")))
}

/// A running `kbind-demo` and what it printed up to "Running until Ctrl-C".
struct Demo {
    child: Child,
    lines: Vec<String>,
}

impl Demo {
    /// Starts `kbind-demo args` with `tmpdir` as its temporary folder.
    async fn start(args: &[&str], tmpdir: &Path) -> Demo {
        let mut child = Command::new(env!("CARGO_BIN_EXE_kbind-demo"))
            .args(args)
            .env_remove("RUST_LOG")
            .env("TMPDIR", tmpdir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("kbind-demo starts");
        let mut reader = BufReader::new(child.stdout.take().expect("stdout piped")).lines();
        let mut lines = Vec::new();
        let until_ready = async {
            while let Some(line) = reader.next_line().await.expect("stdout readable") {
                let done = line.contains("Running until Ctrl-C");
                lines.push(line);
                if done {
                    return;
                }
            }
            panic!("kbind-demo closed its stdout early:\n{}", lines.join("\n"));
        };
        tokio::time::timeout(DEADLINE, until_ready)
            .await
            .expect("kbind-demo printed its commands in time");
        // Nothing more is read; the rest of stdout goes nowhere.
        Demo { child, lines }
    }

    fn ui(&self) -> String {
        after(&self.lines, "The web UI:").trim_end_matches('/').to_string()
    }

    /// The commands printed for another terminal, as a shell script.
    fn commands(&self) -> String {
        let start = self
            .lines
            .iter()
            .position(|l| l.starts_with("Try the CLI"))
            .expect("a command block");
        let mut script = String::from("set -e\n");
        for line in &self.lines[start + 1..] {
            if let Some(command) = line.strip_prefix("  ") {
                script.push_str(command);
                script.push('\n');
            }
        }
        script
    }

    /// Ctrl-C; it must exit 0.
    async fn interrupt(mut self) {
        let pid = self.child.id().expect("running").to_string();
        let sent = std::process::Command::new("kill")
            .args(["-INT", &pid])
            .status()
            .expect("kill runs");
        assert!(sent.success());
        let status = tokio::time::timeout(DEADLINE, self.child.wait())
            .await
            .expect("kbind-demo stops on Ctrl-C")
            .expect("waited");
        assert!(status.success(), "kbind-demo exited {status} on Ctrl-C");
    }
}

/// A shell like a user's in another terminal: no KUBECONFIG, a PATH with kubectl but without
/// cargo's target folder, and a credential cache of its own.
fn shell(script: &str, config_home: &Path) -> std::process::Output {
    let kubectl = std::env::split_paths(&std::env::var_os("PATH").unwrap_or_default())
        .find(|dir| dir.join("kubectl").is_file())
        .expect("kubectl on PATH (the demo's commands use it)");
    let path = std::env::join_paths([kubectl, PathBuf::from("/usr/bin"), PathBuf::from("/bin")]).unwrap();
    std::process::Command::new("bash")
        .args(["-c", script])
        .env_remove("KUBECONFIG")
        .env_remove("KBIND_GATEWAY")
        .env("PATH", path)
        .env("XDG_CONFIG_HOME", config_home)
        .output()
        .expect("bash runs")
}

fn text(output: &std::process::Output) -> String {
    format!(
        "exit {}\nstdout:\n{}\nstderr:\n{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// A loopback port that was free a moment ago (the demo binds it; the window is accepted).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind a free port")
        .local_addr()
        .expect("local addr")
        .port()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_commands_that_run_as_printed_keeps_its_folder_across_restarts_and_stops_on_ctrl_c() {
    let scratch = tempfile::tempdir().expect("temp dir");
    let dir = scratch.path().join("demo");
    let tmpdir = scratch.path().join("tmp");
    let config_home = scratch.path().join("config");
    std::fs::create_dir_all(&tmpdir).unwrap();
    let port = free_port().to_string();
    let dir_arg = dir.to_str().unwrap();
    let demo = Demo::start(&["--port", &port, "--dir", dir_arg], &tmpdir).await;

    let ui = demo.ui();
    let token = after(&demo.lines, "Sign in with the token:").to_string();
    let kubeconfig = after(&demo.lines, "Consumer kubeconfig:").to_string();
    assert_eq!(ui, format!("http://127.0.0.1:{port}"));
    assert_eq!(token.len(), 32, "a 32-digit token: {token}");
    assert!(Path::new(&kubeconfig).starts_with(&dir));
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .expect("kubeconfig written")
            .contains("https://127.0.0.1:")
    );
    let script = demo.commands();
    for command in [
        format!("export KUBECONFIG={kubeconfig}"),
        format!("export PATH=\"{}/bin:$PATH\"", dir.display()),
        format!("kbind login {ui} --token {token}"),
        "kbind catalog".to_string(),
        "kbind bind widgets --namespace team-a --wait".to_string(),
        "kbind status".to_string(),
        "kbind unbind widgets --yes".to_string(),
    ] {
        assert!(script.contains(&command), "missing {command:?} in:\n{script}");
    }

    let http = reqwest::Client::new();
    let provider: ProviderInfo = http
        .get(format!("{ui}{}", path::PROVIDER))
        .send()
        .await
        .expect("the gateway answers")
        .error_for_status()
        .expect("200 from /api/v1/provider")
        .json()
        .await
        .expect("a ProviderInfo");
    assert_eq!(provider.name, "demo-provider");
    assert!(provider.provider_url.starts_with("https://127.0.0.1:"));
    let me: WhoAmI = http
        .get(format!("{ui}{}", path::WHOAMI))
        .bearer_auth(&token)
        .send()
        .await
        .expect("the gateway answers")
        .error_for_status()
        .expect("the printed token signs in")
        .json()
        .await
        .expect("a WhoAmI");
    assert_eq!(me.subject, "token:demo");
    let page = http.get(format!("{ui}/")).send().await.expect("the UI answers");
    assert_eq!(page.status().as_u16(), 200);
    let html = page.text().await.expect("a page");
    assert!(html.to_ascii_lowercase().contains("<html"), "the UI's page: {html}");

    // Every printed command, as printed, in a fresh shell: login, catalog, bind, a widget up and
    // its status down, status, unbind. Then kubectl's plugin lookup finds `kubectl bind`, and the
    // served clock is today's.
    let run = shell(
        &format!(
            "{script}kubectl bind catalog\nkubectl get namespace default -o jsonpath='{{.metadata.creationTimestamp}}'"
        ),
        &config_home,
    );
    let out = text(&run);
    assert!(run.status.success(), "the printed commands failed:\n{out}");
    let stdout = String::from_utf8_lossy(&run.stdout);
    for seen in ["widgets.example.org", "Bound", "Ready", "Unbound"] {
        assert!(stdout.contains(seen), "no {seen:?} in:\n{out}");
    }
    let created: jiff::Timestamp = stdout
        .lines()
        .last()
        .and_then(|l| l.trim().parse().ok())
        .unwrap_or_else(|| panic!("no creation timestamp at the end of:\n{out}"));
    let age = jiff::Timestamp::now().duration_since(created);
    assert!(
        age.abs() < jiff::SignedDuration::from_hours(1),
        "namespace default was created at {created}, not today"
    );
    demo.interrupt().await;

    // A restart with the same --dir: the same token and paths, and the login above still works.
    let demo = Demo::start(&["--port", &port, "--dir", dir_arg], &tmpdir).await;
    assert_eq!(after(&demo.lines, "Sign in with the token:"), token);
    assert_eq!(after(&demo.lines, "Consumer kubeconfig:"), kubeconfig);
    assert_eq!(demo.ui(), ui);
    let exports = format!(
        "export KUBECONFIG={kubeconfig}\nexport PATH=\"{}/bin:$PATH\"\n",
        dir.display()
    );
    let catalog = shell(&format!("{exports}kbind catalog"), &config_home);
    assert!(catalog.status.success(), "after a restart:\n{}", text(&catalog));

    // A credential the gateway no longer accepts: the message names the gateway to log in to.
    let credentials = config_home.join("kbind/credentials");
    for entry in std::fs::read_dir(&credentials).expect("a credential cache") {
        let file = entry.unwrap().path();
        let mut credential: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        credential["token"] = "0".repeat(32).into();
        std::fs::write(&file, credential.to_string()).unwrap();
    }
    let stale = shell(&format!("{exports}kbind catalog"), &config_home);
    assert_eq!(stale.status.code(), Some(3), "{}", text(&stale));
    assert!(
        String::from_utf8_lossy(&stale.stderr).contains(&format!("run `kbind login {ui}` again")),
        "{}",
        text(&stale)
    );
    demo.interrupt().await;

    // Stopped: the error names the gateway it could not reach.
    let unreachable = shell(&format!("{exports}kbind catalog"), &config_home);
    assert!(!unreachable.status.success());
    assert!(
        String::from_utf8_lossy(&unreachable.stderr).contains(&format!("cannot reach the gateway at {ui}")),
        "{}",
        text(&unreachable)
    );

    // Without --dir: a temporary folder, removed on Ctrl-C.
    let demo = Demo::start(&["--port", "0"], &tmpdir).await;
    let files = after(&demo.lines, "Files in:");
    assert!(files.starts_with(tmpdir.to_str().unwrap()), "{files}");
    demo.interrupt().await;
    let left: Vec<PathBuf> = std::fs::read_dir(&tmpdir).unwrap().map(|e| e.unwrap().path()).collect();
    assert!(left.is_empty(), "kbind-demo left {left:?} behind");
}
