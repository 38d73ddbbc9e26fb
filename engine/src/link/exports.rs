//! The exported CRDs of a plain provider, by event: one watch of the CRDs labelled
//! `core.kbind.io/exported=true` per link. A CRD newly labelled (or unlabelled, or changed)
//! wakes the Connection at once instead of at the next rediscovery poll; what the watch saw is
//! then the discovery, so a healthy link lists nothing on a timer. Only the exported API each
//! CRD describes is kept, never the CRD (a schema can be large). Credentials that may not list
//! CRDs (an issuer grants `get` by name) fall back to the poll.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kbind_api::ExportedApi;
use kbind_api::consts::{TRUE, label};
use kbind_cluster::watcher::{Event, WatcherConfig, into_seam_error, watcher};
use kbind_cluster::{ClusterClient, DynamicObject, Error};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::discovery::{crd_resource, exported_api, is_exported};

/// The exported API of each CRD the watch saw, by CRD name.
type Seen = BTreeMap<String, ExportedApi>;

/// The watch of one link's exported CRDs; dropping it stops the watch.
pub(crate) struct ExportsWatch {
    seen: Arc<Mutex<Seen>>,
    synced: Arc<AtomicBool>,
    refused: Arc<AtomicBool>,
    task: JoinHandle<()>,
}

impl Drop for ExportsWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl ExportsWatch {
    /// Starts watching through `client`; every change after the first list sends `connection`
    /// on `wakes`.
    pub(crate) fn start(
        client: Arc<dyn ClusterClient>,
        config: WatcherConfig,
        connection: String,
        wakes: broadcast::Sender<String>,
    ) -> Self {
        let seen: Arc<Mutex<Seen>> = Arc::default();
        let (synced, refused) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let config = config.labels(&format!("{}={TRUE}", label::EXPORTED));
        let events = watcher(client, crd_resource(), None, config);
        let (state, was_synced, was_refused) = (seen.clone(), synced.clone(), refused.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(events);
            // A relist is gathered aside and replaces what was seen once it is complete.
            let mut listing: Option<Seen> = None;
            while let Some(event) = events.next().await {
                let lock = || state.lock();
                match event {
                    Ok(Event::Init) => listing = Some(Seen::new()),
                    Ok(Event::InitApply(crd)) => {
                        if let (Some(list), Some((name, api))) = (listing.as_mut(), entry(&crd)) {
                            list.insert(name, api);
                        }
                    }
                    Ok(Event::InitDone) => {
                        *lock() = listing.take().unwrap_or_default();
                        was_synced.store(true, Ordering::SeqCst);
                        // Nobody listening (the controller stopped) is fine.
                        let _ = wakes.send(connection.clone());
                    }
                    Ok(Event::Apply(crd)) => {
                        let name = crd.metadata.name.clone().unwrap_or_default();
                        match entry(&crd) {
                            Some((name, api)) => lock().insert(name, api),
                            None => lock().remove(&name),
                        };
                        let _ = wakes.send(connection.clone());
                    }
                    Ok(Event::Delete(crd)) => {
                        lock().remove(crd.metadata.name.as_deref().unwrap_or_default());
                        let _ = wakes.send(connection.clone());
                    }
                    Err(e) => {
                        if matches!(into_seam_error(e), Error::Forbidden { .. }) {
                            tracing::info!(connection = %connection, "watching exported CRDs is forbidden; discovery polls instead");
                            was_refused.store(true, Ordering::SeqCst);
                            return;
                        }
                    }
                }
            }
        });
        Self {
            seen,
            synced,
            refused,
            task,
        }
    }

    /// The exported APIs as the watch sees them, once it has listed (a complete read);
    /// `None` before that or when the watch was refused.
    pub(crate) fn exported(&self) -> Option<Vec<ExportedApi>> {
        if !self.synced.load(Ordering::SeqCst) || self.refused.load(Ordering::SeqCst) {
            return None;
        }
        let seen = self.seen.lock();
        let mut apis: Vec<ExportedApi> = seen.values().cloned().collect();
        apis.sort_by(|a, b| a.name.cmp(&b.name));
        apis.dedup_by(|a, b| a.name == b.name);
        Some(apis)
    }

    /// Whether the provider refused the watch (the caller polls).
    pub(crate) fn is_refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }
}

/// A CRD's name and the API it exports, if it is exported and well-formed.
fn entry(crd: &DynamicObject) -> Option<(String, ExportedApi)> {
    let name = crd.metadata.name.clone()?;
    is_exported(crd)
        .then(|| exported_api(crd))
        .flatten()
        .map(|api| (name, api))
}
