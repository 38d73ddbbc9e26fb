//! What goes up and how a provider target is classified (contract §4 "spec up", "conflicts"),
//! by the rules of [`crate::ownership`].

use std::collections::BTreeMap;

use kbind_api::ConflictPolicy;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, TRUE, annotation, connection_label_value, finalizer, label};
use kbind_cluster::{ApiResource, DeleteParams, DynamicObject};
use kube::api::Preconditions;
use serde_json::{Map, Value, json};

use crate::mapper::ObjectKey;
use crate::ownership::{self, Copied, Owner, Takeover};

/// The consumer labels or annotations that go up, as the JSON map of an apply body.
fn filtered(map: Option<&BTreeMap<String, String>>) -> Map<String, Value> {
    ownership::crossing(Copied::Object, map)
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect()
}

/// The server-side apply body of the provider copy: only the fields kbind owns.
pub(crate) fn apply_body(
    res: &ApiResource,
    obj: &DynamicObject,
    target: &ObjectKey,
    consumer_cluster_uid: &str,
    precondition: Option<&str>,
) -> Value {
    let mut labels = filtered(obj.metadata.labels.as_ref());
    labels.insert(label::MANAGED.into(), json!(TRUE));
    let mut annotations = filtered(obj.metadata.annotations.as_ref());
    annotations.insert(annotation::CONSUMER_CLUSTER_UID.into(), json!(consumer_cluster_uid));
    annotations.insert(
        annotation::CONSUMER_OBJECT_UID.into(),
        json!(obj.metadata.uid.clone().unwrap_or_default()),
    );
    annotations.insert(
        annotation::CONSUMER_GENERATION.into(),
        json!(obj.metadata.generation.unwrap_or(0).to_string()),
    );
    let mut metadata = json!({"name": target.name, "labels": labels, "annotations": annotations});
    if let Some(ns) = &target.namespace {
        metadata["namespace"] = json!(ns);
    }
    if crate::planted::planted(crate::planted::Plant::CopyOwnerReferencesUp)
        && let Some(refs) = &obj.metadata.owner_references
    {
        metadata["ownerReferences"] = json!(refs);
    }
    if let Some(rv) = precondition {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({"apiVersion": res.api_version, "kind": res.kind, "metadata": metadata});
    if let Some(spec) = obj.data.get("spec") {
        body["spec"] = spec.clone();
    }
    body
}

/// What may be done with the provider target of one consumer object.
pub(crate) use crate::ownership::Verdict;

fn annotation_of<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    ownership::annotation_of(&obj.metadata, key)
}

/// Whether the provider copy carries both of our markers for this consumer object.
pub(crate) fn is_ours(copy: &DynamicObject, consumer_cluster_uid: &str, object_uid: &str) -> bool {
    ownership::is_ours(&copy.metadata, &Owner::object(consumer_cluster_uid, object_uid))
}

/// Background deletion of exactly `copy`: its UID and resourceVersion are preconditions, so an
/// object replaced or changed since it was read (perhaps someone else's by now) is never deleted.
pub(crate) fn delete_exactly(copy: &DynamicObject) -> DeleteParams {
    DeleteParams {
        preconditions: Some(Preconditions {
            uid: copy.metadata.uid.clone(),
            resource_version: copy.metadata.resource_version.clone(),
        }),
        ..DeleteParams::background()
    }
}

/// Classifies the provider target before any write to it.
pub(crate) fn classify(
    live: Option<&DynamicObject>,
    consumer: &DynamicObject,
    consumer_cluster_uid: &str,
    policy: &ConflictPolicy,
) -> Verdict {
    let Some(live) = live else {
        return Verdict::Create;
    };
    if crate::planted::planted(crate::planted::Plant::WriteBeforeClassifying) {
        return Verdict::Update { precondition: None };
    }
    let object_uid = consumer.metadata.uid.as_deref().unwrap_or_default();
    let takeover = Takeover {
        adopt: *policy == ConflictPolicy::Adopt,
        readopt: wants_readopt(consumer),
    };
    ownership::classify(Some(live), &Owner::object(consumer_cluster_uid, object_uid), takeover)
}

/// `core.kbind.io/readopt: "true"` on the consumer object.
pub(crate) fn wants_readopt(obj: &DynamicObject) -> bool {
    annotation_of(obj, annotation::READOPT) == Some(TRUE)
}

/// `core.kbind.io/deletion-policy: Orphan` on the consumer object.
pub(crate) fn is_orphan(obj: &DynamicObject) -> bool {
    annotation_of(obj, annotation::DELETION_POLICY) == Some(DELETION_POLICY_ORPHAN)
}

/// The conflict reason recorded on the consumer object.
pub(crate) fn conflict_of(obj: &DynamicObject) -> Option<&str> {
    annotation_of(obj, annotation::CONFLICT)
}

/// Whether the consumer object carries the syncer finalizer.
pub(crate) fn has_finalizer(obj: &DynamicObject) -> bool {
    crate::finalizers::has(&obj.metadata, finalizer::SYNCER)
}

/// The value of the consumer object's `core.kbind.io/connection` label: a Connection's name, or
/// the hash form of a long one ([`kbind_api::consts::connection_label_value`]).
pub(crate) fn connection_of(obj: &DynamicObject) -> Option<&str> {
    obj.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::CONNECTION))
        .map(String::as_str)
}

/// Whether the consumer object's label names `connection` (`None` when it has no label).
pub(crate) fn labelled_for(obj: &DynamicObject, connection: &str) -> Option<bool> {
    connection_of(obj).map(|value| value == connection_label_value(connection))
}

/// The full name of the Connection holding the object, for messages: the annotation a hashed
/// label comes with, else the label itself.
pub(crate) fn holder_of(obj: &DynamicObject) -> Option<&str> {
    let label = connection_of(obj)?;
    Some(annotation_of(obj, annotation::CONNECTION).unwrap_or(label))
}

/// Whether the consumer object is served through `connection`: its label says so, or it has no
/// label (synced before objects carried one) and `unlabelled_ours` (the CRD was pulled there).
pub(crate) fn served_through(obj: &DynamicObject, connection: &str, unlabelled_ours: bool) -> bool {
    labelled_for(obj, connection).unwrap_or(unlabelled_ours)
}

/// Adds to a merge patch's `metadata` what marks the object as served through `connection`:
/// the label (a value that fits) and, when the label is the hash form, the full name as
/// annotation.
pub(crate) fn mark_connection(metadata: &mut Value, connection: &str) {
    let value = connection_label_value(connection);
    if value != connection {
        metadata["annotations"] = json!({annotation::CONNECTION: connection});
    }
    metadata["labels"] = json!({label::CONNECTION: value});
}

/// Adds to a merge patch's `metadata` the removal of what [`mark_connection`] wrote.
pub(crate) fn unmark_connection(metadata: &mut Value, obj: &DynamicObject) {
    if connection_of(obj).is_some() {
        metadata["labels"] = json!({label::CONNECTION: null});
    }
    if annotation_of(obj, annotation::CONNECTION).is_some() {
        metadata["annotations"] = json!({annotation::CONNECTION: null});
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_api::consts::reason;

    fn object(value: Value) -> DynamicObject {
        serde_json::from_value(value).unwrap()
    }

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn consumer() -> DynamicObject {
        object(json!({
            "apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "a", "uid": "obj-1", "generation": 3,
                "labels": {"app": "web", "app.kubernetes.io/managed-by": "Helm", "core.kbind.io/managed": "x"},
                "annotations": {"note": "keep", "meta.helm.sh/release-name": "r", "helm.sh/hook": "h",
                    "argocd.argoproj.io/sync-wave": "1", "kustomize.toolkit.fluxcd.io/name": "k",
                    "kubectl.kubernetes.io/last-applied-configuration": "{}", "core.kbind.io/readopt": "true"},
                "finalizers": ["core.kbind.io/syncer", "other"],
                "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "c", "uid": "u"}]},
            "spec": {"size": 1},
            "status": {"phase": "Ready"},
        }))
    }

    fn copy(cluster: Option<&str>, object_uid: Option<&str>) -> DynamicObject {
        let mut annotations = serde_json::Map::new();
        if let Some(c) = cluster {
            annotations.insert(annotation::CONSUMER_CLUSTER_UID.into(), json!(c));
        }
        if let Some(o) = object_uid {
            annotations.insert(annotation::CONSUMER_OBJECT_UID.into(), json!(o));
        }
        object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
            "metadata": {"name": "w", "namespace": "a", "resourceVersion": "7", "annotations": annotations}}))
    }

    #[test]
    fn only_user_metadata_and_spec_go_up_with_our_markers() {
        let body = apply_body(
            &widgets(),
            &consumer(),
            &ObjectKey::namespaced("p-a", "p-w"),
            "cl-1",
            None,
        );
        assert_eq!(
            body,
            json!({
                "apiVersion": "example.org/v1", "kind": "Widget",
                "metadata": {"name": "p-w", "namespace": "p-a",
                    "labels": {"app": "web", "core.kbind.io/managed": "true"},
                    "annotations": {"note": "keep", "core.kbind.io/consumer-cluster-uid": "cl-1",
                        "core.kbind.io/consumer-object-uid": "obj-1", "core.kbind.io/consumer-generation": "3"}},
                "spec": {"size": 1},
            })
        );
    }

    #[test]
    fn classification_follows_the_conflict_table() {
        let obj = consumer();
        let fail = ConflictPolicy::Fail;
        let adopt = ConflictPolicy::Adopt;
        assert_eq!(classify(None, &obj, "cl-1", &fail), Verdict::Create);
        let ours = copy(Some("cl-1"), Some("obj-1"));
        assert_eq!(
            classify(Some(&ours), &obj, "cl-1", &fail),
            Verdict::Update { precondition: None }
        );
        let bare = copy(None, None);
        assert_eq!(
            classify(Some(&bare), &obj, "cl-1", &fail),
            Verdict::Conflict(reason::FOREIGN_OBJECT_EXISTS)
        );
        assert_eq!(
            classify(Some(&bare), &obj, "cl-1", &adopt),
            Verdict::Update {
                precondition: Some("7".into())
            }
        );
        let other_cluster = copy(Some("cl-2"), Some("obj-1"));
        assert_eq!(
            classify(Some(&other_cluster), &obj, "cl-1", &adopt),
            Verdict::Conflict(reason::OWNED_BY_ANOTHER)
        );
        let half = copy(Some("cl-1"), None);
        assert_eq!(
            classify(Some(&half), &obj, "cl-1", &adopt),
            Verdict::Conflict(reason::OWNED_BY_ANOTHER)
        );
        // `consumer()` asks for readopt: our cluster, stale object UID.
        let stale = copy(Some("cl-1"), Some("obj-0"));
        assert_eq!(
            classify(Some(&stale), &obj, "cl-1", &fail),
            Verdict::Update {
                precondition: Some("7".into())
            }
        );
        let mut no_readopt = obj.clone();
        no_readopt
            .metadata
            .annotations
            .as_mut()
            .unwrap()
            .remove(annotation::READOPT);
        assert_eq!(
            classify(Some(&stale), &no_readopt, "cl-1", &adopt),
            Verdict::Conflict(reason::OWNED_BY_ANOTHER)
        );
    }

    #[test]
    fn a_related_copy_is_never_adopted_as_a_provider_copy() {
        // Until the marker rule was one (docs/decisions.md), a target marked only as some
        // binding's related copy counted as unmarked here, and `Adopt` took it over.
        let mut related = copy(None, None);
        related
            .metadata
            .annotations
            .get_or_insert_with(Default::default)
            .insert(annotation::RELATED_BINDING.into(), "b-1".into());
        for policy in [ConflictPolicy::Fail, ConflictPolicy::Adopt] {
            assert_eq!(
                classify(Some(&related), &consumer(), "cl-1", &policy),
                Verdict::Conflict(reason::OWNED_BY_ANOTHER),
                "{policy:?}"
            );
        }
    }

    #[test]
    fn a_copy_is_deleted_only_as_it_was_judged() {
        let mut ours = copy(Some("cl-1"), Some("obj-1"));
        ours.metadata.uid = Some("copy-uid".into());
        let params = delete_exactly(&ours);
        let pre = params.preconditions.expect("preconditions");
        assert_eq!(
            (pre.uid.as_deref(), pre.resource_version.as_deref()),
            (Some("copy-uid"), Some("7"))
        );
        assert_eq!(params.propagation_policy, DeleteParams::background().propagation_policy);
    }

    #[test]
    fn a_terminating_copy_of_ours_is_waited_for() {
        let mut ours = copy(Some("cl-1"), Some("obj-1"));
        ours.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(
            classify(Some(&ours), &consumer(), "cl-1", &ConflictPolicy::Fail),
            Verdict::Terminating
        );
    }
}
