use prost_reflect::ReflectMessage;

use super::*;
use crate::builtins;

fn meta(name: &str, namespace: Option<&str>) -> Value {
    let mut meta = json!({
        "name": name,
        "uid": "5f0c1b1e-1111-2222-3333-444455556666",
        "resourceVersion": "42",
        "generation": 3,
        "creationTimestamp": "2026-01-01T10:00:00Z",
        "labels": {"app": "demo", "tier": ""},
        "annotations": {"note": "x"},
        "finalizers": ["example.com/keep"],
        "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "uid": "u-1", "controller": true, "blockOwnerDeletion": false}],
        "managedFields": [{"manager": "kubectl", "operation": "Apply", "apiVersion": "v1", "time": "2026-01-01T10:00:00Z", "fieldsType": "FieldsV1", "fieldsV1": {"f:metadata": {"f:labels": {".": {}, "f:app": {}}}}}],
    });
    if let Some(ns) = namespace {
        meta["namespace"] = json!(ns);
    }
    meta
}

/// A realistic object of every kind fakeapi serves, by kind (each field type exercised once).
fn sample(api_version: &str, kind: &str) -> Option<Value> {
    let body = match kind {
        "Namespace" => {
            json!({"metadata": meta("team-a", None), "spec": {"finalizers": ["kubernetes"]}, "status": {"phase": "Active", "conditions": [{"type": "NamespaceDeletionDiscoveryFailure", "status": "False", "lastTransitionTime": "2026-01-01T10:00:00Z", "reason": "ok", "message": "m"}]}})
        }
        "Secret" => {
            json!({"metadata": meta("s", Some("default")), "type": "Opaque", "immutable": false, "data": {"token": "AAEC/w==", "empty": ""}, "stringData": {"plain": "text"}})
        }
        "ConfigMap" => {
            json!({"metadata": meta("c", Some("default")), "data": {"k": "v", "blank": ""}, "binaryData": {"bin": "aGkhPw=="}, "immutable": true})
        }
        "ServiceAccount" => {
            json!({"metadata": meta("sa", Some("default")), "automountServiceAccountToken": false, "secrets": [{"name": "sa-token", "namespace": "default", "fieldPath": "x"}], "imagePullSecrets": [{"name": "pull"}]})
        }
        "Event" if api_version == "v1" => {
            json!({"metadata": meta("e.1", Some("default")), "involvedObject": {"kind": "Pod", "namespace": "default", "name": "p", "uid": "u", "apiVersion": "v1", "resourceVersion": "7", "fieldPath": "spec.containers{c}"}, "reason": "Started", "message": "started", "source": {"component": "kubelet", "host": "node-1"}, "firstTimestamp": "2026-01-01T10:00:00Z", "lastTimestamp": "2026-01-01T10:05:00Z", "count": 2, "type": "Normal", "eventTime": "2026-01-01T10:00:00.123456Z", "series": {"count": 3, "lastObservedTime": "2026-01-01T10:06:00.000001Z"}, "action": "Start", "related": {"kind": "Node", "name": "node-1"}, "reportingComponent": "kubelet", "reportingInstance": "node-1"})
        }
        "Event" => {
            json!({"metadata": meta("e.2", Some("default")), "eventTime": "2026-01-01T10:00:00.123456Z", "series": {"count": 2, "lastObservedTime": "2026-01-01T10:01:00.500000Z"}, "reportingController": "example.com/ctl", "reportingInstance": "ctl-0", "action": "Reconcile", "reason": "Synced", "regarding": {"kind": "Lease", "name": "l", "namespace": "default"}, "note": "synced", "type": "Normal", "deprecatedCount": 1, "deprecatedFirstTimestamp": "2026-01-01T10:00:00Z", "deprecatedLastTimestamp": null})
        }
        "Lease" => {
            json!({"metadata": meta("leader", Some("kube-system")), "spec": {"holderIdentity": "ctl-0_abc", "leaseDurationSeconds": 15, "acquireTime": "2026-01-01T10:00:00.000000Z", "renewTime": "2026-01-01T10:00:10.250000Z", "leaseTransitions": 0, "strategy": "OldestEmulationVersion", "preferredHolder": "ctl-1"}})
        }
        "Role" | "ClusterRole" => {
            let mut role = json!({"metadata": meta("r", (kind == "Role").then_some("default")), "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["a"]}]});
            if kind == "ClusterRole" {
                if let Some(rules) = role["rules"].as_array_mut() {
                    rules.push(json!({"verbs": ["get"], "nonResourceURLs": ["/healthz"]}));
                }
                role["aggregationRule"] = json!({"clusterRoleSelectors": [{"matchLabels": {"agg": "true"}, "matchExpressions": [{"key": "k", "operator": "In", "values": ["a", "b"]}]}]});
            }
            role
        }
        "RoleBinding" | "ClusterRoleBinding" => {
            json!({"metadata": meta("b", (kind == "RoleBinding").then_some("default")), "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": "default"}, {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}], "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "view"}})
        }
        "Deployment" => json!({"metadata": meta("web", Some("default")), "spec": {
            "replicas": 0, "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 1}},
            "minReadySeconds": 5, "revisionHistoryLimit": 10, "progressDeadlineSeconds": 600, "paused": true,
            "template": {"metadata": {"labels": {"app": "web"}}, "spec": {
                "containers": [{"name": "c", "image": "nginx:1.27", "args": ["-g", "daemon off;"],
                    "ports": [{"name": "http", "containerPort": 80, "protocol": "TCP"}],
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valueFrom": {"fieldRef": {"apiVersion": "v1", "fieldPath": "metadata.name"}}}],
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
                    "readinessProbe": {"httpGet": {"path": "/", "port": "http", "scheme": "HTTP"}, "periodSeconds": 10, "failureThreshold": 3},
                    "livenessProbe": {"tcpSocket": {"port": 80}, "initialDelaySeconds": 1},
                    "securityContext": {"runAsNonRoot": true, "allowPrivilegeEscalation": false, "capabilities": {"drop": ["ALL"]}},
                    "volumeMounts": [{"name": "cfg", "mountPath": "/etc/cfg", "readOnly": true}],
                    "imagePullPolicy": "IfNotPresent", "terminationMessagePolicy": "File"}],
                "volumes": [{"name": "cfg", "configMap": {"name": "c", "defaultMode": 420, "items": [{"key": "k", "path": "k"}]}}, {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}}],
                "restartPolicy": "Always", "terminationGracePeriodSeconds": 30, "serviceAccountName": "sa",
                "automountServiceAccountToken": false, "nodeSelector": {"disk": "ssd"},
                "tolerations": [{"key": "k", "operator": "Exists", "effect": "NoSchedule", "tolerationSeconds": 60}],
                "affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 100, "podAffinityTerm": {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"app": "web"}}}}]}}}}},
            "status": {"observedGeneration": 3, "replicas": 1, "updatedReplicas": 1, "readyReplicas": 1, "availableReplicas": 1,
                "conditions": [{"type": "Available", "status": "True", "lastUpdateTime": "2026-01-01T10:00:00Z", "lastTransitionTime": "2026-01-01T10:00:00Z", "reason": "MinimumReplicasAvailable", "message": "ok"}]}}),
        "CustomResourceDefinition" => json!({"metadata": meta("widgets.example.com", None), "spec": {
            "group": "example.com", "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList", "shortNames": ["wd"], "categories": ["all"]},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": {"status": {}, "scale": {"specReplicasPath": ".spec.replicas", "statusReplicasPath": ".status.replicas"}},
                "additionalPrinterColumns": [{"name": "Size", "type": "integer", "jsonPath": ".spec.size", "priority": 1}],
                "selectableFields": [{"jsonPath": ".spec.color"}],
                "schema": {"openAPIV3Schema": crd_schema()}}],
            "conversion": {"strategy": "Webhook", "webhook": {"conversionReviewVersions": ["v1"], "clientConfig": {"caBundle": "Y2E=", "service": {"namespace": "ns", "name": "svc", "path": "/convert", "port": 443}}}}},
            "status": {"acceptedNames": {"plural": "widgets", "kind": "Widget"}, "storedVersions": ["v1"],
                "conditions": [{"type": "Established", "status": "True", "lastTransitionTime": "2026-01-01T10:00:00Z", "reason": "InitialNamesAccepted", "message": "ok"}]}}),
        "TokenRequest" => {
            json!({"metadata": {"name": "sa", "namespace": "default"}, "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600, "boundObjectRef": {"kind": "Pod", "apiVersion": "v1", "name": "p", "uid": "u"}}, "status": {"token": "not-a-real-token", "expirationTimestamp": "2026-01-01T11:00:00Z"}})
        }
        "Status" => {
            json!({"metadata": {"resourceVersion": "9"}, "status": "Failure", "message": "configmaps \"a\" not found", "reason": "NotFound", "details": {"name": "a", "kind": "configmaps", "causes": [{"reason": "FieldValueInvalid", "message": "m", "field": "data"}], "retryAfterSeconds": 1}, "code": 404})
        }
        "DeleteOptions" => {
            json!({"gracePeriodSeconds": 0, "preconditions": {"uid": "u", "resourceVersion": "3"}, "orphanDependents": false, "propagationPolicy": "Foreground", "dryRun": ["All"]})
        }
        _ => return None,
    };
    let mut body = body;
    body["apiVersion"] = json!(api_version);
    body["kind"] = json!(kind);
    Some(body)
}

fn crd_schema() -> Value {
    let spec = json!({"type": "object", "required": ["size"], "x-kubernetes-preserve-unknown-fields": true,
        "properties": {
            "size": {"type": "integer", "format": "int32", "minimum": 0, "maximum": 10.5, "default": 1},
            "color": {"type": "string", "enum": ["red", "blue"], "pattern": "^[a-z]+$"},
            "tags": {"type": "array", "items": {"type": "string"}, "x-kubernetes-list-type": "set"},
            "extra": {"type": "object", "additionalProperties": {"type": "string"}},
            "open": {"type": "object", "additionalProperties": false},
            "either": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "embedded": {"type": "object", "x-kubernetes-embedded-resource": true, "x-kubernetes-preserve-unknown-fields": true},
            "keyed": {"type": "array", "x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"], "items": {"type": "object", "properties": {"name": {"type": "string"}}}}}});
    json!({"type": "object", "description": "a widget",
        "x-kubernetes-validations": [{"rule": "self.spec.size >= 0", "message": "size"}],
        "properties": {"spec": spec, "status": {"type": "object", "nullable": true, "example": {"replicas": 1}}}})
}

/// The JSON pointers where `b` differs from `a`, for failure messages.
fn diff(a: &Value, b: &Value) -> String {
    fn walk(path: String, a: &Value, b: &Value, out: &mut Vec<String>) {
        match (a, b) {
            (Value::Object(x), Value::Object(y)) => {
                for key in x.keys().chain(y.keys().filter(|k| !x.contains_key(*k))) {
                    match (x.get(key), y.get(key)) {
                        (Some(va), Some(vb)) => walk(format!("{path}/{key}"), va, vb, out),
                        (va, vb) => out.push(format!("{path}/{key}: {va:?} -> {vb:?}")),
                    }
                }
            }
            (Value::Array(x), Value::Array(y)) if x.len() == y.len() => {
                for (i, (va, vb)) in x.iter().zip(y).enumerate() {
                    walk(format!("{path}/{i}"), va, vb, out);
                }
            }
            _ if a != b => out.push(format!("{path}: {a} -> {b}")),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(String::new(), a, b, &mut out);
    out.join("; ")
}

fn round_trip(object: &Value) -> Value {
    let bytes = encode(object).unwrap_or_else(|e| panic!("encoding {}: {e}", object["kind"]));
    decode(&bytes).unwrap_or_else(|e| panic!("decoding {}: {e}", object["kind"]))
}

/// Every kind fakeapi serves (and their lists), plus the TokenRequest subresource, Status and
/// DeleteOptions, survive protobuf both ways unchanged.
#[test]
fn every_served_builtin_kind_round_trips_through_protobuf() {
    let mut kinds: Vec<(String, String)> = builtins::all()
        .into_iter()
        .map(|b| {
            let r = b.resource;
            let api_version = if r.group.is_empty() {
                r.version
            } else {
                format!("{}/{}", r.group, r.version)
            };
            (api_version, r.kind)
        })
        .collect();
    kinds.push(("authentication.k8s.io/v1".into(), "TokenRequest".into()));
    kinds.push(("v1".into(), "Status".into()));
    kinds.push(("apps/v1".into(), "DeleteOptions".into()));
    for (api_version, kind) in kinds {
        let object = sample(&api_version, &kind).unwrap_or_else(|| panic!("no sample of {kind} ({api_version})"));
        let back = round_trip(&object);
        assert!(
            back == object,
            "{kind} ({api_version}) changed: {}",
            diff(&object, &back)
        );
        if kind == "Status" || kind == "DeleteOptions" || kind == "TokenRequest" {
            continue;
        }
        let list = json!({"apiVersion": api_version, "kind": format!("{kind}List"), "metadata": {"resourceVersion": "43", "continue": "c"}, "items": [object]});
        let mut expected = list.clone();
        // Items of a list carry no TypeMeta in protobuf (nor in kube-apiserver's JSON).
        for key in ["apiVersion", "kind"] {
            expected["items"][0].as_object_mut().map(|o| o.remove(key));
        }
        assert_eq!(round_trip(&list), expected, "{kind}List ({api_version})");
    }
}

/// Every Go type with its own JSON that the served kinds reach is mapped by the codec.
#[test]
fn every_custom_json_type_is_mapped() {
    for name in &schema().custom {
        assert!(
            to_json::CUSTOM.contains(&name.as_str()),
            "{name} writes its own JSON but is not mapped"
        );
    }
}

fn set(msg: &mut DynamicMessage, name: &str, value: PbValue) {
    msg.try_set_field_by_name(name, value).unwrap();
}

fn message_of(api_version: &str, kind: &str) -> DynamicMessage {
    DynamicMessage::new(schema().message_of(api_version, kind).unwrap())
}

fn sub(msg: &DynamicMessage, field: &str) -> DynamicMessage {
    let desc = msg
        .descriptor()
        .get_field_by_name(field)
        .unwrap()
        .kind()
        .as_message()
        .unwrap()
        .clone();
    DynamicMessage::new(desc)
}

/// Go writes every non-pointer field, zero or not: the JSON keeps what Go's JSON keeps (pointers
/// and non-omitempty fields) and leaves out zero omitempty values.
#[test]
fn zero_values_follow_go_json() {
    let mut deployment = message_of("apps/v1", "Deployment");
    let mut meta = sub(&deployment, "metadata");
    set(&mut meta, "name", PbValue::String("d".into()));
    set(&mut meta, "namespace", PbValue::String(String::new()));
    set(&mut meta, "generation", PbValue::I64(0));
    let zero_time = sub(&meta, "creationTimestamp");
    set(&mut meta, "creationTimestamp", PbValue::Message(zero_time));
    let mut spec = sub(&deployment, "spec");
    set(&mut spec, "replicas", PbValue::I32(0));
    set(&mut spec, "paused", PbValue::Bool(false));
    set(&mut spec, "minReadySeconds", PbValue::I32(0));
    set(&mut deployment, "metadata", PbValue::Message(meta));
    set(&mut deployment, "spec", PbValue::Message(spec));
    let status = sub(&deployment, "status");
    set(&mut deployment, "status", PbValue::Message(status));
    let body = envelope("apps/v1", "Deployment", deployment.encode_to_vec()).unwrap();
    assert_eq!(
        decode(&body).unwrap(),
        json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "d"}, "spec": {"replicas": 0}, "status": {}})
    );

    let mut binding = message_of("rbac.authorization.k8s.io/v1", "RoleBinding");
    let mut role_ref = sub(&binding, "roleRef");
    set(&mut role_ref, "apiGroup", PbValue::String(String::new()));
    set(&mut role_ref, "kind", PbValue::String("Role".into()));
    set(&mut binding, "roleRef", PbValue::Message(role_ref));
    let body = envelope("rbac.authorization.k8s.io/v1", "RoleBinding", binding.encode_to_vec()).unwrap();
    assert_eq!(
        decode(&body).unwrap()["roleRef"],
        json!({"apiGroup": "", "kind": "Role"})
    );
}

/// A field number the v1.35 schema does not have is refused, never dropped.
#[test]
fn unknown_fields_are_refused() {
    let mut raw = message_of("coordination.k8s.io/v1", "Lease").encode_to_vec();
    raw.extend_from_slice(&[0xfa, 0x01, 0x01, b'x']); // field 31, length-delimited
    let err = decode(&envelope("coordination.k8s.io/v1", "Lease", raw).unwrap()).unwrap_err();
    assert_eq!(err.code(), 400);
    assert!(err.to_string().contains("field 31"), "{err}");
    let unknown_json = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "surprise": 1});
    assert_eq!(encode(&unknown_json).unwrap_err().code(), 500);
}

#[test]
fn unknown_kinds_and_garbage_are_refused() {
    assert_eq!(
        decode(&envelope("example.com/v1", "Widget", vec![]).unwrap())
            .unwrap_err()
            .code(),
        415
    );
    assert_eq!(decode(b"not protobuf").unwrap_err().code(), 400);
    let truncated = [MAGIC.to_vec(), vec![0x0a, 0x05, b'a']].concat();
    assert_eq!(decode(&truncated).unwrap_err().code(), 400);
}

/// A watch frame is a big-endian length and a bare WatchEvent whose object is an envelope.
#[test]
fn watch_frames_are_length_prefixed_watch_events() {
    let object = sample("coordination.k8s.io/v1", "Lease").unwrap();
    let frame = watch_frame("ADDED", &object).unwrap();
    let two = [frame.clone(), frame.clone(), frame[..5].to_vec()].concat();
    let frames = watch_frames(&two);
    assert_eq!(frames.len(), 2);
    assert_eq!(
        decode_watch_frame(frames[1]).unwrap(),
        ("ADDED".to_string(), object.clone())
    );
    let len = u32::from_be_bytes(frame[..4].try_into().unwrap()) as usize;
    assert_eq!(len, frame.len() - 4);
    let event = DynamicMessage::decode(message(WATCH_EVENT).unwrap(), &frame[4..]).unwrap();
    assert_eq!(string_field(&event, "type"), "ADDED");
    let Some(PbValue::Message(ext)) = event.get_field_by_name("object").map(|v| v.into_owned()) else {
        panic!("no object");
    };
    let Some(PbValue::Bytes(raw)) = ext.get_field_by_name("raw").map(|v| v.into_owned()) else {
        panic!("no raw");
    };
    assert_eq!(decode(&raw).unwrap(), object);
}
