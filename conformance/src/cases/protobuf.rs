//! Kubernetes protobuf on the wire, as client-go speaks it: bodies in protobuf for every built-in
//! kind, answers in protobuf when asked (objects, lists, watch frames, error Statuses), and JSON
//! or 406 for custom resources, which kube-apiserver cannot encode in protobuf.
//!
//! kube-rs has no protobuf, so these cases send raw HTTP through [`Target::admin_http`] and use
//! fakeapi's codec to build and read bodies. On the real apiserver that codec meets Go's: the
//! server decodes what it encodes, and its protobuf answers must decode to exactly the JSON the
//! same server answers.

use http::header::{ACCEPT, CONTENT_TYPE};
use http::{Method, Request};
use kube::client::Body;
use serde_json::{Value, json};

use fakeapi::http::protobuf::{self as pb, MEDIA_TYPE, WATCH_MEDIA_TYPE};

use crate::check;
use crate::support::{CaseError, CaseResult, Scope, WidgetCrd, eventually, res};
use crate::target::Target;

/// What client-go's typed clients send: protobuf first, JSON as fallback.
const PROTOBUF_FIRST: &str = "application/vnd.kubernetes.protobuf, application/json";

/// An answer: HTTP code, Content-Type and body.
struct Answer {
    code: u16,
    content_type: String,
    body: Vec<u8>,
}

impl Answer {
    fn is_protobuf(&self) -> bool {
        self.content_type == MEDIA_TYPE
    }

    /// The body as JSON, decoded from protobuf when it is protobuf.
    fn json(&self, what: &str) -> CaseResult<Value> {
        if self.is_protobuf() {
            return pb::decode(&self.body).map_err(|e| CaseError::failed(format!("{what}: decoding protobuf: {e}")));
        }
        serde_json::from_slice(&self.body).map_err(|e| {
            CaseError::failed(format!(
                "{what}: {} {} is neither protobuf nor JSON ({e}): {}",
                self.code,
                self.content_type,
                String::from_utf8_lossy(&self.body)
            ))
        })
    }

    /// The body as JSON after checking the code and that it came as protobuf.
    fn protobuf(&self, code: u16, what: &str) -> CaseResult<Value> {
        let value = self.json(what)?;
        check!(
            self.code == code && self.is_protobuf(),
            "{what}: expected {code} in protobuf, got {} {}: {value}",
            self.code,
            self.content_type
        );
        Ok(value)
    }
}

fn http_client(t: &dyn Target) -> CaseResult<kube::Client> {
    t.admin_http()
        .ok_or_else(|| CaseError::Skipped(format!("{} has no raw HTTP client", t.name())))
}

async fn call(
    client: &kube::Client,
    method: Method,
    uri: &str,
    accept: &str,
    body: Option<(&str, Vec<u8>)>,
) -> CaseResult<Answer> {
    let mut request = Request::builder()
        .method(method.clone())
        .uri(uri)
        .header(ACCEPT, accept);
    let payload = match body {
        Some((content_type, bytes)) => {
            request = request.header(CONTENT_TYPE, content_type);
            Body::from(bytes)
        }
        None => Body::empty(),
    };
    let request = request
        .body(payload)
        .map_err(|e| CaseError::failed(format!("{method} {uri}: {e}")))?;
    let response = client
        .send(request)
        .await
        .map_err(|e| CaseError::failed(format!("{method} {uri}: {e}")))?;
    let code = response.status().as_u16();
    let content_type = response
        .headers()
        .get(CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_string();
    let body = response
        .into_body()
        .collect_bytes()
        .await
        .map_err(|e| CaseError::failed(format!("{method} {uri}: reading the body: {e}")))?
        .to_vec();
    Ok(Answer {
        code,
        content_type,
        body,
    })
}

fn encode(object: &Value) -> CaseResult<Vec<u8>> {
    pb::encode(object).map_err(|e| CaseError::failed(format!("encoding {}: {e}", object["kind"])))
}

/// The first place where `actual` lacks or changes what `expected` has, if any.
fn missing(actual: &Value, expected: &Value, path: &str) -> Option<String> {
    match (actual, expected) {
        (Value::Object(a), Value::Object(e)) => e.iter().find_map(|(k, ev)| match a.get(k) {
            Some(av) => missing(av, ev, &format!("{path}/{k}")),
            None => Some(format!("{path}/{k} is missing")),
        }),
        (Value::Array(a), Value::Array(e)) if a.len() == e.len() => a
            .iter()
            .zip(e)
            .enumerate()
            .find_map(|(i, (av, ev))| missing(av, ev, &format!("{path}/{i}"))),
        _ if actual == expected => None,
        _ => Some(format!("{path}: {actual} instead of {expected}")),
    }
}

/// One built-in kind: where it is served and a realistic object of it (in the form Go's JSON
/// writes, so what comes back can be compared).
struct Sample {
    path: String,
    name: String,
    object: Value,
}

fn samples(s: &Scope<'_>, ns: &str) -> Vec<Sample> {
    let named = |name: &str, namespace: Option<&str>| {
        let mut meta = json!({"name": name, "labels": {"app": "pb", "empty": ""}, "annotations": {"note": "protobuf"}});
        if let Some(ns) = namespace {
            meta["namespace"] = json!(ns);
        }
        meta
    };
    let core = |plural: &str| format!("/api/v1/namespaces/{ns}/{plural}");
    let group = |gv: &str, plural: &str| format!("/apis/{gv}/namespaces/{ns}/{plural}");
    let cluster = |gv: &str, plural: &str| {
        if gv == "v1" {
            format!("/api/v1/{plural}")
        } else {
            format!("/apis/{gv}/{plural}")
        }
    };
    let (namespace_name, cluster_role, crd_group) = (s.name("ns"), s.name("cr"), s.group());
    let mut out = vec![
        Sample {
            path: core("configmaps"),
            name: "cm".into(),
            object: json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": named("cm", Some(ns)),
                "data": {"k": "v", "blank": ""}, "binaryData": {"bin": "AAEC/w=="}, "immutable": false}),
        },
        Sample {
            path: core("secrets"),
            name: "secret".into(),
            object: json!({"apiVersion": "v1", "kind": "Secret", "metadata": named("secret", Some(ns)),
                "type": "Opaque", "data": {"token": "c2VjcmV0", "empty": ""}}),
        },
        Sample {
            path: core("serviceaccounts"),
            name: "sa".into(),
            object: json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": named("sa", Some(ns)),
                "automountServiceAccountToken": false, "imagePullSecrets": [{"name": "pull"}]}),
        },
        Sample {
            path: group("coordination.k8s.io/v1", "leases"),
            name: "leader".into(),
            object: json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": named("leader", Some(ns)),
                "spec": {"holderIdentity": "ctl-0_5e1f", "leaseDurationSeconds": 15, "leaseTransitions": 0,
                    "acquireTime": "2026-01-01T10:00:00.000000Z", "renewTime": "2026-01-01T10:00:10.250000Z"}}),
        },
        Sample {
            path: core("events"),
            name: "ev.core".into(),
            object: json!({"apiVersion": "v1", "kind": "Event", "metadata": named("ev.core", Some(ns)),
                "involvedObject": {"kind": "ConfigMap", "namespace": ns, "name": "cm", "apiVersion": "v1"},
                "reason": "Synced", "message": "synced", "source": {"component": "pb-controller"},
                "firstTimestamp": "2026-01-01T10:00:00Z", "lastTimestamp": "2026-01-01T10:05:00Z",
                "count": 2, "type": "Normal", "reportingComponent": "pb-controller", "reportingInstance": "pb-0"}),
        },
        Sample {
            path: group("events.k8s.io/v1", "events"),
            name: "ev.new".into(),
            object: json!({"apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": named("ev.new", Some(ns)),
                "eventTime": "2026-01-01T10:00:00.123456Z", "reportingController": "example.com/pb",
                "reportingInstance": "pb-0", "action": "Reconcile", "reason": "Synced", "note": "synced",
                "type": "Normal", "regarding": {"kind": "ConfigMap", "namespace": ns, "name": "cm", "apiVersion": "v1"}}),
        },
        Sample {
            path: group("rbac.authorization.k8s.io/v1", "roles"),
            name: "role".into(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": named("role", Some(ns)),
                "rules": [{"verbs": ["get", "list"], "apiGroups": [""], "resources": ["configmaps"], "resourceNames": ["cm"]}]}),
        },
        Sample {
            path: group("rbac.authorization.k8s.io/v1", "rolebindings"),
            name: "binding".into(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": named("binding", Some(ns)),
                "subjects": [{"kind": "ServiceAccount", "name": "sa", "namespace": ns}, {"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "alice"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "role"}}),
        },
        Sample {
            path: group("apps/v1", "deployments"),
            name: "web".into(),
            object: json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": named("web", Some(ns)), "spec": {
                "replicas": 0, "selector": {"matchLabels": {"app": "web"}},
                "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": "50%"}},
                "template": {"metadata": {"labels": {"app": "web"}}, "spec": {"containers": [{
                    "name": "c", "image": "registry.example/web:1", "ports": [{"name": "http", "containerPort": 8080, "protocol": "TCP"}],
                    "env": [{"name": "MODE", "value": "pb"}],
                    "resources": {"limits": {"cpu": "500m", "memory": "128Mi"}, "requests": {"cpu": "100m"}},
                    "readinessProbe": {"httpGet": {"path": "/ready", "port": "http", "scheme": "HTTP"}, "periodSeconds": 5},
                    "securityContext": {"allowPrivilegeEscalation": false}}],
                    "automountServiceAccountToken": false}}}}),
        },
        Sample {
            path: cluster("v1", "namespaces"),
            name: namespace_name.clone(),
            object: json!({"apiVersion": "v1", "kind": "Namespace", "metadata": named(&namespace_name, None)}),
        },
        Sample {
            path: cluster("rbac.authorization.k8s.io/v1", "clusterroles"),
            name: cluster_role.clone(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": named(&cluster_role, None),
                "rules": [{"verbs": ["get"], "nonResourceURLs": ["/healthz"]}, {"verbs": ["watch"], "apiGroups": ["apps"], "resources": ["deployments"]}]}),
        },
        Sample {
            path: cluster("rbac.authorization.k8s.io/v1", "clusterrolebindings"),
            name: cluster_role.clone(),
            object: json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": named(&cluster_role, None),
                "subjects": [{"kind": "User", "apiGroup": "rbac.authorization.k8s.io", "name": "bob"}],
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role}}),
        },
    ];
    let crd_name = format!("gadgets.{crd_group}");
    out.push(Sample {
        path: cluster("apiextensions.k8s.io/v1", "customresourcedefinitions"),
        name: crd_name.clone(),
        object: json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition", "metadata": named(&crd_name, None), "spec": {
            "group": crd_group, "scope": "Namespaced",
            "names": {"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": {"type": "object", "properties": {
                    "size": {"type": "integer", "minimum": 0, "default": 1},
                    "color": {"type": "string", "enum": ["red", "blue"]},
                    "port": {"x-kubernetes-int-or-string": true},
                    "labels": {"type": "object", "additionalProperties": {"type": "string"}},
                    "open": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}}}}}]}}),
    });
    out
}

/// Every built-in kind fakeapi serves is created, read, listed and deleted in protobuf, and its
/// protobuf answers decode to exactly the JSON the same server answers.
pub async fn protobuf_round_trips_every_builtin_kind(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let s = Scope::new(t, "pb");
    let result = async {
        let ns = s.namespace("a").await?;
        for sample in samples(&s, &ns) {
            let kind = sample.object["kind"].as_str().unwrap_or_default().to_string();
            let api_version = sample.object["apiVersion"].as_str().unwrap_or_default().to_string();
            let what = |step: &str| format!("{step} {kind} ({api_version})");
            if sample.path.ends_with("/namespaces") {
                s.track(res::namespaces(), None, &sample.name);
            }
            let created = call(
                &client,
                Method::POST,
                &sample.path,
                PROTOBUF_FIRST,
                Some((MEDIA_TYPE, encode(&sample.object)?)),
            )
            .await?
            .protobuf(201, &what("create"))?;
            if let Some(gap) = missing(&created, &sample.object, "") {
                return Err(CaseError::failed(format!("{}: {gap}", what("create"))));
            }
            let item = format!("{}/{}", sample.path, sample.name);
            // Controllers may still be writing (a CRD becoming Established): compare two reads
            // of the same resourceVersion.
            let (http, uri) = (&client, &item);
            eventually(s.patience(), &what("get"), async || {
                let in_protobuf = call(http, Method::GET, uri, PROTOBUF_FIRST, None)
                    .await?
                    .protobuf(200, &what("get"))?;
                let in_json = call(http, Method::GET, uri, "application/json", None)
                    .await?
                    .json(&what("get as JSON"))?;
                let rv = |v: &Value| v["metadata"]["resourceVersion"].clone();
                if rv(&in_protobuf) != rv(&in_json) {
                    return Err(CaseError::failed("the object changed between the two reads"));
                }
                check!(
                    in_protobuf == in_json,
                    "{}: protobuf answer decodes to {in_protobuf}\nJSON answer is {in_json}",
                    what("get")
                );
                Ok(())
            })
            .await?;
            let list = call(&client, Method::GET, &sample.path, MEDIA_TYPE, None)
                .await?
                .protobuf(200, &what("list"))?;
            check!(
                list["kind"] == format!("{kind}List"),
                "{}: {}",
                what("list"),
                list["kind"]
            );
            let names: Vec<&str> = list["items"]
                .as_array()
                .map(|items| items.iter().filter_map(|i| i["metadata"]["name"].as_str()).collect())
                .unwrap_or_default();
            check!(names.contains(&sample.name.as_str()), "{}: {names:?}", what("list"));
            let options =
                json!({"apiVersion": api_version, "kind": "DeleteOptions", "propagationPolicy": "Background"});
            let deleted = call(
                &client,
                Method::DELETE,
                &item,
                PROTOBUF_FIRST,
                Some((MEDIA_TYPE, encode(&options)?)),
            )
            .await?;
            deleted.protobuf(200, &what("delete"))?;
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A ServiceAccount token is requested and answered in protobuf (TokenRequest).
pub async fn protobuf_token_request(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let s = Scope::new(t, "pbtoken");
    let result = async {
        let ns = s.namespace("a").await?;
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "robot", "namespace": ns}});
        let path = format!("/api/v1/namespaces/{ns}/serviceaccounts");
        call(&client, Method::POST, &path, PROTOBUF_FIRST, Some((MEDIA_TYPE, encode(&sa)?)))
            .await?
            .protobuf(201, "create ServiceAccount")?;
        let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "metadata": {"name": "robot", "namespace": ns},
            "spec": {"audiences": ["https://kubernetes.default.svc"], "expirationSeconds": 3600}});
        let token = call(&client, Method::POST, &format!("{path}/robot/token"), PROTOBUF_FIRST, Some((MEDIA_TYPE, encode(&request)?)))
            .await?
            .protobuf(201, "token request")?;
        check!(token["kind"] == "TokenRequest", "token kind: {}", token["kind"]);
        check!(
            token["status"]["token"].as_str().is_some_and(|t| !t.is_empty()),
            "no token in the answer"
        );
        check!(
            token["status"]["expirationTimestamp"].is_string(),
            "no expirationTimestamp: {}",
            token["status"]
        );
        check!(token["spec"]["expirationSeconds"] == 3600, "expirationSeconds: {}", token["spec"]);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A protobuf watch is a stream of length-prefixed `WatchEvent` frames whose objects are
/// protobuf envelopes, under `application/vnd.kubernetes.protobuf;stream=watch`.
pub async fn protobuf_watch_streams_frames(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let s = Scope::new(t, "pbwatch");
    let result = async {
        let ns = s.namespace("a").await?;
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "w", "namespace": ns}, "data": {"n": "1"}});
        let created = call(&client, Method::POST, &path, PROTOBUF_FIRST, Some((MEDIA_TYPE, encode(&cm)?)))
            .await?
            .protobuf(201, "create")?;
        let rv = created["metadata"]["resourceVersion"].as_str().unwrap_or_default().to_string();
        let mut changed = created.clone();
        changed["data"]["n"] = json!("2");
        let updated = call(&client, Method::PUT, &format!("{path}/w"), PROTOBUF_FIRST, Some((MEDIA_TYPE, encode(&changed)?)))
            .await?
            .protobuf(200, "update")?;
        // The watch replays what came after `rv` and ends by itself after its timeout.
        let uri = format!("{path}?watch=true&resourceVersion={rv}&timeoutSeconds=2&fieldSelector=metadata.name%3Dw");
        let watch = call(&client, Method::GET, &uri, PROTOBUF_FIRST, None).await?;
        check!(
            watch.code == 200 && watch.content_type == WATCH_MEDIA_TYPE,
            "watch answered {} {}",
            watch.code,
            watch.content_type
        );
        let frames = pb::watch_frames(&watch.body);
        let consumed: usize = frames.iter().map(|f| f.len()).sum();
        check!(consumed == watch.body.len(), "{} trailing bytes after the frames", watch.body.len() - consumed);
        let (event_type, object) = frames
            .first()
            .map(|f| pb::decode_watch_frame(f))
            .transpose()
            .map_err(|e| CaseError::failed(format!("decoding a watch frame: {e}")))?
            .ok_or_else(|| CaseError::failed("the watch sent no frame"))?;
        check!(event_type == "MODIFIED", "first event: {event_type}");
        check!(object == updated, "watched object {object}\nupdated object {updated}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Errors on built-in kinds come as protobuf Statuses when the client prefers protobuf.
pub async fn protobuf_errors_are_statuses(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let s = Scope::new(t, "pberr");
    let result = async {
        let ns = s.namespace("a").await?;
        let path = format!("/api/v1/namespaces/{ns}/configmaps");
        let missing = call(&client, Method::GET, &format!("{path}/absent"), PROTOBUF_FIRST, None)
            .await?
            .protobuf(404, "get a missing ConfigMap")?;
        check!(
            missing["kind"] == "Status" && missing["reason"] == "NotFound" && missing["code"] == 404,
            "not found: {missing}"
        );
        check!(
            missing["details"] == json!({"name": "absent", "kind": "configmaps"}),
            "details: {}",
            missing["details"]
        );
        let unknown = call(&client, Method::GET, "/api/v1/nothinghere", MEDIA_TYPE, None)
            .await?
            .protobuf(404, "get an unknown resource")?;
        check!(unknown["reason"] == "NotFound", "unknown resource: {unknown}");
        let cm = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "twice", "namespace": ns}});
        for expected in [201, 409] {
            let answer = call(
                &client,
                Method::POST,
                &path,
                PROTOBUF_FIRST,
                Some((MEDIA_TYPE, encode(&cm)?)),
            )
            .await?;
            let value = answer.protobuf(expected, "create twice")?;
            if expected == 409 {
                check!(value["reason"] == "AlreadyExists", "second create: {value}");
            }
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Custom resources have no protobuf: with a JSON fallback the answer is JSON, with protobuf
/// only it is 406; error Statuses still come in protobuf.
pub async fn protobuf_custom_resources_fall_back_to_json(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let s = Scope::new(t, "pbcr");
    let result = async {
        let ns = s.namespace("a").await?;
        let widgets = s.widget_crd(&WidgetCrd::open(false)).await?;
        let path = format!("/apis/{}/{}/namespaces/{ns}/widgets", widgets.group, widgets.version);
        let fallback = call(&client, Method::GET, &path, PROTOBUF_FIRST, None).await?;
        let list = fallback.json("list with a JSON fallback")?;
        check!(
            fallback.code == 200 && fallback.content_type == "application/json",
            "list with a JSON fallback: {} {}",
            fallback.code,
            fallback.content_type
        );
        check!(list["kind"] == "WidgetList", "list kind: {}", list["kind"]);
        let refused = call(&client, Method::GET, &path, MEDIA_TYPE, None)
            .await?
            .protobuf(406, "list in protobuf only")?;
        check!(refused["reason"] == "NotAcceptable", "406 reason: {refused}");
        check!(
            refused["message"]
                == "only the following media types are accepted: application/json, application/yaml, application/vnd.kubernetes.protobuf",
            "406 message: {}",
            refused["message"]
        );
        let absent = call(&client, Method::GET, &format!("{path}/absent"), PROTOBUF_FIRST, None)
            .await?
            .protobuf(404, "get a missing Widget")?;
        check!(absent["reason"] == "NotFound", "missing Widget: {absent}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A Table in protobuf is not served: 406 in JSON (the Accept holds no plain protobuf), and
/// with a JSON fallback the answer is plain JSON.
pub async fn protobuf_table_is_not_acceptable(t: &dyn Target) -> CaseResult {
    let client = http_client(t)?;
    let answer = call(
        &client,
        Method::GET,
        "/api/v1/namespaces/kube-system/configmaps",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io",
        None,
    )
    .await?;
    let status = answer.json("a protobuf Table")?;
    check!(
        answer.code == 406 && answer.content_type == "application/json" && status["reason"] == "NotAcceptable",
        "a protobuf Table: {} {} {status}",
        answer.code,
        answer.content_type
    );
    let fallback = call(
        &client,
        Method::GET,
        "/api/v1/namespaces/kube-system/configmaps",
        "application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io, application/json",
        None,
    )
    .await?;
    let list = fallback.json("a protobuf Table with a JSON fallback")?;
    check!(
        fallback.code == 200 && fallback.content_type == "application/json" && list["kind"] == "ConfigMapList",
        "a protobuf Table with a JSON fallback: {} {} {}",
        fallback.code,
        fallback.content_type,
        list["kind"]
    );
    Ok(())
}
