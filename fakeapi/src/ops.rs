//! The write operations of a fake cluster (create, update, patch, delete) and the generic write
//! pipeline kube-apiserver runs (preconditions, defaults, pruning, validation, generation,
//! managed fields, finalizers, no-op detection). What a kind adds to it lives in its
//! `strategy` module; admission is in `admission`, reads in `reads`.

use std::sync::Arc;

use kbind_cluster::error::Cause;
use kbind_cluster::{ApiResource, DeleteParams, Error, Patch, PatchParams, PostParams, PropagationPolicy, Result};
use serde_json::{Value, json};

use crate::admission::{forbidden, rbac_snapshot};
use crate::cluster::{FakeCluster, Inner};
use crate::rbac::{self, Attributes, UserInfo};
use crate::registry::{GroupResource, ResourceInfo};
use crate::store::{EventType, ObjectKey, State, WriteRecord};
use crate::strategy::{self, Strategy};
use crate::{meta, patch, ssa};

/// Which part of an object a write addresses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subresource {
    /// The object itself.
    Main,
    /// The `/status` subresource.
    Status,
}

impl Subresource {
    fn name(self) -> &'static str {
        match self {
            Subresource::Main => "",
            Subresource::Status => "status",
        }
    }
}

/// Who asks, and how they name themselves as a field manager by default.
#[derive(Debug, Clone)]
pub struct Caller {
    /// The authenticated user.
    pub user: UserInfo,
    /// The default field manager (kube-apiserver derives it from the User-Agent).
    pub default_manager: String,
}

impl Caller {
    /// A caller with the default manager derived from a user agent like `kubectl/v1.35`.
    pub fn new(user: UserInfo, user_agent: &str) -> Self {
        let default_manager = user_agent.split('/').next().unwrap_or(user_agent).to_string();
        Self { user, default_manager }
    }
}

impl FakeCluster {
    /// Creates an object.
    pub async fn create(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        mut obj: Value,
        params: &PostParams,
    ) -> Result<Value> {
        let name_hint = meta::name(&obj).map(str::to_string);
        let info = self
            .admit(caller, "create", res, namespace, name_hint.as_deref(), "")
            .await?;
        if let Some(obj_ns) = meta::namespace(&obj)
            && Some(obj_ns) != namespace
        {
            return Err(Error::BadRequest {
                message: "the namespace of the provided object does not match the namespace sent on the request".into(),
            });
        }
        if meta::resource_version(&obj).is_some() {
            return Err(Error::BadRequest {
                message: "resourceVersion should not be set on objects to be created".into(),
            });
        }
        let manager = params
            .field_manager
            .clone()
            .unwrap_or_else(|| caller.default_manager.clone());
        let mut state = self.inner.lock();
        if meta::name(&obj).is_none()
            && let Some(prefix) = meta::get_str(&obj, "generateName").map(str::to_string)
        {
            let suffix = state.name_suffix();
            meta::set(&mut obj, "name", Some(json!(format!("{prefix}{suffix}"))));
        }
        if let Some(ns) = namespace {
            meta::set(&mut obj, "namespace", Some(json!(ns)));
        }
        let created =
            self.inner
                .create_locked(&mut state, &caller.user, &info, obj, &manager, params.dry_run, false)?;
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
        Ok(present(&created, &info))
    }

    /// Replaces an object or its status.
    #[allow(clippy::too_many_arguments)] // a request's coordinates, body, options and subresource
    pub async fn update(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: Value,
        params: &PostParams,
        sub: Subresource,
    ) -> Result<Value> {
        let info = self
            .admit(caller, "update", res, namespace, Some(name), sub.name())
            .await?;
        if let Some(body_name) = meta::name(&obj)
            && body_name != name
        {
            return Err(Error::BadRequest {
                message: format!("the name of the object ({body_name}) does not match the name on the URL ({name})"),
            });
        }
        let manager = params
            .field_manager
            .clone()
            .unwrap_or_else(|| caller.default_manager.clone());
        let mut state = self.inner.lock();
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        let gr = info.group_resource();
        let old = state
            .get(&gr, &key)
            .cloned()
            .ok_or_else(|| Error::not_found(&gr.qualified(), name))?;
        if meta::resource_version(&obj).is_none() && !strategy::for_resource(&info).allows_unconditional_update() {
            return Err(Error::invalid(
                &info.resource.kind,
                name,
                vec![Cause {
                    reason: "FieldValueInvalid".into(),
                    message: "Invalid value: 0x0: must be specified for an update".into(),
                    field: "metadata.resourceVersion".into(),
                }],
            ));
        }
        let updated = self.inner.update_locked(
            &mut state,
            &caller.user,
            &info,
            &old,
            obj,
            UpdateKind::Write { manager: &manager },
            sub,
            params.dry_run,
        )?;
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
        Ok(present(&updated, &info))
    }

    /// Patches an object or its status (merge, JSON, strategic or apply).
    #[allow(clippy::too_many_arguments)] // a request's coordinates, body, options and subresource
    pub async fn patch(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<Value>,
        params: &PatchParams,
        sub: Subresource,
    ) -> Result<Value> {
        let info = self
            .admit(caller, "patch", res, namespace, Some(name), sub.name())
            .await?;
        let mut state = self.inner.lock();
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        let gr = info.group_resource();
        let old = state.get(&gr, &key).cloned();
        let now = self.inner.now();
        let result = match patch {
            Patch::Apply(body) => {
                let manager = params
                    .field_manager
                    .clone()
                    .ok_or_else(|| Error::BadRequest { message: "PatchOptions.meta.k8s.io \"\" is invalid: fieldManager: Required value: is required for apply patch".into() })?;
                let mut body = body.clone();
                if sub == Subresource::Main
                    && info.has_status()
                    && let Some(map) = body.as_object_mut()
                {
                    map.remove("status");
                }
                match old.as_deref() {
                    Some(live) => {
                        ssa::precondition(live, &body, &gr.qualified())?;
                        ssa::uid_unchanged(live, &body, &info.resource.kind)?;
                    }
                    None => {
                        if sub == Subresource::Main
                            && let Some(gone) = ssa::uid_of_a_missing_object(&body, &gr.resource, name)
                        {
                            return Err(gone);
                        }
                        // An apply that creates is a create too: kube-apiserver asks RBAC for
                        // `create` as well as the `patch` admitted above (403 naming `create`).
                        if sub == Subresource::Main && !caller.user.is_privileged() {
                            let attrs = Attributes {
                                verb: "create".into(),
                                api_group: res.group.clone(),
                                resource: res.plural.clone(),
                                subresource: String::new(),
                                namespace: namespace.map(str::to_string),
                                name: Some(name.to_string()),
                                path: None,
                            };
                            if !rbac::authorize(&caller.user, &attrs, &rbac_snapshot(&state)) {
                                return Err(forbidden(&caller.user, &attrs));
                            }
                        }
                    }
                }
                let merged = ssa::apply(
                    old.as_deref(),
                    &body,
                    &manager,
                    params.force,
                    &info.schema,
                    sub.name(),
                    &now,
                )?;
                match old {
                    None if sub == Subresource::Main => {
                        let mut merged = merged;
                        meta::set(&mut merged, "name", Some(json!(name)));
                        if let Some(ns) = namespace {
                            meta::set(&mut merged, "namespace", Some(json!(ns)));
                        }
                        self.inner.create_locked(
                            &mut state,
                            &caller.user,
                            &info,
                            merged,
                            &manager,
                            params.dry_run,
                            true,
                        )
                    }
                    None => Err(Error::not_found(&gr.qualified(), name)),
                    Some(old) => self.inner.update_locked(
                        &mut state,
                        &caller.user,
                        &info,
                        &old,
                        merged,
                        UpdateKind::Applied,
                        sub,
                        params.dry_run,
                    ),
                }
            }
            other => {
                let old = old.ok_or_else(|| Error::not_found(&gr.qualified(), name))?;
                let mut target = (*old).clone();
                match other {
                    Patch::Merge(p) => patch::merge_patch(&mut target, p),
                    Patch::Json(p) => patch::json_patch(&mut target, p)?,
                    Patch::Strategic(p) => {
                        if !strategy::for_resource(&info).supports_strategic_merge_patch() {
                            return Err(Error::Server {
                                code: 415,
                                reason: "UnsupportedMediaType".into(),
                                message: "the body of the request was in an unknown format - accepted media types include: application/json-patch+json, application/merge-patch+json, application/apply-patch+yaml".into(),
                            });
                        }
                        patch::strategic_merge_patch(&mut target, p, &info.schema)?
                    }
                    _ => {
                        return Err(Error::BadRequest {
                            message: "unsupported patch type".into(),
                        });
                    }
                }
                let manager = params
                    .field_manager
                    .clone()
                    .unwrap_or_else(|| caller.default_manager.clone());
                self.inner.update_locked(
                    &mut state,
                    &caller.user,
                    &info,
                    &old,
                    target,
                    UpdateKind::Write { manager: &manager },
                    sub,
                    params.dry_run,
                )
            }
        }?;
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
        Ok(present(&result, &info))
    }

    /// Deletes an object: `Some` while finalizers hold it, `None` once it is gone.
    pub async fn delete(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<Value>> {
        let info = self.admit(caller, "delete", res, namespace, Some(name), "").await?;
        let mut state = self.inner.lock();
        let key = (namespace.unwrap_or("").to_string(), name.to_string());
        let gr = info.group_resource();
        let old = state
            .get(&gr, &key)
            .cloned()
            .ok_or_else(|| Error::not_found(&gr.qualified(), name))?;
        if let Some(pre) = &params.preconditions {
            if let Some(uid) = pre.uid.as_deref()
                && Some(uid) != meta::uid(&old)
            {
                return Err(precondition_failed("UID", uid, meta::uid(&old).unwrap_or("")));
            }
            if let Some(rv) = pre.resource_version.as_deref()
                && Some(rv) != meta::resource_version(&old)
            {
                return Err(precondition_failed(
                    "ResourceVersion",
                    rv,
                    meta::resource_version(&old).unwrap_or(""),
                ));
            }
        }
        let out = self.inner.delete_locked(
            &mut state,
            &caller.user,
            &info,
            &old,
            params.propagation_policy.as_ref(),
            params.dry_run,
        )?;
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
        Ok(out.map(|o| present(&o, &info)))
    }

    /// Creates on a subresource, as the resource's strategy serves it (TokenRequest).
    pub async fn create_subresource(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value> {
        let info = self
            .admit(caller, "create", res, namespace, Some(name), subresource)
            .await?;
        strategy::for_resource(&info).create_subresource(
            &self.inner,
            &info,
            namespace.unwrap_or(""),
            name,
            subresource,
            body,
        )
    }
}

/// How an update came about (what managedFields must record).
pub(crate) enum UpdateKind<'a> {
    /// A non-apply write by this manager.
    Write { manager: &'a str },
    /// A server-side apply whose result already carries its managedFields.
    Applied,
    /// A system controller's write (finalizers, namespace and GC): no field manager.
    System,
}

impl Inner {
    /// The create pipeline, under the lock. `applied`: managedFields were set by apply already.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn create_locked(
        &self,
        state: &mut State,
        user: &UserInfo,
        info: &ResourceInfo,
        mut obj: Value,
        manager: &str,
        dry_run: bool,
        applied: bool,
    ) -> Result<Arc<Value>> {
        let gr = info.group_resource();
        let strategy = strategy::for_resource(info);
        let name = meta::name(&obj).map(str::to_string).ok_or_else(|| {
            Error::invalid(
                &info.resource.kind,
                "",
                vec![Cause {
                    reason: "FieldValueRequired".into(),
                    message: "Required value: name or generateName is required".into(),
                    field: "metadata.name".into(),
                }],
            )
        })?;
        validate_name(info, strategy, &name)?;
        let ns = meta::namespace(&obj).unwrap_or("").to_string();
        if info.resource.namespaced {
            check_namespace_open(state, &ns, &gr, &name)?;
        }
        if state.get(&gr, &(ns.clone(), name.clone())).is_some() {
            return Err(Error::already_exists(&gr.qualified(), &name));
        }
        if let Some(map) = obj.as_object_mut() {
            map.insert("apiVersion".into(), json!(info.api_version()));
            map.insert("kind".into(), json!(info.resource.kind));
            if info.has_status() && !applied {
                map.remove("status");
            }
        }
        for field in [
            "uid",
            "deletionTimestamp",
            "deletionGracePeriodSeconds",
            "generation",
            "selfLink",
        ] {
            meta::set(&mut obj, field, None);
        }
        if !applied {
            meta::set(&mut obj, "managedFields", None);
        }
        let now = self.now();
        strategy.prepare_for_create(&mut obj);
        admit_schema(info, strategy, &mut obj, None)?;
        meta::omit_empty(&mut obj);
        strategy.authorize_write(state, user, &obj, None)?;
        let uid = state.new_uid();
        meta::set(&mut obj, "uid", Some(json!(uid)));
        meta::set(&mut obj, "creationTimestamp", Some(json!(now)));
        if strategy.tracks_generation() {
            meta::set(&mut obj, "generation", Some(json!(1)));
        }
        if !applied {
            ssa::record_update(None, &mut obj, manager, &info.schema, "", &now);
        }
        if dry_run {
            return Ok(Arc::new(obj));
        }
        let rv = state.next_rv();
        meta::set(&mut obj, "resourceVersion", Some(json!(rv.to_string())));
        log_write(state, user, "create", &gr, "", &obj);
        Ok(state.put(&gr, obj, EventType::Added))
    }

    /// The update pipeline, under the lock.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn update_locked(
        &self,
        state: &mut State,
        user: &UserInfo,
        info: &ResourceInfo,
        old: &Arc<Value>,
        body: Value,
        kind: UpdateKind<'_>,
        sub: Subresource,
        dry_run: bool,
    ) -> Result<Arc<Value>> {
        let gr = info.group_resource();
        let strategy = strategy::for_resource(info);
        let name = meta::name(old).unwrap_or("").to_string();
        if let Some(rv) = meta::resource_version(&body)
            && Some(rv) != meta::resource_version(old)
        {
            return Err(Error::stale(&gr.qualified(), &name));
        }
        if let Some(uid) = meta::uid(&body)
            && Some(uid) != meta::uid(old)
        {
            return Err(precondition_failed("UID", uid, meta::uid(old).unwrap_or("")));
        }
        let mut new = match sub {
            Subresource::Status => {
                let mut new = (**old).clone();
                match body.get("status") {
                    Some(status) => new["status"] = status.clone(),
                    None => {
                        if let Some(map) = new.as_object_mut() {
                            map.remove("status");
                        }
                    }
                }
                if let UpdateKind::Applied = kind {
                    meta::set(
                        &mut new,
                        "managedFields",
                        body.pointer("/metadata/managedFields").cloned(),
                    );
                }
                new
            }
            Subresource::Main => {
                let mut new = body;
                if let Some(map) = new.as_object_mut() {
                    map.insert("apiVersion".into(), json!(info.api_version()));
                    map.insert("kind".into(), json!(info.resource.kind));
                    if info.has_status() {
                        match old.get("status") {
                            Some(s) => {
                                map.insert("status".into(), s.clone());
                            }
                            None => {
                                map.remove("status");
                            }
                        }
                    }
                }
                for field in [
                    "name",
                    "namespace",
                    "uid",
                    "creationTimestamp",
                    "deletionTimestamp",
                    "deletionGracePeriodSeconds",
                    "generation",
                ] {
                    meta::set(&mut new, field, old.pointer(&format!("/metadata/{field}")).cloned());
                }
                if !matches!(kind, UpdateKind::Applied)
                    && new.pointer("/metadata/managedFields").is_none_or(Value::is_null)
                {
                    meta::set(
                        &mut new,
                        "managedFields",
                        old.pointer("/metadata/managedFields").cloned(),
                    );
                }
                strategy.prepare_for_update(&mut new, old);
                new
            }
        };
        if meta::is_terminating(old) {
            let before = meta::finalizers(old);
            if let Some(added) = meta::finalizers(&new).iter().find(|f| !before.contains(f)) {
                return Err(Error::invalid(
                    &info.resource.kind,
                    &name,
                    vec![Cause {
                        reason: "FieldValueForbidden".into(),
                        message: format!(
                            "Forbidden: no new finalizers can be added if the object is being deleted, found new finalizers []string{{\"{added}\"}}"
                        ),
                        field: "metadata.finalizers".into(),
                    }],
                ));
            }
        }
        admit_schema(info, strategy, &mut new, Some(old))?;
        meta::omit_empty(&mut new);
        strategy.authorize_write(state, user, &new, Some(old))?;
        let now = self.now();
        if strategy.tracks_generation() && spec_changed(info, old, &new) {
            let generation = old.pointer("/metadata/generation").and_then(Value::as_i64).unwrap_or(0);
            meta::set(&mut new, "generation", Some(json!(generation + 1)));
        }
        meta::set(
            &mut new,
            "resourceVersion",
            old.pointer("/metadata/resourceVersion").cloned(),
        );
        if let UpdateKind::Write { manager } = kind {
            ssa::record_update(Some(old), &mut new, manager, &info.schema, sub.name(), &now);
        }
        if meta::comparable(&new) == meta::comparable(old) {
            return Ok(old.clone());
        }
        if dry_run {
            return Ok(Arc::new(new));
        }
        let rv = state.next_rv();
        meta::set(&mut new, "resourceVersion", Some(json!(rv.to_string())));
        log_write(state, user, "update", &gr, sub.name(), &new);
        if meta::is_terminating(&new) && meta::finalizers(&new).is_empty() && !strategy.holds_deletion(&new) {
            return Ok(state.put(&gr, new, EventType::Deleted));
        }
        Ok(state.put(&gr, new, EventType::Modified))
    }

    /// The delete pipeline, under the lock.
    pub(crate) fn delete_locked(
        &self,
        state: &mut State,
        user: &UserInfo,
        info: &ResourceInfo,
        old: &Arc<Value>,
        propagation: Option<&PropagationPolicy>,
        dry_run: bool,
    ) -> Result<Option<Arc<Value>>> {
        let gr = info.group_resource();
        let strategy = strategy::for_resource(info);
        let mut finalizers = meta::finalizers(old);
        match propagation {
            Some(PropagationPolicy::Orphan) => push_unique(&mut finalizers, "orphan"),
            Some(PropagationPolicy::Foreground) => push_unique(&mut finalizers, "foregroundDeletion"),
            _ => {}
        }
        strategy.finalizers_on_delete(&mut finalizers);
        let mut new = (**old).clone();
        if finalizers.is_empty() && !strategy.holds_deletion(old) {
            if dry_run {
                return Ok(None);
            }
            let rv = state.next_rv();
            meta::set(&mut new, "resourceVersion", Some(json!(rv.to_string())));
            log_write(state, user, "delete", &gr, "", &new);
            state.put(&gr, new, EventType::Deleted);
            return Ok(None);
        }
        meta::set_finalizers(&mut new, &finalizers);
        if !meta::is_terminating(old) {
            meta::set(&mut new, "deletionTimestamp", Some(json!(self.now())));
            meta::set(&mut new, "deletionGracePeriodSeconds", Some(json!(0)));
            if let Some(generation) = old.pointer("/metadata/generation").and_then(Value::as_i64) {
                meta::set(&mut new, "generation", Some(json!(generation + 1)));
            }
            strategy.begin_termination(&mut new);
        }
        if meta::comparable(&new) == meta::comparable(old) || dry_run {
            return Ok(Some(Arc::new(new)));
        }
        let rv = state.next_rv();
        meta::set(&mut new, "resourceVersion", Some(json!(rv.to_string())));
        log_write(state, user, "delete", &gr, "", &new);
        Ok(Some(state.put(&gr, new, EventType::Modified)))
    }
}

/// The object as a client sees it in `info`'s version.
pub(crate) fn present(obj: &Value, info: &ResourceInfo) -> Value {
    let mut out = obj.clone();
    if let Some(map) = out.as_object_mut() {
        map.insert("apiVersion".into(), json!(info.api_version()));
    }
    out
}

fn push_unique(list: &mut Vec<String>, item: &str) {
    if !list.iter().any(|f| f == item) {
        list.push(item.to_string());
    }
}

/// Whether a write changed what `generation` counts: everything but metadata, and status when
/// the status subresource is separate.
fn spec_changed(info: &ResourceInfo, old: &Value, new: &Value) -> bool {
    let strip = |v: &Value| {
        let mut v = v.clone();
        if let Some(map) = v.as_object_mut() {
            map.remove("metadata");
            if info.has_status() {
                map.remove("status");
            }
        }
        v
    };
    strip(old) != strip(new)
}

/// Normalization, then metadata, schema and kind validation, reported in one 422.
fn admit_schema(info: &ResourceInfo, strategy: &dyn Strategy, obj: &mut Value, old: Option<&Arc<Value>>) -> Result<()> {
    let name = meta::name(obj).unwrap_or("").to_string();
    strategy.normalize(info, obj);
    let old = old.map(|o| o.as_ref());
    // kube-apiserver checks object metadata before the schema, in the same 422.
    let mut causes = crate::labels::validate(obj);
    causes.extend(crate::schema::validate(obj, old, &info.schema));
    causes.extend(strategy.validate(obj, old));
    if causes.is_empty() {
        Ok(())
    } else {
        Err(Error::invalid(&info.resource.kind, &name, causes))
    }
}

/// Names must be what the resource's strategy accepts (DNS-1123 subdomains but for RBAC).
fn validate_name(info: &ResourceInfo, strategy: &dyn Strategy, name: &str) -> Result<()> {
    let ok = strategy.valid_name(name);
    if ok {
        return Ok(());
    }
    Err(Error::invalid(
        &info.resource.kind,
        name,
        vec![Cause {
            reason: "FieldValueInvalid".into(),
            message: format!(
                "Invalid value: \"{name}\": a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or '.', and must start and end with an alphanumeric character"
            ),
            field: "metadata.name".into(),
        }],
    ))
}

fn check_namespace_open(state: &State, ns: &str, gr: &GroupResource, name: &str) -> Result<()> {
    let key: ObjectKey = (String::new(), ns.to_string());
    match state.get(&GroupResource::new("", "namespaces"), &key) {
        None => Err(Error::not_found("namespaces", ns)),
        Some(n) if meta::is_terminating(n) => Err(Error::Forbidden {
            verb: "create".into(),
            resource: gr.qualified(),
            message: format!(
                "{} \"{name}\" is forbidden: unable to create new content in namespace {ns} because it is being terminated",
                gr.qualified()
            ),
        }),
        Some(_) => Ok(()),
    }
}

fn log_write(state: &mut State, user: &UserInfo, verb: &str, gr: &GroupResource, sub: &str, obj: &Value) {
    let record = WriteRecord {
        rv: state.rv,
        user: user.name.clone(),
        verb: verb.to_string(),
        resource: gr.qualified(),
        subresource: sub.to_string(),
        namespace: meta::namespace(obj).unwrap_or("").to_string(),
        name: meta::name(obj).unwrap_or("").to_string(),
    };
    state.write_log.push(record);
}

fn precondition_failed(what: &str, wanted: &str, actual: &str) -> Error {
    Error::Conflict {
        message: format!("Precondition failed: {what} in precondition: {wanted}, {what} in object meta: {actual}"),
        causes: vec![],
    }
}
