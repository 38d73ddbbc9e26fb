//! Namespaces: the `kubernetes` spec finalizer and the phase are the server's, the name label is
//! set on create, and deletion goes through the Terminating phase until spec finalizers clear.

use serde_json::{Value, json};

use super::Strategy;
use crate::meta;

/// The strategy of `namespaces`.
pub(crate) struct Namespaces;

impl Strategy for Namespaces {
    fn prepare_for_create(&self, obj: &mut Value) {
        obj["spec"] = json!({"finalizers": ["kubernetes"]});
        obj["status"] = json!({"phase": "Active"});
        let name = meta::name(obj).unwrap_or("").to_string();
        let labels = meta::metadata_mut(obj).entry("labels").or_insert_with(|| json!({}));
        labels["kubernetes.io/metadata.name"] = json!(name);
    }

    fn prepare_for_update(&self, new: &mut Value, old: &Value) {
        // spec.finalizers change only through /finalize (the namespace controller).
        new["spec"] = old.get("spec").cloned().unwrap_or_else(|| json!({}));
        new["status"] = old.get("status").cloned().unwrap_or_else(|| json!({}));
    }

    fn begin_termination(&self, obj: &mut Value) {
        obj["status"] = json!({"phase": "Terminating"});
    }

    fn holds_deletion(&self, obj: &Value) -> bool {
        obj.pointer("/spec/finalizers")
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    }
}
