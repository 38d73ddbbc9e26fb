//! What every case shares: the case error, polling (`eventually`, `consistently`), a per-case
//! [`Scope`] that names, creates and cleans up namespaces and CRDs, and resource handles.

use std::fmt::{Debug, Display};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kbind_cluster::{
    ApiResource, ClusterClient, DeleteParams, DynamicObject, Error, ListParams, PostParams, WatchEvent, WatchParams,
    WatchStream,
};
use parking_lot::Mutex;
use serde_json::{Value, json};
use tokio::time::Instant;

use crate::target::Target;

/// The ConfigMap kube-controller-manager's root-ca-cert-publisher puts in every namespace.
pub const ROOT_CA_CONFIGMAP: &str = "kube-root-ca.crt";

/// Why a case did not pass.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CaseError {
    /// The target behaved differently from kube-apiserver.
    #[error("{0}")]
    Failed(String),
    /// The case cannot run on this target (e.g. it needs fake-only fault switches).
    #[error("skipped: {0}")]
    Skipped(String),
}

impl CaseError {
    /// A failure with this message.
    pub fn failed(message: impl Into<String>) -> Self {
        CaseError::Failed(message.into())
    }
}

impl From<Error> for CaseError {
    fn from(err: Error) -> Self {
        CaseError::Failed(format!("unexpected error: {err:?}"))
    }
}

/// The result of a case or of one of its steps.
pub type CaseResult<T = ()> = Result<T, CaseError>;

/// Fails the case with a formatted message unless the condition holds.
#[macro_export]
macro_rules! check {
    ($cond:expr, $($msg:tt)+) => {
        if !$cond {
            return Err($crate::CaseError::Failed(format!($($msg)+)));
        }
    };
}

/// Adds what a step was doing to its error.
pub trait Context<T> {
    /// Wraps a failure as "`what`: cause".
    fn ctx(self, what: impl Display) -> CaseResult<T>;
}

impl<T> Context<T> for Result<T, Error> {
    fn ctx(self, what: impl Display) -> CaseResult<T> {
        self.map_err(|e| CaseError::Failed(format!("{what}: {e:?}")))
    }
}

impl<T> Context<T> for Option<T> {
    fn ctx(self, what: impl Display) -> CaseResult<T> {
        self.ok_or_else(|| CaseError::Failed(format!("{what}: missing")))
    }
}

/// The error a step had to fail with; a success is a case failure naming `what`.
pub fn expect_err<T: Debug>(result: Result<T, Error>, what: &str) -> CaseResult<Error> {
    match result {
        Ok(v) => Err(CaseError::Failed(format!(
            "{what}: expected an error, got success: {v:?}"
        ))),
        Err(e) => Ok(e),
    }
}

/// Skips the case unless the target has fault switches.
pub fn require_faults(t: &dyn Target) -> CaseResult<Arc<dyn crate::FaultControl>> {
    t.faults()
        .ok_or_else(|| CaseError::Skipped(format!("{} has no fault switches (fake-only case)", t.name())))
}

fn poll_interval(within: Duration) -> Duration {
    (within / 100).clamp(Duration::from_millis(5), Duration::from_millis(500))
}

/// Polls `probe` until it succeeds or `within` passes (on the tokio clock, so paused and real
/// clocks both work); the last failure is the case's error.
pub async fn eventually<T>(
    within: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> CaseResult<T>,
) -> CaseResult<T> {
    let deadline = Instant::now() + within;
    loop {
        match probe().await {
            Ok(v) => return Ok(v),
            Err(CaseError::Skipped(s)) => return Err(CaseError::Skipped(s)),
            Err(CaseError::Failed(last)) if Instant::now() >= deadline => {
                return Err(CaseError::Failed(format!("{what}: not within {within:?}: {last}")));
            }
            Err(_) => tokio::time::sleep(poll_interval(within)).await,
        }
    }
}

/// Checks that `probe` keeps succeeding for `window` (an absence can only be shown over time).
pub async fn consistently(
    window: Duration,
    what: &str,
    mut probe: impl AsyncFnMut() -> CaseResult<()>,
) -> CaseResult<()> {
    let deadline = Instant::now() + window;
    loop {
        probe()
            .await
            .map_err(|e| CaseError::Failed(format!("{what}: stopped holding: {e}")))?;
        if Instant::now() >= deadline {
            return Ok(());
        }
        tokio::time::sleep(poll_interval(window)).await;
    }
}

/// Runs `step` with a deadline, failing the case with `what` if it does not finish.
pub async fn within<T>(limit: Duration, what: &str, step: impl Future<Output = T>) -> CaseResult<T> {
    tokio::time::timeout(limit, step)
        .await
        .map_err(|_| CaseError::Failed(format!("{what}: did not finish within {limit:?}")))
}

/// The next item of a watch, failing the case if none comes within `limit`.
pub async fn next_event(
    stream: &mut WatchStream,
    limit: Duration,
) -> CaseResult<Option<kbind_cluster::Result<WatchEvent<DynamicObject>>>> {
    within(limit, "waiting for a watch event", stream.next()).await
}

/// The next non-bookmark event, failing on errors, the end of the stream or a timeout.
pub async fn next_change(stream: &mut WatchStream, limit: Duration) -> CaseResult<WatchEvent<DynamicObject>> {
    let deadline = Instant::now() + limit;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match next_event(stream, left).await? {
            Some(Ok(WatchEvent::Bookmark(_))) => continue,
            Some(Ok(ev)) => return Ok(ev),
            Some(Err(e)) => return Err(CaseError::failed(format!("watch failed: {e:?}"))),
            None => return Err(CaseError::failed("watch ended early")),
        }
    }
}

/// The type, name and resourceVersion of a watch event, for comparisons.
pub fn describe(ev: &WatchEvent<DynamicObject>) -> (String, String, String) {
    let (kind, obj) = match ev {
        WatchEvent::Added(o) => ("ADDED", Some(o)),
        WatchEvent::Modified(o) => ("MODIFIED", Some(o)),
        WatchEvent::Deleted(o) => ("DELETED", Some(o)),
        WatchEvent::Bookmark(b) => return ("BOOKMARK".into(), String::new(), b.metadata.resource_version.clone()),
        WatchEvent::Error(e) => return ("ERROR".into(), e.message.clone(), String::new()),
    };
    let name = obj.and_then(|o| o.metadata.name.clone()).unwrap_or_default();
    let rv = obj
        .and_then(|o| o.metadata.resource_version.clone())
        .unwrap_or_default();
    (kind.to_string(), name, rv)
}

/// Parses a resourceVersion as the number kube-apiserver (etcd) and fakeapi hand out.
pub fn rv_number(rv: Option<&str>) -> CaseResult<u64> {
    rv.and_then(|s| s.parse().ok())
        .ok_or_else(|| CaseError::failed(format!("resourceVersion {rv:?} is not a number")))
}

/// The resourceVersion of an object, as a number.
pub fn rv_of(obj: &DynamicObject) -> CaseResult<u64> {
    rv_number(obj.metadata.resource_version.as_deref())
}

/// A `DynamicObject` from JSON (test-authored, so malformed JSON is a case bug).
pub fn object(value: Value) -> CaseResult<DynamicObject> {
    serde_json::from_value(value).map_err(|e| CaseError::failed(format!("bad test object: {e}")))
}

/// An object as JSON.
pub fn to_json(obj: &DynamicObject) -> Value {
    serde_json::to_value(obj).unwrap_or(Value::Null)
}

/// A ConfigMap body.
pub fn config_map(name: &str, data: Value) -> CaseResult<DynamicObject> {
    object(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}))
}

/// Resource handles for the built-ins cases use.
pub mod res {
    use k8s_openapi::api::{apps, coordination, core, events, rbac};
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    use kbind_cluster::ApiResource;

    /// core/v1 ConfigMap.
    pub fn config_maps() -> ApiResource {
        ApiResource::erase::<core::v1::ConfigMap>(&())
    }
    /// core/v1 Secret.
    pub fn secrets() -> ApiResource {
        ApiResource::erase::<core::v1::Secret>(&())
    }
    /// core/v1 Namespace.
    pub fn namespaces() -> ApiResource {
        ApiResource::erase::<core::v1::Namespace>(&())
    }
    /// core/v1 ServiceAccount.
    pub fn service_accounts() -> ApiResource {
        ApiResource::erase::<core::v1::ServiceAccount>(&())
    }
    /// core/v1 Event.
    pub fn core_events() -> ApiResource {
        ApiResource::erase::<core::v1::Event>(&())
    }
    /// events.k8s.io/v1 Event.
    pub fn events() -> ApiResource {
        ApiResource::erase::<events::v1::Event>(&())
    }
    /// coordination.k8s.io/v1 Lease.
    pub fn leases() -> ApiResource {
        ApiResource::erase::<coordination::v1::Lease>(&())
    }
    /// apps/v1 Deployment.
    pub fn deployments() -> ApiResource {
        ApiResource::erase::<apps::v1::Deployment>(&())
    }
    /// rbac Role.
    pub fn roles() -> ApiResource {
        ApiResource::erase::<rbac::v1::Role>(&())
    }
    /// rbac RoleBinding.
    pub fn role_bindings() -> ApiResource {
        ApiResource::erase::<rbac::v1::RoleBinding>(&())
    }
    /// rbac ClusterRole.
    pub fn cluster_roles() -> ApiResource {
        ApiResource::erase::<rbac::v1::ClusterRole>(&())
    }
    /// rbac ClusterRoleBinding.
    pub fn cluster_role_bindings() -> ApiResource {
        ApiResource::erase::<rbac::v1::ClusterRoleBinding>(&())
    }
    /// apiextensions CustomResourceDefinition.
    pub fn crds() -> ApiResource {
        ApiResource::erase::<CustomResourceDefinition>(&())
    }
}

/// A namespaced `Widget` CRD of one case: its schema for `spec` and whether `/status` is separate.
#[derive(Debug, Clone)]
pub struct WidgetCrd {
    /// The OpenAPI v3 schema of `spec`.
    pub spec_schema: Value,
    /// Whether the status subresource is enabled.
    pub status_subresource: bool,
}

impl WidgetCrd {
    /// A CRD whose spec keeps anything.
    pub fn open(status_subresource: bool) -> Self {
        Self {
            spec_schema: json!({"type": "object", "x-kubernetes-preserve-unknown-fields": true}),
            status_subresource,
        }
    }

    /// A CRD with this spec schema.
    pub fn with_spec(spec_schema: Value, status_subresource: bool) -> Self {
        Self {
            spec_schema,
            status_subresource,
        }
    }

    fn manifest(&self, group: &str) -> Value {
        let mut version = json!({
            "name": "v1", "served": true, "storage": true,
            "schema": {"openAPIV3Schema": {
                "type": "object",
                "properties": {
                    "spec": self.spec_schema,
                    "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
                },
            }},
        });
        if self.status_subresource {
            version["subresources"] = json!({"status": {}});
        }
        json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("widgets.{group}")},
            "spec": {
                "group": group, "scope": "Namespaced",
                "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
                "versions": [version],
            },
        })
    }
}

/// The `Widget` resource of a group.
pub fn widgets(group: &str) -> ApiResource {
    ApiResource {
        group: group.to_string(),
        version: "v1".into(),
        api_version: format!("{group}/v1"),
        kind: "Widget".into(),
        plural: "widgets".into(),
    }
}

/// A Widget body.
pub fn widget(group: &str, name: &str, spec: Value) -> CaseResult<DynamicObject> {
    object(json!({"apiVersion": format!("{group}/v1"), "kind": "Widget", "metadata": {"name": name}, "spec": spec}))
}

/// Whether a CRD object reports `Established=True`.
pub fn is_established(crd: &DynamicObject) -> bool {
    crd.data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
}

/// One case's footprint on a cluster: unique names, and what to delete when the case ends.
pub struct Scope<'t> {
    /// The target the case runs on.
    pub target: &'t dyn Target,
    /// An administrator client.
    pub admin: Arc<dyn ClusterClient>,
    short: String,
    suffix: String,
    created: Mutex<Vec<(ApiResource, Option<String>, String)>>,
}

impl<'t> Scope<'t> {
    /// A scope for the case called `short` (a few lowercase letters, digits and dashes).
    pub fn new(target: &'t dyn Target, short: &str) -> Self {
        let suffix = uuid::Uuid::new_v4().simple().to_string()[..6].to_string();
        Self {
            target,
            admin: target.admin(),
            short: short.to_string(),
            suffix,
            created: Mutex::new(Vec::new()),
        }
    }

    /// How long asynchronous effects may take on the target.
    pub fn patience(&self) -> Duration {
        self.target.patience()
    }

    /// A name unique to this case run: `c-<short>-<base>-<random>`.
    pub fn name(&self, base: &str) -> String {
        format!("c-{}-{base}-{}", self.short, self.suffix)
    }

    /// The case's own API group: `<short>-<random>.conformance.kbind.io`.
    pub fn group(&self) -> String {
        format!("{}-{}.conformance.kbind.io", self.short, self.suffix)
    }

    /// Remembers a cluster-scoped or out-of-namespace object to delete when the case ends.
    pub fn track(&self, res: ApiResource, namespace: Option<&str>, name: &str) {
        self.created
            .lock()
            .push((res, namespace.map(str::to_string), name.to_string()));
    }

    /// Creates a namespace `c-<short>-<base>-<random>` that is deleted when the case ends.
    pub async fn namespace(&self, base: &str) -> CaseResult<String> {
        let name = self.name(base);
        let ns = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}))?;
        self.admin
            .create(&res::namespaces(), None, &ns, &PostParams::default())
            .await
            .ctx(format!("create namespace {name}"))?;
        self.track(res::namespaces(), None, &name);
        // kube-controller-manager publishes this ConfigMap into every new namespace; waiting
        // for it keeps it from showing up in the middle of a case's watch.
        let admin = &self.admin;
        eventually(self.patience(), "kube-root-ca.crt published", async || {
            admin.get(&res::config_maps(), Some(&name), ROOT_CA_CONFIGMAP).await?;
            Ok(())
        })
        .await?;
        Ok(name)
    }

    /// Creates the case's Widget CRD, waits until it is Established and served, and returns
    /// the Widget resource.
    pub async fn widget_crd(&self, crd: &WidgetCrd) -> CaseResult<ApiResource> {
        let group = self.group();
        let manifest = object(crd.manifest(&group))?;
        let name = format!("widgets.{group}");
        self.admin
            .create(&res::crds(), None, &manifest, &PostParams::default())
            .await
            .ctx(format!("create CRD {name}"))?;
        self.track(res::crds(), None, &name);
        self.wait_served(&name, &group).await?;
        Ok(widgets(&group))
    }

    /// Waits until CRD `name` is Established and its Widgets can be listed.
    pub async fn wait_served(&self, name: &str, group: &str) -> CaseResult<()> {
        let admin = &self.admin;
        eventually(self.patience(), "CRD Established", async || {
            let crd = admin.get(&res::crds(), None, name).await?;
            check!(
                is_established(&crd),
                "CRD {name} not Established yet: {:?}",
                crd.data.get("status")
            );
            Ok(())
        })
        .await?;
        eventually(self.patience(), "Widgets served", async || {
            admin.list(&widgets(group), None, &ListParams::default()).await?;
            Ok(())
        })
        .await
    }

    /// Deletes what the case created (newest first), then returns the case's result.
    pub async fn finish<T>(self, result: CaseResult<T>) -> CaseResult<T> {
        let created = std::mem::take(&mut *self.created.lock());
        for (res, ns, name) in created.into_iter().rev() {
            // Cleanup is best effort: an object already gone, or a cluster the case cut off,
            // must not hide the case's own verdict.
            let _ = self
                .admin
                .delete(&res, ns.as_deref(), &name, &DeleteParams::default())
                .await;
        }
        result
    }
}

/// Opens a watch, failing the case on error.
pub async fn open_watch(
    client: &dyn ClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
    params: &WatchParams,
    rv: &str,
) -> CaseResult<WatchStream> {
    client
        .watch(res, namespace, params, rv)
        .await
        .ctx(format!("watch {} from {rv:?}", res.plural))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn eventually_returns_once_the_probe_succeeds() {
        let mut calls = 0;
        let got = eventually(Duration::from_secs(1), "third time", async || {
            calls += 1;
            check!(calls >= 3, "only {calls} calls");
            Ok(calls)
        })
        .await;
        assert_eq!(got, Ok(3));
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_fails_with_the_last_reason_after_its_deadline() {
        let start = Instant::now();
        let got: CaseResult<()> = eventually(Duration::from_secs(2), "never", async || {
            Err(CaseError::failed("still red"))
        })
        .await;
        let Err(CaseError::Failed(message)) = got else {
            panic!("expected a failure, got {got:?}");
        };
        assert!(message.contains("never") && message.contains("still red"), "{message}");
        assert!(start.elapsed() >= Duration::from_secs(2));
    }

    #[tokio::test(start_paused = true)]
    async fn eventually_passes_a_skip_through_at_once() {
        let got: CaseResult<()> = eventually(Duration::from_secs(60), "skip", async || {
            Err(CaseError::Skipped("no faults".into()))
        })
        .await;
        assert_eq!(got, Err(CaseError::Skipped("no faults".into())));
    }

    #[tokio::test(start_paused = true)]
    async fn consistently_fails_when_the_condition_stops_holding() {
        let start = Instant::now();
        let got = consistently(Duration::from_secs(1), "stays green", async || {
            check!(start.elapsed() < Duration::from_millis(500), "turned red");
            Ok(())
        })
        .await;
        assert!(
            matches!(&got, Err(CaseError::Failed(m)) if m.contains("turned red")),
            "{got:?}"
        );
        let held = consistently(Duration::from_secs(1), "always green", async || Ok(())).await;
        assert_eq!(held, Ok(()));
    }
}
