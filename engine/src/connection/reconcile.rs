//! One reconcile of one Connection: Secret → kubeconfig → one pass of its provider link
//! (`crate::link`: client, identity, heartbeat, discovery, engagement) → status. The link owns
//! every provider fact between reconciles; this module only turns what a pass reports into
//! conditions and Events.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::Connection;
use kbind_api::conditions::ConditionStatus;
use kbind_api::consts::reason;
use kbind_cluster::{ClusterClientExt, Error, to_dynamic};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use parking_lot::Mutex;

use super::announce::Announced;
use super::finalize::{
    bindings_referencing, ensure_cleanup, has_cleanup, is_orphan, release_secret_if_last, remove_cleanup,
};
use super::status::{Observed, Report, desired_status, draining_status, write_status};
use super::{RETRY_INTERVAL, connection_resource, secret_resource};
use crate::context::Context;
use crate::events::Recorder;
use crate::link::{Engage, Input, Links, connected_condition};
use crate::remote::{ProviderKubeconfig, parse_kubeconfig};

/// Why a reconcile failed (consumer-side writes; provider trouble is reported in conditions).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// A read or write on the consumer cluster failed.
    #[error("failed to update the Connection or its Secret on the consumer: {0}")]
    Consumer(#[source] Error),
}

impl From<Error> for ReconcileError {
    fn from(e: Error) -> Self {
        ReconcileError::Consumer(e)
    }
}

/// The Connection controller's reconciler: what the reconciles of all Connections share.
pub struct ConnectionReconciler {
    ctx: Context,
    store: Store<Connection>,
    /// The provider links, one per Connection.
    links: Links,
    local_uid: tokio::sync::OnceCell<String>,
    /// The engine's Secret store: the credential is read from it, not from the API server.
    secrets: Option<super::stores::SharedStore<kbind_cluster::DynamicObject>>,
    /// Serialises Secret release across Connections being deleted at the same time.
    finalize_lock: tokio::sync::Mutex<()>,
    /// Writes the Connection Events.
    recorder: Recorder,
    /// What the Events of each Connection announced last (the cached status may lag behind).
    announced: Mutex<BTreeMap<String, Announced>>,
    /// The last kubeconfig each Connection accepted, with the Secret value it came from: a
    /// heartbeat's reconcile finds the value unchanged and parses no YAML.
    accepted: Mutex<BTreeMap<String, (String, ProviderKubeconfig)>>,
}

impl ConnectionReconciler {
    /// The reconciler over `ctx`, with the reflector's Connection cache and the provider links.
    pub fn new(ctx: Context, store: Store<Connection>, links: Links) -> Self {
        let recorder = Recorder::new(
            ctx.consumer.clone(),
            ctx.clock.clone(),
            kbind_api::consts::EVENT_COMPONENT,
        );
        Self {
            ctx,
            recorder,
            announced: Mutex::new(BTreeMap::new()),
            accepted: Mutex::new(BTreeMap::new()),
            store,
            links,
            local_uid: tokio::sync::OnceCell::new(),
            secrets: None,
            finalize_lock: tokio::sync::Mutex::new(()),
        }
    }

    /// Reads the credential Secrets from `secrets` (a synced store) instead of the API server.
    #[must_use]
    pub fn with_secrets(mut self, secrets: super::stores::SharedStore<kbind_cluster::DynamicObject>) -> Self {
        self.secrets = Some(secrets);
        self
    }

    /// `period` of Connection `name`, jittered.
    pub(crate) fn jitter(&self, name: &str, period: Duration) -> Duration {
        self.ctx.jitter(&format!("connection/{name}"), period)
    }

    /// The cached Connections (for triggers and diagnostics).
    pub fn store(&self) -> &Store<Connection> {
        &self.store
    }

    async fn forget(&self, name: &str) {
        self.links.forget(&self.ctx, name).await;
        self.announced.lock().remove(name);
        self.accepted.lock().remove(name);
    }

    async fn local_uid(&self) -> kbind_cluster::Result<String> {
        self.local_uid
            .get_or_try_init(|| async {
                crate::remote::local_identity(self.ctx.consumer.as_ref())
                    .await
                    .map(|id| id.uid)
            })
            .await
            .cloned()
    }
}

/// Reconciles one Connection.
pub async fn reconcile(conn: Arc<Connection>, shared: Arc<ConnectionReconciler>) -> Result<Action, ReconcileError> {
    let name = conn.name_any();
    let consumer = shared.ctx.consumer.as_ref();
    if conn.metadata.deletion_timestamp.is_some() {
        return finalize(&conn, &shared).await;
    }
    // Checked on the typed object first: the dynamic copy serialises the whole status (every
    // exported API), and this runs on every heartbeat of every Connection.
    if !has_cleanup(&conn.metadata) {
        ensure_cleanup(consumer, &connection_resource(), &to_dynamic(conn.as_ref())?).await?;
    }
    let mut report = Report::pending();
    let requeue = observe(&conn, &shared, &mut report, Engage::WhenReady).await?;
    let now = Time(shared.ctx.clock.now());
    write_status(consumer, &conn, desired_status(&conn, &report, &now)).await?;
    announce(&conn, &shared, Announced::from_report(&report)).await;
    tracing::debug!(connection = %name, connected = ?report.connected, secret = ?report.secret_valid, "reconciled");
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Publishes the Events of the transitions from what was announced last to `next` (best
/// effort: a lost Event is not retried, so a flapping consumer never repeats one).
async fn announce(conn: &Connection, shared: &ConnectionReconciler, next: Announced) {
    let name = conn.name_any();
    let previous = shared.announced.lock().insert(name.clone(), next.clone());
    let previous = previous.unwrap_or_else(|| Announced::from_status(conn));
    let events = previous.transitions(&next, conn);
    if events.is_empty() {
        return;
    }
    let regarding = match to_dynamic(conn) {
        Ok(obj) => obj,
        Err(e) => {
            tracing::debug!(connection = %name, error = %e, "Connection events not recorded");
            return;
        }
    };
    for event in events {
        if let Err(e) = shared
            .recorder
            .publish(
                &connection_resource(),
                &regarding,
                event.kind,
                &event.reason,
                "Connect",
                &event.note,
            )
            .await
        {
            tracing::debug!(connection = %name, reason = %event.reason, error = %e, "Connection event not recorded");
        }
    }
}

/// Fills `report` from one pass of the Connection's link; returns when to look again (`None`:
/// only on a change).
async fn observe(
    conn: &Connection,
    shared: &ConnectionReconciler,
    report: &mut Report,
    engage: Engage,
) -> Result<Option<Duration>, ReconcileError> {
    let kubeconfig = match load_kubeconfig(conn, shared).await? {
        Ok(kubeconfig) => kubeconfig,
        Err(observed) => {
            report.secret_valid = observed;
            // Nothing is run or sent to the provider for a refused or missing kubeconfig.
            let input = Input {
                conn,
                kubeconfig: None,
                local_uid: "",
                engage,
            };
            shared.links.step(&shared.ctx, input).await;
            return Ok(None);
        }
    };
    report.secret_valid = Observed::ok("the Secret holds an accepted kubeconfig with inline credentials");
    report.credential_expires_at = kubeconfig.issued().map(|t| t.expires_at);

    let local_uid = match shared.local_uid().await {
        Ok(uid) => uid,
        Err(_) => {
            report.connected = Observed::not(reason::PENDING, "cannot read this cluster's own identity yet");
            return Ok(Some(shared.jitter(&conn.name_any(), RETRY_INTERVAL)));
        }
    };
    report.local_uid = Some(local_uid.clone());
    let input = Input {
        conn,
        kubeconfig: Some(kubeconfig),
        local_uid: &local_uid,
        engage,
    };
    let link = shared.links.step(&shared.ctx, input).await;
    let (holds, reason, message) = connected_condition(&link.health);
    report.connected = match (holds, &link.renewal_failed) {
        // The renewal failing is no reason to stop: the token works until it expires.
        (true, Some(renewal)) => Observed::ok(format!(
            "{message}; renewing the credential failed: {renewal}; retrying"
        )),
        (true, None) => Observed::ok(message),
        (false, _) => Observed::not(reason, message),
    };
    // The link's token is the newest: the Secret store may not show its own renewal yet.
    report.credential_expires_at = link.credential_expires_at.or(report.credential_expires_at);
    report.renewal_failed = link.renewal_failed.clone();
    report.permission_denied = link.permission_denied.clone();
    report.remote_uid = link.remote_uid.clone();
    if let Some((apis, source)) = link.exported {
        report.schema_in_sync = Observed::ok(format!("{} exported APIs discovered", apis.len()));
        report.exported = Some((apis, source));
    }
    Ok(Some(shared.jitter(&conn.name_any(), link.next)))
}

/// SecretValid=False for a Secret without the referenced key: names the Secret, the key and
/// the keys it has (names only: their values may be credentials).
fn missing_key(secret_ref: &kbind_api::KubeconfigSecretRef, secret: &kbind_cluster::DynamicObject) -> Observed {
    let keys: Vec<&str> = secret
        .data
        .get("data")
        .and_then(serde_json::Value::as_object)
        .map(|data| data.keys().map(String::as_str).collect())
        .unwrap_or_default();
    let present = if keys.is_empty() {
        "it has no keys".to_string()
    } else {
        format!("its keys: {}", keys.join(", "))
    };
    Observed::not(
        reason::SECRET_KEY_MISSING,
        format!(
            "Secret {}/{} has no key {:?} ({present}); add the kubeconfig under that key \
             (spec.kubeconfigSecretRef cannot change); waiting for it",
            secret_ref.namespace, secret_ref.name, secret_ref.key
        ),
    )
}

/// The accepted kubeconfig of the Connection's Secret, or the SecretValid=False observation.
async fn load_kubeconfig(
    conn: &Connection,
    shared: &ConnectionReconciler,
) -> Result<Result<ProviderKubeconfig, Observed>, ReconcileError> {
    let secret_ref = &conn.spec.kubeconfig_secret_ref;
    let allowed = &shared.ctx.config.namespace;
    if &secret_ref.namespace != allowed {
        return Ok(Err(Observed::not(
            reason::SECRET_NAMESPACE_NOT_ALLOWED,
            format!(
                "the kubeconfig Secret must be in the konnector's namespace {allowed:?}, not {:?}",
                secret_ref.namespace
            ),
        )));
    }
    let consumer = shared.ctx.consumer.as_ref();
    let cached = shared.secrets.as_ref().filter(|s| s.is_synced()).map(|s| {
        s.store()
            .get(&super::stores::secret_key(&secret_ref.namespace, &secret_ref.name))
            .map(|secret| (*secret).clone())
    });
    let secret = match cached {
        // The store follows every change of the Secret, and each one triggers a reconcile.
        Some(secret) => secret,
        None => {
            consumer
                .get_opt(&secret_resource(), Some(&secret_ref.namespace), &secret_ref.name)
                .await?
        }
    };
    let Some(secret) = secret else {
        return Ok(Err(Observed::not(
            reason::SECRET_NOT_FOUND,
            format!(
                "Secret {}/{} not found; waiting for it",
                secret_ref.namespace, secret_ref.name
            ),
        )));
    };
    ensure_cleanup(consumer, &secret_resource(), &secret).await?;
    let encoded = secret
        .data
        .pointer(&format!(
            "/data/{}",
            secret_ref.key.replace('~', "~0").replace('/', "~1")
        ))
        .and_then(|v| v.as_str());
    let Some(encoded) = encoded else {
        return Ok(Err(missing_key(secret_ref, &secret)));
    };
    let name = conn.name_any();
    if let Some((_, kubeconfig)) = shared.accepted.lock().get(&name).filter(|(value, _)| value == encoded) {
        return Ok(Ok(kubeconfig.clone()));
    }
    let Ok(bytes) = base64::engine::general_purpose::STANDARD.decode(encoded) else {
        return Ok(Err(Observed::not(
            reason::INVALID_KUBECONFIG,
            "the Secret's kubeconfig value is not valid base64",
        )));
    };
    let kubeconfig = match parse_kubeconfig(&bytes, shared.ctx.config.allow_insecure_providers) {
        Ok(kubeconfig) => kubeconfig,
        Err(refusal) => {
            return Ok(Err(Observed::new(
                ConditionStatus::False,
                refusal.reason(),
                refusal.message().to_string(),
            )));
        }
    };
    shared
        .accepted
        .lock()
        .insert(name, (encoded.to_string(), kubeconfig.clone()));
    Ok(Ok(kubeconfig))
}

/// A deleted Connection: wait for its bindings unless Orphan, release the Secret when it is
/// the last user, then drop the finalizer. Nothing on the provider is deleted. While bindings
/// drain, the provider is still observed (identity, heartbeat), so `Connected` stays true to
/// what the drains meet (a revoked credential is `Unauthorized`, not a stale `True`), and
/// `Ready` says `DeletionBlocked` with the blocked binding's cause.
async fn finalize(conn: &Connection, shared: &ConnectionReconciler) -> Result<Action, ReconcileError> {
    let name = conn.name_any();
    let consumer = shared.ctx.consumer.as_ref();
    if !has_cleanup(&conn.metadata) {
        shared.forget(&name).await;
        return Ok(Action::await_change());
    }
    if !is_orphan(conn) {
        let bindings = bindings_referencing(consumer, &name).await?;
        if !bindings.is_empty() {
            let mut report = Report::pending();
            // The bindings need the provider to delete their copies: it stays engaged while
            // connected, also while a refused verb blocks one of them.
            let requeue = observe(conn, shared, &mut report, Engage::WhenConnected).await?;
            let now = Time(shared.ctx.clock.now());
            write_status(consumer, conn, draining_status(conn, &report, &bindings, &now)).await?;
            announce(conn, shared, Announced::from_report(&report)).await;
            // Each binding's change or removal triggers a reconcile; this is only the backstop.
            let backstop = shared.jitter(&conn.name_any(), RETRY_INTERVAL);
            return Ok(Action::requeue(requeue.unwrap_or(backstop).min(backstop)));
        }
    }
    shared.forget(&name).await;
    let _serialised = shared.finalize_lock.lock().await;
    release_secret_if_last(consumer, conn).await?;
    remove_cleanup(consumer, &connection_resource(), None, &name).await?;
    Ok(Action::await_change())
}
