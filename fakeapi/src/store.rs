//! One cluster's storage: objects by group-resource, a single increasing resourceVersion, the
//! event history watches replay from, and the write log tests read.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::sync::Arc;

use kbind_cluster::Error;
use rand::RngCore;
use rand_chacha::ChaCha8Rng;
use serde::Serialize;
use serde_json::Value;

use crate::meta;
use crate::registry::{GroupResource, Registry};

/// Namespace (empty for cluster-scoped) and name.
pub type ObjectKey = (String, String);

/// What happened to an object.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum EventType {
    /// Created.
    Added,
    /// Changed.
    Modified,
    /// Removed.
    Deleted,
}

/// One entry of the history window.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEvent {
    /// The resourceVersion this event produced.
    pub rv: u64,
    /// The object's group-resource.
    pub gr: GroupResource,
    /// What happened.
    pub kind: EventType,
    /// The object after the event (for Deleted: its last state, at the new resourceVersion).
    pub object: Arc<Value>,
    /// The object before the event (None for Added).
    pub old: Option<Arc<Value>>,
}

impl HistoryEvent {
    /// The object's namespace ("" for cluster-scoped).
    pub fn namespace(&self) -> &str {
        meta::namespace(&self.object).unwrap_or("")
    }

    /// The object's name.
    pub fn name(&self) -> &str {
        meta::name(&self.object).unwrap_or("")
    }
}

/// One write, as tests check them (who wrote what, at which resourceVersion).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct WriteRecord {
    /// resourceVersion after the write.
    pub rv: u64,
    /// The caller.
    pub user: String,
    /// create, update, patch, delete.
    pub verb: String,
    /// `resource.group`.
    pub resource: String,
    /// Subresource, empty if none.
    pub subresource: String,
    /// Namespace, empty for cluster-scoped.
    pub namespace: String,
    /// Object name.
    pub name: String,
}

/// The mutable state of one cluster.
#[derive(Debug)]
pub struct State {
    /// Last resourceVersion handed out.
    pub rv: u64,
    /// Objects by group-resource, then by key (ordered, so every scan is deterministic).
    pub objects: BTreeMap<GroupResource, BTreeMap<ObjectKey, Arc<Value>>>,
    /// Recent events of each group-resource, oldest first. Kept per resource, as kube-apiserver's
    /// watch cache is, so churn of one resource (heartbeat Leases) never ages out another's.
    pub history: BTreeMap<GroupResource, VecDeque<HistoryEvent>>,
    /// Watches and exact reads of any resource are possible only from resourceVersions >= this
    /// (raised by a compaction or a replacement).
    pub floor: u64,
    /// The same per group-resource, raised as its history drops old events.
    pub floors: BTreeMap<GroupResource, u64>,
    /// How many events the history keeps per group-resource.
    pub history_limit: usize,
    /// What is served.
    pub registry: Registry,
    /// The only randomness (uids, generated names).
    pub rng: ChaCha8Rng,
    /// Every successful write.
    pub write_log: Vec<WriteRecord>,
    /// Bumped to end every open watch (dropped watches, partitions, replacement).
    pub watch_epoch: u64,
    /// Indexes the controllers read after every write, kept by `put` so a pass costs what it
    /// finds, not the size of the store.
    pub index: Index,
    /// The last RBAC snapshot and the stored objects it was copied from
    /// (`admission::rbac_snapshot`): every authorization reads it, and the policy rarely changes.
    pub rbac_cache: parking_lot::Mutex<Option<RbacCache>>,
}

/// An RBAC snapshot and the stored Roles, ClusterRoles and bindings it was made from: it stands
/// while the store holds exactly those objects (every write stores a new one).
#[derive(Debug)]
pub struct RbacCache {
    /// The objects, by kind in the snapshot's order.
    pub sources: [Vec<Arc<Value>>; 4],
    /// The snapshot made from them.
    pub snapshot: Arc<crate::rbac::RbacSnapshot>,
}

/// An object's place in the store: group-resource, then key (the store's own order).
pub type ObjectRef = (GroupResource, ObjectKey);

/// What the garbage collector looks up, maintained on every write.
#[derive(Debug, Default)]
pub struct Index {
    /// Objects whose metadata has `ownerReferences`.
    pub owned: BTreeSet<ObjectRef>,
    /// Terminating objects holding `orphan` or `foregroundDeletion`.
    pub waiting_owners: BTreeSet<ObjectRef>,
    /// Objects by uid (a set: nothing stops two stored objects sharing one).
    pub uids: BTreeMap<String, BTreeSet<ObjectRef>>,
    /// Objects the controllers examined, a statistic tests read to keep passes from scanning.
    pub visited: u64,
}

impl Index {
    fn remove(&mut self, at: &ObjectRef, obj: &Value) {
        self.owned.remove(at);
        self.waiting_owners.remove(at);
        if let Some(uid) = meta::uid(obj)
            && let Some(set) = self.uids.get_mut(uid)
        {
            set.remove(at);
            if set.is_empty() {
                self.uids.remove(uid);
            }
        }
    }

    fn insert(&mut self, at: &ObjectRef, obj: &Value) {
        if obj.get("metadata").and_then(|m| m.get("ownerReferences")).is_some() {
            self.owned.insert(at.clone());
        }
        if meta::is_terminating(obj)
            && meta::finalizers(obj)
                .iter()
                .any(|f| f == "orphan" || f == "foregroundDeletion")
        {
            self.waiting_owners.insert(at.clone());
        }
        if let Some(uid) = meta::uid(obj) {
            self.uids.entry(uid.to_string()).or_default().insert(at.clone());
        }
    }
}

impl State {
    /// An empty store.
    pub fn new(registry: Registry, rng: ChaCha8Rng, history_limit: usize, first_rv: u64) -> Self {
        Self {
            rv: first_rv,
            objects: BTreeMap::new(),
            history: BTreeMap::new(),
            floor: first_rv,
            floors: BTreeMap::new(),
            history_limit,
            registry,
            rng,
            write_log: Vec::new(),
            watch_epoch: 0,
            index: Index::default(),
            rbac_cache: parking_lot::Mutex::new(None),
        }
    }

    /// A fresh uid from the seeded generator.
    pub fn new_uid(&mut self) -> String {
        let mut bytes = [0u8; 16];
        self.rng.fill_bytes(&mut bytes);
        uuid::Builder::from_random_bytes(bytes).into_uuid().to_string()
    }

    /// Five characters for `generateName`, from the apiserver's alphabet.
    pub fn name_suffix(&mut self) -> String {
        const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
        (0..5)
            .map(|_| ALPHABET[(self.rng.next_u32() as usize) % ALPHABET.len()] as char)
            .collect()
    }

    /// The stored object.
    pub fn get(&self, gr: &GroupResource, key: &ObjectKey) -> Option<&Arc<Value>> {
        self.objects.get(gr)?.get(key)
    }

    /// Every object of a group-resource in one namespace (`None`: all).
    pub fn list(&self, gr: &GroupResource, namespace: Option<&str>) -> Vec<Arc<Value>> {
        self.objects
            .get(gr)
            .map(|m| {
                m.iter()
                    .filter(|((ns, _), _)| namespace.is_none_or(|want| want == ns))
                    .map(|(_, o)| o.clone())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Finds an object by uid anywhere (for garbage collection).
    pub fn find_uid(&self, uid: &str) -> Option<(GroupResource, Arc<Value>)> {
        let (gr, key) = self.index.uids.get(uid)?.first()?;
        self.get(gr, key).map(|o| (gr.clone(), o.clone()))
    }

    /// Stores `object` (already carrying its new resourceVersion) and records the event.
    pub fn put(&mut self, gr: &GroupResource, object: Value, kind: EventType) -> Arc<Value> {
        let key = key_of(&object);
        let object = Arc::new(object);
        let at = (gr.clone(), key.clone());
        let old = match kind {
            EventType::Deleted => self.objects.get_mut(gr).and_then(|m| m.remove(&key)),
            _ => self.objects.entry(gr.clone()).or_default().insert(key, object.clone()),
        };
        if let Some(old) = &old {
            self.index.remove(&at, old);
        }
        if kind != EventType::Deleted {
            self.index.insert(&at, &object);
        }
        self.record(HistoryEvent {
            rv: self.rv,
            gr: gr.clone(),
            kind,
            object: object.clone(),
            old,
        });
        object
    }

    /// Hands out the next resourceVersion.
    pub fn next_rv(&mut self) -> u64 {
        self.rv += 1;
        self.rv
    }

    fn record(&mut self, event: HistoryEvent) {
        let gr = event.gr.clone();
        let history = self.history.entry(gr.clone()).or_default();
        history.push_back(event);
        while history.len() > self.history_limit {
            if let Some(dropped) = history.pop_front() {
                self.floors.insert(gr.clone(), dropped.rv);
            }
        }
    }

    /// The oldest resourceVersion a watch or exact read of `gr` may start from.
    pub fn floor_of(&self, gr: &GroupResource) -> u64 {
        self.floors.get(gr).copied().unwrap_or(0).max(self.floor)
    }

    /// The retained events of `gr`, oldest first.
    pub fn history_of(&self, gr: &GroupResource) -> impl DoubleEndedIterator<Item = &HistoryEvent> {
        self.history.get(gr).into_iter().flatten()
    }

    /// Every retained event, in resourceVersion order.
    pub fn all_history(&self) -> Vec<HistoryEvent> {
        let mut events: Vec<HistoryEvent> = self.history.values().flatten().cloned().collect();
        events.sort_by_key(|e| e.rv);
        events
    }

    /// Forgets all history: every older resourceVersion becomes 410 Gone.
    pub fn compact(&mut self) {
        self.history.clear();
        self.floors.clear();
        self.floor = self.rv;
    }

    /// The objects of a group-resource as they were at resourceVersion `rv`, rebuilt by
    /// undoing newer events; 410 when `rv` is older than the history window.
    pub fn snapshot_at(&self, gr: &GroupResource, rv: u64) -> Result<BTreeMap<ObjectKey, Arc<Value>>, Error> {
        if rv > self.rv {
            return Err(Error::Timeout(format!(
                "Too large resource version: {rv}, current: {}",
                self.rv
            )));
        }
        if rv < self.floor_of(gr) {
            return Err(Error::gone(&rv.to_string()));
        }
        let mut objects = self.objects.get(gr).cloned().unwrap_or_default();
        for event in self.history_of(gr).rev().take_while(|e| e.rv > rv) {
            let key = key_of(&event.object);
            match (&event.kind, &event.old) {
                (EventType::Added, _) => {
                    objects.remove(&key);
                }
                (_, Some(old)) => {
                    objects.insert(key, old.clone());
                }
                (_, None) => {}
            }
        }
        Ok(objects)
    }
}

/// The key of an object.
pub fn key_of(obj: &Value) -> ObjectKey {
    (
        meta::namespace(obj).unwrap_or("").to_string(),
        meta::name(obj).unwrap_or("").to_string(),
    )
}
