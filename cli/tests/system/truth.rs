//! Every message of the real `kbind` binary says what is true and what
//! to do (exit code and the line printed), Ctrl-C says what a bind already did, a slow gateway
//! step shows progress, and the binaries' logs carry no colour codes off a terminal.

use std::path::{Path, PathBuf};

use axum::http::StatusCode;
use serde_json::json;

use super::children::*;
use super::fake_gateway::{FakeGateway, GRANT, consumer_with_kbind, honest_bundle};
use super::{Cli, Run};

const TOKEN: &str = "a-token-for-the-fake-gateway-0123456789";

/// A consumer (`fakeapi serve` with kbind's CRDs, namespaces `kbind`, `team-a`, `other` and a
/// fresh konnector Lease) and a login at a fake gateway.
struct World {
    dir: tempfile::TempDir,
    lines: Lines,
    cluster: FakeCluster,
    gateway: FakeGateway,
}

impl World {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let cluster = consumer_with_kbind(dir.path(), &lines).await;
        let gateway = FakeGateway::start(honest_bundle(&["team-a"])).await;
        let world = Self {
            dir,
            lines,
            cluster,
            gateway,
        };
        let url = world.gateway.url.clone();
        let run = world.kbind(&["login", &url, "--token", TOKEN]).await;
        check(&run, 0, "login at the fake gateway");
        world.gateway.forget();
        world
    }

    async fn kbind(&self, args: &[&str]) -> Run {
        self.kbind_with(args, None).await
    }

    async fn kbind_with(&self, args: &[&str], stdin: Option<&str>) -> Run {
        let cli = Cli {
            kubeconfig: &self.cluster.kubeconfig,
            config_home: &self.dir.path().join("config"),
            lines: &self.lines,
        };
        cli.run(Path::new(env!("CARGO_BIN_EXE_kbind")), args, stdin, &[]).await
    }

    /// Starts `kbind bind widgets -n team-a`, waits until the fake gateway holds the request
    /// matching its stall, interrupts it (SIGINT, as Ctrl-C does) and returns what it printed.
    async fn interrupted_bind(&self, stall: &'static str) -> Run {
        self.gateway.script.lock().stall = Some(stall);
        let child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbind"))
            .args(["bind", "widgets", "-n", "team-a"])
            .arg(format!("--kubeconfig={}", self.cluster.kubeconfig.display()))
            .env("XDG_CONFIG_HOME", self.dir.path().join("config"))
            .env_remove("KUBECONFIG")
            .env_remove("KBIND_GATEWAY")
            .env_remove("KBIND_TOKEN")
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kbind starts");
        let pid = child.id().expect("a running child has a pid");
        tokio::time::timeout(DEADLINE, self.gateway.arrived.notified())
            .await
            .unwrap_or_else(|_| panic!("kbind never sent {stall}; seen {:?}", self.gateway.seen()));
        let status = std::process::Command::new("kill")
            .args(["-INT", &pid.to_string()])
            .status()
            .expect("kill runs");
        assert!(status.success(), "SIGINT sent");
        let output = tokio::time::timeout(DEADLINE, child.wait_with_output())
            .await
            .expect("kbind ends after Ctrl-C")
            .expect("kbind runs");
        self.gateway.script.lock().stall = None;
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// Runs `kbind` with no cluster (a kubeconfig path that does not exist) and config folder `dir`.
async fn kbind_alone(dir: &Path, args: &[&str]) -> Run {
    let lines = Lines::default();
    let cli = Cli {
        kubeconfig: &dir.join("no-such.kubeconfig"),
        config_home: &dir.join("config"),
        lines: &lines,
    };
    cli.run(Path::new(env!("CARGO_BIN_EXE_kbind")), args, None, &[]).await
}

fn check(run: &Run, code: i32, what: &str) {
    assert_eq!(
        run.code, code,
        "{what}: exit code\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

/// The error line of a failed run (`error: ...`), without the prefix.
fn error_line(run: &Run) -> &str {
    run.stderr
        .lines()
        .find_map(|l| l.strip_prefix("error: "))
        .unwrap_or_else(|| panic!("no error line in\n{}", run.stderr))
}

/// A server that answers every request with a web page: `status` and an HTML body.
async fn web_server(status: StatusCode) -> (String, tokio::task::JoinHandle<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr");
    let app = axum::Router::new().fallback(move || async move {
        (
            status,
            [(axum::http::header::CONTENT_TYPE, "text/html; charset=utf-8")],
            "<html><body>Welcome</body></html>",
        )
    });
    let task = tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (addr.to_string(), task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_that_cannot_be_a_namespace_is_refused_before_any_request() {
    let world = World::new().await;
    let long = "a".repeat(300);
    let cases = [
        ("Team-A", "\"Team-A\" is not a namespace name"),
        (long.as_str(), "… (300 characters) is not a namespace name"),
        ("a,,b", "--namespace has an empty name"),
    ];
    for (given, said) in cases {
        let run = world.kbind(&["bind", "widgets", "-n", given]).await;
        check(&run, 2, given);
        let line = error_line(&run);
        assert!(line.contains(said), "{given}: {line}");
        assert!(
            line.contains("lower-case letters, digits and '-'") || given == "a,,b",
            "{line}"
        );
        assert!(!run.stderr.contains("kubectl create namespace"), "{}", run.stderr);
        assert!(
            world.gateway.seen().is_empty(),
            "{given}: nothing asked of the gateway: {:?}",
            world.gateway.seen()
        );
    }
    let pickup = world.gateway.pickup_url();
    let run = world.kbind(&["redeem", &pickup, "-n", "Team-A", "--yes"]).await;
    check(&run, 2, "redeem -n Team-A");
    assert!(
        error_line(&run).starts_with("\"Team-A\" is not a namespace name"),
        "{}",
        run.stderr
    );
    assert!(
        world.gateway.seen().is_empty(),
        "the one-time URL is not spent: {:?}",
        world.gateway.seen()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_command_without_output_says_so_and_names_those_with_it() {
    let dir = tempfile::tempdir().expect("temp dir");
    for args in [
        &["revoke", "g", "-o", "yaml"][..],
        &["unbind", "widgets", "--output=json"],
        &["login", "http://127.0.0.1:1", "-o", "yaml"],
        &["redeem", "-oyaml"],
    ] {
        let run = kbind_alone(dir.path(), args).await;
        check(&run, 2, &format!("{args:?}"));
        assert_eq!(
            run.stderr,
            format!(
                "error: `kbind {}` has no -o/--output; these commands print YAML or JSON with -o: catalog, bind, grants, status\n",
                args[0]
            ),
            "{args:?}"
        );
    }
    let run = kbind_alone(dir.path(), &["-o", "yaml", "status"]).await;
    check(&run, 2, "-o before the command");
    assert_eq!(
        error_line(&run),
        "-o/--output goes after the command: `kbind status -o yaml`"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_dry_run_with_output_is_refused_and_says_why() {
    let world = World::new().await;
    let run = world
        .kbind(&["bind", "widgets", "-n", "team-a", "--dry-run", "-o", "yaml"])
        .await;
    check(&run, 2, "bind --dry-run -o yaml");
    assert_eq!(
        error_line(&run),
        "--dry-run shows a plan and -o prints the bundle, which exists only once the gateway issued the Grant; \
         drop -o to see the plan, or --dry-run to get the bundle"
    );
    assert!(run.stdout.is_empty(), "{}", run.stdout);
    assert!(world.gateway.seen().is_empty(), "{:?}", world.gateway.seen());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_says_what_the_url_is_when_it_is_not_a_gateway() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (page, _page) = web_server(StatusCode::OK).await;
    let (missing, _missing) = web_server(StatusCode::NOT_FOUND).await;

    let run = kbind_alone(dir.path(), &["login", &format!("http://{page}/"), "--token", "t-123"]).await;
    check(&run, 1, "login at a web page");
    assert!(
        error_line(&run).starts_with(&format!(
            "http://{page} is not a kbind gateway (GET /api/v1/provider answered HTTP 200 with text/html, not a provider description)"
        )),
        "{}",
        run.stderr
    );
    let run = kbind_alone(
        dir.path(),
        &["login", &format!("http://{missing}/docs"), "--token", "t-123"],
    )
    .await;
    check(&run, 1, "login at a path that serves 404 pages");
    assert!(
        error_line(&run).starts_with(&format!(
            "http://{missing}/docs is not a kbind gateway (GET /api/v1/provider answered HTTP 404 with text/html"
        )),
        "{}",
        run.stderr
    );

    let run = kbind_alone(
        dir.path(),
        &["login", "ftp://files.example.org/kbind", "--token", "t-123"],
    )
    .await;
    check(&run, 2, "login at ftp://");
    assert_eq!(
        error_line(&run),
        "ftp://files.example.org/kbind is not a gateway URL: only http(s) URLs are gateways, e.g. https://kbind.example.com"
    );

    let run = kbind_alone(dir.path(), &["login", &format!("https://{page}"), "--token", "t-123"]).await;
    check(&run, 1, "login with https:// at a plain-HTTP server");
    assert_eq!(
        error_line(&run),
        format!("the server at https://{page} does not speak TLS; is it http://{page}?")
    );
    assert!(!run.stderr.contains("t-123"), "the token is never printed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_logged_in_names_both_ways_to_log_in() {
    let dir = tempfile::tempdir().expect("temp dir");
    let run = kbind_alone(dir.path(), &["grants"]).await;
    check(&run, 3, "grants before any login");
    assert_eq!(
        error_line(&run),
        "not logged in; run `kbind login <gateway-url>` (OIDC in a browser) or `kbind login <gateway-url> --token <token>` first"
    );
    let run = kbind_alone(dir.path(), &["catalog", "--gateway", "https://gw.example.org"]).await;
    check(&run, 3, "catalog at a gateway never logged in to");
    assert_eq!(
        error_line(&run),
        "not logged in to https://gw.example.org; run `kbind login https://gw.example.org` (OIDC in a browser) or \
         `kbind login https://gw.example.org --token <token>` first"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_checks_the_grant_exists_before_asking_and_asks_in_words() {
    let world = World::new().await;
    let run = world.kbind(&["revoke", "no-such-grant"]).await;
    check(&run, 5, "revoke of a grant that does not exist");
    assert_eq!(
        error_line(&run),
        format!(
            "no grant no-such-grant of yours at {}; `kbind grants` lists them",
            world.gateway.url
        )
    );
    assert!(
        !world.gateway.seen().iter().any(|r| r.starts_with("DELETE")),
        "{:?}",
        world.gateway.seen()
    );

    let run = world.kbind(&["revoke", GRANT]).await;
    check(&run, 2, "revoke without --yes and no terminal");
    assert_eq!(
        error_line(&run),
        format!(
            "Revoke Grant {GRANT}? Its consumer's credential will stop working. There is no terminal to ask on: pass --yes to confirm."
        )
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_and_a_used_pickup_each_say_what_happened_once() {
    let world = World::new().await;
    let pickup = world.gateway.pickup_url();
    let cases = [
        ("this pickup URL expired; bind again for a new one", "expired"),
        ("this pickup URL was used already; bind again for a new one", "used"),
    ];
    for (message, what) in cases {
        world.gateway.script.lock().pickup_error =
            Some((410, json!({"code": 410, "reason": "PickupGone", "message": message})));
        let run = world.kbind(&["redeem", &pickup, "-n", "team-a", "--yes"]).await;
        check(&run, 5, what);
        let line = error_line(&run);
        assert_eq!(line, format!("{message} (PickupGone)"), "{what}");
        assert_eq!(line.matches("for a new one").count(), 1, "said once: {line}");
        assert!(!line.contains("works once"), "{what}: {line}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeem_dash_with_empty_stdin_says_stdin_was_empty() {
    let world = World::new().await;
    let run = world.kbind_with(&["redeem", "-", "-n", "team-a"], Some("")).await;
    check(&run, 2, "redeem - with nothing on stdin");
    let line = error_line(&run);
    assert!(
        line.starts_with("`-` reads the pickup URL from stdin, and stdin was empty"),
        "{line}"
    );
    assert!(line.contains("KBIND_PICKUP_URL"), "{line}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_interrupted_bind_says_what_it_did_and_the_gateway_step_shows_progress() {
    let world = World::new().await;
    let waiting = "waiting for the gateway to issue the Grant for widgets (it waits for the provider) ...";

    // Ctrl-C while the gateway is still issuing the Grant.
    let run = world.interrupted_bind("POST /api/v1/bind").await;
    check(&run, 130, "Ctrl-C during the gateway step");
    let progress = run.stderr.find(waiting);
    let line = error_line(&run);
    assert!(
        progress.is_some_and(|at| at < run.stderr.find("error: ").unwrap_or(0)),
        "the gateway step shows progress while it waits:\n{}",
        run.stderr
    );
    assert!(
        line.starts_with("interrupted while the gateway was issuing a Grant for Export widgets"),
        "{line}"
    );
    assert!(line.contains("`kbind grants` lists it"), "{line}");

    // Ctrl-C after the Grant was created, while its bundle is being picked up.
    let run = world.interrupted_bind("GET /api/v1/pickup").await;
    check(&run, 130, "Ctrl-C during the pickup");
    assert_eq!(
        error_line(&run),
        format!(
            "interrupted after the gateway created Grant {GRANT}, before its bundle was picked up; nothing was applied: \
             run `kbind revoke {GRANT}`, or bind again"
        )
    );

    // Uninterrupted, the progress line comes before the Grant is reported.
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 0, "bind");
    let lines: Vec<&str> = run.stderr.lines().collect();
    assert_eq!(lines.first().copied(), Some(waiting), "progress first:\n{}", run.stderr);
    assert!(
        lines
            .get(1)
            .is_some_and(|l| l.starts_with(&format!("Grant {GRANT} created"))),
        "{}",
        run.stderr
    );
}

/// `konnector run` with text logs on the consumer of `kubeconfig`, `env` added.
fn konnector_command(kubeconfig: &Path) -> Vec<String> {
    vec![
        sibling_binary("konnector", "konnector").display().to_string(),
        "run".into(),
        format!("--kubeconfig={}", kubeconfig.display()),
        "--namespace=kbind".into(),
        "--metrics-addr=127.0.0.1:0".into(),
        "--health-addr=127.0.0.1:0".into(),
        "--log-format=text".into(),
        "--log-level=info".into(),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_off_a_terminal_carry_no_colour_codes() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lines = Lines::default();
    let cluster = FakeCluster::start(dir.path(), "consumer", &lines).await;
    install_kbind(&cluster.client, &["kbind"], &lines).await;
    let command = konnector_command(&cluster.kubeconfig);
    let mut child = tokio::process::Command::new(&command[0])
        .args(&command[1..])
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("konnector starts");
    follow_stderr(&mut child, "konnector", lines.clone());
    let logged = eventually("the konnector to log that it listens", &lines, async || {
        let all = lines.lock().clone();
        all.iter()
            .any(|l| l.starts_with("[konnector]") && l.contains("listening"))
            .then_some(all)
    })
    .await;
    let coloured: Vec<&String> = logged.iter().filter(|l| l.contains("\x1b[")).collect();
    assert!(coloured.is_empty(), "colour codes in a pipe: {coloured:?}");
}

/// Runs the konnector on a pseudo-terminal (`script`), `env` added, until it logs that it
/// listens; returns that output. The konnector is stopped through the terminal's hang-up.
async fn konnector_on_a_terminal(kubeconfig: &Path, env: &[(&str, &str)], lines: &Lines) -> String {
    use tokio::io::AsyncBufReadExt;
    let command = konnector_command(kubeconfig).join(" ");
    let mut child = tokio::process::Command::new("script")
        .args(["-qfec", &command, "/dev/null"])
        .env_remove("KUBECONFIG")
        .env_remove("RUST_LOG")
        .env_remove("NO_COLOR")
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .kill_on_drop(true)
        .spawn()
        .expect("script starts");
    let stdout = child.stdout.take().expect("stdout piped");
    let mut reader = tokio::io::BufReader::new(stdout).lines();
    let mut seen = String::new();
    let found = tokio::time::timeout(DEADLINE, async {
        while let Ok(Some(line)) = reader.next_line().await {
            seen.push_str(&line);
            seen.push('\n');
            if line.contains("listening") {
                return true;
            }
        }
        false
    })
    .await;
    assert!(
        matches!(found, Ok(true)),
        "the konnector on a terminal never logged `listening`:\n{seen}\nlogs:\n{}",
        dump(lines)
    );
    // SIGTERM to `script` hangs the terminal up, which ends the konnector too.
    if let Some(pid) = child.id() {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &pid.to_string()])
            .status();
    }
    let _ = tokio::time::timeout(DEADLINE, child.wait()).await;
    seen
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_color_turns_colour_off_on_a_terminal() {
    if which("script").is_none() {
        eprintln!("skipped: no `script` (util-linux) for a pseudo-terminal");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let lines = Lines::default();
    let cluster = FakeCluster::start(dir.path(), "consumer", &lines).await;
    install_kbind(&cluster.client, &["kbind"], &lines).await;
    let plain = konnector_on_a_terminal(&cluster.kubeconfig, &[("NO_COLOR", "1")], &lines).await;
    assert!(!plain.contains("\x1b["), "NO_COLOR=1 on a terminal:\n{plain:?}");
    // The control: on the same terminal without NO_COLOR the lines are coloured, so the
    // check above is about NO_COLOR, not about a terminal that was never one.
    let coloured = konnector_on_a_terminal(&cluster.kubeconfig, &[], &lines).await;
    assert!(coloured.contains("\x1b["), "a terminal without NO_COLOR:\n{coloured:?}");
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}
