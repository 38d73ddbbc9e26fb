//! Smoke of the related workload (CI runs it so the harness cannot rot): at a tiny N against
//! fakeapi, every bound copy, status and referenced Secret's copy exists, the konnector's
//! requests were counted in every phase, and a bound object that references a Secret cost more
//! provider requests than one that references nothing. No figure is asserted beyond that order:
//! benchmarks never fail on a number.

use std::process::Command;

use serde_json::Value;

mod support;
use support::konnector_binary;

const OBJECTS: usize = 10;

fn num(run: &Value, pointer: &str) -> f64 {
    run.pointer(pointer)
        .and_then(Value::as_f64)
        .unwrap_or_else(|| panic!("no number at {pointer} in {run:#}"))
}

#[test]
fn a_referenced_secret_is_copied_and_costs_more_than_a_bound_object_alone() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("related.json");
    let out = Command::new(env!("CARGO_BIN_EXE_kbind-bench"))
        .args([
            "related",
            "--backend",
            "fake",
            "--objects",
            &OBJECTS.to_string(),
            "--json",
        ])
        .arg(&json)
        .env("KONNECTOR_BIN", konnector_binary())
        .output()
        .expect("kbind-bench runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "kbind-bench related failed: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(stdout.contains("one related copy"), "the table is printed: {stdout}");
    let text = std::fs::read_to_string(&json).unwrap();
    let run: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(run["workload"], "related", "{run:#}");
    let results = &run["results"];

    // The copies really exist: every bound copy and status, one Secret copy per reference with
    // the source's value, and no Secret that nothing references.
    assert_eq!(results["related_copies"], 2 * OBJECTS, "{run:#}");
    for check in [
        "every_copy_exists",
        "every_status_back",
        "every_related_copy_exists",
        "no_unreferenced_secret_copied",
    ] {
        assert_eq!(results["checks"][check], true, "{check} does not hold: {run:#}");
    }

    // Counted: the konnector's own requests in every phase that adds objects.
    assert_eq!(results["requests_konnector_only"], true, "{run:#}");
    let phases = results["phases"].as_array().expect("phases");
    let named = |name: &'static str| phases.iter().filter(move |p| p["name"] == name);
    assert_eq!(named("bound").count(), 1, "{run:#}");
    assert_eq!(named("referenced").count(), 2, "{run:#}");
    assert_eq!(named("bound_under_rule").count(), 2, "{run:#}");
    for phase in phases.iter().filter(|p| p["name"] != "rule") {
        for side in ["provider", "consumer"] {
            assert!(
                num(phase, &format!("/requests/{side}/all")) > 0.0,
                "no {side} requests: {phase:#}"
            );
        }
        assert!(num(phase, "/rss_after_kib") > 0.0, "{phase:#}");
    }
    // The rule phase opened the Secret watches it waited on.
    let rule = named("rule").next().expect("the rule phase");
    assert!(
        rule["requests"]["provider"]["by_kind"]
            .as_object()
            .is_some_and(|kinds| kinds.keys().any(|k| k.starts_with("watch secrets"))),
        "{rule:#}"
    );

    // A referencing object costs the provider its Secret's copy on top of its own.
    let bound = num(results, "/per_object/bound/provider_requests");
    let referenced = num(results, "/per_object/referenced/provider_requests");
    assert!(
        referenced > bound,
        "a referencing object cost {referenced} provider requests, a bound one {bound}: {run:#}"
    );
    for phase in named("referenced") {
        let by_kind = &phase["requests"]["provider"]["by_kind"];
        let secret_writes: u64 = by_kind
            .as_object()
            .expect("requests by kind")
            .iter()
            .filter(|(k, _)| k.ends_with(" secrets") || k.contains(" secrets."))
            .filter(|(k, _)| k.starts_with("patch") || k.starts_with("create") || k.starts_with("update"))
            .filter_map(|(_, v)| v.as_u64())
            .sum();
        assert!(
            secret_writes >= OBJECTS as u64,
            "every related copy was written to the provider: {by_kind:#}"
        );
    }
    assert!(
        num(results, "/per_object/related_copy/provider_requests") > 0.0,
        "{run:#}"
    );
}
