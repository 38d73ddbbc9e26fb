//! Workload 7, related copies: what one Secret found by reference (`FromConsumer`,
//! `selector.references[{path}]`) costs next to the bound object that names it.
//!
//! One world, one konnector, phases in order, each measured as the konnector's requests to
//! each side ([`World::requests_since`]) and the growth of its resident memory from one quiet
//! point to the next ([`World::konnector_memory_kib`]), divided by the N objects it added:
//!
//! 1. `bound`: N objects, no related rule on the binding, until every copy is up and every
//!    status down.
//! 2. `rule`: the binding gains the rule (Secrets whose names are at
//!    `spec.passwordSecretRef.name`); what starting its syncer and watches costs, once.
//! 3. `referenced`, `bound_under_rule`, `bound_under_rule`, `referenced` (A B B A): N objects
//!    each; a referencing object names its own Secret (N Secrets made first on the consumer),
//!    and the phase ends when every copy, status and Secret copy is there. A referencing
//!    object's excess over one naming nothing is the cost of one referenced related copy.

use std::time::{Duration, Instant};

use anyhow::{Context as _, bail};
use k8s_openapi::api::core::v1::Secret;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::measure::wait_for;
use crate::output::{Envelope, Table, fmt};
use crate::world::{
    Backend, Konnector, Layout, NAMESPACE, RequestMark, Requests, Side, World, item, item_name, object,
};

/// The workload's name in JSON and file names.
pub const NAME: &str = "related";
/// The path in each bound object where its Secret's name is.
pub const REFERENCE_PATH: &str = "spec.passwordSecretRef.name";
/// The key of each Secret's one entry.
const SECRET_KEY: &str = "password";
/// How long the konnector's CPU time must stand still before memory is read.
const QUIET: Duration = Duration::from_millis(1000);
/// How long to wait for that quiet before reading memory anyway (recorded as not settled).
const QUIET_DEADLINE: Duration = Duration::from_secs(60);

/// Flags of the related workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "fake")]
    pub backend: Backend,
    /// Objects per phase (N): N bound, N referencing a Secret each, N bound again.
    #[arg(long, default_value_t = 1000)]
    pub objects: usize,
    /// Bytes of JSON per object's spec (a referencing object's payload is shorter by its
    /// reference, so both kinds of object are the same size).
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
    /// Bytes of each Secret's value.
    #[arg(long, default_value_t = 32)]
    pub secret_bytes: usize,
    /// Creates in flight while objects and Secrets are made.
    #[arg(long, default_value_t = 16)]
    pub create_concurrency: usize,
    /// Seconds each phase may take.
    #[arg(long, default_value_t = 1800)]
    pub deadline: u64,
}

/// The name of the `i`th Secret.
pub fn secret_name(i: usize) -> String {
    format!("s-{i:06}")
}

/// The value of the `i`th Secret: `secret_bytes` bytes, distinct per Secret.
fn secret_value(i: usize, secret_bytes: usize) -> Vec<u8> {
    let mut value = format!("{i:06}").into_bytes();
    value.resize(secret_bytes.max(6), b'p');
    value
}

fn secrets() -> ApiResource {
    ApiResource::erase::<Secret>(&())
}

/// The `i`th Secret on the consumer.
fn secret(i: usize, secret_bytes: usize) -> anyhow::Result<DynamicObject> {
    object(json!({"apiVersion": "v1", "kind": "Secret", "type": "Opaque",
                  "metadata": {"name": secret_name(i), "namespace": NAMESPACE},
                  "data": {SECRET_KEY: encoded(&secret_value(i, secret_bytes))?}}))
}

/// Bytes as a Secret's `data` holds them (base64, as the API serves them).
fn encoded(bytes: &[u8]) -> anyhow::Result<Value> {
    serde_json::to_value(k8s_openapi::ByteString(bytes.to_vec())).context("encoding a Secret value")
}

/// Object `i` of `res`, naming Secret `i` at [`REFERENCE_PATH`], its spec as large as an
/// object's without a reference.
fn referencing_item(res: &ApiResource, i: usize, spec_bytes: usize) -> anyhow::Result<DynamicObject> {
    let reference = json!({"name": secret_name(i)});
    let extra = r#","passwordSecretRef":"#.len() + reference.to_string().len();
    let mut obj = item(res, &item_name(i), i, spec_bytes.saturating_sub(extra))?;
    if let Some(spec) = obj.data.get_mut("spec").and_then(Value::as_object_mut) {
        spec.insert("passwordSecretRef".into(), reference);
    }
    Ok(obj)
}

/// The binding's related rule: Secrets by reference, up from the consumer.
pub fn rule() -> Value {
    json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
            "selector": {"references": [{"path": REFERENCE_PATH}]}}])
}

/// What one phase cost.
#[derive(Debug, Clone, Serialize)]
struct Phase {
    /// `bound`, `rule`, `referenced` or `bound_under_rule`.
    name: &'static str,
    /// Objects (and, in `referenced`, Secrets) the phase added.
    objects: usize,
    /// Seconds from the first create until synced (the rule phase: until its watches are open).
    seconds: f64,
    /// The konnector's requests in the phase, quiet included.
    requests: Requests,
    /// RSS before the phase (quiet), KiB.
    rss_before_kib: u64,
    /// RSS after the phase (quiet), KiB.
    rss_after_kib: u64,
    /// Whether the konnector's CPU stood still for [`QUIET`] before the RSS was read.
    settled: bool,
}

impl Phase {
    fn per_object(&self) -> PerObject {
        let n = self.objects.max(1) as f64;
        PerObject {
            provider_requests: self.requests.provider.all / n,
            consumer_requests: self.requests.consumer.all / n,
            rss_kib: (self.rss_after_kib as f64 - self.rss_before_kib as f64) / n,
        }
    }
}

/// A phase's cost per object it added.
#[derive(Debug, Clone, Copy, Serialize)]
struct PerObject {
    provider_requests: f64,
    consumer_requests: f64,
    rss_kib: f64,
}

impl PerObject {
    fn minus(self, other: PerObject) -> PerObject {
        PerObject {
            provider_requests: self.provider_requests - other.provider_requests,
            consumer_requests: self.consumer_requests - other.consumer_requests,
            rss_kib: self.rss_kib - other.rss_kib,
        }
    }
}

/// The order of the measured phases after the rule: referenced and bound alternate as A B B A,
/// so a drift of the per-object memory with the store's size falls on both alike.
const ORDER: [Kind; 4] = [Kind::Referenced, Kind::Bound, Kind::Bound, Kind::Referenced];

/// What a phase adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// N objects naming nothing.
    Bound,
    /// N Secrets and N objects naming one each.
    Referenced,
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, konnector: &Konnector) -> anyhow::Result<Value> {
    if args.objects == 0 {
        bail!("--objects must be at least 1");
    }
    let mut world = World::start(Layout::single(args.backend, false)).await?;
    world.allow_provider_secrets().await?;
    world.start_provider_controllers();
    let res = world.api(0, 0);
    world.start_konnector(konnector).await?;
    let n = args.objects;

    // Bound objects, no related rule.
    let bound = phase(&mut world, "bound", n, async |world| {
        add(world, args, Kind::Bound, 0).await
    })
    .await?;

    // The rule: its syncer starts, its watches open.
    let rule_phase = phase(&mut world, "rule", 0, async |world| {
        let mark = world.request_mark().await?;
        world
            .consumer
            .patch(
                &ApiResource::erase::<kbind_api::ClusterBinding>(&()),
                None,
                "b0",
                &Patch::Merge(json!({"spec": {"relatedResources": rule()}})),
                &PatchParams::default(),
            )
            .await
            .context("adding the related rule to the binding")?;
        wait_rule_started(world, &mark, Duration::from_secs(args.deadline)).await
    })
    .await?;

    let mut phases = vec![bound, rule_phase];
    let mut referenced_blocks = Vec::new();
    for (k, kind) in ORDER.into_iter().enumerate() {
        let block = k + 1;
        let name = match kind {
            Kind::Bound => "bound_under_rule",
            Kind::Referenced => {
                referenced_blocks.push(block);
                "referenced"
            }
        };
        phases.push(phase(&mut world, name, n, async |world| add(world, args, kind, block).await).await?);
    }
    let blocks = 1 + ORDER.len();

    world.check_running()?;
    let referenced_names = |i: &usize| referenced_blocks.contains(&(i / n));
    let related_up = related_copies(&*world.provider, args.secret_bytes, referenced_names).await;
    let stray = stray_copies(&*world.provider, referenced_names).await?;
    let (copies, _) = World::count(&*world.provider, &res).await.unwrap_or_default();
    let (objects, statuses) = World::count(&*world.consumer, &res).await.unwrap_or_default();
    world.shutdown().await?;

    let settled = phases.iter().all(|p| p.settled);
    let per_bound = mean_per_object(&phases, "bound");
    let per_referenced = mean_per_object(&phases, "referenced");
    let per_bound_under_rule = mean_per_object(&phases, "bound_under_rule");
    Ok(json!({
        "objects": n,
        "reference_path": REFERENCE_PATH,
        // On fakeapi the konnector's own requests (the request log names the caller); on real
        // servers everything the apiserver counted, the provider controller's status writes and
        // this harness's polling lists included.
        "requests_konnector_only": args.backend == Backend::Fake,
        "phases": phases,
        // Means over the phases of each name; `related_copy` is a referencing object's excess
        // over a bound object's with the rule in place (the phases alternate A B B A).
        "per_object": {
            "bound": per_bound,
            "referenced": per_referenced,
            "bound_under_rule": per_bound_under_rule,
            "related_copy": per_referenced.minus(per_bound_under_rule),
        },
        "related_copies": related_up,
        // Whether the konnector was quiet before each memory reading (not a check: a busy
        // machine can keep it from settling, which makes the memory figures rougher, not wrong).
        "every_phase_settled": settled,
        "checks": {
            "every_copy_exists": copies == blocks * n,
            "every_status_back": statuses == blocks * n && objects == blocks * n,
            "every_related_copy_exists": related_up == referenced_blocks.len() * n,
            "no_unreferenced_secret_copied": stray == 0,
        },
    }))
}

/// Adds block `block` (objects `block * N ..`) of `kind` and waits until it is synced: every
/// copy up, every status down, and every referenced Secret's copy up.
async fn add(world: &World, args: &Args, kind: Kind, block: usize) -> anyhow::Result<()> {
    let n = args.objects;
    let range = block * n..(block + 1) * n;
    let res = world.api(0, 0);
    let deadline = Duration::from_secs(args.deadline);
    let every = Duration::from_millis(if n <= 5000 { 250 } else { 1000 });
    match kind {
        Kind::Bound => {
            world
                .create_items(&res, range.clone(), args.spec_bytes, args.create_concurrency)
                .await?
        }
        Kind::Referenced => {
            world
                .create_made(&secrets(), range.clone(), args.create_concurrency, |i| {
                    secret(i, args.secret_bytes)
                })
                .await?;
            world
                .create_made(&res, range.clone(), args.create_concurrency, |i| {
                    referencing_item(&res, i, args.spec_bytes)
                })
                .await?;
        }
    }
    world
        .wait_synced(std::slice::from_ref(&res), range.end, deadline, every)
        .await?;
    if kind == Kind::Referenced {
        wait_for("every related copy on the provider", deadline, async || {
            let up = related_copies(&*world.provider, args.secret_bytes, |i| range.contains(i)).await;
            (up == n).then_some(())
        })
        .await?;
    }
    Ok(())
}

/// The mean per-object cost of the phases named `name`.
fn mean_per_object(phases: &[Phase], name: &str) -> PerObject {
    let of: Vec<PerObject> = phases
        .iter()
        .filter(|p| p.name == name)
        .map(Phase::per_object)
        .collect();
    let k = of.len().max(1) as f64;
    PerObject {
        provider_requests: of.iter().map(|p| p.provider_requests).sum::<f64>() / k,
        consumer_requests: of.iter().map(|p| p.consumer_requests).sum::<f64>() / k,
        rss_kib: of.iter().map(|p| p.rss_kib).sum::<f64>() / k,
    }
}

/// Runs one phase between two quiet points: its requests and the RSS on either side.
async fn phase(
    world: &mut World,
    name: &'static str,
    objects: usize,
    work: impl AsyncFnOnce(&World) -> anyhow::Result<()>,
) -> anyhow::Result<Phase> {
    settle(world).await?;
    let (rss_before_kib, _) = world.konnector_memory_kib()?;
    let mark = world.request_mark().await?;
    let start = Instant::now();
    work(world).await.map_err(|e| match world.check_running() {
        Ok(()) => e,
        Err(exited) => exited.context(e),
    })?;
    let seconds = start.elapsed().as_secs_f64();
    let settled = settle(world).await?;
    let requests = world.requests_since(&mark).await?;
    let (rss_after_kib, _) = world.konnector_memory_kib()?;
    Ok(Phase {
        name,
        objects,
        seconds,
        requests,
        rss_before_kib,
        rss_after_kib,
        settled,
    })
}

/// Waits until the konnector's CPU time stands still for [`QUIET`] (its echoes seen, its
/// queues empty), at most [`QUIET_DEADLINE`]; whether it did.
async fn settle(world: &World) -> anyhow::Result<bool> {
    let start = Instant::now();
    let mut before = world.konnector_cpu_seconds()?;
    while start.elapsed() < QUIET_DEADLINE {
        tokio::time::sleep(QUIET).await;
        let now = world.konnector_cpu_seconds()?;
        if now == before {
            return Ok(true);
        }
        before = now;
    }
    Ok(false)
}

/// Waits until the rule's syncer has started: on fakeapi, until the konnector's request log
/// shows its Secret watches on both sides; on real servers (whose counters do not name the
/// resource) the quiet that follows in [`phase`] is all there is to wait on.
async fn wait_rule_started(world: &World, mark: &RequestMark, deadline: Duration) -> anyhow::Result<()> {
    if world.layout.backend == Backend::Real {
        return Ok(());
    }
    wait_for(
        "the related rule's Secret watches open on both sides",
        deadline,
        async || {
            let requests = world.requests_since(mark).await.ok()?;
            let watches_secrets = |side: &Side| side.by_kind.keys().any(|k| k.starts_with("watch secrets"));
            (watches_secrets(&requests.provider) && watches_secrets(&requests.consumer)).then_some(())
        },
    )
    .await
}

/// Provider Secrets whose index `wanted` and that carry their consumer Secret's value.
async fn related_copies(provider: &dyn ClusterClient, secret_bytes: usize, wanted: impl Fn(&usize) -> bool) -> usize {
    let Ok(list) = provider.list(&secrets(), Some(NAMESPACE), &Default::default()).await else {
        return 0;
    };
    list.items
        .iter()
        .filter(|s| {
            let Some(i) = secret_index(s) else {
                return false;
            };
            wanted(&i)
                && encoded(&secret_value(i, secret_bytes))
                    .is_ok_and(|want| s.data.pointer(&format!("/data/{SECRET_KEY}")) == Some(&want))
        })
        .count()
}

/// Provider Secrets named like the workload's whose index is not `referenced` (none should be).
async fn stray_copies(provider: &dyn ClusterClient, referenced: impl Fn(&usize) -> bool) -> anyhow::Result<usize> {
    let list = provider
        .list(&secrets(), Some(NAMESPACE), &Default::default())
        .await
        .context("listing the provider's Secrets")?;
    Ok(list
        .items
        .iter()
        .filter_map(secret_index)
        .filter(|i| !referenced(i))
        .count())
}

/// The index in a Secret's name (`s-000042`), for the workload's Secrets.
fn secret_index(secret: &DynamicObject) -> Option<usize> {
    secret.metadata.name.as_deref()?.strip_prefix("s-")?.parse().ok()
}

/// One row per run: a bound object, a referencing one, and the difference.
pub fn table(runs: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Related copies by reference (workload 7)",
        &[
            "backend",
            "N",
            "per object",
            "provider requests",
            "consumer requests",
            "RSS KiB",
            "load before → after",
        ],
    );
    for run in runs {
        for (label, key) in [
            ("bound, no rule", "bound"),
            ("bound, rule finds nothing", "bound_under_rule"),
            ("bound + referenced Secret", "referenced"),
            ("one related copy (difference)", "related_copy"),
        ] {
            let at = |field: &str| run.num(&format!("/per_object/{key}/{field}"));
            table.row(vec![
                run.backend().into(),
                fmt(run.num("/objects"), 0),
                label.into(),
                fmt(at("provider_requests"), 2),
                fmt(at("consumer_requests"), 2),
                fmt(at("rss_kib"), 1),
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
    fn a_referencing_object_is_as_large_as_one_without() {
        let res = crate::world::api(&Layout::single(Backend::Fake, false), 0, 0);
        let plain = item(&res, &item_name(7), 7, 1024).unwrap();
        let referencing = referencing_item(&res, 7, 1024).unwrap();
        let size = |o: &DynamicObject| serde_json::to_vec(&o.data["spec"]).unwrap().len();
        assert_eq!(size(&plain), size(&referencing));
        assert_eq!(
            referencing.data.pointer("/spec/passwordSecretRef/name"),
            Some(&json!(secret_name(7)))
        );
    }

    #[test]
    fn secret_values_are_distinct_and_sized() {
        assert_eq!(secret_value(3, 32).len(), 32);
        assert_ne!(secret_value(3, 32), secret_value(4, 32));
    }
}
