//! Provider namespaces on unbind (contract §4 "namespaces", §8.9): a namespace this binding's
//! objects used, that kbind created for this consumer cluster (labelled managed, annotated with
//! the consumer cluster UID), is removed once nothing but what Kubernetes puts in every
//! namespace is left in it. Anything else — another binding's copies, another consumer's, a
//! provider's own objects — keeps it. Only a complete, successful read may say "empty": a
//! partial discovery (a group-version that answered 429/5xx) or any refused or failed read
//! keeps it, and the delete carries the UID and resourceVersion it was judged on. Removal is a
//! tidy-up, never a risk.

use std::collections::BTreeSet;

use kbind_api::consts::{TRUE, annotation, label};
use kbind_cluster::{ApiResource, ClusterClient, DeleteParams, DynamicObject, ListParams};
use kube::api::Preconditions;

use super::reconcile::Binder;
use super::schema::{consumer_crd, resource_of};
use super::view::BindingView;
use crate::mapper::ObjectKey;
use crate::provider::EngagedProvider;

/// Objects every namespace holds without anyone asking (their presence does not keep it).
fn is_built_in(res: &ApiResource, obj: &DynamicObject) -> bool {
    let name = obj.metadata.name.as_deref().unwrap_or_default();
    matches!(
        (res.group.as_str(), res.plural.as_str(), name),
        ("", "configmaps", "kube-root-ca.crt") | ("", "serviceaccounts", "default")
    ) || res.plural == "events"
}

/// Whether `ns` holds only built-in objects; `None` when that cannot be told.
async fn only_built_ins(reader: &dyn ClusterClient, ns: &str) -> Option<bool> {
    let discovery = reader.discovery().await.ok()?;
    // A group-version discovery could not read may be the only thing in the namespace.
    if !discovery.is_complete() && !crate::planted::planted(crate::planted::Plant::NamespaceRemovalOnPartialDiscovery) {
        tracing::info!(namespace = %ns, unavailable = ?discovery.unavailable, "discovery is partial; keeping the provider namespace");
        return None;
    }
    for resource in discovery
        .resources
        .iter()
        .filter(|r| r.namespaced && r.verbs.iter().any(|v| v == "list"))
    {
        if resource.plural.contains('/') {
            continue;
        }
        let res = resource.api_resource();
        let list = reader.list(&res, Some(ns), &ListParams::default()).await.ok()?;
        if list.items.iter().any(|o| !is_built_in(&res, o)) {
            return Some(false);
        }
    }
    Some(true)
}

/// The provider namespaces the binding's objects map to (the objects stay on the consumer
/// through a drain); `None` when a consumer read failed.
async fn used_by(view: &BindingView, shared: &Binder) -> Option<BTreeSet<String>> {
    let consumer = shared.ctx.consumer.as_ref();
    let mapper = shared.syncers.mapper();
    let mut used = BTreeSet::new();
    for api in &view.spec.apis {
        let Some(crd) = consumer_crd(consumer, &api.name).await.ok()? else {
            continue;
        };
        let Some((res, true, _)) = resource_of(&crd) else {
            continue;
        };
        let objects = match consumer
            .list(&res, view.namespace().as_deref(), &ListParams::default())
            .await
        {
            Ok(list) => list.items,
            // Not served (yet): no instances.
            Err(e) if e.is_not_found() => continue,
            Err(_) => return None,
        };
        used.extend(
            objects
                .iter()
                .filter_map(ObjectKey::of)
                .filter_map(|key| mapper.to_provider(&res, &key).namespace),
        );
    }
    Some(used)
}

/// Removes the provider namespaces the binding used that kbind created for
/// `consumer_cluster_uid` and that are empty of anything but built-ins. Returns how many it
/// asked to delete.
pub(crate) async fn remove_unused(
    view: &BindingView,
    shared: &Binder,
    provider: &EngagedProvider,
    consumer_cluster_uid: &str,
) -> usize {
    let Some(used) = used_by(view, shared).await else {
        return 0;
    };
    if used.is_empty() || consumer_cluster_uid.is_empty() {
        return 0;
    }
    let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    let params = ListParams::default().labels(&format!("{}={TRUE}", label::MANAGED));
    let Ok(list) = provider.reader.list(&namespaces, None, &params).await else {
        return 0;
    };
    let mut removed = 0;
    for ns in list.items {
        let ours = ns
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::CONSUMER_CLUSTER_UID))
            .is_some_and(|uid| uid == consumer_cluster_uid);
        let (Some(name), Some(uid)) = (ns.metadata.name.as_deref(), ns.metadata.uid.clone()) else {
            continue;
        };
        if !ours || !used.contains(name) || ns.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if only_built_ins(provider.reader.as_ref(), name).await != Some(true) {
            continue;
        }
        // Exactly the namespace that was judged: not one re-created or relabelled since.
        let exactly = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid),
                resource_version: ns.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match provider.client.delete(&namespaces, None, name, &exactly).await {
            Ok(_) => {
                tracing::info!(namespace = %name, "removed the provider namespace kbind created");
                removed += 1;
            }
            Err(e) => tracing::info!(namespace = %name, error = %e, "provider namespace kept"),
        }
    }
    removed
}
