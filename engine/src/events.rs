//! A small Event recorder: `events.k8s.io/v1` Events from `kbind-konnector` about consumer
//! objects, one Event per (object, reason) whose `series.count` grows on repeats.
//!
//! Names are deterministic (`<object name>.<hash of uid and reason>`), so repeats find the
//! existing Event with one GET even after a restart, instead of piling up duplicates. Notes
//! are written by the engine from object keys and reasons only; callers must never pass
//! credentials or server error text that could contain them.

use std::sync::Arc;

use kbind_api::consts::EVENT_COMPONENT;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, PostParams, SharedClock,
};
use serde_json::{Value, json};

/// Errors of the recorder.
#[derive(Debug, thiserror::Error)]
pub enum EventError {
    /// Reading the existing Event failed.
    #[error("failed to read event {name}")]
    ReadFailed {
        /// Event name.
        name: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// Creating or updating the Event failed.
    #[error("failed to write event {name}")]
    WriteFailed {
        /// Event name.
        name: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// The object has no name or UID to point at.
    #[error("failed to record an event: the object has no name or uid")]
    NoReference,
}

/// `Normal` or `Warning`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// Something expected happened.
    Normal,
    /// Something a user should look at.
    Warning,
}

impl EventType {
    fn as_str(self) -> &'static str {
        match self {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        }
    }
}

/// The `events.k8s.io/v1` Event resource.
pub fn event_resource() -> ApiResource {
    ApiResource {
        group: "events.k8s.io".into(),
        version: "v1".into(),
        api_version: "events.k8s.io/v1".into(),
        kind: "Event".into(),
        plural: "events".into(),
    }
}

/// Writes Events about objects of one cluster.
#[derive(Clone)]
pub struct Recorder {
    client: Arc<dyn ClusterClient>,
    clock: SharedClock,
    instance: String,
}

impl std::fmt::Debug for Recorder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Recorder").field("instance", &self.instance).finish()
    }
}

impl Recorder {
    /// A recorder writing through `client`; `instance` is the `reportingInstance`.
    pub fn new(client: Arc<dyn ClusterClient>, clock: SharedClock, instance: &str) -> Self {
        Self {
            client,
            clock,
            instance: instance.to_string(),
        }
    }

    /// Records (or counts once more) an Event about `regarding` of resource `res`.
    pub async fn publish(
        &self,
        res: &ApiResource,
        regarding: &DynamicObject,
        kind: EventType,
        reason: &str,
        action: &str,
        note: &str,
    ) -> Result<(), EventError> {
        let (Some(name), Some(uid)) = (regarding.metadata.name.as_deref(), regarding.metadata.uid.as_deref()) else {
            return Err(EventError::NoReference);
        };
        // Events about cluster-scoped objects live in `default`, as client-go's recorder does.
        let namespace = regarding.metadata.namespace.as_deref().unwrap_or("default");
        let event_name = event_name(name, uid, reason);
        let now = kbind_cluster::clock::format_time(self.clock.now());
        let events = event_resource();
        let existing = self
            .client
            .get_opt(&events, Some(namespace), &event_name)
            .await
            .map_err(|source| EventError::ReadFailed {
                name: event_name.clone(),
                source,
            })?;
        let written = match existing {
            Some(event) => {
                let count = series_count(&event) + 1;
                let patch = json!({
                    // The same 1 kB limit as on create: a repeat must not fail where the first succeeded.
                    "note": truncate(note),
                    "series": {"count": count, "lastObservedTime": micro(&now)},
                });
                self.client
                    .patch(
                        &events,
                        Some(namespace),
                        &event_name,
                        &Patch::Merge(patch),
                        &PatchParams::default(),
                    )
                    .await
                    .map(|_| ())
            }
            None => {
                let body = json!({
                    "apiVersion": "events.k8s.io/v1",
                    "kind": "Event",
                    "metadata": {"name": event_name, "namespace": namespace},
                    "eventTime": micro(&now),
                    "reportingController": EVENT_COMPONENT,
                    "reportingInstance": self.instance,
                    "action": action,
                    "reason": reason,
                    "type": kind.as_str(),
                    "note": truncate(note),
                    "regarding": {
                        "apiVersion": res.api_version,
                        "kind": res.kind,
                        "namespace": regarding.metadata.namespace,
                        "name": name,
                        "uid": uid,
                        "resourceVersion": regarding.metadata.resource_version,
                    },
                });
                let obj: DynamicObject = serde_json::from_value(body).map_err(|e| EventError::WriteFailed {
                    name: event_name.clone(),
                    source: kbind_cluster::Error::Decode(e.to_string()),
                })?;
                self.client
                    .create(&events, Some(namespace), &obj, &PostParams::default())
                    .await
                    .map(|_| ())
            }
        };
        written.map_err(|source| EventError::WriteFailed {
            name: event_name,
            source,
        })
    }
}

/// `series.count` of an existing Event; a first occurrence has no series and counts as 1.
fn series_count(event: &DynamicObject) -> i64 {
    event
        .data
        .get("series")
        .and_then(|s| s.get("count"))
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

/// A MicroTime from a second-precision RFC 3339 time.
fn micro(rfc3339: &str) -> String {
    rfc3339.replace('Z', ".000000Z")
}

/// events.k8s.io/v1 limits `note` to 1 kB.
fn truncate(note: &str) -> String {
    const MAX: usize = 1024;
    if note.len() <= MAX {
        return note.to_string();
    }
    let mut end = MAX;
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    note[..end].to_string()
}

/// `<object name>.<16 hex>`: stable per (object UID, reason), within the 253-character limit.
fn event_name(object: &str, uid: &str, reason: &str) -> String {
    let suffix = format!("{:016x}", fnv1a(&[uid, "\0", reason]));
    let mut keep = object.len().min(253 - suffix.len() - 1);
    while !object.is_char_boundary(keep) {
        keep -= 1;
    }
    format!("{}.{suffix}", &object[..keep])
}

/// 64-bit FNV-1a: a hash that stays the same across builds and releases, unlike std's.
fn fnv1a(parts: &[&str]) -> u64 {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in parts.iter().flat_map(|p| p.bytes()) {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    hash
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_names_are_stable_per_object_and_reason() {
        let a = event_name("w1", "uid-1", "OwnedByAnother");
        assert_eq!(a, event_name("w1", "uid-1", "OwnedByAnother"));
        assert_ne!(a, event_name("w1", "uid-1", "ForeignObjectExists"));
        assert_ne!(a, event_name("w1", "uid-2", "OwnedByAnother"));
        assert!(a.starts_with("w1."));
        let long = "x".repeat(253);
        assert_eq!(event_name(&long, "u", "r").len(), 253);
    }

    #[test]
    fn long_notes_are_cut_on_a_char_boundary() {
        let note = "é".repeat(600);
        let cut = truncate(&note);
        assert!(cut.len() <= 1024);
        assert!(note.starts_with(&cut));
    }

    #[tokio::test(start_paused = true)]
    async fn a_repeated_event_with_a_long_note_is_truncated_too() {
        let cluster = fakeapi::FakeCluster::builder("events").seed(4).build();
        let client: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
        let clock: SharedClock = Arc::new(kbind_cluster::TokioClock::fixed());
        let recorder = Recorder::new(client.clone(), clock, "test");
        let regarding: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "namespace": "default", "uid": "uid-1"},
        }))
        .unwrap();
        let res = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
        let long = "x".repeat(5000);
        for _ in 0..2 {
            recorder
                .publish(&res, &regarding, EventType::Warning, "OwnedByAnother", "Sync", &long)
                .await
                .unwrap();
        }
        let event = client
            .get(
                &event_resource(),
                Some("default"),
                &event_name("cm", "uid-1", "OwnedByAnother"),
            )
            .await
            .unwrap();
        assert_eq!(series_count(&event), 2, "the repeat was counted");
        let note = event.data["note"].as_str().unwrap_or_default();
        assert_eq!(note.len(), 1024, "the repeat's note is cut like the first one's");
    }

    #[test]
    fn micro_time_has_microseconds() {
        assert_eq!(micro("2026-01-01T00:00:00Z"), "2026-01-01T00:00:00.000000Z");
    }
}
