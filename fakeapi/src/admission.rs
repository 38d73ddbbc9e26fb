//! Admission in front of every request: faults (black hole, latency, partition, injected
//! errors), RBAC, routing to a served resource, the request log, and interlopers.

use std::sync::Arc;

use kbind_cluster::{ApiResource, Error, Result};
use serde_json::{Value, json};

use crate::cluster::{FakeCluster, Inner};
use crate::meta;
use crate::ops::Caller;
use crate::rbac::{self, Attributes, RbacSnapshot, UserInfo};
use crate::registry::{GroupResource, ResourceInfo};
use crate::store::{EventType, State};

impl FakeCluster {
    /// Faults, RBAC and routing for one request (recorded in the request log); the resource's
    /// served info on success.
    pub(crate) async fn admit(
        &self,
        caller: &Caller,
        verb: &str,
        res: &ApiResource,
        namespace: Option<&str>,
        name: Option<&str>,
        subresource: &str,
    ) -> Result<ResourceInfo> {
        let answer = self
            .admit_unrecorded(caller, verb, res, namespace, name, subresource)
            .await;
        let resource = if res.group.is_empty() {
            format!("{}.", res.plural)
        } else {
            format!("{}.{}", res.plural, res.group)
        };
        self.inner
            .record_request(caller, verb, resource, namespace, name, answer.as_ref().err());
        answer
    }

    async fn admit_unrecorded(
        &self,
        caller: &Caller,
        verb: &str,
        res: &ApiResource,
        namespace: Option<&str>,
        name: Option<&str>,
        subresource: &str,
    ) -> Result<ResourceInfo> {
        self.inner.fault_gate(verb, &res.plural).await?;
        let state = self.inner.lock();
        let attrs = Attributes {
            verb: verb.to_string(),
            api_group: res.group.clone(),
            resource: res.plural.clone(),
            subresource: subresource.to_string(),
            namespace: namespace.map(str::to_string),
            name: name.map(str::to_string),
            path: None,
        };
        // Privileged callers skip building the RBAC snapshot: it clones every role.
        if !caller.user.is_privileged() && !rbac::authorize(&caller.user, &attrs, &rbac_snapshot(&state)) {
            return Err(forbidden(&caller.user, &attrs));
        }
        let info = state
            .registry
            .lookup(&res.group, &res.version, &res.plural)
            .cloned()
            .ok_or_else(|| Error::NotFound {
                message: "the server could not find the requested resource".into(),
            })?;
        if info.resource.namespaced != namespace.is_some() && !(namespace.is_none() && matches!(verb, "list" | "watch"))
        {
            return Err(Error::NotFound {
                message: "the server could not find the requested resource".into(),
            });
        }
        if !subresource.is_empty() && !info.resource.subresources.iter().any(|s| s == subresource) {
            return Err(Error::NotFound {
                message: "the server could not find the requested resource".into(),
            });
        }
        drop(state);
        if subresource.is_empty() {
            self.land_interloper(verb, &info, namespace, name);
        }
        Ok(info)
    }

    /// Lands another client's write queued for this request first (see [`crate::Interloper`]):
    /// whatever is at the object's key goes, the interloper's object takes its place.
    fn land_interloper(&self, verb: &str, info: &ResourceInfo, namespace: Option<&str>, name: Option<&str>) {
        if !matches!(verb, "create" | "update" | "patch" | "delete") {
            return;
        }
        let Some(interloper) = self
            .inner
            .faults()
            .take_interloper(verb, &info.resource.plural, namespace, name)
        else {
            return;
        };
        let gr = info.group_resource();
        let mut state = self.inner.lock();
        let key = (namespace.unwrap_or("").to_string(), interloper.name.clone());
        if let Some(old) = state.get(&gr, &key).cloned() {
            let mut gone = (*old).clone();
            let rv = state.next_rv();
            meta::set(&mut gone, "resourceVersion", Some(json!(rv.to_string())));
            state.put(&gr, gone, EventType::Deleted);
        }
        let mut obj = interloper.object;
        if let Some(ns) = namespace {
            meta::set(&mut obj, "namespace", Some(json!(ns)));
        }
        meta::set(&mut obj, "name", Some(json!(interloper.name)));
        meta::set(&mut obj, "resourceVersion", None);
        // The test wrote an object the server accepts; one it refuses is a broken test.
        if let Err(e) = self.inner.create_locked(
            &mut state,
            &UserInfo::user("interloper"),
            info,
            obj,
            "interloper",
            false,
            false,
        ) {
            panic!("fakeapi: the interloper's object was refused: {e}");
        }
        let rv = state.rv;
        drop(state);
        self.inner.notify(rv);
    }
}

/// One request inside the latency wait; leaving (or being dropped) counts it out.
struct Delayed<'a>(&'a std::sync::atomic::AtomicUsize);

impl<'a> Delayed<'a> {
    fn enter(gauge: &'a std::sync::atomic::AtomicUsize) -> Self {
        gauge.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        Delayed(gauge)
    }
}

impl Drop for Delayed<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Inner {
    /// Faults in front of every request: black hole, latency (on the tokio clock), partition,
    /// injected errors.
    pub(crate) async fn fault_gate(&self, verb: &str, resource: &str) -> Result<()> {
        self.swallow_if_black_holed().await;
        let latency = self.faults().latency;
        if let Some(delay) = latency {
            let sent_to = self.incarnation.load(std::sync::atomic::Ordering::SeqCst);
            {
                let _held = Delayed::enter(&self.delayed);
                tokio::time::sleep(delay).await;
            }
            if self.incarnation.load(std::sync::atomic::Ordering::SeqCst) != sent_to {
                return Err(Error::Transport("read tcp: connection reset by peer".into()));
            }
            // A hole that opened while the request was on its way swallows it too.
            self.swallow_if_black_holed().await;
        }
        self.faults().check(&self.name, verb, resource)
    }

    /// Never returns while the cluster is black-holed: the request is lost, and only its
    /// caller dropping it (a timeout) ends the wait.
    async fn swallow_if_black_holed(&self) {
        let black_holed = self.faults().black_holed;
        if black_holed {
            let _held = Delayed::enter(&self.swallowed);
            std::future::pending::<()>().await;
        }
    }

    /// Appends one answered request to the request log.
    pub(crate) fn record_request(
        &self,
        caller: &Caller,
        verb: &str,
        resource: String,
        namespace: Option<&str>,
        name: Option<&str>,
        error: Option<&kbind_cluster::Error>,
    ) {
        // One order across every cluster of the process: a world's clusters share it.
        static SEQ: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
        let record = crate::faults::RequestRecord {
            seq: SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst),
            rv: self.lock().rv,
            at: self.clock.now(),
            user: caller.user.name.clone(),
            verb: verb.to_string(),
            resource,
            namespace: namespace.unwrap_or("").to_string(),
            name: name.unwrap_or("").to_string(),
            error: error.map(ToString::to_string),
        };
        self.requests.lock().push(record);
    }
}

/// A 403 for a request RBAC refused.
pub(crate) fn forbidden(user: &UserInfo, attrs: &Attributes) -> Error {
    let resource = if attrs.api_group.is_empty() {
        attrs.resource.clone()
    } else {
        format!("{}.{}", attrs.resource, attrs.api_group)
    };
    Error::Forbidden {
        verb: attrs.verb.clone(),
        resource,
        message: rbac::forbidden_message(user, attrs),
    }
}

/// The RBAC objects of a cluster, for one authorization decision: copied once per change of
/// the policy, not per request (the bootstrap policy alone is dozens of ClusterRoles).
pub(crate) fn rbac_snapshot(state: &State) -> Arc<RbacSnapshot> {
    let list = |plural: &str| state.list(&GroupResource::new("rbac.authorization.k8s.io", plural), None);
    let sources = [
        list("roles"),
        list("clusterroles"),
        list("rolebindings"),
        list("clusterrolebindings"),
    ];
    let mut cache = state.rbac_cache.lock();
    if let Some(cached) = cache.as_ref()
        && cached
            .sources
            .iter()
            .zip(&sources)
            .all(|(was, is)| was.len() == is.len() && was.iter().zip(is).all(|(a, b)| Arc::ptr_eq(a, b)))
    {
        return cached.snapshot.clone();
    }
    let copy = |objects: &[Arc<Value>]| objects.iter().map(|o| (**o).clone()).collect::<Vec<Value>>();
    let snapshot = Arc::new(RbacSnapshot {
        roles: copy(&sources[0]),
        cluster_roles: copy(&sources[1]),
        role_bindings: copy(&sources[2]),
        cluster_role_bindings: copy(&sources[3]),
    });
    *cache = Some(crate::store::RbacCache {
        sources,
        snapshot: snapshot.clone(),
    });
    snapshot
}
