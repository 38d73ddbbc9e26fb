//! Engaged providers: a Ready Connection becomes an engaged cluster (a fresh, identity-guarded
//! client, a direct reader and one shared watch cache per GVR), and is disengaged when it stops
//! being Ready or is deleted. Nothing is deleted anywhere on disengage (DESIGN.md §4).

mod cache;
mod guard;

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::{StreamExt, future::Either};
use k8s_openapi::api::core::v1::Secret;
use kbind_api::Connection;
use kbind_api::conditions;
use kbind_api::consts::{condition, reason};
use kbind_cluster::watcher::{BackoffPolicy, Event, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
use kube::ResourceExt;
use kube::runtime::reflector::{self, Store, store::Writer};
use tokio::sync::watch;

pub use cache::{CacheEvent, CachedStore, ProviderCache, lean};
pub use guard::{GuardedClient, IdentityState};

use crate::context::Context;
use crate::planted::{Plant, planted};

/// How often engagements that failed (provider unreachable, Secret missing) are retried.
const ENGAGE_RETRY: Duration = Duration::from_secs(5);
/// How long one engagement (connect and identity read) may take.
const ENGAGE_TIMEOUT: Duration = Duration::from_secs(30);

/// Watches the engine runs: deterministic backoff, so a paused-clock world replays exactly.
pub(crate) fn watcher_config() -> WatcherConfig {
    WatcherConfig::default().backoff(BackoffPolicy::Exponential {
        initial: Duration::from_millis(800),
        max: Duration::from_secs(30),
        factor: 2.0,
    })
}

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
    secret_version: Option<String>,
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

/// Disengages everything when the provider loop stops (leadership lost, shutdown, crash).
struct DisengageAllOnDrop(ProviderRegistry);

impl Drop for DisengageAllOnDrop {
    fn drop(&mut self) {
        self.0.remove_all();
    }
}

/// The pinned identity of a Connection the provider should be engaged for, if any: a Ready
/// one, or a deleted one still connected whose bindings drain (they need the provider to
/// delete their copies; found on real clusters, where the disengage won that race).
fn wanted_identity(conn: &Connection) -> Option<String> {
    let draining = conn.metadata.deletion_timestamp.is_some()
        && conditions::is_true(conn.conditions(), condition::CONNECTED)
        && conditions::find(conn.conditions(), condition::READY).is_some_and(|c| c.reason == reason::DRAINING_BINDINGS);
    if !draining && !conditions::is_true(conn.conditions(), condition::READY) {
        return None;
    }
    conn.status
        .as_ref()
        .and_then(|s| s.remote_cluster_uid.clone())
        .filter(|uid| !uid.is_empty())
}

/// Engages and disengages providers as Connections change, until the future is dropped
/// (which disengages everything).
pub async fn run(ctx: Context, registry: ProviderRegistry) {
    let _disengage_all = DisengageAllOnDrop(registry.clone());
    let conn_res = ApiResource::erase::<Connection>(&());
    let conn_writer: Writer<DynamicObject> = Writer::new(conn_res.clone());
    let connections = conn_writer.as_reader();
    let conn_events = reflector::reflector(
        conn_writer,
        watcher(ctx.consumer.clone(), conn_res, None, watcher_config()),
    );
    let secret_res = ApiResource::erase::<Secret>(&());
    let secret_writer: Writer<DynamicObject> = Writer::new(secret_res.clone());
    let secrets = secret_writer.as_reader();
    let secret_events = reflector::reflector(
        secret_writer,
        watcher(
            ctx.consumer.clone(),
            secret_res,
            Some(ctx.config.namespace.clone()),
            watcher_config(),
        ),
    );
    let mut events = std::pin::pin!(futures::stream::select(
        conn_events.map(Either::Left),
        secret_events.map(Either::Right),
    ));
    let mut retry = tokio::time::interval(ENGAGE_RETRY);
    retry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut engager = Engager {
        ctx,
        registry,
        previous: BTreeMap::new(),
    };
    loop {
        tokio::select! {
            event = events.next() => match event {
                Some(Either::Left(Err(e)) | Either::Right(Err(e))) => {
                    tracing::debug!(error = %kbind_cluster::into_seam_error(e), "consumer watch failed; it retries");
                    continue;
                }
                // Wait for complete lists: a half-listed store would look like deletions.
                Some(Either::Left(Ok(Event::Init | Event::InitApply(_))) | Either::Right(Ok(Event::Init | Event::InitApply(_)))) => continue,
                Some(_) => {}
                None => return,
            },
            _ = retry.tick() => {}
        }
        engager.reconcile_all(&connections, &secrets).await;
    }
}

/// The state of the engage/disengage loop.
struct Engager {
    ctx: Context,
    registry: ProviderRegistry,
    /// Raw clients of past engagements: only the planted bug ever reads this.
    previous: BTreeMap<String, Arc<dyn ClusterClient>>,
}

impl Engager {
    async fn reconcile_all(&mut self, connections: &Store<DynamicObject>, secrets: &Store<DynamicObject>) {
        let mut wanted: BTreeMap<String, Connection> = BTreeMap::new();
        for obj in connections.state() {
            match kbind_cluster::from_dynamic::<Connection>((*obj).clone()) {
                Ok(conn) => {
                    wanted.insert(conn.name_any(), conn);
                }
                Err(e) => tracing::debug!(error = %e, "skipping an undecodable Connection"),
            }
        }
        for name in self.registry.engaged() {
            let keep = wanted.get(&name).and_then(wanted_identity);
            if keep.is_none() {
                self.disengage(&name, "the Connection is no longer Ready").await;
            }
        }
        for (name, conn) in &wanted {
            let Some(pinned) = wanted_identity(conn) else { continue };
            let secret_version = self.secret_of(conn, secrets).and_then(|s| s.resource_version());
            if let Some(current) = self.registry.get(name) {
                if current.identity == pinned && current.secret_version == secret_version && !current.is_disengaged() {
                    continue;
                }
                self.disengage(name, "the pinned identity or the kubeconfig Secret changed")
                    .await;
            }
            match tokio::time::timeout(ENGAGE_TIMEOUT, self.engage(conn, &pinned, secrets)).await {
                Ok(Ok(provider)) => {
                    tracing::info!(connection = %name, identity = %pinned, "engaged provider");
                    self.registry.insert(Arc::new(provider));
                }
                Ok(Err(e)) => tracing::info!(connection = %name, error = %e, "provider not engaged yet"),
                Err(_) => tracing::info!(connection = %name, "provider engagement timed out"),
            }
        }
    }

    fn secret_of(&self, conn: &Connection, secrets: &Store<DynamicObject>) -> Option<Secret> {
        let r = &conn.spec.kubeconfig_secret_ref;
        if r.namespace != self.ctx.config.namespace {
            return None;
        }
        let key = reflector::ObjectRef::new_with(&r.name, ApiResource::erase::<Secret>(&())).within(&r.namespace);
        secrets
            .get(&key)
            .and_then(|obj| kbind_cluster::from_dynamic((*obj).clone()).ok())
    }

    async fn engage(
        &mut self,
        conn: &Connection,
        pinned: &str,
        secrets: &Store<DynamicObject>,
    ) -> Result<EngagedProvider, EngageError> {
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
        let raw = match self.previous.get(&name) {
            Some(old) if planted(Plant::ReuseClientAfterDisengage) => old.clone(),
            _ => self
                .ctx
                .connector
                .connect(&kubeconfig)
                .await
                .map_err(|e| EngageError::Unreachable(e.to_string()))?,
        };
        let identity = kbind_cluster::identity::read_identity(raw.as_ref())
            .await
            .map_err(|e| EngageError::Unreachable(e.to_string()))?;
        if identity.uid != pinned {
            return Err(EngageError::IdentityMismatch {
                pinned: pinned.to_string(),
                found: identity.uid,
            });
        }
        let guarded = GuardedClient::new(raw.clone(), pinned);
        let client: Arc<dyn ClusterClient> = Arc::new(guarded.clone());
        Ok(EngagedProvider {
            name,
            identity: pinned.to_string(),
            reader: client.clone(),
            cache: ProviderCache::new(client.clone()),
            client,
            guarded,
            secret_version: secret.resource_version(),
            raw,
        })
    }

    async fn disengage(&mut self, name: &str, why: &str) {
        let Some(provider) = self.registry.remove(name) else {
            return;
        };
        tracing::info!(connection = %name, reason = why, "disengaged provider");
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
