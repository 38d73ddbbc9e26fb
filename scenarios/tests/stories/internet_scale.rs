//! The provider's view at internet scale: every request that many consumers'
//! konnectors send one provider in ten idle minutes (paused clock), pinned to the heartbeat
//! and the watches' own renewals. Each consumer is a world of its own (a fake consumer cluster
//! and a konnector with the konnector binary's default `--resync` of 10 minutes) sharing one
//! provider; `KBIND_IDLE_CONSUMERS` sets how many (20 by default, so the suite stays quick;
//! BENCHMARKS.md gives the run with 1,000).

use std::collections::BTreeMap;

use crate::story::KONNECTOR_RESYNC;
use futures::FutureExt;
use kbind_engine::context::EngineConfig;
use kbind_scenarios::{ProviderOpts, World, seed_from_env};

use crate::story::binding_ready;

/// How many consumers share the provider.
fn consumers() -> usize {
    std::env::var("KBIND_IDLE_CONSUMERS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

/// Consumer `i` of the idle herd, sharing the first consumer's provider.
async fn consumer_world(seed: u64, i: usize, first: Option<&World>) -> World {
    crate::story::herd_member(seed, i, first, "idle consumers at internet scale").await
}

/// Runs `world` ten minutes and counts the requests provider `acme` got meanwhile from anyone
/// but the admin (whose reads are the worlds' invariant checks): by verb and resource, and by user.
async fn ten_idle_minutes(world: &mut World) -> (BTreeMap<String, usize>, BTreeMap<String, usize>) {
    let provider = world.provider("acme").clone();
    let from = provider.request_log().len();
    world.steps_for(600).await;
    let mut by_kind: BTreeMap<String, usize> = BTreeMap::new();
    let mut by_user: BTreeMap<String, usize> = BTreeMap::new();
    for r in provider.request_log_from(from) {
        if r.user == "admin" {
            continue;
        }
        *by_kind.entry(format!("{} {}", r.verb, r.resource)).or_insert(0) += 1;
        *by_user.entry(r.user).or_insert(0) += 1;
    }
    (by_kind, by_user)
}

#[tokio::test(start_paused = true)]
async fn ten_idle_minutes_of_many_consumers_cost_the_provider_their_heartbeats_and_watch_renewals() {
    let seed = seed_from_env(251);
    let n = consumers();
    let mut worlds: Vec<World> = Vec::with_capacity(n);
    for i in 0..n {
        let world = consumer_world(seed, i, worlds.first()).await;
        worlds.push(world);
    }
    let (first, others) = worlds.split_first_mut().expect("at least one consumer");
    let mut ready = vec![false; others.len()];
    first
        .run_until_async("every consumer's binding is Ready", 600, |w| {
            async move { binding_ready(w, "acme").await }.boxed()
        })
        .await;
    for _ in 0..600 {
        for (done, world) in ready.iter_mut().zip(others.iter()) {
            if !*done {
                *done = binding_ready(world, "acme").await;
            }
        }
        if ready.iter().all(|r| *r) {
            break;
        }
        first.steps_for(5).await;
    }
    let waiting = ready.iter().filter(|r| !**r).count();
    assert_eq!(waiting, 0, "seed {seed}: {waiting} of {n} consumers never got Ready");
    // Let every first pass, first heartbeat and watch start finish.
    first.steps_for(120).await;

    let (by_kind, users) = ten_idle_minutes(first).await;
    let total: usize = by_kind.values().sum();
    println!(
        "seed {seed}: {n} consumers, ten idle minutes: {total} provider requests ({:.2} per consumer per minute) \
         from {} konnectors: {by_kind:#?}",
        total as f64 / n as f64 / 10.0,
        users.len()
    );
    let count = |kind: &str| by_kind.get(kind).copied().unwrap_or(0);
    let heartbeats = count("update leases.coordination.k8s.io");
    // One Lease update every 30 s: 20 in ten minutes, one more or less at the window's edges.
    assert!(
        (19 * n..=21 * n).contains(&heartbeats),
        "seed {seed}: {heartbeats} heartbeat updates from {n} consumers in ten minutes, not 20 each"
    );
    // Each konnector watches two things on the provider (the widgets and the widgets' CRD);
    // a watch is renewed every 290 s, so at most three watch requests each in ten minutes.
    let watches: usize = by_kind
        .iter()
        .filter(|(k, _)| k.starts_with("watch "))
        .map(|(_, n)| n)
        .sum();
    assert!(
        watches <= 6 * n,
        "seed {seed}: {watches} watch requests from {n} consumers in ten minutes"
    );
    // Discovery once per resync (ten minutes): at most one list each.
    let lists = count("list customresourcedefinitions.apiextensions.k8s.io");
    assert!(
        lists <= n,
        "seed {seed}: {lists} discovery lists from {n} consumers in ten minutes"
    );
    let other: BTreeMap<&String, &usize> = by_kind
        .iter()
        .filter(|(k, _)| {
            !k.starts_with("watch ")
                && k.as_str() != "update leases.coordination.k8s.io"
                && k.as_str() != "list customresourcedefinitions.apiextensions.k8s.io"
        })
        .collect();
    assert!(
        other.is_empty(),
        "seed {seed}: idle konnectors sent the provider more than heartbeats, watches and discovery: {other:?}"
    );
    assert!(
        total <= 3 * 10 * n,
        "seed {seed}: {total} requests from {n} consumers: more than 3 per consumer per minute"
    );
}

/// How many Connections the one consumer of the next story makes to one provider.
fn connections() -> usize {
    std::env::var("KBIND_IDLE_CONNECTIONS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(20)
}

/// The gateway's common case: one Connection per Export, so a consumer holds many
/// Connections to one provider. They share one heartbeat Lease (one per consumer–provider pair,
/// contract §2): one of them renews it, the others prove their own link still reaches the pinned
/// provider by reading it, so no renewal conflicts and no identity re-reads follow.
#[tokio::test(start_paused = true)]
async fn ten_idle_minutes_of_many_connections_to_one_provider_cost_one_heartbeat() {
    let seed = seed_from_env(252);
    let n = connections();
    let config = EngineConfig {
        rediscovery_interval: KONNECTOR_RESYNC,
        ..EngineConfig::default()
    };
    let mut world = World::builder()
        .seed(seed)
        .story("many Connections to one provider, idle")
        .provider("acme", ProviderOpts::default())
        .engine_config(config)
        .build()
        .await;
    let mut users = Vec::with_capacity(n);
    for i in 0..n {
        let plural = format!("things{i:02}");
        let kind = format!("Thing{i:02}");
        world
            .install_provider_crd(
                "acme",
                kbind_scenarios::apis::exported_crd(&plural, &kind, "Namespaced"),
            )
            .await;
        let cred = world.mint_admin_token_for("acme", &format!("kbind-konnector.acme-{i:02}"));
        users.push(cred.user.clone());
        world
            .apply_bundle(&format!("acme-{i:02}"), &cred, &[&format!("{plural}.example.org")])
            .await;
    }
    world.start_konnector();
    world
        .run_until_async("every binding is Ready", 600, move |w| {
            async move {
                for i in 0..n {
                    if !binding_ready(w, &format!("acme-{i:02}")).await {
                        return false;
                    }
                }
                true
            }
            .boxed()
        })
        .await;
    // Let every first pass, first heartbeat and watch start finish.
    world.steps_for(120).await;

    let (by_kind, by_user) = ten_idle_minutes(&mut world).await;
    let total: usize = by_kind.values().sum();
    println!(
        "seed {seed}: {n} Connections to one provider, ten idle minutes: {total} provider requests \
         ({:.2} per Connection per minute): {by_kind:#?}",
        total as f64 / n as f64 / 10.0
    );
    let count = |kind: &str| by_kind.get(kind).copied().unwrap_or(0);
    let renewals = count("update leases.coordination.k8s.io");
    assert!(
        (19..=22).contains(&renewals),
        "seed {seed}: {renewals} Lease updates in ten minutes from {n} Connections to one provider: \
         the consumer's one Lease is renewed every 30 s, by one of them"
    );
    let identity_reads = count("get namespaces.");
    assert_eq!(
        identity_reads, 0,
        "seed {seed}: {identity_reads} identity reads while every link's Lease continuity held"
    );
    for user in &users {
        let sent = by_user.get(user).copied().unwrap_or(0);
        assert!(
            sent <= 3 * 10,
            "seed {seed}: Connection of {user} sent {sent} requests in ten idle minutes: more than 3 a minute"
        );
    }
}
