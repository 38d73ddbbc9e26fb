//! The real `kbind` binary against a real `kbind-backend run --gateway --issuer --reaper` on a
//! `fakeapi serve` provider and a `fakeapi serve` consumer with `konnector run`: every command's
//! exit code, the main outputs as insta snapshots (UIDs, ages, URLs and ports normalised), and
//! `kubectl bind` through kubectl's plugin mechanism.

#[path = "../../tests/support/children.rs"]
mod children;
#[path = "system/fake_gateway.rs"]
mod fake_gateway;
#[path = "system/truth.rs"]
mod truth;
#[path = "system/untrusted.rs"]
mod untrusted;

use std::path::{Path, PathBuf};

use children::*;
use k8s_openapi::api::core::v1::Namespace;
use kbind_api::service::{BindRequest, BindResponse, path};
use kbind_cluster::{ClusterClient, ClusterClientExt};
use serde_json::{Value, json};

const TOKEN: &str = "alice-secret-token-0123456789abcdef";
const TEAM: &str = "team-a";

/// What one `kbind` run returned.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

/// Where a CLI run points: the consumer's kubeconfig, the config folder, and the logs to show
/// when it hangs.
struct Cli<'a> {
    kubeconfig: &'a Path,
    config_home: &'a Path,
    lines: &'a Lines,
}

impl Cli<'_> {
    /// Runs `program` with `args` (no ambient kubeconfig, gateway, token or pickup URL), `stdin`
    /// written and closed, `env` added.
    async fn run(&self, program: &Path, args: &[&str], stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
        use tokio::io::AsyncWriteExt;
        let mut command = tokio::process::Command::new(program);
        command
            .args(args)
            .arg(format!("--kubeconfig={}", self.kubeconfig.display()))
            .env("XDG_CONFIG_HOME", self.config_home)
            .env_remove("KUBECONFIG")
            .env_remove("KBIND_GATEWAY")
            .env_remove("KBIND_TOKEN")
            .env_remove("KBIND_PICKUP_URL")
            .envs(env.iter().copied())
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        let mut child = command.spawn().expect("kbind starts");
        let mut input = child.stdin.take().expect("stdin piped");
        if let Some(text) = stdin {
            input.write_all(text.as_bytes()).await.expect("stdin written");
        }
        drop(input);
        let output = tokio::time::timeout(DEADLINE, child.wait_with_output())
            .await
            .unwrap_or_else(|_| panic!("kbind {args:?} did not finish; logs:\n{}", dump(self.lines)))
            .expect("kbind runs");
        Run {
            code: output.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
        }
    }
}

/// The clusters, the backend, and a config folder for the CLI.
struct World {
    dir: tempfile::TempDir,
    lines: Lines,
    provider: FakeCluster,
    consumer: FakeCluster,
    gateway: String,
    _backend: Process,
}

impl World {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
        let consumer = FakeCluster::start(dir.path(), "consumer", &lines).await;
        offer_widgets(&provider.client, &lines).await;
        install_kbind(&consumer.client, &["kbind", TEAM, "other"], &lines).await;
        let (backend, gateway) = backend(dir.path(), &provider, &lines).await;
        Self {
            dir,
            lines,
            provider,
            consumer,
            gateway,
            _backend: backend,
        }
    }

    fn config_home(&self) -> PathBuf {
        self.dir.path().join("config")
    }

    /// Runs `kbind` with `args` against the consumer, with this world's config folder.
    async fn kbind(&self, args: &[&str]) -> Run {
        self.run_program(Path::new(env!("CARGO_BIN_EXE_kbind")), args, None)
            .await
    }

    async fn run_program(&self, program: &Path, args: &[&str], path: Option<&str>) -> Run {
        let env: Vec<(&str, &str)> = path.map(|p| ("PATH", p)).into_iter().collect();
        let cli = Cli {
            kubeconfig: &self.consumer.kubeconfig,
            config_home: &self.config_home(),
            lines: &self.lines,
        };
        cli.run(program, args, None, &env).await
    }

    /// Normalises what changes between runs: URLs and ports, UIDs, grant names, ages.
    fn normalise(&self, text: &str) -> String {
        let text = text.replace(&self.gateway, "http://GATEWAY");
        let uid = regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").expect("regex");
        let text = uid.replace_all(&text, "<uid>");
        let grant = regex::Regex::new(r"\bg-[0-9a-z-]+|grant-[0-9a-z]+").expect("regex");
        let text = grant.replace_all(&text, "<grant>");
        let port = regex::Regex::new(r"127\.0\.0\.1:\d+").expect("regex");
        let text = port.replace_all(&text, "127.0.0.1:<port>");
        let time = regex::Regex::new(r"\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(\.\d+)?Z").expect("regex");
        time.replace_all(&text, "<time>").into_owned()
    }

    async fn consumer_uid(&self) -> String {
        let ns: Namespace = self
            .consumer
            .client
            .get_typed(None, "kube-system")
            .await
            .expect("kube-system");
        ns.metadata.uid.expect("a uid")
    }

    /// Binds over HTTP, as the web UI does, and returns the pickup URL.
    async fn bind_over_http(&self) -> BindResponse {
        let request = BindRequest {
            export: "widgets".into(),
            consumer_cluster_uid: self.consumer_uid().await,
            namespaces: vec![TEAM.into()],
            konnector_namespace: None,
        };
        let response = reqwest::Client::new()
            .post(format!("{}{}", self.gateway, path::BIND))
            .bearer_auth(TOKEN)
            .json(&request)
            .send()
            .await
            .expect("bind answers");
        assert_eq!(response.status().as_u16(), 201, "bind over HTTP\n{}", dump(&self.lines));
        response.json().await.expect("a BindResponse")
    }

    /// Waits until `kbind grants` lists none and the provider holds no Grant object (a revoked
    /// Grant is listed no more while the issuer still cleans up; binding again needs it gone).
    async fn grants_gone(&self) {
        eventually("the grant revoked", &self.lines, async || {
            (self.kbind(&["grants"]).await.stdout == "You have no grants.\n").then_some(())
        })
        .await;
        let p = &self.provider.client;
        eventually("the Grant gone on the provider", &self.lines, async || {
            let list = p
                .list(&erase::<kbind_api::Grant>(), None, &Default::default())
                .await
                .ok()?;
            list.items.is_empty().then_some(())
        })
        .await;
    }

    fn konnector(&self) -> Process {
        konnector(&self.consumer.kubeconfig, &["--retry-period=1s"], &self.lines)
    }

    async fn widget_on(&self, client: &dyn ClusterClient, name: &str) -> Option<Value> {
        client
            .get_opt(&widgets(), Some(TEAM), name)
            .await
            .expect("read a widget")
            .map(|o| serde_json::to_value(o).expect("json"))
    }

    async fn create_widget(&self, name: &str) {
        let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": TEAM}, "spec": {"size": 1}});
        let c = &self.consumer.client;
        eventually("widgets served on the consumer", &self.lines, async || {
            c.list(&widgets(), Some(TEAM), &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await;
        c.create(&widgets(), Some(TEAM), &object(widget), &Default::default())
            .await
            .expect("widget created");
        let p = &self.provider.client;
        eventually(&format!("{name} synced to the provider"), &self.lines, async || {
            p.get_opt(&widgets(), Some(TEAM), name).await.ok()?.map(|_| ())
        })
        .await;
    }
}

async fn backend(dir: &Path, provider: &FakeCluster, lines: &Lines) -> (Process, String) {
    let backend = start_backend(
        &sibling_binary("kbind-backend", "kbind-backend"),
        provider,
        dir,
        &format!("{TOKEN},alice\n"),
        // These stories name namespaces freely (team-a); the default is a per-identity prefix.
        &["--claimable-namespaces=*", "--reaper", "--reap-ttl=1h"],
        lines,
    )
    .await;
    (backend.process, backend.url)
}

fn assert_code(run: &Run, code: i32, what: &str, lines: &Lines) {
    assert_eq!(
        run.code,
        code,
        "{what}: exit code\nstdout:\n{}\nstderr:\n{}\nlogs:\n{}",
        run.stdout,
        run.stderr,
        dump(lines)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_catalog_bind_status_grants_unbind_redeem_orphan_and_exit_codes() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let gw = world.gateway.clone();

    // Not logged in: exit 3 with what to do.
    let run = world.kbind(&["catalog"]).await;
    assert_code(&run, 3, "catalog before login", &lines);
    assert!(run.stderr.contains("kbind login"), "{}", run.stderr);

    // A bad token is refused and nothing is cached.
    let run = world.kbind(&["login", &gw, "--token", "wrong-token"]).await;
    assert_code(&run, 3, "login with a bad token", &lines);
    assert!(!run.stderr.contains("wrong-token"), "the token is never printed");
    insta::assert_snapshot!("login_bad_token", world.normalise(&run.stderr));
    let run = world.kbind(&["grants"]).await;
    assert_code(&run, 3, "grants after a failed login", &lines);

    // Usage errors are exit 2.
    let run = world.kbind(&["bind"]).await;
    assert_code(&run, 2, "bind without an export", &lines);

    // Login: cached 0600, one file per gateway, the token never printed.
    let run = world.kbind(&["login", &gw, "--token", TOKEN]).await;
    assert_code(&run, 0, "login", &lines);
    assert!(!run.stdout.contains(TOKEN) && !run.stderr.contains(TOKEN));
    insta::assert_snapshot!("login", world.normalise(&run.stdout));
    let files: Vec<PathBuf> = std::fs::read_dir(world.config_home().join("kbind/credentials"))
        .expect("credentials folder")
        .map(|e| e.expect("entry").path())
        .collect();
    assert_eq!(files.len(), 1, "one file per gateway: {files:?}");
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&files[0]).expect("file").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
    }

    // Catalog: a table by Collection, and JSON.
    let run = eventually("the catalog to list widgets as ready", &lines, async || {
        let run = world.kbind(&["catalog"]).await;
        (run.code == 0 && run.stdout.contains("widgets") && run.stdout.contains("True")).then_some(run)
    })
    .await;
    insta::assert_snapshot!("catalog", world.normalise(&run.stdout));
    let run = world.kbind(&["catalog", "-o", "json"]).await;
    assert_code(&run, 0, "catalog -o json", &lines);
    let catalog: Value = serde_json::from_str(&run.stdout).expect("JSON");
    assert_eq!(catalog["collections"][0]["exports"], json!(["widgets"]));

    // A namespaced Export without --namespace and no terminal: exit 2, nothing bound.
    let run = world.kbind(&["bind", "widgets"]).await;
    assert_code(&run, 6, "bind checks for a konnector first", &lines);

    // No konnector: bind refuses before binding, says how to install it.
    let run = world.kbind(&["bind", "widgets", "-n", TEAM]).await;
    assert_code(&run, 6, "bind without a konnector", &lines);
    assert!(
        run.stderr
            .contains("helm install konnector deploy/charts/konnector -n kbind --create-namespace"),
        "{}",
        run.stderr
    );
    insta::assert_snapshot!("bind_no_konnector", world.normalise(&run.stderr));
    let run = world.kbind(&["grants"]).await;
    assert_code(&run, 0, "grants", &lines);
    assert_eq!(run.stdout, "You have no grants.\n", "nothing was bound");

    let konnector = world.konnector();
    let c = &world.consumer.client;
    eventually("the konnector's leader Lease", &lines, async || {
        let lease: k8s_openapi::api::coordination::v1::Lease =
            c.get_typed_opt(Some("kbind"), "kbind-konnector").await.ok()??;
        lease.spec?.renew_time.map(|_| ())
    })
    .await;

    let run = world.kbind(&["bind", "widgets"]).await;
    assert_code(&run, 2, "a namespaced Export without --namespace", &lines);
    assert!(run.stderr.contains("--namespace"), "{}", run.stderr);

    // A namespace missing on the consumer: refused before any Grant, claim or credential exists.
    let run = world.kbind(&["bind", "widgets", "-n", "not-here"]).await;
    assert_code(&run, 6, "bind in a namespace missing on the consumer", &lines);
    assert!(
        run.stderr.contains("kubectl create namespace not-here"),
        "{}",
        run.stderr
    );
    assert_eq!(
        world.kbind(&["grants"]).await.stdout,
        "You have no grants.\n",
        "nothing was bound"
    );

    // Dry run: shows, binds nothing.
    let run = world.kbind(&["bind", "widgets", "-n", TEAM, "--dry-run"]).await;
    assert_code(&run, 0, "bind --dry-run", &lines);
    insta::assert_snapshot!("bind_dry_run", world.normalise(&run.stdout));
    assert_eq!(
        world.kbind(&["grants"]).await.stdout,
        "You have no grants.\n",
        "a dry run binds nothing"
    );

    // Bind: applies the bundle and waits for Ready.
    let run = world.kbind(&["bind", "widgets", "-n", TEAM, "--timeout=3m"]).await;
    assert_code(&run, 0, "bind", &lines);
    insta::assert_snapshot!("bind", world.normalise(&run.stdout));
    insta::assert_snapshot!("bind_progress", world.normalise(&run.stderr));
    let connection: kbind_api::Connection = c.get_typed(None, "acme-widgets").await.expect("Connection applied");
    let managers: Vec<String> = connection
        .metadata
        .managed_fields
        .unwrap_or_default()
        .into_iter()
        .filter_map(|m| m.manager)
        .collect();
    assert!(
        managers.contains(&"kbind-cli".to_string()),
        "server-side applied as kbind-cli: {managers:?}"
    );

    let run = world.kbind(&["status"]).await;
    assert_code(&run, 0, "status", &lines);
    assert!(
        run.stdout.contains("Connection") && run.stdout.contains("Binding"),
        "{}",
        run.stdout
    );
    insta::assert_snapshot!("status", world.normalise(&run.stdout));
    let status: Value = serde_json::from_str(&world.kbind(&["status", "-o", "json"]).await.stdout).expect("JSON");
    assert_eq!(status["items"][0]["ready"], "True", "{status}");
    assert_eq!(status["items"][1]["conflicts"], 0, "{status}");
    assert_eq!(status["items"][1]["staleObjects"], 0, "{status}");
    // The bundle's credential is an issued token: its expiry shows, a day from now.
    let expires: jiff::Timestamp = status["items"][0]["credentialExpiresAt"]
        .as_str()
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("the issued token's expiry: {status}"));
    let left = expires.duration_since(jiff::Timestamp::now());
    assert!(
        left > jiff::SignedDuration::from_hours(23) && left <= jiff::SignedDuration::from_hours(24),
        "expires in {left:?}"
    );

    let run = world.kbind(&["grants"]).await;
    assert_code(&run, 0, "grants", &lines);
    let heartbeat = regex::Regex::new(r"(\d+[smhd]|never)\n").expect("regex");
    insta::assert_snapshot!(
        "grants",
        heartbeat.replace_all(&world.normalise(&run.stdout), "<age>\n")
    );

    // Unbind: without --yes and no terminal it asks for --yes (exit 2) and changes nothing.
    world.create_widget("w1").await;
    // An object in a namespace never bound: it goes with the CRD, so the plan lists it.
    let local = json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w-local", "namespace": "other"}, "spec": {"size": 2}});
    c.create(&widgets(), Some("other"), &object(local), &Default::default())
        .await
        .expect("a consumer-only widget created");
    let run = world.kbind(&["unbind", "widgets"]).await;
    assert_code(&run, 2, "unbind without --yes", &lines);
    assert!(
        c.get_opt(&erase::<kbind_api::Connection>(), None, "acme-widgets")
            .await
            .expect("read")
            .is_some()
    );
    let run = world.kbind(&["unbind", "widgets", "--yes"]).await;
    assert_code(&run, 0, "unbind", &lines);
    insta::assert_snapshot!("unbind", world.normalise(&run.stdout));
    assert!(
        world.widget_on(&world.provider.client, "w1").await.is_none(),
        "the provider copy was drained"
    );
    assert!(
        c.get_opt(&erase::<kbind_api::Connection>(), None, "acme-widgets")
            .await
            .expect("read")
            .is_none()
    );
    let secret: Option<k8s_openapi::api::core::v1::Secret> = c
        .get_typed_opt(Some("kbind"), "acme-widgets-kubeconfig")
        .await
        .expect("read");
    assert!(secret.is_none(), "the Secret is deleted");
    world.grants_gone().await;

    // Redeem a pickup URL from the web UI's path; a second redeem is refused by the gateway.
    let bound = world.bind_over_http().await;
    let run = world
        .kbind(&["redeem", &bound.pickup_url, "-n", TEAM, "--timeout=3m"])
        .await;
    assert_code(&run, 0, "redeem", &lines);
    assert!(!run.stdout.contains(&bound.pickup_url) && !run.stderr.contains(&bound.pickup_url));
    let run = world.kbind(&["redeem", &bound.pickup_url]).await;
    assert_code(&run, 5, "a used pickup", &lines);
    assert!(run.stderr.contains("PickupGone"), "{}", run.stderr);
    assert!(!run.stderr.contains(&bound.pickup_url), "the pickup URL is not echoed");

    // Unbind --orphan: nothing deleted on either side.
    world.create_widget("w2").await;
    let run = world.kbind(&["unbind", "acme-widgets", "--yes", "--orphan"]).await;
    assert_code(&run, 0, "unbind --orphan", &lines);
    insta::assert_snapshot!("unbind_orphan", world.normalise(&run.stdout));
    assert!(world.widget_on(c, "w2").await.is_some());
    assert!(
        world.widget_on(&world.provider.client, "w2").await.is_some(),
        "--orphan keeps the provider copy"
    );
    world.grants_gone().await;

    // Revoke before unbind: warned; then unbind says what to do instead of waiting forever.
    let run = world.kbind(&["bind", "widgets", "-n", TEAM, "--timeout=3m"]).await;
    assert_code(&run, 0, "bind again", &lines);
    let connection: kbind_api::Connection = c.get_typed(None, "acme-widgets").await.expect("Connection applied");
    let grant = connection.metadata.labels.unwrap_or_default()[kbind_api::consts::backend::LABEL_GRANT].clone();
    let run = world.kbind(&["revoke", &grant, "--yes"]).await;
    assert_code(&run, 0, "revoke while the bundle is applied", &lines);
    assert!(run.stderr.contains("unbind before revoke"), "{}", run.stderr);
    eventually("the konnector to see its credential refused", &lines, async || {
        let connection = c
            .get_opt(&erase::<kbind_api::Connection>(), None, "acme-widgets")
            .await
            .ok()??;
        let conditions = connection.data.pointer("/status/conditions")?.as_array()?.clone();
        conditions
            .iter()
            .any(|c| {
                let failing = if c["type"] == "PermissionDenied" {
                    c["status"] == "True"
                } else {
                    c["status"] == "False"
                };
                let refused = c["reason"] == "Unauthorized" || c["message"].as_str().is_some_and(|m| m.contains("401"));
                failing && refused
            })
            .then_some(())
    })
    .await;
    let run = world.kbind(&["unbind", "widgets", "--yes"]).await;
    assert_code(&run, 1, "unbind after a revoke", &lines);
    assert!(
        run.stderr.contains("kbind unbind acme-widgets --orphan"),
        "{}",
        run.stderr
    );
    assert!(
        c.get_opt(&erase::<kbind_api::Connection>(), None, "acme-widgets")
            .await
            .expect("read")
            .is_some()
    );
    let run = world.kbind(&["unbind", "widgets", "--yes", "--orphan"]).await;
    assert_code(&run, 0, "unbind --orphan after a revoke", &lines);
    world.grants_gone().await;

    // Waiting runs out: the konnector stopped (its Lease still fresh), redeem times out with 4.
    konnector.stop().await;
    let bound = world.bind_over_http().await;
    let run = world
        .kbind(&["redeem", &bound.pickup_url, "-n", TEAM, "--timeout=2s"])
        .await;
    assert_code(&run, 4, "redeem with nobody to make it Ready", &lines);
    assert!(run.stderr.contains("--timeout"), "{}", run.stderr);

    // Revoke asks unless --yes; an unknown grant is the gateway's refusal (5).
    let run = world.kbind(&["revoke", &bound.grant]).await;
    assert_code(&run, 2, "revoke without --yes", &lines);
    let run = world.kbind(&["revoke", "no-such-grant", "--yes"]).await;
    assert_code(&run, 5, "revoke an unknown grant", &lines);
    let run = world.kbind(&["revoke", &bound.grant, "--yes"]).await;
    assert_code(&run, 0, "revoke", &lines);
    world.grants_gone().await;

    // kubectl's plugin mechanism finds kubectl-bind on PATH.
    let bin = world.dir.path().join("bin");
    std::fs::create_dir_all(&bin).expect("bin dir");
    std::os::unix::fs::symlink(env!("CARGO_BIN_EXE_kubectl-bind"), bin.join("kubectl-bind")).expect("symlink");
    let path = format!("{}:{}", bin.display(), std::env::var("PATH").unwrap_or_default());
    let kubectl = which("kubectl").expect("kubectl on PATH");
    let run = world.run_program(&kubectl, &["bind", "catalog"], Some(&path)).await;
    assert_code(&run, 0, "kubectl bind catalog", &lines);
    assert!(run.stdout.contains("widgets"), "{}", run.stdout);
    let run = world.run_program(&kubectl, &["bind", "--help"], Some(&path)).await;
    assert!(run.stdout.contains("Usage: kubectl bind"), "{}", run.stdout);
    let run = world
        .run_program(&kubectl, &["bind", "unbind", "nothing-bound", "--yes"], Some(&path))
        .await;
    assert_code(&run, 2, "kubectl bind unbind of nothing", &lines);
    assert!(
        run.stderr.contains("`kubectl bind status`"),
        "hints name the plugin: {}",
        run.stderr
    );

    // Logout: not logged in again.
    let run = world.kbind(&["logout"]).await;
    assert_code(&run, 0, "logout", &lines);
    let run = world.kbind(&["grants"]).await;
    assert_code(&run, 3, "grants after logout", &lines);
}

fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")
        .into_iter()
        .flat_map(|p| std::env::split_paths(&p).collect::<Vec<_>>())
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// A second bind adds its namespace to the Grant, and the live binding of the
/// first keeps working (a spec change in team-a still reaches the provider); `--dry-run` shows
/// the Grant's namespaces before and after; the CLI says "updated", not "created". Narrowing
/// is `kbind unbind --namespace`, which drains the Binding first and then narrows the Grant.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_bind_adds_a_namespace_and_narrowing_drains_first() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let gw = world.gateway.clone();
    let c = &world.consumer.client;
    c.create(
        &erase::<Namespace>(),
        None,
        &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}})),
        &Default::default(),
    )
    .await
    .expect("namespace team-b");
    let _konnector = world.konnector();
    assert_code(
        &world.kbind(&["login", &gw, "--token", TOKEN]).await,
        0,
        "login",
        &lines,
    );
    let run = eventually("the first bind", &lines, async || {
        let run = world.kbind(&["bind", "widgets", "-n", TEAM, "--yes"]).await;
        (run.code == 0).then_some(run)
    })
    .await;
    assert!(run.stderr.contains("created"), "{}", run.stderr);
    world.create_widget("w1").await;

    let run = world.kbind(&["bind", "widgets", "-n", "team-b", "--dry-run"]).await;
    assert_code(&run, 0, "dry run of a second bind", &lines);
    assert!(
        run.stdout.contains(&format!("namespaces {TEAM} -> {TEAM},team-b")),
        "{}",
        run.stdout
    );
    let run = world.kbind(&["bind", "widgets", "-n", "team-b", "--yes"]).await;
    assert_code(&run, 0, "the second bind", &lines);
    assert!(
        run.stderr.contains("updated") && run.stderr.contains(&format!("{TEAM} -> {TEAM},team-b")),
        "{}",
        run.stderr
    );
    // The team-a binding still works: a spec change reaches the provider.
    let patch = json!({"spec": {"size": 7}});
    c.patch(
        &widgets(),
        Some(TEAM),
        "w1",
        &kbind_cluster::Patch::Merge(patch),
        &Default::default(),
    )
    .await
    .expect("widget patched");
    let p = &world.provider.client;
    eventually("the change in team-a reaches the provider", &lines, async || {
        let copy = world.widget_on(p, "w1").await?;
        (copy["spec"]["size"] == 7).then_some(())
    })
    .await;
    let grants = world.kbind(&["grants", "-o", "json"]).await;
    assert!(
        grants.stdout.contains(TEAM) && grants.stdout.contains("team-b"),
        "{}",
        grants.stdout
    );

    // Narrowing: team-a's Binding drains (the copy goes while the Grant still covers it), then
    // the Grant covers team-b only.
    let run = world.kbind(&["unbind", "widgets", "--namespace", TEAM, "--yes"]).await;
    assert_code(&run, 0, "unbind --namespace", &lines);
    assert!(run.stdout.contains("no longer covers"), "{}", run.stdout);
    assert!(world.widget_on(p, "w1").await.is_none(), "the drain removed the copy");
    let grants = world.kbind(&["grants", "-o", "json"]).await;
    let list: Value = serde_json::from_str(&grants.stdout).expect("JSON");
    assert_eq!(list["grants"][0]["namespaces"], json!(["team-b"]), "{}", grants.stdout);
}
