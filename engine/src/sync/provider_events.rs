//! The provider side of a syncer: which shared provider stores it follows, and the stream of
//! their change events (contract §4 "reads and events": no polling, a resync only as a
//! backstop).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::stream::SelectAll;
use futures::{Stream, StreamExt};
use kbind_cluster::DynamicObject;
use parking_lot::Mutex;
use tokio::sync::{broadcast, mpsc};

use crate::mapper::ObjectKey;
use crate::provider::{CacheEvent, CachedStore, ProviderCache};

/// What the syncer must look at after a provider event.
#[derive(Debug, Clone)]
pub(crate) enum ProviderChange {
    /// This provider object changed or went.
    Object(Arc<DynamicObject>),
    /// Events were missed (the syncer fell behind) or the store relisted: these copies differ
    /// from what the syncer last heard of them, and copies it knew may have gone without an
    /// event (the syncer looks at the objects whose copy is absent too). Unchanged copies are
    /// not in the list: a lag or a relist costs no look at them, let alone a write.
    Missed {
        /// The copies that are new or changed since the syncer last heard of them.
        changed: Vec<Arc<DynamicObject>>,
    },
    /// A followed store's list or watch started failing, failed again, or works again.
    Health,
}

/// A followed store and its events.
type Followed = (broadcast::Receiver<CacheEvent>, CachedStore);

/// The provider stores one syncer follows: the cluster-wide one, or one per namespace in use
/// when the credentials may not list the GVR cluster-wide. Following a store subscribes to its
/// events; the subscription reaches the syncer's event stream through `added`.
pub(crate) struct ProviderWatches {
    /// `true` once a cluster-wide list was refused: watch per namespace in use.
    per_namespace: AtomicBool,
    stores: Mutex<BTreeMap<Option<String>, CachedStore>>,
    added: mpsc::UnboundedSender<Followed>,
    /// Taken once by [`ProviderWatches::changes`].
    receiver: Mutex<Option<mpsc::UnboundedReceiver<Followed>>>,
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

    /// Follows the store of `namespace` (`None`: cluster-wide) unless already followed; whether
    /// it was not.
    pub(crate) fn follow(
        &self,
        cache: &ProviderCache,
        res: &kbind_cluster::ApiResource,
        namespace: Option<&str>,
    ) -> bool {
        let key = namespace.map(str::to_string);
        let mut stores = self.stores.lock();
        if stores.contains_key(&key) {
            return false;
        }
        let (cached, events) = cache.subscribe(res, namespace);
        stores.insert(key, cached.clone());
        // The receiving end lives as long as the syncer's controller; a closed one means the
        // syncer is stopping and nobody needs the events.
        let _ = self.added.send((events, cached));
        true
    }

    /// In per-namespace mode, follows `namespace`; whether it was not followed before.
    pub(crate) fn follow_namespace(
        &self,
        cache: &ProviderCache,
        res: &kbind_cluster::ApiResource,
        namespace: Option<&str>,
    ) -> bool {
        self.per_namespace.load(Ordering::SeqCst) && self.follow(cache, res, namespace)
    }

    /// How the followed stores follow the provider: whether all listed once, and the failure of
    /// one that fails now.
    pub(crate) fn health(&self) -> (bool, Option<crate::provider::WatchFailure>) {
        let stores = self.stores.lock();
        // Per namespace in use, no namespace in use yet is nothing to list.
        let chosen = !stores.is_empty() || self.per_namespace.load(Ordering::SeqCst);
        let listed = chosen && stores.values().all(CachedStore::is_synced);
        (listed, stores.values().find_map(CachedStore::failure))
    }

    /// The followed store that holds objects of `namespace`.
    pub(crate) fn store_for(&self, namespace: Option<&str>) -> Option<CachedStore> {
        let stores = self.stores.lock();
        stores
            .get(&None)
            .or_else(|| stores.get(&namespace.map(str::to_string)))
            .cloned()
    }

    /// The events of every store followed now or later, merged. Yields nothing if called twice.
    pub(crate) fn changes(&self) -> impl Stream<Item = ProviderChange> + Send + 'static {
        let added = self.receiver.lock().take();
        let followed: SelectAll<futures::stream::BoxStream<'static, ProviderChange>> = SelectAll::new();
        futures::stream::unfold((added, followed), |(mut added, mut followed)| async move {
            loop {
                tokio::select! {
                    more = async { added.as_mut()?.recv().await }, if added.is_some() => match more {
                        Some((events, store)) => followed.push(subscription(events, store).boxed()),
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

/// What a subscriber last heard of each copy: a hash of its key to a hash of its
/// resourceVersion (16 bytes an object; names are not kept, the syncer finds gone copies from
/// its own objects).
type Heard = HashMap<u64, u64>;

/// One store's events as changes. A subscriber that fell behind lost events it cannot get
/// back (the broadcast buffer overwrote them), and a relist replaces the store wholesale: in
/// both cases the store now is compared with what the subscriber heard, and only the copies
/// that differ are passed on (with the hint that some may have gone).
fn subscription(
    events: broadcast::Receiver<CacheEvent>,
    store: CachedStore,
) -> impl Stream<Item = ProviderChange> + Send + 'static {
    let heard: Heard = if store.is_synced() {
        store.store().state().iter().filter_map(|o| fingerprint(o)).collect()
    } else {
        Heard::new()
    };
    futures::stream::unfold((events, heard, store), |(mut events, mut heard, store)| async move {
        let change = match events.recv().await {
            Ok(CacheEvent::Applied(obj)) => {
                if let Some((key, rv)) = fingerprint(&obj) {
                    heard.insert(key, rv);
                }
                ProviderChange::Object(obj)
            }
            Ok(CacheEvent::Deleted(obj)) => {
                if let Some((key, _)) = fingerprint(&obj) {
                    heard.remove(&key);
                }
                ProviderChange::Object(obj)
            }
            Ok(CacheEvent::Relisted) => missed(&store, &mut heard),
            Ok(CacheEvent::Health) => ProviderChange::Health,
            Err(broadcast::error::RecvError::Lagged(count)) => {
                tracing::info!(
                    missed = count,
                    "fell behind the provider cache's events; looking at the copies that differ"
                );
                missed(&store, &mut heard)
            }
            Err(broadcast::error::RecvError::Closed) => return None,
        };
        Some((change, (events, heard, store)))
    })
}

/// The copies of `store` that differ from what was `heard`, which becomes the store as it is.
fn missed(store: &CachedStore, heard: &mut Heard) -> ProviderChange {
    let now: Vec<Arc<DynamicObject>> = store.store().state();
    let mut fresh = Heard::with_capacity(now.len());
    let mut changed = Vec::new();
    for copy in now {
        let Some((key, rv)) = fingerprint(&copy) else {
            continue;
        };
        if heard.get(&key) != Some(&rv) {
            changed.push(copy);
        }
        fresh.insert(key, rv);
    }
    *heard = fresh;
    ProviderChange::Missed { changed }
}

/// A copy's key and resourceVersion, hashed.
fn fingerprint(obj: &DynamicObject) -> Option<(u64, u64)> {
    let key = format!(
        "{}/{}",
        obj.metadata.namespace.as_deref().unwrap_or_default(),
        obj.metadata.name.as_deref()?
    );
    Some((
        fnv(&key),
        fnv(obj.metadata.resource_version.as_deref().unwrap_or_default()),
    ))
}

/// FNV-1a: a stable, cheap hash for [`fingerprint`].
fn fnv(text: &str) -> u64 {
    text.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
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
        let mut own = self.own.lock();
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
        let mut own = self.own.lock();
        let writes = own.get_mut(target)?;
        let behind = writes.superseded.iter().any(|rv| rv.as_deref() == cached);
        if behind && let Some(copy) = &writes.latest {
            return Some(copy.clone());
        }
        writes.latest = None;
        writes.superseded.clear();
        None
    }

    /// Whether an event of `target` at `resource_version` is the echo of an own write.
    pub(crate) fn is_echo(&self, target: ObjectKey, resource_version: Option<&str>) -> bool {
        let mut own = self.own.lock();
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
}

#[cfg(test)]
mod tests {
    use super::*;

    fn configmaps() -> kbind_cluster::ApiResource {
        kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn configmap(name: &str, value: &str) -> DynamicObject {
        serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "a"}, "data": {"v": value}}))
        .expect("an object")
    }

    fn names(changed: &[Arc<DynamicObject>]) -> BTreeSet<String> {
        changed.iter().filter_map(|c| c.metadata.name.clone()).collect()
    }

    /// A subscriber that fell behind (or a store that relisted) hears only of the copies that
    /// changed while it was behind, and keeps knowing which provider writes were its own; an
    /// unchanged copy costs nothing.
    #[tokio::test(start_paused = true)]
    async fn a_subscriber_that_falls_behind_hears_only_of_what_changed() {
        use kbind_cluster::ClusterClient;
        let cluster = fakeapi::FakeCluster::builder("provider").seed(5).build();
        let admin = cluster.admin_client();
        let client: Arc<dyn kbind_cluster::ClusterClient> = Arc::new(cluster.admin_client());
        let namespace: DynamicObject =
            serde_json::from_value(serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "a"}}))
            .expect("a namespace");
        admin
            .create(
                &kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                None,
                &namespace,
                &Default::default(),
            )
            .await
            .expect("create the namespace");
        for i in 0..10 {
            admin
                .create(
                    &configmaps(),
                    Some("a"),
                    &configmap(&format!("cm-{i}"), "0"),
                    &Default::default(),
                )
                .await
                .expect("create");
        }
        let cache = ProviderCache::new(client, &kbind_cluster::backoff::seeded(1));
        let (store, events) = cache.subscribe(&configmaps(), None);
        assert!(store.wait_synced(std::time::Duration::from_secs(10)).await);
        let mut changes = Box::pin(subscription(events, store.clone()));
        // Many more changes than the event buffer holds, while nobody reads the subscription:
        // cm-0..2 change, cm-3 goes, cm-x appears, cm-4 changes 100 times.
        for i in 0..3 {
            admin
                .patch(
                    &configmaps(),
                    Some("a"),
                    &format!("cm-{i}"),
                    &kbind_cluster::Patch::Merge(serde_json::json!({"data": {"v": "1"}})),
                    &Default::default(),
                )
                .await
                .expect("patch");
        }
        admin
            .delete(&configmaps(), Some("a"), "cm-3", &Default::default())
            .await
            .expect("delete");
        admin
            .create(&configmaps(), Some("a"), &configmap("cm-x", "0"), &Default::default())
            .await
            .expect("create");
        for n in 0..100 {
            admin
                .patch(
                    &configmaps(),
                    Some("a"),
                    "cm-4",
                    &kbind_cluster::Patch::Merge(serde_json::json!({"data": {"v": n.to_string()}})),
                    &Default::default(),
                )
                .await
                .expect("patch");
        }
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
        while store
            .get(Some("a"), "cm-4")
            .and_then(|c| c.data.pointer("/data/v").cloned())
            != Some(serde_json::json!("99"))
        {
            assert!(tokio::time::Instant::now() < deadline, "the cache never caught up");
            tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        }
        let Some(ProviderChange::Missed { changed }) = changes.next().await else {
            panic!("a subscriber that fell behind is told what it missed");
        };
        let expected: BTreeSet<String> = ["cm-0", "cm-1", "cm-2", "cm-4", "cm-x"]
            .into_iter()
            .map(String::from)
            .collect();
        assert_eq!(
            names(&changed),
            expected,
            "only the changed copies; cm-5..9 cost nothing"
        );
        // Caught up: later events come one by one again, and a relist with nothing new passes
        // nothing on.
        admin
            .delete(&configmaps(), Some("a"), "cm-5", &Default::default())
            .await
            .expect("delete");
        loop {
            match changes.next().await {
                Some(ProviderChange::Object(obj)) if obj.metadata.name.as_deref() == Some("cm-5") => break,
                Some(_) => {}
                None => panic!("the stream ended"),
            }
        }
        cache.stop();
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
        assert!(echoes.is_echo(key, Some("12")), "the echo is recognised");
    }
}
