//! Workload 2, churn: consumer spec changes and provider status changes at a steady rate while
//! this process watches both sides and times each change end to end; the time each write itself
//! took (the apiserver's own latency, as the load generator sees it) is measured beside it, so
//! the konnector's added latency is the difference of the two p99s.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use futures::StreamExt as _;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams, WatchEvent, WatchParams};
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use crate::Profile;
use crate::measure::{Histogram, Percentiles, wait_for};
use crate::output::{Envelope, Table, fmt};
use crate::world::{Backend, Konnector, Layout, NAMESPACE, World, item_name};

/// The workload's name in JSON and file names.
pub const NAME: &str = "churn";

/// How long the changes still in flight when the load stops may take to arrive.
const DRAIN_DEADLINE: Duration = Duration::from_secs(120);

/// Flags of the churn workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "fake")]
    pub backend: Backend,
    /// Objects synced before the changes start.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Consumer spec changes per second, and as many provider status changes.
    #[arg(long, default_value_t = 100.0)]
    pub rate: f64,
    /// Seconds of steady changes.
    #[arg(long, default_value_t = 30)]
    pub duration: u64,
    /// Bytes of JSON per object's spec.
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
    /// Writes in flight at most (a change waits for a slot rather than pile up).
    #[arg(long, default_value_t = 64)]
    pub max_in_flight: usize,
}

/// The runs of a profile.
pub fn profile(profile: Profile) -> Vec<Args> {
    let args = |backend, rate, duration| Args {
        backend,
        objects: 1000,
        rate,
        duration,
        spec_bytes: 1024,
        max_in_flight: 64,
    };
    match profile {
        Profile::Smoke => vec![Args {
            objects: 20,
            ..args(Backend::Fake, 20.0, 2)
        }],
        Profile::Full => vec![
            args(Backend::Real, 100.0, 30),
            args(Backend::Real, 500.0, 30),
            args(Backend::Fake, 100.0, 30),
            args(Backend::Fake, 500.0, 30),
            args(Backend::Fake, 2000.0, 30),
        ],
    }
}

/// Changes sent and not yet seen on the other side: marker → (object, when it was sent).
type Pending = Arc<Mutex<HashMap<String, (String, Instant)>>>;
type Samples = Arc<Mutex<Vec<Duration>>>;

/// Refuses a run in which a write failed, naming how many failed and the first.
fn refuse_failed_writes(failures: &Mutex<Vec<String>>) -> anyhow::Result<()> {
    let failures = failures.lock();
    match failures.first() {
        Some(failure) => bail!("{} writes failed, e.g. {failure}", failures.len()),
        None => Ok(()),
    }
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, konnector: &Konnector) -> anyhow::Result<Value> {
    if args.objects < 2 || args.rate.is_nan() || args.rate <= 0.0 {
        bail!("--objects must be at least 2 and --rate positive");
    }
    let layout = Layout::single(args.backend, false);
    let mut world = World::start(layout).await?;
    world.start_provider_controllers();
    world.start_konnector(konnector).await?;
    let res = world.api(0, 0);
    world.create_items(&res, 0..args.objects, args.spec_bytes, 16).await?;
    world
        .wait_synced(
            std::slice::from_ref(&res),
            args.objects,
            Duration::from_secs(1800),
            Duration::from_millis(250),
        )
        .await?;

    let metrics_before = world.konnector_metrics().await?;
    let cpu_before = world.konnector_cpu_seconds()?;
    let outcome = changes(&world, &res, args).await?;
    let cpu = world.konnector_cpu_seconds()? - cpu_before;
    let metrics_after = world.konnector_metrics().await?;
    world.check_running()?;
    let (rss_kib, hwm_kib) = world.konnector_memory_kib()?;
    world.shutdown().await?;

    let histogram = |name: &str| {
        let h = Histogram::parse(&metrics_after, name).since(&Histogram::parse(&metrics_before, name));
        json!({"count": h.count, "p50_le_ms": h.quantile_le_ms(0.5), "p99_le_ms": h.quantile_le_ms(0.99)})
    };
    let added = |e2e: &Percentiles, write: &Percentiles| e2e.p99_ms.zip(write.p99_ms).map(|(e, w)| e - w);
    Ok(json!({
        "sent_per_side": outcome.sent,
        "achieved_rate_per_side": outcome.sent as f64 / outcome.load_seconds,
        "spec_up": outcome.spec_up,
        "status_down": outcome.status_down,
        "folded": {"spec_up": outcome.spec_folded, "status_down": outcome.status_folded},
        "consumer_spec_write": outcome.spec_write,
        "provider_status_write": outcome.status_write,
        "added_p99_ms": {
            "spec_up": added(&outcome.spec_up, &outcome.spec_write),
            "status_down": added(&outcome.status_down, &outcome.status_write),
        },
        "konnector_histograms": {
            "spec_up": histogram("kbind_spec_up_seconds"),
            "status_down": histogram("kbind_status_down_seconds"),
        },
        "konnector_cpu_percent": 100.0 * cpu / outcome.load_seconds,
        "rss_kib": rss_kib,
        "rss_peak_kib": hwm_kib,
        "checks": {
            "every_spec_change_arrived": outcome.spec_up.count as u64 == outcome.sent,
            "every_status_change_arrived": outcome.status_down.count as u64 == outcome.sent,
        },
    }))
}

struct Outcome {
    sent: u64,
    load_seconds: f64,
    spec_up: Percentiles,
    status_down: Percentiles,
    spec_write: Percentiles,
    status_write: Percentiles,
    /// Changes that arrived folded into a later one on the same object (see [`note`]).
    spec_folded: u64,
    status_folded: u64,
}

/// Sends status changes on the provider and spec changes on the consumer at `args.rate` each,
/// then waits for the last to arrive.
async fn changes(world: &World, res: &ApiResource, args: &Args) -> anyhow::Result<Outcome> {
    let status_pending: Pending = Arc::default();
    let spec_pending: Pending = Arc::default();
    let status_seen: Samples = Arc::default();
    let spec_seen: Samples = Arc::default();
    let status_writes: Samples = Arc::default();
    let spec_writes: Samples = Arc::default();
    let status_folded: Arc<AtomicU64> = Arc::default();
    let spec_folded: Arc<AtomicU64> = Arc::default();
    let status_watch = tokio::spawn(observe(
        world.consumer.clone(),
        res.clone(),
        "/status/phase",
        status_pending.clone(),
        status_seen.clone(),
        status_folded.clone(),
    ));
    let spec_watch = tokio::spawn(observe(
        world.provider.clone(),
        res.clone(),
        "/spec/color",
        spec_pending.clone(),
        spec_seen.clone(),
        spec_folded.clone(),
    ));
    wait_watching(world, res, &status_pending, &spec_pending).await?;
    status_seen.lock().clear();
    spec_seen.lock().clear();
    status_folded.store(0, Ordering::Relaxed);
    spec_folded.store(0, Ordering::Relaxed);

    let slots = Arc::new(tokio::sync::Semaphore::new(args.max_in_flight.max(2)));
    let failures: Arc<Mutex<Vec<String>>> = Arc::default();
    let mut tick = tokio::time::interval(Duration::from_secs_f64(1.0 / args.rate));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let start = Instant::now();
    let end = start + Duration::from_secs(args.duration);
    let mut sent = 0u64;
    while Instant::now() < end {
        tick.tick().await;
        // Status and spec changes go to different objects, each object changed at most once per
        // N / rate seconds, so a change is folded into the next only behind a backlog that long.
        let n = args.objects;
        let status_object = item_name(sent as usize % n);
        let spec_object = item_name((sent as usize + n / 2) % n);
        let jobs = [
            (
                world.provider.clone(),
                status_object,
                format!("s-{sent}"),
                true,
                status_pending.clone(),
                status_writes.clone(),
            ),
            (
                world.consumer.clone(),
                spec_object,
                format!("c-{sent}"),
                false,
                spec_pending.clone(),
                spec_writes.clone(),
            ),
        ];
        for (client, name, marker, status, pending, writes) in jobs {
            let permit = slots.clone().acquire_owned().await.context("the write slots closed")?;
            let (res, failures) = (res.clone(), failures.clone());
            tokio::spawn(async move {
                let params = PatchParams::default();
                pending.lock().insert(marker.clone(), (name.clone(), Instant::now()));
                let began = Instant::now();
                let written = if status {
                    let patch = Patch::Merge(json!({"status": {"phase": marker}}));
                    client.patch_status(&res, Some(NAMESPACE), &name, &patch, &params).await
                } else {
                    let patch = Patch::Merge(json!({"spec": {"color": marker}}));
                    client.patch(&res, Some(NAMESPACE), &name, &patch, &params).await
                };
                match written {
                    Ok(_) => writes.lock().push(began.elapsed()),
                    Err(e) => {
                        pending.lock().remove(&marker);
                        failures.lock().push(format!("{name}: {e}"));
                    }
                }
                drop(permit);
            });
        }
        sent += 1;
    }
    let load_seconds = start.elapsed().as_secs_f64();
    let _ = slots.acquire_many(args.max_in_flight.max(2) as u32).await;
    refuse_failed_writes(&failures)?;
    let drained = wait_for("the last changes to arrive", DRAIN_DEADLINE, async || {
        (status_pending.lock().is_empty() && spec_pending.lock().is_empty()).then_some(())
    })
    .await;
    status_watch.abort();
    spec_watch.abort();
    let missing = (status_pending.lock().len(), spec_pending.lock().len());
    if let Err(e) = drained {
        eprintln!("{e}: {} status and {} spec changes never arrived", missing.0, missing.1);
    }
    let take = |s: &Samples| Percentiles::of(std::mem::take(&mut *s.lock()));
    Ok(Outcome {
        sent,
        load_seconds,
        spec_up: take(&spec_seen),
        status_down: take(&status_seen),
        spec_write: take(&spec_writes),
        status_write: take(&status_writes),
        spec_folded: spec_folded.load(Ordering::Relaxed),
        status_folded: status_folded.load(Ordering::Relaxed),
    })
}

/// Changes one object on each side and waits until both watches have seen it.
async fn wait_watching(
    world: &World,
    res: &ApiResource,
    status_pending: &Pending,
    spec_pending: &Pending,
) -> anyhow::Result<()> {
    let probe = item_name(0);
    // A new marker per attempt: writing the same value again would be no change and no event.
    let mut attempt = 0u32;
    wait_for("both watches open", Duration::from_secs(60), async || {
        attempt += 1;
        let status_marker = format!("probe-status-{attempt}");
        let spec_marker = format!("probe-spec-{attempt}");
        status_pending
            .lock()
            .insert(status_marker.clone(), (probe.clone(), Instant::now()));
        spec_pending
            .lock()
            .insert(spec_marker.clone(), (probe.clone(), Instant::now()));
        // Written on the sides the watches read: the status on the consumer, the spec on the
        // provider (the konnector puts the spec back, which is a later event).
        let params = PatchParams::default();
        let status = Patch::Merge(json!({"status": {"phase": status_marker}}));
        let spec = Patch::Merge(json!({"spec": {"color": spec_marker}}));
        let _ = world
            .consumer
            .patch_status(res, Some(NAMESPACE), &probe, &status, &params)
            .await;
        let _ = world.provider.patch(res, Some(NAMESPACE), &probe, &spec, &params).await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let done =
            !status_pending.lock().contains_key(&status_marker) && !spec_pending.lock().contains_key(&spec_marker);
        status_pending.lock().clear();
        spec_pending.lock().clear();
        done.then_some(())
    })
    .await
}

/// Watches the objects of `res` and, for each object whose `field` holds a pending marker,
/// records how long ago that marker was sent.
async fn observe(
    client: Arc<dyn ClusterClient>,
    res: ApiResource,
    field: &'static str,
    pending: Pending,
    seen: Samples,
    folded: Arc<AtomicU64>,
) {
    let mut resource_version = String::new();
    loop {
        if resource_version.is_empty() {
            match client.list(&res, Some(NAMESPACE), &Default::default()).await {
                Ok(list) => resource_version = list.metadata.resource_version.unwrap_or_default(),
                Err(e) => {
                    eprintln!("listing for the latency watch failed: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
        }
        let mut stream = match client
            .watch(&res, Some(NAMESPACE), &WatchParams::default(), &resource_version)
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
                    note(&obj, field, &pending, &seen, &folded);
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

/// Records the arrival of the marker `obj` shows in `field`. Changes sent earlier to the same
/// object and never shown on their own arrived too: the other side holds a later value, so the
/// konnector folded them into it (it syncs the current state, not every step). They are timed
/// to this arrival and counted as folded, so a backlog shows as latency and an arrival check
/// still tells a lost change from a superseded one.
fn note(obj: &DynamicObject, field: &str, pending: &Pending, seen: &Mutex<Vec<Duration>>, folded: &AtomicU64) {
    let Some(marker) = obj.data.pointer(field).and_then(Value::as_str) else {
        return;
    };
    let mut pending = pending.lock();
    let Some((name, sent)) = pending.get(marker).cloned() else {
        return;
    };
    if obj.metadata.name.as_deref() != Some(name.as_str()) {
        return;
    }
    let superseded: Vec<String> = pending
        .iter()
        .filter(|(m, (n, at))| *n == name && *at < sent && m.as_str() != marker)
        .map(|(m, _)| m.clone())
        .collect();
    let mut seen = seen.lock();
    for m in superseded {
        if let Some((_, at)) = pending.remove(&m) {
            seen.push(at.elapsed());
            folded.fetch_add(1, Ordering::Relaxed);
        }
    }
    pending.remove(marker);
    seen.push(sent.elapsed());
}

/// One row per run and direction.
pub fn table(runs: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Churn (workload 2): end to end p50 / p99 / max, write p99, added p99 (ms)",
        &[
            "backend",
            "rate/s per side",
            "achieved/s",
            "direction",
            "p50",
            "p99",
            "max",
            "write p99",
            "added p99",
            "seen/sent (folded)",
            "CPU %",
            "load before → after",
        ],
    );
    for run in runs {
        for (direction, e2e, write) in [
            ("spec up", "spec_up", "consumer_spec_write"),
            ("status down", "status_down", "provider_status_write"),
        ] {
            table.row(vec![
                run.backend().into(),
                fmt(run.param("/rate"), 0),
                fmt(run.num("/achieved_rate_per_side"), 0),
                direction.into(),
                fmt(run.num(&format!("/{e2e}/p50_ms")), 1),
                fmt(run.num(&format!("/{e2e}/p99_ms")), 1),
                fmt(run.num(&format!("/{e2e}/max_ms")), 1),
                fmt(run.num(&format!("/{write}/p99_ms")), 1),
                fmt(run.num(&format!("/added_p99_ms/{e2e}")), 1),
                format!(
                    "{}/{} ({})",
                    fmt(run.num(&format!("/{e2e}/count")), 0),
                    fmt(run.num("/sent_per_side"), 0),
                    fmt(run.num(&format!("/folded/{e2e}")), 0),
                ),
                fmt(run.num("/konnector_cpu_percent"), 0),
                format!("{} → {}", run.machine.load_before, run.machine.load_after),
            ]);
        }
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failed_writes_refuse_the_run_with_their_count_and_the_first() {
        assert!(refuse_failed_writes(&Mutex::new(Vec::new())).is_ok());
        let failures = Mutex::new(vec!["w-1: refused".to_string(), "w-2: timed out".to_string()]);
        // The check runs on a thread so a re-entrant lock shows up as a failed wait, not a hung test.
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || tx.send(refuse_failed_writes(&failures).map_err(|e| e.to_string())));
        let verdict = rx
            .recv_timeout(Duration::from_secs(10))
            .expect("the check answers (a second lock of the failures it holds would never return)");
        assert_eq!(verdict, Err("2 writes failed, e.g. w-1: refused".to_string()));
    }

    fn shown(name: &str, marker: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": NAMESPACE},
            "spec": {"color": marker},
        }))
        .unwrap()
    }

    #[test]
    fn a_later_value_completes_the_earlier_changes_of_its_object_as_folded_and_no_other() {
        let pending: Pending = Arc::default();
        let seen: Samples = Arc::default();
        let folded = AtomicU64::new(0);
        let t0 = Instant::now();
        for (marker, name, after_ms) in [("c-0", "a", 0), ("c-1", "b", 1), ("c-2", "a", 2), ("c-3", "a", 3)] {
            pending
                .lock()
                .insert(marker.into(), (name.into(), t0 + Duration::from_millis(after_ms)));
        }
        // A marker shown on another object than it was sent to proves nothing.
        note(&shown("b", "c-2"), "/spec/color", &pending, &seen, &folded);
        assert_eq!(pending.lock().len(), 4);
        note(&shown("a", "c-2"), "/spec/color", &pending, &seen, &folded);
        let mut left: Vec<String> = pending.lock().keys().cloned().collect();
        left.sort();
        assert_eq!(left, ["c-1", "c-3"], "c-0 folded into c-2, which arrived; c-3 is newer");
        assert_eq!(folded.load(Ordering::Relaxed), 1);
        assert_eq!(seen.lock().len(), 2);
    }
}
