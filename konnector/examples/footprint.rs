//! Measures the konnector's footprint: serves a provider and a consumer fakeapi over HTTPS in
//! process, runs the release `konnector` binary against them, times the sync of N widgets, then
//! samples the child's resident memory and its CPU use while idle.
//!
//! ```sh
//! cargo build --release -p konnector
//! cargo run --release -p konnector --example footprint -- 1000 [IDLE_SECONDS]
//! ```
//!
//! `KONNECTOR_BIN` overrides the binary (default: `konnector` next to this example's folder).
//! The `latency` example beside it adds change latencies and idle request counts.

mod common;

use std::time::{Duration, Instant};

use anyhow::Context as _;
use common::{Bench, clock_ticks_per_second, konnector_binary, mib};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let count: usize = args
        .next()
        .map_or(Ok(1000), |n| n.parse())
        .context("N must be a number")?;
    let idle_seconds: u64 = args
        .next()
        .map_or(Ok(30), |n| n.parse())
        .context("IDLE_SECONDS must be a number")?;
    let mut bench = Bench::start(konnector_binary()?).await?;
    let (rss_ready, _) = bench.memory_kib()?;

    let cpu_before_sync = bench.cpu_ticks()?;
    let start = Instant::now();
    let created = bench.create_widgets(count).await?;
    bench.wait_synced(count).await?;
    let synced = start.elapsed();
    let cpu_sync = bench.cpu_ticks()? - cpu_before_sync;
    let (rss_synced, _) = bench.memory_kib()?;

    // Two halves: the first may still hold the tail of the sync (status and finalizer writes
    // echoing back through the watches), the second is the steady idle cost.
    let half = Duration::from_secs(idle_seconds) / 2;
    let cpu_before_idle = bench.cpu_ticks()?;
    tokio::time::sleep(half).await;
    let cpu_first_half = bench.cpu_ticks()? - cpu_before_idle;
    let (rss_half, _) = bench.memory_kib()?;
    tokio::time::sleep(half).await;
    let cpu_idle = bench.cpu_ticks()? - cpu_before_idle;
    let cpu_second_half = cpu_idle - cpu_first_half;
    let (rss_idle, hwm) = bench.memory_kib()?;
    bench.check_running()?;

    let hz = clock_ticks_per_second() as f64;
    println!("konnector footprint ({})", bench.binary.display());
    println!("  objects:                  {count} widgets, one ClusterBinding");
    println!("  created on the consumer:  {:.2} s", created.as_secs_f64());
    println!(
        "  synced to the provider:   {:.2} s after the first create ({:.0} objects/s)",
        synced.as_secs_f64(),
        count as f64 / synced.as_secs_f64()
    );
    println!("  CPU during the sync:      {:.2} s", cpu_sync as f64 / hz);
    println!(
        "  CPU while idle:           {:.2} s over {idle_seconds} s ({:.2} % of one core)",
        cpu_idle as f64 / hz,
        100.0 * cpu_idle as f64 / hz / idle_seconds as f64
    );
    println!(
        "    first / second half:    {:.2} s / {:.2} s",
        cpu_first_half as f64 / hz,
        cpu_second_half as f64 / hz
    );
    println!("  RSS before the sync:      {}", mib(rss_ready));
    println!("  RSS after the sync:       {}", mib(rss_synced));
    println!("  RSS half-way through idle: {}", mib(rss_half));
    println!("  RSS after the idle time:  {}", mib(rss_idle));
    println!("  RSS peak (VmHWM):         {}", mib(hwm));

    bench.shutdown().await
}
