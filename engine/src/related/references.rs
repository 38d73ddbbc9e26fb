//! Related objects found by reference (`selector.references[] {path}`): the names found at
//! dotted paths of the consumer's bound objects, in the bound object's namespace.
//!
//! One shared consumer watch per (bound API, set of paths) keeps, per bound object, only the
//! names its paths hold, and publishes the union as `namespace/name` keys whenever it changes,
//! so a reference added, changed or removed reaches the related syncers by event. References
//! are read from the consumer's objects in both directions: a `FromProvider` rule follows a
//! name the provider writes into the status it syncs down (docs/decisions.md).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Weak};

use futures::StreamExt;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_cluster::watcher::{Event, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use parking_lot::Mutex;
use serde_json::Value;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{RelatedError, Side, namespaced_resource};

type Key = (String, String);

/// The names found at `path` in `obj` (`spec.tls[].secretName`: `[]` looks into every item
/// of a list). Only non-empty strings count; a path that does not lead to one finds nothing.
pub fn names_at(obj: &Value, path: &str) -> Vec<String> {
    let mut values = vec![obj];
    for segment in path.split('.') {
        let (field, each) = match segment.strip_suffix("[]") {
            Some(field) => (field, true),
            None => (segment, false),
        };
        let mut next = Vec::new();
        for v in values {
            let Some(found) = v.get(field) else { continue };
            if each {
                next.extend(found.as_array().into_iter().flatten());
            } else {
                next.push(found);
            }
        }
        values = next;
    }
    values
        .into_iter()
        .filter_map(Value::as_str)
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect()
}

/// The objects `obj` (a bound object, as a whole) names at any of `paths`, in its namespace.
fn referenced_by(obj: &DynamicObject, paths: &[String]) -> BTreeSet<Key> {
    let Some(ns) = obj.metadata.namespace.clone() else {
        return BTreeSet::new();
    };
    let Ok(value) = serde_json::to_value(obj) else {
        return BTreeSet::new();
    };
    paths
        .iter()
        .flat_map(|p| names_at(&value, p))
        .map(|name| (ns.clone(), name))
        .collect()
}

/// The objects the bound objects of one API reference, and whether the watch has listed them
/// once (until then the set may miss names, so nothing is collected on it, §8.9).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct Referenced {
    /// `namespace/name` of every referenced object.
    pub keys: BTreeSet<Key>,
    /// Whether the set is complete.
    pub synced: bool,
}

/// The reference index of one (API, paths); dropping the last holder stops its watch.
#[derive(Debug)]
pub(crate) struct ApiReferences {
    state: watch::Sender<Referenced>,
    task: Option<JoinHandle<()>>,
}

impl Drop for ApiReferences {
    fn drop(&mut self) {
        if let Some(task) = &self.task {
            task.abort();
        }
    }
}

impl ApiReferences {
    /// An API whose objects reference nothing here (cluster-scoped): complete and empty.
    fn none() -> Self {
        Self {
            state: watch::channel(Referenced {
                keys: BTreeSet::new(),
                synced: true,
            })
            .0,
            task: None,
        }
    }

    /// The current set.
    pub(crate) fn current(&self) -> Referenced {
        self.state.borrow().clone()
    }

    /// A receiver that changes whenever the set (or its completeness) does.
    pub(crate) fn subscribe(&self) -> watch::Receiver<Referenced> {
        self.state.subscribe()
    }
}

/// The running indexes by (API, paths).
type Indexes = BTreeMap<(String, Vec<String>), Weak<ApiReferences>>;

/// The reference indexes of the engine, by (API, paths); shared by every related syncer.
pub(crate) struct ReferenceIndexes {
    consumer: Arc<dyn ClusterClient>,
    watcher_config: kbind_cluster::watcher::WatcherConfig,
    indexes: Mutex<Indexes>,
}

impl ReferenceIndexes {
    /// No index yet; watches go through `consumer` and back off as `watcher_config` says.
    pub(crate) fn new(consumer: Arc<dyn ClusterClient>, watcher_config: kbind_cluster::watcher::WatcherConfig) -> Self {
        Self {
            consumer,
            watcher_config,
            indexes: Mutex::new(BTreeMap::new()),
        }
    }

    /// The index of `api` (`<plural>.<group>`) over `paths` (sorted, unique), starting its
    /// watch the first time: `None` while the consumer has no CRD of it (ask again later).
    pub(crate) async fn index(&self, api: &str, paths: &[String]) -> Result<Option<Arc<ApiReferences>>, RelatedError> {
        let key = (api.to_string(), paths.to_vec());
        let live =
            |indexes: &BTreeMap<(String, Vec<String>), Weak<ApiReferences>>| indexes.get(&key).and_then(Weak::upgrade);
        if let Some(index) = live(&self.indexes.lock()) {
            return Ok(Some(index));
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
        if let Some(index) = live(&indexes) {
            return Ok(Some(index));
        }
        let index = Arc::new(match resource {
            Some(res) => {
                let (state, _) = watch::channel(Referenced::default());
                let task = tokio::spawn(follow(
                    self.consumer.clone(),
                    res,
                    paths.to_vec(),
                    self.watcher_config.clone(),
                    state.clone(),
                ));
                ApiReferences {
                    state,
                    task: Some(task),
                }
            }
            None => ApiReferences::none(),
        });
        indexes.retain(|_, weak| weak.strong_count() > 0);
        indexes.insert(key, Arc::downgrade(&index));
        Ok(Some(index))
    }
}

/// What every bound object references, and how many objects reference each key.
#[derive(Default)]
struct Table {
    by_object: BTreeMap<Key, BTreeSet<Key>>,
    counts: BTreeMap<Key, usize>,
}

impl Table {
    fn set(&mut self, object: Key, refs: BTreeSet<Key>) {
        let refs = if crate::planted::planted(crate::planted::Plant::FollowStaleReference) {
            // The planted bug: a changed reference keeps the old name as well.
            let mut merged = self.by_object.get(&object).cloned().unwrap_or_default();
            merged.extend(refs);
            merged
        } else {
            refs
        };
        self.remove(&object);
        for r in &refs {
            *self.counts.entry(r.clone()).or_default() += 1;
        }
        if !refs.is_empty() {
            self.by_object.insert(object, refs);
        }
    }

    fn remove(&mut self, object: &Key) {
        for r in self.by_object.remove(object).into_iter().flatten() {
            if let Some(n) = self.counts.get_mut(&r) {
                *n -= 1;
                if *n == 0 {
                    self.counts.remove(&r);
                }
            }
        }
    }

    fn keys(&self) -> BTreeSet<Key> {
        self.counts.keys().cloned().collect()
    }
}

fn object_key(obj: &DynamicObject) -> Option<Key> {
    Some((obj.metadata.namespace.clone()?, obj.metadata.name.clone()?))
}

/// Follows the objects of `res` and publishes what they reference. A relist replaces the table
/// wholesale; watch errors keep the last picture (the watcher retries with its own backoff).
async fn follow(
    consumer: Arc<dyn ClusterClient>,
    res: ApiResource,
    paths: Vec<String>,
    config: kbind_cluster::watcher::WatcherConfig,
    state: watch::Sender<Referenced>,
) {
    let mut table = Table::default();
    let mut relisting: Option<Table> = None;
    let mut synced = false;
    let stream = watcher(consumer, res, None, config);
    let mut stream = std::pin::pin!(stream);
    while let Some(event) = stream.next().await {
        match event {
            Ok(Event::Init) => relisting = Some(Table::default()),
            Ok(Event::InitApply(obj)) => {
                if let (Some(buffer), Some(key)) = (relisting.as_mut(), object_key(&obj)) {
                    buffer.set(key, referenced_by(&obj, &paths));
                }
            }
            Ok(Event::InitDone) => {
                table = relisting.take().unwrap_or_default();
                synced = true;
            }
            Ok(Event::Apply(obj)) => {
                if let Some(key) = object_key(&obj) {
                    table.set(key, referenced_by(&obj, &paths));
                }
            }
            Ok(Event::Delete(obj)) => {
                if let Some(key) = object_key(&obj) {
                    table.remove(&key);
                }
            }
            Err(_) => continue,
        }
        let now = Referenced {
            keys: table.keys(),
            synced,
        };
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
    use serde_json::json;

    #[test]
    fn a_path_finds_a_field_and_every_item_of_a_list() {
        let obj = json!({"spec": {"passwordSecretRef": {"name": "db-pw"},
            "tls": [{"secretName": "a"}, {"hosts": ["x"]}, {"secretName": "b"}, {"secretName": ""}]}});
        assert_eq!(names_at(&obj, "spec.passwordSecretRef.name"), ["db-pw"]);
        assert_eq!(names_at(&obj, "spec.tls[].secretName"), ["a", "b"]);
        assert!(names_at(&obj, "spec.missing.name").is_empty());
        assert!(
            names_at(&obj, "spec.passwordSecretRef").is_empty(),
            "an object is not a name"
        );
        assert!(
            names_at(&obj, "spec.tls.secretName").is_empty(),
            "a list needs [] to be looked into"
        );
        assert!(names_at(&json!({"spec": {"n": 3}}), "spec.n").is_empty());
    }

    #[test]
    fn the_table_follows_changed_and_removed_references() {
        let mut table = Table::default();
        let k = |ns: &str, n: &str| (ns.to_string(), n.to_string());
        table.set(k("a", "db"), BTreeSet::from([k("a", "pw-1")]));
        table.set(k("a", "db2"), BTreeSet::from([k("a", "pw-1")]));
        assert_eq!(table.keys(), BTreeSet::from([k("a", "pw-1")]));
        table.set(k("a", "db"), BTreeSet::from([k("a", "pw-2")]));
        assert_eq!(table.keys(), BTreeSet::from([k("a", "pw-1"), k("a", "pw-2")]));
        table.remove(&k("a", "db2"));
        assert_eq!(
            table.keys(),
            BTreeSet::from([k("a", "pw-2")]),
            "the old name goes with its last reference"
        );
        table.set(k("a", "db"), BTreeSet::new());
        assert!(table.keys().is_empty());
    }
}
