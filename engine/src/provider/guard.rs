//! `GuardedClient`: a provider client that re-verifies the cluster's identity after every
//! transport error or watch restart and refuses writes while it differs from the pinned UID
//! (DESIGN.md §2, §8 invariant 2).

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use futures::StreamExt;
use kbind_cluster::{
    ApiResource, ClusterClient, DeleteParams, Discovery, DynamicObject, Error, ListParams, ObjectList, Patch,
    PatchParams, PostParams, Result, WatchParams, WatchStream,
};

/// What the guard knows about the cluster behind the client.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum IdentityState {
    /// The identity was read and matches the pinned UID since the last transport error or
    /// watch restart.
    Verified,
    /// A transport error or watch restart happened; the next write reads the identity first.
    Unverified,
    /// The last read identity differs from the pinned UID: writes are refused.
    Changed {
        /// The UID the cluster now reports.
        found: String,
    },
}

/// Shared state of one guard: the pinned UID, whether it must be re-read, and the stop switch.
#[derive(Debug)]
struct Guard {
    pinned: String,
    state: Mutex<IdentityState>,
    /// GVRs (with namespace) that have had a watch: a second watch on one is a restart.
    watched: Mutex<BTreeSet<String>>,
    /// Set on disengage: the engaged cluster is dead, nothing more goes through it.
    closed: AtomicBool,
}

/// A provider client pinned to one cluster identity; clones share the guard.
#[derive(Clone)]
pub struct GuardedClient {
    inner: Arc<dyn ClusterClient>,
    guard: Arc<Guard>,
}

impl std::fmt::Debug for GuardedClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GuardedClient")
            .field("pinned", &self.guard.pinned)
            .field("state", &self.identity_state())
            .finish_non_exhaustive()
    }
}

impl GuardedClient {
    /// Wraps `inner`, whose identity was just read and equals `pinned`.
    pub fn new(inner: Arc<dyn ClusterClient>, pinned: &str) -> Self {
        Self {
            inner,
            guard: Arc::new(Guard {
                pinned: pinned.to_string(),
                state: Mutex::new(IdentityState::Verified),
                watched: Mutex::new(BTreeSet::new()),
                closed: AtomicBool::new(false),
            }),
        }
    }

    /// The pinned cluster UID.
    pub fn pinned_uid(&self) -> &str {
        &self.guard.pinned
    }

    /// What the guard currently knows about the identity.
    pub fn identity_state(&self) -> IdentityState {
        self.guard.state.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// Stops the client for good: every later call fails without a request.
    pub fn close(&self) {
        self.guard.closed.store(true, Ordering::SeqCst);
    }

    /// Whether the client was closed by a disengage.
    pub fn is_closed(&self) -> bool {
        self.guard.closed.load(Ordering::SeqCst)
    }

    /// Forces a re-read of the identity before the next write.
    pub fn mark_unverified(&self) {
        let mut state = self.guard.state.lock().unwrap_or_else(|p| p.into_inner());
        if *state == IdentityState::Verified {
            *state = IdentityState::Unverified;
        }
    }

    fn set_state(&self, new: IdentityState) {
        *self.guard.state.lock().unwrap_or_else(|p| p.into_inner()) = new;
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Transport(
                "the engaged provider cluster was disengaged; this client is closed".into(),
            ));
        }
        Ok(())
    }

    /// Notes what an answer says about the connection: a transport failure means the next
    /// write must re-verify who is on the other end.
    fn observe<T>(&self, result: Result<T>) -> Result<T> {
        if let Err(Error::Transport(_) | Error::Timeout(_)) = &result {
            self.mark_unverified();
        }
        result
    }

    /// Runs before every write: re-reads the identity if needed and refuses on a mismatch.
    async fn before_write(&self) -> Result<()> {
        self.check_open()?;
        if crate::planted::planted(crate::planted::Plant::SkipIdentityCheck) {
            return Ok(());
        }
        if self.identity_state() == IdentityState::Verified {
            return Ok(());
        }
        let identity = self.observe(kbind_cluster::identity::read_identity(self.inner.as_ref()).await)?;
        if identity.uid == self.guard.pinned {
            self.set_state(IdentityState::Verified);
            Ok(())
        } else {
            tracing::warn!(pinned = %self.guard.pinned, found = %identity.uid, "provider cluster identity changed; refusing writes");
            let message = format!(
                "cluster identity changed: pinned {}, found {}; refusing to write",
                self.guard.pinned, identity.uid
            );
            self.set_state(IdentityState::Changed { found: identity.uid });
            Err(Error::Conflict {
                message,
                causes: Vec::new(),
            })
        }
    }

    fn note_watch_start(&self, res: &ApiResource, namespace: Option<&str>) {
        let key = format!(
            "{}/{}/{}/{}",
            res.group,
            res.version,
            res.plural,
            namespace.unwrap_or("")
        );
        let restarted = !self.guard.watched.lock().unwrap_or_else(|p| p.into_inner()).insert(key);
        if restarted {
            self.mark_unverified();
        }
    }
}

#[async_trait]
impl ClusterClient for GuardedClient {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        self.check_open()?;
        self.observe(self.inner.get(res, namespace, name).await)
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        self.check_open()?;
        self.observe(self.inner.list(res, namespace, params).await)
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        self.check_open()?;
        self.note_watch_start(res, namespace);
        let stream = self.observe(self.inner.watch(res, namespace, params, resource_version).await)?;
        let guard = self.clone();
        Ok(stream.map(move |item| guard.observe(item)).boxed())
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.before_write().await?;
        self.observe(self.inner.create(res, namespace, obj, params).await)
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.before_write().await?;
        self.observe(self.inner.replace(res, namespace, name, obj, params).await)
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.before_write().await?;
        self.observe(self.inner.replace_status(res, namespace, name, obj, params).await)
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        self.before_write().await?;
        self.observe(self.inner.patch(res, namespace, name, patch, params).await)
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        self.before_write().await?;
        self.observe(self.inner.patch_status(res, namespace, name, patch, params).await)
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        self.before_write().await?;
        self.observe(self.inner.delete(res, namespace, name, params).await)
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        self.before_write().await?;
        self.observe(
            self.inner
                .create_subresource(res, namespace, name, subresource, body)
                .await,
        )
    }

    async fn discovery(&self) -> Result<Discovery> {
        self.check_open()?;
        self.observe(self.inner.discovery().await)
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value> {
        self.check_open()?;
        self.observe(self.inner.openapi_v3(group, version).await)
    }
}
