//! The consumer cluster as the CLI sees it: a client from the kubeconfig, its identity, whether a
//! konnector runs there, applying a checked bundle, and waiting for Ready.

use std::path::Path;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Namespace, Secret};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{IDENTITY_NAMESPACE, condition};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, KubeClusterClient, ListParams, WatchParams,
};
use serde_json::Value;

use crate::error::{CliError, Result};

/// The field manager of every apply `kbind` makes.
pub const FIELD_MANAGER: &str = "kbind-cli";
/// The konnector's leader-election Lease (`konnector run --leader-election-lease`'s default).
pub const KONNECTOR_LEASE: &str = "kbind-konnector";
/// How recent the leader Lease's renewal must be for a konnector to count as running.
pub const KONNECTOR_FRESH: Duration = Duration::from_secs(120);

/// Where the consumer is: `--kubeconfig` and `--context`.
#[derive(Clone, Debug, Default)]
pub struct Target {
    /// The kubeconfig file, else `$KUBECONFIG`, else `~/.kube/config`.
    pub kubeconfig: Option<std::path::PathBuf>,
    /// The context, else the current one.
    pub context: Option<String>,
}

/// The URL of the consumer API server this process connected to last, for errors that could not
/// reach it: a command talks to one consumer, and a process-wide value spares every error path a
/// URL parameter.
static CONSUMER_SERVER: parking_lot::Mutex<Option<String>> = parking_lot::Mutex::new(None);

/// A client of the consumer cluster.
pub async fn connect(target: &Target) -> Result<KubeClusterClient> {
    let options = kube::config::KubeConfigOptions {
        context: target.context.clone(),
        ..Default::default()
    };
    let hint = "pass --kubeconfig and --context, or set KUBECONFIG";
    let config = match &target.kubeconfig {
        Some(path) => {
            let kubeconfig = kube::config::Kubeconfig::read_from(path)
                .map_err(|e| CliError::Failed(format!("cannot read the kubeconfig {}: {e}; {hint}", display(path))))?;
            kube::Config::from_custom_kubeconfig(kubeconfig, &options).await
        }
        None => kube::Config::from_kubeconfig(&options).await,
    }
    .map_err(|e| CliError::Failed(format!("cannot use the consumer's kubeconfig: {e}; {hint}")))?;
    // Only scheme, host and port: a URL may carry user info, which must never reach an error.
    let url = &config.cluster_url;
    let port = url.port_u16().map(|p| format!(":{p}")).unwrap_or_default();
    let server = format!(
        "{}://{}{port}",
        url.scheme_str().unwrap_or("https"),
        url.host().unwrap_or("")
    );
    *CONSUMER_SERVER.lock() = Some(server);
    KubeClusterClient::from_config(config).map_err(|e| CliError::failed("cannot build a consumer client", e))
}

fn display(path: &Path) -> String {
    path.display().to_string()
}

/// The consumer cluster's UID: its `kube-system` Namespace's.
pub async fn cluster_uid(client: &dyn ClusterClient) -> Result<String> {
    let ns: Namespace = client
        .get_typed(None, IDENTITY_NAMESPACE)
        .await
        .map_err(|e| consumer_error("cannot read the consumer's kube-system Namespace", e))?;
    ns.metadata
        .uid
        .ok_or_else(|| CliError::Failed("the consumer's kube-system Namespace has no uid".into()))
}

/// A consumer API error, with a hint for the usual cause.
pub fn consumer_error(context: &str, e: kbind_cluster::Error) -> CliError {
    let hint = match &e {
        e if e.is_forbidden() => "; your kubeconfig's user may not do this on the consumer".to_owned(),
        kbind_cluster::Error::Transport(_) | kbind_cluster::Error::Timeout(_) => {
            let server = CONSUMER_SERVER.lock().clone();
            let what = match e {
                kbind_cluster::Error::Timeout(_) => "no answer in time from",
                _ => "could not reach",
            };
            server.map_or_else(String::new, |server| {
                format!("; {what} the consumer's API server {server} (check --kubeconfig/--context)")
            })
        }
        _ => String::new(),
    };
    CliError::Failed(format!("{context}: {e}{hint}"))
}

/// Deletes `kind` `ns/name` on the consumer; one already gone counts as deleted.
pub async fn delete(client: &dyn ClusterClient, kind: &str, ns: Option<&str>, name: &str) -> Result<()> {
    match client
        .delete(&resource_of(kind), ns, name, &kbind_cluster::DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(consumer_error(
            &format!("cannot delete {kind} {}", qualified(ns, name)),
            e,
        )),
    }
}

/// How to install the konnector, for errors.
pub fn install_hint(namespace: &str) -> String {
    format!(
        "install it first: `helm install konnector deploy/charts/konnector -n {namespace} --create-namespace`, then run this again"
    )
}

/// Refuses unless a konnector runs on the consumer: kbind's Connection CRD is there and the
/// konnector's leader Lease in `namespace` was renewed within [`KONNECTOR_FRESH`].
pub async fn require_konnector(client: &dyn ClusterClient, namespace: &str) -> Result<()> {
    let crd: Option<CustomResourceDefinition> = client
        .get_typed_opt(None, "connections.core.kbind.io")
        .await
        .map_err(|e| consumer_error("cannot look for kbind's CRDs on the consumer", e))?;
    if crd.is_none() {
        return Err(CliError::ConsumerRefused(format!(
            "no konnector on this cluster (kbind's CRDs are not installed); {}",
            install_hint(namespace)
        )));
    }
    let lease: Option<Lease> = client
        .get_typed_opt(Some(namespace), KONNECTOR_LEASE)
        .await
        .map_err(|e| consumer_error("cannot read the konnector's Lease on the consumer", e))?;
    let renewed = lease.and_then(|l| l.spec).and_then(|s| s.renew_time).map(|t| t.0);
    let fresh = renewed.is_some_and(|t| {
        let age = jiff::Timestamp::now().duration_since(t);
        age.as_secs() < KONNECTOR_FRESH.as_secs() as i64
    });
    if !fresh {
        return Err(CliError::ConsumerRefused(format!(
            "no konnector runs in namespace {namespace:?} (its Lease {KONNECTOR_LEASE} is {}); {} (or pass --konnector-namespace if it runs elsewhere)",
            if renewed.is_some() {
                "not renewed recently"
            } else {
                "missing"
            },
            install_hint(namespace)
        )));
    }
    Ok(())
}

/// The `ApiResource` of an allowed bundle kind.
pub fn resource_of(kind: &str) -> ApiResource {
    match kind {
        "Secret" => ApiResource::erase::<Secret>(&()),
        "Connection" => ApiResource::erase::<kbind_api::Connection>(&()),
        "ClusterBinding" => ApiResource::erase::<kbind_api::ClusterBinding>(&()),
        _ => ApiResource::erase::<kbind_api::Binding>(&()),
    }
}

/// The `type` condition of an object, as (status, reason, message).
pub fn condition_of(obj: &Value, type_: &str) -> Option<(String, String, String)> {
    let conditions = obj.pointer("/status/conditions")?.as_array()?;
    let c = conditions.iter().find(|c| c["type"] == type_)?;
    let s = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((s("status"), s("reason"), s("message")))
}

/// An object the CLI waits for.
pub struct Awaited {
    /// Its kind.
    pub kind: String,
    /// Its namespace.
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// A way to report progress: a spinner on a terminal, plain lines otherwise.
pub trait Progress {
    /// The wait moved on to `what`.
    fn waiting(&mut self, what: &str);
    /// `what` is done.
    fn done(&mut self, what: &str);
}

/// Polls until every awaited object's Ready condition is True, or `timeout` passes.
pub async fn wait_ready(
    client: &dyn ClusterClient,
    objects: &[Awaited],
    timeout: Duration,
    progress: &mut dyn Progress,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    for object in objects {
        let what = format!(
            "{} {}",
            object.kind,
            qualified(object.namespace.as_deref(), &object.name)
        );
        progress.waiting(&format!("waiting for {what} to be Ready"));
        let mut last = None;
        loop {
            let current = client
                .get_opt(&resource_of(&object.kind), object.namespace.as_deref(), &object.name)
                .await
                .ok()
                .flatten()
                .map(|o| object_value(&o));
            let ready = current.as_ref().and_then(|v| condition_of(v, condition::READY));
            if let Some((status, _, _)) = &ready
                && status == "True"
            {
                progress.done(&format!("{what} is Ready"));
                break;
            }
            if let Some(r) = ready {
                last = Some(r);
            }
            if tokio::time::Instant::now() >= deadline {
                let why = match last {
                    Some((status, reason, message)) => format!("Ready is {status}: {reason}: {message}"),
                    None => "it has no Ready condition yet; is the konnector running?".into(),
                };
                return Err(CliError::Timeout(format!(
                    "{what} was not Ready within {}s ({why}); `kbind status` shows more, or run again with a longer --timeout",
                    timeout.as_secs()
                )));
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }
    Ok(())
}

/// Waits until every listed object is gone, or `timeout` passes: each object is read, then
/// watched from the version read until it changes, so its removal is seen at once (a poll
/// would add up to its period per object to every unbind). A refused or failed watch falls
/// back to reading again after a short pause.
pub async fn wait_gone(
    client: &dyn ClusterClient,
    objects: &[Awaited],
    timeout: Duration,
    progress: &mut dyn Progress,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + timeout;
    for object in objects {
        let what = format!(
            "{} {}",
            object.kind,
            qualified(object.namespace.as_deref(), &object.name)
        );
        progress.waiting(&format!("waiting for {what} to be deleted"));
        let res = resource_of(&object.kind);
        let namespace = object.namespace.as_deref();
        loop {
            let version = match client.get_opt(&res, namespace, &object.name).await {
                Ok(None) => {
                    progress.done(&format!("{what} is deleted"));
                    break;
                }
                Ok(Some(obj)) => obj.metadata.resource_version,
                Err(_) => None,
            };
            let now = tokio::time::Instant::now();
            if now >= deadline {
                return Err(CliError::Timeout(format!(
                    "{what} was not deleted within {}s (the konnector may still be draining); `kbind status` shows why, or use `kbind unbind --orphan`",
                    timeout.as_secs()
                )));
            }
            let left = deadline - now;
            let changed = async {
                let Some(version) = version else { return false };
                let params = WatchParams::default()
                    .fields(&format!("metadata.name={}", object.name))
                    .timeout(u32::try_from(left.as_secs().clamp(1, 290)).unwrap_or(290));
                match client.watch(&res, namespace, &params, &version).await {
                    Ok(mut events) => events.next().await.is_some(),
                    Err(_) => false,
                }
            };
            match tokio::time::timeout(left, changed).await {
                // Something happened to it (or the watch ended): read it again.
                Ok(true) => {}
                Ok(false) => tokio::time::sleep(Duration::from_millis(250).min(left)).await,
                Err(_) => {}
            }
        }
    }
    Ok(())
}

/// `ns/name`, or `name` when cluster-scoped.
pub fn qualified(namespace: Option<&str>, name: &str) -> String {
    match namespace {
        Some(ns) => format!("{ns}/{name}"),
        None => name.to_string(),
    }
}

/// A dynamic object as plain JSON.
pub fn object_value(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// Every object of `res` (in `namespace`, or all), as JSON.
pub async fn list(client: &dyn ClusterClient, res: &ApiResource, namespace: Option<&str>) -> Result<Vec<Value>> {
    let list = client
        .list(res, namespace, &ListParams::default())
        .await
        .map_err(|e| consumer_error(&format!("cannot list {} on the consumer", res.plural), e))?;
    Ok(list.items.iter().map(object_value).collect())
}
