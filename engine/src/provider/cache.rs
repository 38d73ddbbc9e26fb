//! `ProviderCache`: one shared watch per GVR of an engaged provider, created on demand, all
//! stopped together on disengage. When the credentials may not watch a GVR cluster-wide, the
//! syncer asks for one shared watch per (GVR, namespace in use) instead (DESIGN.md §4 "RBAC").

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kbind_cluster::watcher::{WatchStreamExt, watcher};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
use kube::runtime::reflector::{self, Store, store::Writer};
use tokio::task::JoinHandle;

/// One reflector per GVR.
struct Entry {
    store: Store<DynamicObject>,
    task: JoinHandle<()>,
}

/// The watch caches of one engaged provider.
pub struct ProviderCache {
    client: Arc<dyn ClusterClient>,
    entries: Mutex<BTreeMap<String, Entry>>,
    stopped: AtomicBool,
}

impl std::fmt::Debug for ProviderCache {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProviderCache")
            .field("watched", &self.watched())
            .field("stopped", &self.is_stopped())
            .finish()
    }
}

fn key_of(res: &ApiResource, namespace: Option<&str>) -> String {
    match namespace {
        None => format!("{}/{}/{}", res.group, res.version, res.plural),
        Some(ns) => format!("{}/{}/{}@{ns}", res.group, res.version, res.plural),
    }
}

impl ProviderCache {
    /// A cache whose watches go through `client`.
    pub fn new(client: Arc<dyn ClusterClient>) -> Self {
        Self {
            client,
            entries: Mutex::new(BTreeMap::new()),
            stopped: AtomicBool::new(false),
        }
    }

    /// The store of `res`, starting its (cluster-wide) watch the first time it is asked for.
    /// After [`stop`](Self::stop) the returned store is never filled.
    pub fn store(&self, res: &ApiResource) -> Store<DynamicObject> {
        self.store_in(res, None)
    }

    /// The store of `res` in `namespace` (`None`: cluster-wide), starting its watch the first
    /// time it is asked for; each (GVR, namespace) is watched once, shared by every syncer.
    pub fn store_in(&self, res: &ApiResource, namespace: Option<&str>) -> Store<DynamicObject> {
        let key = key_of(res, namespace);
        let mut entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(entry) = entries.get(&key) {
            return entry.store.clone();
        }
        let writer: Writer<DynamicObject> = Writer::new(res.clone());
        let store = writer.as_reader();
        if self.is_stopped() {
            return store;
        }
        let events = watcher(
            self.client.clone(),
            res.clone(),
            namespace.map(str::to_string),
            super::watcher_config(),
        );
        let task = tokio::spawn(
            reflector::reflector(writer, events)
                .applied_objects()
                .for_each(|_| async {}),
        );
        entries.insert(
            key,
            Entry {
                store: store.clone(),
                task,
            },
        );
        store
    }

    /// `group/version/plural` of every GVR with a running watch, sorted.
    pub fn watched(&self) -> Vec<String> {
        let entries = self.entries.lock().unwrap_or_else(|p| p.into_inner());
        entries
            .iter()
            .filter(|(_, e)| !e.task.is_finished())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stops every watch; later `store` calls start none.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let entries = std::mem::take(&mut *self.entries.lock().unwrap_or_else(|p| p.into_inner()));
        for entry in entries.values() {
            entry.task.abort();
        }
    }

    /// Whether the cache was stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

impl Drop for ProviderCache {
    fn drop(&mut self) {
        self.stop();
    }
}
