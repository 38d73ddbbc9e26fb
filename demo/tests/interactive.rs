//! `kbind-demo` without `--once`, run as the real binary: it prints the UI URL, the token, the
//! consumer kubeconfig and the CLI commands, serves the gateway's API and the UI, and stops
//! cleanly on Ctrl-C (SIGINT).

use std::process::Stdio;
use std::time::Duration;

use kbind_api::service::{ProviderInfo, WhoAmI, path};
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

/// Generous: the machine running the suite may be compiling.
const DEADLINE: Duration = Duration::from_secs(180);

/// The text after `label` on the line that starts with it.
fn after<'a>(lines: &'a [String], label: &str) -> &'a str {
    lines
        .iter()
        .find_map(|l| l.strip_prefix(label))
        .map(str::trim)
        .unwrap_or_else(|| panic!("no line starting {label:?} in:\n{}", lines.join("\n")))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prints_the_url_token_and_commands_serves_the_api_and_ui_and_stops_on_ctrl_c() {
    let dir = tempfile::tempdir().expect("temp dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_kbind-demo"))
        .args(["--port", "0", "--dir"])
        .arg(dir.path())
        .env_remove("RUST_LOG")
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

    let ui = after(&lines, "The web UI:").trim_end_matches('/').to_string();
    let token = after(&lines, "Sign in with the token:").to_string();
    let kubeconfig = after(&lines, "Consumer kubeconfig:").to_string();
    assert!(ui.starts_with("http://127.0.0.1:"), "{ui}");
    assert_eq!(token.len(), 32, "a 32-digit token: {token}");
    assert!(std::path::Path::new(&kubeconfig).starts_with(dir.path()));
    assert!(
        std::fs::read_to_string(&kubeconfig)
            .expect("kubeconfig written")
            .contains("https://127.0.0.1:")
    );
    let text = lines.join("\n");
    for command in [
        format!("export KUBECONFIG={kubeconfig}"),
        format!("kbind login {ui} --token {token}"),
        "kbind catalog".to_string(),
        "kbind bind widgets --namespace team-a --wait".to_string(),
        "kbind status".to_string(),
        "kbind unbind widgets --yes".to_string(),
    ] {
        assert!(text.contains(&command), "missing {command:?} in:\n{text}");
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

    let pid = child.id().expect("running").to_string();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &pid])
        .status()
        .expect("kill runs");
    assert!(sent.success());
    let status = tokio::time::timeout(DEADLINE, child.wait())
        .await
        .expect("kbind-demo stops on Ctrl-C")
        .expect("waited");
    assert!(status.success(), "kbind-demo exited {status} on Ctrl-C");
}
