//! Server-side apply: per-manager field ownership in `metadata.managedFields` (fieldsV1),
//! list-map merge, removal of fields dropped from a re-apply, conflicts and force.

use kbind_cluster::Error;
use serde_json::Value;

use crate::schema::Schema;

/// What a write did, for the managedFields entry it records.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operation {
    /// A server-side apply.
    Apply,
    /// Any other write (create, update, patch).
    Update,
}

/// Applies `applied` (a partial object) as `manager` over `live` (`None`: the object is new).
/// Returns the merged object with `metadata.managedFields` updated; a field owned by another
/// manager with a different value is a 409 with one cause per field unless `force`.
/// `subresource` is `""` or `"status"`; `now` is the RFC 3339 time recorded in the entry.
pub fn apply(
    _live: Option<&Value>,
    _applied: &Value,
    _manager: &str,
    _force: bool,
    _schema: &Schema,
    _subresource: &str,
    _now: &str,
) -> Result<Value, Error> {
    Err(Error::MethodNotAllowed {
        message: "server-side apply is not implemented yet".into(),
    })
}

/// Records a non-apply write by `manager` in `new`'s managedFields: the fields that changed
/// from `old` become the manager's (operation Update) and leave every other manager.
pub fn record_update(
    _old: Option<&Value>,
    _new: &mut Value,
    _manager: &str,
    _schema: &Schema,
    _subresource: &str,
    _now: &str,
) {
}
