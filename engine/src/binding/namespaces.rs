//! Provider namespaces on unbind (DESIGN.md §4 "namespaces"): a namespace kbind created for
//! this consumer cluster (labelled managed, annotated with the consumer cluster UID) is removed
//! once nothing but what Kubernetes puts in every namespace is left in it. Anything else —
//! another binding's copies, another consumer's, a provider's own objects — keeps it. Any
//! refused or failed read keeps it too: removal is a tidy-up, never a risk.

use kbind_api::consts::{TRUE, annotation, label};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, ListParams};

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

/// Removes the provider namespaces kbind created for `consumer_cluster_uid` that are empty of
/// anything but built-ins. Returns how many it asked to delete.
pub(crate) async fn remove_empty(provider: &EngagedProvider, consumer_cluster_uid: &str) -> usize {
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
        let Some(name) = ns.metadata.name.as_deref() else {
            continue;
        };
        if !ours || ns.metadata.deletion_timestamp.is_some() {
            continue;
        }
        if only_built_ins(provider.reader.as_ref(), name).await == Some(true)
            && provider
                .client
                .delete(&namespaces, None, name, &Default::default())
                .await
                .is_ok()
        {
            tracing::info!(namespace = %name, "removed the provider namespace kbind created");
            removed += 1;
        }
    }
    removed
}
