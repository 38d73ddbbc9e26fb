//! Unbinding (DESIGN.md §4 "unbind"): drain the binding's objects (provider copies removed
//! unless Orphan, finalizers released), then remove the consumer CRD if no other binding of
//! the Connection uses the API, then let the binding go. The Orphan escape hatch releases
//! everything at once without touching the provider. While the provider is unreachable and
//! copies must go, deletion waits with `DeletionBlocked`: nothing is lost.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::RelatedResourceDirection;
use kbind_api::consts::{annotation, reason};
use kube::runtime::controller::Action;

use super::reconcile::{BindingError, REPORT_INTERVAL, Shared, WAIT_INTERVAL, served_by_other};
use super::schema::{our_crd, resource_of};
use super::status::{ApiReport, Observed, Report, desired_status, write_status};
use super::view::BindingView;
use crate::connection::finalize::{has_cleanup, remove_cleanup};
use crate::crdpull::{crd_resource, is_managed};
use crate::related::{RelatedError, Side, remove_copies};
use crate::sync::{SyncError, SyncerSpec};

/// What happened to one API of a binding being deleted.
enum Drain {
    /// Nothing of this binding is left on the objects.
    Done,
    /// Copies are still going away.
    InProgress,
    /// Copies must go but the provider is not engaged.
    Blocked(String),
}

/// Deletes what the binding owns and, once done, removes its cleanup finalizer.
pub(crate) async fn unbind(view: &BindingView, shared: &Shared) -> Result<Action, BindingError> {
    if !has_cleanup(&view.meta) {
        return Ok(Action::await_change());
    }
    let consumer = shared.ctx.consumer.as_ref();
    let mut blocked = Vec::new();
    let mut in_progress = false;
    for api in &view.spec.apis {
        match drain_api(view, shared, &api.name).await? {
            Drain::Done => {}
            Drain::InProgress => in_progress = true,
            Drain::Blocked(message) => blocked.push((api.name.clone(), message)),
        }
    }
    if !blocked.is_empty() {
        report_blocked(view, shared, &blocked).await?;
        return Ok(Action::requeue(REPORT_INTERVAL));
    }
    if in_progress {
        return Ok(Action::requeue(WAIT_INTERVAL));
    }
    if let Some(action) = remove_related(view, shared).await? {
        return Ok(action);
    }
    // Orphan never touches the provider; without an engagement the tidy-up is skipped.
    if !view.is_orphan()
        && let Some(provider) = shared.registry.get(&view.spec.connection_ref.name)
    {
        let uid = shared
            .connection(&view.spec.connection_ref.name)
            .and_then(|c| c.status.clone())
            .and_then(|s| s.local_cluster_uid)
            .unwrap_or_default();
        super::namespaces::remove_unused(view, shared, &provider, &uid).await;
    }
    for api in &view.spec.apis {
        remove_crd_if_unused(view, shared, &api.name).await?;
    }
    remove_cleanup(consumer, &view.resource(), view.namespace().as_deref(), &view.name()).await?;
    tracing::info!(binding = %view.display(), orphan = view.is_orphan(), "binding released");
    Ok(Action::await_change())
}

/// Removes the related copies the binding owns (DESIGN.md §4 "unbind"); `Some` while some remain.
/// Without `FromConsumer` rules no provider copy can be left (removing a rule collects its
/// copies), so a missing provider does not block; Orphan never touches the provider.
async fn remove_related(view: &BindingView, shared: &Shared) -> Result<Option<Action>, BindingError> {
    let connection = &view.spec.connection_ref.name;
    let uid = shared
        .connection(connection)
        .and_then(|c| c.status.clone())
        .and_then(|s| s.local_cluster_uid)
        .unwrap_or_default();
    let provider = shared.registry.get(connection);
    let from_consumer = view
        .spec
        .related_resources
        .iter()
        .any(|r| r.direction == RelatedResourceDirection::FromConsumer);
    let orphan = view.is_orphan() || (provider.is_none() && !from_consumer);
    let removed = match remove_copies(&shared.ctx, &view.reference(), &uid, provider.as_deref(), orphan).await {
        // Provider credentials that may not list Secrets or ConfigMaps (the usual least privilege,
        // found on real clusters) never held a copy of ours: without FromConsumer rules there is
        // nothing to look for, so the refusal must not block the unbind.
        Err(RelatedError::ListFailed {
            side: Side::Provider,
            source,
            ..
        }) if source.is_forbidden() && !from_consumer => {
            remove_copies(&shared.ctx, &view.reference(), &uid, provider.as_deref(), true).await?
        }
        removed => removed?,
    };
    if removed {
        return Ok(None);
    }
    if provider.is_none() && !orphan {
        let message = format!(
            "related copies on the provider must be deleted but the provider of Connection {connection} is not \
             reachable; deletion waits (nothing is lost). To let go without touching the provider, annotate the \
             binding {}: Orphan",
            annotation::DELETION_POLICY
        );
        report_blocked(view, shared, &[(String::new(), message)]).await?;
        return Ok(Some(Action::requeue(REPORT_INTERVAL)));
    }
    Ok(Some(Action::requeue(WAIT_INTERVAL)))
}

async fn drain_api(view: &BindingView, shared: &Shared, api: &str) -> Result<Drain, BindingError> {
    // Another binding keeps serving these objects: their finalizers and copies stay.
    if served_by_other(shared, view, api).is_some() {
        return Ok(Drain::Done);
    }
    let consumer = shared.ctx.consumer.as_ref();
    // No CRD of ours: no instances, or they belong to another Connection's binding.
    let Some(crd) = our_crd(consumer, &view.spec.connection_ref.name, api).await? else {
        return Ok(Drain::Done);
    };
    let Some((resource, namespaced, status_subresource)) = resource_of(&crd) else {
        return Ok(Drain::Done);
    };
    let connection = view.spec.connection_ref.name.clone();
    let consumer_cluster_uid = shared
        .connection(&connection)
        .and_then(|c| c.status.clone())
        .and_then(|s| s.local_cluster_uid)
        .unwrap_or_default();
    let spec = SyncerSpec {
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
    let provider = shared.registry.get(&connection);
    match shared.syncers.drain(&spec, provider, view.is_orphan()).await {
        Ok(drained) if drained.is_complete() => Ok(Drain::Done),
        Ok(_) => Ok(Drain::InProgress),
        Err(SyncError::ProviderUnavailable { waiting }) => Ok(Drain::Blocked(format!(
            "{waiting} provider copies of {api} must be deleted but the provider of Connection {connection} is not \
             reachable; deletion waits (nothing is lost). To let go without touching the provider, annotate the \
             binding {}: Orphan",
            annotation::DELETION_POLICY
        ))),
        Err(e) => Err(e.into()),
    }
}

async fn report_blocked(view: &BindingView, shared: &Shared, blocked: &[(String, String)]) -> Result<(), BindingError> {
    let report = Report {
        related: Default::default(),
        connected: Observed::not(reason::DELETION_BLOCKED, blocked[0].1.clone()),
        apis: view
            .spec
            .apis
            .iter()
            .map(|a| match blocked.iter().find(|(name, _)| *name == a.name) {
                Some((_, message)) => ApiReport::not_synced(&a.name, reason::DELETION_BLOCKED, message.clone()),
                None => ApiReport::not_synced(&a.name, reason::PENDING, "drained; waiting for the other APIs"),
            })
            .collect(),
    };
    let now = Time(shared.ctx.clock.now());
    write_status(shared.ctx.consumer.as_ref(), view, desired_status(view, &report, &now)).await?;
    Ok(())
}

/// Deletes the consumer CRD of `api` if kbind pulled it through this binding's Connection and
/// no other binding of that Connection names the API.
async fn remove_crd_if_unused(view: &BindingView, shared: &Shared, api: &str) -> Result<(), BindingError> {
    let others = shared.all_bindings().into_iter().any(|b| {
        b.reference() != view.reference()
            && !b.is_deleting()
            && b.spec.connection_ref.name == view.spec.connection_ref.name
            && b.spec.apis.iter().any(|a| a.name == api)
    });
    if others {
        return Ok(());
    }
    let consumer = shared.ctx.consumer.as_ref();
    let Some(crd) = our_crd(consumer, &view.spec.connection_ref.name, api).await? else {
        return Ok(());
    };
    if !is_managed(&crd) {
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
