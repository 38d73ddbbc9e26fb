//! The exported CRDs of a plain provider, by event: one watch of the CRDs labelled
//! `core.kbind.io/exported=true` per link. A CRD newly labelled (or unlabelled, or changed)
//! wakes the Connection at once instead of at the next rediscovery poll; the watch's store is
//! then the discovery, so a healthy link lists nothing on a timer. Credentials that may not
//! list CRDs (an issuer grants `get` by name) fall back to the poll.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use kbind_api::ExportedApi;
use kbind_api::consts::{TRUE, label};
use kbind_cluster::watcher::{Event, WatchStreamExt, WatcherConfig, into_seam_error, watcher};
use kbind_cluster::{ClusterClient, DynamicObject, Error};
use kube::runtime::reflector::{self, Store, store::Writer};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

use super::discovery::{crd_resource, exported_apis};

/// The watch of one link's exported CRDs; dropping it stops the watch.
pub(crate) struct ExportsWatch {
    store: Store<DynamicObject>,
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
        let writer: Writer<DynamicObject> = Writer::new(crd_resource());
        let store = writer.as_reader();
        let (synced, refused) = (Arc::new(AtomicBool::new(false)), Arc::new(AtomicBool::new(false)));
        let config = config.labels(&format!("{}={TRUE}", label::EXPORTED));
        let events = watcher(client, crd_resource(), None, config).modify(crate::provider::lean);
        let (was_synced, was_refused) = (synced.clone(), refused.clone());
        let task = tokio::spawn(async move {
            let mut events = std::pin::pin!(reflector::reflector(writer, events));
            while let Some(event) = events.next().await {
                match event {
                    Ok(Event::InitDone) => {
                        was_synced.store(true, Ordering::SeqCst);
                        // Nobody listening (the controller stopped) is fine.
                        let _ = wakes.send(connection.clone());
                    }
                    Ok(Event::Apply(_) | Event::Delete(_)) => {
                        let _ = wakes.send(connection.clone());
                    }
                    Ok(Event::Init | Event::InitApply(_)) => {}
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
            store,
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
        let crds: Vec<DynamicObject> = self.store.state().iter().map(|c| c.as_ref().clone()).collect();
        Some(exported_apis(&crds))
    }

    /// Whether the provider refused the watch (the caller polls).
    pub(crate) fn is_refused(&self) -> bool {
        self.refused.load(Ordering::SeqCst)
    }
}
