//! Unbinding (contract §4 "unbind"): drain the binding's objects that no other live binding
//! serves (provider copies removed unless Orphan, finalizers released), then remove the consumer
//! CRD if no other binding of the Connection uses the API, then let the binding go. The Orphan
//! escape hatch (on the binding or its Connection) releases the finalizers at once and deletes
//! nothing on either side: provider copies, consumer CRD, consumer objects and related copies
//! all stay. While the provider is unreachable, refuses the credentials (401) or fails, and
//! copies must go, deletion waits with `DeletionBlocked`; a refused verb (403) waits with
//! `Forbidden` and `PermissionDenied=True`. Either way the message carries the HTTP cause and
//! the way out, and nothing is lost. No decision is taken before the binding and Connection
//! stores have synced (§8.9): an unsynced store reads as "nobody else serves this".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::consts::{annotation, condition, reason};
use kbind_api::{RelatedResourceDirection, conditions};
use kbind_cluster::Error;
use kube::runtime::controller::Action;

use super::reconcile::{Binder, BindingError, REPORT_INTERVAL, Successors, WAIT_INTERVAL, successors};
use super::schema::{consumer_crd, pulled_through, resource_of};
use super::status::{ApiReport, Observed, Report, desired_status, write_status};
use super::view::BindingView;
use crate::connection::finalize::{has_cleanup, is_orphan as connection_is_orphan, remove_cleanup};
use crate::crdpull::{crd_resource, is_managed};
use crate::related::{RelatedError, Side, remove_copies_of};
use crate::sync::{ApiSyncerSpec, BindingKind, SyncError};

/// What happened to one API of a binding being deleted.
pub(crate) enum Drain {
    /// Nothing of this binding is left on the objects.
    Done,
    /// Copies are still going away.
    InProgress,
    /// Copies must go but the provider cannot take the deletes.
    Blocked(Blocked),
}

/// Why a drain cannot proceed, for the binding's status and the log.
#[derive(Debug, Clone)]
pub(crate) struct Blocked {
    /// The API (empty for the related copies).
    api: String,
    /// `DeletionBlocked`, or `Forbidden` for a refused verb.
    pub(crate) reason: &'static str,
    /// What happened (with the HTTP cause) and the way out; never a credential.
    pub(crate) message: String,
    /// `"<verb> <resource>"` the provider refused (a 403).
    denied: Option<String>,
}

/// Deletes what the binding owns and, once done, removes its cleanup finalizer.
pub(crate) async fn unbind(view: &BindingView, shared: &Binder) -> Result<Action, BindingError> {
    if !has_cleanup(&view.meta) {
        return Ok(Action::await_change());
    }
    if !shared.stores_ready() && !crate::planted::planted(crate::planted::Plant::UnbindDecidesOnUnsyncedStore) {
        tracing::debug!(binding = %view.display(), "unbind waits for the binding and Connection caches to sync");
        return Ok(Action::requeue(shared.ctx.jitter(&view.display(), WAIT_INTERVAL)));
    }
    let consumer = shared.ctx.consumer.as_ref();
    let orphan = orphaned(view, shared);
    let mut blocked = Vec::new();
    let mut in_progress = false;
    // The APIs it names, and those it stopped naming whose drain had not finished.
    let mut apis: Vec<String> = view.spec.apis.iter().map(|a| a.name.clone()).collect();
    apis.extend(view.stopped_naming());
    for api in &apis {
        match drain_api(view, shared, api, orphan).await? {
            Drain::Done => {}
            Drain::InProgress => in_progress = true,
            Drain::Blocked(why) => blocked.push(why),
        }
    }
    if !blocked.is_empty() {
        report_blocked(view, shared, &blocked).await?;
        return Ok(Action::requeue(shared.ctx.jitter(&view.display(), REPORT_INTERVAL)));
    }
    if in_progress {
        return Ok(Action::requeue(shared.ctx.jitter(&view.display(), WAIT_INTERVAL)));
    }
    // Orphan deletes nothing on either side: related copies stay where they are.
    if !orphan && let Some(action) = remove_related(view, shared).await? {
        return Ok(action);
    }
    // Orphan never touches the provider; without an engagement the tidy-up is skipped.
    if !orphan && let Some(provider) = shared.links.get(&view.spec.connection_ref.name) {
        let uid = shared
            .connection(&view.spec.connection_ref.name)
            .and_then(|c| c.status.clone())
            .and_then(|s| s.local_cluster_uid)
            .unwrap_or_default();
        super::namespaces::remove_unused(view, shared, &provider, &uid).await;
    }
    // Removing the CRD deletes every instance with it: after an Orphan release the consumer
    // may hold the only copy.
    if !orphan || crate::planted::planted(crate::planted::Plant::OrphanUnbindRemovesCrd) {
        for api in &view.spec.apis {
            remove_crd_if_unused(view, shared, &api.name).await?;
        }
    }
    remove_cleanup(consumer, &view.resource(), view.namespace().as_deref(), &view.name()).await?;
    shared.recall.forget(view);
    tracing::info!(binding = %view.display(), orphan, "binding released");
    Ok(Action::await_change())
}

/// Whether the Orphan escape hatch is on the binding or on its Connection (contract §4).
fn orphaned(view: &BindingView, shared: &Binder) -> bool {
    view.is_orphan()
        || shared
            .connection(&view.spec.connection_ref.name)
            .is_some_and(|c| connection_is_orphan(&c))
}

/// Removes the related copies the binding owns (contract §4 "unbind"); `Some` while some remain.
/// Without `FromConsumer` rules no provider copy can be left (removing a rule collects its
/// copies), so a missing provider does not block. Never called for Orphan.
async fn remove_related(view: &BindingView, shared: &Binder) -> Result<Option<Action>, BindingError> {
    let connection = &view.spec.connection_ref.name;
    let uid = shared
        .connection(connection)
        .and_then(|c| c.status.clone())
        .and_then(|s| s.local_cluster_uid)
        .unwrap_or_default();
    let provider = shared.links.get(connection);
    let from_consumer = view
        .spec
        .related_resources
        .iter()
        .any(|r| r.direction == RelatedResourceDirection::FromConsumer);
    let skip_provider = provider.is_none() && !from_consumer;
    // The binding's related syncers stop first, so no write of theirs races the removal.
    shared.related.stop(&view.reference());
    let rules = &view.spec.related_resources;
    let removed = match remove_copies_of(
        &shared.ctx,
        &view.reference(),
        &uid,
        provider.as_deref(),
        skip_provider,
        rules,
    )
    .await
    {
        // Provider credentials that may not list Secrets or ConfigMaps (the usual least privilege)
        // never held a copy of ours: without FromConsumer rules there is nothing to look for, so
        // the refusal must not block the unbind.
        Err(RelatedError::ListFailed {
            side: Side::Provider,
            source,
            ..
        }) if source.is_forbidden() && !from_consumer => {
            remove_copies_of(&shared.ctx, &view.reference(), &uid, provider.as_deref(), true, rules).await?
        }
        // Likewise on the consumer: the chart lets the konnector read Secrets only in its own
        // namespace, and a binding without related rules holds no copy (removing a rule collects
        // its copies), so a refused list of a Binding's namespace must not block the unbind, or a
        // namespaced Binding could never be deleted.
        Err(RelatedError::ListFailed {
            side: Side::Consumer,
            source,
            ..
        }) if source.is_forbidden() && view.spec.related_resources.is_empty() => return Ok(None),
        Ok(removed) => removed,
        // The provider refused or failed: say why instead of failing the reconcile silently.
        Err(e) => {
            let Some(cause) = e.provider_error() else {
                return Err(e.into());
            };
            let why = blocked_by(view, String::new(), connection, &e.to_string(), cause);
            report_blocked(view, shared, &[why]).await?;
            return Ok(Some(Action::requeue(
                shared.ctx.jitter(&view.display(), REPORT_INTERVAL),
            )));
        }
    };
    if removed {
        return Ok(None);
    }
    if provider.is_none() && !skip_provider {
        let why = Blocked {
            api: String::new(),
            reason: reason::DELETION_BLOCKED,
            message: format!(
                "related copies on the provider must be deleted but the provider of Connection {connection} is not \
                 engaged{}; deletion waits (nothing is lost). {}",
                connection_trouble(shared, connection),
                way_out()
            ),
            denied: None,
        };
        report_blocked(view, shared, &[why]).await?;
        return Ok(Some(Action::requeue(
            shared.ctx.jitter(&view.display(), REPORT_INTERVAL),
        )));
    }
    Ok(Some(Action::requeue(shared.ctx.jitter(&view.display(), WAIT_INTERVAL))))
}

pub(crate) async fn drain_api(
    view: &BindingView,
    shared: &Binder,
    api: &str,
    orphan: bool,
) -> Result<Drain, BindingError> {
    let consumer = shared.ctx.consumer.as_ref();
    // No CRD of ours: no instances, or they belong to another Connection's binding.
    let Some(crd) = consumer_crd(consumer, api).await? else {
        return Ok(Drain::Done);
    };
    let Some((resource, namespaced, status_subresource)) = resource_of(&crd) else {
        return Ok(Drain::Done);
    };
    // A Binding never served a cluster-scoped API (ClusterScopedAPIInBinding); listing one
    // under a namespace is a 404 that would keep the binding forever.
    if view.kind == BindingKind::Namespaced && !namespaced {
        return Ok(Drain::Done);
    }
    // Another binding keeps serving these objects: their finalizers and copies stay.
    let keep = match successors(shared, view, api, namespaced) {
        Successors::All(by) => {
            tracing::debug!(binding = %view.display(), api, successor = %by, "nothing to drain: another binding serves these objects");
            // A syncer of this binding may still run (it was serving until the other came):
            // the other binding's syncer takes the objects over, and two must never run.
            let me = view.reference();
            shared.syncers.stop(&crate::sync::SyncerKey {
                connection: view.spec.connection_ref.name.clone(),
                binding_kind: me.kind,
                binding_namespace: me.namespace,
                binding_name: me.name,
                api: api.to_string(),
            });
            return Ok(Drain::Done);
        }
        Successors::Namespaces(keep) => keep,
    };
    let connection = view.spec.connection_ref.name.clone();
    let consumer_cluster_uid = shared
        .connection(&connection)
        .and_then(|c| c.status.clone())
        .and_then(|s| s.local_cluster_uid)
        .unwrap_or_default();
    let spec = ApiSyncerSpec {
        connection: connection.clone(),
        binding: view.reference(),
        api: api.to_string(),
        resource,
        namespaced,
        namespace: view.namespace(),
        conflict_policy: view.spec.conflict_policy,
        consumer_cluster_uid,
        status_subresource,
    };
    let provider = shared.links.get(&connection);
    let unlabelled_ours = pulled_through(&crd, &connection);
    match shared
        .syncers
        .drain_keeping(&spec, provider, orphan, &keep, unlabelled_ours)
        .await
    {
        Ok(drained) if drained.is_complete() => Ok(Drain::Done),
        Ok(_) => Ok(Drain::InProgress),
        Err(SyncError::ProviderUnavailable { waiting }) => Ok(Drain::Blocked(Blocked {
            api: api.to_string(),
            reason: reason::DELETION_BLOCKED,
            message: format!(
                "{waiting} provider copies of {api} must be deleted but the provider of Connection {connection} is not \
                 engaged{}; deletion waits (nothing is lost). {}",
                connection_trouble(shared, &connection),
                way_out()
            ),
            denied: None,
        })),
        Err(e) => match e.provider_error() {
            // A 401 is never a reason to delete or release anything (contract §8.1): it waits.
            Some(cause) => Ok(Drain::Blocked(blocked_by(
                view,
                api.to_string(),
                &connection,
                &e.to_string(),
                cause,
            ))),
            None => Err(e.into()),
        },
    }
}

/// What to do when a drain cannot proceed.
fn way_out() -> String {
    format!(
        "To let go without touching the provider, annotate the binding and its Connection {}: Orphan \
         (`kbind unbind --orphan` does)",
        annotation::DELETION_POLICY
    )
}

/// `" (Connected=False, Unauthorized: the provider refuses the credentials (HTTP 401 …))"` when
/// the Connection's cached status says why its provider is not engaged, else empty. Only the
/// message's first clause (up to `;`, the cause) is quoted: the advice after it is the
/// Connection's.
fn connection_trouble(shared: &Binder, connection: &str) -> String {
    shared
        .connection(connection)
        .and_then(|c| {
            let connected = conditions::find(c.conditions(), condition::CONNECTED)?;
            let cause = connected.message.split(';').next().unwrap_or_default().trim();
            (connected.status == "False").then(|| format!(" (Connected=False, {}: {cause})", connected.reason))
        })
        .unwrap_or_default()
}

/// Why a provider answer stops the drain of `api`; `failed` says which request failed and its
/// HTTP cause.
fn blocked_by(view: &BindingView, api: String, connection: &str, failed: &str, cause: &Error) -> Blocked {
    let what = if api.is_empty() {
        format!("the related copies of binding {}", view.display())
    } else {
        format!("the provider copies of {api}")
    };
    match cause {
        Error::Unauthorized { .. } => Blocked {
            api,
            reason: reason::DELETION_BLOCKED,
            message: format!(
                "{failed}: the provider refuses the credentials of Connection {connection} (revoked or expired?), so \
                 {what} cannot be deleted; deletion waits (nothing is lost). {}",
                way_out()
            ),
            denied: None,
        },
        // `failed` already names the refused verb and resource (its HTTP cause).
        Error::Forbidden { verb, resource, .. } => Blocked {
            api,
            reason: reason::FORBIDDEN,
            message: format!(
                "{failed}: the credentials of Connection {connection} lack that permission, so {what} cannot be \
                 deleted; deletion waits (nothing is lost). Grant it on the provider, or: {}",
                way_out()
            ),
            denied: Some(format!("{verb} {resource}")),
        },
        _ => Blocked {
            api,
            reason: reason::DELETION_BLOCKED,
            message: format!(
                "{failed}, so {what} cannot be deleted yet; deletion waits and retries (nothing is lost). {}",
                way_out()
            ),
            denied: None,
        },
    }
}

/// Writes why the drain waits (Ready=False with `DeletionBlocked`, or `Forbidden` with
/// PermissionDenied=True for a refused verb) and logs it when it is news.
async fn report_blocked(view: &BindingView, shared: &Binder, blocked: &[Blocked]) -> Result<(), BindingError> {
    let first = &blocked[0];
    let unreachable = blocked.iter().find(|b| b.reason != reason::FORBIDDEN);
    let connected = match unreachable {
        Some(b) => Observed::not(reason::DELETION_BLOCKED, b.message.clone()),
        None => Observed::ok("the provider is connected; it refuses a request the drain needs"),
    };
    let mut apis: Vec<ApiReport> = view
        .spec
        .apis
        .iter()
        .map(|a| match blocked.iter().find(|b| b.api == a.name) {
            Some(b) => ApiReport {
                denied: b.denied.iter().cloned().collect(),
                ..ApiReport::not_synced(&a.name, b.reason, b.message.clone())
            },
            None => ApiReport::not_synced(&a.name, reason::PENDING, "drained; waiting for the other APIs"),
        })
        .collect();
    // Related copies have no API entry: a refusal there is carried by the first API's.
    if first.api.is_empty()
        && let Some(api) = apis.first_mut()
    {
        api.synced = Observed::not(first.reason, first.message.clone());
        api.denied = first.denied.iter().cloned().collect();
    }
    // The binding's Synced and Ready take the first unsynced API's reason: list the blocked
    // APIs first so a drained API's `Pending` never hides the refusal, then give boundAPIs back
    // the spec's order, which users see.
    apis.sort_by_key(|a| !blocked.iter().any(|b| b.api == a.name));
    let report = Report {
        related: Default::default(),
        connected,
        apis,
    };
    let now = Time(shared.ctx.clock.now());
    let mut status = desired_status(view, &report, &now);
    let spec_index = |name: &str| view.spec.apis.iter().position(|a| a.name == name);
    status.bound_apis.sort_by_key(|a| spec_index(&a.name));
    let news = view.status.as_ref().map(|s| ready_of(&s.conditions)) != Some(ready_of(&status.conditions));
    for b in blocked {
        if news {
            tracing::warn!(binding = %view.display(), api = %b.api, reason = b.reason, cause = %b.message, "deletion blocked");
        } else {
            tracing::debug!(binding = %view.display(), api = %b.api, reason = b.reason, cause = %b.message, "deletion still blocked");
        }
    }
    write_status(shared.ctx.consumer.as_ref(), view, status).await?;
    Ok(())
}

/// The Ready condition's reason and message.
fn ready_of(conds: &[k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition]) -> Option<(String, String)> {
    conditions::find(conds, condition::READY).map(|c| (c.reason.clone(), c.message.clone()))
}

/// Deletes the consumer CRD of `api` if kbind pulled it and no other live binding, of either
/// kind and through any Connection, names the API (several Connections may serve one API by
/// namespace). A Binding leaves the CRD of a cluster-scoped API alone: it never served it.
async fn remove_crd_if_unused(view: &BindingView, shared: &Binder, api: &str) -> Result<(), BindingError> {
    let others = shared
        .all_bindings()
        .into_iter()
        .any(|b| b.reference() != view.reference() && !b.is_deleting() && b.spec.apis.iter().any(|a| a.name == api));
    if others {
        return Ok(());
    }
    let consumer = shared.ctx.consumer.as_ref();
    let Some(crd) = consumer_crd(consumer, api).await? else {
        return Ok(());
    };
    if !is_managed(&crd) || (view.kind == BindingKind::Namespaced && crd.spec.scope != "Namespaced") {
        return Ok(());
    }
    match consumer.delete(&crd_resource(), None, api, &Default::default()).await {
        Ok(_) => {
            tracing::info!(binding = %view.display(), api, "removed the consumer CRD");
            Ok(())
        }
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(e.into()),
    }
}
