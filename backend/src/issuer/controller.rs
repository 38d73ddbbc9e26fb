//! The issuer module's controllers on the provider: Grants (finalizer, provision, status,
//! revoke on deletion) and Exports (`status.apis[]` and `Ready` from the exported CRDs).
//!
//! Both are kube-runtime `Controller`s over the seam's list+watch (`kbind_cluster::watcher`).
//! A Grant deleted while no issuer runs keeps the issuer's finalizer, so it is revoked when one
//! starts. An Export whose spec or APIs change re-triggers the reconcile of its Grants, so their
//! Roles follow the Export.

use std::collections::HashMap;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::{FutureExt, Stream, StreamExt};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kbind_api::conditions::{self, ConditionStatus};
use kbind_api::consts::backend::ISSUER_FINALIZER;
use kbind_api::consts::{TRUE, label};
use kbind_api::{Export, ExportApiStatus, ExportStatus, Grant, GrantStatus, ResourceScope};
use kbind_cluster::watcher::{Event, WatchStreamExt, WatcherConfig, WatcherError, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams, from_dynamic};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use parking_lot::Mutex;
use serde_json::json;

use super::kubernetes::exported_api;
use super::metrics::{self, Metrics};
use super::{IssueError, Issuer, reason};

/// The condition type both kinds carry.
pub const READY: &str = "Ready";
/// `Ready=True` reason.
pub const AS_EXPECTED: &str = "AsExpected";
/// `Ready=False` reason of a Grant whose Export does not exist.
pub const EXPORT_NOT_FOUND: &str = "ExportNotFound";

/// How often a provisioned Grant is provisioned again (repairs drift: a deleted Role comes back).
const RESYNC: Duration = Duration::from_secs(600);
/// Retry delay after a provider error.
const RETRY: Duration = Duration::from_secs(15);

/// Why a reconcile failed (it is retried).
#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    /// The issuer failed.
    #[error(transparent)]
    Issue(#[from] IssueError),
    /// A provider request failed.
    #[error("provider: {0}")]
    Cluster(#[from] kbind_cluster::Error),
}

/// What an Export's Grants were last triggered for: its generation and its APIs' status.
type ExportSeen = (Option<i64>, Vec<ExportApiStatus>);

struct Ctx {
    client: Arc<dyn ClusterClient>,
    issuer: Arc<dyn Issuer>,
    exports: Store<Export>,
    grants: Store<Grant>,
    crds: Store<DynamicObject>,
    /// Per Export: the (generation, status apis) its Grants were last triggered for.
    seen: Mutex<HashMap<String, ExportSeen>>,
    grant_triggers: tokio::sync::mpsc::UnboundedSender<ObjectRef<Grant>>,
    metrics: Metrics,
}

fn typed<K>(
    client: Arc<dyn ClusterClient>,
    config: WatcherConfig,
) -> impl Stream<Item = Result<Event<K>, WatcherError>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone + Send + 'static,
{
    watcher(client, ApiResource::erase::<K>(&()), None, config).filter_map(|item| async move {
        let decode = |o: DynamicObject| from_dynamic::<K>(o).ok();
        match item {
            Ok(event) => Some(Ok(match event {
                Event::Apply(o) => Event::Apply(decode(o)?),
                Event::Delete(o) => Event::Delete(decode(o)?),
                Event::InitApply(o) => Event::InitApply(decode(o)?),
                Event::Init => Event::Init,
                Event::InitDone => Event::InitDone,
            })),
            Err(e) => Some(Err(e)),
        }
    })
}

fn crd_resource() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

/// Keeps of a CRD only what the Export status needs (schemas can be large).
fn lean_crd(crd: &mut DynamicObject) {
    crd.metadata.managed_fields = None;
    crd.metadata.annotations = None;
    if let Some(spec) = crd.data.get_mut("spec").and_then(|s| s.as_object_mut()) {
        spec.retain(|k, _| matches!(k.as_str(), "group" | "names" | "scope"));
    }
    if let Some(data) = crd.data.as_object_mut() {
        data.remove("status");
    }
}

/// Runs the Grant and Export controllers on the provider through `client` until `shutdown`
/// completes. `client` needs to read and write Grants and Exports (and their status) and read
/// CRDs; `issuer` does the rest.
pub async fn run(
    client: Arc<dyn ClusterClient>,
    issuer: Arc<dyn Issuer>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    run_with_metrics(client, issuer, Metrics::default(), shutdown).await;
}

/// [`run`], counting failed reconciles in `metrics`.
pub async fn run_with_metrics(
    client: Arc<dyn ClusterClient>,
    issuer: Arc<dyn Issuer>,
    metrics: Metrics,
    shutdown: impl Future<Output = ()> + Send + 'static,
) {
    let shutdown = shutdown.shared();
    let (grants, grants_writer) = reflector::store::<Grant>();
    let (exports, exports_writer) = reflector::store::<Export>();
    let crd_writer = reflector::store::Writer::<DynamicObject>::new(crd_resource());
    let crds = crd_writer.as_reader();
    let (grant_triggers, grant_trigger_rx) = tokio::sync::mpsc::unbounded_channel();
    let ctx = Arc::new(Ctx {
        client: client.clone(),
        issuer,
        exports: exports.clone(),
        grants: grants.clone(),
        crds: crds.clone(),
        seen: Mutex::new(HashMap::new()),
        grant_triggers,
        metrics,
    });

    let grant_stream = reflector::reflector(grants_writer, typed::<Grant>(client.clone(), WatcherConfig::default()));
    let export_stream = reflector::reflector(
        exports_writer,
        typed::<Export>(client.clone(), WatcherConfig::default()),
    );
    let exported = format!("{}={TRUE}", label::EXPORTED);
    let crd_stream = reflector::reflector(
        crd_writer,
        watcher(
            client.clone(),
            crd_resource(),
            None,
            WatcherConfig::default().labels(&exported),
        )
        .modify(lean_crd),
    );
    // Every change of an exported CRD (or a CRD losing the label) re-judges every Export.
    let crd_changes = crd_stream
        .touched_objects()
        .filter_map(|r| async move { r.ok().map(|_| ()) });

    let export_controller = Controller::for_stream(export_stream.applied_objects(), exports)
        .with_config(Config::default().concurrency(4))
        .reconcile_all_on(crd_changes)
        .graceful_shutdown_on(shutdown.clone())
        .run(reconcile_export, retry_export, ctx.clone())
        .for_each(|_| async {});
    let triggers = futures::stream::unfold(
        grant_trigger_rx,
        |mut rx| async move { rx.recv().await.map(|r| (r, rx)) },
    );
    let take_backs = namespace_changes(client.clone(), grants.clone());
    let grant_controller = Controller::for_stream(grant_stream.applied_objects(), grants)
        .with_config(Config::default().concurrency(4))
        .reconcile_on(futures::stream::select(triggers, take_backs))
        .graceful_shutdown_on(shutdown)
        .run(reconcile_grant, retry_grant, ctx)
        .for_each(|_| async {});
    tokio::join!(export_controller, grant_controller);
}

/// The Grants to re-judge when a namespace kbind created changes: a platform that takes a claimed
/// namespace back (removes its `iam.kbind.io/claimed-by` label, or more) is acted on at once, not
/// at the next resync. The watch selects kbind's namespaces, so a namespace that stops being one
/// arrives as a delete.
fn namespace_changes(
    client: Arc<dyn ClusterClient>,
    grants: Store<Grant>,
) -> impl Stream<Item = ObjectRef<Grant>> + Send + 'static {
    let managed = format!(
        "{}={}",
        super::claims::LABEL_MANAGED_BY,
        kbind_api::consts::backend::MANAGED_BY
    );
    watcher(
        client,
        kbind_cluster::identity::namespace_resource(),
        None,
        WatcherConfig::default().labels(&managed),
    )
    .filter_map(move |event| {
        let grants = grants.clone();
        async move {
            let namespace = match event {
                Ok(Event::Apply(ns) | Event::Delete(ns)) => ns.metadata.name?,
                _ => return None,
            };
            let naming: Vec<ObjectRef<Grant>> = grants
                .state()
                .iter()
                .filter(|g| g.spec.namespaces.contains(&namespace))
                .map(|g| ObjectRef::from_obj(g.as_ref()))
                .collect();
            Some(futures::stream::iter(naming))
        }
    })
    .flatten()
}

fn retry_grant(grant: Arc<Grant>, error: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.reconcile_failed(metrics::GRANT);
    tracing::warn!(grant = %grant.metadata.name.as_deref().unwrap_or_default(), error = %error, "grant reconcile failed; retrying");
    Action::requeue(RETRY)
}

fn retry_export(export: Arc<Export>, error: &ReconcileError, ctx: Arc<Ctx>) -> Action {
    ctx.metrics.reconcile_failed(metrics::EXPORT);
    tracing::warn!(export = %export.metadata.name.as_deref().unwrap_or_default(), error = %error, "export reconcile failed; retrying");
    Action::requeue(RETRY)
}

fn now() -> Time {
    Time(jiff::Timestamp::now())
}

fn grant_resource() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

/// Sets the Grant's finalizers to `finalizers`, on exactly the version that was read.
async fn set_finalizers(ctx: &Ctx, grant: &Grant, finalizers: Vec<String>) -> Result<(), ReconcileError> {
    let name = grant.metadata.name.as_deref().unwrap_or_default();
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": grant.metadata.resource_version}});
    ctx.client
        .patch(
            &grant_resource(),
            None,
            name,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await?;
    Ok(())
}

async fn reconcile_grant(grant: Arc<Grant>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = grant.metadata.name.clone().unwrap_or_default();
    let finalizers = grant.metadata.finalizers.clone().unwrap_or_default();
    let has_finalizer = finalizers.iter().any(|f| f == ISSUER_FINALIZER);
    if grant.metadata.deletion_timestamp.is_some() {
        if has_finalizer {
            ctx.issuer.revoke(&grant).await?;
            let remaining = finalizers.into_iter().filter(|f| f != ISSUER_FINALIZER).collect();
            set_finalizers(&ctx, &grant, remaining).await?;
            tracing::info!(grant = %name, "revoked");
        }
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut with = finalizers;
        with.push(ISSUER_FINALIZER.to_string());
        // The write brings the Grant back with the finalizer; that reconcile provisions.
        set_finalizers(&ctx, &grant, with).await?;
        return Ok(Action::await_change());
    }

    let generation = grant.metadata.generation;
    let export = match ctx.exports.get(&ObjectRef::new(&grant.spec.export)) {
        Some(export) => Some((*export).clone()),
        // The store may lag behind a just-created Export.
        None => ctx.client.get_typed_opt::<Export>(None, &grant.spec.export).await?,
    };
    let mut status = grant.status.clone().unwrap_or_default();
    let (ready, action) = match export {
        None => (
            conditions::new(
                READY,
                false,
                EXPORT_NOT_FOUND,
                format!("Export {:?} does not exist", grant.spec.export),
                generation,
            ),
            Action::requeue(RESYNC),
        ),
        Some(export) => match ctx.issuer.provision(&grant, &export).await {
            Ok(issued) => {
                status.issued = Some(issued);
                (
                    conditions::new(
                        READY,
                        true,
                        AS_EXPECTED,
                        format!("issued by {}", ctx.issuer.name()),
                        generation,
                    ),
                    Action::requeue(RESYNC),
                )
            }
            Err(e) => {
                tracing::info!(grant = %name, reason = e.reason(), error = %e, "not issued");
                ctx.metrics.not_provisioned(&e);
                let retry = if matches!(e, IssueError::Cluster(_)) {
                    RETRY
                } else {
                    RESYNC
                };
                (
                    conditions::new(READY, false, e.reason(), e.to_string(), generation),
                    Action::requeue(retry),
                )
            }
        },
    };
    status.observed_generation = generation;
    conditions::set(&mut status.conditions, ready, &now());
    write_grant_status(&ctx, &grant, &status).await?;
    Ok(action)
}

/// Writes the issuer's part of the status (never `pickup`, which the gateway owns) when it changed.
async fn write_grant_status(ctx: &Ctx, grant: &Grant, status: &GrantStatus) -> Result<(), ReconcileError> {
    let current = grant.status.clone().unwrap_or_default();
    if current.issued == status.issued
        && current.observed_generation == status.observed_generation
        && current.conditions == status.conditions
    {
        return Ok(());
    }
    let patch = json!({"status": {
        "issued": status.issued,
        "observedGeneration": status.observed_generation,
        "conditions": status.conditions,
    }});
    let name = grant.metadata.name.as_deref().unwrap_or_default();
    ctx.client
        .patch_status(
            &grant_resource(),
            None,
            name,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await?;
    Ok(())
}

/// The Export's status as the provider's exported CRDs say.
pub fn export_status(export: &Export, exported: &[DynamicObject], previous: &[Condition]) -> ExportStatus {
    let mut apis = Vec::new();
    let mut missing = Vec::new();
    for api in &export.spec.apis {
        let found = exported
            .iter()
            .filter(|c| c.metadata.name.as_deref() == Some(api.name.as_str()))
            .find_map(exported_api);
        if found.is_none() {
            missing.push(api.name.clone());
        }
        apis.push(ExportApiStatus {
            name: api.name.clone(),
            exported: found.is_some(),
            scope: found.map(|f| f.scope()),
        });
    }
    let generation = export.metadata.generation;
    let cluster_scoped = apis
        .iter()
        .filter(|a| a.scope == Some(ResourceScope::Cluster))
        .map(|a| a.name.clone());
    let unshared = IssueError::unshared(export, cluster_scoped);
    let ready = if let Some(refusal) = unshared.filter(|_| missing.is_empty()) {
        conditions::new(
            READY,
            ConditionStatus::False,
            refusal.reason(),
            refusal.to_string(),
            generation,
        )
    } else if missing.is_empty() {
        conditions::new(
            READY,
            ConditionStatus::True,
            AS_EXPECTED,
            "every API is exported",
            generation,
        )
    } else {
        conditions::new(
            READY,
            ConditionStatus::False,
            reason::API_NOT_EXPORTED,
            IssueError::ApiNotExported(missing).to_string(),
            generation,
        )
    };
    let mut conditions = previous.to_vec();
    conditions::set(&mut conditions, ready, &now());
    ExportStatus { apis, conditions }
}

async fn reconcile_export(export: Arc<Export>, ctx: Arc<Ctx>) -> Result<Action, ReconcileError> {
    let name = export.metadata.name.clone().unwrap_or_default();
    // Judged only on a complete list of the exported CRDs, never on a store still filling.
    if !matches!(
        tokio::time::timeout(RETRY, ctx.crds.wait_until_ready()).await,
        Ok(Ok(()))
    ) {
        return Ok(Action::requeue(RETRY));
    }
    let crds: Vec<DynamicObject> = ctx.crds.state().iter().map(|c| (**c).clone()).collect();
    let current = export.status.clone().unwrap_or_default();
    let status = export_status(&export, &crds, &current.conditions);
    if status != current {
        let patch = json!({"status": {"apis": status.apis, "conditions": status.conditions}});
        ctx.client
            .patch_status(
                &ApiResource::erase::<Export>(&()),
                None,
                &name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await?;
    }
    // The Export's Grants follow a spec change or an API (un)exported.
    let key = (export.metadata.generation, status.apis.clone());
    let changed = {
        let mut seen = ctx.seen.lock();
        seen.insert(name.clone(), key.clone()) != Some(key)
    };
    if changed {
        for grant in ctx.grants.state().iter().filter(|g| g.spec.export == name) {
            let _ = ctx.grant_triggers.send(ObjectRef::from_obj(&**grant));
        }
    }
    Ok(Action::await_change())
}
