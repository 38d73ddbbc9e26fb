//! `GuardedClient`: a provider client that re-verifies the cluster's identity after every
//! transport error or watch restart and refuses writes while it differs from the pinned UID
//! (contract §2, §8 invariant 2).

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use async_trait::async_trait;
use kbind_cluster::{ApiResource, ClusterClient, Error, Layer, Request, Result};
use parking_lot::Mutex;

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
        self.guard.state.lock().clone()
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
        let mut state = self.guard.state.lock();
        if *state == IdentityState::Verified {
            *state = IdentityState::Unverified;
        }
    }

    fn set_state(&self, new: IdentityState) {
        *self.guard.state.lock() = new;
    }

    fn check_open(&self) -> Result<()> {
        if self.is_closed() {
            return Err(Error::Transport(
                "the engaged provider cluster was disengaged; this client is closed".into(),
            ));
        }
        Ok(())
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
        let identity = kbind_cluster::identity::read_identity(self.inner.as_ref())
            .await
            .inspect_err(|e| self.observe(e))?;
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
        let restarted = !self.guard.watched.lock().insert(key);
        if restarted {
            self.mark_unverified();
        }
    }
}

#[async_trait]
impl Layer for GuardedClient {
    async fn route(&self, request: Request<'_>) -> Result<Arc<dyn ClusterClient>> {
        match request {
            Request::Read => self.check_open()?,
            Request::Watch { res, namespace } => {
                self.check_open()?;
                self.note_watch_start(res, namespace);
            }
            Request::Write => self.before_write().await?,
        }
        Ok(self.inner.clone())
    }

    /// A transport failure means the next write must re-verify who is on the other end.
    fn observe(&self, error: &Error) {
        if let Error::Transport(_) | Error::NotServed { .. } | Error::Timeout(_) = error {
            self.mark_unverified();
        }
    }
}
