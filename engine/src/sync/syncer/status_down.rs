//! Status down: the provider copy's `.status` with `observedGeneration` translated to the
//! consumer generation it answers (contract §4 "status down"), written to the consumer
//! object's status subresource.
//!
//! The rule: the copy's `core.kbind.io/consumer-generation` annotation is written in the same
//! apply as its spec, so it names the consumer generation that the copy's current
//! `metadata.generation` (g) carries. Therefore:
//! - the copy has no generation or no parsable annotation → hold (nothing can be translated);
//! - top-level `status.observedGeneration` is present and differs from g → hold: the
//!   provider has not answered the current spec yet, the consumer status stays as it is;
//! - otherwise the status goes down; top-level `observedGeneration` and every condition's
//!   `observedGeneration` equal to g become the consumer generation; a condition that answers
//!   an older provider generation loses its `observedGeneration` (the consumer generation it
//!   answered is not known, and a wrong number would claim an answer that was never given).

use kbind_api::consts::annotation;
use kbind_cluster::{DynamicObject, Patch};
use serde_json::{Value, json};

use super::state::ApiSyncer;
use crate::mapper::ObjectKey;
use crate::sync::SyncError;

/// The step of a failed status write (its retry must not measure the spec-up again).
pub(super) const STATUS_STEP: &str = "write the status of";

impl ApiSyncer {
    /// Provider status down, translated; skipped without a consumer status subresource.
    /// Returns whether the consumer status was written.
    pub(super) async fn status_down(
        &self,
        obj: &DynamicObject,
        key: &ObjectKey,
        copy: &DynamicObject,
    ) -> Result<bool, SyncError> {
        if !self.spec.status_subresource {
            return Ok(false);
        }
        let Some(status) = translated_status(copy) else {
            return Ok(false);
        };
        // The store may not have caught up with our own last write of this very status.
        if obj.data.get("status") == Some(&status) || self.pending.status_in_flight(key, &status) {
            return Ok(false);
        }
        // The whole status in one JSON patch, guarded by the object's UID and not by its
        // resourceVersion: the konnector is the status's only writer and runs one reconcile per
        // object at a time, so a replace guarded by a version the store may not have caught up
        // with (our own finalizer patch, a user's spec change) only failed and cost another
        // round trip and another pass.
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let patch: json_patch::Patch = serde_json::from_value(json!([
            {"op": "test", "path": "/metadata/uid", "value": uid},
            {"op": "add", "path": "/status", "value": &status},
        ]))
        .map_err(|e| SyncError::ConsumerWriteFailed {
            step: STATUS_STEP,
            object: key.clone(),
            source: kbind_cluster::Error::Decode(e.to_string()),
        })?;
        match self.patch_consumer_status(key, Patch::Json(patch)).await {
            Ok(written) => {
                self.pending
                    .own_status(key.clone(), written.metadata.resource_version, status);
                Ok(true)
            }
            // The object moved on; its own change event brings a fresh reconcile.
            Err(kbind_cluster::Error::Conflict { .. }) => Ok(false),
            Err(source) => Err(SyncError::ConsumerWriteFailed {
                step: STATUS_STEP,
                object: key.clone(),
                source,
            }),
        }
    }
}

/// The consumer `.status` for this provider copy, or `None` to leave the consumer alone.
fn translated_status(copy: &DynamicObject) -> Option<Value> {
    let mut status = copy.data.get("status")?.clone();
    if crate::planted::planted(crate::planted::Plant::SkipObservedGenerationTranslation) {
        return Some(status);
    }
    let provider_generation = copy.metadata.generation?;
    let consumer_generation: i64 = copy
        .metadata
        .annotations
        .as_ref()?
        .get(annotation::CONSUMER_GENERATION)?
        .parse()
        .ok()?;
    let map = status.as_object_mut()?;
    if let Some(observed) = map.get("observedGeneration") {
        if observed.as_i64() != Some(provider_generation) {
            return None;
        }
        map.insert("observedGeneration".into(), consumer_generation.into());
    }
    if let Some(conditions) = map.get_mut("conditions").and_then(Value::as_array_mut) {
        for condition in conditions.iter_mut().filter_map(Value::as_object_mut) {
            match condition.get("observedGeneration").map(Value::as_i64) {
                Some(Some(g)) if g == provider_generation => {
                    condition.insert("observedGeneration".into(), consumer_generation.into());
                }
                Some(_) => {
                    condition.remove("observedGeneration");
                }
                None => {}
            }
        }
    }
    Some(status)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn copy(generation: i64, consumer_generation: &str, status: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": "w", "generation": generation,
                "annotations": {"core.kbind.io/consumer-generation": consumer_generation}},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn observed_generation_is_translated_top_level_and_in_conditions() {
        let status = json!({"observedGeneration": 7, "phase": "Ready", "conditions": [
            {"type": "Ready", "status": "True", "observedGeneration": 7},
            {"type": "Old", "status": "True", "observedGeneration": 5},
            {"type": "Plain", "status": "True"},
        ]});
        assert_eq!(
            translated_status(&copy(7, "2", status)),
            Some(json!({"observedGeneration": 2, "phase": "Ready", "conditions": [
                {"type": "Ready", "status": "True", "observedGeneration": 2},
                {"type": "Old", "status": "True"},
                {"type": "Plain", "status": "True"},
            ]}))
        );
    }

    #[test]
    fn a_provider_that_has_not_caught_up_leaves_the_consumer_alone() {
        assert_eq!(translated_status(&copy(8, "3", json!({"observedGeneration": 7}))), None);
    }

    #[test]
    fn status_without_observed_generation_goes_down_as_is() {
        assert_eq!(
            translated_status(&copy(8, "3", json!({"phase": "Pending"}))),
            Some(json!({"phase": "Pending"}))
        );
    }

    #[test]
    fn no_status_or_no_annotation_holds() {
        let mut c = copy(1, "1", json!({"phase": "x"}));
        c.data.as_object_mut().unwrap().remove("status");
        assert_eq!(translated_status(&c), None);
        assert_eq!(translated_status(&copy(1, "not-a-number", json!({"phase": "x"}))), None);
    }
}
