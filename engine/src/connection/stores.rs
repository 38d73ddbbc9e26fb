//! One watch per thing (reads come from watch-fed stores, never polls): one Connection store and
//! one Secret store (the konnector's namespace) on the consumer, each fed by one watch and
//! shared by the Connection reconciler, the engager and the binding reconciler.
//!
//! Each store is a kube-runtime reflector `Store`; its events fan out through a broadcast
//! channel. A subscriber that falls behind (`Lagged`) is handed every cached object, and a
//! `Deleted` for each object it knew that the store no longer holds, instead of the events it
//! missed: it converges on the store as it is, never on a partial history, and never misses a
//! delete.

use std::collections::HashMap;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kbind_api::Connection;
use kbind_cluster::watcher::{Event, watcher};
use kbind_cluster::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, Store, store::Writer};
use tokio::sync::broadcast;

use super::secret_resource;
use crate::context::Context;

/// How many changes a slow subscriber may fall behind before it is resynced from the store.
const FAN_OUT: usize = 1024;

/// One name notification as a subscriber receives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Wake<T> {
    /// This one.
    One(T),
    /// The subscriber fell behind and missed some: every candidate looks again (a missed
    /// wake-up is re-delivered, never lost until the resync).
    All,
}

/// The objects of `store` a wake-up names: `name` for [`Wake::One`] (if `names` says it
/// names it), every one for [`Wake::All`].
pub(crate) fn woken<K>(store: &Store<K>, wake: &Wake<String>, names: impl Fn(&K, &str) -> bool) -> Vec<ObjectRef<K>>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    store
        .state()
        .iter()
        .filter(|obj| match wake {
            Wake::One(name) => names(obj, name),
            Wake::All => true,
        })
        .map(|obj| ObjectRef::from_obj(obj.as_ref()))
        .collect()
}

/// Every value sent on `rx` until it closes, and [`Wake::All`] in place of the values missed
/// while lagging.
pub(crate) fn received<T: Clone + Send + 'static>(
    rx: broadcast::Receiver<T>,
) -> impl Stream<Item = Wake<T>> + Send + 'static {
    futures::stream::unfold(rx, |mut rx| async move {
        match rx.recv().await {
            Ok(value) => Some((Wake::One(value), rx)),
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::debug!(missed, "a wake-up subscriber fell behind; waking every candidate");
                Some((Wake::All, rx))
            }
            Err(broadcast::error::RecvError::Closed) => None,
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
    dyntype: K::DynamicType,
    listed: crate::listed::Listed,
}

impl<K> SharedStore<K>
where
    K: kube::Resource + Clone + Send + Sync + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    fn new(store: Store<K>, dyntype: K::DynamicType) -> Self {
        Self::with_capacity(store, dyntype, FAN_OUT)
    }

    fn with_capacity(store: Store<K>, dyntype: K::DynamicType, capacity: usize) -> Self {
        Self {
            store,
            changes: broadcast::channel(capacity).0,
            dyntype,
            listed: crate::listed::Listed::default(),
        }
    }

    /// The cached objects.
    pub fn store(&self) -> &Store<K> {
        &self.store
    }

    /// Whether the first list completed.
    pub fn is_synced(&self) -> bool {
        self.listed.is_listed()
    }

    /// Whether the first list completed, shared with every waiter.
    pub(crate) fn listed(&self) -> crate::listed::Listed {
        self.listed.clone()
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
        // What this subscriber was last told of each object, so a lag can replay deletes.
        let known: HashMap<ObjectRef<K>, Arc<K>> = store
            .state()
            .into_iter()
            .map(|obj| (ObjectRef::from_obj_with(obj.as_ref(), self.dyntype.clone()), obj))
            .collect();
        let dyntype = self.dyntype.clone();
        let following = futures::stream::unfold((rx, known), move |(mut rx, mut known)| {
            let (store, dyntype) = (store.clone(), dyntype.clone());
            async move {
                match rx.recv().await {
                    Ok(change) => {
                        match &change {
                            Change::Applied(obj) => {
                                known.insert(ObjectRef::from_obj_with(obj.as_ref(), dyntype), obj.clone());
                            }
                            Change::Deleted(obj) => {
                                known.remove(&ObjectRef::from_obj_with(obj.as_ref(), dyntype));
                            }
                            Change::Synced => {}
                        }
                        Some((vec![change], (rx, known)))
                    }
                    Err(broadcast::error::RecvError::Lagged(missed)) => {
                        tracing::debug!(missed, "a store subscriber fell behind; replaying the store");
                        let now: HashMap<ObjectRef<K>, Arc<K>> = store
                            .state()
                            .into_iter()
                            .map(|obj| (ObjectRef::from_obj_with(obj.as_ref(), dyntype.clone()), obj))
                            .collect();
                        // In the store's order and the gone ones by name, so a seeded world replays.
                        let mut gone: Vec<&ObjectRef<K>> = known.keys().filter(|key| !now.contains_key(*key)).collect();
                        gone.sort_by(|a, b| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)));
                        let mut replay: Vec<Change<K>> = gone
                            .into_iter()
                            .filter_map(|key| known.get(key).cloned())
                            .map(Change::Deleted)
                            .collect();
                        replay.extend(store.state().into_iter().map(Change::Applied));
                        replay.push(Change::Synced);
                        Some((replay, (rx, now)))
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
            Event::InitDone => {
                self.listed.mark();
                Change::Synced
            }
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
    /// goes on its last binding's event, not on a requeue.
    pub binding_changes: broadcast::Sender<String>,
}

impl ConsumerStores {
    /// The stores (empty) and the future that feeds them from one watch each; run it as long
    /// as any reader runs.
    pub fn new(ctx: &Context) -> (Self, impl std::future::Future<Output = ()> + Send + 'static) {
        let (connections, conn_writer) = reflector::store::<Connection>();
        let secret_writer: Writer<DynamicObject> = Writer::new(secret_resource());
        let stores = Self {
            connections: SharedStore::new(connections, ()),
            secrets: SharedStore::new(secret_writer.as_reader(), secret_resource()),
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

#[cfg(test)]
mod tests {
    use super::*;

    fn connection(name: &str) -> Connection {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": name}},
        }))
        .expect("a Connection")
    }

    fn name_of(change: &Change<Connection>) -> String {
        match change {
            Change::Applied(c) => format!("applied {}", c.metadata.name.clone().unwrap_or_default()),
            Change::Deleted(c) => format!("deleted {}", c.metadata.name.clone().unwrap_or_default()),
            Change::Synced => "synced".into(),
        }
    }

    /// A subscriber that fell behind must be handed the deletes it missed, not only every cached
    /// object, or a Connection deleted meanwhile stays alive for it.
    #[tokio::test]
    async fn a_subscriber_that_falls_behind_hears_of_the_deletes_it_missed() {
        let (reader, mut writer) = reflector::store::<Connection>();
        let shared = SharedStore::with_capacity(reader, (), 2);
        for event in [
            Event::Init,
            Event::InitApply(connection("a")),
            Event::InitApply(connection("b")),
            Event::InitDone,
        ] {
            writer.apply_watcher_event(&event);
            shared.publish(&event);
        }
        let mut changes = Box::pin(shared.changes());
        let mut first = Vec::new();
        for _ in 0..3 {
            first.push(name_of(&changes.next().await.expect("a change")));
        }
        first[..2].sort();
        assert_eq!(first, ["applied a", "applied b", "synced"]);
        // More changes than the buffer holds, unread: a goes, c and d come, b changes twice.
        for event in [
            Event::Delete(connection("a")),
            Event::Apply(connection("c")),
            Event::Apply(connection("b")),
            Event::Apply(connection("d")),
            Event::Apply(connection("b")),
        ] {
            writer.apply_watcher_event(&event);
            shared.publish(&event);
        }
        let mut replay = Vec::new();
        loop {
            let change = name_of(&changes.next().await.expect("a change"));
            let done = change == "synced";
            replay.push(change);
            if done {
                break;
            }
        }
        assert_eq!(replay.first().map(String::as_str), Some("deleted a"), "{replay:?}");
        for name in ["applied b", "applied c", "applied d"] {
            assert!(replay.iter().any(|c| c == name), "{name} missing from {replay:?}");
        }
    }

    /// A wake-up subscriber that fell behind is told to wake every candidate.
    #[tokio::test]
    async fn a_missed_wake_up_wakes_everyone() {
        let (tx, rx) = broadcast::channel(2);
        for name in ["a", "b", "c", "d"] {
            tx.send(name.to_string()).expect("a subscriber");
        }
        let mut wakes = Box::pin(received(rx));
        assert_eq!(wakes.next().await, Some(Wake::All), "missed names are not lost");
        assert_eq!(wakes.next().await, Some(Wake::One("c".to_string())));
    }
}
