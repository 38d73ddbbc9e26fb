//! The herd: many consumers' konnectors on one provider that restarts. Every
//! watch is dropped, the provider is unavailable for 30 s, then answers 429 (`Retry-After: 5`)
//! for 20 s. Counted on the paused clock, per request: no watch is relisted more than once per
//! consumer, the retries spread over the seconds by jitter (the per-second histogram is
//! printed), nothing is lost, and no provider object is written again (the heartbeat Leases
//! aside). Each consumer is a world of its own sharing the provider; `KBIND_HERD_CONSUMERS`
//! sets how many (20 by default so the suite stays quick; BENCHMARKS.md has the 1,000 run).

use std::collections::BTreeMap;

use kbind_cluster::ClusterClient;
use kbind_scenarios::apis::{widget, widgets};
use kbind_scenarios::{World, seed_from_env};
use serde_json::json;

use crate::story::binding_ready;

/// How many consumers share the provider.
fn consumers() -> usize {
    std::env::var("KBIND_HERD_CONSUMERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

/// Widgets each of the first [`SYNCING`] consumers syncs.
const WIDGETS_EACH: usize = 3;
/// How many consumers sync widgets; every consumer binds and watches them. The herd's
/// konnectors hold admin credentials on the provider, so each caches every copy: with a copy
/// per consumer, memory would grow with the square of the herd (real credentials are scoped
/// to a consumer's namespaces).
const SYNCING: usize = 20;
/// How long the restarting provider answers nothing.
const DOWN: u64 = 30;
/// How long it then answers 429.
const THROTTLED: u64 = 20;
/// Its `Retry-After`.
const RETRY_AFTER: u32 = 5;
/// How long after the throttling the herd is watched settling.
const AFTER: u64 = 120;

async fn consumer_world(seed: u64, i: usize, first: Option<&World>) -> World {
    crate::story::herd_member(seed, i, first, "a provider restart under a herd of consumers").await
}

/// The namespace consumer `i`'s widgets live in (its own, so copies of consumers do not meet).
fn namespace(i: usize) -> String {
    format!("team-{i:04}")
}

#[tokio::test(start_paused = true)]
async fn a_provider_restart_under_a_herd_costs_only_time() {
    let seed = seed_from_env(341);
    let n = consumers();
    let mut worlds: Vec<World> = Vec::with_capacity(n);
    for i in 0..n {
        let world = consumer_world(seed, i, worlds.first()).await;
        worlds.push(world);
    }
    for (i, world) in worlds.iter().enumerate() {
        let client = world.consumer().admin_client();
        crate::story::ensure_namespace(&client, &namespace(i)).await;
    }
    let mut ready = vec![false; n];
    for _ in 0..600 {
        for (done, world) in ready.iter_mut().zip(worlds.iter()) {
            if !*done {
                *done = binding_ready(world, "acme").await;
            }
        }
        if ready.iter().all(|r| *r) {
            break;
        }
        worlds[0].steps_for(5).await;
    }
    assert!(ready.iter().all(|r| *r), "seed {seed}: not every consumer got Ready");
    for (i, world) in worlds.iter().enumerate().take(SYNCING) {
        let client = world.consumer().admin_client();
        for w in 0..WIDGETS_EACH {
            let name = format!("w{w}");
            client
                .create(
                    &widgets(),
                    Some(&namespace(i)),
                    &widget(&namespace(i), &name, json!({"size": w})),
                    &Default::default(),
                )
                .await
                .expect("create a widget");
        }
    }
    let provider = worlds[0].provider("acme").clone();
    let padmin = provider.admin_client();
    for _ in 0..600 {
        let copies = padmin
            .list(&widgets(), None, &Default::default())
            .await
            .map(|l| l.items.len())
            .unwrap_or(0);
        if copies == n.min(SYNCING) * WIDGETS_EACH {
            break;
        }
        worlds[0].steps_for(5).await;
    }
    let before = copies_by_key(&provider).await;
    assert_eq!(
        before.len(),
        n.min(SYNCING) * WIDGETS_EACH,
        "seed {seed}: every widget has its copy"
    );
    // Every first pass, heartbeat and watch start done.
    worlds[0].steps_for(120).await;

    // The restart: every watch dropped, nothing answered for 30 s, then 429s for 20 s.
    let requests_from = provider.request_log().len();
    let writes_from = provider.write_log().len();
    provider.partition();
    worlds[0].steps_for(DOWN).await;
    provider.heal();
    provider.inject_error(fakeapi::ErrorRule::new(
        None,
        None,
        fakeapi::InjectedError::TooManyRequests {
            retry_after_seconds: RETRY_AFTER,
        },
    ));
    worlds[0].steps_for(THROTTLED).await;
    provider.clear_errors();
    worlds[0].steps_for(AFTER).await;

    // Count what the herd sent (the admin's reads are the worlds' own checks).
    let requests: Vec<_> = provider
        .request_log_from(requests_from)
        .into_iter()
        .filter(|r| r.user != "admin")
        .collect();
    let start = requests.first().map(|r| r.at).unwrap_or_default();
    let mut per_second: BTreeMap<i64, usize> = BTreeMap::new();
    let mut relists: BTreeMap<(String, String), usize> = BTreeMap::new();
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    for r in &requests {
        *per_second.entry((r.at - start).get_seconds()).or_insert(0) += 1;
        *by_kind
            .entry(format!(
                "{} {}{}",
                r.verb,
                r.resource,
                if r.error.is_some() { " (refused)" } else { "" }
            ))
            .or_insert(0) += 1;
        if r.verb == "list" && r.error.is_none() {
            *relists.entry((r.user.clone(), r.resource.clone())).or_insert(0) += 1;
        }
    }
    let histogram: Vec<String> = per_second.iter().map(|(s, c)| format!("{s:>4} s {c:>6}")).collect();
    println!(
        "seed {seed}: {n} consumers, a provider restart ({DOWN} s down, {THROTTLED} s of 429 with Retry-After {RETRY_AFTER} s, {AFTER} s after): \
         {} requests\nby kind: {by_kind:#?}\nrequests per second since the restart:\n{}",
        requests.len(),
        histogram.join("\n")
    );
    // No watch relisted more than once per consumer (a resumed watch lists nothing).
    let worst = relists.iter().max_by_key(|(_, c)| **c);
    assert!(
        relists.values().all(|c| *c <= 1),
        "seed {seed}: a watch was relisted more than once by one consumer: {worst:?}"
    );
    // Spread by jitter: once the provider answers again, no second holds the whole herd.
    let answering = DOWN as i64;
    let window: Vec<usize> = per_second
        .range(answering..answering + THROTTLED as i64 + 30)
        .map(|(_, c)| *c)
        .collect();
    let total: usize = window.iter().sum();
    let busiest = window.iter().copied().max().unwrap_or(0);
    assert!(
        total == 0 || busiest * 3 <= total,
        "seed {seed}: {busiest} of {total} requests after the provider came back fell in one second"
    );
    // Nothing written again but the heartbeats; nothing lost.
    let rewrites: Vec<_> = provider
        .write_log()
        .into_iter()
        .skip(writes_from)
        .filter(|w| !w.resource.starts_with("leases."))
        .collect();
    assert!(
        rewrites.is_empty(),
        "seed {seed}: {} provider objects were written again though none changed: {:?}",
        rewrites.len(),
        rewrites.iter().take(5).collect::<Vec<_>>()
    );
    let after = copies_by_key(&provider).await;
    assert_eq!(after, before, "seed {seed}: every copy is there, the same one");
    for (i, world) in worlds.iter().enumerate() {
        assert!(
            binding_ready(world, "acme").await,
            "seed {seed}: consumer {i} is Ready again"
        );
        let list = world
            .consumer()
            .admin_client()
            .list(&widgets(), Some(&namespace(i)), &Default::default())
            .await
            .expect("list consumer widgets");
        let wanted = if i < SYNCING { WIDGETS_EACH } else { 0 };
        assert_eq!(list.items.len(), wanted, "seed {seed}: consumer {i} lost nothing");
    }
}

/// Every widget copy on the provider: `namespace/name` → UID.
async fn copies_by_key(provider: &fakeapi::FakeCluster) -> BTreeMap<String, String> {
    let list = provider
        .admin_client()
        .list(&widgets(), None, &Default::default())
        .await
        .expect("list provider widgets");
    list.items
        .into_iter()
        .map(|c| {
            (
                format!(
                    "{}/{}",
                    c.metadata.namespace.unwrap_or_default(),
                    c.metadata.name.unwrap_or_default()
                ),
                c.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}
