//! One finalizer in a list others share: whether an object carries it, the list with it added
//! or removed (every other entry kept, in order), and the merge patch that writes that list only
//! over the resourceVersion it was computed from, so a concurrent change to the list is a 409
//! and a retry, never a lost finalizer.

use kube::api::ObjectMeta;
use serde_json::{Value, json};

/// Whether `meta` lists `finalizer`.
pub(crate) fn has(meta: &ObjectMeta, finalizer: &str) -> bool {
    meta.finalizers.iter().flatten().any(|f| f == finalizer)
}

/// `meta`'s finalizers with `finalizer` added last (the same list when it is there already).
pub(crate) fn with(meta: &ObjectMeta, finalizer: &str) -> Vec<String> {
    let mut list = meta.finalizers.clone().unwrap_or_default();
    if !has(meta, finalizer) {
        list.push(finalizer.to_string());
    }
    list
}

/// `meta`'s finalizers without `finalizer`.
pub(crate) fn without(meta: &ObjectMeta, finalizer: &str) -> Vec<String> {
    meta.finalizers
        .iter()
        .flatten()
        .filter(|f| f.as_str() != finalizer)
        .cloned()
        .collect()
}

/// A merge patch that sets `list` as the finalizers of the object `meta` describes, refused
/// with a Conflict unless the object is still at `meta`'s resourceVersion. Callers add what goes
/// with the finalizer to its `metadata` (the syncer's Connection label).
pub(crate) fn guarded_patch(meta: &ObjectMeta, list: Vec<String>) -> Value {
    json!({"metadata": {"finalizers": list, "resourceVersion": meta.resource_version}})
}

#[cfg(test)]
mod tests {
    use super::*;

    const OURS: &str = "core.kbind.io/syncer";

    fn meta(finalizers: Option<&[&str]>) -> ObjectMeta {
        ObjectMeta {
            finalizers: finalizers.map(|f| f.iter().map(|s| s.to_string()).collect()),
            resource_version: Some("7".into()),
            ..ObjectMeta::default()
        }
    }

    #[test]
    fn adding_keeps_every_other_finalizer_and_never_lists_ours_twice() {
        assert_eq!(with(&meta(None), OURS), [OURS]);
        assert_eq!(with(&meta(Some(&["other"])), OURS), ["other", OURS]);
        assert_eq!(with(&meta(Some(&[OURS, "other"])), OURS), [OURS, "other"]);
        assert!(has(&meta(Some(&["other", OURS])), OURS));
        assert!(!has(&meta(None), OURS));
    }

    #[test]
    fn removing_takes_only_ours() {
        assert_eq!(without(&meta(Some(&["a", OURS, "b"])), OURS), ["a", "b"]);
        assert!(without(&meta(None), OURS).is_empty());
    }

    #[test]
    fn the_patch_is_guarded_by_the_version_the_list_came_from() {
        let m = meta(Some(&["a"]));
        assert_eq!(
            guarded_patch(&m, with(&m, OURS)),
            json!({"metadata": {"finalizers": ["a", OURS], "resourceVersion": "7"}})
        );
    }
}
