//! Run (4) of the conformance suite: hack/goclient, a client-go / controller-runtime program,
//! against `fakeapi serve` and against a real kube-apiserver from `kbind-testenv`. Each run prints
//! one line per case; the real server must say `ok` to every case (else the program is wrong), and
//! fakeapi must say the same except where `GO_CLIENT_DIFFERENCES` lists the case with what fakeapi
//! says instead — and a listed case that no longer differs fails too, so the list stays honest.
//!
//! Skips with one line when the Go program is not built (hack/goclient/build.sh), unless
//! `KBIND_REQUIRE_GOCLIENT=1`; skips when the real binaries are missing, unless
//! `KBIND_REQUIRE_REAL_K8S=1`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use kbind_conformance::differences::{GO_CLIENT_DIFFERENCES, GoClientDifference};
use kbind_testenv::{TestEnv, User};
use sha2::{Digest, Sha256};

/// `fakeapi serve`'s binary, next to this test's, built from this checkout first (Cargo gives a
/// test only its own package's `CARGO_BIN_EXE_*`; a fresh binary makes the build a no-op, and a
/// target folder shared between checkouts may hold another branch's). Why not tests/support/children.rs: it needs kbind-api and
/// base64, which this crate does not otherwise depend on.
fn fakeapi_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("the test knows its own path");
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test runs from <target>/<profile>/deps");
    let mut build = std::process::Command::new(env!("CARGO"));
    build
        .args([
            "build",
            "--quiet",
            "-p",
            "fakeapi",
            "--bin",
            "fakeapi",
            "--manifest-path",
        ])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("../Cargo.toml"));
    if !cfg!(debug_assertions) {
        build.arg("--release");
    }
    let status = build.status().expect("cargo runs");
    assert!(status.success(), "cargo build -p fakeapi --bin fakeapi failed");
    profile_dir.join("fakeapi")
}

/// Starts `fakeapi serve` on a free port and waits for its admin kubeconfig (a token user), which
/// it writes atomically once it listens; returns the child (killed on drop) and the kubeconfig.
async fn start_fakeapi(binary: &Path, dir: &Path) -> (tokio::process::Child, PathBuf) {
    let kubeconfig = dir.join("fakeapi.kubeconfig");
    let mut child = tokio::process::Command::new(binary)
        .args(["serve", "--addr", "127.0.0.1:0", "--kubeconfig"])
        .arg(&kubeconfig)
        .env("RUST_LOG", "warn")
        .stdout(Stdio::null())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("fakeapi serve starts");
    let deadline = Instant::now() + Duration::from_secs(120);
    while !kubeconfig.exists() {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("fakeapi serve exited before it listened: {status}");
        }
        assert!(Instant::now() < deadline, "fakeapi serve wrote no kubeconfig in 120 s");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    (child, kubeconfig)
}

/// One run of the program takes about a minute on an idle machine; CI's may be loaded.
const RUN_DEADLINE: Duration = Duration::from_secs(600);

fn goclient_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/goclient")
}

/// The hash hack/goclient/build.sh writes to `.sources`: sha256 over `"<sha256> <file>\n"` lines of
/// go.mod, go.sum and every `*.go` file, sorted by name (keep the two in step).
fn sources_hash(dir: &Path) -> std::io::Result<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)?
        .filter_map(|entry| entry.ok())
        .map(|entry| entry.file_name().to_string_lossy().into_owned())
        .filter(|name| name == "go.mod" || name == "go.sum" || name.ends_with(".go"))
        .collect();
    names.sort();
    let mut lines = String::new();
    for name in names {
        let digest = Sha256::digest(std::fs::read(dir.join(&name))?);
        lines.push_str(&format!("{} {name}\n", hex(&digest)));
    }
    Ok(hex(&Sha256::digest(lines.as_bytes())))
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The built program for the current sources (`KBIND_GOCLIENT`, else where build.sh puts it), or
/// `None` after one line on stderr when it is absent or stale and not required.
fn goclient() -> Option<PathBuf> {
    let cache = std::env::var_os("KBIND_TOOLS_CACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/kbind-tools"));
    let path = std::env::var_os("KBIND_GOCLIENT")
        .map(PathBuf::from)
        .unwrap_or_else(|| cache.join("goclient/goclient"));
    let want = sources_hash(&goclient_dir()).expect("hack/goclient is readable");
    let built = std::fs::read_to_string(path.with_file_name(".sources")).unwrap_or_default();
    let problem = if !path.is_file() {
        format!("no goclient at {}", path.display())
    } else if built.trim() != want {
        format!("goclient at {} is stale (built from other sources)", path.display())
    } else {
        return Some(path);
    };
    let required = std::env::var("KBIND_REQUIRE_GOCLIENT").is_ok_and(|v| v == "1");
    assert!(
        !required,
        "KBIND_REQUIRE_GOCLIENT=1 but {problem}: run hack/goclient/build.sh"
    );
    eprintln!("skipped: {problem} (hack/goclient/build.sh builds it)");
    None
}

/// Runs the program against one kubeconfig and returns its case lines.
async fn run(goclient: &Path, kubeconfig: &Path, server: &str) -> BTreeMap<String, String> {
    let mut command = tokio::process::Command::new(goclient);
    command
        .arg("-config")
        .arg(kubeconfig)
        // On by default in client-go v0.35; set so a newer default cannot hide the case.
        .env("KUBE_FEATURE_WatchListClient", "true")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = tokio::time::timeout(RUN_DEADLINE, command.output())
        .await
        .unwrap_or_else(|_| panic!("goclient against {server} did not finish in {RUN_DEADLINE:?}"))
        .unwrap_or_else(|e| panic!("goclient against {server} did not start: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "goclient against {server} could not run ({}): stdout:\n{stdout}\nlast stderr lines:\n{}",
        output.status,
        tail(&stderr, 30)
    );
    parse(&stdout).unwrap_or_else(|e| panic!("goclient against {server}: {e}\n{stdout}"))
}

fn tail(text: &str, n: usize) -> String {
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `case: outcome` lines into a map; a repeated or malformed line is an error.
fn parse(stdout: &str) -> Result<BTreeMap<String, String>, String> {
    let mut cases = BTreeMap::new();
    for line in stdout.lines().filter(|l| !l.trim().is_empty()) {
        let (case, outcome) = line
            .split_once(": ")
            .ok_or_else(|| format!("not a `case: outcome` line: {line:?}"))?;
        if cases.insert(case.to_string(), outcome.to_string()).is_some() {
            return Err(format!("case {case} printed twice"));
        }
    }
    if cases.is_empty() {
        return Err("no case lines".into());
    }
    Ok(cases)
}

/// Every reason the two runs fail run (4), given the listed differences.
fn compare(
    real: &BTreeMap<String, String>,
    fake: &BTreeMap<String, String>,
    listed: &[GoClientDifference],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (case, outcome) in real {
        if outcome != "ok" {
            problems.push(format!(
                "{case}: the real kube-apiserver says {outcome:?}, so the Go program's expectation is wrong"
            ));
        }
    }
    let cases: std::collections::BTreeSet<&String> = real.keys().chain(fake.keys()).collect();
    for case in cases {
        let (Some(r), Some(f)) = (real.get(case), fake.get(case)) else {
            problems.push(format!("{case}: printed by only one of the two runs"));
            continue;
        };
        match listed.iter().find(|d| d.case == case.as_str()) {
            Some(_) if f == r => problems.push(format!(
                "{case}: listed in GO_CLIENT_DIFFERENCES but fakeapi now agrees ({f:?}): remove the entry"
            )),
            Some(d) if f != d.fakeapi_says => problems.push(format!(
                "{case}: fakeapi says {f:?}, GO_CLIENT_DIFFERENCES lists {:?}",
                d.fakeapi_says
            )),
            Some(_) => {}
            None if f != r => problems.push(format!(
                "{case}: fakeapi says {f:?}, the real kube-apiserver {r:?}, and GO_CLIENT_DIFFERENCES does not list it"
            )),
            None => {}
        }
    }
    for d in listed {
        if !real.contains_key(d.case) && !fake.contains_key(d.case) {
            problems.push(format!(
                "GO_CLIENT_DIFFERENCES lists {}, which the program does not print",
                d.case
            ));
        }
    }
    problems
}

fn table(real: &BTreeMap<String, String>, fake: &BTreeMap<String, String>) -> String {
    let width = real.keys().chain(fake.keys()).map(String::len).max().unwrap_or(4);
    let mut out = format!("{:width$} | {:28} | fakeapi serve\n", "case", "kube-apiserver v1.35.8");
    let mut cases: Vec<&String> = real.keys().chain(fake.keys()).collect();
    cases.sort();
    cases.dedup();
    for case in cases {
        let cell = |m: &BTreeMap<String, String>| m.get(case).cloned().unwrap_or_else(|| "(missing)".into());
        out.push_str(&format!("{case:width$} | {:28} | {}\n", cell(real), cell(fake)));
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn go_client_agrees_on_fakeapi_and_kube_apiserver() {
    let Some(goclient) = goclient() else { return };
    let env = match TestEnv::start_or_skip(1).await {
        Ok(Some(env)) => env,
        Ok(None) => return,
        Err(e) => panic!("failed to start the real cluster: {e}"),
    };
    let dir = tempfile::tempdir().expect("a temporary folder");
    // Built before the clock starts: the start-up time is the server's, not cargo's.
    let fakeapi = fakeapi_binary();
    let started = Instant::now();
    let (_fakeapi, fake_kubeconfig) = start_fakeapi(&fakeapi, dir.path()).await;
    let fake_startup = started.elapsed();
    let real_kubeconfig = env.cluster(0).kubeconfig_path(User::Admin);
    let (real, fake_run) = tokio::join!(
        run(&goclient, &real_kubeconfig, "kube-apiserver"),
        run(&goclient, &fake_kubeconfig, "fakeapi serve"),
    );
    println!(
        "start-up until ready: fakeapi serve {:.2?}, kbind-testenv (etcd + kube-apiserver + kube-controller-manager) {:.2?}",
        fake_startup,
        env.startup_time()
    );
    println!("{}", table(&real, &fake_run));
    let problems = compare(&real, &fake_run, GO_CLIENT_DIFFERENCES);
    assert!(problems.is_empty(), "run (4) differs:\n{}", problems.join("\n"));
}

fn outcomes(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs.iter().map(|(c, o)| (c.to_string(), o.to_string())).collect()
}

const LISTED: &[GoClientDifference] = &[GoClientDifference {
    case: "pb",
    fakeapi_says: "create: 415 UnsupportedMediaType",
    why: "test",
}];

#[test]
fn compare_accepts_agreement_and_listed_differences() {
    let real = outcomes(&[("a", "ok"), ("pb", "ok")]);
    let fake = outcomes(&[("a", "ok"), ("pb", "create: 415 UnsupportedMediaType")]);
    assert_eq!(compare(&real, &fake, LISTED), Vec::<String>::new());
}

#[test]
fn compare_fails_on_an_unlisted_difference() {
    let real = outcomes(&[("a", "ok"), ("pb", "ok")]);
    let fake = outcomes(&[
        ("a", "update: 409 Conflict"),
        ("pb", "create: 415 UnsupportedMediaType"),
    ]);
    let problems = compare(&real, &fake, LISTED);
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("a: fakeapi says \"update: 409 Conflict\""),
        "{problems:?}"
    );
}

#[test]
fn compare_fails_when_a_listed_difference_is_gone_or_changed() {
    let real = outcomes(&[("pb", "ok")]);
    let gone = compare(&real, &outcomes(&[("pb", "ok")]), LISTED);
    assert!(gone.len() == 1 && gone[0].contains("remove the entry"), "{gone:?}");
    let changed = compare(&real, &outcomes(&[("pb", "delete: 400 BadRequest")]), LISTED);
    assert!(
        changed.len() == 1 && changed[0].contains("lists \"create: 415"),
        "{changed:?}"
    );
}

#[test]
fn compare_fails_when_the_real_server_does_not_say_ok_or_a_case_is_missing() {
    let real = outcomes(&[("a", "get: 404 NotFound"), ("b", "ok")]);
    let fake = outcomes(&[("a", "get: 404 NotFound")]);
    let problems = compare(&real, &fake, &[]);
    assert_eq!(problems.len(), 2, "{problems:?}");
    assert!(
        problems[0].contains("Go program's expectation is wrong"),
        "{problems:?}"
    );
    assert!(problems[1].starts_with("b: printed by only one"), "{problems:?}");
}

#[test]
fn listed_go_client_differences_are_unique_and_say_why() {
    let mut seen = std::collections::BTreeSet::new();
    for d in GO_CLIENT_DIFFERENCES {
        assert!(seen.insert(d.case), "{} listed twice", d.case);
        assert!(!d.why.is_empty() && d.fakeapi_says != "ok", "{d:?}");
    }
}

#[test]
fn parse_rejects_malformed_and_repeated_lines() {
    assert!(
        parse("a: ok\nb: create: 415 UnsupportedMediaType\n")
            .is_ok_and(|m| m["b"] == "create: 415 UnsupportedMediaType")
    );
    assert!(parse("garbage\n").is_err());
    assert!(parse("a: ok\na: ok\n").is_err());
    assert!(parse("").is_err());
}

#[test]
fn the_hash_matches_build_sh() {
    let script = goclient_dir().join("build.sh");
    let Ok(output) = std::process::Command::new("bash")
        .arg(&script)
        .arg("--sources-hash")
        .output()
    else {
        eprintln!("skipped: no bash to run {}", script.display());
        return;
    };
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    let from_shell = String::from_utf8_lossy(&output.stdout).trim().to_string();
    assert_eq!(sources_hash(&goclient_dir()).expect("readable"), from_shell);
}
