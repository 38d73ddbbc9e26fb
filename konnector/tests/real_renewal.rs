//! Self-renewing credentials on real kube-apiservers: the `konnector` binary renews the issued token its
//! Connection runs on (a ServiceAccount token of the shortest lifetime TokenRequest allows, 600 s,
//! renewed at 1 % of it through `--credential-renew-fraction`, so every few seconds) with a
//! TokenRequest for its own ServiceAccount, which a Role allows by name as kbind's issuer grants
//! it, and writes each new token back into the Secret. Syncing goes on across the renewals and
//! the provider is engaged once. Revoking after the renewals (deleting the ServiceAccount, as the
//! issuer's revoke does) still ends every token: the Connection is not Ready and nothing is
//! deleted on either side.
//!
//! Skips like real_clusters.rs without the Go-built binaries or helm, unless
//! `KBIND_REQUIRE_REAL_K8S=1` / `KBIND_REQUIRE_HELM=1`. The tests take turns (one lock).

mod child;
mod real;

use std::collections::BTreeSet;

use base64::Engine as _;
use real::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The provider ServiceAccount of consumer 1, whose token the bundle carries.
const ACCOUNT: &str = "consumer-1";

/// The token kubeconfig `provider` in the consumer's Secret holds now.
async fn secret_token(consumer: &Consumer) -> Option<String> {
    let secret = consumer
        .admin
        .get_opt(
            &erase::<k8s_openapi::api::core::v1::Secret>(),
            Some(NAMESPACE),
            "provider",
        )
        .await
        .ok()??;
    let bytes = base64::engine::general_purpose::STANDARD
        .decode(secret.data.pointer("/data/kubeconfig")?.as_str()?)
        .ok()?;
    let yaml: Value = serde_saphyr::from_str(std::str::from_utf8(&bytes).ok()?).ok()?;
    yaml.pointer("/users/0/user/token")?.as_str().map(str::to_string)
}

/// The Connection's `status.credentialExpiresAt`.
async fn expires_at(consumer: &Consumer) -> Option<jiff::Timestamp> {
    let conn = consumer
        .admin
        .get_opt(&erase::<kbind_api::Connection>(), None, "provider")
        .await
        .ok()??;
    conn.data.pointer("/status/credentialExpiresAt")?.as_str()?.parse().ok()
}

/// A plain HTTP/1.1 GET of the konnector's `/metrics`: the body of a 200 answer.
async fn scrape(konnector: &Konnector) -> Option<String> {
    let addr = konnector.metrics;
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The value of the series `series` (name and labels) in an exposition.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// How often the konnectors logged `message` (their JSON `message` field).
fn logged(lines: &Lines, message: &str) -> usize {
    lines
        .lock()
        .iter()
        .filter_map(|l| l.split_once("] "))
        .filter_map(|(_, text)| serde_json::from_str::<Value>(text).ok())
        .filter(|json| json["message"] == message)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_issued_token_renews_itself_three_times_syncing_goes_on_and_revoke_still_ends_it() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start_bare("issued_token_renewal", 1, true).await else {
        return;
    };
    let began = std::time::Instant::now();
    let lines = world.lines.clone();
    let consumer = world.consumer();
    // What kbind's issuer grants besides the Export's resources: a TokenRequest on its own
    // ServiceAccount, by name, in the ServiceAccount's namespace.
    for object in grant(
        "kbind-renew-own-token",
        Some(PROVIDER_ACCOUNTS),
        provider_subject(1),
        json!([{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"], "resourceNames": [ACCOUNT]}]),
    ) {
        create(&world.provider, object).await;
    }
    let first = short_lived_token(world.provider_cluster()).await;
    let kubeconfig = inline_kubeconfig(world.provider_cluster(), ACCOUNT, &first);
    for item in bundle(&kubeconfig, "Fail") {
        create(&consumer.admin, item).await;
    }
    let konnector = Konnector::start(
        &consumer.kubeconfig,
        "renewal",
        &["--credential-renew-fraction=0.01", "--heartbeat-interval=5s"],
        lines.clone(),
    )
    .await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("renewed", 0).await;
    world.copy_where("the first copy", "renewed", |_| true).await;

    // Three renewals, each a new token of the same ServiceAccount in the Secret and a later
    // expiry in the status; a change made after each reaches the provider.
    let mut seen = BTreeSet::from([first.clone()]);
    let mut expiry = expires_at(consumer).await.expect("the issued token's expiry");
    let renewing = std::time::Instant::now();
    for round in 1..=3i64 {
        let token = eventually(&format!("renewal {round}"), &lines, async || {
            let token = secret_token(consumer).await?;
            (!seen.contains(&token)).then_some(token)
        })
        .await;
        let sub = token_subject(&token);
        assert_eq!(sub, format!("system:serviceaccount:{PROVIDER_ACCOUNTS}:{ACCOUNT}"));
        seen.insert(token);
        let later = eventually(&format!("the expiry of renewal {round}"), &lines, async || {
            expires_at(consumer).await.filter(|at| *at > expiry)
        })
        .await;
        expiry = later;
        consumer.resize_widget("renewed", round).await;
        world
            .copy_where(&format!("size {round} on the provider"), "renewed", |c| {
                c.data.pointer("/spec/size") == Some(&json!(round))
            })
            .await;
    }
    let renewals = renewing.elapsed();
    assert_eq!(logged(&lines, "engaged provider"), 1, "engaged once:\n{}", dump(&lines));
    assert_eq!(logged(&lines, "disengaged provider"), 0, "{}", dump(&lines));
    let text = scrape(&konnector).await.expect("/metrics");
    let renewed = sample(
        &text,
        "kbind_credential_renewals_total{connection=\"provider\",result=\"renewed\"}",
    )
    .expect("the renewal counter");
    assert!(renewed >= 3.0, "{renewed} renewals counted");
    let gauge = sample(
        &text,
        "kbind_credential_expiry_timestamp_seconds{connection=\"provider\"}",
    )
    .expect("the expiry gauge");
    assert!(gauge >= expiry.as_second() as f64, "{gauge} vs {expiry}");

    // Revoke after renewing: the ServiceAccount goes, and every token with it.
    world
        .provider
        .delete(
            &erase::<ServiceAccount>(),
            Some(PROVIDER_ACCOUNTS),
            ACCOUNT,
            &DeleteParams::default(),
        )
        .await
        .expect("revoked");
    let revoked = std::time::Instant::now();
    eventually("the Connection not Ready after revoke", &lines, async || {
        let conn = consumer
            .admin
            .get_opt(&erase::<kbind_api::Connection>(), None, "provider")
            .await
            .ok()??;
        (has_condition(&conn, "Ready", "False") && has_condition(&conn, "Connected", "False")).then_some(())
    })
    .await;
    let cut_off = revoked.elapsed();
    assert!(consumer.widget("renewed").await.is_some(), "the consumer widget stays");
    assert!(world.copy("renewed").await.is_some(), "the provider copy stays");
    assert!(
        consumer
            .admin
            .get_opt(&erase::<CustomResourceDefinition>(), None, "widgets.example.org")
            .await
            .unwrap()
            .is_some(),
        "the pulled CRD stays"
    );
    eprintln!(
        "issued_token_renewal: {} renewals in {renewals:.1?} (600 s tokens renewed at 1 %), not Ready {cut_off:.1?} \
         after revoke, story {:.1?}",
        seen.len() - 1,
        began.elapsed()
    );
}

/// A TokenRequest token of [`ACCOUNT`] for 600 s, the shortest lifetime kube-apiserver issues.
async fn short_lived_token(cluster: &Cluster) -> String {
    let admin = cluster.client(User::Admin).await.unwrap();
    let accounts: kube::Api<ServiceAccount> = kube::Api::namespaced(admin, PROVIDER_ACCOUNTS);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            audiences: Vec::new(),
            expiration_seconds: Some(600),
            ..Default::default()
        },
        ..Default::default()
    };
    accounts
        .create_token_request(ACCOUNT, &PostParams::default(), &request)
        .await
        .unwrap()
        .status
        .expect("a TokenRequest answers with a status")
        .token
}

/// The `sub` claim of a JWT, read without verifying it.
fn token_subject(token: &str) -> String {
    let payload = token.split('.').nth(1).expect("a JWT");
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload)
        .expect("base64url claims");
    let claims: Value = serde_json::from_slice(&bytes).expect("JSON claims");
    claims["sub"].as_str().unwrap_or_default().to_string()
}
