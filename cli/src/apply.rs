//! Applying a checked bundle on the consumer as one step: first every check that needs the
//! cluster (the Bindings' namespaces exist, no object of the bundle belongs to another Grant or
//! to somebody else), then the server-side applies, and on a failure half-way the removal of
//! what this run created, so a failed bind leaves the consumer as it found it.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Namespace;
use kbind_api::consts::backend::LABEL_GRANT;
use kbind_cluster::{ClusterClient, ClusterClientExt};

use crate::bundle::{BundleObject, CheckedBundle};
use crate::consumer::{self, FIELD_MANAGER, consumer_error, qualified};
use crate::error::{CliError, Result};

/// Refuses unless every namespace in `namespaces` exists on the consumer.
pub async fn require_namespaces(client: &dyn ClusterClient, namespaces: &[String]) -> Result<()> {
    let mut missing = Vec::new();
    for ns in namespaces {
        let found: Option<Namespace> = client
            .get_typed_opt(None, ns)
            .await
            .map_err(|e| consumer_error(&format!("cannot read Namespace {ns} on the consumer"), e))?;
        if found.is_none() {
            missing.push(ns.as_str());
        }
    }
    if missing.is_empty() {
        return Ok(());
    }
    Err(CliError::ConsumerRefused(format!(
        "namespace {} does not exist on this cluster; create it first (`kubectl create namespace {}`), then bind again",
        missing.join(", "),
        missing.join(" ")
    )))
}

/// Which objects of `bundle` exist already; refuses when one belongs to another Grant (or to no
/// Grant: made by hand or another tool), since a forced apply would take it over.
pub async fn preflight(client: &dyn ClusterClient, bundle: &CheckedBundle) -> Result<BTreeSet<usize>> {
    let mut existing = BTreeSet::new();
    for (i, object) in bundle.objects.iter().enumerate() {
        let what = describe(object);
        let found = client
            .get_opt(
                &consumer::resource_of(&object.kind),
                object.namespace.as_deref(),
                &object.name,
            )
            .await
            .map_err(|e| consumer_error(&format!("cannot read {what} on the consumer"), e))?;
        let Some(found) = found else { continue };
        let owner = found.metadata.labels.as_ref().and_then(|l| l.get(LABEL_GRANT)).cloned();
        if owner.as_deref() != Some(bundle.grant.as_str()) {
            let whose = match owner {
                Some(other) => format!("belongs to Grant {other} ({LABEL_GRANT})"),
                None => format!("has no {LABEL_GRANT} label (not applied by kbind for a Grant)"),
            };
            return Err(CliError::ConsumerRefused(format!(
                "{what} already exists on this cluster and {whose}; refusing to overwrite it, nothing was applied (unbind or remove it first)"
            )));
        }
        existing.insert(i);
    }
    Ok(existing)
}

/// Server-side applies each object in order; when one fails, deletes the ones this call
/// created (not those in `existing`, which were there before) and says what was undone.
pub async fn apply_or_undo(
    client: &dyn ClusterClient,
    bundle: &CheckedBundle,
    existing: &BTreeSet<usize>,
) -> Result<()> {
    for (i, object) in bundle.objects.iter().enumerate() {
        let applied = client
            .apply(
                &consumer::resource_of(&object.kind),
                object.namespace.as_deref(),
                &object.name,
                object.body.clone(),
                FIELD_MANAGER,
                true,
            )
            .await;
        if let Err(e) = applied {
            let failure = consumer_error(&format!("applying {} {} failed", object.kind, object.name), e);
            let created: Vec<&BundleObject> = (0..i)
                .filter(|j| !existing.contains(j))
                .map(|j| &bundle.objects[j])
                .collect();
            let undone = undo(client, &created).await;
            return Err(CliError::Failed(format!("{failure}; {undone}")));
        }
    }
    Ok(())
}

/// Deletes `created` in reverse order; says what was removed and what could not be.
async fn undo(client: &dyn ClusterClient, created: &[&BundleObject]) -> String {
    if created.is_empty() {
        return "nothing was created on this cluster".into();
    }
    let mut removed = Vec::new();
    let mut left = Vec::new();
    for object in created.iter().rev() {
        let what = describe(object);
        match consumer::delete(client, &object.kind, object.namespace.as_deref(), &object.name).await {
            Ok(()) => removed.push(what),
            Err(_) => left.push(what),
        }
    }
    let mut text = format!("removed what this run created ({})", removed.join(", "));
    if !left.is_empty() {
        text.push_str(&format!("; could not remove {}: delete them by hand", left.join(", ")));
    }
    text
}

/// `Kind namespace/name`, as the plan and every message name a bundle object.
fn describe(object: &BundleObject) -> String {
    format!(
        "{} {}",
        object.kind,
        qualified(object.namespace.as_deref(), &object.name)
    )
}
