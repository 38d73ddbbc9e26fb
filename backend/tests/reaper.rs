//! The reaper on an in-process fake provider and tokio's paused clock: renewals are observed on
//! the reaper's own clock, a silent consumer is reaped after exactly the TTL, a skewed one that
//! renews is kept, report-only deletes nothing, and `--reap-objects` decides whether anything but
//! Grants goes.

mod reaper_world;

use std::time::Duration;

use fakeapi::{ErrorRule, InjectedError};
use jiff::{SignedDuration, Timestamp};
use kbind_backend::reaper::{Action, Target};
use reaper_world::*;

#[tokio::test(start_paused = true)]
async fn a_renewing_consumer_is_never_reaped_and_a_silent_one_is_reaped_after_exactly_the_ttl() {
    let (_cluster, admin) = provider().await;
    let live = grant(&admin, "token:alice", LIVE, &[]).await;
    let silent = grant(&admin, "token:bob", SILENT, &[]).await;
    let other = grant(&admin, "token:carol", OTHER, &[]).await;
    lease(&admin, LIVE).await;
    lease(&admin, SILENT).await;
    lease(&admin, OTHER).await;
    let beat = heartbeat(admin.clone(), LIVE, SignedDuration::ZERO);
    let beat_other = heartbeat(admin.clone(), OTHER, SignedDuration::ZERO);
    let mut reaper = Running::start(&admin, options(false, false));

    // The silent consumer renews once more after a while; its TTL runs from that write.
    tokio::time::sleep(Duration::from_secs(95)).await;
    renew(&admin, SILENT, Timestamp::from_second(1_767_225_695).unwrap()).await;
    let last_write = tokio::time::Instant::now();

    let action = reaper.next(2 * TTL).await;
    let idle = tokio::time::Instant::now() - last_write;
    assert_eq!(
        action,
        Action {
            consumer: SILENT.into(),
            target: Target::Grant { name: silent.clone() },
            performed: true
        }
    );
    assert_eq!(
        action.to_string(),
        format!("deleted Grant {silent} of consumer {SILENT}")
    );
    assert!(
        idle >= TTL && idle < TTL + Duration::from_secs(1),
        "reaped {idle:?} after the last renewal; the TTL is {TTL:?}"
    );
    assert!(!grant_exists(&admin, &silent).await);

    // Many TTLs later the renewing consumers still have their Grants and nothing else happened.
    tokio::time::sleep(10 * TTL).await;
    assert!(grant_exists(&admin, &live).await);
    assert!(grant_exists(&admin, &other).await);
    assert_eq!(reaper.drain(), []);
    // The reaper deletes no Lease: that is the issuer's revocation.
    assert!(alive(&admin, &leases(), Some(LEASE_NS), &format!("consumer-{SILENT}")).await);

    // A consumer that stops later is reaped a TTL after its last renewal too.
    beat_other.abort();
    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: other.clone() });
    assert!(grant_exists(&admin, &live).await);
    beat.abort();
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_skewed_clock_neither_kills_a_renewing_consumer_nor_saves_a_silent_one() {
    let (_cluster, admin) = provider().await;
    let behind = grant(&admin, "token:alice", LIVE, &[]).await;
    let ahead = grant(&admin, "token:bob", SILENT, &[]).await;
    lease(&admin, LIVE).await;
    lease(&admin, SILENT).await;
    // Thirty days behind: every written renewTime is far older than the TTL.
    let beat = heartbeat(admin.clone(), LIVE, SignedDuration::from_hours(-30 * 24));
    // A year ahead, written once: a renewTime in the future does not keep a silent consumer.
    renew(&admin, SILENT, Timestamp::from_second(1_798_761_600).unwrap()).await;
    let mut reaper = Running::start(&admin, options(false, false));

    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: ahead.clone() });
    tokio::time::sleep(5 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert!(grant_exists(&admin, &behind).await);
    assert!(!grant_exists(&admin, &ahead).await);
    beat.abort();
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn with_reap_objects_the_consumers_synced_objects_and_unused_claimed_namespaces_go() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(true, false));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    let mut targets: Vec<String> = actions.iter().map(|a| a.target.to_string()).collect();
    targets.sort();
    assert_eq!(
        targets,
        [
            format!("Grant {silent}"),
            "Namespace team-silent".to_string(),
            "gadgets.example.org g-silent".to_string(),
            "widgets.example.org legacy/w6".to_string(),
            "widgets.example.org shared/w2".to_string(),
            "widgets.example.org team-silent/w1".to_string(),
        ]
    );
    assert!(actions.iter().all(|a| a.performed && a.consumer == SILENT));
    // The Grant goes last: it is how a sweep interrupted halfway finds the rest again.
    assert_eq!(actions.last().unwrap().target, Target::Grant { name: silent.clone() });
    assert!(!grant_exists(&admin, &silent).await);
    // Kept: the other consumers' objects, `shared` (still used by alice's live Grant), `legacy`
    // (kbind did not create it), and the ConfigMap (not an API of the Export).
    eventually("the silent consumer's objects to go", || async {
        survivors(&admin).await
            == [
                "w3",
                "w4",
                "w5",
                "g-live",
                "c1",
                "ns/team-live",
                "ns/shared",
                "ns/carols",
                "ns/legacy",
            ]
    })
    .await;
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn without_reap_objects_only_grants_are_deleted() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(false, false));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(!grant_exists(&admin, &silent).await);
    tokio::time::sleep(2 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert_eq!(survivors(&admin).await, EVERYTHING);
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn report_only_lists_every_deletion_once_and_deletes_nothing() {
    let (_cluster, admin) = provider().await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&admin, options(true, true));

    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert_eq!(actions.len(), 6, "{actions:?}");
    assert!(actions.iter().all(|a| !a.performed && a.consumer == SILENT));
    assert!(
        actions
            .iter()
            .any(|a| a.to_string() == format!("would delete Grant {silent} of consumer {SILENT}")),
        "{actions:?}"
    );
    assert!(actions.iter().any(|a| a.target
        == Target::Namespace {
            name: "team-silent".into()
        }));
    // Reported once, not again every TTL while the Lease stays silent.
    tokio::time::sleep(3 * TTL).await;
    assert_eq!(reaper.drain(), []);
    assert!(grant_exists(&admin, &silent).await);
    assert_eq!(survivors(&admin).await, EVERYTHING);
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reaped_consumer_that_binds_again_and_renews_is_watched_afresh() {
    let (_cluster, admin) = provider().await;
    let first = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    let mut reaper = Running::start(&admin, options(false, false));
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name: first.clone() });

    // Re-bound long after: the stale Lease alone does not reap the new Grant...
    tokio::time::sleep(3 * TTL).await;
    let again = grant(&admin, "token:alice", SILENT, &[]).await;
    tokio::time::sleep(3 * TTL).await;
    assert!(grant_exists(&admin, &again).await);
    // ...its konnector renewing and then stopping does, a TTL after the last renewal.
    renew(&admin, SILENT, Timestamp::from_second(1_767_230_000).unwrap()).await;
    let renewed = tokio::time::Instant::now();
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name: again });
    assert!(tokio::time::Instant::now() - renewed >= TTL);
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_renewal_the_broken_watch_missed_is_seen_before_anything_is_deleted() {
    let (cluster, admin) = provider().await;
    let name = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    let mut reaper = Running::start(&admin, options(false, false));
    tokio::time::sleep(Duration::from_secs(60)).await;

    // The watch breaks and stays broken; the consumer renews shortly before the TTL is up.
    cluster.inject_error(ErrorRule::new(Some("watch"), Some("leases"), InjectedError::Internal));
    cluster.drop_watches();
    tokio::time::sleep(TTL - Duration::from_secs(120)).await;
    renew(&admin, SILENT, Timestamp::from_second(1_767_226_200).unwrap()).await;
    let renewed = tokio::time::Instant::now();
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert!(
        grant_exists(&admin, &name).await,
        "reaped although the Lease was renewed"
    );
    assert_eq!(reaper.drain(), []);

    // The renewal the reaper read itself starts the next TTL.
    cluster.clear_errors();
    assert_eq!(reaper.next(2 * TTL).await.target, Target::Grant { name });
    assert!(tokio::time::Instant::now() - renewed >= TTL);
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reap_the_provider_refuses_is_retried_until_it_succeeds() {
    let (cluster, admin) = provider().await;
    let name = grant(&admin, "token:alice", SILENT, &[]).await;
    lease(&admin, SILENT).await;
    cluster.inject_error(ErrorRule::new(Some("delete"), Some("grants"), InjectedError::Forbidden).times(3));
    let mut reaper = Running::start(&admin, options(false, false));
    let action = reaper.next(2 * TTL).await;
    assert_eq!(action.target, Target::Grant { name: name.clone() });
    assert!(!grant_exists(&admin, &name).await);
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn a_reaper_among_many_renewing_consumers_makes_no_request_but_its_watch() {
    const CONSUMERS: usize = 50;
    let (cluster, admin) = provider().await;
    let consumers: Vec<String> = (0..CONSUMERS)
        .map(|i| format!("00000000-0000-4000-8000-{i:012}"))
        .collect();
    for consumer in &consumers {
        grant(&admin, "token:alice", consumer, &[]).await;
        lease(&admin, consumer).await;
    }
    let renewing = consumers.clone();
    let renewer_admin = admin.clone();
    let renewer = tokio::spawn(async move {
        let clock = kbind_cluster::TokioClock::fixed();
        loop {
            tokio::time::sleep(RENEW_EVERY).await;
            // A renewal writes a new renewTime; rewriting the same one is no write at all.
            let now = kbind_cluster::Clock::now(&clock);
            for consumer in &renewing {
                renew(&renewer_admin, consumer, now).await;
            }
        }
    });
    let user = fakeapi::UserInfo {
        name: "reaper".into(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    };
    let client: std::sync::Arc<dyn kbind_cluster::ClusterClient> = std::sync::Arc::new(cluster.client(user));
    let mut reaper = Running::start(&client, options(false, false));
    tokio::time::sleep(3 * TTL).await;
    let reaped = reaper.drain();
    assert!(
        reaped.is_empty(),
        "{} renewing consumers reaped, e.g. {:?}",
        reaped.len(),
        reaped.first()
    );
    let requests: Vec<_> = cluster
        .request_log()
        .into_iter()
        .filter(|r| r.user == "reaper")
        .collect();
    let mut by_verb = std::collections::BTreeMap::<(String, String), usize>::new();
    for r in &requests {
        *by_verb.entry((r.verb.clone(), r.resource.clone())).or_default() += 1;
    }
    eprintln!(
        "reaper requests over {:?} with {CONSUMERS} renewing consumers: {by_verb:?}",
        3 * TTL
    );
    assert!(
        by_verb
            .keys()
            .all(|(verb, resource)| resource == "leases.coordination.k8s.io" && (verb == "list" || verb == "watch")),
        "{by_verb:?}"
    );
    // One list, then a watch per server-side timeout (290 s) at most, never one per renewal.
    assert!(
        requests.len() <= 1 + (3 * TTL.as_secs() as usize) / 290 + 1,
        "{by_verb:?}"
    );
    renewer.abort();
    reaper.stop().await;
}
