//! Namespaces in use for a ClusterBinding's related resources, from a store instead of a LIST
//! per pass: one shared consumer watch per bound API (cluster-wide, keys only), publishing the
//! set of namespaces that hold at least one instance whenever that set changes.
//!
//! The instance syncers keep their own per-binding stores inside `sync/`; reaching them from
//! here would tie two modules' lifecycles together, so this index is its own, lean one: it
//! keeps `namespace/name` keys, never objects. An index lives while a related syncer holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_cluster::watcher::{Event, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use parking_lot::Mutex;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{RelatedError, Side, namespaced_resource};

/// The namespaces holding instances of one API, and whether the watch has listed them once
/// (until then the set may miss namespaces, so nothing is collected on it, §8.9).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct InUse {
    /// Namespaces with at least one instance.
    pub namespaces: BTreeSet<String>,
    /// Whether the set is complete.
    pub synced: bool,
}

/// The index of one API; dropping the last holder stops its watch.
#[derive(Debug)]
pub(crate) struct ApiNamespaces {
    state: watch::Sender<InUse>,
    task: Option<JoinHandle<()>>,
}

impl Drop for ApiNamespaces {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl ApiNamespaces {
    /// An API that adds no namespace (cluster-scoped): complete and empty.
    fn none() -> Self {
        Self {
            state: watch::channel(InUse {
                namespaces: BTreeSet::new(),
                synced: true,
            })
            .0,
            task: None,
        }
    }

    /// The current set.
    pub(crate) fn current(&self) -> InUse {
        self.state.borrow().clone()
    }

    /// A receiver that changes whenever the set (or its completeness) does.
    pub(crate) fn subscribe(&self) -> watch::Receiver<InUse> {
        self.state.subscribe()
    }
}

/// The indexes of the engine, by API (`<plural>.<group>`); shared by every related syncer.
pub(crate) struct InstanceNamespaces {
    consumer: Arc<dyn ClusterClient>,
    watcher_config: kbind_cluster::watcher::WatcherConfig,
    indexes: Mutex<BTreeMap<String, Weak<ApiNamespaces>>>,
}

impl InstanceNamespaces {
    /// No index yet; watches go through `consumer` and back off as `watcher_config` says.
    pub(crate) fn new(consumer: Arc<dyn ClusterClient>, watcher_config: kbind_cluster::watcher::WatcherConfig) -> Self {
        Self {
            consumer,
            watcher_config,
            indexes: Mutex::new(BTreeMap::new()),
        }
    }

    fn live(&self, api: &str) -> Option<Arc<ApiNamespaces>> {
        let indexes = self.indexes.lock();
        indexes.get(api).and_then(Weak::upgrade)
    }

    /// The index of `api`, starting its watch the first time: `None` while the consumer has no
    /// CRD of it (it adds no namespace, as a CRD-less API has no instances; ask again later).
    /// One read of the CRD per start, none while an index runs.
    pub(crate) async fn index(&self, api: &str) -> Result<Option<Arc<ApiNamespaces>>, RelatedError> {
        if let Some(live) = self.live(api) {
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
        if let Some(live) = indexes.get(api).and_then(Weak::upgrade) {
            return Ok(Some(live));
        }
        let index = Arc::new(match resource {
            Some(res) => {
                let (state, _) = watch::channel(InUse::default());
                let task = tokio::spawn(follow(
                    self.consumer.clone(),
                    res,
                    self.watcher_config.clone(),
                    state.clone(),
                ));
                ApiNamespaces {
                    state,
                    task: Some(task),
                }
            }
            None => ApiNamespaces::none(),
        });
        indexes.retain(|_, weak| weak.strong_count() > 0);
        indexes.insert(api.to_string(), Arc::downgrade(&index));
        Ok(Some(index))
    }
}

/// Keys of the instances, by namespace.
type Keys = BTreeMap<String, BTreeSet<String>>;

fn key_of(obj: &DynamicObject) -> Option<(String, String)> {
    Some((obj.metadata.namespace.clone()?, obj.metadata.name.clone()?))
}

/// Follows the instances of `res` and publishes their namespaces. A relist replaces the keys
/// wholesale; watch errors keep the last picture (the watcher retries with its own backoff).
async fn follow(
    consumer: Arc<dyn ClusterClient>,
    res: ApiResource,
    config: kbind_cluster::watcher::WatcherConfig,
    state: watch::Sender<InUse>,
) {
    let mut keys = Keys::new();
    let mut relisting: Option<Keys> = None;
    let mut synced = false;
    let stream = watcher(consumer, res, None, config);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relisting = Some(Keys::new()),
            Ok(Event::InitApply(obj)) => {
                if let (Some(buffer), Some((ns, name))) = (relisting.as_mut(), key_of(&obj)) {
                    buffer.entry(ns).or_default().insert(name);
                }
            }
            Ok(Event::InitDone) => {
                keys = relisting.take().unwrap_or_default();
                synced = true;
            }
            Ok(Event::Apply(obj)) => {
                if let Some((ns, name)) = key_of(&obj) {
                    keys.entry(ns).or_default().insert(name);
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some((ns, name)) = key_of(&obj)
                    && let Some(names) = keys.get_mut(&ns)
                {
                    names.remove(&name);
                    if names.is_empty() {
                        keys.remove(&ns);
                    }
                }
            }
            Err(_) => continue,
        }
        let now = InUse {
            namespaces: keys.keys().cloned().collect(),
            synced,
        };
        // Only a change of the set (or its first completion) wakes the syncers.
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
    use super::*;
    use fakeapi::FakeCluster;
    use kbind_cluster::{DeleteParams, PostParams};
    use serde_json::json;
    use std::time::Duration;

    /// Secrets stand in for instances (fakeapi puts a ConfigMap into every namespace).
    fn secrets() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
    }

    fn secret(ns: &str, name: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": ns}}))
        .expect("a secret")
    }

    async fn until(rx: &mut watch::Receiver<InUse>, wanted: impl Fn(&InUse) -> bool) -> InUse {
        tokio::time::timeout(Duration::from_secs(30), rx.wait_for(|s| wanted(s)))
            .await
            .expect("the namespaces within 30 s")
            .expect("the index runs")
            .clone()
    }

    #[tokio::test(start_paused = true)]
    async fn the_set_follows_instances_and_is_complete_only_after_the_first_list() {
        let cluster = FakeCluster::builder("consumer").seed(5).build();
        let client = cluster.admin_client();
        for ns in ["a", "b"] {
            let namespace = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace",
                "metadata": {"name": ns}}))
            .expect("a namespace");
            client
                .create(
                    &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
                    None,
                    &namespace,
                    &PostParams::default(),
                )
                .await
                .expect("create namespace");
        }
        client
            .create(&secrets(), Some("a"), &secret("a", "one"), &PostParams::default())
            .await
            .expect("create");
        let (state, mut rx) = watch::channel(InUse::default());
        assert!(!rx.borrow().synced, "incomplete before the first list");
        let task = tokio::spawn(follow(
            Arc::new(client.clone()),
            secrets(),
            crate::context::watcher_config(
                &kbind_cluster::backoff::seeded(1),
                crate::context::DEFAULT_WATCH_TIMEOUT,
            ),
            state,
        ));
        let first = until(&mut rx, |s| s.synced).await;
        assert!(first.namespaces.contains("a") && !first.namespaces.contains("b"));

        client
            .create(&secrets(), Some("b"), &secret("b", "two"), &PostParams::default())
            .await
            .expect("create");
        until(&mut rx, |s| s.namespaces.contains("b")).await;
        client
            .delete(&secrets(), Some("b"), "two", &DeleteParams::default())
            .await
            .expect("delete");
        let last = until(&mut rx, |s| !s.namespaces.contains("b")).await;
        assert!(last.synced && last.namespaces.contains("a"));
        task.abort();
    }
}
