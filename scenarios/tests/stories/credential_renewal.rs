//! Issue 39 item 2: an issued token (a ServiceAccount token with an expiry, minted as kbind's
//! issuer does, whose Role lets it mint tokens for itself only) is renewed by the konnector
//! itself before it expires (contract §5): a TokenRequest on the provider, written back into
//! the same Secret key with a resourceVersion precondition. The engaged provider stays engaged
//! and nothing else is written; a renewal the provider refuses keeps the old token until it
//! expires and says so; a credential that expired while the konnector was down names the way
//! out; a kubeconfig that is not an issued token is never rewritten. fakeapi honours the
//! tokens' expiry on the world's paused clock.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::story::*;
use futures::FutureExt;
use kbind_api::consts::condition;
use kbind_api::{Connection, conditions};
use kbind_cluster::ClusterClient;
use kbind_engine::context::EngineConfig;
use kbind_scenarios::apis::widgets_crd;
use kbind_scenarios::world::NAMESPACE;
use kbind_scenarios::{Credential, ProviderOpts, World, seed_from_env};
use serde_json::json;

const HOUR: Duration = Duration::from_secs(3600);
const DAY: Duration = Duration::from_secs(24 * 3600);

/// The ClusterRole the konnector's ServiceAccount holds on the provider: what it syncs widgets
/// with, and no right to mint tokens (that comes only from the issued Role, by name).
const PROVIDER_ROLE: &str = "kbind-konnector-provider";

fn provider_role() -> serde_json::Value {
    json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole",
        "metadata": {"name": PROVIDER_ROLE},
        "rules": [
            {"apiGroups": ["example.org"], "resources": ["*"], "verbs": ["*"]},
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch", "create"]},
            {"apiGroups": [""], "resources": ["secrets", "configmaps"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
            {"apiGroups": ["core.kcp.io"], "resources": ["logicalclusters"], "verbs": ["get"]},
        ],
    })
}

/// A world with provider `acme` exporting widgets, the konnector running on an issued token of
/// `lifetime` (ServiceAccount `kbind-konnector` with [`PROVIDER_ROLE`] and the Role that lets
/// it renew itself), its ClusterBinding Ready and widget `default/w1` copied.
async fn renewing_world(
    story: &str,
    seed: u64,
    config: EngineConfig,
    lifetime: Duration,
    quiet: bool,
) -> (World, Credential) {
    let mut builder = World::builder()
        .seed(seed_from_env(seed))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .engine_config(config)
        // A year of leader-election renewals every few seconds would be most of the run.
        .leader_election(!quiet)
        .log_level(if quiet {
            tracing::Level::WARN
        } else {
            tracing::Level::DEBUG
        });
    if quiet {
        builder = builder.bookmark_interval(6 * HOUR);
    }
    let mut world = builder.build().await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world
        .provider("acme")
        .admin_client()
        .create(
            &kbind_cluster::ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRole>(&()),
            None,
            &serde_json::from_value(provider_role()).expect("a ClusterRole"),
            &Default::default(),
        )
        .await
        .expect("the konnector's ClusterRole");
    let cred = world
        .mint_issued_token("acme", "kbind-konnector", PROVIDER_ROLE, lifetime)
        .await;
    world.apply_bundle("acme", &cred, &[WIDGETS]).await;
    world.start_konnector();
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    create_widget(&world, "default", "w1", json!({"size": 0})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    (world, cred)
}

async fn connection(world: &World) -> Connection {
    world.connection("acme").await.expect("Connection acme")
}

fn condition_of(conn: &Connection, type_: &str) -> (String, String, String) {
    conditions::find(conn.conditions(), type_)
        .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        .unwrap_or_default()
}

fn expires_at(conn: &Connection) -> Option<k8s_openapi::jiff::Timestamp> {
    conn.status.as_ref()?.credential_expires_at.as_ref().map(|t| t.0)
}

/// The token the Connection's Secret holds now.
async fn secret_token(world: &World) -> String {
    let secret = world
        .consumer_get(&secrets(), Some(NAMESPACE), "acme")
        .await
        .expect("the Secret");
    let encoded = secret.data["data"]["kubeconfig"].as_str().expect("the kubeconfig key");
    use base64::Engine as _;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(encoded)
        .expect("base64");
    let kubeconfig = kbind_engine::remote::parse_kubeconfig(&bytes, false).expect("an accepted kubeconfig");
    match kubeconfig.credentials {
        kbind_engine::remote::Credentials::Token(token) => token,
        other => panic!("not a token: {other:?}"),
    }
}

/// Writes by `user` on `cluster` after the first `from`, counted by verb and resource.
fn writes_by(cluster: &fakeapi::FakeCluster, user: &str, from: usize) -> BTreeMap<String, usize> {
    let mut counted = BTreeMap::new();
    for w in cluster.write_log().iter().skip(from).filter(|w| w.user == user) {
        let sub = if w.subresource.is_empty() {
            String::new()
        } else {
            format!("/{}", w.subresource)
        };
        *counted.entry(format!("{} {}{sub}", w.verb, w.resource)).or_default() += 1;
    }
    counted
}

/// Requests by `user` on `cluster` after the first `from` whose verb and resource match.
fn requests_by(cluster: &fakeapi::FakeCluster, user: &str, from: usize, verb: &str, resource: &str) -> usize {
    cluster
        .request_log_from(from)
        .iter()
        .filter(|r| r.user == user && r.verb == verb && r.resource == resource)
        .count()
}

/// A year of day-long tokens: every one is renewed before it expires, the provider is engaged
/// once for the whole year (one client built, the same engagement, no engagement change
/// announced), the widget keeps syncing, and each renewal costs one TokenRequest on the
/// provider and, on the consumer, one Secret write and the Connection's `credentialExpiresAt`.
#[tokio::test(start_paused = true)]
async fn a_year_of_renewals_disengages_nothing_and_writes_only_the_secret() {
    let story = "a_year_of_renewals_disengages_nothing_and_writes_only_the_secret";
    // Heartbeats, resyncs, watch renewals and bookmarks every few hours keep a year of virtual
    // time affordable; renewals depend on none of them.
    let config = EngineConfig {
        heartbeat_interval: 3 * HOUR,
        rediscovery_interval: 6 * HOUR,
        watch_timeout: 6 * HOUR,
        ..EngineConfig::default()
    };
    let (mut world, cred) = renewing_world(story, 39, config, DAY, true).await;
    let konnector = world.replica_user("konnector-0");
    let engaged = world.providers().get("acme").expect("engaged");
    let mut changes = world.providers().changes();
    changes.mark_unchanged();
    let connects = world.connector().connects("acme");
    let consumer_from = world.consumer().write_log().len();
    let provider_from = world.provider("acme").write_log().len();
    let requests_from = world.provider("acme").request_log().len();
    let first_token = secret_token(&world).await;
    let first_expiry = expires_at(&connection(&world).await).expect("an issued token shows its expiry");
    let started = world.clock().now();

    let days = std::env::var("KBIND_RENEWAL_DAYS")
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(365u64);
    let began = std::time::Instant::now();
    for day in 1..=days {
        world.let_pass(DAY).await;
        patch_widget(&world, "default", "w1", json!({"spec": {"size": day}})).await;
        world
            .run_until_async(
                &format!("day {day}'s change reaches the provider"),
                30,
                copy_has("acme", "default", "w1", "/spec/size", json!(day)),
            )
            .await;
        let conn = connection(&world).await;
        let (ready, why, message) = condition_of(&conn, condition::READY);
        assert_eq!(ready, "True", "day {day}: Ready is {why}: {message}");
    }
    let elapsed = began.elapsed();
    if std::env::var("KBIND_RENEWAL_DEBUG").is_ok() {
        for (cluster, c) in [("consumer", world.consumer()), ("acme", world.provider("acme"))] {
            let mut counted: BTreeMap<String, usize> = BTreeMap::new();
            for r in c.request_log() {
                *counted
                    .entry(format!("{} {} {}", r.user, r.verb, r.resource))
                    .or_default() += 1;
            }
            println!("{cluster}: {counted:#?}");
        }
    }

    let renewals = world.providers().credentials();
    let report = renewals
        .iter()
        .find(|c| c.connection == "acme")
        .expect("acme's credential");
    let renewed = usize::try_from(report.renewed).unwrap();
    let token_requests = requests_by(
        world.provider("acme"),
        &cred.user,
        requests_from,
        "create",
        "serviceaccounts.",
    );
    let consumer_writes = writes_by(world.consumer(), &konnector, consumer_from);
    let provider_writes = writes_by(world.provider("acme"), &cred.user, provider_from);
    println!(
        "{days} days: {renewed} renewals, {token_requests} TokenRequests, consumer writes {consumer_writes:?}, provider \
         writes {provider_writes:?}, in {elapsed:?} (seed {})",
        world.seed()
    );

    // Every token was renewed before it expired: a day-long token at 57–67 % of its life.
    let virtual_days = (world.clock().now().duration_since(started).as_secs_f64() / DAY.as_secs_f64()) as usize;
    assert!(
        renewed >= virtual_days * 3 / 2 && renewed <= virtual_days * 2 + 1,
        "{renewed} renewals in {virtual_days} days (seed {})",
        world.seed()
    );
    assert_eq!(report.failed, 0, "no renewal failed");
    assert_eq!(token_requests, renewed, "one TokenRequest per renewal");
    // Nothing disengaged: the same engagement, one client, no engagement change announced.
    let now_engaged = world.providers().get("acme").expect("still engaged");
    assert!(
        std::sync::Arc::ptr_eq(&engaged, &now_engaged),
        "the provider was engaged again"
    );
    assert!(!changes.has_changed().unwrap(), "an engagement changed during the year");
    assert_eq!(
        world.connector().connects("acme"),
        connects,
        "a new provider client was built"
    );
    // On the consumer: the Secret and the Connection's status, once per renewal; nothing else.
    assert_eq!(
        consumer_writes,
        BTreeMap::from([
            ("update connections.core.kbind.io/status".to_string(), renewed),
            ("update secrets".to_string(), renewed),
        ]),
        "the konnector's consumer writes over the year"
    );
    // On the provider: the heartbeat and the widget's daily change, nothing else.
    let widget_writes: usize = provider_writes
        .iter()
        .filter(|(k, _)| k.contains("widgets.example.org"))
        .map(|(_, n)| n)
        .sum();
    assert_eq!(widget_writes, usize::try_from(days).unwrap(), "{provider_writes:?}");
    assert!(
        provider_writes
            .keys()
            .all(|k| k.contains("widgets.example.org") || k == "update leases.coordination.k8s.io"),
        "{provider_writes:?}"
    );
    let conn = connection(&world).await;
    let expiry = expires_at(&conn).expect("the renewed token's expiry");
    assert!(
        expiry > world.clock().now() && expiry > first_expiry,
        "{expiry} after {first_expiry}"
    );
    assert_ne!(secret_token(&world).await, first_token);
}

/// Events about Connection `acme` with `why` (cluster-scoped objects' Events live in `default`).
async fn connection_events(world: &World, why: &str) -> Vec<kbind_cluster::DynamicObject> {
    let events = world
        .consumer()
        .admin_client()
        .list(
            &kbind_engine::events::event_resource(),
            Some("default"),
            &Default::default(),
        )
        .await
        .expect("listing events");
    events
        .items
        .into_iter()
        .filter(|e| {
            e.data.pointer("/regarding/kind") == Some(&json!("Connection"))
                && e.data.pointer("/regarding/name") == Some(&json!("acme"))
                && e.data.get("reason") == Some(&json!(why))
        })
        .collect()
}

/// Whether Connection `acme`'s condition `type_` has `status` and `why`.
fn connection_is(
    type_: &'static str,
    status: &'static str,
    why: &'static str,
) -> impl for<'w> Fn(&'w World) -> futures::future::BoxFuture<'w, bool> {
    move |w| {
        async move {
            let conn = connection(w).await;
            let (s, r, _) = condition_of(&conn, type_);
            s == status && r == why
        }
        .boxed()
    }
}

/// A token of ServiceAccount `kbind-konnector` minted by the provider's admin (what a new bind
/// or a redeem hands the consumer), for `lifetime`.
async fn fresh_token(world: &World, lifetime: Duration) -> String {
    let answer = world
        .provider("acme")
        .admin_client()
        .create_subresource(
            &kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&()),
            Some(NAMESPACE),
            "kbind-konnector",
            "token",
            &json!({"spec": {"expirationSeconds": lifetime.as_secs()}}),
        )
        .await
        .expect("a new token");
    answer["status"]["token"].as_str().expect("a token").to_string()
}

/// The platform takes back the Role that lets the ServiceAccount mint its own tokens.
async fn withdraw_self_renewal(world: &World) {
    world
        .provider("acme")
        .admin_client()
        .delete(
            &kbind_cluster::ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
            Some(NAMESPACE),
            "kbind-konnector-self-token",
            &Default::default(),
        )
        .await
        .expect("the self-renewal RoleBinding goes");
}

/// A renewal the provider refuses (403: the Role that allowed it was taken back) keeps the
/// Connection Ready on the current token, says which verb on which resource was refused and
/// when the token expires (the Connected condition, a Warning Event, the metric), and retries.
/// At the expiry the provider refuses the token: `Connected=False, CredentialExpired` names the
/// way out, nothing is deleted on either side (§8.1, checked after every step), and a new token
/// of the same ServiceAccount in the Secret (a redeem) makes it Ready again.
#[tokio::test(start_paused = true)]
async fn a_refused_renewal_keeps_the_token_until_it_expires_and_names_the_way_out() {
    let story = "a_refused_renewal_keeps_the_token_until_it_expires_and_names_the_way_out";
    let (mut world, cred) = renewing_world(story, 40, EngineConfig::default(), HOUR, false).await;
    withdraw_self_renewal(&world).await;
    let engaged = world.providers().get("acme").expect("engaged");
    let first_expiry = expires_at(&connection(&world).await).expect("an issued token");

    // Due at 57–67 % of the hour: refused, reported, retried; the engagement stays.
    world.let_pass(Duration::from_secs(30 * 60)).await;
    world
        .run_until_async("a failed renewal is reported", 15 * 60, |w| {
            async move {
                condition_of(&connection(w).await, condition::CONNECTED)
                    .2
                    .contains("renewing the credential failed")
            }
            .boxed()
        })
        .await;
    let conn = connection(&world).await;
    let (connected, _, message) = condition_of(&conn, condition::CONNECTED);
    assert_eq!(connected, "True", "{message}");
    assert_eq!(condition_of(&conn, condition::READY).0, "True");
    for part in [
        "create serviceaccounts/token",
        "kbind/kbind-konnector",
        "HTTP 403 Forbidden",
        "expires at",
    ] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    let warnings = connection_events(&world, "CredentialRenewalFailed").await;
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    let note = warnings[0].data["note"].as_str().unwrap_or_default().to_string();
    assert!(
        note.contains("create serviceaccounts/token") && note.contains("403"),
        "{note}"
    );
    let report = world.providers().credentials();
    assert!(report[0].failed >= 1 && report[0].renewed == 0, "{report:?}");
    assert!(std::sync::Arc::ptr_eq(
        &engaged,
        &world.providers().get("acme").unwrap()
    ));
    assert_eq!(expires_at(&conn), Some(first_expiry), "the same token, the same expiry");

    // The token expires: the provider refuses it; the Connection names the way out.
    world.let_pass(Duration::from_secs(30 * 60)).await;
    world
        .run_until_async(
            "Connected=False, CredentialExpired",
            300,
            connection_is(condition::CONNECTED, "False", "CredentialExpired"),
        )
        .await;
    let conn = connection(&world).await;
    let (_, _, message) = condition_of(&conn, condition::CONNECTED);
    for part in ["expired at", "kbind bind", "kbind redeem", "nothing is deleted"] {
        assert!(message.contains(part), "{part:?} in {message}");
    }
    assert_eq!(condition_of(&conn, condition::READY).1, "CredentialExpired");
    assert_eq!(connection_events(&world, "CredentialExpired").await.len(), 1);
    assert!(
        world.providers().get("acme").is_none(),
        "disengaged once the token is refused"
    );
    assert!(
        world
            .consumer_get(&kbind_scenarios::apis::widgets(), Some("default"), "w1")
            .await
            .is_some()
    );
    assert!(
        world
            .provider_get("acme", &kbind_scenarios::apis::widgets(), Some("default"), "w1")
            .await
            .is_some(),
        "the provider copy stays"
    );

    // The way out: a new token of the same ServiceAccount.
    let token = fresh_token(&world, DAY).await;
    let renewed = Credential { token, ..cred };
    world.swap_secret("acme", &renewed, None).await;
    world
        .run_until_async(
            "Ready again",
            300,
            connection_is(condition::READY, "True", "AsExpected"),
        )
        .await;
}

/// A konnector down past its token's expiry comes back to `Connected=False, CredentialExpired`
/// with the way out, retries on its backoff (no crash, no request storm), and deletes nothing.
#[tokio::test(start_paused = true)]
async fn a_token_that_expired_while_the_konnector_was_down_names_the_way_out() {
    let story = "a_token_that_expired_while_the_konnector_was_down_names_the_way_out";
    let (mut world, cred) = renewing_world(story, 41, EngineConfig::default(), HOUR, false).await;
    world.crash_konnector();
    world.let_pass(2 * HOUR).await;
    world.start_konnector();
    world
        .run_until_async(
            "Connected=False, CredentialExpired",
            300,
            connection_is(condition::CONNECTED, "False", "CredentialExpired"),
        )
        .await;
    let conn = connection(&world).await;
    let (_, _, message) = condition_of(&conn, condition::CONNECTED);
    assert!(
        message.contains("kbind bind") && message.contains("kbind redeem"),
        "{message}"
    );
    assert!(expires_at(&conn).is_some_and(|at| at < world.clock().now()));
    let from = world.provider("acme").request_log().len();
    world.let_pass(Duration::from_secs(10 * 60)).await;
    let requests = world.provider("acme").request_log_from(from).len();
    // Retried on its backoff (at most every 15 s, jittered), not in a loop.
    assert!(requests <= 10 * 60 / 15 + 5, "{requests} requests in ten minutes");
    assert!(
        world
            .consumer_get(&kbind_scenarios::apis::widgets(), Some("default"), "w1")
            .await
            .is_some()
    );
    let _ = cred;
}

/// A new token of the same ServiceAccount written into the Secret by someone else (a redeem)
/// goes into the running client: the same engagement, no new client, and the old token's
/// expiry passes unnoticed.
#[tokio::test(start_paused = true)]
async fn a_redeemed_token_of_the_same_account_keeps_the_engagement() {
    let story = "a_redeemed_token_of_the_same_account_keeps_the_engagement";
    let (mut world, cred) = renewing_world(story, 42, EngineConfig::default(), HOUR, false).await;
    withdraw_self_renewal(&world).await;
    let engaged = world.providers().get("acme").expect("engaged");
    let connects = world.connector().connects("acme");
    let token = fresh_token(&world, DAY).await;
    world.swap_secret("acme", &Credential { token, ..cred }, None).await;
    world.steps_for(5).await;
    world.let_pass(2 * HOUR).await;
    world
        .run_until_async("Ready", 30, connection_is(condition::READY, "True", "AsExpected"))
        .await;
    assert!(
        std::sync::Arc::ptr_eq(&engaged, &world.providers().get("acme").unwrap()),
        "engaged again"
    );
    assert_eq!(world.connector().connects("acme"), connects, "a new client was built");
    patch_widget(&world, "default", "w1", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the change reaches the provider",
            30,
            copy_has("acme", "default", "w1", "/spec/size", json!(7)),
        )
        .await;
}

/// A kubeconfig that is not an issued token (a platform's own static token) is never
/// rewritten: no TokenRequest, no Secret write, no expiry in the status.
#[tokio::test(start_paused = true)]
async fn a_kubeconfig_that_is_not_an_issued_token_is_never_rewritten() {
    let story = "a_kubeconfig_that_is_not_an_issued_token_is_never_rewritten";
    let config = EngineConfig {
        heartbeat_interval: Duration::from_secs(600),
        rediscovery_interval: 6 * HOUR,
        ..EngineConfig::default()
    };
    let mut world = World::builder()
        .seed(seed_from_env(43))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .engine_config(config)
        .leader_election(false)
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &[WIDGETS]).await;
    world.start_konnector();
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    let konnector = world.replica_user("konnector-0");
    let from = world.consumer().write_log().len();
    for _ in 0..30 {
        world.let_pass(DAY).await;
    }
    let secret_writes = writes_by(world.consumer(), &konnector, from)
        .into_iter()
        .filter(|(k, _)| k.contains("secrets"))
        .count();
    assert_eq!(secret_writes, 0, "the Secret was rewritten");
    assert_eq!(expires_at(&connection(&world).await), None);
    assert_eq!(secret_token(&world).await, cred.token);
    let token_requests = world
        .provider("acme")
        .request_log()
        .iter()
        .filter(|r| r.resource == "serviceaccounts.")
        .count();
    assert_eq!(token_requests, 0);
    assert!(
        world
            .providers()
            .credentials()
            .iter()
            .all(|c| c.expires_at.is_none() && c.renewed + c.failed == 0)
    );
}
