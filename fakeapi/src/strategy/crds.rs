//! CustomResourceDefinitions: the server owns `status`, defaults `singular` and `listKind`,
//! validates the definition (and what an update may change), and holds a deleted CRD with the
//! cleanup finalizer until its custom resources are gone.

use kbind_cluster::error::Cause;
use serde_json::{Value, json};

use super::Strategy;
use crate::registry::ResourceInfo;

/// The finalizer under which the CRD controller deletes a CRD's custom resources.
const CUSTOM_RESOURCE_FINALIZER: &str = "customresourcecleanup.apiextensions.k8s.io";

/// The strategy of `customresourcedefinitions`.
pub(crate) struct CustomResourceDefinitions;

impl Strategy for CustomResourceDefinitions {
    fn tracks_generation(&self) -> bool {
        true
    }

    fn prepare_for_create(&self, obj: &mut Value) {
        obj["status"] = json!({"conditions": [], "acceptedNames": {"plural": "", "kind": ""}, "storedVersions": []});
    }

    fn normalize(&self, _info: &ResourceInfo, obj: &mut Value) {
        default_crd_names(obj);
    }

    fn validate(&self, obj: &Value, old: Option<&Value>) -> Vec<Cause> {
        match old {
            Some(old) => crate::crd::validate_crd_update(obj, old),
            None => crate::crd::validate_crd(obj),
        }
    }

    fn finalizers_on_delete(&self, finalizers: &mut Vec<String>) {
        if !finalizers.iter().any(|f| f == CUSTOM_RESOURCE_FINALIZER) {
            finalizers.push(CUSTOM_RESOURCE_FINALIZER.to_string());
        }
    }
}

/// apiextensions' defaulting: `singular` is the lower-cased kind, `listKind` is `<Kind>List`.
fn default_crd_names(crd: &mut Value) {
    let Some(names) = crd.pointer_mut("/spec/names").and_then(Value::as_object_mut) else {
        return;
    };
    let kind = names
        .get("kind")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string();
    if kind.is_empty() {
        return;
    }
    if names.get("singular").and_then(Value::as_str).is_none_or(str::is_empty) {
        names.insert("singular".into(), json!(kind.to_lowercase()));
    }
    if names.get("listKind").and_then(Value::as_str).is_none_or(str::is_empty) {
        names.insert("listKind".into(), json!(format!("{kind}List")));
    }
}
