//! Typed watcher streams over the seam: the seam's list+watch of dynamic objects decoded into
//! one kind; undecodable objects are dropped (a CRD's schema makes them impossible on a real
//! server).

use futures::{Stream, StreamExt};
use kbind_cluster::watcher::{Event, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, from_dynamic};
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Watcher events of kind `K` in `namespace` (`None`: all).
pub fn typed_watcher<K>(
    client: Arc<dyn ClusterClient>,
    namespace: Option<String>,
    config: WatcherConfig,
) -> impl Stream<Item = Result<Event<K>, kube::runtime::watcher::Error>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + DeserializeOwned + Clone + Send + 'static,
{
    watcher(client, ApiResource::erase::<K>(&()), namespace, config).filter_map(|item| async move {
        match item {
            Ok(event) => typed_event(event).map(Ok),
            Err(e) => Some(Err(e)),
        }
    })
}

/// Decodes one event; `None` when its object does not decode. managedFields are dropped: no
/// decision reads them and nothing is written back from these caches, while every reconcile
/// clones cached bindings and Connections (each status write adds to them; at 50 Connections
/// those clones were most of the konnector's start-up CPU).
fn typed_event<K: DeserializeOwned>(event: Event<DynamicObject>) -> Option<Event<K>> {
    let decode = |mut obj: DynamicObject| {
        obj.metadata.managed_fields = None;
        from_dynamic::<K>(obj).ok()
    };
    Some(match event {
        Event::Apply(o) => Event::Apply(decode(o)?),
        Event::Delete(o) => Event::Delete(decode(o)?),
        Event::Init => Event::Init,
        Event::InitApply(o) => Event::InitApply(decode(o)?),
        Event::InitDone => Event::InitDone,
    })
}
