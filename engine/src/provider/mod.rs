//! Engaged providers: a Ready Connection becomes an engaged cluster (an identity-guarded
//! client, a direct reader and one shared watch cache per GVR), and is disengaged when it stops
//! being Ready or is deleted. Nothing is deleted anywhere on disengage (DESIGN.md §4).
//!
//! The registry holds the one provider link per Connection and its state ([`LinkState`]:
//! Unlinked → Linked → Verified → Engaged). The Connection reconciler is the only one that
//! parses the kubeconfig and reads the identity (through the link's client); the engager only
//! engages a link verified as the pinned identity, and a disengage drops the link, so recovery
//! connects afresh. (`provider::run` alone, without a Connection reconciler, links and
//! verifies in the engager through the same registry calls.)

mod cache;
mod guard;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret;
use kbind_api::Connection;
use kbind_api::conditions;
use kbind_api::consts::{condition, reason};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
use kube::ResourceExt;
use kube::runtime::reflector::Store;
use tokio::sync::watch;

pub use cache::{CacheEvent, CachedStore, ProviderCache, lean};
pub use guard::{GuardedClient, IdentityState};

use crate::connection::stores::{ConsumerStores, secret_key};
use crate::context::Context;
use crate::planted::{Plant, planted};
use crate::remote::ProviderKubeconfig;

/// How often engagements that failed (provider unreachable, Secret missing) are retried.
const ENGAGE_RETRY: Duration = Duration::from_secs(5);
/// How long one engagement (connect and identity read) may take.
const ENGAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why an engagement did not happen this time (retried later; never carries credentials).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EngageError {
    /// The Secret or its key is not there (yet).
    #[error("failed to find the kubeconfig Secret {0}")]
    SecretNotFound(String),
    /// The kubeconfig is not acceptable.
    #[error(transparent)]
    Kubeconfig(#[from] crate::remote::Refusal),
    /// The connector or the identity read failed.
    #[error("failed to reach the provider: {0}")]
    Unreachable(String),
    /// The Connection reconciler has not verified the identity through the shared client yet.
    #[error("waiting for the Connection reconciler to verify the provider's identity")]
    AwaitingIdentity,
    /// The provider's identity is not the pinned one.
    #[error("the provider's identity {found} differs from the pinned {pinned}")]
    IdentityMismatch {
        /// `status.remoteClusterUID`.
        pinned: String,
        /// What the provider reports.
        found: String,
    },
}

/// One engaged provider cluster.
pub struct EngagedProvider {
    /// The Connection's name.
    pub name: String,
    /// The pinned `status.remoteClusterUID`.
    pub identity: String,
    /// Writes (identity-guarded).
    pub client: Arc<dyn ClusterClient>,
    /// Fresh reads, bypassing the cache (shares the guard, so its transport errors count).
    pub reader: Arc<dyn ClusterClient>,
    /// One shared watch per GVR.
    pub cache: ProviderCache,
    guarded: GuardedClient,
    /// The link's client it was built on: a new link (new kubeconfig bytes, or a failed link
    /// replaced) re-engages; a label or annotation change of the Secret keeps the link.
    raw: Arc<dyn ClusterClient>,
}

impl std::fmt::Debug for EngagedProvider {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("EngagedProvider")
            .field("name", &self.name)
            .field("identity", &self.identity)
            .finish_non_exhaustive()
    }
}

impl EngagedProvider {
    /// The identity guard of the write client.
    pub fn guard(&self) -> &GuardedClient {
        &self.guarded
    }

    /// Whether this engagement was ended (its client and caches are dead).
    pub fn is_disengaged(&self) -> bool {
        self.guarded.is_closed()
    }

    fn shut_down(&self) {
        self.guarded.close();
        self.cache.stop();
    }
}

/// The engaged providers, by Connection name; clones share one registry.
#[derive(Clone)]
pub struct ProviderRegistry {
    engaged: Arc<RwLock<BTreeMap<String, Arc<EngagedProvider>>>>,
    /// Connections whose last engagement attempt failed (and none succeeded since).
    failed: Arc<RwLock<BTreeSet<String>>>,
    /// The one provider client per Connection, shared by the Connection reconciler and the engager.
    clients: Arc<RwLock<BTreeMap<String, ProviderClient>>>,
    /// Bumped whenever an identity is verified through a shared client (the engager waits on it).
    verifications: Arc<watch::Sender<u64>>,
    changes: Arc<watch::Sender<u64>>,
}

impl Default for ProviderRegistry {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for ProviderRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderRegistry")
            .field("engaged", &self.engaged())
            .finish()
    }
}

impl ProviderRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self {
            engaged: Arc::new(RwLock::new(BTreeMap::new())),
            failed: Arc::new(RwLock::new(BTreeSet::new())),
            clients: Arc::new(RwLock::new(BTreeMap::new())),
            verifications: Arc::new(watch::channel(0).0),
            changes: Arc::new(watch::channel(0).0),
        }
    }

    /// The engaged provider of Connection `name`.
    pub fn get(&self, name: &str) -> Option<Arc<EngagedProvider>> {
        self.read().get(name).cloned()
    }

    /// Names of the engaged Connections, sorted.
    pub fn engaged(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }

    /// Whether the last attempt to engage Connection `name` failed (its provider is known to be
    /// down, not merely "not engaged yet", as right after a restart or a leader hand-over).
    pub fn engagement_failed(&self, name: &str) -> bool {
        self.failed.read().unwrap_or_else(|p| p.into_inner()).contains(name)
    }

    /// Records a failed engagement; a first failure counts as a change (bindings look again).
    fn record_failure(&self, name: &str) {
        let new = self
            .failed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
        if new {
            self.changes.send_modify(|n| *n += 1);
        }
    }

    fn clear_failure(&self, name: &str) {
        self.failed.write().unwrap_or_else(|p| p.into_inner()).remove(name);
    }

    /// A receiver that changes whenever a provider is engaged or disengaged.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.changes.subscribe()
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<String, Arc<EngagedProvider>>> {
        self.engaged.read().unwrap_or_else(|p| p.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<String, Arc<EngagedProvider>>> {
        self.engaged.write().unwrap_or_else(|p| p.into_inner())
    }

    fn insert(&self, provider: Arc<EngagedProvider>) {
        self.clear_failure(&provider.name);
        self.write().insert(provider.name.clone(), provider);
        self.changes.send_modify(|n| *n += 1);
    }

    fn remove(&self, name: &str) -> Option<Arc<EngagedProvider>> {
        let removed = self.write().remove(name);
        if let Some(provider) = &removed {
            provider.shut_down();
            self.changes.send_modify(|n| *n += 1);
        }
        removed
    }

    fn remove_all(&self) {
        let names = self.engaged();
        for name in names {
            self.remove(&name);
        }
    }
}

/// Where one Connection's provider link stands: the engagement state machine (DESIGN.md §2
/// "Identity", §4 "connection loss"). The Connection reconciler moves a link from `Unlinked`
/// to `Linked` (Secret accepted, client built) and to `Verified` (identity read through it and
/// equal to the pin); the engager moves a `Verified` link of a Ready Connection to `Engaged`.
/// A failed link, a new kubeconfig or a Connection that stops being Ready ends the engagement
/// and drops the client, so recovery starts again from `Unlinked` with a fresh client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// No client: no accepted kubeconfig yet, or the last link failed.
    Unlinked,
    /// A client built from the accepted kubeconfig; its identity not (or no longer) verified.
    Linked,
    /// The identity read through the client matches the pin.
    Verified {
        /// The provider's cluster UID.
        uid: String,
    },
    /// Engaged: write client, reader and watch caches built on the verified client.
    Engaged {
        /// The pinned cluster UID.
        uid: String,
    },
}

/// The provider client of one Connection for one accepted kubeconfig, and the identity the
/// Connection reconciler last read through it (DESIGN.md §2 "Identity").
#[derive(Clone)]
struct ProviderClient {
    kubeconfig: ProviderKubeconfig,
    raw: Arc<dyn ClusterClient>,
    verified: Option<String>,
}

impl ProviderRegistry {
    /// The shared client of Connection `name` for `kubeconfig`, built with `connect` when there
    /// is none for it yet (one client per Connection and kubeconfig, whoever asks first).
    pub(crate) async fn client<F, Fut>(
        &self,
        name: &str,
        kubeconfig: &ProviderKubeconfig,
        connect: F,
    ) -> kbind_cluster::Result<Arc<dyn ClusterClient>>
    where
        F: FnOnce() -> Fut,
        Fut: std::future::Future<Output = kbind_cluster::Result<Arc<dyn ClusterClient>>>,
    {
        if let Some((raw, _)) = self.shared_client(name, kubeconfig) {
            return Ok(raw);
        }
        let raw = connect().await?;
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        // Someone else may have connected meanwhile: theirs stays, so there is one.
        if let Some(existing) = clients.get(name).filter(|c| &c.kubeconfig == kubeconfig) {
            return Ok(existing.raw.clone());
        }
        clients.insert(
            name.to_string(),
            ProviderClient {
                kubeconfig: kubeconfig.clone(),
                raw: raw.clone(),
                verified: None,
            },
        );
        Ok(raw)
    }

    /// The shared client of `name` for `kubeconfig` and the identity last verified through it.
    fn shared_client(
        &self,
        name: &str,
        kubeconfig: &ProviderKubeconfig,
    ) -> Option<(Arc<dyn ClusterClient>, Option<String>)> {
        self.clients
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|c| &c.kubeconfig == kubeconfig)
            .map(|c| (c.raw.clone(), c.verified.clone()))
    }

    /// Records the identity just read through `raw` (`None`: the read failed or did not match).
    pub(crate) fn verified(&self, name: &str, raw: &Arc<dyn ClusterClient>, uid: Option<String>) {
        let news = {
            let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
            match clients.get_mut(name).filter(|c| Arc::ptr_eq(&c.raw, raw)) {
                Some(c) if c.verified != uid => {
                    c.verified = uid;
                    c.verified.is_some()
                }
                _ => false,
            }
        };
        if news {
            self.verifications.send_modify(|n| *n += 1);
        }
    }

    /// The link of `name` whose identity was verified as `pinned` (what an engagement takes).
    fn verified_client(&self, name: &str, pinned: &str) -> Option<Arc<dyn ClusterClient>> {
        self.clients
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .filter(|c| c.verified.as_deref() == Some(pinned))
            .map(|c| c.raw.clone())
    }

    /// Where the provider link of Connection `name` stands.
    pub fn link_state(&self, name: &str) -> LinkState {
        if let Some(engaged) = self.get(name).filter(|p| !p.is_disengaged()) {
            return LinkState::Engaged {
                uid: engaged.identity.clone(),
            };
        }
        match self.clients.read().unwrap_or_else(|p| p.into_inner()).get(name) {
            None => LinkState::Unlinked,
            Some(ProviderClient { verified: None, .. }) => LinkState::Linked,
            Some(ProviderClient {
                verified: Some(uid), ..
            }) => LinkState::Verified { uid: uid.clone() },
        }
    }

    /// Drops the shared client of `name` if it is `raw` (a failed link: recovery starts fresh).
    pub(crate) fn drop_client(&self, name: &str, raw: &Arc<dyn ClusterClient>) {
        let mut clients = self.clients.write().unwrap_or_else(|p| p.into_inner());
        if clients.get(name).is_some_and(|c| Arc::ptr_eq(&c.raw, raw)) {
            clients.remove(name);
        }
    }

    /// Whether `raw` is still the shared client of `name` (a disengage drops it: recovery
    /// connects afresh).
    pub(crate) fn holds_client(&self, name: &str, raw: &Arc<dyn ClusterClient>) -> bool {
        self.clients
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .get(name)
            .is_some_and(|c| Arc::ptr_eq(&c.raw, raw))
    }

    /// Forgets the client of a Connection that is gone.
    pub(crate) fn forget_client(&self, name: &str) {
        self.clients.write().unwrap_or_else(|p| p.into_inner()).remove(name);
    }
}

/// Disengages everything when the provider loop stops (leadership lost, shutdown, crash).
struct DisengageAllOnDrop(ProviderRegistry);

impl Drop for DisengageAllOnDrop {
    fn drop(&mut self) {
        self.0.remove_all();
    }
}

/// The pinned identity of a Connection the provider should be engaged for, if any: a Ready
/// one, or a deleted one still connected whose bindings drain (they need the provider to
/// delete their copies; found on real clusters, where the disengage won that race), also while
/// one of them is blocked (a refused verb on one copy must not stop the others).
fn wanted_identity(conn: &Connection) -> Option<String> {
    let draining = conn.metadata.deletion_timestamp.is_some()
        && conditions::is_true(conn.conditions(), condition::CONNECTED)
        && conditions::find(conn.conditions(), condition::READY)
            .is_some_and(|c| c.reason == reason::DRAINING_BINDINGS || c.reason == reason::DELETION_BLOCKED);
    if !draining && !conditions::is_true(conn.conditions(), condition::READY) {
        return None;
    }
    conn.status
        .as_ref()
        .and_then(|s| s.remote_cluster_uid.clone())
        .filter(|uid| !uid.is_empty())
}

/// Who reads a provider's identity before it is engaged.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum IdentityCheck {
    /// The engager reads it itself (no Connection reconciler runs beside it).
    Own,
    /// The Connection reconciler reads it through the shared client; the engager engages only
    /// a client it verified (one identity check per Connection and kubeconfig), except for a
    /// deleted Connection whose bindings drain (its reconciler no longer checks).
    ConnectionReconciler,
}

/// Engages and disengages providers as Connections change, until the future is dropped
/// (which disengages everything); over consumer stores of its own, reading identities itself.
pub async fn run(ctx: Context, registry: ProviderRegistry) {
    let (stores, feed) = ConsumerStores::new(&ctx);
    tokio::join!(feed, engage_loop(ctx, registry, stores, IdentityCheck::Own));
}

/// [`run`] over the engine's shared Connection and Secret stores, engaging the provider clients
/// the Connection reconciler verified.
pub async fn run_shared(ctx: Context, registry: ProviderRegistry, stores: ConsumerStores) {
    engage_loop(ctx, registry, stores, IdentityCheck::ConnectionReconciler).await
}

async fn engage_loop(ctx: Context, registry: ProviderRegistry, stores: ConsumerStores, check: IdentityCheck) {
    let _disengage_all = DisengageAllOnDrop(registry.clone());
    let verifications = futures::stream::unfold(registry.verifications.subscribe(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    });
    let mut events = std::pin::pin!(futures::stream::select(
        futures::stream::select(
            stores.connections.changes().map(|_| ()),
            stores.secrets.changes().map(|_| ()),
        ),
        verifications,
    ));
    let mut engager = Engager {
        ctx,
        registry,
        check,
        previous: BTreeMap::new(),
    };
    // Changes of the stores and verified links drive the engager; a timer only retries
    // engagements that failed (there is nothing to look at otherwise).
    let mut retry = true;
    loop {
        tokio::select! {
            event = events.next() => if event.is_none() { return },
            _ = tokio::time::sleep(ENGAGE_RETRY), if retry => {}
        }
        // Wait for complete lists: a half-listed store would look like deletions.
        if !stores.connections.is_synced() || !stores.secrets.is_synced() {
            continue;
        }
        retry = engager
            .reconcile_all(stores.connections.store(), stores.secrets.store())
            .await;
    }
}

/// The state of the engage/disengage loop.
struct Engager {
    ctx: Context,
    registry: ProviderRegistry,
    check: IdentityCheck,
    /// Raw clients of past engagements: only the planted bug ever reads this.
    previous: BTreeMap<String, Arc<dyn ClusterClient>>,
}

impl Engager {
    /// Engages and disengages every Connection; whether an engagement failed and is retried.
    async fn reconcile_all(&mut self, connections: &Store<Connection>, secrets: &Store<DynamicObject>) -> bool {
        // The cache's Arcs, not copies: a Connection's status lists every exported API, and
        // this runs on every Connection change of every Connection.
        let wanted: BTreeMap<String, Arc<Connection>> = connections
            .state()
            .into_iter()
            .map(|conn| (conn.name_any(), conn))
            .collect();
        self.registry
            .failed
            .write()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|name| wanted.contains_key(name));
        for name in self.registry.engaged() {
            let keep = wanted.get(&name).and_then(|c| wanted_identity(c));
            if keep.is_none() {
                self.disengage(&name, "the Connection is no longer Ready").await;
            }
        }
        for (name, conn) in &wanted {
            let Some(pinned) = wanted_identity(conn) else {
                // Not wanted is not failed: the Connection's own status says why.
                self.registry.clear_failure(name);
                continue;
            };
            if self.check == IdentityCheck::Own
                && let Err(e) = self.link(conn, secrets).await
            {
                tracing::info!(connection = %name, error = %e, "provider not linked yet");
                // The Secret went, or its new kubeconfig does not link: the old link is over.
                self.disengage(name, "the provider link failed").await;
                self.registry.record_failure(name);
                continue;
            }
            if let Some(current) = self.registry.get(name) {
                if current.identity == pinned
                    && !current.is_disengaged()
                    && self.registry.holds_client(name, &current.raw)
                {
                    continue;
                }
                self.disengage(name, "the pinned identity or the provider link changed")
                    .await;
            }
            match tokio::time::timeout(ENGAGE_TIMEOUT, self.engage(conn, &pinned)).await {
                Ok(Ok(provider)) => {
                    tracing::info!(connection = %name, identity = %pinned, "engaged provider");
                    self.registry.insert(Arc::new(provider));
                }
                Ok(Err(EngageError::AwaitingIdentity)) => {
                    tracing::debug!(connection = %name, "waiting for the identity check");
                }
                Ok(Err(e)) => {
                    tracing::info!(connection = %name, error = %e, "provider not engaged yet");
                    self.registry.record_failure(name);
                }
                Err(_) => {
                    tracing::info!(connection = %name, "provider engagement timed out");
                    self.registry.record_failure(name);
                }
            }
        }
        !self
            .registry
            .failed
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .is_empty()
    }

    fn secret_of(&self, conn: &Connection, secrets: &Store<DynamicObject>) -> Option<Secret> {
        let r = &conn.spec.kubeconfig_secret_ref;
        if r.namespace != self.ctx.config.namespace {
            return None;
        }
        secrets
            .get(&secret_key(&r.namespace, &r.name))
            .and_then(|obj| kbind_cluster::from_dynamic((*obj).clone()).ok())
    }

    /// What the Connection reconciler does when none runs beside the engager (`provider::run`
    /// alone): accept the kubeconfig, link a client and verify the identity through it.
    async fn link(&mut self, conn: &Connection, secrets: &Store<DynamicObject>) -> Result<(), EngageError> {
        let r = &conn.spec.kubeconfig_secret_ref;
        let secret_name = format!("{}/{}", r.namespace, r.name);
        let secret = self
            .secret_of(conn, secrets)
            .ok_or_else(|| EngageError::SecretNotFound(secret_name.clone()))?;
        let bytes = secret
            .data
            .as_ref()
            .and_then(|d| d.get(&r.key))
            .ok_or(EngageError::SecretNotFound(secret_name))?;
        let kubeconfig = crate::remote::parse_kubeconfig(&bytes.0, self.ctx.config.allow_insecure_providers)?;
        let name = conn.name_any();
        let (connector, config) = (self.ctx.connector.clone(), kubeconfig.clone());
        let raw = self
            .registry
            .client(&name, &kubeconfig, || async move { connector.connect(&config).await })
            .await
            .map_err(|e| EngageError::Unreachable(e.to_string()))?;
        if matches!(self.registry.link_state(&name), LinkState::Linked) {
            let identity = kbind_cluster::identity::read_identity(raw.as_ref())
                .await
                .map_err(|e| EngageError::Unreachable(e.to_string()))?;
            self.registry.verified(&name, &raw, Some(identity.uid));
        }
        Ok(())
    }

    /// Engages the link the identity check verified as `pinned`: no kubeconfig parse and no
    /// identity read of its own (one link per Connection, one check).
    async fn engage(&mut self, conn: &Connection, pinned: &str) -> Result<EngagedProvider, EngageError> {
        let name = conn.name_any();
        let raw = match self.previous.get(&name) {
            Some(old) if planted(Plant::ReuseClientAfterDisengage) => {
                let identity = kbind_cluster::identity::read_identity(old.as_ref())
                    .await
                    .map_err(|e| EngageError::Unreachable(e.to_string()))?;
                if identity.uid != pinned {
                    return Err(EngageError::IdentityMismatch {
                        pinned: pinned.to_string(),
                        found: identity.uid,
                    });
                }
                old.clone()
            }
            _ => match self.registry.verified_client(&name, pinned) {
                Some(raw) => raw,
                None => {
                    return Err(match self.registry.link_state(&name) {
                        LinkState::Verified { uid } if self.check == IdentityCheck::Own => {
                            EngageError::IdentityMismatch {
                                pinned: pinned.to_string(),
                                found: uid,
                            }
                        }
                        _ => EngageError::AwaitingIdentity,
                    });
                }
            },
        };
        let guarded = GuardedClient::new(raw.clone(), pinned);
        let client: Arc<dyn ClusterClient> = Arc::new(guarded.clone());
        Ok(EngagedProvider {
            name,
            identity: pinned.to_string(),
            reader: client.clone(),
            cache: ProviderCache::new(client.clone(), &self.ctx.randomness),
            client,
            guarded,
            raw,
        })
    }

    async fn disengage(&mut self, name: &str, why: &str) {
        let Some(provider) = self.registry.remove(name) else {
            return;
        };
        tracing::info!(connection = %name, reason = why, "disengaged provider");
        // Recovery builds a fresh client (DESIGN.md §4 "connection loss").
        self.registry.drop_client(name, &provider.raw);
        if planted(Plant::ReuseClientAfterDisengage) {
            self.previous.insert(name.to_string(), provider.raw.clone());
        }
        if planted(Plant::DeleteOnDisengage) {
            planted_delete_pulled_crds(&self.ctx, name).await;
        }
    }
}

/// The planted bug: "cleans up" the consumer CRDs pulled through this Connection on
/// disengage, which §8 invariant 1 forbids.
async fn planted_delete_pulled_crds(ctx: &Context, connection: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let res = ApiResource::erase::<CustomResourceDefinition>(&());
    let Ok(list) = ctx.consumer.list(&res, None, &Default::default()).await else {
        return;
    };
    for crd in list.items {
        if crd
            .annotations()
            .get(kbind_api::consts::annotation::CONNECTION)
            .map(String::as_str)
            == Some(connection)
        {
            let _ = ctx
                .consumer
                .delete(&res, None, &crd.name_any(), &Default::default())
                .await;
        }
    }
}

#[cfg(test)]
mod tests;
