//! Built-in resources kbind uses: Namespace identity, Secret, ConfigMap, Lease,
//! ServiceAccount tokens, Events in both groups, Deployments, and kcp's LogicalCluster.

use std::time::Duration;

use kbind_cluster::identity::logical_cluster_resource;
use kbind_cluster::{ClusterClient, IdentitySource, PostParams};
use serde_json::{Value, json};

use crate::check;
use crate::support::{CaseError, CaseResult, Context, Scope, consistently, expect_err, object, res};
use crate::target::Target;

/// identity() is the UID of Namespace kube-system on a plain cluster.
pub async fn kube_system_uid_is_identity(t: &dyn Target) -> CaseResult {
    let c = t.admin();
    let id = c.identity().await.ctx("identity")?;
    let ks = c.get(&res::namespaces(), None, "kube-system").await?;
    check!(
        id.source == IdentitySource::KubeSystem,
        "identity source: {:?}",
        id.source
    );
    check!(
        ks.metadata.uid.as_deref() == Some(id.uid.as_str()),
        "identity {} vs kube-system {:?}",
        id.uid,
        ks.metadata.uid
    );
    if let Some(faults) = t.faults() {
        check!(
            faults.identity_uid() == id.uid,
            "fake identity_uid {} vs {}",
            faults.identity_uid(),
            id.uid
        );
    }
    Ok(())
}

/// A Secret stores `data` as given and folds `stringData` into base64 `data`; type defaults to Opaque.
pub async fn secret_round_trips(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "secret");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let body = object(json!({
            "apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"},
            "data": {"a": "aGVsbG8="}, "stringData": {"b": "world"},
        }))?;
        let created = c
            .create(&res::secrets(), Some(&ns), &body, &PostParams::default())
            .await?;
        let got = c.get(&res::secrets(), Some(&ns), "s").await?;
        for obj in [&created, &got] {
            check!(
                obj.data["data"] == json!({"a": "aGVsbG8=", "b": "d29ybGQ="}),
                "secret data: {:?}",
                obj.data
            );
            check!(
                obj.data.get("stringData").is_none(),
                "stringData was stored: {:?}",
                obj.data
            );
            check!(obj.data["type"] == "Opaque", "secret type: {:?}", obj.data.get("type"));
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A ConfigMap keeps data, binaryData, labels and annotations exactly.
pub async fn config_map_round_trips(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "configmap");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let body = object(json!({
            "apiVersion": "v1", "kind": "ConfigMap",
            "metadata": {"name": "cm", "labels": {"core.kbind.io/managed": "true"}, "annotations": {"note": "multi\nline"}},
            "data": {"config.yaml": "a: 1\nb: [x, y]\n", "empty": ""},
            "binaryData": {"blob": "AAEC"},
        }))?;
        c.create(&res::config_maps(), Some(&ns), &body, &PostParams::default()).await?;
        let got = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(got.data["data"] == body.data["data"], "data: {:?}", got.data["data"]);
        check!(got.data["binaryData"] == body.data["binaryData"], "binaryData: {:?}", got.data["binaryData"]);
        check!(got.metadata.labels == body.metadata.labels, "labels: {:?}", got.metadata.labels);
        check!(got.metadata.annotations == body.metadata.annotations, "annotations: {:?}", got.metadata.annotations);
        check!(got.metadata.generation.is_none(), "ConfigMaps have no generation: {:?}", got.metadata.generation);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A Lease (kbind's heartbeat) keeps holderIdentity, duration and renewTime across renewals.
pub async fn lease_round_trips(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "lease");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let body = object(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": "consumer-x"},
            "spec": {"holderIdentity": "x", "leaseDurationSeconds": 60,
                     "acquireTime": "2026-01-01T00:00:00.000000Z", "renewTime": "2026-01-01T00:00:00.000000Z"},
        }))?;
        let created = c
            .create(&res::leases(), Some(&ns), &body, &PostParams::default())
            .await?;
        check!(
            created.data["spec"] == body.data["spec"],
            "lease spec: {:?}",
            created.data["spec"]
        );
        let mut renewed = created.clone();
        renewed.data["spec"]["renewTime"] = json!("2026-01-01T00:00:30.000000Z");
        let renewed = c
            .replace(
                &res::leases(),
                Some(&ns),
                "consumer-x",
                &renewed,
                &PostParams::default(),
            )
            .await?;
        check!(
            renewed.data["spec"]["renewTime"] == "2026-01-01T00:00:30.000000Z",
            "renewTime: {:?}",
            renewed.data["spec"]
        );
        check!(
            renewed.data["spec"]["holderIdentity"] == "x",
            "holderIdentity: {:?}",
            renewed.data["spec"]
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A TokenRequest on a ServiceAccount returns a token and its expiry; a missing account is 404.
pub async fn service_account_token_request(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "token");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let sa = object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "konnector"}}))?;
        c.create(&res::service_accounts(), Some(&ns), &sa, &PostParams::default())
            .await?;
        let request = json!({
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
            "spec": {"audiences": [], "expirationSeconds": 3600},
        });
        let answer = c
            .create_subresource(&res::service_accounts(), Some(&ns), "konnector", "token", &request)
            .await
            .ctx("TokenRequest")?;
        check!(answer["kind"] == "TokenRequest", "answer kind: {:?}", answer["kind"]);
        let token = answer.pointer("/status/token").and_then(Value::as_str).unwrap_or("");
        check!(!token.is_empty(), "no token in {answer}");
        check!(
            answer
                .pointer("/status/expirationTimestamp")
                .and_then(Value::as_str)
                .is_some(),
            "no expiry in {answer}"
        );
        let err = expect_err(
            c.create_subresource(&res::service_accounts(), Some(&ns), "missing", "token", &request)
                .await,
            "TokenRequest for a missing ServiceAccount",
        )?;
        check!(err.is_not_found(), "expected 404, got {err:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

fn core_event(name: &str, ns: &str) -> CaseResult<kbind_cluster::DynamicObject> {
    object(json!({
        "apiVersion": "v1", "kind": "Event", "metadata": {"name": name},
        "involvedObject": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": ns},
        "reason": "Synced", "message": "synced to the provider", "type": "Normal",
        "source": {"component": "kbind-konnector"},
        "firstTimestamp": "2026-01-01T00:00:00Z", "lastTimestamp": "2026-01-01T00:00:00Z", "count": 1,
    }))
}

fn new_event(name: &str, ns: &str) -> CaseResult<kbind_cluster::DynamicObject> {
    object(json!({
        "apiVersion": "events.k8s.io/v1", "kind": "Event", "metadata": {"name": name},
        "eventTime": "2026-01-01T00:00:00.000000Z",
        "reportingController": "kbind-konnector", "reportingInstance": "kbind-konnector-0",
        "action": "Sync", "reason": "Synced", "type": "Warning", "note": "conflict on the provider",
        "regarding": {"apiVersion": "v1", "kind": "ConfigMap", "name": "cm", "namespace": ns},
    }))
}

/// Events can be written and read in core/v1 and in events.k8s.io/v1.
pub async fn events_in_both_groups(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "events");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        c.create(&res::core_events(), Some(&ns), &core_event("old", &ns)?, &pp)
            .await
            .ctx("core/v1 Event")?;
        c.create(&res::events(), Some(&ns), &new_event("new", &ns)?, &pp)
            .await
            .ctx("events.k8s.io/v1 Event")?;
        let old = c.get(&res::core_events(), Some(&ns), "old").await?;
        check!(
            old.data["reason"] == "Synced" && old.data["involvedObject"]["name"] == "cm",
            "core event: {:?}",
            old.data
        );
        let new = c.get(&res::events(), Some(&ns), "new").await?;
        check!(
            new.data["note"] == "conflict on the provider" && new.data["regarding"]["name"] == "cm",
            "new event: {:?}",
            new.data
        );
        check!(new.data["type"] == "Warning", "event type: {:?}", new.data["type"]);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// core/v1 and events.k8s.io/v1 Events are one resource: each is readable through the other.
pub async fn events_share_storage_across_groups(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "evshare");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        c.create(&res::core_events(), Some(&ns), &core_event("old", &ns)?, &pp)
            .await?;
        c.create(&res::events(), Some(&ns), &new_event("new", &ns)?, &pp)
            .await?;
        let as_core = c
            .get(&res::core_events(), Some(&ns), "new")
            .await
            .ctx("events.k8s.io Event via core/v1")?;
        check!(
            as_core.data["message"] == "conflict on the provider",
            "note as message: {:?}",
            as_core.data
        );
        check!(
            as_core.data["involvedObject"]["name"] == "cm",
            "regarding as involvedObject: {:?}",
            as_core.data
        );
        let as_new = c
            .get(&res::events(), Some(&ns), "old")
            .await
            .ctx("core/v1 Event via events.k8s.io")?;
        check!(
            as_new.data["note"] == "synced to the provider",
            "message as note: {:?}",
            as_new.data
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

fn deployment(name: &str) -> CaseResult<kbind_cluster::DynamicObject> {
    object(json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name},
        "spec": {
            "replicas": 3,
            "selector": {"matchLabels": {"app": name}},
            "template": {"metadata": {"labels": {"app": name}}, "spec": {"containers": [{"name": "app", "image": "app:1"}]}},
        },
    }))
}

/// A Deployment is stored with generation 1 and never rolled out (no controller runs it).
pub async fn deployment_is_stored_not_run(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "deploy");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let created = c
            .create(
                &res::deployments(),
                Some(&ns),
                &deployment("d")?,
                &PostParams::default(),
            )
            .await?;
        check!(
            created.metadata.generation == Some(1),
            "generation: {:?}",
            created.metadata.generation
        );
        check!(
            created.data["spec"]["replicas"] == 3,
            "replicas: {:?}",
            created.data["spec"]
        );
        consistently(Duration::from_millis(300), "Deployment not rolled out", async || {
            let d = c.get(&res::deployments(), Some(&ns), "d").await?;
            let status = d.data.get("status").cloned().unwrap_or(Value::Null);
            check!(
                status.get("observedGeneration").is_none() && status.get("replicas").is_none(),
                "status: {status}"
            );
            Ok(())
        })
        .await
    }
    .await;
    s.finish(result).await
}

/// A Deployment gets kube-apiserver's defaults (strategy, history, deadlines, container defaults).
pub async fn deployment_gets_defaults(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "deploydef");
    let result = async {
        let ns = s.namespace("a").await?;
        let d = s
            .admin
            .create(
                &res::deployments(),
                Some(&ns),
                &deployment("d")?,
                &PostParams::default(),
            )
            .await?;
        let at = |p: &str| d.data.pointer(p).cloned().unwrap_or(Value::Null);
        let want = [
            ("/spec/strategy/type", json!("RollingUpdate")),
            ("/spec/strategy/rollingUpdate/maxSurge", json!("25%")),
            ("/spec/strategy/rollingUpdate/maxUnavailable", json!("25%")),
            ("/spec/revisionHistoryLimit", json!(10)),
            ("/spec/progressDeadlineSeconds", json!(600)),
            ("/spec/template/spec/restartPolicy", json!("Always")),
            (
                "/spec/template/spec/containers/0/imagePullPolicy",
                json!("IfNotPresent"),
            ),
            (
                "/spec/template/spec/containers/0/terminationMessagePath",
                json!("/dev/termination-log"),
            ),
        ];
        for (pointer, value) in want {
            check!(at(pointer) == value, "{pointer}: expected {value}, got {}", at(pointer));
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// On a kcp-like cluster identity() is the UID of LogicalCluster `cluster` (fake-only).
pub async fn kcp_logical_cluster_is_identity(t: &dyn Target) -> CaseResult {
    let kcp: std::sync::Arc<dyn ClusterClient> = t
        .kcp_like()
        .ok_or_else(|| CaseError::Skipped(format!("{} has no kcp-like sibling", t.name())))?;
    let id = kcp.identity().await.ctx("identity on kcp-like")?;
    let lc = kcp
        .get(&logical_cluster_resource(), None, "cluster")
        .await
        .ctx("LogicalCluster cluster")?;
    check!(
        id.source == IdentitySource::LogicalCluster,
        "identity source: {:?}",
        id.source
    );
    check!(
        lc.metadata.uid.as_deref() == Some(id.uid.as_str()),
        "identity {} vs LogicalCluster {:?}",
        id.uid,
        lc.metadata.uid
    );
    if let Some(ks) =
        kbind_cluster::ClusterClientExt::get_opt(kcp.as_ref(), &res::namespaces(), None, "kube-system").await?
    {
        check!(
            ks.metadata.uid.as_deref() != Some(id.uid.as_str()),
            "identity fell back to kube-system"
        );
    }
    Ok(())
}
