//! How a syncer follows its two sides: the consumer watch through the syncer's store, the
//! provider stores it follows (cluster-wide, or one per namespace in use), the health of both
//! for the binding's status, and which consumer objects a provider change concerns.

use kbind_cluster::watcher::{Event, WatchStreamExt, WatcherError};
use kbind_cluster::{ApiResource, DynamicObject};
use kube::runtime::reflector::{self, ObjectRef, store::Writer};

use super::state::ApiSyncer;
use crate::mapper::{Mapper, ObjectKey};
use crate::sync::lock;
use crate::sync::observe::PendingTriggers;
use crate::sync::provider_events::ProviderChange;

/// The consumer watch through the syncer's store. The store is the syncer's own (one per binding
/// scope); what no decision reads is dropped as in the provider cache, and before the store
/// copies the object: leaned after the reflector, the store kept every managedFields entry (each
/// event deep-copied with them) and only the copy passed on, which nothing keeps, was lean.
pub(super) fn into_store(
    writer: Writer<DynamicObject>,
    events: impl futures::Stream<Item = Result<Event<DynamicObject>, WatcherError>>,
) -> impl futures::Stream<Item = Result<Event<DynamicObject>, WatcherError>> {
    reflector::reflector(writer, events.modify(crate::provider::lean))
}

/// A consumer watch event: an applied object waits for a reconcile, a deleted one never will.
pub(super) fn note_consumer_event(pending: &PendingTriggers, event: &Result<Event<DynamicObject>, WatcherError>) {
    match event {
        Ok(Event::Apply(obj) | Event::InitApply(obj)) => {
            if let Some(key) = ObjectKey::of(obj) {
                pending.consumer_event(key, obj.metadata.resource_version.as_deref());
            }
        }
        Ok(Event::Delete(obj)) => {
            if let Some(key) = ObjectKey::of(obj) {
                pending.forget(&key);
            }
        }
        Ok(Event::Init | Event::InitDone) | Err(_) => {}
    }
}

/// The consumer object a provider object is the image of, within the syncer's scope.
fn consumer_ref(
    mapper: &dyn Mapper,
    res: &ApiResource,
    scope: Option<&str>,
    copy: &DynamicObject,
) -> Option<ObjectRef<DynamicObject>> {
    let key = mapper.to_consumer(res, &ObjectKey::of(copy)?)?;
    if scope.is_some() && key.namespace.as_deref() != scope {
        return None;
    }
    let r = ObjectRef::new_with(&key.name, res.clone());
    Some(match &key.namespace {
        Some(ns) => r.within(ns),
        None => r,
    })
}

impl ApiSyncer {
    /// Follows the cluster-wide watch when the credentials may list the GVR everywhere, else
    /// one watch per namespace in use (added as objects are synced).
    pub(super) async fn choose_watches(&self) {
        let probe = kbind_cluster::ListParams::default().limit(1);
        let refused = matches!(
            self.provider.reader.list(self.res(), None, &probe).await,
            Err(kbind_cluster::Error::Forbidden { .. })
        );
        if refused {
            tracing::info!(api = %self.spec.api, "cluster-wide watch forbidden; watching per namespace in use");
            self.watches.set_per_namespace();
        } else {
            let _ = self.watches.follow(&self.provider.cache, self.res(), None);
        }
    }

    /// In per-namespace mode, makes sure `namespace` is watched.
    pub(super) fn follow_namespace(&self, namespace: Option<&str>) {
        if self
            .watches
            .follow_namespace(&self.provider.cache, self.res(), namespace)
        {
            self.note_provider_health();
        }
    }

    /// Records how the followed provider stores follow the provider (the binding's status shows
    /// it; the findings tell the binding when that changes).
    pub(super) fn note_provider_health(&self) {
        let (listed, failure) = self.watches.health();
        let mut findings = lock(&self.findings);
        findings.following.provider_listed = listed;
        findings.following.provider_failure = failure;
    }

    /// A consumer watch opened: a failure before it is over.
    pub(super) fn consumer_watch_opened(&self) {
        if self.consumer_failing.swap(false, std::sync::atomic::Ordering::SeqCst) {
            lock(&self.findings).following.consumer_failure = None;
        }
    }

    /// Records what a consumer watch event says of the watch: listed, failing, or working.
    pub(super) fn note_consumer_health(&self, event: &Result<Event<DynamicObject>, WatcherError>) {
        use std::sync::atomic::Ordering;
        let failing = event.is_err();
        let was_failing = self.consumer_failing.swap(failing, Ordering::SeqCst);
        if !failing && !was_failing && !matches!(event, Ok(Event::InitDone)) {
            return;
        }
        let mut findings = lock(&self.findings);
        let following = &mut findings.following;
        match event {
            Err(e) => {
                let verb = match e {
                    WatcherError::InitialListFailed(_) => "list",
                    _ => "watch",
                };
                following.consumer_failure = Some(crate::provider::WatchFailure::new(
                    verb,
                    kbind_cluster::watcher::describe(e),
                    following.consumer_failure.as_ref(),
                ));
            }
            Ok(event) => {
                following.consumer_failure = None;
                if matches!(event, Event::InitDone) {
                    following.consumer_listed = true;
                }
            }
        }
    }

    /// The consumer objects a provider change concerns. The controller only reconciles
    /// objects in its store; a trigger for another one would wait in the queue for ever.
    pub(super) fn consumers_to_look_at(
        &self,
        consumers: &reflector::Store<DynamicObject>,
        change: ProviderChange,
    ) -> Vec<ObjectRef<DynamicObject>> {
        match change {
            ProviderChange::Health => {
                self.note_provider_health();
                Vec::new()
            }
            ProviderChange::Object(copy) => self.consumer_of(consumers, &copy).into_iter().collect(),
            // Missed events or a relist: the copies that changed, and the objects whose copy
            // is not in the store (it may have gone without an event we heard). An unchanged
            // copy costs nothing, and the own-write bookkeeping stays: its echoes are known.
            ProviderChange::Missed { changed } => {
                // A relist may be a followed store's first.
                self.note_provider_health();
                let mut refs: Vec<ObjectRef<DynamicObject>> = changed
                    .iter()
                    .filter_map(|copy| self.consumer_of(consumers, copy))
                    .collect();
                for obj in consumers.state() {
                    let Some(key) = ObjectKey::of(&obj) else {
                        continue;
                    };
                    let target = self.mapper.to_provider(self.res(), &key);
                    let absent = self
                        .watches
                        .store_for(target.namespace.as_deref())
                        .is_some_and(|store| {
                            store.is_synced() && store.get(target.namespace.as_deref(), &target.name).is_none()
                        });
                    if absent {
                        refs.push(ObjectRef::from_obj_with(obj.as_ref(), self.res().clone()));
                    }
                }
                refs
            }
        }
    }

    /// The consumer object of provider `copy` if this syncer holds it; a change that is not an
    /// echo of our own write is measured from now.
    fn consumer_of(
        &self,
        consumers: &reflector::Store<DynamicObject>,
        copy: &DynamicObject,
    ) -> Option<ObjectRef<DynamicObject>> {
        let r = consumer_ref(self.mapper.as_ref(), self.res(), self.spec.namespace.as_deref(), copy)?;
        consumers.get(&r)?;
        let echo = ObjectKey::of(copy)
            .is_some_and(|target| self.echoes.is_echo(target, copy.metadata.resource_version.as_deref()));
        if !echo {
            self.pending.trigger(ObjectKey {
                namespace: r.namespace.clone(),
                name: r.name.clone(),
            });
        }
        Some(r)
    }
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use serde_json::json;

    use super::*;

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn widget(ns: &str, name: &str, rv: &str) -> DynamicObject {
        serde_json::from_value(json!({"apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": name, "namespace": ns, "resourceVersion": rv}}))
        .unwrap()
    }

    #[tokio::test]
    async fn the_consumer_store_keeps_lean_objects() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::{FieldsV1, ManagedFieldsEntry};
        let mut obj = widget("a", "w", "1");
        obj.metadata.managed_fields = Some(vec![ManagedFieldsEntry {
            manager: Some("kubectl".into()),
            operation: Some("Update".into()),
            fields_v1: Some(FieldsV1(json!({"f:spec": {"f:size": {}}}))),
            ..Default::default()
        }]);
        obj.metadata.annotations = Some(
            [
                (
                    "kubectl.kubernetes.io/last-applied-configuration".to_string(),
                    "{}".to_string(),
                ),
                ("note".to_string(), "keep".to_string()),
            ]
            .into(),
        );
        let writer = Writer::new(widgets());
        let store = writer.as_reader();
        let passed: Vec<_> = into_store(writer, futures::stream::iter([Ok(Event::Apply(obj))]))
            .collect()
            .await;
        assert_eq!(passed.len(), 1, "the event goes on to the controller");
        let kept = store
            .get(&ObjectRef::new_with("w", widgets()).within("a"))
            .expect("the object is in the store");
        assert!(
            kept.metadata.managed_fields.is_none(),
            "{:?}",
            kept.metadata.managed_fields
        );
        assert_eq!(
            kept.metadata.annotations,
            Some([("note".to_string(), "keep".to_string())].into()),
            "the last-applied copy is dropped, the rest kept"
        );
    }

    #[test]
    fn provider_objects_outside_a_binding_namespace_trigger_nothing() {
        let w = widget("a", "w", "1");
        let r = consumer_ref(&crate::mapper::Identity, &widgets(), Some("a"), &w).unwrap();
        assert_eq!((r.name.as_str(), r.namespace.as_deref()), ("w", Some("a")));
        assert!(consumer_ref(&crate::mapper::Identity, &widgets(), Some("b"), &w).is_none());
        assert!(consumer_ref(&crate::mapper::Identity, &widgets(), None, &w).is_some());
    }
}
