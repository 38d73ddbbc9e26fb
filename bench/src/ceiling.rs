//! Workload 5, the ceiling: on the same servers, a plain `kube::Client` (no konnector) making the
//! konnector's minimum writes per new object — the consumer finalizer patch, the provider
//! server-side apply, the consumer status patch — for N objects, with a fixed number of objects
//! in flight. Every sync throughput is reported as a ratio to this.

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::Context as _;
use futures::StreamExt as _;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use crate::Profile;
use crate::measure::Percentiles;
use crate::output::{Envelope, Table, fmt};
use crate::world::{Backend, Konnector, Layout, NAMESPACE, World, crd, item_name};

/// The workload's name in JSON and file names.
pub const NAME: &str = "ceiling";

/// Flags of the ceiling workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "fake")]
    pub backend: Backend,
    /// Objects, each written three times.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Objects in flight (each object's three writes are in order).
    #[arg(long, default_value_t = 16)]
    pub concurrency: usize,
    /// Bytes of JSON per object's spec.
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
}

/// The runs of a profile.
pub fn profile(profile: Profile) -> Vec<Args> {
    let args = |backend, objects| Args {
        backend,
        objects,
        concurrency: 16,
        spec_bytes: 1024,
    };
    match profile {
        Profile::Smoke => vec![args(Backend::Fake, 30)],
        Profile::Full => vec![
            args(Backend::Real, 1000),
            args(Backend::Real, 10_000),
            args(Backend::Fake, 1000),
            args(Backend::Fake, 50_000),
        ],
    }
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, _konnector: &Konnector) -> anyhow::Result<Value> {
    let layout = Layout::single(args.backend, false);
    let world = World::start(layout).await?;
    let res = world.api(0, 0);
    // The consumer CRD as the konnector would have made it, then the objects, before the clock.
    world
        .consumer
        .create(
            &kube::api::ApiResource::erase::<
                k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
            >(&()),
            None,
            &serde_json::from_value(crd(&res)).context("the consumer CRD")?,
            &Default::default(),
        )
        .await
        .context("creating the consumer CRD")?;
    crate::measure::wait_for("the consumer CRD served", crate::world::SETUP_DEADLINE, async || {
        world
            .consumer
            .list(&res, None, &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await?;
    world.create_items(&res, 0..args.objects, args.spec_bytes, 16).await?;
    let consumer: Api<DynamicObject> =
        Api::namespaced_with(kube::Client::try_from(world.consumer_config.clone())?, NAMESPACE, &res);
    let provider: Api<DynamicObject> =
        Api::namespaced_with(kube::Client::try_from(world.provider_config.clone())?, NAMESPACE, &res);

    let latencies: Arc<Mutex<Vec<Duration>>> = Arc::default();
    let start = Instant::now();
    let results: Vec<anyhow::Result<()>> = futures::stream::iter(0..args.objects)
        .map(|i| {
            let (consumer, provider, latencies, res) = (consumer.clone(), provider.clone(), latencies.clone(), res.clone());
            let spec_bytes = args.spec_bytes;
            async move {
                let name = item_name(i);
                let began = Instant::now();
                let finalizer = Patch::Merge(json!({"metadata": {"finalizers": [kbind_api::consts::finalizer::SYNCER]}}));
                let object = consumer.patch(&name, &PatchParams::default(), &finalizer).await.context("the finalizer patch")?;
                let copy = json!({"apiVersion": res.api_version, "kind": res.kind,
                                  "metadata": {"name": name, "namespace": NAMESPACE},
                                  "spec": object.data.get("spec").cloned().unwrap_or_else(|| json!({"payload": "x".repeat(spec_bytes)}))});
                provider
                    .patch(&name, &PatchParams::apply("kbind-bench").force(), &Patch::Apply(copy))
                    .await
                    .context("the provider apply")?;
                let status = Patch::Merge(json!({"status": {"phase": "Ready", "observedGeneration": 1}}));
                consumer.patch_status(&name, &PatchParams::default(), &status).await.context("the status patch")?;
                latencies.lock().push(began.elapsed());
                anyhow::Ok(())
            }
        })
        .buffer_unordered(args.concurrency.max(1))
        .collect()
        .await;
    let seconds = start.elapsed().as_secs_f64();
    let failed = results.iter().filter(|r| r.is_err()).count();
    if let Some(Err(e)) = results.into_iter().find(|r| r.is_err()) {
        eprintln!("{failed} objects failed, e.g. {e:#}");
    }
    let (copies, _) = World::count(&*world.provider, &res).await.unwrap_or_default();
    let (_, statuses) = World::count(&*world.consumer, &res).await.unwrap_or_default();
    world.shutdown().await?;
    let per_object = Percentiles::of(std::mem::take(&mut *latencies.lock()));
    Ok(json!({
        "objects": args.objects,
        "writes_per_object": 3,
        "seconds": seconds,
        "objects_per_second": args.objects as f64 / seconds,
        "writes_per_second": 3.0 * args.objects as f64 / seconds,
        "per_object_latency": per_object,
        "checks": {
            "every_copy_exists": copies == args.objects && failed == 0,
            "every_status_written": statuses == args.objects,
        },
    }))
}

/// One row per run.
pub fn table(runs: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Ceiling (workload 5): a plain kube::Client, three writes per object",
        &[
            "backend",
            "objects",
            "in flight",
            "seconds",
            "objects/s",
            "writes/s",
            "per object p50 / p99 ms",
            "load before → after",
        ],
    );
    for run in runs {
        table.row(vec![
            run.backend().into(),
            fmt(run.num("/objects"), 0),
            fmt(run.param("/concurrency"), 0),
            fmt(run.num("/seconds"), 1),
            fmt(run.num("/objects_per_second"), 0),
            fmt(run.num("/writes_per_second"), 0),
            format!(
                "{} / {}",
                fmt(run.num("/per_object_latency/p50_ms"), 1),
                fmt(run.num("/per_object_latency/p99_ms"), 1)
            ),
            format!("{} → {}", run.machine.load_before, run.machine.load_after),
        ]);
    }
    table
}
