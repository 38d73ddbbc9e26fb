//! The provider namespaces copies land in: created (labelled managed, annotated with the
//! consumer cluster's UID) when missing, and remembered while they are known to exist.

use kbind_api::consts::{TRUE, annotation, label};
use kbind_cluster::identity::namespace_resource;
use kbind_cluster::{ClusterClientExt, DynamicObject, PostParams};
use serde_json::json;

use super::state::ApiSyncer;
use crate::mapper::ObjectKey;
use crate::sync::SyncError;

impl ApiSyncer {
    /// Creates a missing provider namespace (labelled managed, with our cluster UID).
    pub(super) async fn ensure_namespace(&self, target: &ObjectKey) -> Result<(), SyncError> {
        let Some(ns) = target.namespace.as_deref() else {
            return Ok(());
        };
        if self.namespaces.lock().contains(ns) {
            return Ok(());
        }
        let namespaces = namespace_resource();
        let ns_key = ObjectKey::cluster(ns);
        match self.provider.reader.get_opt(&namespaces, None, ns).await {
            // A terminating namespace is not remembered: once it is gone it is created again.
            Ok(Some(found)) if found.metadata.deletion_timestamp.is_some() => return Ok(()),
            Ok(Some(_)) => {}
            // Without read access the apply itself tells whether the namespace exists.
            Err(kbind_cluster::Error::Forbidden { .. }) => return Ok(()),
            Err(source) => {
                return Err(SyncError::ProviderReadFailed { object: ns_key, source });
            }
            Ok(None) => {
                let body: DynamicObject = serde_json::from_value(json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": ns,
                        "labels": {label::MANAGED: TRUE},
                        "annotations": {annotation::CONSUMER_CLUSTER_UID: self.spec.consumer_cluster_uid}},
                }))
                .map_err(|e| SyncError::ProviderWriteFailed {
                    step: "create",
                    object: ns_key.clone(),
                    source: kbind_cluster::Error::Decode(e.to_string()),
                })?;
                match self
                    .provider
                    .client
                    .create(&namespaces, None, &body, &PostParams::default())
                    .await
                {
                    Ok(_) | Err(kbind_cluster::Error::AlreadyExists { .. }) => {}
                    Err(source) => {
                        return Err(SyncError::ProviderWriteFailed {
                            step: "create",
                            object: ns_key,
                            source,
                        });
                    }
                }
            }
        }
        self.namespaces.lock().insert(ns.to_string());
        Ok(())
    }

    /// Forgets that `target`'s provider namespace exists.
    pub(super) fn forget_namespace(&self, target: &ObjectKey) {
        if let Some(ns) = &target.namespace {
            self.namespaces.lock().remove(ns);
        }
    }
}
