//! One related copy: its owner, how a target is classified before any write (contract §4
//! "conflicts", by the rules of [`crate::ownership`]), and the server-side apply body (content
//! only, never logged).

use std::collections::BTreeMap;

use kbind_api::consts::{TRUE, annotation, label};
use kbind_cluster::{ApiResource, DynamicObject};
use serde_json::{Map, Value, json};

use crate::ownership::{self, Copied, Takeover};

/// Who a copy belongs to: one binding on one consumer cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Owner {
    /// The binding's UID (`core.kbind.io/related-binding`).
    pub binding_uid: String,
    /// The consumer cluster's UID (`core.kbind.io/consumer-cluster-uid`).
    pub consumer_cluster_uid: String,
}

impl Owner {
    /// This owner in the terms of [`crate::ownership`].
    fn as_owner(&self) -> ownership::Owner<'_> {
        ownership::Owner::related(&self.consumer_cluster_uid, &self.binding_uid)
    }
}

/// What may be done with the target of one source object.
pub(crate) use crate::ownership::Verdict;

/// Whether `obj` carries kbind's related-copy markers of exactly `owner`.
pub(crate) fn is_ours(obj: &DynamicObject, owner: &Owner) -> bool {
    ownership::is_ours(&obj.metadata, &owner.as_owner())
}

/// Whether `obj` is some binding's related copy (ours or not): never a source itself, which
/// keeps two directions over one kind from copying copies back and forth.
pub(crate) fn is_related_copy(obj: &DynamicObject) -> bool {
    ownership::annotation_of(&obj.metadata, annotation::RELATED_BINDING).is_some()
}

/// Classifies a target before any write. Unmarked targets are adopted only when `adopt`
/// (policy `Adopt`, provider side only); any other owner's markers are `OwnedByAnother`.
pub(crate) fn classify(live: Option<&DynamicObject>, owner: &Owner, adopt: bool) -> Verdict {
    if crate::planted::planted(crate::planted::Plant::OverwriteForeignRelated)
        && let Some(live) = live
    {
        return if live.metadata.deletion_timestamp.is_some() {
            Verdict::Terminating
        } else {
            Verdict::Update { precondition: None }
        };
    }
    let takeover = Takeover { adopt, readopt: false };
    ownership::classify(live, &owner.as_owner(), takeover)
}

/// Labels or annotations of a source that its copy carries (without kbind's keys and other
/// tools' markers, [`ownership::crosses`]).
pub(crate) fn copied_metadata(map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    ownership::crossing(Copied::Object, map)
}

/// The content fields of a Secret or ConfigMap (everything but metadata that a copy carries).
fn builtin_fields(res: &ApiResource) -> Option<&'static [&'static str]> {
    match (res.group.as_str(), res.kind.as_str()) {
        ("", "Secret") => Some(&["type", "data", "immutable"]),
        ("", "ConfigMap") => Some(&["data", "binaryData", "immutable"]),
        _ => None,
    }
}

/// What of an object a copy carries besides metadata: a Secret's or ConfigMap's content fields;
/// of any other kind every top-level field but `status` (which is the other side's to write).
fn content(res: &ApiResource, data: &Value) -> Map<String, Value> {
    let fields = data.as_object().into_iter().flatten();
    match builtin_fields(res) {
        Some(wanted) => fields
            .filter(|(k, v)| wanted.contains(&k.as_str()) && !v.is_null())
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
        None => fields
            .filter(|(k, _)| !matches!(k.as_str(), "apiVersion" | "kind" | "metadata" | "status"))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    }
}

/// The server-side apply body of the copy of `source`: its labels and annotations that cross,
/// its content, and `owner`'s markers.
pub(crate) fn apply_body(
    res: &ApiResource,
    source: &DynamicObject,
    owner: &Owner,
    precondition: Option<&str>,
) -> Value {
    let mut labels: Map<String, Value> = copied_metadata(source.metadata.labels.as_ref())
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    labels.insert(label::MANAGED.into(), json!(TRUE));
    let mut annotations: Map<String, Value> = copied_metadata(source.metadata.annotations.as_ref())
        .into_iter()
        .map(|(k, v)| (k, Value::String(v)))
        .collect();
    annotations.insert(annotation::RELATED_BINDING.into(), json!(owner.binding_uid));
    annotations.insert(
        annotation::CONSUMER_CLUSTER_UID.into(),
        json!(owner.consumer_cluster_uid),
    );
    let mut metadata = json!({
        "name": source.metadata.name.clone().unwrap_or_default(),
        "labels": labels,
        "annotations": annotations,
    });
    if let Some(ns) = &source.metadata.namespace {
        metadata["namespace"] = json!(ns);
    }
    if let Some(rv) = precondition {
        metadata["resourceVersion"] = json!(rv);
    }
    let mut body = json!({"apiVersion": res.api_version, "kind": res.kind, "metadata": metadata});
    for (field, value) in content(res, &source.data) {
        body[field] = value;
    }
    body
}

/// Whether `live` already is what `body` asks for: same content, and every label and
/// annotation of the body present with its value (others may have added their own).
pub(crate) fn up_to_date(res: &ApiResource, live: &DynamicObject, body: &Value) -> bool {
    let content_same = content(res, &live.data) == content(res, body);
    let contains = |live: Option<&BTreeMap<String, String>>, wanted: Option<&Value>| {
        wanted
            .and_then(Value::as_object)
            .into_iter()
            .flatten()
            .all(|(k, v)| live.and_then(|m| m.get(k)).map(String::as_str) == v.as_str())
    };
    content_same
        && contains(live.metadata.labels.as_ref(), body.pointer("/metadata/labels"))
        && contains(
            live.metadata.annotations.as_ref(),
            body.pointer("/metadata/annotations"),
        )
}

#[cfg(test)]
mod tests {
    use super::*;
    use kbind_api::consts::reason;
    use kube::ResourceExt;

    fn secrets() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
    }

    fn owner() -> Owner {
        Owner {
            binding_uid: "b-1".into(),
            consumer_cluster_uid: "cl-1".into(),
        }
    }

    fn secret(annotations: Value) -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "db", "namespace": "team", "resourceVersion": "7",
                "labels": {"app": "web", "core.kbind.io/managed": "true"},
                "annotations": annotations},
            "type": "Opaque",
            "data": {"password": "c2VjcmV0"},
        }))
        .unwrap()
    }

    #[test]
    fn an_absent_target_is_created() {
        assert_eq!(classify(None, &owner(), false), Verdict::Create);
    }

    #[test]
    fn our_copy_is_updated() {
        let ours =
            secret(json!({"core.kbind.io/related-binding": "b-1", "core.kbind.io/consumer-cluster-uid": "cl-1"}));
        assert_eq!(
            classify(Some(&ours), &owner(), false),
            Verdict::Update { precondition: None }
        );
        assert!(is_ours(&ours, &owner()));
    }

    #[test]
    fn an_unmarked_target_is_foreign_unless_adopted() {
        let bare = secret(json!({"note": "mine"}));
        assert_eq!(
            classify(Some(&bare), &owner(), false),
            Verdict::Conflict(reason::FOREIGN_OBJECT_EXISTS)
        );
        assert_eq!(
            classify(Some(&bare), &owner(), true),
            Verdict::Update {
                precondition: Some("7".into())
            }
        );
        assert!(!is_ours(&bare, &owner()));
    }

    #[test]
    fn another_bindings_or_clusters_copy_is_owned_by_another_whatever_the_policy() {
        for annotations in [
            json!({"core.kbind.io/related-binding": "b-2", "core.kbind.io/consumer-cluster-uid": "cl-1"}),
            json!({"core.kbind.io/related-binding": "b-1", "core.kbind.io/consumer-cluster-uid": "cl-2"}),
            json!({"core.kbind.io/related-binding": "b-1"}),
            json!({"core.kbind.io/consumer-cluster-uid": "cl-1", "core.kbind.io/consumer-object-uid": "o"}),
        ] {
            let other = secret(annotations.clone());
            for adopt in [false, true] {
                assert_eq!(
                    classify(Some(&other), &owner(), adopt),
                    Verdict::Conflict(reason::OWNED_BY_ANOTHER),
                    "{annotations} adopt={adopt}"
                );
            }
            assert!(!is_ours(&other, &owner()));
        }
    }

    #[test]
    fn our_terminating_copy_is_waited_for() {
        let mut ours =
            secret(json!({"core.kbind.io/related-binding": "b-1", "core.kbind.io/consumer-cluster-uid": "cl-1"}));
        ours.metadata.deletion_timestamp = serde_json::from_value(json!("2026-01-01T00:00:00Z")).unwrap();
        assert_eq!(classify(Some(&ours), &owner(), false), Verdict::Terminating);
    }

    #[test]
    fn the_body_carries_content_and_markers_but_no_source_markers() {
        let source = secret(json!({"note": "n", "core.kbind.io/related-binding": "b-9",
            "kubectl.kubernetes.io/last-applied-configuration": "{}"}));
        let body = apply_body(&secrets(), &source, &owner(), None);
        assert_eq!(body["data"], json!({"password": "c2VjcmV0"}));
        assert_eq!(body["type"], json!("Opaque"));
        assert_eq!(body["metadata"]["namespace"], json!("team"));
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"note": "n", "core.kbind.io/related-binding": "b-1", "core.kbind.io/consumer-cluster-uid": "cl-1"})
        );
        assert_eq!(
            body["metadata"]["labels"],
            json!({"app": "web", "core.kbind.io/managed": "true"})
        );
        assert!(body["metadata"].get("resourceVersion").is_none());
        let adopting = apply_body(&secrets(), &source, &owner(), Some("7"));
        assert_eq!(adopting["metadata"]["resourceVersion"], json!("7"));
    }

    #[test]
    fn other_tools_markers_stay_on_the_source() {
        // Until the strip list was one (docs/decisions.md), a related copy kept these: Helm,
        // Argo CD or Flux on the other cluster would then manage (or prune) a copy they never made.
        let mut source = secret(json!({"note": "n", "meta.helm.sh/release-name": "shop",
            "argocd.argoproj.io/tracking-id": "shop:/Secret:team/db", "helm.sh/resource-policy": "keep"}));
        source.labels_mut().extend([
            ("app.kubernetes.io/managed-by".to_string(), "Helm".to_string()),
            ("kustomize.toolkit.fluxcd.io/name".to_string(), "shop".to_string()),
            ("app.kubernetes.io/name".to_string(), "db".to_string()),
        ]);
        let body = apply_body(&secrets(), &source, &owner(), None);
        assert_eq!(
            body["metadata"]["annotations"],
            json!({"note": "n", "core.kbind.io/related-binding": "b-1", "core.kbind.io/consumer-cluster-uid": "cl-1"})
        );
        assert_eq!(
            body["metadata"]["labels"],
            json!({"app": "web", "app.kubernetes.io/name": "db", "core.kbind.io/managed": "true"})
        );
        assert_eq!(
            copied_metadata(source.metadata.labels.as_ref())
                .into_keys()
                .collect::<Vec<_>>(),
            ["app", "app.kubernetes.io/name"]
        );
    }

    #[test]
    fn a_copy_of_any_other_kind_carries_every_field_but_status_and_foreign_metadata() {
        let ingresses = ApiResource {
            group: "networking.k8s.io".into(),
            version: "v1".into(),
            api_version: "networking.k8s.io/v1".into(),
            kind: "Ingress".into(),
            plural: "ingresses".into(),
        };
        let source: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "networking.k8s.io/v1", "kind": "Ingress",
            "metadata": {"name": "shop", "namespace": "team", "uid": "u-1", "resourceVersion": "3",
                "finalizers": ["x/y"], "ownerReferences": [{"apiVersion": "v1", "kind": "Service", "name": "s", "uid": "o"}],
                "labels": {"app": "shop"}},
            "spec": {"defaultBackend": {"service": {"name": "shop"}}},
            "status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.7"}]}},
        }))
        .unwrap();
        let body = apply_body(&ingresses, &source, &owner(), None);
        assert_eq!(body["spec"], source.data["spec"]);
        assert!(body.get("status").is_none(), "status is the other side's");
        let metadata = body["metadata"].as_object().unwrap();
        for absent in [
            "finalizers",
            "ownerReferences",
            "uid",
            "resourceVersion",
            "managedFields",
        ] {
            assert!(!metadata.contains_key(absent), "{absent} is not copied");
        }
        let mut live: DynamicObject = serde_json::from_value(body.clone()).unwrap();
        live.data["status"] = json!({"loadBalancer": {}});
        assert!(
            up_to_date(&ingresses, &live, &body),
            "the copy's own status is no difference"
        );
        live.data["spec"]["rules"] = json!([]);
        assert!(!up_to_date(&ingresses, &live, &body), "a field the original lacks is");
    }

    #[test]
    fn a_copy_is_up_to_date_only_with_the_same_content_and_markers() {
        let source = secret(json!({}));
        let body = apply_body(&secrets(), &source, &owner(), None);
        let mut live: DynamicObject = serde_json::from_value(body.clone()).unwrap();
        assert!(up_to_date(&secrets(), &live, &body));
        live.labels_mut().insert("added-by".into(), "someone".into());
        assert!(up_to_date(&secrets(), &live, &body), "extra labels of others are fine");
        live.data["data"] = json!({"password": "b3RoZXI="});
        assert!(!up_to_date(&secrets(), &live, &body));
        let mut unmarked: DynamicObject = serde_json::from_value(body.clone()).unwrap();
        unmarked.annotations_mut().remove(annotation::RELATED_BINDING);
        assert!(!up_to_date(&secrets(), &unmarked, &body));
    }
}
