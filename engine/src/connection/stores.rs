//! One watch per thing (issue #13, DESIGN.md §4 "reads and events"): one Connection store and
//! one Secret store (the konnector's namespace) on the consumer, each fed by one watch and
//! shared by the Connection reconciler, the engager and the binding reconciler.
//!
//! Each store is a kube-runtime reflector `Store`; its events fan out through a broadcast
//! channel. A subscriber that falls behind (`Lagged`) is handed every cached object instead of
//! the events it missed, so it converges on the store as it is, never on a partial history.

use std::sync::Arc;

use futures::{Stream, StreamExt};
use kbind_api::Connection;
use kbind_cluster::watcher::{Event, watcher};
use kbind_cluster::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, Store, store::Writer};
use tokio::sync::broadcast;

use super::secret_resource;
use crate::context::Context;

/// How many changes a slow subscriber may fall behind before it is resynced from the store.
const FAN_OUT: usize = 1024;

/// Every value sent on `rx` until it closes; values missed while lagging are skipped (the
/// periodic requeue catches up), for name notifications that need no resync.
pub(crate) fn received<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl Stream<Item = T> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        loop {
            match rx.recv().await {
                Ok(value) => return Some((value, rx)),
                Err(broadcast::error::RecvError::Lagged(_)) => continue,
                Err(broadcast::error::RecvError::Closed) => return None,
            }
        }
    })
}

/// One change of a shared store.
#[derive(Debug, Clone)]
pub enum Change<K> {
    /// The object was added or changed (also every object of a completed re-list).
    Applied(Arc<K>),
    /// The object was deleted.
    Deleted(Arc<K>),
    /// A list completed: the store now holds the whole collection.
    Synced,
}

/// One shared store and its fan-out; clones share both.
#[derive(Clone)]
pub struct SharedStore<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    store: Store<K>,
    changes: broadcast::Sender<Change<K>>,
}

impl<K> SharedStore<K>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn new(store: Store<K>) -> Self {
        Self {
            store,
            changes: broadcast::channel(FAN_OUT).0,
        }
    }

    /// The cached objects.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Whether the first list completed.
    pub fn is_synced(&self) -> bool {
        futures::FutureExt::now_or_never(self.store.wait_until_ready()).is_some_and(|r| r.is_ok())
    }

    /// The changes from now on, starting with every cached object (and `Synced` once the store
    /// synced) so a subscriber that starts late misses nothing; one that lags gets every cached
    /// object as `Applied` (then `Synced`) instead of what it missed.
    pub fn changes(&self) -> impl Stream<Item = Change<K>> + Send + 'static {
        let store = self.store.clone();
        let rx = self.changes.subscribe();
        let mut current: Vec<Change<K>> = store.state().into_iter().map(Change::Applied).collect();
        if self.is_synced() {
            current.push(Change::Synced);
        }
        let following = futures::stream::unfold(rx, move |mut rx| {
            let store = store.clone();
            async move {
                match rx.recv().await {
                    Ok(change) => Some((vec![change], rx)),
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let mut all: Vec<Change<K>> = store.state().into_iter().map(Change::Applied).collect();
                        all.push(Change::Synced);
                        Some((all, rx))
                    }
                    Err(broadcast::error::RecvError::Closed) => None,
                }
            }
        })
        .flat_map(futures::stream::iter);
        futures::stream::iter(current).chain(following)
    }

    fn publish(&self, event: &Event<K>) {
        let change = match event {
            Event::Apply(obj) | Event::InitApply(obj) => Change::Applied(Arc::new(obj.clone())),
            Event::Delete(obj) => Change::Deleted(Arc::new(obj.clone())),
            Event::InitDone => Change::Synced,
            Event::Init => return,
        };
        // No subscriber yet is fine: the store has it.
        let _ = self.changes.send(change);
    }
}

/// The consumer stores every controller of the engine shares.
#[derive(Clone)]
pub struct ConsumerStores {
    /// Every Connection.
    pub connections: SharedStore<Connection>,
    /// The Secrets of the konnector's namespace (the kubeconfigs the engager connects with).
    pub secrets: SharedStore<DynamicObject>,
    /// The names of Connections a binding of which is being deleted or went away, published by
    /// the binding controllers from their watches: a deleted Connection waiting for its bindings
    /// goes on its last binding's event, not on a requeue (issue 24 item 21).
    pub binding_changes: broadcast::Sender<String>,
}

impl ConsumerStores {
    /// The stores (empty) and the future that feeds them from one watch each; run it as long
    /// as any reader runs.
    pub fn new(ctx: &Context) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (connections, conn_writer) = reflector::store::<Connection>();
        let secret_writer: Writer<DynamicObject> = Writer::new(secret_resource());
        let stores = Self {
            connections: SharedStore::new(connections),
            secrets: SharedStore::new(secret_writer.as_reader()),
            binding_changes: broadcast::channel(FAN_OUT).0,
        };
        let conn_stream = reflector::reflector(
            conn_writer,
            crate::typed::typed_watcher::<Connection>(ctx.consumer.clone(), None, ctx.watcher_config()),
        );
        let secret_stream = reflector::reflector(
            secret_writer,
            watcher(
                ctx.consumer.clone(),
                secret_resource(),
                Some(ctx.config.namespace.clone()),
                ctx.watcher_config(),
            ),
        );
        let feed = {
            let (c, s) = (stores.connections.clone(), stores.secrets.clone());
            async move {
                let conns = conn_stream.for_each(move |event| {
                    match event {
                        Ok(event) => c.publish(&event),
                        Err(e) => tracing::debug!(error = %kbind_cluster::into_seam_error(e), "Connection watch failed; it retries"),
                    }
                    async {}
                });
                let secrets = secret_stream.for_each(move |event| {
                    match event {
                        Ok(event) => s.publish(&event),
                        Err(e) => tracing::debug!(error = %kbind_cluster::into_seam_error(e), "Secret watch failed; it retries"),
                    }
                    async {}
                });
                tokio::join!(conns, secrets);
            }
        };
        (stores, feed)
    }
}

/// The Secret resource's dynamic type (for keys into the Secret store).
pub(crate) fn secret_key(namespace: &str, name: &str) -> reflector::ObjectRef<DynamicObject> {
    reflector::ObjectRef::new_with(name, ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()))
        .within(namespace)
}
