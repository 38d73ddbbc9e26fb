//! The provider side of a syncer: which shared provider stores it follows, and the stream of
//! their change events (DESIGN.md §4 "reads and events": no polling, a resync only as a
//! backstop).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use futures::stream::SelectAll;
use futures::{Stream, StreamExt};
use kbind_cluster::DynamicObject;
use tokio::sync::{broadcast, mpsc};

use crate::mapper::ObjectKey;
use crate::provider::{CacheEvent, CachedStore, ProviderCache};

/// What the syncer must look at after a provider event.
#[derive(Debug, Clone)]
pub(crate) enum ProviderChange {
    /// This provider object changed or went.
    Object(Arc<DynamicObject>),
    /// Anything may have changed: a store relisted, or the syncer fell behind its events.
    Everything,
}

/// The provider stores one syncer follows: the cluster-wide one, or one per namespace in use
/// when the credentials may not list the GVR cluster-wide. Following a store subscribes to its
/// events; the subscription reaches the syncer's event stream through `added`.
pub(crate) struct ProviderWatches {
    /// `true` once a cluster-wide list was refused: watch per namespace in use.
    per_namespace: AtomicBool,
    stores: Mutex<BTreeMap<Option<String>, CachedStore>>,
    added: mpsc::UnboundedSender<broadcast::Receiver<CacheEvent>>,
    /// Taken once by [`ProviderWatches::changes`].
    receiver: Mutex<Option<mpsc::UnboundedReceiver<broadcast::Receiver<CacheEvent>>>>,
}

impl Default for ProviderWatches {
    fn default() -> Self {
        let (added, receiver) = mpsc::unbounded_channel();
        Self {
            per_namespace: AtomicBool::new(false),
            stores: Mutex::new(BTreeMap::new()),
            added,
            receiver: Mutex::new(Some(receiver)),
        }
    }
}

impl ProviderWatches {
    /// Switches to one watch per namespace in use.
    pub(crate) fn set_per_namespace(&self) {
        self.per_namespace.store(true, Ordering::SeqCst);
    }

    /// Follows the store of `namespace` (`None`: cluster-wide) unless already followed.
    pub(crate) fn follow(&self, cache: &ProviderCache, res: &kbind_cluster::ApiResource, namespace: Option<&str>) {
        let key = namespace.map(str::to_string);
        let mut stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        if stores.contains_key(&key) {
            return;
        }
        let (cached, events) = cache.subscribe(res, namespace);
        stores.insert(key, cached);
        // The receiving end lives as long as the syncer's controller; a closed one means the
        // syncer is stopping and nobody needs the events.
        let _ = self.added.send(events);
    }

    /// In per-namespace mode, follows `namespace`.
    pub(crate) fn follow_namespace(
        &self,
        cache: &ProviderCache,
        res: &kbind_cluster::ApiResource,
        namespace: Option<&str>,
    ) {
        if self.per_namespace.load(Ordering::SeqCst) {
            self.follow(cache, res, namespace);
        }
    }

    /// The followed store that holds objects of `namespace`.
    pub(crate) fn store_for(&self, namespace: Option<&str>) -> Option<CachedStore> {
        let stores = self.stores.lock().unwrap_or_else(|p| p.into_inner());
        stores
            .get(&None)
            .or_else(|| stores.get(&namespace.map(str::to_string)))
            .cloned()
    }

    /// The events of every store followed now or later, merged. Yields nothing if called twice.
    pub(crate) fn changes(&self) -> impl Stream<Item = ProviderChange> + Send + 'static {
        let added = self.receiver.lock().unwrap_or_else(|p| p.into_inner()).take();
        let followed: SelectAll<futures::stream::BoxStream<'static, ProviderChange>> = SelectAll::new();
        futures::stream::unfold((added, followed), |(mut added, mut followed)| async move {
            loop {
                tokio::select! {
                    more = async { added.as_mut()?.recv().await }, if added.is_some() => match more {
                        Some(events) => followed.push(subscription(events).boxed()),
                        None => added = None,
                    },
                    Some(change) = followed.next(), if !followed.is_empty() => {
                        return Some((change, (added, followed)));
                    }
                    else => return None,
                }
            }
        })
    }
}

/// One store's events as changes. A subscriber that fell behind lost events it cannot get
/// back (the broadcast buffer overwrote them), among them perhaps a delete that nothing else
/// would report; looking at everything again is the only way not to lose that change.
fn subscription(events: broadcast::Receiver<CacheEvent>) -> impl Stream<Item = ProviderChange> + Send + 'static {
    futures::stream::unfold(events, |mut events| async move {
        let change = match events.recv().await {
            Ok(CacheEvent::Applied(obj) | CacheEvent::Deleted(obj)) => ProviderChange::Object(obj),
            Ok(CacheEvent::Relisted) => ProviderChange::Everything,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::info!(
                    missed,
                    "fell behind the provider cache's events; looking at every object again"
                );
                ProviderChange::Everything
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((change, events))
    })
}

/// resourceVersions of the syncer's own provider writes, whose watch events are echoes: they
/// re-trigger a reconcile (harmless, it finds the copy current in the cache) but are not
/// changes whose latency is measured.
#[derive(Debug, Default)]
pub(crate) struct ProviderEchoes {
    own: Mutex<BTreeMap<ObjectKey, OwnWrites>>,
}

/// The own writes of one provider object whose events have not arrived yet.
#[derive(Debug, Default)]
struct OwnWrites {
    /// Their resourceVersions.
    versions: BTreeSet<String>,
    /// The copy as our latest write left it (lean, like the cache's): fresher than the cache
    /// until the echoes arrive.
    latest: Option<Arc<DynamicObject>>,
}

impl ProviderEchoes {
    /// The syncer wrote provider object `target` and the server answered `copy`.
    pub(crate) fn own_copy(&self, target: ObjectKey, copy: &DynamicObject) {
        let Some(rv) = copy.metadata.resource_version.clone() else {
            return;
        };
        let mut lean = copy.clone();
        crate::provider::lean(&mut lean);
        let mut own = self.lock();
        let writes = own.entry(target).or_default();
        writes.versions.insert(rv);
        writes.latest = Some(Arc::new(lean));
    }

    /// The copy our latest write left at `target`, while the cache has not heard of it.
    pub(crate) fn latest(&self, target: &ObjectKey) -> Option<Arc<DynamicObject>> {
        self.lock().get(target)?.latest.clone()
    }

    /// Forgets every remembered copy: after missed events nothing says which are still newest.
    pub(crate) fn forget_copies(&self) {
        for writes in self.lock().values_mut() {
            writes.latest = None;
        }
    }

    /// Whether an event of `target` at `resource_version` is the echo of an own write.
    pub(crate) fn is_echo(&self, target: ObjectKey, resource_version: Option<&str>) -> bool {
        let mut own = self.lock();
        let Some(writes) = own.get_mut(&target) else {
            return false;
        };
        if resource_version.is_some_and(|rv| writes.versions.remove(rv)) {
            if writes.versions.is_empty() {
                own.remove(&target);
            }
            return true;
        }
        // Events arrive in order: older own writes will not show up any more.
        own.remove(&target);
        false
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<ObjectKey, OwnWrites>> {
        self.own.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_subscriber_that_falls_behind_looks_at_everything() {
        let (tx, rx) = broadcast::channel(2);
        let obj: Arc<DynamicObject> = Arc::new(
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "w", "namespace": "a"}}))
            .expect("an object"),
        );
        for _ in 0..5 {
            tx.send(CacheEvent::Applied(obj.clone())).expect("a subscriber");
        }
        let mut changes = Box::pin(subscription(rx));
        assert!(
            matches!(changes.next().await, Some(ProviderChange::Everything)),
            "missed events become a full look"
        );
        assert!(matches!(changes.next().await, Some(ProviderChange::Object(_))));
        tx.send(CacheEvent::Deleted(obj)).expect("a subscriber");
        assert!(matches!(changes.next().await, Some(ProviderChange::Object(_))));
        drop(tx);
        assert!(changes.next().await.is_some(), "the last buffered event");
        assert!(changes.next().await.is_none(), "a closed cache ends the stream");
    }

    fn copy_at(rv: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w", "namespace": "a", "resourceVersion": rv,
                "managedFields": [{"manager": "someone", "operation": "Apply"}]}}))
        .expect("an object")
    }

    #[test]
    fn echoes_of_own_provider_writes_are_recognised_once() {
        let echoes = ProviderEchoes::default();
        let key = ObjectKey::namespaced("a", "w");
        echoes.own_copy(key.clone(), &copy_at("5"));
        assert!(echoes.is_echo(key.clone(), Some("5")));
        assert!(!echoes.is_echo(key.clone(), Some("5")), "an echo counts once");
        echoes.own_copy(key.clone(), &copy_at("7"));
        assert!(
            !echoes.is_echo(key.clone(), Some("6")),
            "someone else's write is a change"
        );
        assert!(!echoes.is_echo(key, Some("7")), "older own writes are forgotten");
    }

    #[test]
    fn our_latest_copy_stands_in_for_the_cache_until_its_echoes_arrive() {
        let echoes = ProviderEchoes::default();
        let key = ObjectKey::namespaced("a", "w");
        echoes.own_copy(key.clone(), &copy_at("5"));
        echoes.own_copy(key.clone(), &copy_at("6"));
        let latest = echoes.latest(&key).expect("our latest write");
        assert_eq!(latest.metadata.resource_version.as_deref(), Some("6"));
        assert!(latest.metadata.managed_fields.is_none(), "kept lean, like the cache");
        assert!(echoes.is_echo(key.clone(), Some("5")));
        assert!(echoes.latest(&key).is_some(), "the cache has not seen 6 yet");
        assert!(echoes.is_echo(key.clone(), Some("6")));
        assert!(echoes.latest(&key).is_none(), "the cache has caught up");

        echoes.own_copy(key.clone(), &copy_at("8"));
        assert!(!echoes.is_echo(key.clone(), Some("9")));
        assert!(echoes.latest(&key).is_none(), "someone else wrote after us");

        echoes.own_copy(key.clone(), &copy_at("10"));
        echoes.forget_copies();
        assert!(echoes.latest(&key).is_none(), "after missed events nothing is known");
        assert!(echoes.is_echo(key, Some("10")), "the echo is still recognised");
    }
}
