//! The signals of a copy left alone (contract §4 "conflicts"): the conflict annotation, a
//! Warning Event and a `Synced=False` condition on the consumer object, and the report.

use kbind_api::consts::{annotation, reason};
use kbind_cluster::{DynamicObject, Patch};
use serde_json::{Value, json};

use super::state::ApiSyncer;
use crate::events::EventType;
use crate::mapper::ObjectKey;
use crate::sync::meta;
use crate::sync::{SyncError, lock};

/// The condition kbind writes into a conflicted object's `status.conditions`.
const SYNCED_CONDITION: &str = "Synced";

impl ApiSyncer {
    /// Conflict signals: the annotation, a Warning Event and a status condition (the last two
    /// once per new reason), and the report.
    pub(super) async fn signal_conflict(
        &self,
        obj: &DynamicObject,
        key: &ObjectKey,
        target: &ObjectKey,
        why: &'static str,
    ) -> Result<(), SyncError> {
        {
            let mut findings = lock(&self.findings);
            findings.conflicts.insert(key.clone(), why.to_string());
            findings.synced.remove(key);
        }
        if meta::conflict_of(obj) == Some(why) {
            return Ok(());
        }
        self.set_conflict_annotation(key, Some(why)).await?;
        let note = match why {
            reason::FOREIGN_OBJECT_EXISTS => {
                format!("provider object {target} exists without kbind markers; conflictPolicy Fail leaves it alone")
            }
            _ => format!("provider object {target} belongs to another consumer object or cluster; left alone"),
        };
        if let Err(e) = self
            .recorder
            .publish(self.res(), obj, EventType::Warning, why, "Sync", &note)
            .await
        {
            tracing::debug!(object = %key, error = %e, "could not record the conflict event");
        }
        self.conflict_condition(obj, key, why, &note).await;
        Ok(())
    }

    pub(super) async fn clear_conflict(&self, obj: &DynamicObject, key: &ObjectKey) -> Result<(), SyncError> {
        lock(&self.findings).conflicts.remove(key);
        if meta::conflict_of(obj).is_some() {
            self.set_conflict_annotation(key, None).await?;
        }
        Ok(())
    }

    async fn set_conflict_annotation(&self, key: &ObjectKey, why: Option<&str>) -> Result<(), SyncError> {
        let patch = json!({"metadata": {"annotations": {annotation::CONFLICT: why}}});
        self.patch_consumer(key, Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|source| SyncError::ConsumerWriteFailed {
                step: "annotate the conflict on",
                object: key.clone(),
                source,
            })
    }

    /// Best effort: a `Synced=False` condition in `status.conditions` (a schema without one
    /// prunes it; no status subresource means no status writes at all).
    async fn conflict_condition(&self, obj: &DynamicObject, key: &ObjectKey, why: &str, note: &str) {
        if !self.spec.status_subresource {
            return;
        }
        let mut conditions: Vec<Value> = obj
            .data
            .get("status")
            .and_then(|s| s.get("conditions"))
            .and_then(Value::as_array)
            .map(|c| {
                c.iter()
                    .filter(|c| c.get("type").and_then(Value::as_str) != Some(SYNCED_CONDITION))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default();
        conditions.push(json!({
            "type": SYNCED_CONDITION, "status": "False", "reason": why, "message": note,
            "lastTransitionTime": kbind_cluster::clock::format_time(self.clock.now()),
            "observedGeneration": obj.metadata.generation,
        }));
        let patch = json!({"status": {"conditions": conditions}});
        if let Err(e) = self.patch_consumer_status(key, Patch::Merge(patch)).await {
            tracing::debug!(object = %key, error = %e, "could not write the conflict condition");
        }
    }
}
