//! fakeapi over HTTPS with `kube::Client` (not a test): get and list requests per second and
//! watch-event delivery, on loopback only.
//! Run: `cargo run --release -p fakeapi --example http_bench [N]` (N objects, default 500).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, serve_cluster};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, ListParams, ObjectMeta, PostParams, WatchEvent, WatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

/// How many list requests to time: each returns every object, so far fewer than gets.
const LISTS: usize = 50;
/// No phase may take longer than this; a stall is reported instead of waited out.
const PHASE_LIMIT: Duration = Duration::from_secs(120);

#[tokio::main]
async fn main() -> Result<()> {
    let count: usize = match std::env::args().nth(1) {
        Some(arg) => arg.parse().context("N must be a positive number")?,
        None => 500,
    };
    if count == 0 {
        bail!("N must be at least 1");
    }
    let cluster = FakeCluster::builder("http-bench").build();
    let server = serve_cluster(cluster, ClusterServeOptions::default()).await?;
    let kubeconfig = server.admin_kubeconfig().context("a served cluster has an admin")?;
    let config =
        kube::Config::from_custom_kubeconfig(Kubeconfig::from_yaml(&kubeconfig)?, &KubeConfigOptions::default())
            .await?;
    let client = kube::Client::try_from(config)?;
    let api: Api<ConfigMap> = Api::namespaced(client, "default");
    println!("fakeapi at {} with {count} ConfigMaps", server.url());

    let rv = timed("create", count, create_all(&api, count, "bench")).await?;
    timed("get", count, get_all(&api, count)).await?;
    timed("list", LISTS, list_all(&api, count)).await?;
    timed("watch replay", count, count_added(&api, count, &rv)).await?;
    timed("watch live", count, live_deliveries(&api, count)).await?;
    server.shutdown().await;
    Ok(())
}

/// Runs one phase within [`PHASE_LIMIT`] and prints its rate.
async fn timed<T>(what: &str, n: usize, phase: impl Future<Output = Result<T>>) -> Result<T> {
    let started = Instant::now();
    let out = tokio::time::timeout(PHASE_LIMIT, phase)
        .await
        .with_context(|| format!("{what} phase stalled"))?
        .with_context(|| format!("{what} phase failed (is fakeapi::http::router serving the API?)"))?;
    let secs = started.elapsed().as_secs_f64();
    println!("{what:>12}: {n:>6} in {secs:>7.3}s = {:>9.0}/s", n as f64 / secs);
    Ok(out)
}

fn config_map(name: String) -> ConfigMap {
    ConfigMap {
        metadata: ObjectMeta {
            name: Some(name),
            ..ObjectMeta::default()
        },
        data: Some([("key".to_string(), "value".to_string())].into()),
        ..ConfigMap::default()
    }
}

/// Creates `n` objects; answers the resourceVersion before the first one.
async fn create_all(api: &Api<ConfigMap>, n: usize, prefix: &str) -> Result<String> {
    let before = api.list(&ListParams::default().limit(1)).await?;
    for i in 0..n {
        api.create(&PostParams::default(), &config_map(format!("{prefix}-{i}")))
            .await?;
    }
    before.metadata.resource_version.context("a list has a resourceVersion")
}

async fn get_all(api: &Api<ConfigMap>, n: usize) -> Result<()> {
    for i in 0..n {
        api.get(&format!("bench-{i}")).await?;
    }
    Ok(())
}

async fn list_all(api: &Api<ConfigMap>, n: usize) -> Result<()> {
    for _ in 0..LISTS {
        let list = api.list(&ListParams::default()).await?;
        if list.items.len() < n {
            bail!("list returned {} of {n} objects", list.items.len());
        }
    }
    Ok(())
}

/// Watches from `rv` and counts ADDED events until `n` arrived.
async fn count_added(api: &Api<ConfigMap>, n: usize, rv: &str) -> Result<()> {
    let mut events = api.watch(&WatchParams::default(), rv).await?.boxed();
    let mut added = 0;
    while added < n {
        match events.try_next().await? {
            Some(WatchEvent::Added(_)) => added += 1,
            Some(WatchEvent::Error(status)) => bail!("watch error: {status:?}"),
            Some(_) => {}
            None => bail!("watch ended after {added} of {n} events"),
        }
    }
    Ok(())
}

/// Creates `n` more objects while a watch from just before them counts their ADDED events.
async fn live_deliveries(api: &Api<ConfigMap>, n: usize) -> Result<()> {
    let rv = api
        .list(&ListParams::default().limit(1))
        .await?
        .metadata
        .resource_version
        .context("a list has a resourceVersion")?;
    let creator = api.clone();
    let creates = tokio::spawn(async move { create_all(&creator, n, "live").await });
    count_added(api, n, &rv).await?;
    creates.await.context("the create task panicked")??;
    Ok(())
}
