//! Workload 6, cost: instructions per synced object under callgrind.
//!
//! The outer command re-executes this binary as `cost --inner` under
//! `valgrind --tool=callgrind`, N times, and reports Ir / N with its spread and the top
//! inclusive functions. The inner workload is deterministic and in process: the engine runs
//! against two fakeapi clusters (no HTTP, no TLS) on tokio's paused clock, N widgets with a
//! 1 KiB spec are created on the consumer, their copies reach the provider, the provider's
//! "controller" writes a status on each, and the statuses come back down.
//!
//! What is counted: callgrind collects only inside [`measured_sync`] (`--toggle-collect`), and
//! toggles off again inside the load generator's and the convergence probe's functions
//! ([`loadgen_create`], [`loadgen_status`], [`probe`]). So the figure is the engine's work plus
//! the fake apiservers' handling of the engine's requests and watches; setup (clusters, CRDs,
//! the Connection becoming Ready) and the harness's own writes and reads are not in it.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use fakeapi::{FakeClient, FakeCluster, UserInfo};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams, SharedClock, TokioClock};
use kbind_engine::context::{Context, EngineConfig};
use kbind_engine::engine::Engine;
use kbind_scenarios::FakeConnector;
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use crate::machine::Machine;
use crate::output::Envelope;

/// The workload's name in the JSON envelope and the subcommand.
pub const WORKLOAD: &str = "cost";
/// The konnector's namespace on the consumer.
const NAMESPACE: &str = "kbind";
/// The consumer namespace the widgets live in.
const WIDGET_NAMESPACE: &str = "default";
/// Bytes of filler in each widget's spec, so the spec is about 1 KiB as JSON.
const SPEC_FILLER: usize = 1000;
/// How long (tokio's paused clock) the workload may take before it is declared stuck. The
/// paused clock jumps ahead whenever every task waits, so a stuck sync ends at once, not after
/// this long in real time.
const VIRTUAL_DEADLINE: Duration = Duration::from_secs(3600);
/// How often (paused clock) the harness checks for convergence.
const PROBE_EVERY: Duration = Duration::from_millis(100);
/// Callgrind's collection windows: on inside the first, off again inside the others. Names as
/// valgrind demangles them (legacy mangling, hash stripped).
const TOGGLES: &[&str] = &[
    "kbind_bench::cost::measured_sync",
    "kbind_bench::cost::loadgen_create",
    "kbind_bench::cost::loadgen_status",
    "kbind_bench::cost::probe",
];
/// How many inclusive functions the report lists.
const TOP: usize = 15;

/// `kbind-bench cost`: instructions per synced object under callgrind.
#[derive(clap::Args, Debug, Clone)]
pub struct CostArgs {
    /// Widgets synced per run (1 KiB spec each).
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Callgrind runs, for the spread.
    #[arg(long, default_value_t = 3)]
    pub runs: usize,
    /// Also write the report as JSON here.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Where callgrind's output files go (default: a fresh temporary folder, kept).
    #[arg(long, value_name = "DIR")]
    pub out_dir: Option<PathBuf>,
    /// The valgrind binary.
    #[arg(long, value_name = "PATH", default_value = "valgrind")]
    pub valgrind: PathBuf,
    /// Child mode: run the workload once, without valgrind of its own, and write its
    /// [`InnerReport`] to `--report` (or stdout).
    #[arg(long, hide = true)]
    pub inner: bool,
    /// Child mode: where the inner report goes.
    #[arg(long, value_name = "FILE", hide = true)]
    pub report: Option<PathBuf>,
}

/// What one inner run observed (the harness's convergence check, not a count of instructions).
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct InnerReport {
    /// Widgets created on the consumer.
    pub objects: usize,
    /// Copies on the provider whose spec equals the consumer's.
    pub copies_up: usize,
    /// Consumer widgets whose status came back from the provider.
    pub statuses_down: usize,
    /// Paused-clock milliseconds the measured part took (timers, not work).
    pub virtual_ms: u64,
    /// Real milliseconds the measured part took (under valgrind: its slowdown included).
    pub wall_ms: u64,
}

impl InnerReport {
    /// Every copy is up and every status is down.
    pub fn converged(&self) -> bool {
        self.copies_up == self.objects && self.statuses_down == self.objects
    }
}

/// One function of callgrind_annotate's inclusive listing.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Function {
    /// Inclusive instructions.
    pub ir: u64,
    /// Share of the run's total, in percent.
    pub percent: f64,
    /// Demangled name.
    pub name: String,
    /// The source file callgrind_annotate names (`???` when unknown).
    pub file: String,
}

/// One callgrind run.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Run {
    /// Instructions executed in the measured part.
    pub ir: u64,
    /// `ir / objects`.
    pub ir_per_object: f64,
    /// Real seconds of the whole valgrind run (setup included).
    pub wall_seconds: f64,
    /// The inner run's own observations.
    pub inner: InnerReport,
    /// Callgrind's output file.
    pub callgrind_out: PathBuf,
}

/// The cost workload's results.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostResults {
    /// Each run.
    pub runs: Vec<Run>,
    /// Median Ir per object.
    pub ir_per_object_median: f64,
    /// Smallest and largest Ir per object.
    pub ir_per_object_min: f64,
    /// Largest Ir per object.
    pub ir_per_object_max: f64,
    /// `(max - min) / median`, in percent.
    pub spread_percent: f64,
    /// The top inclusive functions of the first run.
    pub top_inclusive: Vec<Function>,
}

/// The parameters of the workload.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CostParams {
    /// Widgets per run.
    pub objects: usize,
    /// Runs.
    pub runs: usize,
    /// Approximate JSON size of one widget's spec, in bytes.
    pub spec_bytes: usize,
}

/// Runs the subcommand.
pub fn run(args: &CostArgs) -> anyhow::Result<()> {
    if args.objects == 0 {
        bail!("--objects must be at least 1");
    }
    if args.inner {
        let report = run_inner(args.objects)?;
        let text = serde_json::to_string_pretty(&report)?;
        match &args.report {
            Some(path) => std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))?,
            None => println!("{text}"),
        }
        if !report.converged() {
            bail!("the workload did not converge: {report:?}");
        }
        return Ok(());
    }
    let (machine, params, results) = run_outer(args)?;
    print!("{}", table(&machine, &params, &results));
    if let Some(path) = &args.json {
        let envelope = Envelope {
            workload: WORKLOAD.into(),
            params: serde_json::to_value(&params).context("encoding the parameters")?,
            machine,
            results: serde_json::to_value(&results).context("encoding the results")?,
        };
        envelope.write(path)?;
    }
    Ok(())
}

// ---- the outer command: valgrind runs and their reading ----

fn run_outer(args: &CostArgs) -> anyhow::Result<(Machine, CostParams, CostResults)> {
    if args.runs == 0 {
        bail!("--runs must be at least 1");
    }
    let valgrind = valgrind_version(&args.valgrind)?;
    let dir = match &args.out_dir {
        Some(dir) => dir.clone(),
        None => std::env::temp_dir().join(format!("kbind-bench-cost-{}", std::process::id())),
    };
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let exe = std::env::current_exe().context("locating this binary")?;
    // No konnector binary: the engine runs inside this process.
    let mut machine = Machine::now("in process (kbind-bench cost)");
    machine.valgrind = Some(valgrind);
    let mut runs = Vec::new();
    for i in 1..=args.runs {
        eprintln!(
            "cost: run {i}/{} of {} objects under callgrind",
            args.runs, args.objects
        );
        runs.push(callgrind_run(&args.valgrind, &exe, &dir, i, args.objects)?);
    }
    let machine = machine.finish();
    let top_inclusive = annotate(&runs[0].callgrind_out)?;
    let mut per: Vec<f64> = runs.iter().map(|r| r.ir_per_object).collect();
    per.sort_by(f64::total_cmp);
    let median = per[per.len() / 2];
    let (min, max) = (per[0], per[per.len() - 1]);
    Ok((
        machine,
        CostParams {
            objects: args.objects,
            runs: args.runs,
            spec_bytes: spec_bytes(),
        },
        CostResults {
            runs,
            ir_per_object_median: median,
            ir_per_object_min: min,
            ir_per_object_max: max,
            spread_percent: if median > 0.0 {
                100.0 * (max - min) / median
            } else {
                0.0
            },
            top_inclusive,
        },
    ))
}

fn valgrind_version(valgrind: &Path) -> anyhow::Result<String> {
    let out = Command::new(valgrind).arg("--version").output().with_context(|| {
        format!(
            "running {} (install Debian's valgrind: apt-get install -y valgrind)",
            valgrind.display()
        )
    })?;
    if !out.status.success() {
        bail!("{} --version failed", valgrind.display());
    }
    Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
}

/// The arguments that make callgrind count only the measured part.
pub fn callgrind_args(out_file: &Path) -> Vec<String> {
    let mut args = vec![
        "--tool=callgrind".to_string(),
        format!("--callgrind-out-file={}", out_file.display()),
        "--collect-atstart=no".to_string(),
    ];
    args.extend(TOGGLES.iter().map(|f| format!("--toggle-collect={f}")));
    args
}

fn callgrind_run(valgrind: &Path, exe: &Path, dir: &Path, i: usize, objects: usize) -> anyhow::Result<Run> {
    let out_file = dir.join(format!("callgrind.out.{i}"));
    let report_file = dir.join(format!("inner.{i}.json"));
    let log_file = dir.join(format!("valgrind.{i}.log"));
    let start = Instant::now();
    let status = Command::new(valgrind)
        .args(callgrind_args(&out_file))
        .arg(format!("--log-file={}", log_file.display()))
        .arg(exe)
        .args(["cost", "--inner", "--objects", &objects.to_string(), "--report"])
        .arg(&report_file)
        .status()
        .with_context(|| format!("running {}", valgrind.display()))?;
    let wall_seconds = start.elapsed().as_secs_f64();
    if !status.success() {
        bail!("the callgrind run failed ({status}); see {}", log_file.display());
    }
    let inner: InnerReport = serde_json::from_str(
        &std::fs::read_to_string(&report_file).with_context(|| format!("reading {}", report_file.display()))?,
    )
    .context("reading the inner report")?;
    let text = std::fs::read_to_string(&out_file).with_context(|| format!("reading {}", out_file.display()))?;
    let ir = total_ir(&text).ok_or_else(|| anyhow!("no totals in {}", out_file.display()))?;
    if ir == 0 {
        bail!(
            "callgrind counted nothing: the toggle functions {TOGGLES:?} were not found in {}",
            exe.display()
        );
    }
    Ok(Run {
        ir,
        ir_per_object: ir as f64 / objects as f64,
        wall_seconds,
        inner,
        callgrind_out: out_file,
    })
}

/// The Ir total of a callgrind output file (`totals:` line, else `summary:`).
pub fn total_ir(callgrind_out: &str) -> Option<u64> {
    let field = |prefix: &str| {
        callgrind_out
            .lines()
            .find_map(|l| l.strip_prefix(prefix))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|n| n.parse().ok())
    };
    field("totals:").or_else(|| field("summary:"))
}

fn annotate(out_file: &Path) -> anyhow::Result<Vec<Function>> {
    let out = Command::new("callgrind_annotate")
        .args(["--inclusive=yes", "--threshold=100"])
        .arg(out_file)
        .output()
        .context("running callgrind_annotate")?;
    if !out.status.success() {
        bail!(
            "callgrind_annotate failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let total = total_ir(&std::fs::read_to_string(out_file)?).unwrap_or(0);
    Ok(parse_annotate(&text, total, TOP))
}

/// The first `top` function lines of `callgrind_annotate --inclusive=yes` output
/// (`  1,234,567 (12.34%)  file:function [binary]`, or without the percentage on older versions).
pub fn parse_annotate(text: &str, total: u64, top: usize) -> Vec<Function> {
    let mut functions = Vec::new();
    for line in text.lines() {
        let line = line.trim_start();
        let Some((count, rest)) = line.split_once(' ') else {
            continue;
        };
        let Ok(ir) = count.replace(',', "").parse::<u64>() else {
            continue;
        };
        let rest = rest.trim_start();
        // Newer callgrind_annotate prints the share in parentheses after the count.
        let rest = match rest.strip_prefix('(').and_then(|r| r.split_once(')')) {
            Some((_, after)) => after.trim_start(),
            None => rest,
        };
        if rest.is_empty() || rest.starts_with("PROGRAM TOTALS") || rest.starts_with("events") {
            continue;
        }
        // The frames that hold the whole measured part (main, the runtime's block_on, the
        // measured function itself) say nothing about where the cost goes.
        if total > 0 && ir.saturating_mul(100) >= total.saturating_mul(99) {
            continue;
        }
        let located = match rest.rsplit_once(" [") {
            Some((n, _binary)) => n,
            None => rest,
        };
        // `file:function`: paths hold no colon, Rust paths do.
        let (file, name) = located.split_once(':').unwrap_or(("???", located));
        functions.push(Function {
            ir,
            percent: if total > 0 {
                100.0 * ir as f64 / total as f64
            } else {
                0.0
            },
            name: name.to_string(),
            file: file.to_string(),
        });
        if functions.len() == top {
            break;
        }
    }
    functions
}

/// The printed table.
pub fn table(machine: &Machine, params: &CostParams, results: &CostResults) -> String {
    use std::fmt::Write as _;
    let r = results;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "cost: {} widgets ({} B spec) synced up and status down, engine + in-process fakeapi, {} callgrind runs",
        params.objects, params.spec_bytes, params.runs
    );
    let _ = writeln!(s, "  {:<6} {:>16} {:>14} {:>10}", "run", "Ir", "Ir/object", "wall s");
    for (i, run) in r.runs.iter().enumerate() {
        let _ = writeln!(
            s,
            "  {:<6} {:>16} {:>14.0} {:>10.1}",
            i + 1,
            run.ir,
            run.ir_per_object,
            run.wall_seconds
        );
    }
    let _ = writeln!(
        s,
        "  Ir/object median {:.0}, min {:.0}, max {:.0}, spread {:.2} % (load {} → {})",
        r.ir_per_object_median,
        r.ir_per_object_min,
        r.ir_per_object_max,
        r.spread_percent,
        machine.load_before,
        machine.load_after,
    );
    let _ = writeln!(s, "  top {} inclusive (run 1):", r.top_inclusive.len());
    for f in &r.top_inclusive {
        let _ = writeln!(s, "  {:>16} {:>6.2} %  {}", f.ir, f.percent, f.name);
    }
    s
}

// ---- the inner workload ----

/// The spec of widget `i`: about 1 KiB of JSON, distinct per widget.
fn spec(i: usize) -> Value {
    let filler: String = (0..SPEC_FILLER)
        .map(|k| char::from(b'a' + ((i + k) % 26) as u8))
        .collect();
    json!({"size": i, "color": "blue", "config": {"note": filler}})
}

fn spec_bytes() -> usize {
    serde_json::to_vec(&spec(0)).map_or(0, |v| v.len())
}

fn widget_name(i: usize) -> String {
    format!("w-{i:06}")
}

/// The world of one inner run.
struct CostWorld {
    consumer_admin: FakeClient,
    provider_admin: FakeClient,
    _engine: tokio::task::JoinHandle<()>,
}

/// Runs the workload once on a paused-clock runtime; callgrind counts only [`measured_sync`].
pub fn run_inner(objects: usize) -> anyhow::Result<InnerReport> {
    // One thread, so every task runs inside `block_on` (and so inside the measured function's
    // stack while it runs); the paused clock makes the run independent of how fast it goes.
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .context("building the runtime")?;
    // The konnector logs at `info` by default: its formatting is part of the cost.
    let subscriber = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new("info"))
        .with_writer(std::io::sink)
        .finish();
    let _log = tracing::subscriber::set_default(subscriber);
    let world = rt.block_on(setup())?;
    let (report, virtual_elapsed, wall) = measured_sync(&rt, &world, objects);
    let mut report = report?;
    report.virtual_ms = u64::try_from(virtual_elapsed.as_millis()).unwrap_or(u64::MAX);
    report.wall_ms = u64::try_from(wall.as_millis()).unwrap_or(u64::MAX);
    Ok(report)
}

async fn setup() -> anyhow::Result<CostWorld> {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let consumer = FakeCluster::builder("consumer").seed(1).clock(clock.clone()).build();
    let provider = FakeCluster::builder("provider").seed(2).clock(clock.clone()).build();
    let ca_pem = b"-----BEGIN CERTIFICATE-----\nY29zdA==\n-----END CERTIFICATE-----\n".to_vec();
    let connector = Arc::new(FakeConnector::default());
    connector.register("provider", provider.clone(), ca_pem.clone());
    let token = "kbind-bench-cost-token";
    provider.add_token(
        token,
        UserInfo {
            name: "kbind-konnector".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        },
    );
    let consumer_admin = consumer.admin_client();
    let provider_admin = provider.admin_client();
    let crd_res = ApiResource::erase::<
        k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
    >(&());
    provider_admin
        .create(&crd_res, None, &object(widgets_crd())?, &Default::default())
        .await
        .context("installing the widgets CRD on the provider")?;
    for mut crd in kbind_api::crds() {
        // kube-apiserver defaults listKind; fakeapi does not (as the scenario world notes).
        crd.spec.names.list_kind = Some(format!("{}List", crd.spec.names.kind));
        consumer_admin
            .create_typed(&crd)
            .await
            .context("installing kbind's CRDs")?;
    }
    let ns_res = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    consumer_admin
        .create(
            &ns_res,
            None,
            &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}))?,
            &Default::default(),
        )
        .await
        .context("creating the konnector's namespace")?;
    let connections = ApiResource::erase::<kbind_api::Connection>(&());
    wait_until("kbind's CRDs served", async || {
        consumer_admin
            .list(&connections, None, &Default::default())
            .await
            .is_ok()
    })
    .await?;
    let kubeconfig = kbind_scenarios::bundle::kubeconfig(&FakeConnector::server_url("provider"), &ca_pem, token);
    for obj in kbind_scenarios::bundle::bundle("provider", NAMESPACE, &kubeconfig, &["widgets.example.org"]) {
        let res = resource_of(&obj)?;
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        consumer_admin
            .create(&res, ns.as_deref(), &object(obj)?, &Default::default())
            .await
            .context("applying the bundle")?;
    }

    let ctx = Context {
        consumer: Arc::new(consumer.client(UserInfo {
            name: "kbind-konnector".into(),
            groups: vec!["system:masters".into(), "system:authenticated".into()],
        })),
        connector,
        clock,
        randomness: kbind_cluster::backoff::seeded(4),
        config: EngineConfig::default(),
    };
    let engine = Engine::builder(ctx).build();
    let engine = tokio::spawn(async move { engine.run().await });
    wait_until("widgets served on the consumer", async || {
        consumer_admin
            .list(&widgets(), Some(WIDGET_NAMESPACE), &Default::default())
            .await
            .is_ok()
    })
    .await?;
    Ok(CostWorld {
        consumer_admin,
        provider_admin,
        _engine: engine,
    })
}

fn object(value: Value) -> anyhow::Result<kbind_cluster::DynamicObject> {
    serde_json::from_value(value).context("building an object")
}

fn resource_of(obj: &Value) -> anyhow::Result<ApiResource> {
    match obj.get("kind").and_then(Value::as_str) {
        Some("Secret") => Ok(ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())),
        Some("Connection") => Ok(ApiResource::erase::<kbind_api::Connection>(&())),
        Some("ClusterBinding") => Ok(ApiResource::erase::<kbind_api::ClusterBinding>(&())),
        other => bail!("unexpected bundle object {other:?}"),
    }
}

/// Polls `check` on the paused clock until it holds (setup only: never inside the measured part,
/// whose probes are [`probe`]).
async fn wait_until(what: &str, mut check: impl AsyncFnMut() -> bool) -> anyhow::Result<()> {
    let deadline = tokio::time::Instant::now() + VIRTUAL_DEADLINE;
    while !check().await {
        if tokio::time::Instant::now() >= deadline {
            bail!(
                "not observed within {} s (paused clock): {what}",
                VIRTUAL_DEADLINE.as_secs()
            );
        }
        tokio::time::sleep(PROBE_EVERY).await;
    }
    Ok(())
}

/// The measured part: callgrind's collection is on while this runs (`--toggle-collect`).
#[inline(never)]
fn measured_sync(
    rt: &tokio::runtime::Runtime,
    world: &CostWorld,
    objects: usize,
) -> (anyhow::Result<InnerReport>, Duration, Duration) {
    let wall = Instant::now();
    let start = rt.block_on(async { tokio::time::Instant::now() });
    let report = rt.block_on(sync_objects(world, objects));
    let virtual_elapsed = rt.block_on(async { tokio::time::Instant::now() }) - start;
    (report, virtual_elapsed, wall.elapsed())
}

async fn sync_objects(world: &CostWorld, objects: usize) -> anyhow::Result<InnerReport> {
    loadgen_create(&world.consumer_admin, objects)?;
    let deadline = tokio::time::Instant::now() + VIRTUAL_DEADLINE;
    let mut progress = probe(world)?;
    while progress.copies_up < objects {
        if tokio::time::Instant::now() >= deadline {
            return Ok(progress.report(objects));
        }
        tokio::time::sleep(PROBE_EVERY).await;
        progress = probe(world)?;
    }
    loadgen_status(&world.provider_admin)?;
    while progress.statuses_down < objects {
        if tokio::time::Instant::now() >= deadline {
            return Ok(progress.report(objects));
        }
        tokio::time::sleep(PROBE_EVERY).await;
        progress = probe(world)?;
    }
    // Let the echoes of the last writes (watch events of the konnector's own writes) be seen,
    // so every run ends in the same quiet state.
    tokio::time::sleep(PROBE_EVERY).await;
    Ok(probe(world)?.report(objects))
}

/// How far the sync got.
#[derive(Debug, Clone, Copy)]
struct Progress {
    copies_up: usize,
    statuses_down: usize,
}

impl Progress {
    fn report(self, objects: usize) -> InnerReport {
        InnerReport {
            objects,
            copies_up: self.copies_up,
            statuses_down: self.statuses_down,
            virtual_ms: 0,
            wall_ms: 0,
        }
    }
}

/// Drives an in-process fakeapi call to completion without yielding to the runtime: the fake
/// answers at once (no latency is configured), and staying synchronous keeps the call inside
/// the calling function's frame, where callgrind's toggle sees it.
fn now<T>(future: impl std::future::Future<Output = T>) -> T {
    futures::executor::block_on(future)
}

/// The load generator: N widgets on the consumer (not counted).
#[inline(never)]
fn loadgen_create(consumer: &FakeClient, objects: usize) -> anyhow::Result<()> {
    for i in 0..objects {
        let w = widget(WIDGET_NAMESPACE, &widget_name(i), spec(i));
        now(consumer.create(&widgets(), Some(WIDGET_NAMESPACE), &w, &Default::default()))
            .with_context(|| format!("creating widget {i}"))?;
    }
    Ok(())
}

/// The provider's controller: a status on every copy (not counted).
#[inline(never)]
fn loadgen_status(provider: &FakeClient) -> anyhow::Result<()> {
    let list = now(provider.list(&widgets(), None, &Default::default())).context("listing the copies")?;
    for w in list.items {
        let name = w.metadata.name.clone().unwrap_or_default();
        let generation = w.metadata.generation.unwrap_or(0);
        let status = json!({"status": {"phase": "Ready", "observedGeneration": generation}});
        now(provider.patch_status(
            &widgets(),
            w.metadata.namespace.as_deref(),
            &name,
            &Patch::Merge(status),
            &PatchParams::default(),
        ))
        .with_context(|| format!("writing the status of {name}"))?;
    }
    Ok(())
}

/// The harness's convergence check (not counted): copies whose spec matches, statuses back.
#[inline(never)]
fn probe(world: &CostWorld) -> anyhow::Result<Progress> {
    let up = now(world.provider_admin.list(&widgets(), None, &Default::default())).context("listing the copies")?;
    let copies_up = up
        .items
        .iter()
        .filter(|w| {
            let name = w.metadata.name.as_deref().unwrap_or_default();
            name.strip_prefix("w-")
                .and_then(|n| n.parse::<usize>().ok())
                .is_some_and(|i| w.data.get("spec") == Some(&spec(i)))
        })
        .count();
    let down = now(world
        .consumer_admin
        .list(&widgets(), Some(WIDGET_NAMESPACE), &Default::default()))
    .context("listing the consumer's widgets")?;
    let statuses_down = down
        .items
        .iter()
        .filter(|w| w.data.pointer("/status/phase").and_then(Value::as_str) == Some("Ready"))
        .count();
    Ok(Progress {
        copies_up,
        statuses_down,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn totals_are_read_from_either_line() {
        assert_eq!(total_ir("events: Ir\nsummary: 12345\n"), Some(12345));
        assert_eq!(total_ir("events: Ir\ntotals: 42\nsummary: 7\n"), Some(42));
        assert_eq!(total_ir("events: Ir\n"), None);
    }

    #[test]
    fn annotate_lines_with_and_without_percentages() {
        let text = "\
--------------------------------------------------------------------------------
Ir
--------------------------------------------------------------------------------
1,000 (100.0%)  PROGRAM TOTALS

--------------------------------------------------------------------------------
Ir            file:function
--------------------------------------------------------------------------------
1,000 (100.0%)  src/main.rs:kbind_bench::main [/x/kbind-bench]
  900 (90.00%)  src/sync.rs:kbind_engine::sync::Shared::sync::{{closure}} [/x/kbind-bench]
  450  ???:serde_json::de::from_str [/x/kbind-bench]
";
        let f = parse_annotate(text, 1000, 15);
        assert_eq!(f.len(), 2, "the frame holding everything is left out: {f:?}");
        assert_eq!(f[0].ir, 900);
        assert_eq!(f[0].name, "kbind_engine::sync::Shared::sync::{{closure}}");
        assert_eq!(f[0].file, "src/sync.rs");
        assert!((f[0].percent - 90.0).abs() < 1e-9);
        assert_eq!(f[1].name, "serde_json::de::from_str");
        assert_eq!(parse_annotate(text, 1000, 1).len(), 1);
    }

    #[test]
    fn callgrind_counts_only_the_measured_window() {
        let args = callgrind_args(Path::new("/tmp/x"));
        assert!(args.contains(&"--collect-atstart=no".to_string()));
        assert!(args.contains(&"--toggle-collect=kbind_bench::cost::measured_sync".to_string()));
    }

    #[test]
    fn the_spec_is_about_a_kibibyte() {
        let bytes = spec_bytes();
        assert!((1000..1100).contains(&bytes), "{bytes}");
        assert_ne!(spec(1), spec(2));
    }
}
