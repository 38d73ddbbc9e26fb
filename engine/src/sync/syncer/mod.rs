//! One syncer: a kube-runtime controller over the consumer objects of one GVR, triggered
//! also by the change events of the provider's shared cache, reconciling each object up and
//! its status down.
//!
//! This file wires the controller and runs one object's pass over the syncer's state,
//! [`ApiSyncer`] (in [`state`]); each step of the pass has a module of its own: [`follow`] (the
//! two sides' watches and what a provider change concerns), [`finalizer`] (the consumer object's
//! finalizer and its deletion), [`spec_up`] (the provider copy classified and written),
//! [`recreate`] (the throttle on re-creating a copy), [`namespaces`] (the provider namespaces
//! copies land in), [`conflict`] (the signals of a copy left alone) and [`status_down`] (the
//! provider status written back).

mod conflict;
mod finalizer;
mod follow;
mod namespaces;
mod recreate;
mod spec_up;
mod state;
mod status_down;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kbind_cluster::DynamicObject;
use kbind_cluster::watcher::{WatchStreamExt, watcher};
use kube::runtime::controller::{Action, Config, Controller};
use kube::runtime::reflector::store::Writer;
use tokio::time::Instant;

use super::{SyncError, lock, meta};
use crate::mapper::ObjectKey;
use spec_up::Written;

pub(crate) use finalizer::release_finalizer;
pub(crate) use state::{ApiSyncer, Observation};

/// Slow backstop resync of every object (provider changes arrive as events).
const RESYNC: Duration = Duration::from_secs(300);
/// Retry after a forbidden provider call.
const DENIED_RETRY: Duration = Duration::from_secs(30);
/// Retry after any other failure.
const ERROR_RETRY: Duration = Duration::from_secs(5);

/// Runs the syncer until the future is dropped.
pub(crate) async fn run(syncer: Arc<ApiSyncer>) {
    let res = syncer.spec.resource.clone();
    let writer: Writer<DynamicObject> = Writer::new(res.clone());
    let store = writer.as_reader();
    let pending = syncer.pending.clone();
    let consumer_events = follow::into_store(
        writer,
        watcher(
            syncer.consumer.clone(),
            res.clone(),
            syncer.spec.namespace.clone(),
            syncer.watcher_config.clone().on_watch_open({
                let syncer = syncer.clone();
                move || syncer.consumer_watch_opened()
            }),
        ),
    )
    .inspect(move |event| follow::note_consumer_event(&pending, event))
    .inspect({
        let syncer = syncer.clone();
        move |event| syncer.note_consumer_health(event)
    })
    .applied_objects();
    syncer.choose_watches().await;
    syncer.note_provider_health();
    let provider_changes = syncer.watches.changes();
    let trigger_syncer = syncer.clone();
    let consumers = store.clone();
    let triggers = provider_changes
        .flat_map(move |change| futures::stream::iter(trigger_syncer.consumers_to_look_at(&consumers, change)));
    Controller::for_stream_with(consumer_events, store, res)
        .with_config(Config::default().concurrency(syncer.workers))
        .reconcile_on(triggers)
        .run(reconcile, error_policy, syncer)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "syncer controller event");
            }
        })
        .await;
}

fn error_policy(obj: Arc<DynamicObject>, error: &SyncError, syncer: Arc<ApiSyncer>) -> Action {
    tracing::info!(object = ?ObjectKey::of(&obj), error = %error, "sync failed; retrying");
    // A throttled provider (429) says when to come back; never sooner than it asked.
    let asked = error.cause().and_then(kbind_cluster::backoff::retry_after);
    let wait = match ObjectKey::of(&obj) {
        Some(key) => syncer.wait(&key, ERROR_RETRY),
        None => ERROR_RETRY,
    };
    Action::requeue(kbind_cluster::backoff::after_asked(wait, asked))
}

/// Reconciles one consumer object.
async fn reconcile(obj: Arc<DynamicObject>, syncer: Arc<ApiSyncer>) -> Result<Action, SyncError> {
    let Some(key) = ObjectKey::of(&obj) else {
        return Ok(Action::await_change());
    };
    let since = syncer.pending.pick_up(&key);
    let result = syncer.sync(&obj, &key, since).await;
    if let (Err(e), Some(since)) = (&result, since)
        && !matches!(
            e,
            SyncError::ConsumerWriteFailed {
                step: status_down::STATUS_STEP,
                ..
            }
        )
    {
        syncer.pending.retry(key.clone(), since);
    }
    match result {
        // A first 403 may be a restarting apiserver whose RBAC caches have not synced yet
        // (it answers 403 for a moment): tried again soon, reported only if it repeats.
        Err(e) if e.denied().is_some() && syncer.forbidden_once.lock().insert(key.clone()) => {
            tracing::debug!(object = %key, error = %e, "provider call forbidden once; trying again before reporting it");
            Ok(Action::requeue(syncer.wait(&key, ERROR_RETRY)))
        }
        Err(e) if let Some(denied) = e.denied() => {
            tracing::info!(object = %key, denied = %denied, "provider call forbidden");
            let mut findings = lock(&syncer.findings);
            findings.denied.insert(key.clone(), denied);
            findings.synced.remove(&key);
            Ok(Action::requeue(syncer.wait(&key, DENIED_RETRY)))
        }
        other => {
            if other.is_ok() {
                syncer.forbidden_once.lock().remove(&key);
            }
            other
        }
    }
}

impl ApiSyncer {
    /// Syncs one object; `since` is when its unprocessed change was first seen (`None` for a
    /// resync), the start of the latencies reported to the observer.
    async fn sync(&self, obj: &DynamicObject, key: &ObjectKey, since: Option<Instant>) -> Result<Action, SyncError> {
        let connection = self.spec.connection.as_str();
        // Held by another Connection's syncer (a namespace hand-over not finished): its drain
        // releases it first; touching it here would leave its provider copy behind.
        if meta::has_finalizer(obj) && meta::labelled_for(obj, connection) == Some(false) {
            tracing::debug!(object = %key, held_by = ?meta::holder_of(obj), "served through another Connection; left alone");
            return Ok(Action::await_change());
        }
        let target = self.mapper.to_provider(self.res(), key);
        self.follow_namespace(target.namespace.as_deref());
        if obj.metadata.deletion_timestamp.is_some() {
            return self.finalize(obj, key, &target).await;
        }
        let owned;
        let obj = if meta::has_finalizer(obj) && meta::labelled_for(obj, connection) == Some(true) {
            obj
        } else {
            owned = self.add_finalizer(obj, key).await?;
            &owned
        };
        let copy = match self.write_copy(obj, key, &target, since).await? {
            Written::Copy(copy) => *copy,
            Written::Not(action) => return Ok(action),
        };
        if let Some(since) = since {
            self.observer.spec_up(&self.spec.api, since.elapsed());
        }
        {
            let mut findings = lock(&self.findings);
            findings.denied.remove(key);
            findings.synced.insert(key.clone());
        }
        if self.status_down(obj, key, &copy).await?
            && let Some(since) = since
        {
            self.observer.status_down(&self.spec.api, since.elapsed());
        }
        Ok(self.requeue(key, RESYNC))
    }
}
