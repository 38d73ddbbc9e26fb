//! The stores one related syncer reads on one side: the shared cluster-wide watch of its kind,
//! or, when the credentials may not list the kind cluster-wide, one shared watch per namespace
//! in use (contract §4 "RBAC"). Both come from a [`ProviderCache`]: the engaged provider's, or
//! the engine's consumer cache.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use futures::stream::{BoxStream, SelectAll};
use futures::{Stream, StreamExt};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, ListParams};
use parking_lot::Mutex;
use tokio::sync::broadcast;

use super::Side;
use crate::provider::{CacheEvent, CachedStore, ProviderCache};

/// What a syncer must look at after an event of one of its stores.
#[derive(Debug, Clone)]
pub(crate) enum SideEvent {
    /// This object changed or went.
    Object(Arc<DynamicObject>),
    /// Anything may have changed: a store (re)listed, or the syncer fell behind its events.
    Everything,
    /// The cache stopped (the provider was disengaged): nothing will come any more.
    Closed,
    /// A store's list or watch started failing, failed again, or works again.
    Health,
}

/// A resource as kubectl names it: `resource` in the core group, `resource.group` otherwise.
fn named(res: &ApiResource) -> String {
    if res.group.is_empty() {
        res.plural.clone()
    } else {
        format!("{}.{}", res.plural, res.group)
    }
}

/// Whether a list of a kind is allowed: cluster-wide (`namespace` `None`) or in one namespace.
async fn probe(reader: &dyn ClusterClient, res: &ApiResource, namespace: Option<&str>) -> Result<(), String> {
    match reader.list(res, namespace, &ListParams::default().limit(1)).await {
        Err(kbind_cluster::Error::Forbidden { verb, .. }) => Err(format!("{verb} {}", named(res))),
        // Anything else (a transport error, a 5xx) is no refusal: the watch retries on its own.
        _ => Ok(()),
    }
}

/// The stores of one kind on one side, and their events merged.
pub(crate) struct SideStores {
    side: Side,
    res: ApiResource,
    /// `true` once a cluster-wide list was refused: one watch per namespace in use.
    per_namespace: bool,
    stores: BTreeMap<Option<String>, CachedStore>,
    /// Namespaces whose list was refused, with the denial; probed again on the backstop.
    refused: BTreeMap<String, String>,
    /// Behind a mutex only so the stores can be shared across awaits (a boxed stream is not
    /// `Sync`); `&mut self` reaches it without locking.
    events: Mutex<SelectAll<BoxStream<'static, SideEvent>>>,
}

impl SideStores {
    /// Follows the cluster-wide store of `res` in `cache`, or prepares per-namespace stores when
    /// `reader` may not list it cluster-wide (one LIST with `limit=1` tells).
    pub(crate) async fn open(cache: &ProviderCache, reader: &dyn ClusterClient, res: &ApiResource, side: Side) -> Self {
        let mut stores = Self {
            side,
            res: res.clone(),
            per_namespace: false,
            stores: BTreeMap::new(),
            refused: BTreeMap::new(),
            events: Mutex::new(SelectAll::new()),
        };
        if probe(reader, res, None).await.is_err() {
            tracing::info!(resource = %res.plural, %side, "cluster-wide watch forbidden; watching related resources per namespace in use");
            stores.per_namespace = true;
        } else {
            stores.subscribe(cache, None);
        }
        stores
    }

    fn subscribe(&mut self, cache: &ProviderCache, namespace: Option<&str>) {
        let (cached, events) = cache.subscribe(&self.res, namespace);
        self.stores.insert(namespace.map(str::to_string), cached);
        self.events_mut().push(subscription(events).boxed());
    }

    /// In per-namespace mode, follows every namespace of `namespaces` not followed yet whose
    /// list is allowed (one LIST with `limit=1` each, once).
    pub(crate) async fn follow(
        &mut self,
        cache: &ProviderCache,
        reader: &dyn ClusterClient,
        namespaces: &BTreeSet<String>,
    ) {
        if !self.per_namespace {
            return;
        }
        for ns in namespaces {
            let key = Some(ns.clone());
            if self.stores.contains_key(&key) || self.refused.contains_key(ns) {
                continue;
            }
            match probe(reader, &self.res, Some(ns)).await {
                Ok(()) => self.subscribe(cache, Some(ns)),
                Err(denied) => {
                    self.refused.insert(ns.clone(), denied);
                }
            }
        }
    }

    /// Forgets refused namespaces, so the next [`follow`](Self::follow) asks again.
    pub(crate) fn retry_refused(&mut self) {
        self.refused.clear();
    }

    /// The followed stores whose list or watch fails, in words, once each failure is
    /// [`crate::provider::WatchFailure::reportable`] with `grace`.
    pub(crate) fn failing(&self, grace: std::time::Duration) -> BTreeSet<String> {
        self.stores
            .values()
            .filter_map(|store| {
                let f = store.failure()?;
                f.reportable(store.is_synced(), grace).then(|| {
                    format!(
                        "{} {} on the {} failed: {}",
                        f.verb, self.res.plural, self.side, f.cause
                    )
                })
            })
            .collect()
    }

    /// The refused lists, as `"<verb> <resource>"`.
    pub(crate) fn denied(&self) -> BTreeSet<String> {
        self.refused.values().cloned().collect()
    }

    fn store_for(&self, namespace: &str) -> Option<&CachedStore> {
        self.stores
            .get(&None)
            .or_else(|| self.stores.get(&Some(namespace.to_string())))
    }

    /// The cached object `namespace/name`.
    pub(crate) fn get(&self, (ns, name): &(String, String)) -> Option<Arc<DynamicObject>> {
        self.store_for(ns)?.get(Some(ns), name)
    }

    /// Whether the store holding `namespace` has listed once (its absences can be trusted).
    pub(crate) fn synced(&self, namespace: &str) -> bool {
        self.store_for(namespace).is_some_and(CachedStore::is_synced)
    }

    /// Every cached object of the followed stores (of every namespace when cluster-wide).
    pub(crate) fn objects(&self) -> Vec<Arc<DynamicObject>> {
        self.stores.values().flat_map(|s| s.store().state()).collect()
    }

    /// The next change of any followed store; pending for ever while none is followed.
    pub(crate) async fn next(&mut self) -> SideEvent {
        let events = self.events_mut();
        if events.is_empty() {
            return std::future::pending().await;
        }
        match events.next().await {
            Some(change) => change,
            None => std::future::pending().await,
        }
    }

    fn events_mut(&mut self) -> &mut SelectAll<BoxStream<'static, SideEvent>> {
        self.events.get_mut()
    }

    /// The side these stores are on.
    pub(crate) fn side(&self) -> Side {
        self.side
    }
}

/// One store's events as changes. A subscriber that fell behind lost events it cannot get
/// back, among them perhaps a delete nothing else reports: only a full look recovers them.
fn subscription(events: broadcast::Receiver<CacheEvent>) -> impl Stream<Item = SideEvent> + Send + 'static {
    futures::stream::unfold(Some(events), |events| async move {
        let mut events = events?;
        let change = match events.recv().await {
            Ok(CacheEvent::Applied(obj) | CacheEvent::Deleted(obj)) => SideEvent::Object(obj),
            Ok(CacheEvent::Relisted) => SideEvent::Everything,
            Ok(CacheEvent::Health) => SideEvent::Health,
            Err(broadcast::error::RecvError::Lagged(missed)) => {
                tracing::info!(
                    missed,
                    "fell behind a related-resource cache's events; looking at everything again"
                );
                SideEvent::Everything
            }
            Err(broadcast::error::RecvError::Closed) => return Some((SideEvent::Closed, None)),
        };
        Some((change, Some(events)))
    })
}
