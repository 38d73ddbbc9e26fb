//! One view over both binding kinds: a ClusterBinding and a Binding share their spec and
//! status (contract §2) and differ only in scope.

use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation};
use kbind_api::{Binding, BindingSpec, BindingStatus, ClusterBinding};
use kbind_cluster::ApiResource;
use kube::api::ObjectMeta;

use crate::sync::{BindingKind, BindingRef};

/// A ClusterBinding or a Binding, as the reconciler sees it.
#[derive(Debug, Clone)]
pub struct BindingView {
    /// Which kind.
    pub kind: BindingKind,
    /// Its metadata.
    pub meta: ObjectMeta,
    /// The shared spec.
    pub spec: BindingSpec,
    /// The shared status.
    pub status: Option<BindingStatus>,
}

impl From<&ClusterBinding> for BindingView {
    fn from(b: &ClusterBinding) -> Self {
        Self {
            kind: BindingKind::Cluster,
            meta: b.metadata.clone(),
            spec: b.spec.0.clone(),
            status: b.status.clone(),
        }
    }
}

impl From<&Binding> for BindingView {
    fn from(b: &Binding) -> Self {
        Self {
            kind: BindingKind::Namespaced,
            meta: b.metadata.clone(),
            spec: b.spec.clone(),
            status: b.status.clone(),
        }
    }
}

impl BindingView {
    /// The binding's name.
    pub fn name(&self) -> String {
        self.meta.name.clone().unwrap_or_default()
    }

    /// The Binding's namespace (`None` for a ClusterBinding).
    pub fn namespace(&self) -> Option<String> {
        match self.kind {
            BindingKind::Cluster => None,
            BindingKind::Namespaced => self.meta.namespace.clone(),
        }
    }

    /// `ClusterBinding/<name>` or `Binding/<namespace>/<name>`, for messages and logs.
    pub fn display(&self) -> String {
        match self.namespace() {
            None => format!("ClusterBinding/{}", self.name()),
            Some(ns) => format!("Binding/{ns}/{}", self.name()),
        }
    }

    /// The reference syncers carry.
    pub fn reference(&self) -> BindingRef {
        BindingRef {
            kind: self.kind,
            namespace: self.namespace(),
            name: self.name(),
            uid: self.meta.uid.clone().unwrap_or_default(),
        }
    }

    /// The binding's resource on the consumer.
    pub fn resource(&self) -> ApiResource {
        match self.kind {
            BindingKind::Cluster => ApiResource::erase::<ClusterBinding>(&()),
            BindingKind::Namespaced => ApiResource::erase::<Binding>(&()),
        }
    }

    /// The APIs its status still holds a claim on that its spec no longer names (removed from
    /// `spec.apis`; their objects drain before the claim goes).
    pub fn stopped_naming(&self) -> Vec<String> {
        self.status
            .iter()
            .flat_map(|s| s.bound_apis.iter())
            .filter(|a| !self.spec.binds(&a.name) && a.claim().is_some())
            .map(|a| a.name.clone())
            .collect()
    }

    /// Whether the binding is being deleted.
    pub fn is_deleting(&self) -> bool {
        self.meta.deletion_timestamp.is_some()
    }

    /// Whether the binding carries the Orphan escape hatch.
    pub fn is_orphan(&self) -> bool {
        self.meta
            .annotations
            .as_ref()
            .and_then(|a| a.get(annotation::DELETION_POLICY))
            .map(String::as_str)
            == Some(DELETION_POLICY_ORPHAN)
    }

    /// The binding as a dynamic object (for finalizer patches).
    pub fn dynamic(&self) -> kbind_cluster::DynamicObject {
        let res = self.resource();
        let mut obj = kbind_cluster::DynamicObject::new(&self.name(), &res);
        obj.metadata = self.meta.clone();
        obj
    }
}
