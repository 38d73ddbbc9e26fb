//! `kbind-bench`: benchmarks of the `konnector` binary against fakeapi or real kube-apiservers.
//!
//! ```sh
//! cargo build --release -p kbind-bench -p konnector
//! target/release/kbind-bench churn --backend real --rate 500 --json /tmp/churn.json
//! target/release/kbind-bench all --profile full --out docs/bench/json
//! target/release/kbind-bench report --in docs/bench/json --out docs/bench
//! ```
//!
//! Each workload prints its table and writes a JSON envelope `{workload, params, machine, results}`;
//! `results.checks` holds its correctness checks (every copy arrived, nothing lost), which make the
//! run fail when one does not hold. No figure is ever a pass/fail threshold.

mod ceiling;
mod churn;
mod cost;
mod initial_sync;
mod machine;
mod measure;
mod output;
mod recovery;
mod related;
mod report;
mod scale_out;
mod world;

use std::path::{Path, PathBuf};

use anyhow::{Context as _, anyhow, bail};
use clap::{Parser, Subcommand};
use serde::Serialize;
use serde_json::Value;

use machine::Machine;
use output::Envelope;
use world::Konnector;

/// Benchmarks of the konnector binary.
#[derive(Parser, Debug)]
#[command(name = "kbind-bench", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// What every single-workload command takes.
#[derive(clap::Args, Debug, Clone)]
struct Common {
    /// Where to write the run's JSON envelope.
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// The konnector binary (default: `konnector` beside this binary).
    #[arg(long, env = "KONNECTOR_BIN", value_name = "PATH")]
    konnector: Option<PathBuf>,
    /// An extra `konnector run` flag, e.g. `--konnector-arg=--sync-workers=64` (repeatable).
    #[arg(long = "konnector-arg", value_name = "FLAG", allow_hyphen_values = true)]
    konnector_args: Vec<String>,
}

/// Which sizes `all` runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Profile {
    /// Tiny sizes on fakeapi: seconds; what CI runs so the harness cannot rot.
    Smoke,
    /// The issue's sizes (2 cores): tens of minutes, real servers where the binaries are.
    Full,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Workload 1: objects present before the konnector starts, until every copy has its status.
    InitialSync {
        #[command(flatten)]
        args: initial_sync::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Workload 2: spec and status changes at a steady rate, latency each way.
    Churn {
        #[command(flatten)]
        args: churn::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Workload 3: Connections × APIs × objects, the idle cost.
    ScaleOut {
        #[command(flatten)]
        args: scale_out::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Workload 4: a partition with changes on both sides, convergence after the heal.
    Recovery {
        #[command(flatten)]
        args: recovery::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Workload 5: a plain kube::Client's three writes per object, the ceiling.
    Ceiling {
        #[command(flatten)]
        args: ceiling::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Workload 7: the cost of one related Secret found by reference, next to a bound object's.
    Related {
        #[command(flatten)]
        args: related::Args,
        #[command(flatten)]
        common: Common,
    },
    /// Every workload at a profile's sizes; one JSON file per run in `--out`.
    All {
        /// Which sizes.
        #[arg(long, value_enum, default_value = "smoke")]
        profile: Profile,
        /// The folder for the JSON files.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
        /// Only these workloads (default: all).
        #[arg(long, value_delimiter = ',')]
        only: Vec<String>,
        /// The konnector binary (default: `konnector` beside this binary).
        #[arg(long, env = "KONNECTOR_BIN", value_name = "PATH")]
        konnector: Option<PathBuf>,
        /// An extra `konnector run` flag, e.g. `--konnector-arg=--sync-workers=64` (repeatable).
        #[arg(long = "konnector-arg", value_name = "FLAG", allow_hyphen_values = true)]
        konnector_args: Vec<String>,
    },
    /// Workload 6: instructions per synced object under callgrind (engine + in-process fakeapi).
    Cost(#[command(flatten)] cost::CostArgs),
    /// Tables (markdown) and PNG plots of the runs in a folder.
    Report {
        /// The folder of JSON files.
        #[arg(long = "in", value_name = "DIR")]
        input: PathBuf,
        /// Where `tables.md` and the PNGs go.
        #[arg(long, value_name = "DIR")]
        out: PathBuf,
    },
    /// Runs side by side (e.g. a before and an after binary): every figure, a column per file.
    Compare {
        /// JSON envelopes.
        #[arg(required = true)]
        files: Vec<PathBuf>,
    },
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        // The cost workload runs its own single-threaded runtime with a paused clock, so that
        // callgrind's count does not depend on scheduling: it must not start inside another.
        Command::Cost(args) => cost::run(&args),
        command => tokio::runtime::Runtime::new()
            .context("failed to start the tokio runtime")?
            .block_on(run(command)),
    }
}

/// Runs every workload but `cost` on a multi-threaded runtime.
async fn run(command: Command) -> anyhow::Result<()> {
    match command {
        Command::Cost(_) => bail!("the cost workload runs outside the shared runtime"),
        Command::InitialSync { args, common } => single(initial_sync::NAME, &args, &common, initial_sync::run).await,
        Command::Churn { args, common } => single(churn::NAME, &args, &common, churn::run).await,
        Command::ScaleOut { args, common } => single(scale_out::NAME, &args, &common, scale_out::run).await,
        Command::Recovery { args, common } => single(recovery::NAME, &args, &common, recovery::run).await,
        Command::Ceiling { args, common } => single(ceiling::NAME, &args, &common, ceiling::run).await,
        Command::Related { args, common } => single(related::NAME, &args, &common, related::run).await,
        Command::All {
            profile,
            out,
            only,
            konnector,
            konnector_args,
        } => all(profile, &out, &only, konnector_of(konnector, konnector_args)?).await,
        Command::Report { input, out } => {
            report::render(&input, &out)?;
            println!("wrote {} (tables.md and the PNGs)", out.display());
            Ok(())
        }
        Command::Compare { files } => {
            print!("{}", report::compare(&files)?.markdown());
            Ok(())
        }
    }
}

/// The konnector to measure: its binary (see [`konnector_binary`]) and extra flags.
fn konnector_of(explicit: Option<PathBuf>, args: Vec<String>) -> anyhow::Result<Konnector> {
    Ok(Konnector {
        binary: konnector_binary(explicit)?,
        args,
    })
}

/// The konnector binary: the flag or `KONNECTOR_BIN`, else `konnector` beside this binary.
fn konnector_binary(explicit: Option<PathBuf>) -> anyhow::Result<PathBuf> {
    if let Some(path) = explicit {
        return Ok(path);
    }
    let exe = std::env::current_exe().context("locating this binary")?;
    let path = exe
        .parent()
        .ok_or_else(|| anyhow!("no folder around {}", exe.display()))?
        .join("konnector");
    if !path.exists() {
        bail!(
            "no konnector binary at {}: run `cargo build --release -p konnector` first",
            path.display()
        );
    }
    Ok(path)
}

/// Runs one workload into an envelope.
async fn envelope<A, F>(name: &str, args: &A, konnector: &Konnector, run: F) -> anyhow::Result<Envelope>
where
    A: Serialize,
    F: AsyncFnOnce(&A, &Konnector) -> anyhow::Result<Value>,
{
    let mut machine = Machine::now(&konnector.binary.display().to_string());
    machine.konnector_args = konnector.args.clone();
    let results = run(args, konnector)
        .await
        .with_context(|| format!("the {name} workload"))?;
    Ok(Envelope {
        workload: name.into(),
        params: serde_json::to_value(args).context("encoding the flags")?,
        machine: machine.finish(),
        results,
    })
}

/// The names of the checks of a run that did not hold.
fn failed_checks(envelope: &Envelope) -> Vec<String> {
    match envelope.results.get("checks").and_then(Value::as_object) {
        Some(checks) => checks
            .iter()
            .filter(|(_, v)| v.as_bool() != Some(true))
            .map(|(k, _)| format!("{} ({}): {k}", envelope.workload, envelope.backend()))
            .collect(),
        None => vec![format!("{}: no checks in the results", envelope.workload)],
    }
}

async fn single<A, F>(name: &str, args: &A, common: &Common, run: F) -> anyhow::Result<()>
where
    A: Serialize,
    F: AsyncFnOnce(&A, &Konnector) -> anyhow::Result<Value>,
{
    let konnector = konnector_of(common.konnector.clone(), common.konnector_args.clone())?;
    let envelope = envelope(name, args, &konnector, run).await?;
    if let Some(path) = &common.json {
        envelope.write(path)?;
    }
    for table in report::tables(std::slice::from_ref(&envelope)) {
        println!("{}", table.markdown());
    }
    let failed = failed_checks(&envelope);
    if !failed.is_empty() {
        bail!("checks failed: {}", failed.join(", "));
    }
    Ok(())
}

/// One workload's runs of a profile, skipping real-server runs where the binaries are missing.
async fn runs_of<A, F>(
    name: &str,
    runs: Vec<A>,
    backend: impl Fn(&A) -> world::Backend,
    konnector: &Konnector,
    out: &Path,
    run: F,
    errors: &mut Vec<String>,
) -> anyhow::Result<()>
where
    A: Serialize,
    F: AsyncFnOnce(&A, &Konnector) -> anyhow::Result<Value> + Copy,
{
    for (i, args) in runs.iter().enumerate() {
        let backend = backend(args);
        if !backend.available()? {
            println!("skipped: {name} #{i} on real servers (no kube binaries; see hack/kube/build.sh)");
            continue;
        }
        let label = format!(
            "{name}-{}-{i:02}",
            serde_json::to_value(backend)?.as_str().unwrap_or("?")
        );
        eprintln!(
            "[{}] {label} (load {})",
            chrono::Utc::now().format("%H:%M:%S"),
            machine::load_average()
        );
        match envelope(name, args, konnector, run).await {
            Ok(envelope) => {
                envelope.write(&out.join(format!("{label}.json")))?;
                errors.extend(failed_checks(&envelope));
            }
            Err(e) => errors.push(format!("{label}: {e:#}")),
        }
    }
    Ok(())
}

async fn all(profile: Profile, out: &Path, only: &[String], konnector: Konnector) -> anyhow::Result<()> {
    std::fs::create_dir_all(out).with_context(|| format!("creating {}", out.display()))?;
    let wanted = |name: &str| only.is_empty() || only.iter().any(|o| o == name);
    let mut errors = Vec::new();
    // The ceiling first: the sync figures are ratios to it.
    if wanted(ceiling::NAME) {
        runs_of(
            ceiling::NAME,
            ceiling::profile(profile),
            |a| a.backend,
            &konnector,
            out,
            ceiling::run,
            &mut errors,
        )
        .await?;
    }
    if wanted(initial_sync::NAME) {
        runs_of(
            initial_sync::NAME,
            initial_sync::profile(profile),
            |a| a.backend,
            &konnector,
            out,
            initial_sync::run,
            &mut errors,
        )
        .await?;
    }
    if wanted(churn::NAME) {
        runs_of(
            churn::NAME,
            churn::profile(profile),
            |a| a.backend,
            &konnector,
            out,
            churn::run,
            &mut errors,
        )
        .await?;
    }
    if wanted(scale_out::NAME) {
        runs_of(
            scale_out::NAME,
            scale_out::profile(profile),
            |a| a.backend,
            &konnector,
            out,
            scale_out::run,
            &mut errors,
        )
        .await?;
    }
    if wanted(recovery::NAME) {
        runs_of(
            recovery::NAME,
            recovery::profile(profile),
            |a| a.backend,
            &konnector,
            out,
            recovery::run,
            &mut errors,
        )
        .await?;
    }
    let runs = Envelope::read_dir(out)?;
    for table in report::tables(&runs) {
        println!("{}", table.markdown());
    }
    if !errors.is_empty() {
        bail!("{} runs failed or broke a check:\n{}", errors.len(), errors.join("\n"));
    }
    Ok(())
}
