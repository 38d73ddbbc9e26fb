//! Renewing an issued token before it expires (contract §5): a TokenRequest for the token's
//! own ServiceAccount, through the link's client, written back into the same Secret key with
//! a resourceVersion precondition. Nothing else of the kubeconfig changes, and a kubeconfig
//! that is not an issued token is never touched. The gateway and the issuer play no part:
//! the Grant's Role lets the ServiceAccount mint its own tokens, and deleting the
//! ServiceAccount (revoking the Grant) ends them all.
//!
//! When: at a fraction of the token's lifetime (`EngineConfig::credential_renew_fraction`,
//! two thirds by default), moved earlier by up to [`RENEW_JITTER`] of that with a share keyed
//! by Connection and token, so a herd of konnectors given tokens at one instant does not renew
//! at one instant, and a seeded world replays. A failed attempt is retried on a jittered
//! backoff while the current token is used until it expires.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use jiff::Timestamp;
use kbind_api::KubeconfigSecretRef;
use kbind_api::consts::field_manager;
use kbind_cluster::backoff::Backoff;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Error, PostParams};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

use crate::context::Context;
use crate::remote::{Credentials, IssuedToken, ProviderKubeconfig, parse_kubeconfig, with_token};

/// How much earlier than its fraction of the lifetime a token may be renewed: up to this share
/// of that time (a day-long token due after 16 h is renewed between 13.6 h and 16 h).
pub const RENEW_JITTER: f64 = 0.15;

/// The shortest lifetime a TokenRequest may ask for (kube-apiserver refuses less).
const MIN_LIFETIME: Duration = Duration::from_secs(600);

/// First retry after a failed renewal.
const RETRY_INITIAL: Duration = Duration::from_secs(10);

/// Longest wait between retries of a failing renewal (before jitter).
const RETRY_MAX: Duration = Duration::from_secs(300);

/// How often a write that met a newer resourceVersion of the Secret is tried again.
const WRITE_ATTEMPTS: usize = 5;

/// When the token the link runs on is renewed next, and how the last attempt went.
#[derive(Debug)]
pub(crate) struct Renewal {
    /// The token this schedule is for.
    pub token: IssuedToken,
    /// When the next attempt is due.
    pub due: Instant,
    backoff: Option<Backoff>,
    /// What the last failed attempt met (verb, resource and cause); `None` after a success.
    pub failure: Option<String>,
}

impl Renewal {
    /// The schedule of `token`, the credential of Connection `name`.
    pub fn new(ctx: &Context, name: &str, token: IssuedToken) -> Self {
        let share = ctx
            .randomness
            .unit_for(&format!("renew/{name}/{}", token.expires_at.as_second()));
        let at = renew_at(&token, ctx.config.credential_renew_fraction, share);
        Self {
            due: instant_of(ctx, at),
            token,
            backoff: None,
            failure: None,
        }
    }

    /// An attempt failed with `message`: the next comes after a jittered backoff.
    pub fn failed(&mut self, ctx: &Context, name: &str, message: String, error: &Error) {
        let backoff = self
            .backoff
            .get_or_insert_with(|| ctx.backoff(&format!("renew/{name}"), RETRY_INITIAL, RETRY_MAX));
        self.due = Instant::now() + backoff.after(error);
        self.failure = Some(message);
    }
}

/// When `token` is renewed: `fraction` of its lifetime after it was issued, earlier by
/// `share` (in `[0, 1)`) of [`RENEW_JITTER`] of that.
pub(crate) fn renew_at(token: &IssuedToken, fraction: f64, share: f64) -> Timestamp {
    let after = token.lifetime().as_secs_f64() * fraction * (1.0 - RENEW_JITTER * share.clamp(0.0, 1.0));
    let after = jiff::SignedDuration::try_from_secs_f64(after).unwrap_or_default();
    token.issued_at.checked_add(after).unwrap_or(token.expires_at)
}

/// The tokio instant of wall-clock time `at` (now when it has passed).
fn instant_of(ctx: &Context, at: Timestamp) -> Instant {
    let wait = at.duration_since(ctx.clock.now());
    Instant::now() + Duration::try_from(wait).unwrap_or(Duration::ZERO)
}

/// Why a renewal did not take.
#[derive(Debug, thiserror::Error)]
pub(crate) enum RenewError {
    /// The TokenRequest failed.
    #[error("create serviceaccounts/token for ServiceAccount {account}: {}", crate::cause::http_cause(.source))]
    Requested {
        /// `namespace/name`.
        account: String,
        /// The provider's answer.
        #[source]
        source: Error,
    },
    /// The answer held no token of that ServiceAccount.
    #[error(
        "create serviceaccounts/token for ServiceAccount {account}: the provider answered without a token of that \
         ServiceAccount"
    )]
    NotItsToken {
        /// `namespace/name`.
        account: String,
    },
    /// Writing the Secret on the consumer failed.
    #[error("update secrets {secret} on the consumer: {}", crate::cause::http_cause(.source))]
    Written {
        /// `namespace/name`.
        secret: String,
        /// The consumer's answer.
        #[source]
        source: Error,
    },
    /// The Secret no longer holds the kubeconfig that was renewed: someone replaced it, and
    /// their kubeconfig wins.
    #[error("the Secret {secret} was replaced meanwhile; the renewed token is not written over it")]
    Replaced {
        /// `namespace/name`.
        secret: String,
    },
}

impl RenewError {
    /// The error that stands for this one in a backoff (a 429's `Retry-After` counts).
    pub fn cause(&self) -> Error {
        match self {
            RenewError::Requested { source, .. } | RenewError::Written { source, .. } => source.clone(),
            RenewError::NotItsToken { .. } | RenewError::Replaced { .. } => Error::Decode(String::new()),
        }
    }
}

fn service_accounts() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&())
}

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

/// A new token for `token`'s own ServiceAccount, with the lifetime and audiences it had.
pub(crate) async fn request(provider: &dyn ClusterClient, token: &IssuedToken) -> Result<String, RenewError> {
    let account = format!("{}/{}", token.namespace, token.name);
    let body = json!({
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "audiences": token.audiences,
            "expirationSeconds": token.lifetime().max(MIN_LIFETIME).as_secs(),
        },
    });
    let answer = provider
        .create_subresource(&service_accounts(), Some(&token.namespace), &token.name, "token", &body)
        .await
        .map_err(|source| RenewError::Requested {
            account: account.clone(),
            source,
        })?;
    let minted = answer
        .pointer("/status/token")
        .and_then(serde_json::Value::as_str)
        .filter(|t| IssuedToken::parse(t).is_some_and(|new| new.same_account(token)))
        .ok_or(RenewError::NotItsToken { account })?;
    Ok(minted.to_string())
}

/// Writes `token` into the Secret of `secret_ref` in place of the token of `current`, read
/// fresh and written with its resourceVersion; a newer version is read again and the write
/// tried again. A Secret that holds anything but `current` by then is left as it is
/// ([`RenewError::Replaced`]). Returns the kubeconfig the Secret holds now.
pub(crate) async fn write_back(
    ctx: &Context,
    secret_ref: &KubeconfigSecretRef,
    current: &ProviderKubeconfig,
    token: &str,
) -> Result<ProviderKubeconfig, RenewError> {
    let secret_name = format!("{}/{}", secret_ref.namespace, secret_ref.name);
    let written = |source| RenewError::Written {
        secret: secret_name.clone(),
        source,
    };
    let replaced = || RenewError::Replaced {
        secret: secret_name.clone(),
    };
    let pointer = format!("/data/{}", secret_ref.key.replace('~', "~0").replace('/', "~1"));
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut attempt = 0;
    loop {
        attempt += 1;
        let Some(mut secret) = ctx
            .consumer
            .get_opt(&secrets(), Some(&secret_ref.namespace), &secret_ref.name)
            .await
            .map_err(written)?
        else {
            return Err(replaced());
        };
        let bytes = secret
            .data
            .pointer(&pointer)
            .and_then(serde_json::Value::as_str)
            .and_then(|encoded| b64.decode(encoded).ok())
            .ok_or_else(replaced)?;
        let held = parse_kubeconfig(&bytes, ctx.config.allow_insecure_providers).map_err(|_| replaced())?;
        if held != *current {
            return Err(replaced());
        }
        let rewritten = with_token(&bytes, token).map_err(|_| replaced())?;
        let renewed = parse_kubeconfig(&rewritten, ctx.config.allow_insecure_providers).map_err(|_| replaced())?;
        if !current.renews(&renewed) || renewed.credentials != Credentials::Token(token.to_string()) {
            return Err(replaced());
        }
        if let Some(slot) = secret.data.pointer_mut(&pointer) {
            *slot = json!(b64.encode(&rewritten));
        }
        let params = PostParams {
            field_manager: Some(field_manager::KONNECTOR.to_string()),
            ..PostParams::default()
        };
        // The resourceVersion read above travels with the object: a Secret changed since is a
        // 409, never overwritten.
        match ctx
            .consumer
            .replace(
                &secrets(),
                Some(&secret_ref.namespace),
                &secret_ref.name,
                &secret,
                &params,
            )
            .await
        {
            Ok(_) => return Ok(renewed),
            Err(e) if e.is_conflict() && attempt < WRITE_ATTEMPTS => continue,
            Err(e) => return Err(written(e)),
        }
    }
}

/// Renewals per Connection since the konnector started, for its metrics.
#[derive(Debug, Default)]
pub(crate) struct Counts(Mutex<BTreeMap<String, (u64, u64)>>);

impl Counts {
    /// One renewal of Connection `name` went through (`true`) or failed.
    pub fn add(&self, name: &str, renewed: bool) {
        let mut counts = self.0.lock();
        let entry = counts.entry(name.to_string()).or_default();
        if renewed {
            entry.0 += 1;
        } else {
            entry.1 += 1;
        }
    }

    /// (renewed, failed) of every Connection that tried.
    pub fn all(&self) -> BTreeMap<String, (u64, u64)> {
        self.0.lock().clone()
    }

    /// Forgets Connection `name` (it is gone).
    pub fn forget(&self, name: &str) {
        self.0.lock().remove(name);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use async_trait::async_trait;
    use fakeapi::{FakeCluster, Interloper};
    use kbind_cluster::{BearerToken, SharedClock, TokioClock};

    use crate::context::EngineConfig;
    use crate::remote::{Connector, unsigned_token};

    struct NoProviders;

    #[async_trait]
    impl Connector for NoProviders {
        async fn connect(&self, _: &ProviderKubeconfig, _: &BearerToken) -> Result<Arc<dyn ClusterClient>, Error> {
            Err(Error::Transport("no providers here".into()))
        }
    }

    const CA: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";

    fn kubeconfig_text(token: &str) -> String {
        let ca = base64::engine::general_purpose::STANDARD.encode(CA);
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: c\nclusters:\n- name: c\n  cluster:\n    server: https://acme.example\n    certificate-authority-data: {ca}\nusers:\n- name: u\n  user:\n    token: {token}\ncontexts:\n- name: c\n  context: {{cluster: c, user: u}}\n"
        )
    }

    fn secret(token: &str, label: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "acme", "namespace": "kbind", "labels": {"who": label}},
            "data": {"kubeconfig": base64::engine::general_purpose::STANDARD.encode(kubeconfig_text(token))},
        })
    }

    /// A consumer holding Secret `kbind/acme` with `token`, and a context over it.
    async fn consumer(token: &str) -> (FakeCluster, Context) {
        let clock: SharedClock = Arc::new(TokioClock::fixed());
        let cluster = FakeCluster::builder("consumer").seed(3).clock(clock.clone()).build();
        let admin = cluster.admin_client();
        let ns =
            serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kbind"}}))
                .unwrap();
        admin
            .create(
                &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                None,
                &ns,
                &PostParams::default(),
            )
            .await
            .unwrap();
        let obj = serde_json::from_value(secret(token, "kbind")).unwrap();
        admin
            .create(&secrets(), Some("kbind"), &obj, &PostParams::default())
            .await
            .unwrap();
        let ctx = Context {
            consumer: Arc::new(admin),
            connector: Arc::new(NoProviders),
            clock,
            randomness: kbind_cluster::backoff::seeded(3),
            config: EngineConfig::default(),
        };
        (cluster, ctx)
    }

    fn secret_ref() -> KubeconfigSecretRef {
        serde_json::from_value(json!({"namespace": "kbind", "name": "acme", "key": "kubeconfig"})).unwrap()
    }

    fn accepted(token: &str) -> ProviderKubeconfig {
        parse_kubeconfig(kubeconfig_text(token).as_bytes(), false).unwrap()
    }

    async fn stored(cluster: &FakeCluster) -> (ProviderKubeconfig, kbind_cluster::DynamicObject) {
        let obj = cluster
            .admin_client()
            .get(&secrets(), Some("kbind"), "acme")
            .await
            .unwrap();
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(obj.data["data"]["kubeconfig"].as_str().unwrap())
            .unwrap();
        (parse_kubeconfig(&bytes, false).unwrap(), obj)
    }

    fn interloper(token: &str, label: &str) -> Interloper {
        Interloper {
            verb: Some("update".into()),
            resource: "secrets".into(),
            namespace: Some("kbind".into()),
            name: "acme".into(),
            object: secret(token, label),
        }
    }

    const SA: &str = "system:serviceaccount:kbind-grants:g";

    /// Someone else's write between the read and the write (a label, the kubeconfig unchanged):
    /// the write meets a newer resourceVersion (409), reads again and lands on that version,
    /// keeping the other write.
    #[tokio::test(start_paused = true)]
    async fn a_write_that_meets_a_newer_secret_reads_it_again_and_keeps_what_it_holds() {
        let old = unsigned_token(SA, 0, 86_400);
        let new = unsigned_token(SA, 57_600, 144_000);
        let (cluster, ctx) = consumer(&old).await;
        cluster.interlope(interloper(&old, "someone-else"));
        let written = write_back(&ctx, &secret_ref(), &accepted(&old), &new)
            .await
            .expect("written on the second try");
        let (held, obj) = stored(&cluster).await;
        assert_eq!(held, written);
        assert_eq!(held.credentials, Credentials::Token(new));
        assert_eq!(held.server, accepted(&old).server);
        assert_eq!(obj.metadata.labels.unwrap()["who"], "someone-else");
        let updates = cluster
            .request_log()
            .into_iter()
            .filter(|r| r.verb == "update" && r.resource.starts_with("secrets"))
            .count();
        assert_eq!(updates, 2, "a write refused with 409, then the one that landed");
    }

    /// A Secret replaced meanwhile (a new bind or redeem wrote another token): the renewed
    /// token is not written over it.
    #[tokio::test(start_paused = true)]
    async fn a_secret_replaced_meanwhile_is_never_written_over() {
        let old = unsigned_token(SA, 0, 86_400);
        let new = unsigned_token(SA, 57_600, 144_000);
        let theirs = unsigned_token(SA, 60_000, 146_400);
        let (cluster, ctx) = consumer(&old).await;
        cluster.interlope(interloper(&theirs, "redeemed"));
        let err = write_back(&ctx, &secret_ref(), &accepted(&old), &new)
            .await
            .expect_err("never written over");
        assert!(matches!(err, RenewError::Replaced { .. }), "{err:?}");
        let (held, _) = stored(&cluster).await;
        assert_eq!(held.credentials, Credentials::Token(theirs));
        assert!(!err.to_string().contains(&new) && !err.to_string().contains(&old));
    }

    fn token(iat: i64, exp: i64) -> IssuedToken {
        IssuedToken {
            namespace: "kbind-grants".into(),
            name: "g".into(),
            issued_at: Timestamp::from_second(iat).unwrap(),
            expires_at: Timestamp::from_second(exp).unwrap(),
            audiences: vec![],
        }
    }

    #[test]
    fn a_token_is_renewed_at_its_fraction_of_life_moved_earlier_by_its_share_of_jitter() {
        let day = token(0, 86_400);
        assert_eq!(renew_at(&day, 2.0 / 3.0, 0.0).as_second(), 57_600);
        let earliest = renew_at(&day, 2.0 / 3.0, 1.0).as_second();
        assert_eq!(earliest, (57_600.0 * (1.0 - RENEW_JITTER)) as i64);
        let short = token(1_000, 1_600);
        assert_eq!(renew_at(&short, 0.01, 0.0).as_second(), 1_006);
    }
}
