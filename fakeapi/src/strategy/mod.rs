//! Per-resource write rules, kept as kube-apiserver's registry keeps them: one strategy per
//! resource holds what that kind adds to the generic write path of [`crate::ops`] (create,
//! update, patch, delete), and [`for_resource`] maps a served resource to its strategy.
//! Resources without special rules use [`DefaultStrategy`].

use kbind_cluster::error::Cause;
use kbind_cluster::{Error, Result};
use serde_json::Value;

use crate::cluster::Inner;
use crate::rbac::UserInfo;
use crate::registry::ResourceInfo;
use crate::store::State;

mod crds;
mod custom_resources;
mod namespaces;
mod rbac;
mod secrets;
mod service_accounts;

/// What one resource adds to the generic write path; every hook defaults to "nothing special".
pub(crate) trait Strategy: Sync {
    /// Whether `name` is acceptable as `metadata.name` (a DNS-1123 subdomain unless the kind
    /// says otherwise).
    fn valid_name(&self, name: &str) -> bool {
        is_dns1123_subdomain(name)
    }

    /// Whether writes maintain `metadata.generation`.
    fn tracks_generation(&self) -> bool {
        false
    }

    /// Whether an update may leave `metadata.resourceVersion` out (an unconditional update).
    fn allows_unconditional_update(&self) -> bool {
        true
    }

    /// Whether strategic merge patches are served.
    fn supports_strategic_merge_patch(&self) -> bool {
        true
    }

    /// Sets what the server owns on a new object, after the generic path cleared what clients
    /// may not set.
    fn prepare_for_create(&self, _obj: &mut Value) {}

    /// Restores on an update of the main resource what only other paths may change.
    fn prepare_for_update(&self, _new: &mut Value, _old: &Value) {}

    /// The conversion and defaulting a write gets before validation (create and update).
    fn normalize(&self, _info: &ResourceInfo, _obj: &mut Value) {}

    /// Kind-specific validation, reported in the same 422 as metadata and schema causes;
    /// `old` is the live object on update.
    fn validate(&self, _obj: &Value, _old: Option<&Value>) -> Vec<Cause> {
        vec![]
    }

    /// Refuses a write this user may not make whatever RBAC lets them write (escalation).
    fn authorize_write(&self, _state: &State, _user: &UserInfo, _obj: &Value, _old: Option<&Value>) -> Result<()> {
        Ok(())
    }

    /// Finalizers the server adds when the object is deleted.
    fn finalizers_on_delete(&self, _finalizers: &mut Vec<String>) {}

    /// Marks an object that starts terminating (beyond `deletionTimestamp`).
    fn begin_termination(&self, _obj: &mut Value) {}

    /// Whether something besides `metadata.finalizers` keeps a deleted object in place.
    fn holds_deletion(&self, _obj: &Value) -> bool {
        false
    }

    /// Serves a create on `subresource` of the object `namespace/name`; refused unless the
    /// kind serves one.
    fn create_subresource(
        &self,
        _cluster: &Inner,
        info: &ResourceInfo,
        _namespace: &str,
        _name: &str,
        subresource: &str,
        _body: &Value,
    ) -> Result<Value> {
        Err(Error::MethodNotAllowed {
            message: format!("create is not supported on {}/{subresource}", info.resource.plural),
        })
    }
}

/// A resource without special rules.
pub(crate) struct DefaultStrategy {
    generation: bool,
}

impl Strategy for DefaultStrategy {
    fn tracks_generation(&self) -> bool {
        self.generation
    }
}

/// Built-ins with no rules of their own.
static DEFAULT: DefaultStrategy = DefaultStrategy { generation: false };

/// The apps group's workloads: `generation` counts their spec changes.
static WORKLOADS: DefaultStrategy = DefaultStrategy { generation: true };

/// The strategy of a served resource.
pub(crate) fn for_resource(info: &ResourceInfo) -> &'static dyn Strategy {
    match (info.resource.group.as_str(), info.resource.plural.as_str()) {
        ("", "namespaces") => &namespaces::Namespaces,
        ("", "secrets") => &secrets::Secrets,
        ("", "serviceaccounts") => &service_accounts::ServiceAccounts,
        ("apiextensions.k8s.io", "customresourcedefinitions") => &crds::CustomResourceDefinitions,
        ("rbac.authorization.k8s.io", "roles") => &rbac::ROLES,
        ("rbac.authorization.k8s.io", "clusterroles") => &rbac::CLUSTER_ROLES,
        ("rbac.authorization.k8s.io", "rolebindings") => &rbac::ROLE_BINDINGS,
        ("rbac.authorization.k8s.io", "clusterrolebindings") => &rbac::CLUSTER_ROLE_BINDINGS,
        _ if info.is_custom() => &custom_resources::CustomResources,
        ("apps", _) => &WORKLOADS,
        _ => &DEFAULT,
    }
}

/// Whether `name` is a lowercase RFC 1123 subdomain.
fn is_dns1123_subdomain(name: &str) -> bool {
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.chars()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    name.len() <= 253 && name.split('.').all(label_ok)
}
