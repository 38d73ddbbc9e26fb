//! Unbinding (DESIGN.md §4 "unbind"): drain the binding's objects that no other live binding
//! serves (provider copies removed unless Orphan, finalizers released), then remove the consumer
//! CRD if no other binding of the Connection uses the API, then let the binding go. The Orphan
//! escape hatch (on the binding or its Connection) releases the finalizers at once and deletes
//! nothing on either side: provider copies, consumer CRD, consumer objects and related copies
//! all stay. While the provider is unreachable and copies must go, deletion waits with
//! `DeletionBlocked`: nothing is lost. No decision is taken before the binding and Connection
//! stores have synced (§8.9): an unsynced store reads as "nobody else serves this".

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::RelatedResourceDirection;
use kbind_api::consts::{annotation, reason};
use kube::runtime::controller::Action;

use super::reconcile::{BindingError, REPORT_INTERVAL, Shared, Successors, WAIT_INTERVAL, successors};
use super::schema::{our_crd, resource_of};
use super::status::{ApiReport, Observed, Report, desired_status, write_status};
use super::view::BindingView;
use crate::connection::finalize::{has_cleanup, is_orphan as connection_is_orphan, remove_cleanup};
use crate::crdpull::{crd_resource, is_managed};
use crate::related::{RelatedError, Side, remove_copies};
use crate::sync::{BindingKind, SyncError, SyncerSpec};

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
    if !shared.stores_ready() && !crate::planted::planted(crate::planted::Plant::UnbindDecidesOnUnsyncedStore) {
        tracing::debug!(binding = %view.display(), "unbind waits for the binding and Connection caches to sync");
        return Ok(Action::requeue(WAIT_INTERVAL));
    }
    let consumer = shared.ctx.consumer.as_ref();
    let orphan = orphaned(view, shared);
    let mut blocked = Vec::new();
    let mut in_progress = false;
    for api in &view.spec.apis {
        match drain_api(view, shared, &api.name, orphan).await? {
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
    // Orphan deletes nothing on either side: related copies stay where they are.
    if !orphan && let Some(action) = remove_related(view, shared).await? {
        return Ok(action);
    }
    // Orphan never touches the provider; without an engagement the tidy-up is skipped.
    if !orphan && let Some(provider) = shared.registry.get(&view.spec.connection_ref.name) {
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

/// Whether the Orphan escape hatch is on the binding or on its Connection (DESIGN.md §4).
fn orphaned(view: &BindingView, shared: &Shared) -> bool {
    view.is_orphan()
        || shared
            .connection(&view.spec.connection_ref.name)
            .is_some_and(|c| connection_is_orphan(&c))
}

/// Removes the related copies the binding owns (DESIGN.md §4 "unbind"); `Some` while some remain.
/// Without `FromConsumer` rules no provider copy can be left (removing a rule collects its
/// copies), so a missing provider does not block. Never called for Orphan.
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
    let skip_provider = provider.is_none() && !from_consumer;
    let removed = match remove_copies(&shared.ctx, &view.reference(), &uid, provider.as_deref(), skip_provider).await {
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
        // Likewise on the consumer: the chart lets the konnector read Secrets only in its own
        // namespace, and a binding without related rules holds no copy (removing a rule collects
        // its copies), so a refused list of a Binding's namespace must not block the unbind
        // (found on real clusters: a namespaced Binding could never be deleted).
        Err(RelatedError::ListFailed {
            side: Side::Consumer,
            source,
            ..
        }) if source.is_forbidden() && view.spec.related_resources.is_empty() => return Ok(None),
        removed => removed?,
    };
    if removed {
        return Ok(None);
    }
    if provider.is_none() && !skip_provider {
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

async fn drain_api(view: &BindingView, shared: &Shared, api: &str, orphan: bool) -> Result<Drain, BindingError> {
    let consumer = shared.ctx.consumer.as_ref();
    // No CRD of ours: no instances, or they belong to another Connection's binding.
    let Some(crd) = our_crd(consumer, &view.spec.connection_ref.name, api).await? else {
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
    match shared.syncers.drain_keeping(&spec, provider, orphan, &keep).await {
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
/// no other binding of that Connection, of either kind, names the API. A Binding leaves the CRD
/// of a cluster-scoped API alone: it never served it.
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
