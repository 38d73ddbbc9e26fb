//! Cluster identity (contract §2): the UID of LogicalCluster `cluster` when it exists, else
//! the UID of Namespace `kube-system`.

use kube::api::ApiResource;

use crate::{ClusterClient, Error, Result};

/// Where an identity came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IdentitySource {
    /// `core.kcp.io/v1alpha1` LogicalCluster `cluster` (a kcp-like provider).
    LogicalCluster,
    /// Namespace `kube-system` (a plain Kubernetes cluster).
    KubeSystem,
}

/// The identity of one cluster.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClusterIdentity {
    /// The identifying UID.
    pub uid: String,
    /// Which object it was read from.
    pub source: IdentitySource,
}

/// The kcp LogicalCluster resource.
pub fn logical_cluster_resource() -> ApiResource {
    ApiResource {
        group: "core.kcp.io".into(),
        version: "v1alpha1".into(),
        api_version: "core.kcp.io/v1alpha1".into(),
        kind: "LogicalCluster".into(),
        plural: "logicalclusters".into(),
    }
}

/// The core Namespace resource.
pub fn namespace_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Namespace".into(),
        plural: "namespaces".into(),
    }
}

/// Reads a cluster's identity through the seam.
pub async fn read_identity<C: ClusterClient + ?Sized>(client: &C) -> Result<ClusterIdentity> {
    match client.get(&logical_cluster_resource(), None, "cluster").await {
        Ok(obj) => return uid_of(obj.metadata.uid, IdentitySource::LogicalCluster),
        Err(Error::NotFound { .. }) => {}
        // RBAC is checked before routing, so a restricted caller gets 403 even where the
        // resource is not served; and kube-apiserver answers a group it does not have with a
        // plain `404 page not found`, which a proxy could also send: only discovery can tell.
        Err(e @ (Error::Forbidden { .. } | Error::NotServed { .. })) => {
            let lc = logical_cluster_resource();
            if client
                .discovery()
                .await?
                .find_version(&lc.group, &lc.version, &lc.plural)
                .is_some()
            {
                return Err(e);
            }
        }
        Err(e) => return Err(e),
    }
    let ns = client.get(&namespace_resource(), None, "kube-system").await?;
    uid_of(ns.metadata.uid, IdentitySource::KubeSystem)
}

fn uid_of(uid: Option<String>, source: IdentitySource) -> Result<ClusterIdentity> {
    match uid {
        Some(uid) if !uid.is_empty() => Ok(ClusterIdentity { uid, source }),
        _ => Err(Error::Decode("identity object has no metadata.uid".into())),
    }
}
