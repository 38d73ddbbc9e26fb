//! The real `kbind` binary where no server is needed: help with the exit codes, completions,
//! usage errors, not-logged-in errors and an unreachable gateway.

use std::process::Command;

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

fn kbind(config: &std::path::Path, args: &[&str]) -> Run {
    let output = Command::new(env!("CARGO_BIN_EXE_kbind"))
        .args(args)
        .env("XDG_CONFIG_HOME", config)
        .env_remove("KBIND_GATEWAY")
        .env_remove("KBIND_TOKEN")
        .output()
        .expect("kbind runs");
    Run {
        code: output.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

#[test]
fn help_documents_the_exit_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = kbind(dir.path(), &["--help"]);
    assert_eq!(run.code, 0);
    insta::assert_snapshot!("help", run.stdout);
}

#[test]
fn completions_are_generated_for_each_shell() {
    let dir = tempfile::tempdir().expect("temp dir");
    for shell in ["bash", "zsh", "fish"] {
        let run = kbind(dir.path(), &["completion", shell]);
        assert_eq!(run.code, 0, "{shell}: {}", run.stderr);
        assert!(run.stdout.contains("kbind") && run.stdout.contains("unbind"), "{shell}");
    }
}

#[test]
fn usage_errors_exit_2() {
    let dir = tempfile::tempdir().expect("temp dir");
    assert_eq!(kbind(dir.path(), &["no-such-command"]).code, 2);
    assert_eq!(kbind(dir.path(), &["bind", "x", "--timeout", "soon"]).code, 2);
    assert_eq!(kbind(dir.path(), &["login", "not a url", "--token", "t"]).code, 2);
}

#[test]
fn commands_that_need_a_login_exit_3_and_say_how() {
    let dir = tempfile::tempdir().expect("temp dir");
    for args in [
        &["catalog"][..],
        &["grants"],
        &["revoke", "g", "--yes"],
        &["bind", "widgets", "-n", "a"],
    ] {
        let run = kbind(dir.path(), args);
        assert_eq!(run.code, 3, "{args:?}: {}", run.stderr);
        assert!(run.stderr.contains("kbind login"), "{args:?}: {}", run.stderr);
    }
}

#[test]
fn an_unreachable_gateway_exits_1_and_says_so() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A port nobody listens on: bound, then closed.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let run = kbind(dir.path(), &["login", &format!("http://{addr}"), "--token", "secret-t"]);
    assert_eq!(run.code, 1, "{}", run.stderr);
    assert!(run.stderr.contains("cannot reach the gateway"), "{}", run.stderr);
    assert!(!run.stderr.contains("secret-t"));
}

#[test]
fn an_unreachable_consumer_is_named_in_the_error() {
    let dir = tempfile::tempdir().expect("temp dir");
    // A port nobody listens on: bound, then closed.
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr");
    let kubeconfig = dir.path().join("consumer.kubeconfig");
    let yaml = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://{addr}\n\
         contexts:\n- name: c\n  context: {{cluster: c, user: u}}\ncurrent-context: c\n\
         users:\n- name: u\n  user: {{token: secret-consumer-token}}\n"
    );
    std::fs::write(&kubeconfig, yaml).expect("write kubeconfig");
    let run = kbind(
        dir.path(),
        &["status", "--kubeconfig", kubeconfig.to_str().expect("utf-8 path")],
    );
    assert_ne!(run.code, 0, "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("consumer's API server https://{addr}")),
        "the error must name the server it could not reach: {}",
        run.stderr
    );
    assert!(!run.stderr.contains("secret-consumer-token"));
}
