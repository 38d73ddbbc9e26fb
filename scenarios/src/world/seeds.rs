//! Seeds: one or many per property, from `KBIND_SEED`/`KBIND_SEEDS`, each on a fresh
//! paused-clock runtime.

/// The seed from `KBIND_SEED`, else `default`.
pub fn seed_from_env(default: u64) -> u64 {
    std::env::var("KBIND_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// Runs `schedule` once per seed on a fresh paused-clock runtime: `KBIND_SEED` replays one seed,
/// `KBIND_SEEDS=N` runs seeds `0..N`, else `0..default_count`.
pub fn for_each_seed<Fut: std::future::Future<Output = ()>>(default_count: u64, schedule: impl Fn(u64) -> Fut) {
    for_each_seed_scaled(default_count, 1, schedule);
}

/// [`for_each_seed`] for a property whose seed costs several times a usual one: `KBIND_SEEDS=N`
/// runs seeds `0..N/divisor` (at least one), so CI's one `KBIND_SEEDS` keeps its total bounded.
pub fn for_each_seed_scaled<Fut: std::future::Future<Output = ()>>(
    default_count: u64,
    divisor: u64,
    schedule: impl Fn(u64) -> Fut,
) {
    let seeds: Vec<u64> = match std::env::var("KBIND_SEED").ok().and_then(|s| s.parse().ok()) {
        Some(seed) => vec![seed],
        None => {
            let n = std::env::var("KBIND_SEEDS")
                .ok()
                .and_then(|s| s.parse::<u64>().ok())
                .map_or(default_count, |n| (n / divisor.max(1)).max(1));
            (0..n).collect()
        }
    };
    for seed in seeds {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .start_paused(true)
            .build()
            .expect("a current-thread runtime");
        runtime.block_on(schedule(seed));
    }
}
