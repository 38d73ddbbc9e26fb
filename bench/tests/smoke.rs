//! CI's smoke of every workload: `kbind-bench all --profile smoke` at tiny sizes against fakeapi
//! (the debug `konnector` binary), then each JSON envelope has every field and every correctness
//! check held. Never a number threshold: the figures are for BENCHMARKS.md, not for CI. The
//! real-server smoke skips without the kube binaries, unless `KBIND_REQUIRE_REAL_K8S=1`.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::Value;

mod support;
use support::konnector_binary;

fn bench(args: &[&str]) -> std::process::Output {
    let output = Command::new(env!("CARGO_BIN_EXE_kbind-bench"))
        .args(args)
        .env("KONNECTOR_BIN", konnector_binary())
        .output()
        .expect("kbind-bench runs");
    assert!(
        output.status.success(),
        "kbind-bench {args:?} failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    output
}

fn envelopes(dir: &Path) -> Vec<Value> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "json"))
        .collect();
    paths.sort();
    paths
        .iter()
        .map(|p| serde_json::from_str(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect()
}

/// The fields every envelope has, and each workload's figures.
fn assert_complete(run: &Value) {
    let workload = run["workload"].as_str().expect("a workload name");
    for pointer in [
        "/params/backend",
        "/machine/cores",
        "/machine/cpu_model",
        "/machine/kernel",
        "/machine/git_commit",
        "/machine/load_before",
        "/machine/load_after",
        "/machine/konnector_binary",
    ] {
        assert!(
            run.pointer(pointer).is_some_and(|v| !v.is_null()),
            "{workload}: no {pointer} in {run:#}"
        );
    }
    let figures: &[&str] = match workload {
        "initial_sync" => &[
            "/sync_seconds",
            "/objects_per_second",
            "/rss_kib",
            "/json_bytes/provider",
            "/json_bytes/consumer",
            "/konnector_cpu_seconds",
        ],
        "churn" => &[
            "/spec_up/p99_ms",
            "/status_down/p99_ms",
            "/consumer_spec_write/p99_ms",
            "/provider_status_write/p99_ms",
            "/added_p99_ms/spec_up",
            "/added_p99_ms/status_down",
            "/achieved_rate_per_side",
            "/folded/spec_up",
            "/folded/status_down",
        ],
        "scale_out" => &[
            "/rss_kib/idle",
            "/idle_cpu_percent",
            "/idle_requests/provider/konnector_per_minute",
            "/idle_requests/consumer/konnector_per_minute",
            "/json_bytes/provider",
        ],
        "recovery" => &[
            "/converge_seconds",
            "/verdict/expected_objects",
            "/verdict/spec_missing",
            "/verdict/status_duplicated",
        ],
        "ceiling" => &[
            "/objects_per_second",
            "/writes_per_second",
            "/per_object_latency/p99_ms",
        ],
        other => panic!("an unknown workload {other}"),
    };
    for pointer in figures {
        let value = run["results"].pointer(pointer);
        assert!(
            value.is_some_and(|v| v.is_number()),
            "{workload}: {pointer} is not a number in {:#}",
            run["results"]
        );
    }
    let checks = run["results"]["checks"].as_object().expect("checks");
    assert!(!checks.is_empty(), "{workload}: no checks");
    for (name, held) in checks {
        assert_eq!(
            held,
            &Value::Bool(true),
            "{workload}: check {name} failed in {:#}",
            run["results"]
        );
    }
}

#[test]
fn every_workload_runs_at_smoke_size_and_its_checks_hold() {
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("json");
    let output = bench(&["all", "--profile", "smoke", "--out", dir.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let runs = envelopes(&dir);
    let mut names: Vec<&str> = runs.iter().map(|r| r["workload"].as_str().unwrap()).collect();
    names.sort();
    assert_eq!(
        names,
        ["ceiling", "churn", "initial_sync", "recovery", "scale_out"],
        "{stdout}"
    );
    for run in &runs {
        assert_complete(run);
    }
    // The tables are printed, and the report renders them and the plots from the same files.
    for title in ["Initial sync", "Churn", "Scale-out", "Recovery", "Ceiling", "Targets"] {
        assert!(stdout.contains(title), "no {title} table in:\n{stdout}");
    }
    let report = out.path().join("report");
    bench(&[
        "report",
        "--in",
        dir.to_str().unwrap(),
        "--out",
        report.to_str().unwrap(),
    ]);
    for file in ["tables.md", "churn-latency.png", "rss.png", "recovery.png"] {
        let bytes = std::fs::read(report.join(file)).unwrap_or_else(|e| panic!("{file}: {e}"));
        assert!(!bytes.is_empty(), "{file} is empty");
    }
    let compare = bench(&["compare", dir.join("churn-fake-00.json").to_str().unwrap()]);
    assert!(String::from_utf8_lossy(&compare.stdout).contains("/spec_up/p99_ms"));
}

#[test]
fn the_real_server_paths_run_at_smoke_size() {
    let missing = kbind_testenv_missing();
    if missing && std::env::var("KBIND_REQUIRE_REAL_K8S").is_ok_and(|v| v == "1") {
        panic!("KBIND_REQUIRE_REAL_K8S=1 but the kube binaries are missing (hack/kube/build.sh)");
    }
    if missing {
        eprintln!("skipped: no kube binaries (hack/kube/build.sh)");
        return;
    }
    let out = tempfile::tempdir().unwrap();
    // Scale-out covers what only real servers have: one ServiceAccount token per Connection and
    // the apiservers' own request counters; recovery covers the FaultProxy in front of one.
    let scale = out.path().join("scale.json");
    bench(&[
        "scale-out",
        "--backend",
        "real",
        "--connections",
        "2",
        "--apis",
        "1",
        "--objects",
        "2",
        "--settle",
        "1",
        "--idle",
        "2",
        "--baseline",
        "1",
        "--json",
        scale.to_str().unwrap(),
    ]);
    let recovery = out.path().join("recovery.json");
    bench(&[
        "recovery",
        "--backend",
        "real",
        "--partition",
        "2",
        "--changes",
        "5",
        "--creates",
        "2",
        "--json",
        recovery.to_str().unwrap(),
    ]);
    for path in [scale, recovery] {
        let run: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        assert_eq!(run["params"]["backend"], "real");
        assert_complete(&run);
    }
}

/// Whether the kube binaries are missing, as kbind-testenv finds them.
fn kbind_testenv_missing() -> bool {
    kbind_testenv::TestEnv::binaries().is_err()
}
