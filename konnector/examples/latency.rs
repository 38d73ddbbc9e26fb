//! Measures how fast changes cross the konnector and what it costs while idle: N widgets synced
//! between two fake clusters served over HTTPS, then the release `konnector` binary idles (RSS,
//! CPU, requests and watches per minute from fakeapi's request log), then provider status changes
//! and consumer spec changes arrive at a steady rate while this process watches both sides and
//! times each change end to end; the konnector's own `kbind_status_down_seconds` and
//! `kbind_spec_up_seconds` histograms are read from its `/metrics` beside them.
//!
//! ```sh
//! cargo build --release -p konnector
//! cargo run --release -p konnector --example latency -- --objects 1000 --json /tmp/latency.json
//! cargo run --release -p konnector --example latency -- --compare a.json b.json   # side by side
//! ```
//!
//! `KONNECTOR_BIN` overrides the binary (default: `konnector` next to this example's folder).
//! The end-to-end figures are the honest ones: the histograms' buckets double from 5 ms.

mod common;

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use clap::Parser;
use common::{Bench, Histogram, Requests, konnector_binary, load_average, mib, widget_name};
use futures::StreamExt as _;
use kbind_cluster::{ClusterClient, DynamicObject, Patch, PatchParams, WatchEvent, WatchParams};
use konnector::demo::widgets;
use serde_json::{Value, json};

/// How long the changes still in flight when the load stops may take to arrive.
const DRAIN_DEADLINE: Duration = Duration::from_secs(60);

/// Latency and idle cost of the konnector binary.
#[derive(Parser, Debug)]
struct Args {
    /// Widgets synced before anything is measured.
    #[arg(long, default_value_t = 1000)]
    objects: usize,
    /// Provider status changes per second, and as many consumer spec changes.
    #[arg(long, default_value_t = 20.0)]
    rate: f64,
    /// Seconds of steady changes.
    #[arg(long, default_value_t = 60)]
    duration: u64,
    /// Seconds between the end of the sync and the idle window (status and finalizer writes of
    /// the sync still echo through the watches).
    #[arg(long, default_value_t = 15)]
    settle: u64,
    /// Seconds of the idle window (CPU, requests, watches).
    #[arg(long, default_value_t = 60)]
    idle: u64,
    /// A name for this run in the table and the JSON (e.g. `before`).
    #[arg(long, default_value = "")]
    label: String,
    /// Where to write the results as JSON.
    #[arg(long, value_name = "PATH")]
    json: Option<PathBuf>,
    /// Print the runs in these JSON files side by side instead of measuring.
    #[arg(long, value_name = "JSON", num_args = 1..)]
    compare: Vec<PathBuf>,
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let args = Args::parse();
    if !args.compare.is_empty() {
        let runs = args
            .compare
            .iter()
            .map(|path| {
                let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
                serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
            })
            .collect::<anyhow::Result<Vec<Value>>>()?;
        print!("{}", table(&runs));
        return Ok(());
    }
    if args.objects == 0 || args.rate.is_nan() || args.rate <= 0.0 {
        bail!("--objects and --rate must be positive");
    }
    let result = measure(&args).await?;
    print!("{}", table(std::slice::from_ref(&result)));
    if let Some(path) = &args.json {
        let text = serde_json::to_string_pretty(&result).context("encoding the results")?;
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

async fn measure(args: &Args) -> anyhow::Result<Value> {
    let binary = konnector_binary()?;
    let load_at_start = load_average();
    let hz = common::clock_ticks_per_second() as f64;
    let mut bench = Bench::start(binary.clone()).await?;
    let (rss_before_sync, _) = bench.memory_kib()?;

    let start = Instant::now();
    bench.create_widgets(args.objects).await?;
    bench.wait_synced(args.objects).await?;
    let synced = start.elapsed();
    let (rss_synced, _) = bench.memory_kib()?;
    let provider_bytes = json_bytes(&bench.provider).await?;
    let consumer_bytes = json_bytes(&bench.consumer).await?;

    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    let marks = bench.request_marks();
    let cpu_before_idle = bench.cpu_ticks()?;
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let cpu_idle = (bench.cpu_ticks()? - cpu_before_idle) as f64 / hz;
    let (provider_idle, consumer_idle) = bench.konnector_requests_since(marks);
    let (rss_idle, _) = bench.memory_kib()?;
    bench.check_running()?;

    let load_before_changes = load_average();
    let metrics_before = bench.scrape().await?;
    let cpu_before_load = bench.cpu_ticks()?;
    let (status_down, spec_up, sent) = changes(&bench, args).await?;
    let cpu_load = (bench.cpu_ticks()? - cpu_before_load) as f64 / hz;
    let metrics_after = bench.scrape().await?;
    let (rss_after_load, rss_peak) = bench.memory_kib()?;
    bench.check_running()?;
    let load_at_end = load_average();
    bench.shutdown().await?;

    let per_minute = |n: u64| n as f64 * 60.0 / args.idle as f64;
    let histogram = |name: &str| {
        let h = Histogram::parse(&metrics_after, name).since(&Histogram::parse(&metrics_before, name));
        json!({
            "count": h.count,
            "mean_ms": (h.count > 0).then(|| 1000.0 * h.sum / h.count as f64),
            "p50_le_ms": h.quantile_bound(0.50).map(|s| 1000.0 * s),
            "p99_le_ms": h.quantile_bound(0.99).map(|s| 1000.0 * s),
            "max_le_ms": h.quantile_bound(1.0).map(|s| 1000.0 * s),
        })
    };
    let requests = |r: Requests| json!({"all_per_minute": per_minute(r.all), "watches_per_minute": per_minute(r.watches), "by_kind_in_window": r.by_kind});
    Ok(json!({
        "label": args.label,
        "binary": binary.display().to_string(),
        "objects": args.objects,
        "rate_per_second": args.rate,
        "duration_seconds": args.duration,
        "idle_seconds": args.idle,
        "load_average": {"start": load_at_start, "before_changes": load_before_changes, "end": load_at_end},
        "sync_seconds": synced.as_secs_f64(),
        "objects_json_bytes": {"provider": provider_bytes, "consumer": consumer_bytes},
        "rss_kib": {"before_sync": rss_before_sync, "after_sync": rss_synced, "after_idle": rss_idle, "after_changes": rss_after_load, "peak": rss_peak},
        "idle_cpu_percent": 100.0 * cpu_idle / args.idle as f64,
        "changes_cpu_percent": 100.0 * cpu_load / args.duration as f64,
        "idle_requests": {
            "provider": requests(provider_idle),
            "consumer": requests(consumer_idle),
        },
        "end_to_end": {
            "status_down": summary(status_down, sent),
            "spec_up": summary(spec_up, sent),
        },
        "metrics": {
            "status_down": histogram("kbind_status_down_seconds"),
            "spec_up": histogram("kbind_spec_up_seconds"),
        },
    }))
}

/// The JSON size of the widgets on one side, as the konnector's caches would hold them before
/// any trimming.
async fn json_bytes(client: &dyn ClusterClient) -> anyhow::Result<u64> {
    let list = client
        .list(&widgets(), None, &Default::default())
        .await
        .context("listing widgets")?;
    let mut bytes = 0;
    for item in &list.items {
        bytes += serde_json::to_vec(item).context("encoding a widget")?.len() as u64;
    }
    Ok(bytes)
}

/// Changes sent and not yet seen on the other side: marker → (object, when it was sent).
type Pending = Arc<Mutex<HashMap<String, (String, Instant)>>>;

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Sends status changes on the provider and spec changes on the consumer at `args.rate` each for
/// `args.duration`, then waits for the last to arrive; the end-to-end latencies of each, and how
/// many of each were sent.
async fn changes(bench: &Bench, args: &Args) -> anyhow::Result<(Vec<Duration>, Vec<Duration>, u64)> {
    let status_pending: Pending = Arc::default();
    let spec_pending: Pending = Arc::default();
    let status_seen: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let spec_seen: Arc<Mutex<Vec<Duration>>> = Arc::default();
    // Watching from a listed resourceVersion, so every change after this point is seen.
    let status_watch = tokio::spawn(observe(
        Arc::new(bench.consumer.clone()),
        "/status/phase",
        status_pending.clone(),
        status_seen.clone(),
    ));
    let spec_watch = tokio::spawn(observe(
        Arc::new(bench.provider.clone()),
        "/spec/color",
        spec_pending.clone(),
        spec_seen.clone(),
    ));
    // Both watches are open once a change made now reaches them: a probe per side.
    wait_watching(bench, &status_pending, &spec_pending).await?;
    lock(&status_seen).clear();
    lock(&spec_seen).clear();

    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let end = Instant::now() + Duration::from_secs(args.duration);
    let mut sent = 0u64;
    let params = PatchParams::default();
    while Instant::now() < end {
        tick.tick().await;
        // Status and spec changes go to different objects, each object changed at most once
        // per N / rate seconds, so no change is folded into the next.
        let status_object = widget_name(sent as usize % args.objects);
        let spec_object = widget_name((sent as usize + args.objects / 2) % args.objects);
        let status_marker = format!("s-{sent}");
        let spec_marker = format!("c-{sent}");
        lock(&status_pending).insert(status_marker.clone(), (status_object.clone(), Instant::now()));
        bench
            .provider
            .patch_status(
                &widgets(),
                Some("default"),
                &status_object,
                &Patch::Merge(json!({"status": {"phase": status_marker}})),
                &params,
            )
            .await
            .with_context(|| format!("changing the status of {status_object} on the provider"))?;
        lock(&spec_pending).insert(spec_marker.clone(), (spec_object.clone(), Instant::now()));
        bench
            .consumer
            .patch(
                &widgets(),
                Some("default"),
                &spec_object,
                &Patch::Merge(json!({"spec": {"color": spec_marker}})),
                &params,
            )
            .await
            .with_context(|| format!("changing the spec of {spec_object} on the consumer"))?;
        sent += 1;
    }
    let drained = common::wait_for("the last changes to arrive", DRAIN_DEADLINE, async || {
        (lock(&status_pending).is_empty() && lock(&spec_pending).is_empty()).then_some(())
    })
    .await;
    status_watch.abort();
    spec_watch.abort();
    if let Err(e) = drained {
        bail!(
            "{e}: {} status and {} spec changes never arrived",
            lock(&status_pending).len(),
            lock(&spec_pending).len()
        );
    }
    let status = std::mem::take(&mut *lock(&status_seen));
    let spec = std::mem::take(&mut *lock(&spec_seen));
    Ok((status, spec, sent))
}

/// Changes one object on each side and waits until both watches have seen it.
async fn wait_watching(bench: &Bench, status_pending: &Pending, spec_pending: &Pending) -> anyhow::Result<()> {
    let probe = widget_name(0);
    // A new marker per attempt: writing the same value again would be no change and no event.
    let mut attempt = 0u32;
    common::wait_for("both watches open", Duration::from_secs(60), async || {
        attempt += 1;
        let status_marker = format!("probe-status-{attempt}");
        let spec_marker = format!("probe-spec-{attempt}");
        lock(status_pending).insert(status_marker.clone(), (probe.clone(), Instant::now()));
        lock(spec_pending).insert(spec_marker.clone(), (probe.clone(), Instant::now()));
        // Written on the sides the watches read: the status on the consumer, the spec on the
        // provider (the konnector puts the spec back, which is a later event).
        let status = json!({"status": {"phase": status_marker}});
        let spec = json!({"spec": {"color": spec_marker}});
        let params = PatchParams::default();
        let _ = bench
            .consumer
            .patch_status(&widgets(), Some("default"), &probe, &Patch::Merge(status), &params)
            .await;
        let _ = bench
            .provider
            .patch(&widgets(), Some("default"), &probe, &Patch::Merge(spec), &params)
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let done = !lock(status_pending).contains_key(&status_marker) && !lock(spec_pending).contains_key(&spec_marker);
        lock(status_pending).clear();
        lock(spec_pending).clear();
        done.then_some(())
    })
    .await?;
    // The probes' own echoes (the konnector undoing them) must not count: the markers differ
    // from every change sent, so they never match.
    Ok(())
}

/// Watches the widgets of `client` and, for each object whose `field` holds a pending marker,
/// records how long ago that marker was sent.
async fn observe(
    client: Arc<dyn ClusterClient>,
    field: &'static str,
    pending: Pending,
    seen: Arc<Mutex<Vec<Duration>>>,
) {
    let mut resource_version = String::new();
    loop {
        if resource_version.is_empty() {
            match client.list(&widgets(), Some("default"), &Default::default()).await {
                Ok(list) => resource_version = list.metadata.resource_version.unwrap_or_default(),
                Err(e) => {
                    eprintln!("listing widgets for the latency watch failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let mut stream = match client
            .watch(&widgets(), Some("default"), &WatchParams::default(), &resource_version)
            .await
        {
            Ok(stream) => stream,
            Err(e) => {
                eprintln!("the latency watch failed to open: {e}");
                resource_version.clear();
                continue;
            }
        };
        while let Some(event) = stream.next().await {
            match event {
                Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => {
                    note(&obj, field, &pending, &seen);
                    if let Some(rv) = obj.metadata.resource_version {
                        resource_version = rv;
                    }
                }
                Ok(WatchEvent::Bookmark(b)) => resource_version = b.metadata.resource_version,
                Ok(_) => {}
                Err(e) => {
                    eprintln!("the latency watch failed, relisting: {e}");
                    resource_version.clear();
                    break;
                }
            }
        }
    }
}

fn note(obj: &DynamicObject, field: &str, pending: &Pending, seen: &Mutex<Vec<Duration>>) {
    let Some(marker) = obj.data.pointer(field).and_then(Value::as_str) else {
        return;
    };
    let mut pending = lock(pending);
    let Some((name, sent)) = pending.get(marker) else {
        return;
    };
    if obj.metadata.name.as_deref() != Some(name.as_str()) {
        return;
    }
    let latency = sent.elapsed();
    pending.remove(marker);
    lock(seen).push(latency);
}

/// p50, p99 and max of `latencies`, in milliseconds.
fn summary(mut latencies: Vec<Duration>, sent: u64) -> Value {
    latencies.sort();
    let at = |q: f64| -> Option<f64> {
        let rank = ((q * latencies.len() as f64).ceil() as usize).max(1);
        latencies.get(rank - 1).map(|d| d.as_secs_f64() * 1000.0)
    };
    json!({"sent": sent, "seen": latencies.len(), "p50_ms": at(0.50), "p99_ms": at(0.99), "max_ms": at(1.0)})
}

/// One markdown table, a column per run.
fn table(runs: &[Value]) -> String {
    let ms = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("{x:.1} ms"));
    let le = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("≤ {x:.0} ms"));
    // A histogram's quantiles are bucket bounds, not measurements: shown as "≤ x ms".
    let histogram = move |h: &Value| {
        format!(
            "{} / {} / {} (n={})",
            le(&h["p50_le_ms"]),
            le(&h["p99_le_ms"]),
            le(&h["max_le_ms"]),
            h["count"]
        )
    };
    let num = |v: &Value| v.as_f64().map_or("–".to_string(), |x| format!("{x:.1}"));
    let kib = |v: &Value| v.as_u64().map_or("–".to_string(), mib);
    type Row = (&'static str, Box<dyn Fn(&Value) -> String>);
    let rows: Vec<Row> = vec![
        ("objects", Box::new(|r| r["objects"].to_string())),
        (
            "changes/s (status + spec)",
            Box::new(|r| format!("{} + {}", r["rate_per_second"], r["rate_per_second"])),
        ),
        (
            "load average (start / changes / end)",
            Box::new(|r| {
                let l = &r["load_average"];
                format!(
                    "{} / {} / {}",
                    l["start"].as_str().unwrap_or("?"),
                    l["before_changes"].as_str().unwrap_or("?"),
                    l["end"].as_str().unwrap_or("?")
                )
            }),
        ),
        (
            "sync of all objects",
            Box::new(move |r| r["sync_seconds"].as_f64().map_or("–".into(), |s| format!("{s:.1} s"))),
        ),
        (
            "status down, end to end p50 / p99 / max",
            Box::new(move |r| {
                let e = &r["end_to_end"]["status_down"];
                format!("{} / {} / {}", ms(&e["p50_ms"]), ms(&e["p99_ms"]), ms(&e["max_ms"]))
            }),
        ),
        (
            "spec up, end to end p50 / p99 / max",
            Box::new(move |r| {
                let e = &r["end_to_end"]["spec_up"];
                format!("{} / {} / {}", ms(&e["p50_ms"]), ms(&e["p99_ms"]), ms(&e["max_ms"]))
            }),
        ),
        (
            "changes seen / sent (status, spec)",
            Box::new(|r| {
                let e = &r["end_to_end"];
                format!(
                    "{}/{}, {}/{}",
                    e["status_down"]["seen"], e["status_down"]["sent"], e["spec_up"]["seen"], e["spec_up"]["sent"]
                )
            }),
        ),
        (
            "`kbind_status_down_seconds` p50 / p99 / max",
            Box::new(move |r| histogram(&r["metrics"]["status_down"])),
        ),
        (
            "`kbind_spec_up_seconds` p50 / p99 / max",
            Box::new(move |r| histogram(&r["metrics"]["spec_up"])),
        ),
        (
            "RSS before sync / after sync",
            Box::new(move |r| {
                format!(
                    "{} / {}",
                    kib(&r["rss_kib"]["before_sync"]),
                    kib(&r["rss_kib"]["after_sync"])
                )
            }),
        ),
        (
            "JSON size of the synced objects (provider / consumer)",
            Box::new(|r| {
                let b = &r["objects_json_bytes"];
                format!(
                    "{:.0} KiB / {:.0} KiB",
                    b["provider"].as_f64().unwrap_or(0.0) / 1024.0,
                    b["consumer"].as_f64().unwrap_or(0.0) / 1024.0
                )
            }),
        ),
        ("RSS after idle", Box::new(move |r| kib(&r["rss_kib"]["after_idle"]))),
        (
            "RSS after changes / peak",
            Box::new(move |r| {
                format!(
                    "{} / {}",
                    kib(&r["rss_kib"]["after_changes"]),
                    kib(&r["rss_kib"]["peak"])
                )
            }),
        ),
        (
            "CPU while idle (% of a core)",
            Box::new(move |r| format!("{} % over {} s", num(&r["idle_cpu_percent"]), r["idle_seconds"])),
        ),
        (
            "CPU during changes (% of a core)",
            Box::new(move |r| format!("{} %", num(&r["changes_cpu_percent"]))),
        ),
        (
            "idle requests/min, provider (watches)",
            Box::new(move |r| {
                let p = &r["idle_requests"]["provider"];
                format!("{} ({})", num(&p["all_per_minute"]), num(&p["watches_per_minute"]))
            }),
        ),
        (
            "idle requests/min, consumer (watches)",
            Box::new(move |r| {
                let c = &r["idle_requests"]["consumer"];
                format!("{} ({})", num(&c["all_per_minute"]), num(&c["watches_per_minute"]))
            }),
        ),
    ];
    let mut out = String::from("| |");
    for run in runs {
        let label = run["label"].as_str().filter(|l| !l.is_empty()).unwrap_or("konnector");
        out += &format!(" {label} |");
    }
    out += "\n|---|";
    out += &"---|".repeat(runs.len());
    out += "\n";
    for (name, cell) in &rows {
        out += &format!("| {name} |");
        for run in runs {
            out += &format!(" {} |", cell(run));
        }
        out += "\n";
    }
    out
}
