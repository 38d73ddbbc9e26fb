//! What wakes a binding besides its own changes and its Connection's: the watch of each
//! provider CRD it pulls (a schema change is pulled at once, not at the next pass) and its
//! syncers' reports (a conflict or refusal shows in its status at once). With these, a healthy
//! binding needs no periodic pass; the one left is the slow resync backstop.

use std::sync::{Arc, Weak};

use kube::runtime::reflector::ObjectRef;
use parking_lot::Mutex;
use tokio::sync::broadcast;

use crate::crdpull::crd_resource;
use crate::provider::{CacheEvent, EngagedProvider};
use crate::sync::{BindingKind, BindingRef, SyncerKey};

/// The provider CRDs followed, per engagement: each one's changes name its Connection on the
/// binding controllers' broadcast of changed Connections.
pub(crate) struct SchemaFollowers {
    followed: Mutex<Vec<(Weak<EngagedProvider>, String)>>,
    changed: broadcast::Sender<String>,
}

impl SchemaFollowers {
    /// Followers that announce on `changed`.
    pub(crate) fn new(changed: broadcast::Sender<String>) -> Self {
        Self {
            followed: Mutex::new(Vec::new()),
            changed,
        }
    }

    /// Follows the provider CRD `api` of `provider` (once per engagement): its watch starts
    /// now, and each change of it wakes every binding of the Connection.
    pub(crate) fn follow(&self, provider: &Arc<EngagedProvider>, api: &str) {
        let mut followed = self.followed.lock();
        followed.retain(|(p, _)| p.upgrade().is_some_and(|p| !p.is_disengaged()));
        let known = followed
            .iter()
            .any(|(p, a)| a == api && p.upgrade().is_some_and(|p| Arc::ptr_eq(&p, provider)));
        if known {
            return;
        }
        followed.push((Arc::downgrade(provider), api.to_string()));
        let (_, mut changes) = provider.cache.subscribe_named(&crd_resource(), api);
        let (changed, connection) = (self.changed.clone(), provider.name.clone());
        tokio::spawn(async move {
            loop {
                match changes.recv().await {
                    Ok(CacheEvent::Applied(_) | CacheEvent::Deleted(_))
                    | Err(broadcast::error::RecvError::Lagged(_)) => {
                        // Nobody listening (the controllers stopped) is fine.
                        let _ = changed.send(connection.clone());
                    }
                    // The first list is what the pass that started the watch already read; a
                    // failing watch of one CRD is retried and its store keeps the last picture.
                    Ok(CacheEvent::Relisted | CacheEvent::Health) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}

/// Which binding a wake-up is for: its kind, namespace and name.
pub(crate) trait Wakes {
    /// ClusterBinding or Binding, its namespace, its name.
    fn binding(&self) -> (BindingKind, Option<&str>, &str);
}

impl Wakes for SyncerKey {
    fn binding(&self) -> (BindingKind, Option<&str>, &str) {
        (self.binding_kind, self.binding_namespace.as_deref(), &self.binding_name)
    }
}

impl Wakes for BindingRef {
    fn binding(&self) -> (BindingKind, Option<&str>, &str) {
        (self.kind, self.namespace.as_deref(), &self.name)
    }
}

/// The bindings of `kind` named by `wakes` (syncer report changes, related-copy report
/// changes), as the controller's references.
pub(crate) fn wakes_of<K, T>(
    wakes: broadcast::Receiver<T>,
    kind: BindingKind,
    store: kube::runtime::reflector::Store<K>,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    T: Wakes + Clone + Send + 'static,
{
    use crate::connection::stores::Wake;
    use futures::StreamExt;
    crate::connection::stores::received(wakes).flat_map(move |wake| {
        let wanted: Vec<ObjectRef<K>> = match wake {
            Wake::One(wake) => {
                let (of, namespace, name) = wake.binding();
                (of == kind)
                    .then(|| {
                        let r = ObjectRef::<K>::new(name);
                        match namespace {
                            Some(ns) => r.within(ns),
                            None => r,
                        }
                    })
                    .into_iter()
                    .collect()
            }
            // Missed reports: every binding of the kind looks again.
            Wake::All => store.state().iter().map(|b| ObjectRef::from_obj(b.as_ref())).collect(),
        };
        futures::stream::iter(wanted)
    })
}

/// A broadcast of the bindings whose related copies' report changed (copied count, conflicts,
/// refusals), fed by `related`'s change hook.
pub(crate) fn related_wakes(related: &crate::related::RelatedSyncers) -> broadcast::Sender<BindingRef> {
    let (tx, _) = broadcast::channel(1024);
    let hook_tx = tx.clone();
    related.on_change(std::sync::Arc::new(move |binding: &BindingRef| {
        // No controller listening (stopping) is fine.
        let _ = hook_tx.send(binding.clone());
    }));
    tx
}

/// Follows the consumer's CRDs and sends the name of each one that changes (its API) on
/// `apis`, until the future is dropped. No store: only the names are needed.
pub(crate) async fn consumer_crd_changes(ctx: &crate::context::Context, apis: broadcast::Sender<String>) {
    use futures::StreamExt;
    use kbind_cluster::watcher::{WatchStreamExt, watcher};
    let events = watcher(ctx.consumer.clone(), crd_resource(), None, ctx.watcher_config()).touched_objects();
    let mut events = std::pin::pin!(events);
    while let Some(event) = events.next().await {
        if let Ok(crd) = event
            && let Some(name) = crd.metadata.name
        {
            // No binding controller listening (stopping) is fine.
            let _ = apis.send(name);
        }
    }
}
