//! Workload 3, scale-out: C Connections (each its own provider identity) × A APIs × n objects;
//! the konnector's memory, CPU, open watches and requests while idle, at several C so "flat in N"
//! can be judged.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::Profile;
use crate::output::{Envelope, Table, fmt};
use crate::world::{Backend, Konnector, Layout, World};

/// The workload's name in JSON and file names.
pub const NAME: &str = "scale_out";

/// Flags of the scale-out workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "real")]
    pub backend: Backend,
    /// Connections, each with its own provider credential.
    #[arg(long, default_value_t = 20)]
    pub connections: usize,
    /// APIs per Connection.
    #[arg(long, default_value_t = 5)]
    pub apis: usize,
    /// Objects per API.
    #[arg(long, default_value_t = 50)]
    pub objects: usize,
    /// Bytes of JSON per object's spec.
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
    /// Seconds after the sync before the idle window (the sync's own echoes settle).
    #[arg(long, default_value_t = 15)]
    pub settle: u64,
    /// Seconds of the idle window.
    #[arg(long, default_value_t = 60)]
    pub idle: u64,
    /// Seconds of a window with no konnector (real servers: their own background requests).
    #[arg(long, default_value_t = 30)]
    pub baseline: u64,
}

/// The runs of a profile.
pub fn profile(profile: Profile) -> Vec<Args> {
    let args = |backend, connections| Args {
        backend,
        connections,
        apis: 5,
        objects: 50,
        spec_bytes: 1024,
        settle: 15,
        idle: 60,
        baseline: 30,
    };
    match profile {
        Profile::Smoke => vec![Args {
            apis: 2,
            objects: 3,
            settle: 1,
            idle: 2,
            baseline: 1,
            ..args(Backend::Fake, 2)
        }],
        Profile::Full => [1, 5, 10, 20, 50].into_iter().map(|c| args(Backend::Real, c)).collect(),
    }
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, konnector: &Konnector) -> anyhow::Result<Value> {
    let layout = Layout {
        backend: args.backend,
        connections: args.connections,
        apis: args.apis,
        proxy: false,
    };
    let mut world = World::start(layout).await?;
    let apis = world.apis();
    // The servers' own requests (the controller-manager's, on real servers) without a konnector.
    let mark = world.request_mark().await?;
    tokio::time::sleep(Duration::from_secs(args.baseline)).await;
    let baseline = world.requests_since(&mark).await?;
    let per_minute = |n: f64, seconds: u64| n * 60.0 / seconds.max(1) as f64;

    world.start_provider_controllers();
    let start = Instant::now();
    world.start_konnector(konnector).await?;
    let ready_seconds = start.elapsed().as_secs_f64();
    let (rss_ready_kib, _) = world.konnector_memory_kib()?;
    let created = Instant::now();
    for res in &apis {
        world.create_items(res, 0..args.objects, args.spec_bytes, 16).await?;
    }
    world
        .wait_synced(&apis, args.objects, Duration::from_secs(1800), Duration::from_secs(1))
        .await?;
    let sync_seconds = created.elapsed().as_secs_f64();
    let (rss_synced_kib, _) = world.konnector_memory_kib()?;

    tokio::time::sleep(Duration::from_secs(args.settle)).await;
    let mark = world.request_mark().await?;
    let cpu_before = world.konnector_cpu_seconds()?;
    tokio::time::sleep(Duration::from_secs(args.idle)).await;
    let idle_cpu = world.konnector_cpu_seconds()? - cpu_before;
    let idle = world.requests_since(&mark).await?;
    world.check_running()?;
    let (rss_idle_kib, hwm_kib) = world.konnector_memory_kib()?;
    let provider_bytes = World::json_bytes(&*world.provider, &apis).await?;
    let consumer_bytes = World::json_bytes(&*world.consumer, &apis).await?;
    let mut copies = 0;
    let mut statuses = 0;
    for res in &apis {
        copies += World::count(&*world.provider, res).await.unwrap_or_default().0;
        statuses += World::count(&*world.consumer, res).await.unwrap_or_default().1;
    }
    world.shutdown().await?;

    let total = args.connections * args.apis * args.objects;
    let side = |idle: &crate::world::Side, base: &crate::world::Side| {
        json!({
            "per_minute": per_minute(idle.all, args.idle),
            "baseline_per_minute": per_minute(base.all, args.baseline),
            "konnector_per_minute": per_minute(idle.all, args.idle) - per_minute(base.all, args.baseline),
            "watches_opened_per_minute": per_minute(idle.watches_opened, args.idle) - per_minute(base.watches_opened, args.baseline),
            "watches_open": idle.watches_open.zip(base.watches_open).map(|(i, b)| i - b),
            "by_kind_in_window": idle.by_kind,
        })
    };
    Ok(json!({
        "connections": args.connections,
        "apis_total": apis.len(),
        "objects_total": total,
        "ready_seconds": ready_seconds,
        "sync_seconds": sync_seconds,
        "rss_kib": {"ready": rss_ready_kib, "synced": rss_synced_kib, "idle": rss_idle_kib, "peak": hwm_kib},
        "json_bytes": {"provider": provider_bytes, "consumer": consumer_bytes},
        "idle_cpu_percent": 100.0 * idle_cpu / args.idle as f64,
        "idle_requests": {"provider": side(&idle.provider, &baseline.provider), "consumer": side(&idle.consumer, &baseline.consumer)},
        "checks": {
            "every_copy_exists": copies == total,
            "every_status_back": statuses == total,
        },
    }))
}

/// One row per run.
pub fn table(runs: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Scale-out (workload 3): idle cost by Connections",
        &[
            "backend",
            "Connections",
            "APIs",
            "objects",
            "sync s",
            "RSS ready / synced / idle MiB",
            "JSON KiB (prov + cons)",
            "RSS target MiB",
            "idle CPU %",
            "idle req/min prov / cons",
            "watches open prov / cons",
        ],
    );
    for run in runs {
        let mib = |p: &str| fmt(run.num(p).map(|k| k / 1024.0), 1);
        let json_kib = run
            .num("/json_bytes/provider")
            .zip(run.num("/json_bytes/consumer"))
            .map(|(p, c)| (p + c) / 1024.0);
        table.row(vec![
            run.backend().into(),
            fmt(run.num("/connections"), 0),
            fmt(run.num("/apis_total"), 0),
            fmt(run.num("/objects_total"), 0),
            fmt(run.num("/sync_seconds"), 1),
            format!(
                "{} / {} / {}",
                mib("/rss_kib/ready"),
                mib("/rss_kib/synced"),
                mib("/rss_kib/idle")
            ),
            fmt(json_kib, 0),
            fmt(json_kib.map(rss_target_mib_of_kib), 1),
            fmt(run.num("/idle_cpu_percent"), 2),
            format!(
                "{} / {}",
                fmt(run.num("/idle_requests/provider/konnector_per_minute"), 0),
                fmt(run.num("/idle_requests/consumer/konnector_per_minute"), 0)
            ),
            format!(
                "{} / {}",
                fmt(run.num("/idle_requests/provider/watches_open"), 0),
                fmt(run.num("/idle_requests/consumer/watches_open"), 0)
            ),
        ]);
    }
    table
}

/// The memory target: 30 MiB plus 3 × the JSON of every cached copy (both sides).
pub fn rss_target_mib_of_kib(json_kib: f64) -> f64 {
    30.0 + 3.0 * json_kib / 1024.0
}
