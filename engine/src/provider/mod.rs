//! An engaged provider: what a Ready Connection's verified link becomes (an identity-guarded
//! client, a direct reader and one shared watch cache per GVR), built and ended by its link
//! (`crate::link`). Nothing is deleted anywhere on disengage (contract §4).

mod cache;
mod guard;

use std::sync::Arc;

use kbind_cluster::ClusterClient;
use kbind_cluster::backoff::SharedRandomness;

pub use cache::{CacheEvent, CachedStore, ProviderCache, WatchFailure, lean};
pub use guard::{GuardedClient, IdentityState};

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
    /// An engagement of Connection `name` on `raw`, a client whose identity was just proven to
    /// be `pinned`; its watches back off with the jitter of `randomness` and are renewed after
    /// `watch_timeout`.
    pub(crate) fn new(
        name: &str,
        raw: Arc<dyn ClusterClient>,
        pinned: &str,
        randomness: &SharedRandomness,
        watch_timeout: std::time::Duration,
    ) -> Self {
        let guarded = GuardedClient::new(raw, pinned);
        let client: Arc<dyn ClusterClient> = Arc::new(guarded.clone());
        Self {
            name: name.to_string(),
            identity: pinned.to_string(),
            reader: client.clone(),
            cache: ProviderCache::new(client.clone(), &randomness.fork(&format!("provider/{name}")))
                .with_watch_timeout(watch_timeout),
            client,
            guarded,
        }
    }

    /// The identity guard of the write client.
    pub fn guard(&self) -> &GuardedClient {
        &self.guarded
    }

    /// Whether this engagement was ended (its client and caches are dead).
    pub fn is_disengaged(&self) -> bool {
        self.guarded.is_closed()
    }

    /// Ends the engagement: its client refuses every call and its caches stop.
    pub(crate) fn shut_down(&self) {
        self.guarded.close();
        self.cache.stop();
    }
}
