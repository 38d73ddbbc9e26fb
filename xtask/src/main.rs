//! Repository checks: `cargo run -p xtask -- deps` enforces contract §6's dependency rule,
//! which keeps fakeapi out of the konnector binary (`deps::FORBIDDEN`).

mod deps;

use std::process::Command;

use anyhow::{Context, bail};

fn main() -> anyhow::Result<()> {
    let task = std::env::args().nth(1).unwrap_or_default();
    match task.as_str() {
        "deps" => {
            let out = Command::new(env!("CARGO"))
                .args(["metadata", "--format-version", "1", "--no-deps"])
                .output()
                .context("failed to run cargo metadata")?;
            if !out.status.success() {
                bail!("cargo metadata failed: {}", String::from_utf8_lossy(&out.stderr));
            }
            let metadata: serde_json::Value =
                serde_json::from_slice(&out.stdout).context("cargo metadata printed invalid JSON")?;
            let graph = deps::workspace_graph(&metadata);
            let violations = deps::violations(&graph);
            if violations.is_empty() {
                println!(
                    "dependency rule holds for {} workspace crates (optional dependencies included)",
                    graph.len()
                );
                Ok(())
            } else {
                for v in &violations {
                    eprintln!("dependency rule broken: {v}");
                }
                bail!(
                    "{} dependency rule violation(s); see the dependency rule in README.md and the rules in xtask/src/deps.rs",
                    violations.len()
                )
            }
        }
        other => bail!("unknown task {other:?}; available: deps"),
    }
}
