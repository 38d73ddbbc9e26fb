//! `ProviderCache`: one shared watch per GVR of an engaged provider, created on demand, all
//! stopped together on disengage. When the credentials may not watch a GVR cluster-wide, the
//! syncer asks for one shared watch per (GVR, namespace in use) instead (contract §4 "RBAC").
//!
//! Each watch keeps one store and publishes its changes ([`CacheEvent`]) to every subscriber,
//! so syncers are driven by events instead of polling the stores (contract §4 "reads and
//! events"). Cached objects are lean: see [`lean`].

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::StreamExt;
use kbind_api::consts::field_manager;
use kbind_cluster::watcher::{Event, WatchStreamExt, watcher};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
use kube::runtime::reflector::{ObjectRef, Store, store::Writer};
use parking_lot::Mutex;
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// Events a subscriber may fall behind by before it is told to look at everything again
/// ([`broadcast::error::RecvError::Lagged`]). Events share their objects with the store, but
/// tokio allocates every slot up front, for every bound API, so the buffer is small. The
/// subscribers only turn events into queue keys, so they
/// keep up with a watch's pace as long as the publisher lets them run: it yields after every
/// [`PUBLISH_RUN`] events (one HTTP/2 read can hold hundreds). A lag costs one look at every
/// object of the store.
const EVENT_BUFFER: usize = 64;
/// Events published in a row before the publishing task yields, so that subscribers woken by
/// them run before the buffer could wrap; well under [`EVENT_BUFFER`].
const PUBLISH_RUN: usize = 16;
/// [`EVENT_BUFFER`] of a watch of one object by name (a pulled CRD): a handful of events. Every
/// buffer slot is allocated up front, for every bound API; a lag only means one look at the
/// object again.
const NAMED_EVENT_BUFFER: usize = 8;

/// The annotation `kubectl apply` keeps a whole copy of the object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// One change of a watched store, published after the store applied it.
#[derive(Debug, Clone)]
pub enum CacheEvent {
    /// An object was created or changed (the store's copy).
    Applied(Arc<DynamicObject>),
    /// An object was deleted (as last seen).
    Deleted(Arc<DynamicObject>),
    /// The watch (re)listed: objects may have appeared, changed or vanished without an event of
    /// their own (a relist replaces the store wholesale), so every subscriber looks at all of
    /// its objects again.
    Relisted,
    /// The watch started failing, failed again, or works again ([`CachedStore::failure`]).
    Health,
}

/// Why a watched store is not following its provider now: the last error of its list or watch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WatchFailure {
    /// `list` (the first list or a relist failed) or `watch`.
    pub verb: &'static str,
    /// The provider's answer or the transport's error, in words (never a credential).
    pub cause: String,
    /// When the watch first failed since it last worked.
    pub since: tokio::time::Instant,
}

impl WatchFailure {
    /// A failure of `verb` now, or one that goes on since `earlier` failed.
    pub fn new(verb: &'static str, cause: String, earlier: Option<&WatchFailure>) -> Self {
        let since = earlier.map_or_else(tokio::time::Instant::now, |f| f.since);
        Self { verb, cause, since }
    }

    /// Whether to report it: before a side's first list every failure is, after it only one
    /// that has lasted `grace` (the provider link's window), so a provider that blinks — an
    /// apiserver restart, a dropped connection — costs a watch its retries, not its binding's
    /// Ready. Its watcher retries at most every 30 s (jittered), and each retry is a new look.
    pub fn reportable(&self, listed: bool, grace: std::time::Duration) -> bool {
        !listed || self.since.elapsed() >= grace
    }
}

/// One watched (GVR, namespace) store and whether it has listed once.
#[derive(Clone)]
pub struct CachedStore {
    store: Store<DynamicObject>,
    res: ApiResource,
    synced: crate::listed::Listed,
    failure: Arc<Mutex<Option<WatchFailure>>>,
}

impl std::fmt::Debug for CachedStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CachedStore")
            .field("resource", &self.res.plural)
            .field("synced", &self.is_synced())
            .finish()
    }
}

impl CachedStore {
    /// The store.
    pub fn store(&self) -> &Store<DynamicObject> {
        &self.store
    }

    /// Whether the watch has listed at least once (the store is a complete, if possibly
    /// slightly old, picture).
    pub fn is_synced(&self) -> bool {
        self.synced.is_listed()
    }

    /// The error of the list or watch, while it is failing.
    pub fn failure(&self) -> Option<WatchFailure> {
        self.failure.lock().clone()
    }

    /// The resource it watches.
    pub fn resource(&self) -> &ApiResource {
        &self.res
    }

    /// Records a failed list or watch; the failure in its new state.
    fn failed(&self, verb: &'static str, cause: String) {
        let mut failure = self.failure.lock();
        *failure = Some(WatchFailure::new(verb, cause, failure.as_ref()));
    }

    /// Forgets a failure once the watch works again; whether there was one.
    fn recovered(&self) -> bool {
        self.failure.lock().take().is_some()
    }

    /// Waits up to `at_most` for the first list; whether the store is synced.
    pub async fn wait_synced(&self, at_most: Duration) -> bool {
        self.synced.wait(at_most).await
    }

    /// The cached object `namespace/name`.
    pub fn get(&self, namespace: Option<&str>, name: &str) -> Option<Arc<DynamicObject>> {
        let r = ObjectRef::new_with(name, self.res.clone());
        let r = match namespace {
            Some(ns) => r.within(ns),
            None => r,
        };
        self.store.get(&r)
    }
}

/// One reflector per (GVR, namespace).
struct Entry {
    cached: CachedStore,
    events: broadcast::Sender<CacheEvent>,
    task: JoinHandle<()>,
}

/// The watch caches of one engaged provider.
pub struct ProviderCache {
    client: Arc<dyn ClusterClient>,
    /// How its watches back off (the engine's jittered policy).
    watcher_config: kbind_cluster::watcher::WatcherConfig,
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

/// Drops what no decision reads from a cached object: `managedFields` (often larger than the
/// object itself) and `kubectl apply`'s last-applied annotation (a whole second copy). Ownership
/// is decided by kbind's marker annotations, which stay. The one managedFields fact the syncer
/// needs, whether our create left an `Update` entry that an apply must still remove (see
/// `drop_create_entry` in `sync/syncer/spec_up.rs`), is kept as that entry without its field set.
pub fn lean(obj: &mut DynamicObject) {
    let leftover: Vec<_> = obj
        .metadata
        .managed_fields
        .take()
        .into_iter()
        .flatten()
        .filter(|entry| {
            entry.manager.as_deref() == Some(field_manager::KONNECTOR)
                && entry.operation.as_deref() == Some("Update")
                && entry.subresource.is_none()
        })
        .map(|mut entry| {
            entry.fields_v1 = None;
            entry.time = None;
            entry
        })
        .collect();
    if !leftover.is_empty() {
        obj.metadata.managed_fields = Some(leftover);
    }
    if let Some(annotations) = obj.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
        if annotations.is_empty() {
            obj.metadata.annotations = None;
        }
    }
}

impl ProviderCache {
    /// A cache whose watches go through `client` and back off with the jitter of `randomness`.
    pub fn new(client: Arc<dyn ClusterClient>, randomness: &kbind_cluster::backoff::SharedRandomness) -> Self {
        Self {
            client,
            watcher_config: crate::context::watcher_config(randomness, crate::context::DEFAULT_WATCH_TIMEOUT),
            entries: Mutex::new(BTreeMap::new()),
            stopped: AtomicBool::new(false),
        }
    }

    /// Renews each watch after `timeout` instead of the default.
    #[must_use]
    pub fn with_watch_timeout(mut self, timeout: std::time::Duration) -> Self {
        self.watcher_config.timeout_seconds = u32::try_from(timeout.as_secs()).unwrap_or(u32::MAX).max(1);
        self
    }

    /// The store of `res`, starting its (cluster-wide) watch the first time it is asked for.
    /// After [`stop`](Self::stop) the returned store is never filled.
    pub fn store(&self, res: &ApiResource) -> Store<DynamicObject> {
        self.store_in(res, None)
    }

    /// The store of `res` in `namespace` (`None`: cluster-wide), starting its watch the first
    /// time it is asked for; each (GVR, namespace) is watched once, shared by every syncer.
    pub fn store_in(&self, res: &ApiResource, namespace: Option<&str>) -> Store<DynamicObject> {
        self.subscribe(res, namespace).0.store
    }

    /// The store of `res` in `namespace` and a receiver of its changes from now on, starting
    /// its watch the first time it is asked for. After [`stop`](Self::stop) the store is never
    /// filled and the receiver is closed.
    pub fn subscribe(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
    ) -> (CachedStore, broadcast::Receiver<CacheEvent>) {
        let key = key_of(res, namespace);
        self.subscribe_keyed(
            key,
            res,
            namespace,
            self.watcher_config.clone(),
            StopOn::Never,
            EVENT_BUFFER,
        )
    }

    fn subscribe_keyed(
        &self,
        key: String,
        res: &ApiResource,
        namespace: Option<&str>,
        config: kbind_cluster::watcher::WatcherConfig,
        stop_on: StopOn,
        buffer: usize,
    ) -> (CachedStore, broadcast::Receiver<CacheEvent>) {
        let mut entries = self.entries.lock();
        if let Some(entry) = entries.get(&key) {
            return (entry.cached.clone(), entry.events.subscribe());
        }
        let writer: Writer<DynamicObject> = Writer::new(res.clone());
        let cached = CachedStore {
            store: writer.as_reader(),
            res: res.clone(),
            synced: crate::listed::Listed::default(),
            failure: Arc::new(Mutex::new(None)),
        };
        let (events, receiver) = broadcast::channel(buffer);
        if self.is_stopped() {
            // Dropping the sender closes the receiver: nothing will ever come.
            return (cached, receiver);
        }
        // A resumed watch says nothing until something changes: its opening is what tells the
        // subscribers that a failing store follows the provider again.
        let config = config.on_watch_open({
            let (cached, events) = (cached.clone(), events.clone());
            move || {
                if cached.recovered() {
                    let _ = events.send(CacheEvent::Health);
                }
            }
        });
        let stream = watcher(self.client.clone(), res.clone(), namespace.map(str::to_string), config).modify(lean);
        let task = tokio::spawn(reflect(writer, cached.clone(), stream, events.clone(), stop_on));
        entries.insert(
            key,
            Entry {
                cached: cached.clone(),
                events,
                task,
            },
        );
        (cached, receiver)
    }

    /// The store of the one cluster-scoped object `res`/`name` and a receiver of its changes,
    /// starting its watch (field selector `metadata.name`, which RBAC `resourceNames` rules
    /// allow) the first time it is asked for. A watch the provider refuses (403) stops for
    /// good instead of retrying: the store then never syncs and the caller reads directly.
    pub fn subscribe_named(&self, res: &ApiResource, name: &str) -> (CachedStore, broadcast::Receiver<CacheEvent>) {
        let key = format!("{}#{name}", key_of(res, None));
        let config = self.watcher_config.clone().fields(&format!("metadata.name={name}"));
        self.subscribe_keyed(key, res, None, config, StopOn::Forbidden, NAMED_EVENT_BUFFER)
    }

    /// `group/version/plural` of every GVR with a running watch, sorted.
    pub fn watched(&self) -> Vec<String> {
        let entries = self.entries.lock();
        entries
            .iter()
            .filter(|(_, e)| !e.task.is_finished())
            .map(|(k, _)| k.clone())
            .collect()
    }

    /// Stops every watch; later `store` calls start none.
    pub fn stop(&self) {
        self.stopped.store(true, Ordering::SeqCst);
        let entries = std::mem::take(&mut *self.entries.lock());
        for entry in entries.values() {
            entry.task.abort();
        }
    }

    /// Whether the cache was stopped.
    pub fn is_stopped(&self) -> bool {
        self.stopped.load(Ordering::SeqCst)
    }
}

/// Which watch errors end a watch instead of being retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StopOn {
    /// Retry everything (the syncers' GVR watches decide about refusals themselves).
    Never,
    /// A 403 ends the watch: a credential that may only `get` the object would otherwise
    /// retry a refused list every backoff period.
    Forbidden,
}

/// Applies each watch event to the store, then tells the subscribers. A send without
/// subscribers is not an error: nobody follows this store right now.
async fn reflect(
    mut writer: Writer<DynamicObject>,
    cached: CachedStore,
    stream: impl futures::Stream<Item = Result<Event<DynamicObject>, kbind_cluster::watcher::WatcherError>>,
    events: broadcast::Sender<CacheEvent>,
    stop_on: StopOn,
) {
    let mut stream = std::pin::pin!(stream);
    let mut run = 0;
    while let Some(event) = stream.next().await {
        let event = match event {
            Ok(event) => event,
            Err(e) => {
                let verb = match &e {
                    kbind_cluster::watcher::WatcherError::InitialListFailed(_) => "list",
                    _ => "watch",
                };
                let cause = kbind_cluster::watcher::describe(&e);
                if stop_on == StopOn::Forbidden && kbind_cluster::watcher::into_seam_error(e).is_forbidden() {
                    return;
                }
                // The watcher retries with its own backoff; the store keeps its last picture, and
                // its subscribers learn that it is not following the provider now.
                cached.failed(verb, cause);
                let _ = events.send(CacheEvent::Health);
                continue;
            }
        };
        let recovered = cached.recovered();
        writer.apply_watcher_event(&event);
        let published = match &event {
            Event::Apply(obj) => {
                let r = ObjectRef::from_obj_with(obj, cached.res.clone());
                cached.store.get(&r).map(CacheEvent::Applied)
            }
            Event::Delete(obj) => Some(CacheEvent::Deleted(Arc::new(obj.clone()))),
            Event::InitDone => {
                cached.synced.mark();
                Some(CacheEvent::Relisted)
            }
            Event::Init | Event::InitApply(_) => None,
        };
        if recovered {
            let _ = events.send(CacheEvent::Health);
        }
        if let Some(published) = published {
            let _ = events.send(published);
            run += 1;
            if run == PUBLISH_RUN {
                run = 0;
                tokio::task::yield_now().await;
            }
        }
    }
}

impl Drop for ProviderCache {
    fn drop(&mut self) {
        self.stop();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use fakeapi::FakeCluster;
    use kbind_cluster::{DeleteParams, PostParams};
    use serde_json::json;
    use std::collections::BTreeSet;

    fn configmaps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn configmap(name: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": name, "namespace": "default", "annotations": {
                LAST_APPLIED: "{\"a whole\": \"copy\"}", "team": "blue"}},
            "data": {"k": "v"},
        }))
        .expect("a configmap")
    }

    async fn next_event(rx: &mut broadcast::Receiver<CacheEvent>) -> CacheEvent {
        tokio::time::timeout(Duration::from_secs(30), rx.recv())
            .await
            .expect("an event within 30 s")
            .expect("the cache publishes")
    }

    #[tokio::test(start_paused = true)]
    async fn cached_objects_are_lean_and_every_change_is_published() {
        let cluster = FakeCluster::builder("acme").seed(3).build();
        let client = cluster.admin_client();
        client
            .create(
                &configmaps(),
                Some("default"),
                &configmap("before"),
                &PostParams::default(),
            )
            .await
            .expect("create");
        let cache = ProviderCache::new(Arc::new(cluster.admin_client()), &kbind_cluster::backoff::seeded(1));
        let (cached, mut rx) = cache.subscribe(&configmaps(), Some("default"));
        assert!(matches!(next_event(&mut rx).await, CacheEvent::Relisted));
        assert!(cached.is_synced());

        let made = client
            .create(&configmaps(), Some("default"), &configmap("w"), &PostParams::default())
            .await
            .expect("create");
        assert!(
            made.metadata.managed_fields.is_some()
                && made
                    .metadata
                    .annotations
                    .as_ref()
                    .is_some_and(|a| a.contains_key(LAST_APPLIED)),
            "the server keeps managedFields and the annotation (else this test proves nothing): {made:?}"
        );
        let CacheEvent::Applied(applied) = next_event(&mut rx).await else {
            panic!("a create is published as applied");
        };
        assert_eq!(applied.metadata.name.as_deref(), Some("w"));
        for obj in cached.store().state() {
            assert!(
                obj.metadata.managed_fields.is_none(),
                "no managedFields in the cache: {obj:?}"
            );
            if obj.metadata.name.as_deref() == Some("kube-root-ca.crt") {
                continue;
            }
            let annotations = obj.metadata.annotations.clone().unwrap_or_default();
            assert!(
                !annotations.contains_key(LAST_APPLIED),
                "no last-applied copy in the cache"
            );
            assert_eq!(
                annotations.get("team").map(String::as_str),
                Some("blue"),
                "other annotations stay: {obj:?}"
            );
        }
        assert!(
            Arc::ptr_eq(&applied, &cached.get(Some("default"), "w").expect("cached")),
            "the event shares the store's copy"
        );

        client
            .delete(&configmaps(), Some("default"), "w", &DeleteParams::default())
            .await
            .expect("delete");
        let CacheEvent::Deleted(deleted) = next_event(&mut rx).await else {
            panic!("a delete is published");
        };
        assert_eq!(deleted.metadata.name.as_deref(), Some("w"));
        assert!(cached.get(Some("default"), "w").is_none());

        let (_, mut late) = cache.subscribe(&configmaps(), Some("default"));
        cache.stop();
        assert!(
            matches!(late.recv().await, Err(broadcast::error::RecvError::Closed)),
            "a stopped cache closes its subscriptions"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_subscriber_keeps_up_with_a_burst_many_times_the_buffer() {
        let cluster = FakeCluster::builder("acme").seed(5).build();
        let client = cluster.admin_client();
        let cache = ProviderCache::new(Arc::new(cluster.admin_client()), &kbind_cluster::backoff::seeded(1));
        let (_, mut rx) = cache.subscribe(&configmaps(), Some("default"));
        assert!(matches!(next_event(&mut rx).await, CacheEvent::Relisted));

        // Every create lands before the subscriber reads again: the watch hands the cache one
        // burst of BURST events, ten buffers' worth.
        const BURST: usize = EVENT_BUFFER * 10;
        for i in 0..BURST {
            client
                .create(
                    &configmaps(),
                    Some("default"),
                    &configmap(&format!("w{i}")),
                    &PostParams::default(),
                )
                .await
                .expect("create");
        }
        let mut seen = BTreeSet::new();
        while seen.len() < BURST {
            match tokio::time::timeout(Duration::from_secs(30), rx.recv()).await {
                Ok(Ok(CacheEvent::Applied(obj))) => {
                    seen.insert(obj.metadata.name.clone().unwrap_or_default());
                }
                Ok(Ok(other)) => panic!("only creates happened, got {other:?}"),
                Ok(Err(e)) => panic!("the subscriber fell behind after {} of {BURST} events: {e}", seen.len()),
                Err(_) => panic!("{} of {BURST} events within 30 s", seen.len()),
            }
        }
    }

    #[test]
    fn lean_keeps_only_the_create_entry_the_syncer_still_has_to_remove() {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "w", "annotations": {LAST_APPLIED: "{}"}, "managedFields": [
                {"manager": field_manager::KONNECTOR, "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}},
                {"manager": field_manager::KONNECTOR, "operation": "Apply", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}},
                {"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:data": {}}},
            ]},
        }))
        .expect("an object");
        lean(&mut obj);
        assert!(obj.metadata.annotations.is_none());
        let kept = obj.metadata.managed_fields.expect("the create entry is kept");
        assert_eq!(kept.len(), 1);
        assert_eq!(kept[0].operation.as_deref(), Some("Update"));
        assert!(kept[0].fields_v1.is_none(), "without its field set");
    }
}
