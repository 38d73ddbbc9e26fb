//! In-process fakeapi benchmark (not a test): create, update and watch-delivery throughput,
//! and memory per stored object. Run: `cargo run --release -p fakeapi --example bench [N]`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use futures::StreamExt;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, PostParams, WatchEvent, WatchParams};
use serde_json::json;

/// Counts live heap bytes so memory per object can be reported.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

fn configmaps() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

fn object(i: usize, value: &str) -> anyhow::Result<DynamicObject> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": format!("cm-{i}"), "labels": {"app": "bench", "shard": (i % 10).to_string()}},
        "data": {"key": value, "other": "some constant payload of moderate size for realism"},
    }))?)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> anyhow::Result<()> {
    let n: usize = std::env::args().nth(1).and_then(|a| a.parse().ok()).unwrap_or(10_000);
    let cluster = fakeapi::FakeCluster::builder("bench")
        .seed(1)
        .history_limit(n * 3)
        .build();
    let client = cluster.admin_client();
    let res = configmaps();
    let ns = Some("default");

    let mut watch = client
        .watch(
            &res,
            ns,
            &WatchParams::default(),
            &cluster.resource_version().to_string(),
        )
        .await?;

    let before = LIVE.load(Ordering::Relaxed);
    let start = Instant::now();
    for i in 0..n {
        client
            .create(&res, ns, &object(i, "v0")?, &PostParams::default())
            .await?;
    }
    let create_secs = start.elapsed().as_secs_f64();
    let stored_bytes = LIVE.load(Ordering::Relaxed) - before;

    let start = Instant::now();
    for i in 0..n {
        let mut obj = client.get(&res, ns, &format!("cm-{i}")).await?;
        obj.data["data"]["key"] = json!("v1");
        client
            .replace(&res, ns, &format!("cm-{i}"), &obj, &PostParams::default())
            .await?;
    }
    let update_secs = start.elapsed().as_secs_f64();

    let start = Instant::now();
    let mut delivered = 0usize;
    while delivered < 2 * n {
        match watch.next().await {
            Some(Ok(WatchEvent::Added(_) | WatchEvent::Modified(_))) => delivered += 1,
            Some(Ok(_)) => {}
            Some(Err(e)) => anyhow::bail!("watch failed: {e}"),
            None => anyhow::bail!("watch ended after {delivered} events"),
        }
    }
    let watch_secs = start.elapsed().as_secs_f64();

    println!("objects: {n}");
    println!("create: {:.0} objects/s", n as f64 / create_secs);
    println!("update (get+replace): {:.0} objects/s", n as f64 / update_secs);
    println!("watch delivery: {:.0} events/s", (2 * n) as f64 / watch_secs);
    println!(
        "memory per stored object (incl. its history entry and managedFields): {} bytes",
        stored_bytes / n as isize
    );
    Ok(())
}
