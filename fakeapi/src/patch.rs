//! JSON merge patch (RFC 7386), JSON patch (RFC 6902) and strategic merge patch.

use kbind_cluster::Error;
use serde_json::Value;

use crate::schema::Schema;

/// Applies a JSON merge patch.
pub fn merge_patch(target: &mut Value, patch: &Value) {
    json_patch::merge(target, patch);
}

/// Applies a JSON patch; a failed `test` or a bad path is a 422 / 400 as kube-apiserver answers.
pub fn json_patch(_target: &mut Value, _patch: &json_patch::Patch) -> Result<(), Error> {
    Err(Error::MethodNotAllowed {
        message: "json patch is not implemented yet".into(),
    })
}

/// Applies a strategic merge patch using the merge keys of `schema`.
pub fn strategic_merge_patch(_target: &mut Value, _patch: &Value, _schema: &Schema) -> Result<(), Error> {
    Err(Error::MethodNotAllowed {
        message: "strategic merge patch is not implemented yet".into(),
    })
}
