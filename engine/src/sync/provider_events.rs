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
    /// The copy as our latest write left it (lean, like the cache's).
    latest: Option<Arc<DynamicObject>>,
    /// What that write and the own writes just before it replaced, oldest first: the
    /// resourceVersions a cache that has not heard of them can still show (`None`: no copy,
    /// for a write that created it).
    superseded: Vec<Option<String>>,
}

impl ProviderEchoes {
    /// The syncer wrote provider object `target`, replacing the copy at resourceVersion
    /// `replaced` (`None`: creating it), and the server answered `copy`; `cached` is the
    /// resourceVersion the cache holds now. A cache that holds the answer already has its event
    /// behind it: nothing to remember, no echo to wait for.
    pub(crate) fn own_copy(
        &self,
        target: ObjectKey,
        copy: &DynamicObject,
        replaced: Option<String>,
        cached: Option<&str>,
    ) {
        let Some(rv) = copy.metadata.resource_version.clone() else {
            return;
        };
        if cached == Some(rv.as_str()) {
            return;
        }
        let mut lean = copy.clone();
        crate::provider::lean(&mut lean);
        let mut own = self.lock();
        let writes = own.entry(target).or_default();
        writes.versions.insert(rv);
        let continues = writes.latest.as_ref().is_some_and(|previous| {
            previous.metadata.resource_version.is_some() && previous.metadata.resource_version == replaced
        });
        if !continues {
            writes.superseded.clear();
        }
        writes.superseded.push(replaced);
        writes.latest = Some(Arc::new(lean));
    }

    /// The copy our latest write left at `target`, while the cache (at resourceVersion
    /// `cached`) still holds what that write, or an own write just before it, replaced.
    /// Anything else in the cache is our write's echo or a later change: the cache knows
    /// better, and the copy is forgotten.
    pub(crate) fn latest(&self, target: &ObjectKey, cached: Option<&str>) -> Option<Arc<DynamicObject>> {
        let mut own = self.lock();
        let writes = own.get_mut(target)?;
        let behind = writes.superseded.iter().any(|rv| rv.as_deref() == cached);
        if behind && let Some(copy) = &writes.latest {
            return Some(copy.clone());
        }
        writes.latest = None;
        writes.superseded.clear();
        None
    }

    /// Forgets every remembered copy: after missed events nothing says which is still newest.
    pub(crate) fn forget_copies(&self) {
        for writes in self.lock().values_mut() {
            writes.latest = None;
            writes.superseded.clear();
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
        echoes.own_copy(key.clone(), &copy_at("5"), None, None);
        assert!(echoes.is_echo(key.clone(), Some("5")));
        assert!(!echoes.is_echo(key.clone(), Some("5")), "an echo counts once");
        echoes.own_copy(key.clone(), &copy_at("7"), Some("5".into()), Some("5"));
        assert!(
            !echoes.is_echo(key.clone(), Some("6")),
            "someone else's write is a change"
        );
        assert!(!echoes.is_echo(key, Some("7")), "older own writes are forgotten");
    }

    #[test]
    fn our_latest_copy_stands_in_only_for_what_our_writes_replaced() {
        let echoes = ProviderEchoes::default();
        let key = ObjectKey::namespaced("a", "w");
        echoes.own_copy(key.clone(), &copy_at("5"), None, None);
        echoes.own_copy(key.clone(), &copy_at("6"), Some("5".into()), None);
        for cached in [None, Some("5")] {
            let latest = echoes.latest(&key, cached).expect("the cache is behind our writes");
            assert_eq!(latest.metadata.resource_version.as_deref(), Some("6"));
            assert!(latest.metadata.managed_fields.is_none(), "kept lean, like the cache");
        }
        assert!(
            echoes.latest(&key, Some("7")).is_none(),
            "someone else's write after ours reached the cache: it decides"
        );
        assert!(echoes.latest(&key, None).is_none(), "and the copy is forgotten");

        echoes.own_copy(key.clone(), &copy_at("9"), Some("8".into()), Some("8"));
        assert!(
            echoes.latest(&key, Some("6")).is_none(),
            "a write that did not replace our last copy starts afresh: 6 is not behind it"
        );

        echoes.own_copy(key.clone(), &copy_at("10"), Some("9".into()), Some("10"));
        assert!(
            echoes.latest(&key, Some("10")).is_none(),
            "the cache already holds our write: nothing remembered"
        );
        assert!(
            !echoes.is_echo(key.clone(), Some("10")),
            "its event is behind us, so it is not awaited as an echo either"
        );

        echoes.own_copy(key.clone(), &copy_at("12"), Some("11".into()), Some("11"));
        echoes.forget_copies();
        assert!(
            echoes.latest(&key, Some("11")).is_none(),
            "after missed events nothing is known"
        );
        assert!(echoes.is_echo(key, Some("12")), "the echo is still recognised");
    }
}
