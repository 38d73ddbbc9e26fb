//! Workload 1, initial sync: N objects exist on the consumer before the konnector starts; the
//! time from its start until every copy exists on the provider with its status back.

use std::time::{Duration, Instant};

use serde::Serialize;
use serde_json::{Value, json};

use crate::Profile;
use crate::output::{Envelope, Table, fmt};
use crate::world::{Backend, Konnector, Layout, World};

/// The workload's name in JSON and file names.
pub const NAME: &str = "initial_sync";

/// Flags of the initial-sync workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "fake")]
    pub backend: Backend,
    /// Objects present before the konnector starts.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Bytes of JSON per object's spec.
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
    /// Creates in flight while the objects are made (before the clock starts).
    #[arg(long, default_value_t = 16)]
    pub create_concurrency: usize,
    /// Seconds the sync may take.
    #[arg(long, default_value_t = 1800)]
    pub deadline: u64,
}

/// The runs of a profile.
pub fn profile(profile: Profile) -> Vec<Args> {
    let args = |backend, objects| Args {
        backend,
        objects,
        spec_bytes: 1024,
        create_concurrency: 16,
        deadline: 1800,
    };
    match profile {
        Profile::Smoke => vec![args(Backend::Fake, 20)],
        Profile::Full => vec![
            args(Backend::Real, 1000),
            args(Backend::Real, 10_000),
            args(Backend::Fake, 50_000),
        ],
    }
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, konnector: &Konnector) -> anyhow::Result<Value> {
    let layout = Layout::single(args.backend, false);
    let mut world = World::start(layout).await?;
    world.start_provider_controllers();
    let res = world.api(0, 0);
    // The consumer CRD comes from the konnector: one start makes it, then the objects are made
    // with no konnector running.
    world.start_konnector(konnector).await?;
    world.stop_konnector().await?;
    let created = Instant::now();
    world
        .create_items(&res, 0..args.objects, args.spec_bytes, args.create_concurrency)
        .await?;
    let create_seconds = created.elapsed().as_secs_f64();

    let mark = world.request_mark().await?;
    let start = Instant::now();
    world.start_konnector(konnector).await?;
    let ready_seconds = start.elapsed().as_secs_f64();
    let cpu_start = world.konnector_cpu_seconds()?;
    // Polling lists cost the servers too, in proportion to the objects: a list of 50,000
    // objects on both sides every second kept fakeapi (in this process) busy most of the time
    // and slowed the sync it measured. Polled at about a hundredth of the sync's length.
    let every = Duration::from_millis(match args.objects {
        0..=5000 => 250,
        5001..=20_000 => 1000,
        _ => 5000,
    });
    world
        .wait_synced(
            std::slice::from_ref(&res),
            args.objects,
            Duration::from_secs(args.deadline),
            every,
        )
        .await?;
    let sync_seconds = start.elapsed().as_secs_f64();
    let requests = world.requests_since(&mark).await?;
    let cpu_seconds = world.konnector_cpu_seconds()? - cpu_start;
    world.check_running()?;
    let (rss_kib, hwm_kib) = world.konnector_memory_kib()?;
    let provider_bytes = World::json_bytes(&*world.provider, std::slice::from_ref(&res)).await?;
    let consumer_bytes = World::json_bytes(&*world.consumer, std::slice::from_ref(&res)).await?;
    let (copies, _) = World::count(&*world.provider, &res).await.unwrap_or_default();
    let (objects, statuses) = World::count(&*world.consumer, &res).await.unwrap_or_default();
    world.shutdown().await?;
    Ok(json!({
        "objects": args.objects,
        "create_seconds": create_seconds,
        "ready_seconds": ready_seconds,
        "sync_seconds": sync_seconds,
        "objects_per_second": args.objects as f64 / sync_seconds,
        "konnector_cpu_seconds": cpu_seconds,
        "rss_kib": rss_kib,
        "rss_peak_kib": hwm_kib,
        "json_bytes": {"provider": provider_bytes, "consumer": consumer_bytes},
        // On fakeapi the konnector's own requests (the request log names the caller); on real
        // servers everything the apiserver counted, the load generator's status writes and
        // this harness's polling lists included.
        "requests": {
            "konnector_only": args.backend == Backend::Fake,
            "provider_per_object": requests.provider.all / args.objects as f64,
            "consumer_per_object": requests.consumer.all / args.objects as f64,
            "provider": requests.provider,
            "consumer": requests.consumer,
        },
        "checks": {
            "every_copy_exists": copies == args.objects,
            "every_status_back": statuses == args.objects && objects == args.objects,
        },
    }))
}

/// One row per run; the ratio to the ceiling of the same backend when one was measured.
pub fn table(runs: &[&Envelope], ceilings: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Initial sync (workload 1)",
        &[
            "backend",
            "objects",
            "sync s",
            "objects/s",
            "ceiling objects/s",
            "ratio",
            "konnector CPU s",
            "RSS MiB",
            "requests/object prov / cons",
            "load before → after",
        ],
    );
    for run in runs {
        let rate = run.num("/objects_per_second");
        let ceiling = ceiling_for(ceilings, run);
        table.row(vec![
            run.backend().into(),
            fmt(run.num("/objects"), 0),
            fmt(run.num("/sync_seconds"), 1),
            fmt(rate, 0),
            fmt(ceiling, 0),
            fmt(rate.zip(ceiling).map(|(r, c)| r / c), 2),
            fmt(run.num("/konnector_cpu_seconds"), 1),
            fmt(run.num("/rss_kib").map(|k| k / 1024.0), 1),
            requests_per_object(run),
            format!("{} → {}", run.machine.load_before, run.machine.load_after),
        ]);
    }
    table
}

/// The konnector's requests per synced object on each side; on real servers (which count every
/// client) marked as all requests.
fn requests_per_object(run: &Envelope) -> String {
    let (provider, consumer) = (
        run.num("/requests/provider_per_object"),
        run.num("/requests/consumer_per_object"),
    );
    if provider.is_none() {
        return "–".into();
    }
    let whose = match run.results.pointer("/requests/konnector_only").and_then(Value::as_bool) {
        Some(true) => "",
        _ => " (all clients)",
    };
    format!("{} / {}{whose}", fmt(provider, 2), fmt(consumer, 2))
}

/// The ceiling to compare `run` with: measured on the same backend at the same number of
/// objects when there is one (the server's write cost grows with what it stores), else the best
/// on that backend.
pub fn ceiling_for(ceilings: &[&Envelope], run: &Envelope) -> Option<f64> {
    let backend = ceilings.iter().filter(|c| c.backend() == run.backend());
    let same_size = backend
        .clone()
        .filter(|c| c.param("/objects") == run.num("/objects"))
        .filter_map(|c| c.num("/objects_per_second"))
        .reduce(f64::max);
    same_size.or_else(|| backend.filter_map(|c| c.num("/objects_per_second")).reduce(f64::max))
}
