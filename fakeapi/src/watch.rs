//! Watches: a cursor over the cluster's one event history, as a small explicit state machine
//! (initial events → live → done), with selectors, bookmarks, timeouts, 410 for compacted
//! versions and an end when the cluster drops its watches.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures::stream::{self, BoxStream};
use kbind_cluster::{ApiResource, Error, Result, WatchEvent, WatchParams};
use kube::core::TypeMeta;
use kube::core::watch::{Bookmark, BookmarkMeta};
use serde_json::Value;
use tokio::sync::watch as tokio_watch;
use tokio::time::Instant;

use crate::cluster::{FakeCluster, Inner};
use crate::ops::{Caller, present};
use crate::registry::{GroupResource, ResourceInfo};
use crate::selector::{FieldSelector, LabelSelector};
use crate::store::{EventType, HistoryEvent, State};

/// A stream of watch events on JSON objects.
pub type ValueWatchStream = BoxStream<'static, Result<WatchEvent<Value>>>;

/// What a watch selects.
struct Filter {
    gr: GroupResource,
    namespace: Option<String>,
    labels: LabelSelector,
    fields: FieldSelector,
}

impl Filter {
    fn selects(&self, obj: &Value) -> bool {
        self.labels.matches(obj) && self.fields.matches(obj)
    }

    /// The event a client of this filter sees for one history entry, if any.
    fn translate(&self, event: &HistoryEvent, info: &ResourceInfo) -> Option<WatchEvent<Value>> {
        if event.gr != self.gr || self.namespace.as_deref().is_some_and(|ns| ns != event.namespace()) {
            return None;
        }
        let now = self.selects(&event.object);
        let before = event.old.as_deref().is_some_and(|o| self.selects(o));
        let obj = present(&event.object, info);
        match (event.kind, before, now) {
            (EventType::Added, _, true) => Some(WatchEvent::Added(obj)),
            (EventType::Modified, true, true) => Some(WatchEvent::Modified(obj)),
            (EventType::Modified, false, true) => Some(WatchEvent::Added(obj)),
            (EventType::Modified, true, false) => Some(WatchEvent::Deleted(obj)),
            (EventType::Deleted, _, true) => Some(WatchEvent::Deleted(obj)),
            _ => None,
        }
    }
}

/// Where a watch is in its life.
enum Phase {
    /// Synthetic ADDED events for what exists, then live from `then`.
    Initial {
        objects: Vec<Value>,
        then: u64,
        end_bookmark: bool,
    },
    /// Delivering history newer than `rv`.
    Live { rv: u64 },
    /// Finished; the stream ends once `out` drains.
    Done,
}

struct Cursor {
    inner: Arc<Inner>,
    info: ResourceInfo,
    filter: Filter,
    phase: Phase,
    epoch: u64,
    changed: tokio_watch::Receiver<u64>,
    bookmarks: bool,
    deadline: Option<Instant>,
    out: VecDeque<Result<WatchEvent<Value>>>,
}

impl FakeCluster {
    /// Watches objects changed after `resource_version` (`""`/`"0"`: synthetic ADDED events for
    /// everything that exists first, as kube-apiserver does).
    pub async fn watch(
        &self,
        caller: &Caller,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<ValueWatchStream> {
        let fields = FieldSelector::parse(params.field_selector.as_deref().unwrap_or(""))?;
        let labels = LabelSelector::parse(params.label_selector.as_deref().unwrap_or(""))?;
        let info = self
            .admit(caller, "watch", res, namespace, fields.pinned_name(), "")
            .await?;
        let filter = Filter {
            gr: info.group_resource(),
            namespace: namespace.map(str::to_string),
            labels,
            fields,
        };
        let state = self.inner.lock();
        // Why: a WatchList (sendInitialEvents=true, resourceVersionMatch=NotOlderThan) streams the
        // current state from any resourceVersion; a reflector sends one after every watch error with
        // the last version it knew, and waits for the initial-events-end bookmark to replace its store.
        // The current state as synthetic ADDED events, then live events from its resourceVersion;
        // a WatchList also ends the state with the `initial-events-end` bookmark.
        let initial = |end_bookmark| Phase::Initial {
            objects: state
                .list(&filter.gr, namespace)
                .iter()
                .filter(|o| filter.selects(o))
                .map(|o| present(o, &info))
                .collect(),
            then: state.rv,
            end_bookmark,
        };
        let phase = match resource_version {
            rv if params.send_initial_events => {
                if !rv.is_empty() {
                    rv.parse::<u64>().map_err(|_| Error::BadRequest {
                        message: format!("invalid resource version: {rv:?}"),
                    })?;
                }
                initial(true)
            }
            "" | "0" => initial(false),
            rv => Phase::Live {
                rv: rv.parse().map_err(|_| Error::BadRequest {
                    message: format!("invalid resource version: {rv:?}"),
                })?,
            },
        };
        let cursor = Cursor {
            inner: self.inner.clone(),
            info,
            filter,
            phase,
            epoch: state.watch_epoch,
            changed: self.inner.changed.subscribe(),
            bookmarks: params.bookmarks,
            deadline: params
                .timeout
                .map(|s| Instant::now() + Duration::from_secs(u64::from(s))),
            out: VecDeque::new(),
        };
        drop(state);
        Ok(Box::pin(stream::unfold(cursor, |mut cursor| async move {
            let item = cursor.next().await?;
            Some((item, cursor))
        })))
    }
}

impl Cursor {
    async fn next(&mut self) -> Option<Result<WatchEvent<Value>>> {
        loop {
            if !self.black_hole_lifted().await {
                return None;
            }
            if let Some(item) = self.out.pop_front() {
                return Some(item);
            }
            match std::mem::replace(&mut self.phase, Phase::Done) {
                Phase::Done => return None,
                Phase::Initial {
                    objects,
                    then,
                    end_bookmark,
                } => {
                    self.out.extend(objects.into_iter().map(|o| Ok(WatchEvent::Added(o))));
                    if end_bookmark {
                        self.out.push_back(Ok(bookmark(&self.info, then, true)));
                    }
                    self.phase = Phase::Live { rv: then };
                }
                Phase::Live { rv } => self.phase = self.step_live(rv).await,
            }
        }
    }

    /// Waits, delivering nothing and not ending, while the cluster is black-holed (as a watch
    /// whose connection silently lost its route); `false` if the cluster is gone meanwhile.
    async fn black_hole_lifted(&mut self) -> bool {
        loop {
            if !self.inner.faults().black_holed {
                return true;
            }
            // Checked again after marking: `restore` notifies after clearing the flag.
            self.changed.mark_unchanged();
            if !self.inner.faults().black_holed {
                return true;
            }
            if self.changed.changed().await.is_err() {
                return false;
            }
        }
    }

    /// One step of a live watch: deliver what is new, or wait for a change, a bookmark or the end.
    async fn step_live(&mut self, rv: u64) -> Phase {
        if self.inner.faults().partitioned {
            self.out.push_back(Err(Error::Transport(format!(
                "watch on {} broken: cluster unreachable",
                self.inner.name
            ))));
            return Phase::Done;
        }
        let next_rv = {
            let state = self.inner.lock();
            if state.watch_epoch != self.epoch {
                return Phase::Done;
            }
            if rv < state.floor_of(&self.filter.gr) {
                self.out.push_back(Err(Error::gone(&rv.to_string())));
                return Phase::Done;
            }
            let events = collect(&state, rv, &self.filter, &self.info);
            self.out.extend(events.into_iter().map(Ok));
            state.rv.max(rv)
        };
        if !self.out.is_empty() {
            return Phase::Live { rv: next_rv };
        }
        self.changed.mark_unchanged();
        let bookmark_after = self.inner.bookmark_interval;
        let (deadline, bookmarks) = (self.deadline, self.bookmarks);
        let wake = tokio::select! {
            changed = self.changed.changed() => if changed.is_ok() { Wake::Changed } else { Wake::Closed },
            _ = tokio::time::sleep(bookmark_after), if bookmarks => Wake::Bookmark,
            _ = sleep_until_opt(deadline) => Wake::Closed,
        };
        match wake {
            Wake::Changed => Phase::Live { rv: next_rv },
            Wake::Bookmark => {
                self.out.push_back(Ok(bookmark(&self.info, next_rv, false)));
                Phase::Live { rv: next_rv }
            }
            Wake::Closed => Phase::Done,
        }
    }
}

/// The events after `rv` a filter lets through.
fn collect(state: &State, rv: u64, filter: &Filter, info: &ResourceInfo) -> Vec<WatchEvent<Value>> {
    let Some(history) = state.history.get(&filter.gr) else {
        return Vec::new();
    };
    let start = history.partition_point(|e| e.rv <= rv);
    history
        .range(start..)
        .filter_map(|event| filter.translate(event, info))
        .collect()
}

/// Why an idle watch woke up.
enum Wake {
    Changed,
    Bookmark,
    Closed,
}

async fn sleep_until_opt(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}

fn bookmark(info: &ResourceInfo, rv: u64, initial_events_end: bool) -> WatchEvent<Value> {
    let mut annotations = std::collections::BTreeMap::new();
    if initial_events_end {
        annotations.insert("k8s.io/initial-events-end".to_string(), "true".to_string());
    }
    WatchEvent::Bookmark(Bookmark {
        types: TypeMeta {
            api_version: info.api_version(),
            kind: info.resource.kind.clone(),
        },
        metadata: BookmarkMeta {
            resource_version: rv.to_string(),
            annotations,
        },
    })
}
