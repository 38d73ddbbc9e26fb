//! Namespaces in use for a ClusterBinding's related resources, from a store instead of a LIST
//! per pass: one shared consumer watch per bound API (cluster-wide, keys only), publishing the
//! set of namespaces that hold at least one instance whenever that set changes.
//!
//! The instance syncers keep their own per-binding stores inside `sync/`; reaching them from
//! here would tie two modules' lifecycles together, so this index is its own, lean one: it
//! keeps `namespace/name` keys, never objects. An index lives while a related syncer holds it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use kbind_cluster::{ClusterClient, DynamicObject};

use super::RelatedError;
use super::index::{Fold, Indexes, WatchIndex};

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
pub(crate) type ApiNamespaces = WatchIndex<InUse>;

/// The indexes of the engine, by API (`<plural>.<group>`); shared by every related syncer.
pub(crate) struct InstanceNamespaces(Indexes<String, Instances>);

impl InstanceNamespaces {
    /// No index yet; watches go through `consumer` and back off as `watcher_config` says.
    pub(crate) fn new(consumer: Arc<dyn ClusterClient>, watcher_config: kbind_cluster::watcher::WatcherConfig) -> Self {
        Self(Indexes::new(consumer, watcher_config))
    }

    /// The index of `api`, starting its watch the first time: `None` while the consumer has no
    /// CRD of it (it adds no namespace, as a CRD-less API has no instances; ask again later).
    /// A cluster-scoped API adds no namespace either: its set is complete and empty.
    pub(crate) async fn index(&self, api: &str) -> Result<Option<Arc<ApiNamespaces>>, RelatedError> {
        self.0.index(api.to_string(), api, Instances::default()).await
    }
}

/// Keys of the instances, by namespace.
#[derive(Debug, Clone, Default)]
struct Instances(BTreeMap<String, BTreeSet<String>>);

fn key_of(obj: &DynamicObject) -> Option<(String, String)> {
    Some((obj.metadata.namespace.clone()?, obj.metadata.name.clone()?))
}

impl Fold for Instances {
    type View = InUse;

    fn apply(&mut self, obj: &DynamicObject) {
        if let Some((ns, name)) = key_of(obj) {
            self.0.entry(ns).or_default().insert(name);
        }
    }

    fn delete(&mut self, obj: &DynamicObject) {
        if let Some((ns, name)) = key_of(obj)
            && let Some(names) = self.0.get_mut(&ns)
        {
            names.remove(&name);
            if names.is_empty() {
                self.0.remove(&ns);
            }
        }
    }

    fn view(&self, synced: bool) -> InUse {
        InUse {
            namespaces: self.0.keys().cloned().collect(),
            synced,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::related::index::follow;
    use fakeapi::FakeCluster;
    use kbind_cluster::{ApiResource, DeleteParams, PostParams};
    use serde_json::json;
    use std::time::Duration;
    use tokio::sync::watch;

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
            Instances::default(),
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
