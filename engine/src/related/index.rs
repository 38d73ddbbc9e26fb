//! A consumer watch folded into one published value, shared by every related syncer that asks for
//! it: the shape of the namespaces-in-use index and of the reference index. One watch runs per
//! key while some syncer holds its index; the value is sent again only when it changes, and says
//! whether the watch has listed once (until then it may miss entries, so nothing is collected on
//! it, §8.9).

use std::collections::BTreeMap;
use std::sync::{Arc, Weak};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_cluster::watcher::{Event, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{RelatedError, Side, namespaced_resource};

/// What an index folds the watched objects into, and the value it publishes. A relist starts
/// again from a clone of the empty table the index was made with.
pub(crate) trait Fold: Clone + Send + Sync + 'static {
    /// The published value: the set, and whether it is complete.
    type View: Clone + PartialEq + Send + Sync + 'static;
    /// Records an added or changed object.
    fn apply(&mut self, obj: &DynamicObject);
    /// Forgets a deleted object.
    fn delete(&mut self, obj: &DynamicObject);
    /// What the table publishes, `synced` once the watch has listed.
    fn view(&self, synced: bool) -> Self::View;
}

/// One running index; dropping the last holder stops its watch.
#[derive(Debug)]
pub(crate) struct WatchIndex<V> {
    state: watch::Sender<V>,
    task: Option<JoinHandle<()>>,
}

impl<V> Drop for WatchIndex<V> {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl<V: Clone> WatchIndex<V> {
    /// The current value.
    pub(crate) fn current(&self) -> V {
        self.state.borrow().clone()
    }

    /// A receiver that changes whenever the value does.
    pub(crate) fn subscribe(&self) -> watch::Receiver<V> {
        self.state.subscribe()
    }
}

/// The running indexes of one kind, by key.
pub(crate) struct Indexes<K, T: Fold> {
    consumer: Arc<dyn ClusterClient>,
    watcher_config: WatcherConfig,
    indexes: Mutex<BTreeMap<K, Weak<WatchIndex<T::View>>>>,
}

impl<K: Ord, T: Fold> Indexes<K, T> {
    /// No index yet; watches go through `consumer` and back off as `watcher_config` says.
    pub(crate) fn new(consumer: Arc<dyn ClusterClient>, watcher_config: WatcherConfig) -> Self {
        Self {
            consumer,
            watcher_config,
            indexes: Mutex::new(BTreeMap::new()),
        }
    }

    fn live(&self, key: &K) -> Option<Arc<WatchIndex<T::View>>> {
        let indexes = self.indexes.lock();
        indexes.get(key).and_then(Weak::upgrade)
    }

    /// The index under `key` of the instances of `api` (`<plural>.<group>`) folded into `empty`,
    /// starting its watch the first time: `None` while the consumer has no CRD of it (a CRD-less
    /// API has no instances; ask again later). A cluster-scoped API publishes `empty`, complete.
    /// One read of the CRD per start, none while an index runs.
    pub(crate) async fn index(
        &self,
        key: K,
        api: &str,
        empty: T,
    ) -> Result<Option<Arc<WatchIndex<T::View>>>, RelatedError> {
        if let Some(live) = self.live(&key) {
            return Ok(Some(live));
        }
        let crds = crate::crdpull::crd_resource();
        let crd = match self.consumer.get_opt(&crds, None, api).await {
            Ok(Some(crd)) => crd,
            Ok(None) => return Ok(None),
            Err(source) => {
                return Err(RelatedError::ReadFailed {
                    side: Side::Consumer,
                    resource: crds.plural.clone(),
                    object: api.to_string(),
                    source,
                });
            }
        };
        let resource = kbind_cluster::from_dynamic::<CustomResourceDefinition>(crd)
            .ok()
            .and_then(|crd| namespaced_resource(&crd));
        let mut indexes = self.indexes.lock();
        // Another syncer may have started it while the CRD was read.
        if let Some(live) = indexes.get(&key).and_then(Weak::upgrade) {
            return Ok(Some(live));
        }
        let index = Arc::new(match resource {
            Some(res) => {
                let (state, _) = watch::channel(empty.view(false));
                let task = tokio::spawn(follow(
                    self.consumer.clone(),
                    res,
                    self.watcher_config.clone(),
                    empty,
                    state.clone(),
                ));
                WatchIndex {
                    state,
                    task: Some(task),
                }
            }
            None => WatchIndex {
                state: watch::channel(empty.view(true)).0,
                task: None,
            },
        });
        indexes.retain(|_, weak| weak.strong_count() > 0);
        indexes.insert(key, Arc::downgrade(&index));
        Ok(Some(index))
    }
}

/// Follows the objects of `res` into a table and publishes its view. A relist replaces the
/// table wholesale; watch errors keep the last picture (the watcher retries with its own
/// backoff).
pub(super) async fn follow<T: Fold>(
    consumer: Arc<dyn ClusterClient>,
    res: ApiResource,
    config: WatcherConfig,
    empty: T,
    state: watch::Sender<T::View>,
) {
    let mut table = empty.clone();
    let mut relisting: Option<T> = None;
    let mut synced = false;
    let stream = watcher(consumer, res, None, config);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relisting = Some(empty.clone()),
            Ok(Event::InitApply(obj)) => {
                if let Some(buffer) = relisting.as_mut() {
                    buffer.apply(&obj);
                }
            }
            Ok(Event::InitDone) => {
                table = relisting.take().unwrap_or_else(|| empty.clone());
                synced = true;
            }
            Ok(Event::Apply(obj)) => table.apply(&obj),
            Ok(Event::Delete(obj)) => table.delete(&obj),
            Err(_) => continue,
        }
        let now = table.view(synced);
        // Only a change of the value (or its first completion) wakes the syncers.
        state.send_if_modified(|current| {
            let changed = *current != now;
            if changed {
                *current = now;
            }
            changed
        });
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::Duration;

    use fakeapi::FakeCluster;
    use kbind_cluster::PostParams;
    use serde_json::json;

    use super::*;

    /// The names of the watched objects.
    #[derive(Debug, Clone, Default)]
    struct Names(BTreeSet<String>);

    impl Fold for Names {
        type View = (BTreeSet<String>, bool);

        fn apply(&mut self, obj: &DynamicObject) {
            self.0.extend(obj.metadata.name.clone());
        }

        fn delete(&mut self, obj: &DynamicObject) {
            if let Some(name) = &obj.metadata.name {
                self.0.remove(name);
            }
        }

        fn view(&self, synced: bool) -> Self::View {
            (self.0.clone(), synced)
        }
    }

    fn crd(plural: &str, kind: &str, scope: &str) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.example.com")},
            "spec": {"group": "example.com", "scope": scope,
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind,
                    "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                    "schema": {"openAPIV3Schema": {"type": "object",
                        "x-kubernetes-preserve-unknown-fields": true}}}]}
        }))
        .expect("a CRD")
    }

    #[tokio::test(start_paused = true)]
    async fn one_index_per_key_while_held_none_without_a_crd_and_complete_for_a_cluster_scoped_api() {
        let cluster = FakeCluster::builder("consumer").seed(9).build();
        let client = cluster.admin_client();
        let config = crate::context::watcher_config(
            &kbind_cluster::backoff::seeded(1),
            crate::context::DEFAULT_WATCH_TIMEOUT,
        );
        let indexes: Indexes<String, Names> = Indexes::new(Arc::new(client.clone()), config);
        let index = |api: &'static str| indexes.index(api.to_string(), api, Names::default());

        assert!(
            index("widgets.example.com").await.expect("the CRD read").is_none(),
            "no CRD, no index"
        );
        let crds = crate::crdpull::crd_resource();
        for (plural, kind, scope) in [("widgets", "Widget", "Namespaced"), ("gadgets", "Gadget", "Cluster")] {
            client
                .create(&crds, None, &crd(plural, kind, scope), &PostParams::default())
                .await
                .expect("create CRD");
        }

        let first = index("widgets.example.com").await.expect("read").expect("an index");
        let second = index("widgets.example.com").await.expect("read").expect("an index");
        assert!(Arc::ptr_eq(&first, &second), "one watch per key while it is held");
        let mut rx = first.subscribe();
        let listed = tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|(_, synced)| *synced))
            .await
            .expect("listed within 30 s")
            .expect("the index runs")
            .clone();
        assert_eq!(listed, (BTreeSet::new(), true));

        let released = Arc::downgrade(&first);
        drop((first, second, rx));
        assert!(released.upgrade().is_none(), "the last holder gone, the index goes");
        let again = index("widgets.example.com").await.expect("read").expect("an index");
        assert!(!again.current().1, "a new index starts incomplete");

        let cluster_scoped = index("gadgets.example.com").await.expect("read").expect("an index");
        assert_eq!(cluster_scoped.current(), (BTreeSet::new(), true));
    }
}
