//! Repository checks: `cargo run -p xtask -- deps` enforces DESIGN.md §6's dependency rule and
//! that production builds carry no fake (`deps::PRODUCTION_BUILDS`).

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
            let mut violations = deps::violations(&graph);
            for build in deps::PRODUCTION_BUILDS {
                violations.extend(deps::carried(build, &normal_tree(build)?));
            }
            if violations.is_empty() {
                println!(
                    "dependency rule holds for {} workspace crates; {} production build(s) carry no fake",
                    graph.len(),
                    deps::PRODUCTION_BUILDS.len()
                );
                Ok(())
            } else {
                for v in &violations {
                    eprintln!("dependency rule broken: {v}");
                }
                bail!(
                    "{} dependency rule violation(s); see DESIGN.md §6 and the production builds in xtask/src/deps.rs",
                    violations.len()
                )
            }
        }
        other => bail!("unknown task {other:?}; available: deps"),
    }
}

/// `cargo tree -e normal` of a production build, one `name version (…)` line per crate.
fn normal_tree(build: &deps::ProductionBuild) -> anyhow::Result<String> {
    let out = Command::new(env!("CARGO"))
        .args(["tree", "-p", build.package, "-e", "normal", "--prefix", "none"])
        .args(build.flags)
        .output()
        .context("failed to run cargo tree")?;
    if !out.status.success() {
        bail!(
            "cargo tree -p {} failed: {}",
            build.package,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    String::from_utf8(out.stdout).context("cargo tree printed invalid UTF-8")
}
