//! One reconcile of one Connection: Secret → kubeconfig → provider client → identity check →
//! discovery and heartbeat when due → status. Per-Connection provider state lives in
//! [`Shared`] between reconciles (kube-runtime runs at most one reconcile per object at once).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use base64::Engine as _;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::Connection;
use kbind_api::conditions::ConditionStatus;
use kbind_api::consts::reason;
use kbind_cluster::identity::ClusterIdentity;
use kbind_cluster::{ClusterClient, ClusterClientExt, Error, IdentitySource, to_dynamic};
use kube::ResourceExt;
use kube::runtime::controller::Action;
use kube::runtime::reflector::Store;
use tokio::time::Instant;

use super::announce::Announced;
use super::discovery::{Discovered, discover};
use super::finalize::{
    bindings_referencing, ensure_cleanup, has_cleanup, is_orphan, release_secret_if_last, remove_cleanup,
};
use super::status::{Observed, Report, desired_status, draining_status, write_status};
use super::{RETRY_INTERVAL, connection_resource, heartbeat, secret_resource};
use crate::context::Context;
use crate::events::Recorder;
use crate::provider::ProviderRegistry;
use crate::remote::{ProviderKubeconfig, parse_kubeconfig, provider_identity};

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

/// The live link to one provider: a client built from one accepted kubeconfig.
struct Link {
    kubeconfig: ProviderKubeconfig,
    client: Arc<dyn ClusterClient>,
    last_renew: Option<Instant>,
    /// The Lease as this link last wrote it (its next renewal is one update).
    lease: Option<heartbeat::Renewed>,
    /// The identity read through this link, standing while the Lease renewals are unbroken.
    identity: Option<ClusterIdentity>,
    last_discovery: Option<Instant>,
    discovered: Option<Discovered>,
    discovery_denied: Option<String>,
    lease_denied: Option<String>,
}

/// What the reconciles of all Connections share.
pub struct Shared {
    ctx: Context,
    store: Store<Connection>,
    /// Holds the one provider client per Connection, shared with the engager.
    registry: ProviderRegistry,
    links: Mutex<BTreeMap<String, Link>>,
    /// The heartbeat Leases, one per consumer–provider pair, shared by its Connections.
    pairs: heartbeat::Pairs,
    /// UIDs pinned by this process, so a reconcile running on a stale cached Connection
    /// (pin written, watch event not yet seen) still compares against the pin.
    pinned: Mutex<BTreeMap<String, (String, String)>>,
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
    /// heartbeat's reconcile finds the value unchanged and parses no YAML (perf, issue 25).
    accepted: Mutex<BTreeMap<String, (String, ProviderKubeconfig)>>,
}

impl Shared {
    /// Shared state over `ctx`, with the reflector's Connection cache and the registry whose
    /// provider clients it shares with the engager.
    pub fn new(ctx: Context, store: Store<Connection>, registry: ProviderRegistry) -> Self {
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
            registry,
            links: Mutex::new(BTreeMap::new()),
            pairs: heartbeat::Pairs::default(),
            pinned: Mutex::new(BTreeMap::new()),
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

    /// The cached Connections (for triggers and diagnostics).
    pub fn store(&self) -> &Store<Connection> {
        &self.store
    }

    fn take_link(&self, name: &str) -> Option<Link> {
        self.links.lock().unwrap_or_else(|p| p.into_inner()).remove(name)
    }

    /// Drops the link of `name` and, if no one else replaced it, its shared client.
    fn drop_link(&self, name: &str) {
        if let Some(link) = self.take_link(name) {
            self.registry.drop_client(name, &link.client);
        }
    }

    fn put_link(&self, name: &str, link: Link) {
        self.links
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string(), link);
    }

    fn pinned(&self, name: &str) -> Option<(String, String)> {
        self.pinned.lock().unwrap_or_else(|p| p.into_inner()).get(name).cloned()
    }

    fn pin(&self, name: &str, remote: &str, local: &str) {
        self.pinned
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(name.to_string())
            .or_insert_with(|| (remote.to_string(), local.to_string()));
    }

    fn forget(&self, name: &str) {
        self.take_link(name);
        self.registry.forget_client(name);
        self.announced.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.accepted.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
        self.pinned.lock().unwrap_or_else(|p| p.into_inner()).remove(name);
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

/// How a provider failure is reported.
enum Failure {
    /// A verb was refused: `PermissionDenied=True`, reason `Forbidden`.
    Denied(String),
    /// The credentials themselves were refused (401): `Connected=False`, reason `Unauthorized`.
    Unauthorized(String),
    /// Transport, timeout or server trouble: `Connected=False`, reason `ProviderUnreachable`.
    Unreachable(String),
}

/// Classifies a provider error; messages name verb, resource and HTTP status, never credentials
/// or the server's text.
fn classify(e: &Error) -> Failure {
    match e {
        Error::Forbidden { .. } => Failure::Denied(format!(
            "the provider refuses a request of the credentials ({})",
            crate::cause::http_cause(e)
        )),
        Error::Unauthorized { .. } => Failure::Unauthorized(format!(
            "the provider refuses the credentials ({}); they were revoked or have expired. Nothing is deleted \
             because of it: bind again for new credentials, or unbind with annotation {}: Orphan on the bindings \
             and the Connection (`kbind unbind --orphan`) to let go without touching the provider",
            crate::cause::http_cause(e),
            kbind_api::consts::annotation::DELETION_POLICY
        )),
        Error::Transport(_) => {
            Failure::Unreachable("the provider cannot be reached (transport error); retrying".into())
        }
        Error::Timeout(_) => Failure::Unreachable("a request to the provider timed out; retrying".into()),
        Error::NotServed { .. } => Failure::Unreachable(
            "the provider answered 404 without a Kubernetes Status (a proxy or ingress in front of the API server?); \
             retrying"
                .into(),
        ),
        other => Failure::Unreachable(format!(
            "the provider answered with an error ({}); retrying",
            crate::cause::http_cause(other)
        )),
    }
}

/// Reconciles one Connection.
pub async fn reconcile(conn: Arc<Connection>, shared: Arc<Shared>) -> Result<Action, ReconcileError> {
    let name = conn.name_any();
    let consumer = shared.ctx.consumer.as_ref();
    if conn.metadata.deletion_timestamp.is_some() {
        return finalize(&conn, &shared).await;
    }
    // Checked on the typed object first: the dynamic copy serialises the whole status (every
    // exported API), and this runs on every heartbeat of every Connection (perf, issue 25).
    if !has_cleanup(&conn.metadata) {
        ensure_cleanup(consumer, &connection_resource(), &to_dynamic(conn.as_ref())?).await?;
    }
    let mut report = Report::pending();
    let requeue = observe(&conn, &shared, &mut report).await?;
    let now = Time(shared.ctx.clock.now());
    write_status(consumer, &conn, desired_status(&conn, &report, &now)).await?;
    announce(&conn, &shared, Announced::from_report(&report)).await;
    tracing::debug!(connection = %name, connected = ?report.connected, secret = ?report.secret_valid, "reconciled");
    Ok(requeue.map_or_else(Action::await_change, Action::requeue))
}

/// Publishes the Events of the transitions from what was announced last to `next` (best
/// effort: a lost Event is not retried, so a flapping consumer never repeats one).
async fn announce(conn: &Connection, shared: &Shared, next: Announced) {
    let name = conn.name_any();
    let previous = shared
        .announced
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .insert(name.clone(), next.clone());
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

/// Fills `report`; returns when to look again (`None`: only on a change).
async fn observe(conn: &Connection, shared: &Shared, report: &mut Report) -> Result<Option<Duration>, ReconcileError> {
    let name = conn.name_any();
    let kubeconfig = match load_kubeconfig(conn, shared).await? {
        Ok(kubeconfig) => kubeconfig,
        Err(observed) => {
            report.secret_valid = observed;
            // Nothing is run or sent to the provider for a refused or missing kubeconfig.
            shared.drop_link(&name);
            return Ok(None);
        }
    };
    report.secret_valid = Observed::ok("the Secret holds an accepted kubeconfig with inline credentials");

    let local_uid = match shared.local_uid().await {
        Ok(uid) => uid,
        Err(_) => {
            report.connected = Observed::not(reason::PENDING, "cannot read this cluster's own identity yet");
            return Ok(Some(RETRY_INTERVAL));
        }
    };
    report.local_uid = Some(local_uid.clone());

    let mut link = match shared.take_link(&name) {
        Some(link) if link.kubeconfig == kubeconfig && shared.registry.holds_client(&name, &link.client) => link,
        _ => match shared
            .registry
            .client(&name, &kubeconfig, || shared.ctx.connector.connect(&kubeconfig))
            .await
        {
            Ok(client) => Link {
                kubeconfig,
                client,
                last_renew: None,
                lease: None,
                identity: None,
                last_discovery: None,
                discovered: None,
                discovery_denied: None,
                lease_denied: None,
            },
            Err(e) => {
                report_failure(report, &e);
                return Ok(Some(RETRY_INTERVAL));
            }
        },
    };
    let requeue = drive(conn, shared, &mut link, &local_uid, report).await;
    if requeue.1 {
        shared.put_link(&name, link);
    } else {
        shared.registry.drop_client(&name, &link.client);
    }
    Ok(Some(requeue.0))
}

/// Verifies identity, then runs discovery and the heartbeat when due. Returns when to look
/// again and whether the link is still good (a failed link is dropped: recovery starts fresh).
async fn drive(
    conn: &Connection,
    shared: &Shared,
    link: &mut Link,
    local_uid: &str,
    report: &mut Report,
) -> (Duration, bool) {
    let name = conn.name_any();
    let config = &shared.ctx.config;
    let status = conn.status.clone().unwrap_or_default();
    let pinned = shared.pinned(&name);
    let pinned_remote = status.remote_cluster_uid.or_else(|| pinned.clone().map(|p| p.0));
    let pinned_local = status.local_cluster_uid.or_else(|| pinned.map(|p| p.1));
    let lease_uid = pinned_local.clone().unwrap_or_else(|| local_uid.to_string());
    let now = Instant::now();
    let heartbeat_due = is_due(link.last_renew, config.heartbeat_interval, now);
    let verified = link
        .identity
        .as_ref()
        .map(|identity| (identity.uid.clone(), lease_uid.clone()));
    if let Some(pair) = verified.filter(|_| heartbeat_due) {
        match beat(shared, link, &pair, now).await {
            Ok(true) => link.last_renew = Some(now),
            Ok(false) => link.identity = None,
            Err(e) => match classify(&e) {
                Failure::Denied(message) => {
                    // No Lease to prove continuity with: the identity is read every time.
                    link.lease_denied = Some(message);
                    link.lease = None;
                    link.identity = None;
                    link.last_renew = Some(now);
                }
                Failure::Unauthorized(_) | Failure::Unreachable(_) => {
                    shared.registry.verified(&name, &link.client, None);
                    report_failure(report, &e);
                    return (RETRY_INTERVAL, false);
                }
            },
        }
    }
    let identity = match link.identity.clone() {
        Some(identity) => identity,
        None => match provider_identity(link.client.as_ref()).await {
            Ok(identity) => identity,
            Err(e) => {
                shared.registry.verified(&name, &link.client, None);
                report_failure(report, &e);
                return (RETRY_INTERVAL, false);
            }
        },
    };
    let remote_changed = pinned_remote.as_deref().is_some_and(|uid| uid != identity.uid);
    let local_changed = pinned_local.as_deref().is_some_and(|uid| uid != local_uid);
    if remote_changed || local_changed {
        shared.registry.verified(&name, &link.client, None);
        let which = if remote_changed { "provider" } else { "consumer" };
        report.connected = Observed::not(
            reason::CLUSTER_IDENTITY_CHANGED,
            format!(
                "the {which} cluster's identity differs from the pinned one; nothing is written to the provider. \
                 To accept a rebuilt provider, delete the Connection with annotation core.kbind.io/deletion-policy=Orphan and apply it again"
            ),
        );
        if crate::planted::planted(crate::planted::Plant::RenewLeaseWhileDisconnected) {
            let _ = heartbeat::renew(
                link.client.as_ref(),
                &config.lease_namespace,
                local_uid,
                shared.ctx.clock.now(),
            )
            .await;
        }
        return (config.rediscovery_interval.min(RETRY_INTERVAL), false);
    }
    shared.pin(&name, &identity.uid, local_uid);
    // The engager engages through this client without reading the identity again.
    shared
        .registry
        .verified(&name, &link.client, Some(identity.uid.clone()));
    report.remote_uid = Some(identity.uid.clone());
    link.identity = Some(identity.clone());

    if is_due(link.last_discovery, config.rediscovery_interval, now) {
        let kcp_like = identity.source == IdentitySource::LogicalCluster;
        match discover(link.client.as_ref(), kcp_like, conn.spec.schema.source).await {
            Ok(discovered) => {
                link.discovered = Some(discovered);
                link.discovery_denied = None;
            }
            Err(e) => match classify(&e) {
                Failure::Denied(message) => link.discovery_denied = Some(message),
                Failure::Unauthorized(_) | Failure::Unreachable(_) => {
                    report_failure(report, &e);
                    return (RETRY_INTERVAL, false);
                }
            },
        }
        link.last_discovery = Some(now);
    }
    if is_due(link.last_renew, config.heartbeat_interval, now) {
        match heartbeat::renew(
            link.client.as_ref(),
            &config.lease_namespace,
            &lease_uid,
            shared.ctx.clock.now(),
        )
        .await
        {
            Ok(lease) => {
                shared
                    .pairs
                    .renewed(&(identity.uid.clone(), lease_uid.clone()), &lease, now);
                link.lease = Some(lease);
                link.lease_denied = None;
            }
            Err(e) => match classify(&e) {
                Failure::Denied(message) => {
                    link.lease_denied = Some(message);
                    link.lease = None;
                    link.identity = None;
                }
                Failure::Unauthorized(_) | Failure::Unreachable(_) => {
                    report_failure(report, &e);
                    return (RETRY_INTERVAL, false);
                }
            },
        }
        link.last_renew = Some(now);
    }

    report.connected = Observed::ok("connected to the provider with the pinned identity");
    report.permission_denied = link.discovery_denied.clone().or_else(|| link.lease_denied.clone());
    if let Some(discovered) = &link.discovered {
        report.exported = Some((discovered.apis.clone(), discovered.source));
        report.schema_in_sync = Observed::ok(format!("{} exported APIs discovered", discovered.apis.len()));
    }
    let next = [
        due_in(link.last_renew, config.heartbeat_interval, now),
        due_in(link.last_discovery, config.rediscovery_interval, now),
    ]
    .into_iter()
    .min()
    .unwrap_or(RETRY_INTERVAL);
    (next.clamp(Duration::from_millis(100), config.heartbeat_interval), true)
}

/// The heartbeat of a verified link: renews the pair's Lease in one update when this link's
/// turn has come, else reads it back. `Ok(false)`: this link's continuity is not proven (no
/// Lease to go from, or the provider no longer holds it as the pair wrote it), and the identity
/// is read before anything else.
async fn beat(shared: &Shared, link: &mut Link, pair: &heartbeat::PairKey, now: Instant) -> Result<bool, Error> {
    let namespace = &shared.ctx.config.lease_namespace;
    let lease_uid = &pair.1;
    let proven = match shared.pairs.turn(pair, now, shared.ctx.config.heartbeat_interval) {
        heartbeat::Turn::Check(written) => {
            heartbeat::check_unbroken(link.client.as_ref(), namespace, lease_uid, &written).await?
        }
        heartbeat::Turn::Renew(latest) => {
            let Some(last) = latest.map(|l| *l).or_else(|| link.lease.clone()) else {
                return Ok(false);
            };
            let renewed = heartbeat::renew_unbroken(
                link.client.as_ref(),
                namespace,
                lease_uid,
                shared.ctx.clock.now(),
                &last,
            )
            .await?;
            match &renewed {
                Some(lease) => shared.pairs.renewed(pair, lease, now),
                None => shared.pairs.broken(pair),
            }
            renewed
        }
    };
    let unbroken = proven.is_some();
    link.lease = proven;
    if unbroken {
        link.lease_denied = None;
    }
    Ok(unbroken)
}

fn is_due(last: Option<Instant>, every: Duration, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= every)
}

/// How long until `every` has passed since `last`; an interval too long to add (a resync of
/// "forever") is never due.
fn due_in(last: Option<Instant>, every: Duration, now: Instant) -> Duration {
    last.map_or(Duration::ZERO, |at| match at.checked_add(every) {
        Some(due) => due.saturating_duration_since(now),
        None => Duration::MAX,
    })
}

/// Records a provider failure in `report`.
fn report_failure(report: &mut Report, e: &Error) {
    match classify(e) {
        Failure::Denied(message) => {
            report.connected = Observed::not(
                reason::FORBIDDEN,
                format!("cannot verify the provider's identity: {message}"),
            );
            report.permission_denied = Some(message);
        }
        Failure::Unauthorized(message) => {
            report.connected = Observed::not(reason::UNAUTHORIZED, message);
        }
        Failure::Unreachable(message) => {
            report.connected = Observed::not(reason::PROVIDER_UNREACHABLE, message);
        }
    }
}

/// The accepted kubeconfig of the Connection's Secret, or the SecretValid=False observation.
async fn load_kubeconfig(
    conn: &Connection,
    shared: &Shared,
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
        return Ok(Err(Observed::not(
            reason::SECRET_NOT_FOUND,
            format!(
                "Secret {}/{} has no key {:?}; waiting for it",
                secret_ref.namespace, secret_ref.name, secret_ref.key
            ),
        )));
    };
    let name = conn.name_any();
    if let Some((_, kubeconfig)) = shared
        .accepted
        .lock()
        .unwrap_or_else(|p| p.into_inner())
        .get(&name)
        .filter(|(value, _)| value == encoded)
    {
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
        .unwrap_or_else(|p| p.into_inner())
        .insert(name, (encoded.to_string(), kubeconfig.clone()));
    Ok(Ok(kubeconfig))
}

/// A deleted Connection: wait for its bindings unless Orphan, release the Secret when it is
/// the last user, then drop the finalizer. Nothing on the provider is deleted. While bindings
/// drain, the provider is still observed (identity, heartbeat), so `Connected` stays true to
/// what the drains meet (a revoked credential is `Unauthorized`, not a stale `True`), and
/// `Ready` says `DeletionBlocked` with the blocked binding's cause.
async fn finalize(conn: &Connection, shared: &Shared) -> Result<Action, ReconcileError> {
    let name = conn.name_any();
    let consumer = shared.ctx.consumer.as_ref();
    if !has_cleanup(&conn.metadata) {
        shared.forget(&name);
        return Ok(Action::await_change());
    }
    if !is_orphan(conn) {
        let bindings = bindings_referencing(consumer, &name).await?;
        if !bindings.is_empty() {
            let mut report = Report::pending();
            let requeue = observe(conn, shared, &mut report).await?;
            let now = Time(shared.ctx.clock.now());
            write_status(consumer, conn, draining_status(conn, &report, &bindings, &now)).await?;
            announce(conn, shared, Announced::from_report(&report)).await;
            // Each binding's change or removal triggers a reconcile; this is only the backstop.
            return Ok(Action::requeue(requeue.unwrap_or(RETRY_INTERVAL).min(RETRY_INTERVAL)));
        }
    }
    shared.forget(&name);
    let _serialised = shared.finalize_lock.lock().await;
    release_secret_if_last(consumer, conn).await?;
    remove_cleanup(consumer, &connection_resource(), None, &name).await?;
    Ok(Action::await_change())
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_api::consts::annotation;

    #[test]
    fn a_refused_credential_is_unauthorized_with_its_status_not_an_identity_or_permission_problem() {
        let mut report = Report::pending();
        report.secret_valid = Observed::ok("valid");
        report_failure(
            &mut report,
            &Error::Unauthorized {
                message: "token kbind-admin.0123 is not valid".into(),
            },
        );
        assert_eq!(report.connected.reason, reason::UNAUTHORIZED);
        assert!(
            report.connected.message.contains("HTTP 401 Unauthorized"),
            "{}",
            report.connected.message
        );
        assert!(
            report.connected.message.contains(annotation::DELETION_POLICY),
            "says the way out"
        );
        assert!(
            !report.connected.message.contains("kbind-admin"),
            "never the server's text"
        );
        assert!(
            !report.connected.message.contains("identity"),
            "{}",
            report.connected.message
        );
        assert_eq!(
            report.permission_denied, None,
            "a 401 refuses the credentials, not a verb"
        );
        let ready = report.ready();
        assert_eq!((ready.holds(), ready.reason), (false, reason::UNAUTHORIZED));
    }

    #[test]
    fn a_forbidden_identity_read_names_verb_resource_and_status() {
        let mut report = Report::pending();
        report_failure(
            &mut report,
            &Error::Forbidden {
                verb: "get".into(),
                resource: "namespaces".into(),
                message: "User \"x\" cannot get".into(),
            },
        );
        assert_eq!(report.connected.reason, reason::FORBIDDEN);
        let denied = report.permission_denied.unwrap_or_default();
        assert!(
            denied.contains("get namespaces") && denied.contains("HTTP 403"),
            "{denied}"
        );
    }
}
