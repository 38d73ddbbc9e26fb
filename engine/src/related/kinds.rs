//! Which resource a related rule's kind is: Secrets and ConfigMaps are core `v1` and need no
//! request; any other kind is resolved by discovery on the side the originals come from (the
//! rule's `version`, else the group's preferred one), and the other side must serve the same
//! group, version and resource. A kind a side does not serve, or a cluster-scoped one, is an
//! [`Unresolved`] naming it, which the binding shows; it never stops the other rules.

use kbind_api::RelatedKind;
use kbind_cluster::{ApiResource, ClusterClient};

use super::Side;

/// A kind as the syncers use it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Resolved {
    /// The resource, in the version both sides serve.
    pub res: ApiResource,
    /// Whether the side of the originals serves `status` as a subresource.
    pub source_status: bool,
    /// Whether the side of the copies serves `status` as a subresource.
    pub target_status: bool,
}

/// Why a kind cannot be synced, in words that name it (and never any object's content).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Unresolved {
    /// Not served, cluster-scoped, or without the status a rule asks for: retried on the
    /// backstop, as the CRD may come.
    NotServed(String),
    /// Discovery failed (a transport error, a 5xx): retried soon.
    Failed(String),
}

/// The fixed resources of the kinds that need no discovery.
pub(crate) fn builtin(kind: &RelatedKind, version: Option<&str>) -> Option<ApiResource> {
    if version.is_some_and(|v| v != "v1") {
        return None;
    }
    if kind.is_secrets() {
        Some(ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()))
    } else if kind == &RelatedKind::config_maps() {
        Some(ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&()))
    } else {
        None
    }
}

/// Resolves `kind` for a rule whose originals are on `source_side`: discovery on both sides
/// unless it is a [`builtin`] (which both sides always serve, with no status).
pub(crate) async fn resolve(
    kind: &RelatedKind,
    version: Option<&str>,
    source: (Side, &dyn ClusterClient),
    target: (Side, &dyn ClusterClient),
) -> Result<Resolved, Unresolved> {
    if let Some(res) = builtin(kind, version) {
        return Ok(Resolved {
            res,
            source_status: false,
            target_status: false,
        });
    }
    let failed = |side: Side, e: kbind_cluster::Error| {
        Unresolved::Failed(format!(
            "discovery on the {side} failed while resolving {kind} ({})",
            crate::cause::http_cause(&e)
        ))
    };
    let found = source.1.discovery().await.map_err(|e| failed(source.0, e))?;
    let on_source = match version {
        Some(v) => found.find_version(&kind.group, v, &kind.resource),
        None => found.find(&kind.group, &kind.resource),
    };
    let Some(on_source) = on_source else {
        let what = version.map_or_else(|| kind.to_string(), |v| format!("{kind} in version {v}"));
        return Err(Unresolved::NotServed(format!(
            "{what} is not served by the {}",
            source.0
        )));
    };
    if !on_source.namespaced {
        return Err(Unresolved::NotServed(format!(
            "{kind} is cluster-scoped; related resources must be namespaced"
        )));
    }
    let other = target.1.discovery().await.map_err(|e| failed(target.0, e))?;
    let Some(on_target) = other.find_version(&kind.group, &on_source.version, &kind.resource) else {
        return Err(Unresolved::NotServed(format!(
            "{kind} in version {} is not served by the {}",
            on_source.version, target.0
        )));
    };
    if !on_target.namespaced {
        return Err(Unresolved::NotServed(format!(
            "{kind} is cluster-scoped on the {}; related resources must be namespaced",
            target.0
        )));
    }
    Ok(Resolved {
        res: on_source.api_resource(),
        source_status: on_source.has_status(),
        target_status: on_target.has_status(),
    })
}

/// Resolves `kind` on one side only (a sweep or an unbind looks for copies there): `None` when
/// a complete discovery says that side does not serve it (no copy can exist there); an error
/// in words when discovery failed or was partial.
pub(crate) async fn resolve_on(kind: &RelatedKind, reader: &dyn ClusterClient) -> Result<Option<ApiResource>, String> {
    if let Some(res) = builtin(kind, None) {
        return Ok(Some(res));
    }
    let found = reader.discovery().await.map_err(|e| {
        format!(
            "discovery failed while resolving {kind} ({})",
            crate::cause::http_cause(&e)
        )
    })?;
    match found.find(&kind.group, &kind.resource) {
        Some(r) => Ok(r.namespaced.then(|| r.api_resource())),
        None if found.is_complete() => Ok(None),
        None => Err(format!("discovery was partial while resolving {kind}")),
    }
}
