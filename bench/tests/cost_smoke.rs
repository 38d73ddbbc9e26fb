//! Smoke of the cost workload (CI runs it so the harness cannot rot): a tiny N converges
//! without valgrind, and, where valgrind is installed, one callgrind run yields a report with
//! every field. No figure is asserted: benchmarks never fail on a number.

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_kbind-bench");
const OBJECTS: usize = 5;

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("parsing {}: {e}\n{text}", path.display()))
}

#[test]
fn the_inner_workload_converges_without_valgrind() {
    let dir = tempfile::tempdir().unwrap();
    let report = dir.path().join("inner.json");
    let out = Command::new(BIN)
        .args(["cost", "--inner", "--objects", &OBJECTS.to_string(), "--report"])
        .arg(&report)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "kbind-bench cost --inner failed: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let report = read_json(&report);
    assert_eq!(report["objects"], OBJECTS, "{report}");
    assert_eq!(
        report["copies_up"], OBJECTS,
        "every copy reached the provider: {report}"
    );
    assert_eq!(report["statuses_down"], OBJECTS, "every status came back: {report}");
    assert!(report["virtual_ms"].is_u64() && report["wall_ms"].is_u64(), "{report}");
}

fn valgrind_present() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

#[test]
fn one_callgrind_run_reports_every_field() {
    if !valgrind_present() {
        assert!(
            std::env::var("KBIND_REQUIRE_VALGRIND").as_deref() != Ok("1"),
            "valgrind is missing and KBIND_REQUIRE_VALGRIND=1 (CI installs Debian's valgrind)"
        );
        eprintln!("skipped: valgrind is not installed (apt-get install -y valgrind)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("cost.json");
    let out = Command::new(BIN)
        .args(["cost", "--objects", &OBJECTS.to_string(), "--runs", "1", "--json"])
        .arg(&json)
        .arg("--out-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kbind-bench cost failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("Ir/object"), "the table is printed: {stdout}");
    let report = read_json(&json);
    assert_eq!(report["workload"], "cost", "{report}");
    assert_eq!(report["params"]["objects"], OBJECTS, "{report}");
    assert!(
        report["machine"]["valgrind"]
            .as_str()
            .is_some_and(|v| v.starts_with("valgrind"))
    );
    let results = &report["results"];
    let runs = results["runs"].as_array().expect("runs");
    assert_eq!(runs.len(), 1, "{report}");
    let run = &runs[0];
    // Counted, not asserted: only that callgrind counted something and the run converged.
    assert!(run["ir"].as_u64().is_some_and(|ir| ir > 0), "{run}");
    assert!(run["ir_per_object"].is_f64(), "{run}");
    assert_eq!(run["inner"]["copies_up"], OBJECTS, "{run}");
    assert_eq!(run["inner"]["statuses_down"], OBJECTS, "{run}");
    for key in [
        "ir_per_object_median",
        "ir_per_object_min",
        "ir_per_object_max",
        "spread_percent",
    ] {
        assert!(results[key].is_f64(), "{key} missing: {report}");
    }
    let top = results["top_inclusive"].as_array().expect("top_inclusive");
    assert!(!top.is_empty(), "callgrind_annotate named functions: {report}");
    assert!(
        top.iter()
            .all(|f| f["name"].as_str().is_some_and(|n| !n.is_empty()) && f["ir"].is_u64()),
        "{report}"
    );
}
