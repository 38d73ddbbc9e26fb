//! Query parameters of resource requests, decoded into kube's typed request options.

use kbind_cluster::{DeleteParams, Error, ListParams, PatchParams, PostParams, Result, WatchParams};
use kube::core::params::{ValidationDirective, VersionMatch};

/// What a Table answer carries in each row's `object`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum IncludeObject {
    /// No object.
    None,
    /// The object's metadata as a `PartialObjectMetadata` (the default).
    #[default]
    Metadata,
    /// The whole object.
    Object,
}

/// The query parameters kube-apiserver understands on resource requests.
#[derive(Debug, Clone, Default)]
pub(crate) struct Query {
    /// `watch=true`/`watch=1`.
    pub watch: bool,
    pub label_selector: Option<String>,
    pub field_selector: Option<String>,
    pub limit: Option<u32>,
    pub continue_token: Option<String>,
    pub resource_version: Option<String>,
    pub resource_version_match: Option<VersionMatch>,
    pub timeout_seconds: Option<u32>,
    pub allow_watch_bookmarks: bool,
    pub send_initial_events: bool,
    /// `dryRun=All`.
    pub dry_run: bool,
    pub field_manager: Option<String>,
    pub force: bool,
    pub field_validation: Option<ValidationDirective>,
    /// `propagationPolicy` (delete).
    pub propagation_policy: Option<String>,
    /// `gracePeriodSeconds` (delete).
    pub grace_period_seconds: Option<u32>,
    pub include_object: IncludeObject,
}

impl Query {
    /// Decodes a raw query string; malformed values are a 400, unknown keys are ignored as
    /// kube-apiserver ignores them.
    pub(crate) fn parse(raw: Option<&str>) -> Result<Self> {
        let mut q = Query::default();
        for (key, value) in form_urlencoded::parse(raw.unwrap_or("").as_bytes()) {
            let value = value.into_owned();
            match key.as_ref() {
                "watch" => q.watch = flag(&key, &value)?,
                "labelSelector" => q.label_selector = Some(value).filter(|v| !v.is_empty()),
                "fieldSelector" => q.field_selector = Some(value).filter(|v| !v.is_empty()),
                "limit" => q.limit = Some(number(&key, &value)?),
                "continue" => q.continue_token = Some(value).filter(|v| !v.is_empty()),
                "resourceVersion" => q.resource_version = Some(value).filter(|v| !v.is_empty()),
                "resourceVersionMatch" => q.resource_version_match = version_match(&value)?,
                "timeoutSeconds" => q.timeout_seconds = Some(number(&key, &value)?),
                "allowWatchBookmarks" => q.allow_watch_bookmarks = flag(&key, &value)?,
                "sendInitialEvents" => q.send_initial_events = flag(&key, &value)?,
                "dryRun" => q.dry_run = dry_run(&value)?,
                "fieldManager" => q.field_manager = Some(value).filter(|v| !v.is_empty()),
                "force" => q.force = flag(&key, &value)?,
                "fieldValidation" => q.field_validation = field_validation(&value)?,
                "propagationPolicy" => q.propagation_policy = Some(value).filter(|v| !v.is_empty()),
                "gracePeriodSeconds" => q.grace_period_seconds = Some(number(&key, &value)?),
                "includeObject" => q.include_object = include_object(&value)?,
                _ => {}
            }
        }
        Ok(q)
    }

    /// The options of a list.
    pub(crate) fn list_params(&self) -> ListParams {
        ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: self.limit,
            continue_token: self.continue_token.clone(),
            version_match: self.resource_version_match.clone(),
            resource_version: self.resource_version.clone(),
            ..ListParams::default()
        }
    }

    /// kube-apiserver's rule for a watch's WatchList options (ValidateListOptions): sendInitialEvents
    /// needs resourceVersionMatch=NotOlderThan, and resourceVersionMatch needs sendInitialEvents.
    pub(crate) fn check_watch_list(&self) -> Result<()> {
        let forbidden = |field: &str, message: &str| Error::Invalid {
            message: format!("ListOptions.meta.k8s.io \"\" is invalid: {field}: Forbidden: {message}"),
            causes: vec![kbind_cluster::error::Cause {
                reason: "FieldValueForbidden".into(),
                message: format!("Forbidden: {message}"),
                field: field.into(),
            }],
        };
        match (self.send_initial_events, &self.resource_version_match) {
            (true, Some(VersionMatch::NotOlderThan)) | (false, None) => Ok(()),
            (true, _) => Err(forbidden(
                "resourceVersionMatch",
                "sendInitialEvents requires setting resourceVersionMatch to NotOlderThan",
            )),
            (false, Some(_)) => Err(forbidden(
                "resourceVersionMatch",
                "resourceVersionMatch is forbidden for watch unless sendInitialEvents is provided",
            )),
        }
    }

    /// The options of a watch (its resourceVersion travels separately).
    pub(crate) fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: self.timeout_seconds,
            bookmarks: self.allow_watch_bookmarks,
            send_initial_events: self.send_initial_events,
        }
    }

    /// The options of a create or update.
    pub(crate) fn post_params(&self) -> PostParams {
        PostParams {
            dry_run: self.dry_run,
            field_manager: self.field_manager.clone(),
        }
    }

    /// The options of a patch.
    pub(crate) fn patch_params(&self) -> PatchParams {
        PatchParams {
            dry_run: self.dry_run,
            force: self.force,
            field_manager: self.field_manager.clone(),
            field_validation: self.field_validation.clone(),
        }
    }

    /// Delete options from the query alone (a DeleteOptions body overrides them).
    pub(crate) fn delete_params(&self) -> Result<DeleteParams> {
        Ok(DeleteParams {
            dry_run: self.dry_run,
            grace_period_seconds: self.grace_period_seconds,
            propagation_policy: self.propagation_policy.as_deref().map(propagation).transpose()?,
            preconditions: None,
        })
    }
}

/// A `PropagationPolicy` by its wire name.
pub(crate) fn propagation(name: &str) -> Result<kbind_cluster::PropagationPolicy> {
    use kbind_cluster::PropagationPolicy as P;
    match name {
        "Orphan" => Ok(P::Orphan),
        "Background" => Ok(P::Background),
        "Foreground" => Ok(P::Foreground),
        other => Err(Error::BadRequest {
            message: format!(
                "propagationPolicy: Unsupported value: \"{other}\": supported values: \"Foreground\", \"Background\", \"Orphan\""
            ),
        }),
    }
}

fn flag(key: &str, value: &str) -> Result<bool> {
    match value {
        "true" | "1" | "True" | "TRUE" | "t" | "T" | "" => Ok(true),
        "false" | "0" | "False" | "FALSE" | "f" | "F" => Ok(false),
        _ => Err(bad(key, value)),
    }
}

fn number(key: &str, value: &str) -> Result<u32> {
    value.parse().map_err(|_| bad(key, value))
}

fn version_match(value: &str) -> Result<Option<VersionMatch>> {
    match value {
        "" => Ok(None),
        "NotOlderThan" => Ok(Some(VersionMatch::NotOlderThan)),
        "Exact" => Ok(Some(VersionMatch::Exact)),
        other => Err(bad("resourceVersionMatch", other)),
    }
}

fn dry_run(value: &str) -> Result<bool> {
    match value {
        "All" => Ok(true),
        "" => Ok(false),
        other => Err(Error::BadRequest {
            message: format!("dryRun: Unsupported value: \"{other}\": supported values: \"All\""),
        }),
    }
}

fn field_validation(value: &str) -> Result<Option<ValidationDirective>> {
    match value {
        "" => Ok(None),
        "Ignore" => Ok(Some(ValidationDirective::Ignore)),
        "Warn" => Ok(Some(ValidationDirective::Warn)),
        "Strict" => Ok(Some(ValidationDirective::Strict)),
        other => Err(Error::BadRequest {
            message: format!(
                "fieldValidation: Unsupported value: \"{other}\": supported values: \"Ignore\", \"Warn\", \"Strict\""
            ),
        }),
    }
}

fn include_object(value: &str) -> Result<IncludeObject> {
    match value {
        "None" => Ok(IncludeObject::None),
        "" | "Metadata" => Ok(IncludeObject::Metadata),
        "Object" => Ok(IncludeObject::Object),
        other => Err(bad("includeObject", other)),
    }
}

fn bad(key: &str, value: &str) -> Error {
    Error::BadRequest {
        message: format!("invalid value {value:?} for query parameter {key}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn watch_query_as_kube_sends_it_decodes() {
        let q = Query::parse(Some(
            "watch=true&timeoutSeconds=290&labelSelector=app%3Dx&allowWatchBookmarks=true&resourceVersion=12",
        ))
        .unwrap();
        assert!(q.watch);
        let w = q.watch_params();
        assert_eq!(w.timeout, Some(290));
        assert_eq!(w.label_selector.as_deref(), Some("app=x"));
        assert!(w.bookmarks);
        assert_eq!(q.resource_version.as_deref(), Some("12"));
    }

    #[test]
    fn write_options_decode() {
        let q = Query::parse(Some(
            "dryRun=All&fieldManager=kubectl&force=true&fieldValidation=Strict",
        ))
        .unwrap();
        let p = q.patch_params();
        assert!(p.dry_run && p.force);
        assert_eq!(p.field_manager.as_deref(), Some("kubectl"));
        assert!(matches!(p.field_validation, Some(ValidationDirective::Strict)));
        let d = Query::parse(Some("propagationPolicy=Foreground"))
            .unwrap()
            .delete_params()
            .unwrap();
        assert_eq!(d.propagation_policy, Some(kbind_cluster::PropagationPolicy::Foreground));
    }

    #[test]
    fn malformed_values_are_bad_requests() {
        for raw in ["limit=ten", "dryRun=Some", "watch=maybe", "propagationPolicy=Never"] {
            let err = Query::parse(Some(raw)).and_then(|q| q.delete_params().map(|_| q));
            assert_eq!(err.map(|_| ()).unwrap_err().code(), 400, "{raw}");
        }
    }
}
