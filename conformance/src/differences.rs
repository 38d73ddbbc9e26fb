//! The machine-readable list of deliberate differences: a case that is known to behave
//! differently on some target, with one line of why. The test macro skips listed pairs.

use serde::Serialize;

use crate::target::TargetKind;

/// Which targets a difference applies to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum On {
    /// Every target.
    All,
    /// Only this kind of target.
    Kind(TargetKind),
    /// Every fakeapi target (in process and over HTTP).
    Fakeapi,
}

impl On {
    /// Whether the difference applies to `kind`.
    pub fn covers(self, kind: TargetKind) -> bool {
        match self {
            On::All => true,
            On::Kind(k) => k == kind,
            On::Fakeapi => kind != TargetKind::RealApiserver,
        }
    }
}

/// One deliberate difference: `case` is skipped on `target` because of `why`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct Difference {
    /// The case's function name.
    pub case: &'static str,
    /// The targets it applies to.
    pub target: On,
    /// One line of why.
    pub why: &'static str,
}

/// Every deliberate difference. A fakeapi bug awaiting a fix is listed as
/// `fakeapi bug: ... (to fix)` so the suite stays green while it is tracked.
pub const DIFFERENCES: &[Difference] = &[
    Difference {
        case: "deployment_is_stored_not_run",
        target: On::Kind(TargetKind::RealApiserver),
        why: "a real cluster runs kube-controller-manager, which rolls Deployments out; fakeapi only stores them",
    },
    Difference {
        case: "events_share_storage_across_groups",
        target: On::Fakeapi,
        why: "fakeapi stores core/v1 and events.k8s.io/v1 Events apart (kube-apiserver converts between them); kbind reads and writes only core/v1 Events, so the two never meet",
    },
    Difference {
        case: "deployment_gets_defaults",
        target: On::Fakeapi,
        why: "fakeapi stores Deployments without the built-in Go defaulting; kbind never writes Deployments, which are in the fake for RBAC, GC and strategic-merge stories only",
    },
];

/// The difference that makes `case` skip on `kind`, if any.
pub fn difference_for(case: &str, kind: TargetKind) -> Option<&'static Difference> {
    DIFFERENCES.iter().find(|d| d.case == case && d.target.covers(kind))
}

/// The differences as JSON: `[{"case", "target", "why"}]`, target `all` or a kind name.
pub fn differences_json() -> serde_json::Value {
    serde_json::Value::Array(
        DIFFERENCES
            .iter()
            .map(|d| {
                let target = match d.target {
                    On::All => "all",
                    On::Kind(k) => k.as_str(),
                    On::Fakeapi => "fakeapi",
                };
                serde_json::json!({"case": d.case, "target": target, "why": d.why})
            })
            .collect(),
    )
}

/// One deliberate difference of conformance run (4), the Go client program (hack/goclient)
/// against fakeapi and a real kube-apiserver (conformance/tests/go_client.rs): on the real server
/// the case prints `ok`, on `fakeapi serve` it prints `fakeapi_says`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct GoClientDifference {
    /// The Go program's case name (its line before the colon).
    pub case: &'static str,
    /// The outcome fakeapi's run prints for it, exactly; any other outcome fails the run.
    pub fakeapi_says: &'static str,
    /// One line of why.
    pub why: &'static str,
}

/// Every deliberate difference of run (4). A fakeapi bug awaiting a fix is listed as
/// `fakeapi bug: ... (to fix)`; run (4) fails when a listed case no longer differs.
pub const GO_CLIENT_DIFFERENCES: &[GoClientDifference] = &[];

/// The run (4) difference listed for `case`, if any.
pub fn go_client_difference_for(case: &str) -> Option<&'static GoClientDifference> {
    GO_CLIENT_DIFFERENCES.iter().find(|d| d.case == case)
}

/// Every deliberate difference as one JSON array: [`differences_json`]'s entries, then run (4)'s
/// as `{"case", "target": "fakeapi", "run": "go-client", "fakeapi_says", "why"}`.
pub fn all_differences_json() -> serde_json::Value {
    let mut all = match differences_json() {
        serde_json::Value::Array(entries) => entries,
        other => vec![other],
    };
    all.extend(GO_CLIENT_DIFFERENCES.iter().map(|d| {
        serde_json::json!({
            "case": d.case,
            "target": "fakeapi",
            "run": "go-client",
            "fakeapi_says": d.fakeapi_says,
            "why": d.why,
        })
    }));
    serde_json::Value::Array(all)
}
