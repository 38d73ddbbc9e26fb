//! What wakes a binding besides its own changes and its Connection's: the watch of each
//! provider CRD it pulls (a schema change is pulled at once, not at the next pass) and its
//! syncers' reports (a conflict or refusal shows in its status at once). With these, a healthy
//! binding needs no periodic pass; the one left is the slow resync backstop.

use std::sync::{Arc, Mutex, Weak};

use kube::runtime::reflector::ObjectRef;
use tokio::sync::broadcast;

use crate::crdpull::crd_resource;
use crate::provider::{CacheEvent, EngagedProvider};
use crate::sync::{BindingKind, SyncerKey};

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
        let mut followed = self.followed.lock().unwrap_or_else(|p| p.into_inner());
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
                    // The first list is what the pass that started the watch already read.
                    Ok(CacheEvent::Relisted) => {}
                    Err(broadcast::error::RecvError::Closed) => return,
                }
            }
        });
    }
}

/// The bindings of `kind` whose syncers' reports changed, as the controller's references.
pub(crate) fn reports_of<K>(
    reports: broadcast::Receiver<SyncerKey>,
    kind: BindingKind,
) -> impl futures::Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + 'static,
{
    use futures::StreamExt;
    crate::connection::stores::received(reports).filter_map(move |key| {
        let wanted = (key.binding_kind == kind).then(|| {
            let r = ObjectRef::<K>::new(&key.binding_name);
            match &key.binding_namespace {
                Some(ns) => r.within(ns),
                None => r,
            }
        });
        async move { wanted }
    })
}
