//! The seam's list+watch as a self-healing `kube::runtime::watcher::Event` stream.
//!
//! kube-runtime's own `watcher()` only drives a `kube::Api`; this is the same ListWatch
//! protocol over any [`ClusterClient`], so kube-runtime's reflectors, `WatchStreamExt`
//! combinators and controller machinery run unchanged on top of fakeapi or a real cluster.
//!
//! Items carry kube-runtime's [`WatcherError`] (not the seam's [`Error`]) because every
//! consumer in kube-runtime (`reflector`, `applied_objects`, `Controller::for_stream`) demands
//! exactly that type; [`into_seam_error`] turns one back into the typed seam error.
//!
//! ```no_run
//! use std::sync::Arc;
//! use futures::StreamExt;
//! use kbind_cluster::{ApiResource, ClusterClient, DynamicObject};
//! use kbind_cluster::watcher::{WatchStreamExt, WatcherConfig, watcher};
//! use kube::runtime::reflector::{self, store::Writer};
//!
//! # async fn run(client: Arc<dyn ClusterClient>, res: ApiResource) {
//! let writer: Writer<DynamicObject> = Writer::new(res.clone());
//! let store = writer.as_reader();
//! let events = watcher(client, res, Some("team-a".into()), WatcherConfig::default().labels("app=web"));
//! // The reflector keeps `store` in step with the stream; someone has to poll it.
//! tokio::spawn(reflector::reflector(writer, events).applied_objects().for_each(|_| async {}));
//! store.wait_until_ready().await.ok();
//! println!("{} objects cached", store.state().len());
//! # }
//! ```

use std::{collections::VecDeque, sync::Arc, time::Duration};

use futures::{Stream, StreamExt};
use kube::{
    ResourceExt,
    api::{ApiResource, DynamicObject, ListParams, WatchEvent, WatchParams},
    runtime::{
        utils::Backoff,
        watcher::{DefaultBackoff, ExponentialBackoff},
    },
};

pub use kube::runtime::WatchStreamExt;
pub use kube::runtime::watcher::{Error as WatcherError, Event};

use crate::{ClusterClient, Error, WatchStream};

/// How long past the server-side watch timeout a silent watch is still trusted; after that
/// the connection is presumed dead and the watch is restarted (as kube-runtime does).
const WATCH_IDLE_MARGIN: Duration = Duration::from_secs(5);

/// What to wait between retries after an error.
#[derive(Debug, Clone, Default)]
pub enum BackoffPolicy {
    /// kube-runtime's `DefaultBackoff` (client-go's reflector: 800ms doubling to 30s, jittered).
    #[default]
    KubeDefault,
    /// Deterministic exponential backoff without jitter, from `initial` up to `max`.
    Exponential {
        /// First delay.
        initial: Duration,
        /// Largest delay.
        max: Duration,
        /// Growth factor per consecutive failure.
        factor: f32,
    },
    /// Exponential backoff from `initial` doubling up to `max`, jittered from `randomness`
    /// ([`crate::backoff::Backoff`]): what the engine uses, seeded in deterministic worlds.
    Jittered {
        /// First delay.
        initial: Duration,
        /// Largest delay (before jitter).
        max: Duration,
        /// The jitter's source.
        randomness: crate::backoff::SharedRandomness,
    },
    /// Retry at once (for tests that count retries, never for a real server).
    Immediate,
}

impl PartialEq for BackoffPolicy {
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (BackoffPolicy::KubeDefault, BackoffPolicy::KubeDefault)
            | (BackoffPolicy::Immediate, BackoffPolicy::Immediate) => true,
            (
                BackoffPolicy::Exponential { initial, max, factor },
                BackoffPolicy::Exponential {
                    initial: i,
                    max: m,
                    factor: f,
                },
            ) => (initial, max, factor) == (i, m, f),
            (
                BackoffPolicy::Jittered {
                    initial,
                    max,
                    randomness,
                },
                BackoffPolicy::Jittered {
                    initial: i,
                    max: m,
                    randomness: r,
                },
            ) => (initial, max) == (i, m) && Arc::ptr_eq(randomness, r),
            _ => false,
        }
    }
}

impl BackoffPolicy {
    /// A fresh backoff iterator for the watcher `label` names (its jitter a stream of its own).
    fn build(&self, label: &str) -> Box<dyn Backoff> {
        match self {
            BackoffPolicy::KubeDefault => Box::new(DefaultBackoff::default()),
            BackoffPolicy::Exponential { initial, max, factor } => Box::new(ExponentialBackoff::from(
                backon::ExponentialBuilder::default()
                    .with_min_delay(*initial)
                    .with_max_delay(*max)
                    .with_factor(*factor)
                    .without_max_times(),
            )),
            BackoffPolicy::Jittered {
                initial,
                max,
                randomness,
            } => Box::new(crate::backoff::Backoff::new(
                *initial,
                *max,
                randomness.fork(&format!("watch/{label}")),
            )),
            BackoffPolicy::Immediate => Box::new(NoDelay),
        }
    }
}

/// A backoff that never waits.
struct NoDelay;

impl Iterator for NoDelay {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::ZERO)
    }
}

impl Backoff for NoDelay {
    fn reset(&mut self) {}
}

/// What to watch and how: selectors, paging, bookmarks, timeout and backoff.
#[derive(Debug, Clone, PartialEq)]
pub struct WatcherConfig {
    /// Label selector for lists and watches.
    pub label_selector: Option<String>,
    /// Field selector for lists and watches.
    pub field_selector: Option<String>,
    /// Objects per list page (`None`: unpaged); 500 like client-go.
    pub page_size: Option<u32>,
    /// Whether to ask for BOOKMARK events (on by default; they keep resumes cheap).
    pub bookmarks: bool,
    /// Server-side watch timeout in seconds (290 like kube-runtime); 0 also disables the
    /// client-side idle check.
    pub timeout_seconds: u32,
    /// Delay policy between retries after an error.
    pub backoff: BackoffPolicy,
    /// Called whenever a watch opens: a resumed watch yields no item until something changes,
    /// so this is how a caller learns that the watch works again after an error.
    pub on_watch_open: Option<OnWatchOpen>,
}

/// A callback run when a watch opens ([`WatcherConfig::on_watch_open`]).
#[derive(Clone)]
pub struct OnWatchOpen(pub Arc<dyn Fn() + Send + Sync>);

impl std::fmt::Debug for OnWatchOpen {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("OnWatchOpen")
    }
}

impl PartialEq for OnWatchOpen {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

impl Default for WatcherConfig {
    fn default() -> Self {
        Self {
            label_selector: None,
            field_selector: None,
            page_size: Some(500),
            bookmarks: true,
            timeout_seconds: 290,
            backoff: BackoffPolicy::default(),
            on_watch_open: None,
        }
    }
}

impl WatcherConfig {
    /// Restricts to objects matching a label selector.
    #[must_use]
    pub fn labels(mut self, selector: &str) -> Self {
        self.label_selector = Some(selector.to_string());
        self
    }

    /// Restricts to objects matching a field selector.
    #[must_use]
    pub fn fields(mut self, selector: &str) -> Self {
        self.field_selector = Some(selector.to_string());
        self
    }

    /// Sets the list page size.
    #[must_use]
    pub fn page_size(mut self, size: u32) -> Self {
        self.page_size = Some(size);
        self
    }

    /// Stops asking for BOOKMARK events.
    #[must_use]
    pub fn disable_bookmarks(mut self) -> Self {
        self.bookmarks = false;
        self
    }

    /// Sets the server-side watch timeout.
    #[must_use]
    pub fn timeout(mut self, seconds: u32) -> Self {
        self.timeout_seconds = seconds;
        self
    }

    /// Sets the retry backoff.
    #[must_use]
    pub fn backoff(mut self, policy: BackoffPolicy) -> Self {
        self.backoff = policy;
        self
    }

    /// Runs `f` whenever a watch opens.
    #[must_use]
    pub fn on_watch_open(mut self, f: impl Fn() + Send + Sync + 'static) -> Self {
        self.on_watch_open = Some(OnWatchOpen(Arc::new(f)));
        self
    }

    /// List parameters for one page; the most recent (quorum) read, as kube-runtime defaults to.
    fn list_params(&self, continue_token: Option<String>) -> ListParams {
        ListParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            limit: self.page_size,
            continue_token,
            ..ListParams::default()
        }
    }

    /// Watch parameters (the resourceVersion travels separately).
    fn watch_params(&self) -> WatchParams {
        WatchParams {
            label_selector: self.label_selector.clone(),
            field_selector: self.field_selector.clone(),
            timeout: Some(self.timeout_seconds),
            bookmarks: self.bookmarks,
            send_initial_events: false,
        }
    }
}

/// The one item type of [`watcher`].
pub type WatcherItem = Result<Event<DynamicObject>, WatcherError>;

/// The collection being watched.
struct Scope {
    client: Arc<dyn ClusterClient>,
    res: ApiResource,
    namespace: Option<String>,
    config: WatcherConfig,
}

/// Where the ListWatch protocol stands.
#[derive(Default)]
enum State {
    /// Nothing listed yet: the next step announces `Init` and starts the list.
    #[default]
    Empty,
    /// Paging through the list: `objects` of the current page are still to be emitted.
    InitPage {
        continue_token: Option<String>,
        objects: VecDeque<DynamicObject>,
        resource_version: Option<String>,
    },
    /// Listed (or resuming): the next step opens a watch from `resource_version`.
    InitListed { resource_version: String },
    /// Watching; `resource_version` is the last one seen, where a new watch resumes;
    /// `heard` says whether this watch delivered anything yet (an object event or a bookmark).
    Watching {
        resource_version: String,
        stream: WatchStream,
        heard: bool,
    },
}

/// Lists and watches `res` through `client` for ever, yielding kube-runtime watcher events.
///
/// `Init`, one `InitApply` per listed object across pages, `InitDone`, then `Apply`/`Delete`
/// from a watch resumed at the list's resourceVersion. A 410 Gone relists from scratch; a
/// watch that ends is resumed from the last seen resourceVersion (bookmarks included); any
/// other error is yielded as `Err` and retried from the same state after `config.backoff`.
/// The stream never ends by itself.
pub fn watcher(
    client: Arc<dyn ClusterClient>,
    res: ApiResource,
    namespace: Option<String>,
    config: WatcherConfig,
) -> impl Stream<Item = WatcherItem> + Send + 'static {
    let label = format!(
        "{}/{}/{}?{}&{}",
        res.api_version,
        res.plural,
        namespace.as_deref().unwrap_or_default(),
        config.label_selector.as_deref().unwrap_or_default(),
        config.field_selector.as_deref().unwrap_or_default()
    );
    let backoff = config.backoff.build(&label);
    let scope = Scope {
        client,
        res,
        namespace,
        config,
    };
    futures::stream::unfold(
        (scope, State::Empty, backoff, None::<Option<Duration>>),
        |(scope, state, mut backoff, failed)| async move {
            // After an error: the backoff, or the server's Retry-After (429) when longer.
            if let Some(asked) = failed
                && let Some(delay) = backoff.next()
            {
                tokio::time::sleep(crate::backoff::after_asked(delay, asked)).await;
            }
            let (item, state) = step(&scope, state, backoff.as_mut()).await;
            match &item {
                Err(_) => {}
                // `Init` alone proves nothing (it precedes the list call); anything after it
                // means the server answered, so the backoff starts over.
                Ok(Event::Init) => {}
                Ok(_) => backoff.reset(),
            }
            let failed = match &item {
                Err(e) => Some(retry_after(e)),
                Ok(_) => None,
            };
            Some((item, (scope, state, backoff, failed)))
        },
    )
}

/// The wait a 429 asked for, if `err` carries one.
fn retry_after(err: &WatcherError) -> Option<Duration> {
    let kube = match err {
        WatcherError::InitialListFailed(e) | WatcherError::WatchStartFailed(e) | WatcherError::WatchFailed(e) => e,
        WatcherError::WatchError(status) => {
            return (status.code == 429)
                .then(|| {
                    status
                        .details
                        .as_ref()
                        .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds)))
                })
                .flatten();
        }
        WatcherError::NoResourceVersion => return None,
    };
    match kube {
        kube::Error::Api(status) if status.code == 429 => status
            .details
            .as_ref()
            .map(|d| Duration::from_secs(u64::from(d.retry_after_seconds))),
        kube::Error::Service(boxed) => boxed.downcast_ref::<Error>().and_then(crate::backoff::retry_after),
        _ => None,
    }
}

/// Turns a watcher error back into the typed seam error it came from.
pub fn into_seam_error(err: WatcherError) -> Error {
    match err {
        WatcherError::InitialListFailed(e) | WatcherError::WatchStartFailed(e) | WatcherError::WatchFailed(e) => {
            from_kube_error(e)
        }
        WatcherError::WatchError(status) => Error::from_status(&status),
        WatcherError::NoResourceVersion => Error::Decode(WatcherError::NoResourceVersion.to_string()),
    }
}

/// A watcher error in words, as the seam error it came from would say it (the server's answer
/// or the transport's error; never a credential), without taking it.
pub fn describe(err: &WatcherError) -> String {
    let kube_error = match err {
        WatcherError::InitialListFailed(e) | WatcherError::WatchStartFailed(e) | WatcherError::WatchFailed(e) => e,
        WatcherError::WatchError(status) => return with_code(&Error::from_status(status)),
        WatcherError::NoResourceVersion => return err.to_string(),
    };
    match kube_error {
        kube::Error::Service(boxed) => match boxed.downcast_ref::<Error>() {
            Some(seam) => with_code(seam),
            None => Error::Transport(boxed.to_string()).to_string(),
        },
        kube::Error::Api(status) => with_code(&Error::from_status(status)),
        other => other.to_string(),
    }
}

/// `HTTP <code>: <error>` for an answer of the server, the error alone for the transport's.
fn with_code(error: &Error) -> String {
    match error.code() {
        0 => error.to_string(),
        code => format!("HTTP {code}: {error}"),
    }
}

/// Carries a seam error inside a `kube::Error`: server errors as their `Status` (what kube's
/// own watcher would have seen), client-side ones boxed whole so [`into_seam_error`] can recover them.
fn to_kube_error(err: Error) -> kube::Error {
    match err.code() {
        0 => kube::Error::Service(Box::new(err)),
        _ => kube::Error::Api(Box::new(err.to_status())),
    }
}

/// The inverse of [`to_kube_error`].
fn from_kube_error(err: kube::Error) -> Error {
    match err {
        kube::Error::Service(boxed) => match boxed.downcast::<Error>() {
            Ok(seam) => *seam,
            Err(other) => Error::Transport(other.to_string()),
        },
        other => Error::from(other),
    }
}

/// Advances until the protocol has something to say. `backoff` paces watches that end
/// without a single event, which never yield an item to pace them by.
async fn step(scope: &Scope, mut state: State, backoff: &mut dyn Backoff) -> (WatcherItem, State) {
    loop {
        match step_trampolined(scope, state, backoff).await {
            (Some(item), next) => return (item, next),
            (None, next) => state = next,
        }
    }
}

/// One transition of the ListWatch protocol: maybe an item, and the next state.
async fn step_trampolined(scope: &Scope, state: State, backoff: &mut dyn Backoff) -> (Option<WatcherItem>, State) {
    match state {
        State::Empty => (
            Some(Ok(Event::Init)),
            State::InitPage {
                continue_token: None,
                objects: VecDeque::new(),
                resource_version: None,
            },
        ),
        State::InitPage {
            continue_token,
            objects,
            resource_version,
        } => step_list(scope, continue_token, objects, resource_version).await,
        State::InitListed { resource_version } => step_watch_start(scope, resource_version).await,
        State::Watching {
            resource_version,
            stream,
            heard,
        } => step_watching(scope, resource_version, stream, heard, backoff).await,
    }
}

/// Emits the buffered page, fetches the next one, or finishes the list.
async fn step_list(
    scope: &Scope,
    continue_token: Option<String>,
    mut objects: VecDeque<DynamicObject>,
    resource_version: Option<String>,
) -> (Option<WatcherItem>, State) {
    if let Some(obj) = objects.pop_front() {
        let next = State::InitPage {
            continue_token,
            objects,
            resource_version,
        };
        return (Some(Ok(Event::InitApply(obj))), next);
    }
    if continue_token.is_none()
        && let Some(resource_version) = resource_version
    {
        return (Some(Ok(Event::InitDone)), State::InitListed { resource_version });
    }
    let params = scope.config.list_params(continue_token.clone());
    match scope.client.list(&scope.res, scope.namespace.as_deref(), &params).await {
        Ok(list) => {
            let resource_version = list.metadata.resource_version.filter(|rv| !rv.is_empty());
            let continue_token = list.metadata.continue_.filter(|c| !c.is_empty());
            if resource_version.is_none() && continue_token.is_none() {
                return (Some(Err(WatcherError::NoResourceVersion)), State::Empty);
            }
            let next = State::InitPage {
                continue_token,
                objects: list.items.into(),
                resource_version,
            };
            (None, next)
        }
        // An expired continue token (or list snapshot) cannot be resumed: list from scratch.
        Err(e) if e.is_gone() => (
            Some(Err(WatcherError::InitialListFailed(to_kube_error(e)))),
            State::Empty,
        ),
        // Anything else retries the same page: the pages already emitted stay valid, since a
        // continue token pins the list to one snapshot. (kube-runtime relists from scratch here;
        // the resulting store is the same, this just saves the repeated pages.)
        Err(e) => {
            tracing::debug!(resource = %scope.res.plural, error = %e, "watcher list failed");
            let retry = State::InitPage {
                continue_token,
                objects,
                resource_version,
            };
            (Some(Err(WatcherError::InitialListFailed(to_kube_error(e)))), retry)
        }
    }
}

/// Opens a watch from `resource_version`.
async fn step_watch_start(scope: &Scope, resource_version: String) -> (Option<WatcherItem>, State) {
    let params = scope.config.watch_params();
    match scope
        .client
        .watch(&scope.res, scope.namespace.as_deref(), &params, &resource_version)
        .await
    {
        Ok(stream) => {
            if let Some(OnWatchOpen(f)) = &scope.config.on_watch_open {
                f();
            }
            (
                None,
                State::Watching {
                    resource_version,
                    stream,
                    heard: false,
                },
            )
        }
        // A real apiserver reports a too-old version as an ERROR event, but a seam
        // implementation may refuse the watch outright; either way only a relist helps.
        Err(e) if e.is_gone() => (
            Some(Err(WatcherError::WatchStartFailed(to_kube_error(e)))),
            State::Empty,
        ),
        Err(e) => {
            tracing::debug!(resource = %scope.res.plural, error = %e, "watcher watch start failed");
            (
                Some(Err(WatcherError::WatchStartFailed(to_kube_error(e)))),
                State::InitListed { resource_version },
            )
        }
    }
}

/// Takes the next event off an open watch.
async fn step_watching(
    scope: &Scope,
    resource_version: String,
    mut stream: WatchStream,
    heard: bool,
    backoff: &mut dyn Backoff,
) -> (Option<WatcherItem>, State) {
    let Some(item) = next_with_idle_timeout(&mut stream, scope.config.timeout_seconds).await else {
        // A watch that answers 200 and ends without an event (a proxy closing it, a broken
        // server) would otherwise be reopened at once, for ever: back off as after an error.
        // One that delivered something (a quiet watch timing out after its bookmarks) is
        // healthy and resumes at once.
        if heard {
            backoff.reset();
        } else if let Some(delay) = backoff.next() {
            tracing::debug!(resource = %scope.res.plural, ?delay, "watch ended without an event; backing off");
            tokio::time::sleep(delay).await;
        }
        return (None, State::InitListed { resource_version });
    };
    match item {
        Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)) => applied(obj, Event::Apply, stream),
        Ok(WatchEvent::Deleted(obj)) => applied(obj, Event::Delete, stream),
        Ok(WatchEvent::Bookmark(bookmark)) => (
            None,
            State::Watching {
                resource_version: bookmark.metadata.resource_version,
                stream,
                heard: true,
            },
        ),
        Ok(WatchEvent::Error(status)) => {
            let next = if status.code == 410 {
                State::Empty
            } else {
                State::Watching {
                    resource_version,
                    stream,
                    heard,
                }
            };
            (Some(Err(WatcherError::WatchError(status))), next)
        }
        Err(e) if e.is_gone() => (
            Some(Err(WatcherError::WatchError(Box::new(e.to_status())))),
            State::Empty,
        ),
        Err(e) => {
            tracing::debug!(resource = %scope.res.plural, error = %e, "watch stream failed");
            let next = State::Watching {
                resource_version,
                stream,
                heard,
            };
            (Some(Err(WatcherError::WatchFailed(to_kube_error(e)))), next)
        }
    }
}

/// An object event: remembers its resourceVersion as the resume point.
fn applied(
    obj: DynamicObject,
    event: fn(DynamicObject) -> Event<DynamicObject>,
    stream: WatchStream,
) -> (Option<WatcherItem>, State) {
    match obj.resource_version().filter(|rv| !rv.is_empty()) {
        Some(resource_version) => (
            Some(Ok(event(obj))),
            State::Watching {
                resource_version,
                stream,
                heard: true,
            },
        ),
        None => (Some(Err(WatcherError::NoResourceVersion)), State::Empty),
    }
}

/// The next watch item, or `None` when the stream ends or stays silent past its timeout.
async fn next_with_idle_timeout(
    stream: &mut WatchStream,
    timeout_seconds: u32,
) -> Option<crate::Result<WatchEvent<DynamicObject>>> {
    if timeout_seconds == 0 {
        return stream.next().await;
    }
    let idle = Duration::from_secs(u64::from(timeout_seconds)) + WATCH_IDLE_MARGIN;
    tokio::time::timeout(idle, stream.next()).await.ok().flatten()
}

#[cfg(test)]
mod tests {
    use parking_lot::Mutex;

    use async_trait::async_trait;
    use futures::{StreamExt, future, stream};
    use kube::{
        api::{DeleteParams, ObjectList, Patch, PatchParams, PostParams},
        core::{
            ListMeta, Status, TypeMeta,
            watch::{Bookmark, BookmarkMeta},
        },
        runtime::reflector::{self, store::Writer},
    };
    use tokio::time::Instant;

    use super::*;
    use crate::{Discovery, Result};

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    fn widget(name: &str, rv: &str) -> DynamicObject {
        let mut obj = DynamicObject::new(name, &widgets()).within("ns1");
        obj.metadata.resource_version = Some(rv.to_string());
        obj
    }

    fn page(items: Vec<DynamicObject>, rv: &str, continue_token: Option<&str>) -> Result<ObjectList<DynamicObject>> {
        Ok(ObjectList {
            types: TypeMeta {
                api_version: "example.org/v1".into(),
                kind: "WidgetList".into(),
            },
            metadata: ListMeta {
                resource_version: Some(rv.to_string()),
                continue_: continue_token.map(str::to_string),
                ..ListMeta::default()
            },
            items,
        })
    }

    fn bookmark(rv: &str) -> Result<WatchEvent<DynamicObject>> {
        Ok(WatchEvent::Bookmark(Bookmark {
            types: TypeMeta {
                api_version: "example.org/v1".into(),
                kind: "Widget".into(),
            },
            metadata: BookmarkMeta {
                resource_version: rv.to_string(),
                annotations: Default::default(),
            },
        }))
    }

    fn gone_event() -> Result<WatchEvent<DynamicObject>> {
        Ok(WatchEvent::Error(Box::new(
            Status::failure("too old resource version: 5", "Expired").with_code(410),
        )))
    }

    fn transport() -> Error {
        Error::Transport("connection reset by peer".into())
    }

    /// One scripted answer to a watch call.
    enum WatchScript {
        /// The watch call itself fails.
        Refuse(Error),
        /// The watch delivers these items, then closes.
        Close(Vec<Result<WatchEvent<DynamicObject>>>),
        /// The watch delivers these items, then stays open and silent.
        Hang(Vec<Result<WatchEvent<DynamicObject>>>),
    }

    /// What the watcher asked the cluster.
    #[derive(Debug, Clone, PartialEq)]
    enum Call {
        List {
            continue_token: Option<String>,
            limit: Option<u32>,
            labels: Option<String>,
        },
        Watch {
            resource_version: String,
            bookmarks: bool,
            labels: Option<String>,
            timeout: Option<u32>,
        },
    }

    /// A `ClusterClient` that answers list and watch from a script and records every call;
    /// once a script runs out, calls never return (a quiet cluster).
    #[derive(Default)]
    struct ScriptedCluster {
        lists: Mutex<VecDeque<Result<ObjectList<DynamicObject>>>>,
        watches: Mutex<VecDeque<WatchScript>>,
        calls: Mutex<Vec<Call>>,
    }

    impl ScriptedCluster {
        fn new(lists: Vec<Result<ObjectList<DynamicObject>>>, watches: Vec<WatchScript>) -> Arc<ScriptedCluster> {
            Arc::new(ScriptedCluster {
                lists: Mutex::new(lists.into()),
                watches: Mutex::new(watches.into()),
                calls: Mutex::default(),
            })
        }

        fn calls(&self) -> Vec<Call> {
            self.calls.lock().clone()
        }

        fn watch_versions(&self) -> Vec<String> {
            self.calls()
                .into_iter()
                .filter_map(|c| match c {
                    Call::Watch { resource_version, .. } => Some(resource_version),
                    Call::List { .. } => None,
                })
                .collect()
        }

        fn continue_tokens(&self) -> Vec<Option<String>> {
            self.calls()
                .into_iter()
                .filter_map(|c| match c {
                    Call::List { continue_token, .. } => Some(continue_token),
                    Call::Watch { .. } => None,
                })
                .collect()
        }
    }

    fn unscripted<T>() -> Result<T> {
        Err(Error::MethodNotAllowed {
            message: "not scripted".into(),
        })
    }

    #[async_trait]
    impl ClusterClient for ScriptedCluster {
        async fn get(&self, _: &ApiResource, _: Option<&str>, _: &str) -> Result<DynamicObject> {
            unscripted()
        }

        async fn list(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            params: &ListParams,
        ) -> Result<ObjectList<DynamicObject>> {
            self.calls.lock().push(Call::List {
                continue_token: params.continue_token.clone(),
                limit: params.limit,
                labels: params.label_selector.clone(),
            });
            let answer = self.lists.lock().pop_front();
            match answer {
                Some(answer) => answer,
                None => future::pending().await,
            }
        }

        async fn watch(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            params: &WatchParams,
            resource_version: &str,
        ) -> Result<WatchStream> {
            self.calls.lock().push(Call::Watch {
                resource_version: resource_version.to_string(),
                bookmarks: params.bookmarks,
                labels: params.label_selector.clone(),
                timeout: params.timeout,
            });
            let answer = self.watches.lock().pop_front();
            match answer {
                Some(WatchScript::Refuse(e)) => Err(e),
                Some(WatchScript::Close(items)) => Ok(stream::iter(items).boxed()),
                Some(WatchScript::Hang(items)) => Ok(stream::iter(items).chain(stream::pending()).boxed()),
                None => future::pending().await,
            }
        }

        async fn create(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            unscripted()
        }

        async fn replace(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            unscripted()
        }

        async fn replace_status(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            unscripted()
        }

        async fn patch(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &Patch<serde_json::Value>,
            _: &PatchParams,
        ) -> Result<DynamicObject> {
            unscripted()
        }

        async fn patch_status(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &Patch<serde_json::Value>,
            _: &PatchParams,
        ) -> Result<DynamicObject> {
            unscripted()
        }

        async fn delete(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DeleteParams,
        ) -> Result<Option<DynamicObject>> {
            unscripted()
        }

        async fn create_subresource(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &str,
            _: &serde_json::Value,
        ) -> Result<serde_json::Value> {
            unscripted()
        }

        async fn discovery(&self) -> Result<Discovery> {
            unscripted()
        }

        async fn openapi_v3(&self, _: &str, _: &str) -> Result<serde_json::Value> {
            unscripted()
        }
    }

    fn quick() -> WatcherConfig {
        WatcherConfig::default().backoff(BackoffPolicy::Immediate)
    }

    fn start(cluster: &Arc<ScriptedCluster>, config: WatcherConfig) -> impl Stream<Item = WatcherItem> + Unpin {
        let client: Arc<dyn ClusterClient> = cluster.clone();
        Box::pin(watcher(client, widgets(), Some("ns1".into()), config))
    }

    fn describe_obj(obj: &DynamicObject) -> String {
        format!("{}@{}", obj.name_any(), obj.resource_version().unwrap_or_default())
    }

    fn describe(item: WatcherItem) -> String {
        match item {
            Ok(Event::Init) => "Init".into(),
            Ok(Event::InitApply(o)) => format!("InitApply({})", describe_obj(&o)),
            Ok(Event::InitDone) => "InitDone".into(),
            Ok(Event::Apply(o)) => format!("Apply({})", describe_obj(&o)),
            Ok(Event::Delete(o)) => format!("Delete({})", describe_obj(&o)),
            Err(e) => {
                let step = match &e {
                    WatcherError::InitialListFailed(_) => "InitialListFailed",
                    WatcherError::WatchStartFailed(_) => "WatchStartFailed",
                    WatcherError::WatchError(_) => "WatchError",
                    WatcherError::WatchFailed(_) => "WatchFailed",
                    WatcherError::NoResourceVersion => "NoResourceVersion",
                };
                format!("Err({step}:{})", into_seam_error(e).code())
            }
        }
    }

    /// The next `n` items, described; fails if they do not all arrive within an hour of (paused) time.
    async fn next_n(stream: &mut (impl Stream<Item = WatcherItem> + Unpin), n: usize) -> Vec<String> {
        let items = tokio::time::timeout(Duration::from_secs(3600), stream.take(n).collect::<Vec<_>>())
            .await
            .expect("watcher stalled before yielding the expected events");
        items.into_iter().map(describe).collect()
    }

    /// Lets the watcher run until it blocks on the (exhausted) script, then checks nothing came out.
    async fn settle(stream: &mut (impl Stream<Item = WatcherItem> + Unpin)) {
        let next = tokio::time::timeout(Duration::from_secs(1), stream.next()).await;
        assert!(next.is_err(), "unexpected item {:?}", next.map(|i| i.map(describe)));
    }

    #[tokio::test(start_paused = true)]
    async fn initial_list_pages_through_continue_tokens_then_watches_from_its_version() {
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "3"), widget("b", "4")], "10", Some("c1")),
                page(vec![widget("c", "9")], "10", None),
            ],
            vec![WatchScript::Hang(vec![])],
        );
        let mut events = start(&cluster, quick().labels("app=web").page_size(2));
        assert_eq!(
            next_n(&mut events, 5).await,
            ["Init", "InitApply(a@3)", "InitApply(b@4)", "InitApply(c@9)", "InitDone"]
        );
        settle(&mut events).await;
        let list = |continue_token: Option<&str>| Call::List {
            continue_token: continue_token.map(str::to_string),
            limit: Some(2),
            labels: Some("app=web".into()),
        };
        assert_eq!(
            cluster.calls(),
            [
                list(None),
                list(Some("c1")),
                Call::Watch {
                    resource_version: "10".into(),
                    bookmarks: true,
                    labels: Some("app=web".into()),
                    timeout: Some(290),
                }
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn default_config_pages_by_500_with_bookmarks_and_290s_timeout() {
        let config = WatcherConfig::default();
        assert_eq!(config.page_size, Some(500));
        assert!(config.bookmarks);
        assert_eq!(config.timeout_seconds, 290);
        assert_eq!(config.backoff, BackoffPolicy::KubeDefault);
        assert_eq!(config.list_params(None).limit, Some(500));
        assert!(config.watch_params().bookmarks);
        assert!(!config.clone().disable_bookmarks().watch_params().bookmarks);
    }

    #[tokio::test(start_paused = true)]
    async fn watch_events_become_apply_and_delete() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![WatchScript::Hang(vec![
                Ok(WatchEvent::Added(widget("a", "6"))),
                Ok(WatchEvent::Modified(widget("a", "7"))),
                Ok(WatchEvent::Deleted(widget("a", "8"))),
            ])],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 5).await,
            ["Init", "InitDone", "Apply(a@6)", "Apply(a@7)", "Delete(a@8)"]
        );
        assert_eq!(cluster.watch_versions(), ["5"]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_ends_without_an_event_is_reopened_with_backoff() {
        // A server (or a proxy) answering every watch with 200 and an empty body.
        let empties = (0..1000).map(|_| WatchScript::Close(vec![])).collect();
        let cluster = ScriptedCluster::new(vec![page(vec![], "5", None)], empties);
        let config = WatcherConfig::default().backoff(BackoffPolicy::Exponential {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(60),
            factor: 2.0,
        });
        let mut events = start(&cluster, config);
        assert_eq!(next_n(&mut events, 2).await, ["Init", "InitDone"]);
        let started = Instant::now();
        let drained = tokio::time::timeout(Duration::from_secs(30), async {
            while events.next().await.is_some() {}
        });
        assert!(drained.await.is_err(), "the watcher never ends by itself");
        let watches = cluster.watch_versions();
        // Reopened after 1, 2, 4 and 8 s: five watches in 30 s, not a thousand at once.
        assert_eq!(
            watches.len(),
            5,
            "watches in {:?}: {}",
            started.elapsed(),
            watches.len()
        );
        assert!(
            watches.iter().all(|rv| rv == "5"),
            "every retry resumes where the list ended"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_watch_that_delivered_events_is_resumed_at_once() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Close(vec![Ok(WatchEvent::Added(widget("a", "6")))]),
                WatchScript::Hang(vec![]),
            ],
        );
        let config = WatcherConfig::default().backoff(BackoffPolicy::Exponential {
            initial: Duration::from_secs(60),
            max: Duration::from_secs(60),
            factor: 2.0,
        });
        let mut events = start(&cluster, config);
        assert_eq!(next_n(&mut events, 3).await, ["Init", "InitDone", "Apply(a@6)"]);
        settle(&mut events).await;
        assert_eq!(
            cluster.watch_versions(),
            ["5", "6"],
            "resumed within a second, no backoff"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_quiet_watch_that_only_sent_bookmarks_is_resumed_at_once_and_resets_the_backoff() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Close(vec![]),
                WatchScript::Close(vec![bookmark("9")]),
                WatchScript::Close(vec![]),
                WatchScript::Hang(vec![]),
            ],
        );
        let config = WatcherConfig::default().backoff(BackoffPolicy::Exponential {
            initial: Duration::from_secs(10),
            max: Duration::from_secs(600),
            factor: 2.0,
        });
        let mut events = start(&cluster, config);
        assert_eq!(next_n(&mut events, 2).await, ["Init", "InitDone"]);
        // 10 s after the first empty watch, none after the bookmark, 10 s (not 20) after the
        // next empty one: all four watches within 25 s.
        let quiet = tokio::time::timeout(Duration::from_secs(25), events.next());
        assert!(quiet.await.is_err(), "nothing to yield");
        assert_eq!(cluster.watch_versions(), ["5", "5", "9", "9"]);
    }

    #[tokio::test(start_paused = true)]
    async fn bookmark_moves_the_resume_version_silently() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Close(vec![Ok(WatchEvent::Added(widget("a", "6"))), bookmark("20")]),
                WatchScript::Hang(vec![Ok(WatchEvent::Added(widget("b", "21")))]),
            ],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 4).await,
            ["Init", "InitDone", "Apply(a@6)", "Apply(b@21)"]
        );
        assert_eq!(cluster.watch_versions(), ["5", "20"]);
        assert_eq!(cluster.continue_tokens().len(), 1, "a bookmark must not cause a relist");
    }

    #[tokio::test(start_paused = true)]
    async fn ended_watch_resumes_from_the_last_seen_version_without_relisting() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![widget("a", "4")], "5", None)],
            vec![
                WatchScript::Close(vec![
                    Ok(WatchEvent::Added(widget("b", "6"))),
                    Ok(WatchEvent::Modified(widget("b", "7"))),
                ]),
                WatchScript::Hang(vec![Ok(WatchEvent::Deleted(widget("b", "8")))]),
            ],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 6).await,
            [
                "Init",
                "InitApply(a@4)",
                "InitDone",
                "Apply(b@6)",
                "Apply(b@7)",
                "Delete(b@8)"
            ]
        );
        assert_eq!(cluster.watch_versions(), ["5", "7"]);
        assert_eq!(cluster.continue_tokens().len(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn gone_on_the_watch_stream_relists_from_scratch() {
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "3")], "5", None),
                page(vec![widget("b", "9")], "30", None),
            ],
            vec![
                WatchScript::Hang(vec![Err(Error::gone("5"))]),
                WatchScript::Hang(vec![]),
            ],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 7).await,
            [
                "Init",
                "InitApply(a@3)",
                "InitDone",
                "Err(WatchError:410)",
                "Init",
                "InitApply(b@9)",
                "InitDone"
            ]
        );
        settle(&mut events).await;
        assert_eq!(cluster.watch_versions(), ["5", "30"]);
    }

    #[tokio::test(start_paused = true)]
    async fn gone_as_a_watch_error_event_or_a_refused_watch_relists() {
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "3")], "5", None),
                page(vec![], "30", None),
                page(vec![widget("c", "40")], "41", None),
            ],
            vec![
                WatchScript::Hang(vec![gone_event()]),
                WatchScript::Refuse(Error::gone("30")),
                WatchScript::Hang(vec![]),
            ],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 10).await,
            [
                "Init",
                "InitApply(a@3)",
                "InitDone",
                "Err(WatchError:410)",
                "Init",
                "InitDone",
                "Err(WatchStartFailed:410)",
                "Init",
                "InitApply(c@40)",
                "InitDone"
            ]
        );
        settle(&mut events).await;
        assert_eq!(cluster.watch_versions(), ["5", "30", "41"]);
    }

    #[tokio::test(start_paused = true)]
    async fn other_watch_errors_are_yielded_and_the_stream_keeps_going() {
        let forbidden = Status::failure("nope", "Forbidden").with_code(403);
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![WatchScript::Hang(vec![
                Err(transport()),
                Ok(WatchEvent::Error(Box::new(forbidden))),
                Ok(WatchEvent::Added(widget("a", "6"))),
            ])],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 5).await,
            [
                "Init",
                "InitDone",
                "Err(WatchFailed:0)",
                "Err(WatchError:403)",
                "Apply(a@6)"
            ]
        );
        assert_eq!(cluster.watch_versions(), ["5"]);
    }

    #[tokio::test(start_paused = true)]
    async fn silent_watch_is_restarted_after_its_timeout_and_margin() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Hang(vec![]),
                WatchScript::Hang(vec![Ok(WatchEvent::Added(widget("a", "6")))]),
            ],
        );
        let mut events = start(&cluster, quick().timeout(60));
        assert_eq!(next_n(&mut events, 2).await, ["Init", "InitDone"]);
        let listed = Instant::now();
        assert_eq!(next_n(&mut events, 1).await, ["Apply(a@6)"]);
        assert_eq!(listed.elapsed(), Duration::from_secs(65));
        assert_eq!(cluster.watch_versions(), ["5", "5"]);
    }

    #[tokio::test(start_paused = true)]
    async fn expired_continue_token_restarts_the_list() {
        let expired = Error::Gone {
            message: "The provided continue parameter is too old to display a consistent list result.".into(),
        };
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "1")], "10", Some("c1")),
                Err(expired),
                page(vec![widget("a", "1"), widget("b", "2")], "12", None),
            ],
            vec![WatchScript::Hang(vec![])],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 7).await,
            [
                "Init",
                "InitApply(a@1)",
                "Err(InitialListFailed:410)",
                "Init",
                "InitApply(a@1)",
                "InitApply(b@2)",
                "InitDone"
            ]
        );
        settle(&mut events).await;
        assert_eq!(cluster.continue_tokens(), [None, Some("c1".to_string()), None]);
        assert_eq!(cluster.watch_versions(), ["12"]);
    }

    #[tokio::test(start_paused = true)]
    async fn transient_page_error_retries_the_same_page() {
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "1")], "10", Some("c1")),
                Err(transport()),
                page(vec![widget("b", "2")], "10", None),
            ],
            vec![WatchScript::Hang(vec![])],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 5).await,
            [
                "Init",
                "InitApply(a@1)",
                "Err(InitialListFailed:0)",
                "InitApply(b@2)",
                "InitDone"
            ]
        );
        assert_eq!(
            cluster.continue_tokens(),
            [None, Some("c1".to_string()), Some("c1".to_string())]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn list_without_resource_version_is_an_error_and_relists() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![widget("a", "1")], "", None), page(vec![], "7", None)],
            vec![WatchScript::Hang(vec![])],
        );
        let mut events = start(&cluster, quick());
        assert_eq!(
            next_n(&mut events, 4).await,
            ["Init", "Err(NoResourceVersion:0)", "Init", "InitDone"]
        );
    }

    /// Items with the paused-clock time (since the stream started) at which each arrived.
    async fn timed(stream: &mut (impl Stream<Item = WatcherItem> + Unpin), n: usize) -> Vec<(String, Duration)> {
        let begin = Instant::now();
        let mut out = vec![];
        for _ in 0..n {
            let item = tokio::time::timeout(Duration::from_secs(3600), stream.next())
                .await
                .expect("watcher stalled")
                .expect("watcher ended");
            out.push((describe(item), begin.elapsed()));
        }
        out
    }

    #[tokio::test(start_paused = true)]
    async fn list_errors_back_off_exponentially_and_retry_without_a_second_init() {
        let cluster = ScriptedCluster::new(
            vec![
                Err(transport()),
                Err(transport()),
                page(vec![widget("a", "1")], "5", None),
            ],
            vec![WatchScript::Hang(vec![])],
        );
        let policy = BackoffPolicy::Exponential {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
            factor: 2.0,
        };
        let mut events = start(&cluster, quick().backoff(policy));
        let secs = Duration::from_secs;
        assert_eq!(
            timed(&mut events, 5).await,
            [
                ("Init".to_string(), secs(0)),
                ("Err(InitialListFailed:0)".to_string(), secs(0)),
                ("Err(InitialListFailed:0)".to_string(), secs(1)),
                ("InitApply(a@1)".to_string(), secs(3)),
                ("InitDone".to_string(), secs(3)),
            ]
        );
    }

    #[tokio::test(start_paused = true)]
    async fn watch_start_errors_retry_the_same_version_and_backoff_resets_after_progress() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Refuse(transport()),
                WatchScript::Refuse(transport()),
                WatchScript::Close(vec![Ok(WatchEvent::Added(widget("a", "6")))]),
                WatchScript::Refuse(transport()),
                WatchScript::Hang(vec![Ok(WatchEvent::Added(widget("b", "7")))]),
            ],
        );
        let policy = BackoffPolicy::Exponential {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
            factor: 2.0,
        };
        let mut events = start(&cluster, quick().backoff(policy));
        let secs = Duration::from_secs;
        assert_eq!(
            timed(&mut events, 7).await,
            [
                ("Init".to_string(), secs(0)),
                ("InitDone".to_string(), secs(0)),
                ("Err(WatchStartFailed:0)".to_string(), secs(0)),
                ("Err(WatchStartFailed:0)".to_string(), secs(1)),
                ("Apply(a@6)".to_string(), secs(3)),
                ("Err(WatchStartFailed:0)".to_string(), secs(3)),
                ("Apply(b@7)".to_string(), secs(4)),
            ]
        );
        assert_eq!(cluster.watch_versions(), ["5", "5", "5", "6", "6"]);
        assert_eq!(cluster.continue_tokens().len(), 1);
    }

    /// A throttled watch (429) waits what the server asked before it retries,
    /// when that is longer than its backoff.
    #[tokio::test(start_paused = true)]
    async fn a_throttled_watch_waits_out_retry_after() {
        let throttled = || Error::TooManyRequests {
            message: "too many requests".into(),
            retry_after_seconds: Some(20),
        };
        let cluster = ScriptedCluster::new(
            vec![page(vec![], "5", None)],
            vec![
                WatchScript::Refuse(throttled()),
                WatchScript::Hang(vec![Ok(WatchEvent::Added(widget("a", "6")))]),
            ],
        );
        let policy = BackoffPolicy::Exponential {
            initial: Duration::from_secs(1),
            max: Duration::from_secs(10),
            factor: 2.0,
        };
        let mut events = start(&cluster, quick().backoff(policy));
        let secs = Duration::from_secs;
        assert_eq!(
            timed(&mut events, 4).await,
            [
                ("Init".to_string(), secs(0)),
                ("InitDone".to_string(), secs(0)),
                ("Err(WatchStartFailed:429)".to_string(), secs(0)),
                ("Apply(a@6)".to_string(), secs(21)),
            ],
            "retried after the 20 s the server asked and the 1 s backoff on top, not the backoff alone"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn kube_default_backoff_runs_on_the_paused_clock() {
        let cluster = ScriptedCluster::new(vec![Err(transport()), page(vec![], "5", None)], vec![]);
        let mut events = start(&cluster, WatcherConfig::default());
        let items = timed(&mut events, 3).await;
        assert_eq!(items[1].0, "Err(InitialListFailed:0)");
        assert_eq!(items[2].0, "InitDone");
        // client-go's first delay: 800ms plus up to 800ms of jitter.
        let waited = items[2].1 - items[1].1;
        assert!(
            waited >= Duration::from_millis(800) && waited < Duration::from_millis(1600),
            "{waited:?}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn applied_objects_works_on_the_stream() {
        let cluster = ScriptedCluster::new(
            vec![page(vec![widget("a", "1"), widget("b", "2")], "5", None)],
            vec![WatchScript::Hang(vec![
                Ok(WatchEvent::Added(widget("c", "6"))),
                Ok(WatchEvent::Deleted(widget("a", "7"))),
                Ok(WatchEvent::Modified(widget("b", "8"))),
            ])],
        );
        let client: Arc<dyn ClusterClient> = cluster.clone();
        let applied = watcher(client, widgets(), Some("ns1".into()), quick()).applied_objects();
        let objects: Vec<String> = tokio::time::timeout(Duration::from_secs(3600), applied.take(4).collect::<Vec<_>>())
            .await
            .expect("applied_objects stalled")
            .into_iter()
            .map(|o| describe_obj(&o.expect("no errors scripted")))
            .collect();
        assert_eq!(objects, ["a@1", "b@2", "c@6", "b@8"]);
    }

    #[tokio::test(start_paused = true)]
    async fn reflector_store_ends_up_with_the_live_objects() {
        let cluster = ScriptedCluster::new(
            vec![
                page(vec![widget("a", "1")], "5", Some("c1")),
                page(vec![widget("b", "2")], "5", None),
            ],
            vec![WatchScript::Hang(vec![
                Ok(WatchEvent::Added(widget("c", "6"))),
                Ok(WatchEvent::Deleted(widget("a", "7"))),
                Ok(WatchEvent::Modified(widget("b", "8"))),
            ])],
        );
        let writer: Writer<DynamicObject> = Writer::new(widgets());
        let store = writer.as_reader();
        let client: Arc<dyn ClusterClient> = cluster.clone();
        let events = watcher(client, widgets(), Some("ns1".into()), quick().page_size(1));
        let mut reflected = Box::pin(reflector::reflector(writer, events));
        // Init, 2 InitApply, InitDone and 3 watch events.
        for _ in 0..7 {
            let item = tokio::time::timeout(Duration::from_secs(3600), reflected.next())
                .await
                .expect("reflector stalled");
            assert!(matches!(item, Some(Ok(_))), "{:?}", item.map(|i| i.map(|_| ())));
        }
        tokio::time::timeout(Duration::from_secs(1), store.wait_until_ready())
            .await
            .expect("store never became ready")
            .expect("writer dropped");
        let mut live: Vec<String> = store.state().iter().map(|o| describe_obj(o)).collect();
        live.sort();
        assert_eq!(live, ["b@8", "c@6"]);
    }

    #[test]
    fn seam_errors_survive_the_trip_through_kube_errors() {
        let forbidden = Error::forbidden("bob", "list", "widgets", "example.org", Some("ns1"), None);
        for err in [transport(), Error::Timeout("slow".into()), forbidden, Error::gone("3")] {
            let back = from_kube_error(to_kube_error(err.clone()));
            assert_eq!((back.code(), back.to_string()), (err.code(), err.to_string()));
            if let (
                Error::Forbidden { verb, resource, .. },
                Error::Forbidden {
                    verb: v, resource: r, ..
                },
            ) = (&err, &back)
            {
                assert_eq!((verb, resource), (v, r));
            }
            assert!(matches!(
                (&err, &back),
                (Error::Transport(_), Error::Transport(_))
                    | (Error::Timeout(_), Error::Timeout(_))
                    | (Error::Forbidden { .. }, Error::Forbidden { .. })
                    | (Error::Gone { .. }, Error::Gone { .. })
            ));
        }
        let gone = into_seam_error(WatcherError::WatchError(Box::new(Error::gone("3").to_status())));
        assert!(gone.is_gone());
    }
}
