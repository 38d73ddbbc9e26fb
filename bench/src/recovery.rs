//! Workload 4, recovery: the konnector loses the provider (a [`kbind_testenv::FaultProxy`]
//! partition) while both sides change; after the heal, how long until both sides agree again, and
//! a check that nothing was lost or duplicated: every value written during the partition present
//! exactly once, on the object it was written to, and the object counts equal.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow};
use kbind_cluster::{ApiResource, ClusterClient, Patch, PatchParams};
use serde::Serialize;
use serde_json::{Value, json};

use crate::Profile;
use crate::output::{Envelope, Table, fmt};
use crate::world::{Backend, Konnector, Layout, NAMESPACE, World, item_name};

/// The workload's name in JSON and file names.
pub const NAME: &str = "recovery";

/// Flags of the recovery workload.
#[derive(Debug, Clone, clap::Args, Serialize)]
pub struct Args {
    /// Real apiservers or fakeapi.
    #[arg(long, value_enum, default_value = "real")]
    pub backend: Backend,
    /// Seconds the provider is unreachable.
    #[arg(long, default_value_t = 60)]
    pub partition: u64,
    /// Consumer spec changes during the partition, and as many provider status changes (each on
    /// its own object, so each value has exactly one place to be).
    #[arg(long, default_value_t = 2000)]
    pub changes: usize,
    /// Objects created on the consumer during the partition.
    #[arg(long, default_value_t = 100)]
    pub creates: usize,
    /// Bytes of JSON per object's spec.
    #[arg(long, default_value_t = 1024)]
    pub spec_bytes: usize,
    /// Seconds the convergence may take.
    #[arg(long, default_value_t = 600)]
    pub deadline: u64,
}

/// The runs of a profile.
pub fn profile(profile: Profile) -> Vec<Args> {
    let args = |backend, partition| Args {
        backend,
        partition,
        changes: 2000,
        creates: 100,
        spec_bytes: 1024,
        deadline: 600,
    };
    match profile {
        Profile::Smoke => vec![Args {
            changes: 10,
            creates: 3,
            deadline: 60,
            ..args(Backend::Fake, 2)
        }],
        Profile::Full => [10, 30, 60].into_iter().map(|p| args(Backend::Real, p)).collect(),
    }
}

/// Runs the workload; its figures and checks.
pub async fn run(args: &Args, konnector: &Konnector) -> anyhow::Result<Value> {
    let layout = Layout::single(args.backend, true);
    let mut world = World::start(layout).await?;
    world.start_provider_controllers();
    world.start_konnector(konnector).await?;
    let res = world.api(0, 0);
    let objects = args.changes;
    world.create_items(&res, 0..objects, args.spec_bytes, 16).await?;
    world
        .wait_synced(
            std::slice::from_ref(&res),
            objects,
            Duration::from_secs(1800),
            Duration::from_millis(250),
        )
        .await?;

    let proxy = world
        .proxy
        .as_ref()
        .ok_or_else(|| anyhow!("the recovery world has no proxy"))?;
    proxy.partition();
    let partitioned = Instant::now();
    // The changes spread over the partition, each side at the same pace, creates among them.
    let steps = args.changes.max(args.creates).max(1);
    let pace = Duration::from_secs(args.partition).mul_f64(0.9) / steps as u32;
    let params = PatchParams::default();
    for i in 0..steps {
        if i < args.changes {
            let name = item_name(i);
            let spec = Patch::Merge(json!({"spec": {"color": format!("r-{i}")}}));
            world
                .consumer
                .patch(&res, Some(NAMESPACE), &name, &spec, &params)
                .await
                .with_context(|| format!("changing {name}"))?;
            let status = Patch::Merge(json!({"status": {"phase": format!("q-{i}")}}));
            world
                .provider
                .patch_status(&res, Some(NAMESPACE), &name, &status, &params)
                .await
                .with_context(|| format!("changing the status of {name}"))?;
        }
        if i < args.creates {
            world
                .create_items(&res, objects + i..objects + i + 1, args.spec_bytes, 1)
                .await?;
        }
        tokio::time::sleep_until((partitioned + pace * (i as u32 + 1)).into()).await;
    }
    tokio::time::sleep_until((partitioned + Duration::from_secs(args.partition)).into()).await;
    proxy.heal();
    let healed = Instant::now();
    let actual_partition = partitioned.elapsed().as_secs_f64();
    let deadline = Duration::from_secs(args.deadline);
    let mut verdict;
    loop {
        verdict = Verdict::of(&*world.provider, &*world.consumer, &res, args, objects).await?;
        if verdict.converged() || healed.elapsed() >= deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let converge_seconds = healed.elapsed().as_secs_f64();
    world.check_running()?;
    world.shutdown().await?;
    let converged = verdict.converged();
    Ok(json!({
        "partition_seconds": args.partition,
        "actual_partition_seconds": actual_partition,
        "changes_per_side": args.changes,
        "creates": args.creates,
        "converge_seconds": converged.then_some(converge_seconds),
        "verdict": verdict,
        "checks": {
            "converged": converged,
            "nothing_lost": verdict.spec_missing == 0 && verdict.status_missing == 0 && verdict.created_missing == 0,
            "nothing_duplicated": verdict.spec_duplicated == 0 && verdict.status_duplicated == 0
                && verdict.provider_objects <= verdict.expected_objects && verdict.consumer_objects <= verdict.expected_objects,
            "object_counts_equal": verdict.provider_objects == verdict.expected_objects && verdict.consumer_objects == verdict.expected_objects,
        },
    }))
}

/// What both sides hold against what was written.
#[derive(Debug, Clone, Default, Serialize)]
pub struct Verdict {
    /// Objects there should be on each side.
    pub expected_objects: usize,
    /// Objects on the provider.
    pub provider_objects: usize,
    /// Objects on the consumer.
    pub consumer_objects: usize,
    /// Spec values written on the consumer that no provider copy holds where they were written.
    pub spec_missing: usize,
    /// Spec values held by more than one provider copy (extra holders).
    pub spec_duplicated: usize,
    /// Status values written on the provider that no consumer object holds where written.
    pub status_missing: usize,
    /// Status values held by more than one consumer object (extra holders).
    pub status_duplicated: usize,
    /// Objects created during the partition with no provider copy or no status back.
    pub created_missing: usize,
}

impl Verdict {
    async fn of(
        provider: &dyn ClusterClient,
        consumer: &dyn ClusterClient,
        res: &ApiResource,
        args: &Args,
        objects: usize,
    ) -> anyhow::Result<Self> {
        let on = async |client: &dyn ClusterClient| -> anyhow::Result<BTreeMap<String, Value>> {
            let list = client
                .list(res, Some(NAMESPACE), &Default::default())
                .await
                .context("listing objects")?;
            Ok(list
                .items
                .into_iter()
                .map(|o| (o.metadata.name.clone().unwrap_or_default(), o.data))
                .collect())
        };
        let provider_objects = on(provider).await?;
        let consumer_objects = on(consumer).await?;
        let mut verdict = Self {
            expected_objects: objects + args.creates,
            provider_objects: provider_objects.len(),
            consumer_objects: consumer_objects.len(),
            ..Self::default()
        };
        let holders = |side: &BTreeMap<String, Value>, pointer: &str| {
            let mut by_value: BTreeMap<String, Vec<String>> = BTreeMap::new();
            for (name, data) in side {
                if let Some(v) = data.pointer(pointer).and_then(Value::as_str) {
                    by_value.entry(v.to_string()).or_default().push(name.clone());
                }
            }
            by_value
        };
        let spec_holders = holders(&provider_objects, "/spec/color");
        let status_holders = holders(&consumer_objects, "/status/phase");
        for i in 0..args.changes {
            let name = item_name(i);
            let check = |holders: &BTreeMap<String, Vec<String>>, value: String| match holders.get(&value) {
                Some(names) => (usize::from(!names.contains(&name)), names.len().saturating_sub(1)),
                None => (1, 0),
            };
            let (missing, extra) = check(&spec_holders, format!("r-{i}"));
            verdict.spec_missing += missing;
            verdict.spec_duplicated += extra;
            let (missing, extra) = check(&status_holders, format!("q-{i}"));
            verdict.status_missing += missing;
            verdict.status_duplicated += extra;
        }
        for i in objects..objects + args.creates {
            let name = item_name(i);
            let copied = provider_objects.contains_key(&name);
            let status_back = consumer_objects
                .get(&name)
                .and_then(|d| d.pointer("/status/phase"))
                .is_some();
            verdict.created_missing += usize::from(!(copied && status_back));
        }
        Ok(verdict)
    }

    fn converged(&self) -> bool {
        self.spec_missing == 0
            && self.status_missing == 0
            && self.created_missing == 0
            && self.spec_duplicated == 0
            && self.status_duplicated == 0
            && self.provider_objects == self.expected_objects
            && self.consumer_objects == self.expected_objects
    }
}

/// One row per run.
pub fn table(runs: &[&Envelope]) -> Table {
    let mut table = Table::new(
        "Recovery (workload 4): convergence after a partition",
        &[
            "backend",
            "partition s",
            "changes per side",
            "creates",
            "converged after s",
            "lost",
            "duplicated",
            "objects prov / cons / expected",
        ],
    );
    for run in runs {
        let sum = |a: &str, b: &str| run.num(a).zip(run.num(b)).map(|(x, y)| x + y);
        table.row(vec![
            run.backend().into(),
            fmt(run.num("/partition_seconds"), 0),
            fmt(run.num("/changes_per_side"), 0),
            fmt(run.num("/creates"), 0),
            fmt(run.num("/converge_seconds"), 1),
            fmt(
                sum("/verdict/spec_missing", "/verdict/status_missing")
                    .zip(run.num("/verdict/created_missing"))
                    .map(|(a, b)| a + b),
                0,
            ),
            fmt(sum("/verdict/spec_duplicated", "/verdict/status_duplicated"), 0),
            format!(
                "{} / {} / {}",
                fmt(run.num("/verdict/provider_objects"), 0),
                fmt(run.num("/verdict/consumer_objects"), 0),
                fmt(run.num("/verdict/expected_objects"), 0)
            ),
        ]);
    }
    table
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::world::{api, crd, item, object};

    /// Two fake clusters with the benchmark's API and `n` objects, their spec and status set as a
    /// converged recovery would leave them.
    async fn converged(n: usize) -> (fakeapi::FakeClient, fakeapi::FakeClient, ApiResource) {
        let layout = Layout {
            backend: Backend::Fake,
            connections: 1,
            apis: 1,
            proxy: false,
        };
        let res = api(&layout, 0, 0);
        let crd_res = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        let mut sides = Vec::new();
        for name in ["provider", "consumer"] {
            let client = fakeapi::FakeCluster::builder(name).build().admin_client();
            client
                .create(&crd_res, None, &object(crd(&res)).unwrap(), &Default::default())
                .await
                .unwrap();
            crate::measure::wait_for("the CRD served", Duration::from_secs(30), async || {
                client.list(&res, None, &Default::default()).await.ok().map(|_| ())
            })
            .await
            .unwrap();
            for i in 0..n {
                client
                    .create(
                        &res,
                        Some(NAMESPACE),
                        &item(&res, &item_name(i), i, 64).unwrap(),
                        &Default::default(),
                    )
                    .await
                    .unwrap();
                let status = Patch::Merge(json!({"status": {"phase": format!("q-{i}")}}));
                client
                    .patch_status(&res, Some(NAMESPACE), &item_name(i), &status, &PatchParams::default())
                    .await
                    .unwrap();
                let spec = Patch::Merge(json!({"spec": {"color": format!("r-{i}")}}));
                client
                    .patch(&res, Some(NAMESPACE), &item_name(i), &spec, &PatchParams::default())
                    .await
                    .unwrap();
            }
            sides.push(client);
        }
        let consumer = sides.pop().unwrap();
        (sides.pop().unwrap(), consumer, res)
    }

    fn args(changes: usize) -> Args {
        Args {
            backend: Backend::Fake,
            partition: 1,
            changes,
            creates: 0,
            spec_bytes: 64,
            deadline: 1,
        }
    }

    #[tokio::test]
    async fn a_converged_pair_passes_every_check() {
        let (provider, consumer, res) = converged(4).await;
        let verdict = Verdict::of(&provider, &consumer, &res, &args(4), 4).await.unwrap();
        assert!(verdict.converged(), "{verdict:?}");
    }

    #[tokio::test]
    async fn a_lost_copy_a_lost_status_and_a_duplicated_value_are_each_caught() {
        let (provider, consumer, res) = converged(4).await;
        provider
            .delete(&res, Some(NAMESPACE), &item_name(1), &Default::default())
            .await
            .unwrap();
        let stale = Patch::Merge(json!({"status": {"phase": "q-0"}}));
        consumer
            .patch_status(&res, Some(NAMESPACE), &item_name(2), &stale, &PatchParams::default())
            .await
            .unwrap();
        let verdict = Verdict::of(&provider, &consumer, &res, &args(4), 4).await.unwrap();
        assert!(!verdict.converged());
        assert_eq!((verdict.provider_objects, verdict.spec_missing), (3, 1), "{verdict:?}");
        // q-2 is lost, q-0 is held twice.
        assert_eq!(
            (verdict.status_missing, verdict.status_duplicated),
            (1, 1),
            "{verdict:?}"
        );
    }
}
