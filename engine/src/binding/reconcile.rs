//! One reconcile of one binding: the Connection → its namespaces → each API (exported? scope?
//! precedence? schema delivered?) → a syncer per served API → status. Unbinding lives in
//! [`super::unbind`].

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::conditions::ConditionStatus;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, condition, reason};
use kbind_api::placement::{allows_namespace, covers, precedence};
use kbind_api::{Binding, ClusterBinding, Connection, ExportedApi, ResourceScope, conditions};
use kbind_cluster::Error;
use kube::runtime::controller::Action;
use kube::runtime::reflector::{ObjectRef, Store};

use super::placement::{Placement, live, placement, region};
use super::schema::{Delivery, consumer_crd, deliver, resource_of};
use super::stale;
use super::status::{ApiReport, ClaimChange, Observed, Report, desired_status, write_status};
use super::view::BindingView;
use crate::connection::finalize::ensure_cleanup;
use crate::context::Context;
use crate::events::Recorder;
use crate::link::Links;
use crate::provider::EngagedProvider;
use crate::related;
use crate::sync::{ApiSyncerSpec, BindingKind, SyncerKey, Syncers};

/// How soon a binding whose related copies or blocked unbind still need passes looks again.
pub(crate) const REPORT_INTERVAL: Duration = Duration::from_secs(10);
/// How soon a binding waiting for something (a CRD to be Established, a drain) looks again.
pub(crate) const WAIT_INTERVAL: Duration = Duration::from_secs(2);
/// How long one reconcile waits for the binding and Connection stores' first lists.
const STORES_WAIT: Duration = Duration::from_secs(30);
/// How soon a pass whose status write met a newer binding looks again.
const STALE_RETRY: Duration = Duration::from_secs(1);

/// Why a reconcile failed (consumer-side reads and writes; provider trouble is a condition).
#[derive(Debug, thiserror::Error)]
pub enum BindingError {
    /// A read or write on the consumer failed.
    #[error("failed to read or update the binding's objects on the consumer: {0}")]
    Consumer(#[from] Error),
    /// Draining failed.
    #[error("failed to drain the binding: {0}")]
    Drain(#[from] crate::sync::SyncError),
    /// Removing related copies failed.
    #[error("failed to remove the binding's related copies: {0}")]
    Related(#[from] crate::related::RelatedError),
}

/// The binding controller's state, which every binding reconcile shares: the caches it reads, the
/// provider links, and the syncers it runs.
pub struct Binder {
    pub(crate) ctx: Context,
    pub(crate) links: Links,
    pub(crate) syncers: Syncers,
    pub(crate) connections: Store<Connection>,
    pub(crate) cluster_bindings: Store<ClusterBinding>,
    pub(crate) bindings: Store<Binding>,
    /// What earlier passes found out, so healthy passes do not ask again.
    pub(crate) recall: super::recall::Recall,
    /// Whether the Connection store and both binding stores have listed.
    pub(crate) listed: [crate::listed::Listed; 3],
    /// The watches of the provider CRDs pulled, which wake the bindings on a change.
    pub(crate) schema_followers: super::triggers::SchemaFollowers,
    /// The related-resource syncers (watch-driven; a pass only ensures them and reads reports).
    pub(crate) related: related::RelatedSyncers,
}

impl Binder {
    /// The Connection named `name`, from the cache.
    pub(crate) fn connection(&self, name: &str) -> Option<Arc<Connection>> {
        self.connections.get(&ObjectRef::new(name))
    }

    /// The binding `view` is a version of, as the cache holds it now (same UID): never older
    /// than the object the controller handed over, which came from that cache.
    pub(crate) fn current(&self, view: &BindingView) -> Option<BindingView> {
        let uid = view.meta.uid.as_deref()?;
        let cached = match view.namespace() {
            None => self
                .cluster_bindings
                .get(&ObjectRef::new(&view.name()))
                .map(|b| BindingView::from(b.as_ref())),
            Some(ns) => self
                .bindings
                .get(&ObjectRef::new(&view.name()).within(&ns))
                .map(|b| BindingView::from(b.as_ref())),
        }?;
        (cached.meta.uid.as_deref() == Some(uid)).then_some(cached)
    }

    /// Every binding in the caches (both kinds).
    pub(crate) fn all_bindings(&self) -> Vec<BindingView> {
        let cluster = self
            .cluster_bindings
            .state()
            .into_iter()
            .map(|b| BindingView::from(b.as_ref()));
        let namespaced = self.bindings.state().into_iter().map(|b| BindingView::from(b.as_ref()));
        cluster.chain(namespaced).collect()
    }

    /// Whether every store an unbind decision reads (Connections and both binding kinds) has
    /// finished its first list: an empty store that has not synced yet would read as "no other
    /// binding serves this", and that answer deletes (contract §8.9).
    pub(crate) fn stores_ready(&self) -> bool {
        self.listed.iter().all(crate::listed::Listed::is_listed)
    }

    /// Waits (bounded) until every store a placement reads has listed; whether they have.
    pub(crate) async fn wait_stores_ready(&self) -> bool {
        for listed in &self.listed {
            if !listed.wait(STORES_WAIT).await {
                return false;
            }
        }
        true
    }

    /// Whether `b` may serve anything: a Binding only when its Connection (as cached) allows its
    /// namespace (contract §2); a ClusterBinding always.
    pub(crate) fn may_serve(&self, b: &BindingView) -> bool {
        match b.namespace() {
            None => true,
            Some(ns) => self
                .connection(&b.spec.connection_ref.name)
                .is_some_and(|c| namespace_allowed(&c, &ns)),
        }
    }
}

/// Whether the Connection lets Bindings of namespace `ns` use it (contract §2).
pub(crate) fn namespace_allowed(conn: &Connection, ns: &str) -> bool {
    let allowed = conn
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(annotation::BINDING_NAMESPACES));
    allows_namespace(allowed.map(String::as_str), ns)
}

/// The binding that serves `api` through `connection` for objects `view` covers, when it is
/// not `view` itself: a ClusterBinding wins over Bindings, and among equals the oldest (then
/// the first by name) wins, so exactly one syncer runs per object.
/// `all` is a snapshot of the binding caches, taken once per pass.
pub(crate) fn served_by_other(shared: &Binder, all: &[BindingView], view: &BindingView, api: &str) -> Option<String> {
    let connection = &view.spec.connection_ref.name;
    let rank = |b: &BindingView| {
        precedence(
            b.namespace().as_deref(),
            b.meta.creation_timestamp.as_ref().map(|t| t.0),
            &b.name(),
        )
    };
    let covered = view.namespace();
    live(shared, all, connection, api)
        .filter(|b| covers(b.namespace().as_deref(), covered.as_deref()))
        // A binding another Connection keeps out of the API serves nothing of it.
        .filter(|b| b.reference() == view.reference() || placement(shared, all, b, api) == Placement::Ours)
        .min_by_key(|b| rank(b))
        .filter(|winner| winner.reference() != view.reference())
        .map(|winner| winner.display())
}

/// Whether Connection `connection` has a live binding of `api` that it may serve.
pub(crate) fn binds_api(shared: &Binder, all: &[BindingView], connection: &str, api: &str) -> bool {
    live(shared, all, connection, api).next().is_some()
}

/// What a drain of `view`'s objects of `api` must leave alone because another live binding
/// serves it (contract §4 "unbind", §8.8: a hand-over keeps every copy with its UID).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Successors {
    /// Another binding serves everything `view` covers (named for logs).
    All(String),
    /// Live Bindings serve these namespaces; the rest is `view`'s to drain.
    Namespaces(BTreeSet<String>),
}

/// Who takes over `view`'s objects of `api` once `view` is gone: another ClusterBinding, or a
/// Binding of `view`'s namespace, takes everything; for a ClusterBinding, every live Binding of
/// the API through the same Connection in a namespace that Connection allows takes its
/// namespace. Only a namespaced API can be served by a Binding.
pub(crate) fn successors(shared: &Binder, view: &BindingView, api: &str, namespaced: bool) -> Successors {
    let all = shared.all_bindings();
    if let Some(other) = served_by_other(shared, &all, view, api) {
        return Successors::All(other);
    }
    if view.kind != BindingKind::Cluster
        || !namespaced
        || crate::planted::planted(crate::planted::Plant::DrainIgnoresNamespacedSuccessors)
    {
        return Successors::Namespaces(BTreeSet::new());
    }
    let connection = &view.spec.connection_ref.name;
    let namespaces = live(shared, &all, connection, api)
        .filter(|b| b.kind == BindingKind::Namespaced)
        .filter(|b| placement(shared, &all, b, api) == Placement::Ours)
        .filter_map(|b| b.namespace())
        .collect();
    Successors::Namespaces(namespaces)
}

/// Reconciles one binding of either kind.
pub async fn reconcile(view: BindingView, shared: Arc<Binder>) -> Result<Action, BindingError> {
    if view.is_deleting() {
        return super::unbind::unbind(&view, &shared).await;
    }
    // Placement reads every binding: an empty store that has not listed yet reads as "no rival"
    // (after a restart a refused ClusterBinding would serve everything). Nothing is decided,
    // written or started until all of them have.
    if !shared.wait_stores_ready().await {
        return Ok(Action::requeue(shared.ctx.jitter(&view.display(), WAIT_INTERVAL)));
    }
    // The pass decides on one snapshot: the binding as the store has it now, like every other
    // binding placement reads (the object the controller handed over may be a version older).
    let view = shared.current(&view).unwrap_or(view);
    ensure_cleanup(shared.ctx.consumer.as_ref(), &view.resource(), &view.dynamic()).await?;
    let (mut report, served, starts) = observe(&view, &shared).await?;
    stop_unserved(&shared, &view, &served);
    // An API removed from spec.apis is unbound as a deleted binding unbinds it: its objects
    // drain (copies deleted unless Orphan, finalizers released), and its claim stays in the
    // status until they have, so no other Connection's binding moves in before.
    for api in view.stopped_naming() {
        let draining = match super::unbind::drain_api(&view, &shared, &api, view.is_orphan()).await? {
            super::unbind::Drain::Done => None,
            super::unbind::Drain::InProgress => Some((
                reason::PENDING,
                format!("{api} was removed from spec.apis; its objects drain before it goes"),
            )),
            super::unbind::Drain::Blocked(blocked) => Some((blocked.reason, blocked.message)),
        };
        if let Some((why, message)) = draining {
            report.apis.push(ApiReport::not_synced(&api, why, message));
        }
    }
    let engagement = engagement(&view, &shared, report.connected.status == ConditionStatus::True);
    mark_staleness(&view, &shared, engagement).await?;
    let now = Time(shared.ctx.clock.now());
    let waiting = report.apis.iter().any(|a| a.synced.reason == reason::PENDING);
    // Until the engagement is known (a restart, a leader hand-over), the last status stands:
    // writing "waiting for the provider" and then the same status again is two needless writes.
    if engagement != Engagement::Unknown || view.status.is_none() {
        match write_status(
            shared.ctx.consumer.as_ref(),
            &view,
            desired_status(&view, &report, &now),
        )
        .await
        {
            Ok(()) => {}
            // The binding changed since this pass read it: nothing is started on a stale
            // view; the newer version's event (or this requeue) runs the pass again.
            Err(e) if e.is_conflict() => {
                tracing::debug!(binding = %view.display(), "binding changed during the pass; looking again");
                return Ok(Action::requeue(shared.ctx.jitter(&view.display(), STALE_RETRY)));
            }
            Err(e) => return Err(e.into()),
        }
    }
    // Only now that the claim is in the binding's status (the write above) do its syncers
    // start: a konnector that stops in between restarts with the claim, never with copies
    // written for a claim it did not record.
    for start in starts {
        shared.syncers.ensure(start.spec, start.provider);
    }
    // A wait that grows, jittered by a tenth (a herd of bindings spreads; a backstop must not
    // stretch much): the same helper every retry of the engine uses.
    let backoff = || {
        shared
            .ctx
            .backoff(&view.display(), WAIT_INTERVAL, super::recall::DOWN_MAX)
            .jitter(kbind_cluster::backoff::PERIOD_JITTER)
    };
    let next = match engagement {
        Engagement::Engaged => {
            shared.recall.engaged(&view);
            if waiting {
                // The consumer CRD's changes, a binding that goes, Connection and engagement
                // changes wake a waiting API at once; this growing wait is only a safety net.
                shared.recall.next_wait_delay(&view, backoff)
            } else {
                shared.recall.settled(&view);
                // Schema changes, syncer and related-copy reports, Connection and engagement
                // changes trigger a pass; this is only the backstop.
                shared
                    .ctx
                    .jitter(&view.display(), shared.ctx.config.rediscovery_interval)
            }
        }
        // Engagement and Connection changes trigger a pass at once; until one comes there is
        // nothing new to look at, so the waits grow instead of relisting every few seconds.
        Engagement::Down | Engagement::Unknown => shared.recall.next_down_delay(&view, backoff),
    };
    Ok(Action::requeue(next))
}

/// What a binding knows about its provider's engagement, for `status-stale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engagement {
    /// Engaged and the Connection Ready: marks go.
    Engaged,
    /// Known down: the Connection is gone or not Ready, or engaging it failed. Objects are marked.
    Down,
    /// Not engaged yet, and nothing says the provider is down (a restart or a leader hand-over
    /// before the engager's first pass, or caches not synced): nothing is written either way.
    Unknown,
}

fn engagement(view: &BindingView, shared: &Binder, connected: bool) -> Engagement {
    if connected {
        return Engagement::Engaged;
    }
    if !shared.stores_ready() {
        return Engagement::Unknown;
    }
    let name = &view.spec.connection_ref.name;
    let Some(conn) = shared.connection(name) else {
        return Engagement::Down;
    };
    if !conditions::is_true(conn.conditions(), condition::READY) || shared.links.is_down(name) {
        Engagement::Down
    } else {
        Engagement::Unknown
    }
}

/// While the provider is known to be down, the objects this binding serves get `status-stale`;
/// once it is engaged, the mark goes (swept only while some object may still carry it).
async fn mark_staleness(view: &BindingView, shared: &Binder, engagement: Engagement) -> Result<(), BindingError> {
    if engagement == Engagement::Unknown {
        return Ok(());
    }
    if view.namespace().is_some_and(|ns| {
        shared
            .connection(&view.spec.connection_ref.name)
            .is_some_and(|c| !namespace_allowed(&c, &ns))
    }) {
        return Ok(());
    }
    let consumer = shared.ctx.consumer.as_ref();
    let mut snapshot = None;
    for api in &view.spec.apis {
        if engagement == Engagement::Engaged && !shared.recall.may_be_stale(view, &api.name) {
            continue;
        }
        let all = snapshot.get_or_insert_with(|| shared.all_bindings());
        if served_by_other(shared, all, view, &api.name).is_some()
            || placement(shared, all, view, &api.name) != Placement::Ours
        {
            continue;
        }
        let Some(crd) = consumer_crd(consumer, &api.name).await? else {
            continue;
        };
        let Some((res, namespaced, _)) = resource_of(&crd) else {
            continue;
        };
        // A Binding serves nothing of a cluster-scoped API (ClusterScopedAPIInBinding), and a
        // namespaced list of one is a 404 that would fail the reconcile and freeze the status.
        if view.kind == BindingKind::Namespaced && !namespaced {
            continue;
        }
        let ns = view.namespace();
        if engagement == Engagement::Engaged {
            if stale::clear(consumer, &res, ns.as_deref()).await? {
                shared.recall.swept(view, &api.name);
            }
        } else {
            shared.recall.marked(view, &api.name);
            let recorder = Recorder::new(
                shared.ctx.consumer.clone(),
                shared.ctx.clock.clone(),
                kbind_api::consts::EVENT_COMPONENT,
            );
            stale::mark(consumer, &recorder, &res, ns.as_deref(), &Time(shared.ctx.clock.now())).await?;
        }
    }
    Ok(())
}

/// Stops this binding's syncers whose API is no longer served by it (nothing is deleted).
fn stop_unserved(shared: &Binder, view: &BindingView, served: &BTreeSet<SyncerKey>) {
    let me = view.reference();
    for key in shared.syncers.keys() {
        let mine = key.binding_kind == me.kind && key.binding_namespace == me.namespace && key.binding_name == me.name;
        if mine && !served.contains(&key) {
            shared.syncers.stop(&key);
        }
    }
}

/// A syncer to start once the binding's claim is recorded.
struct Start {
    spec: ApiSyncerSpec,
    provider: Arc<EngagedProvider>,
}

/// Looks at the Connection and every API: the report, the syncers that serve, and those of
/// them to start (or keep) once the status is written.
async fn observe(
    view: &BindingView,
    shared: &Binder,
) -> Result<(Report, BTreeSet<SyncerKey>, Vec<Start>), BindingError> {
    let name = &view.spec.connection_ref.name;
    let all_pending = |reason: &'static str, message: String| {
        view.spec
            .apis
            .iter()
            .map(|a| ApiReport::not_synced(&a.name, reason, message.clone()))
            .collect::<Vec<_>>()
    };
    let Some(conn) = shared.connection(name) else {
        let message = format!("Connection {name} does not exist (yet)");
        let report = Report {
            connected: Observed::not(reason::PENDING, message.clone()),
            apis: all_pending(reason::PENDING, message),
            related: Default::default(),
        };
        return Ok((report, BTreeSet::new(), Vec::new()));
    };
    if conn.metadata.deletion_timestamp.is_some() {
        // Not a wait that ends by itself: the Connection goes only once this binding has.
        let message = format!(
            "Connection {name} is being deleted and waits for this binding to go; nothing syncs meanwhile. \
             Delete this binding (its provider copies are deleted first), or annotate it {}={} to release it \
             without draining",
            annotation::DELETION_POLICY,
            DELETION_POLICY_ORPHAN
        );
        let report = Report {
            connected: Observed::not(reason::CONNECTION_DELETING, message.clone()),
            apis: all_pending(reason::CONNECTION_DELETING, message),
            related: Default::default(),
        };
        return Ok((report, BTreeSet::new(), Vec::new()));
    }
    if !conditions::is_true(conn.conditions(), condition::READY) {
        let why = conditions::find(conn.conditions(), condition::READY)
            .map(|c| format!("{}: {}", c.reason, c.message))
            .unwrap_or_else(|| "no status yet".into());
        let message = format!("Connection {name} is not Ready ({why})");
        let report = Report {
            connected: Observed::not(reason::PENDING, message.clone()),
            apis: all_pending(reason::PENDING, message),
            related: Default::default(),
        };
        return Ok((report, BTreeSet::new(), Vec::new()));
    }
    if let Some(ns) = view.namespace()
        && !namespace_allowed(&conn, &ns)
    {
        let message = format!(
            "Connection {name} does not allow Bindings in namespace {ns}; its annotation {} must list it (or \"*\")",
            annotation::BINDING_NAMESPACES
        );
        let report = Report {
            connected: Observed::ok(format!("Connection {name} is Ready")),
            apis: all_pending(reason::NAMESPACE_NOT_ALLOWED, message),
            related: Default::default(),
        };
        return Ok((report, BTreeSet::new(), Vec::new()));
    }
    let Some(provider) = shared.links.get(name) else {
        let message = format!("waiting for the provider of Connection {name} to be engaged");
        let report = Report {
            connected: Observed::not(reason::PENDING, message.clone()),
            apis: all_pending(reason::PENDING, message),
            related: Default::default(),
        };
        return Ok((report, BTreeSet::new(), Vec::new()));
    };
    let mut report = Report {
        connected: Observed::ok(format!("Connection {name} is Ready")),
        apis: Vec::new(),
        related: Default::default(),
    };
    let mut served = BTreeSet::new();
    let mut starts = Vec::new();
    // One snapshot of the binding caches for the whole pass: each API's placement and
    // precedence read every binding, and a copy per question was most of a pass's CPU at 50
    // Connections.
    let all = shared.all_bindings();
    for api in &view.spec.apis {
        let (api_report, spec) = observe_api(view, shared, &all, &conn, &provider, &api.name).await?;
        report.apis.push(api_report);
        if let Some(spec) = spec {
            served.insert(spec.key());
            starts.push(Start {
                spec,
                provider: provider.clone(),
            });
        }
    }
    // Related resources ride along once the provider is engaged (contract §2).
    report.related = observe_related(view, shared, &conn, &provider).await;
    Ok((report, served, starts))
}

/// Keeps the binding's related-resource syncers running and returns what they know; they
/// converge by themselves on watch events (contract §2).
async fn observe_related(
    view: &BindingView,
    shared: &Binder,
    conn: &Connection,
    provider: &Arc<EngagedProvider>,
) -> related::RelatedReport {
    let uid = conn
        .status
        .as_ref()
        .and_then(|s| s.local_cluster_uid.clone())
        .unwrap_or_default();
    if uid.is_empty() {
        return Default::default();
    }
    // No rule and none of its copies left: nothing to copy or collect, so nothing to run.
    if shared.recall.related_idle(view) {
        return Default::default();
    }
    let binding = view.reference();
    let spec = related::RelatedSpec {
        binding: binding.clone(),
        apis: view.spec.apis.iter().map(|a| a.name.clone()).collect(),
        rules: view.spec.related_resources.clone(),
        policy: view.spec.conflict_policy,
        consumer_cluster_uid: uid,
    };
    shared.related.ensure(spec, provider.clone());
    let report = shared.related.report(&binding);
    shared.recall.related_done(view, report.owned);
    report
}

/// One API of the binding: its report, and the syncer that serves it (started by the caller
/// once the claim is written).
async fn observe_api(
    view: &BindingView,
    shared: &Binder,
    all: &[BindingView],
    conn: &Connection,
    provider: &Arc<EngagedProvider>,
    api: &str,
) -> Result<(ApiReport, Option<ApiSyncerSpec>), BindingError> {
    let exported: Option<&ExportedApi> = conn
        .status
        .as_ref()
        .and_then(|s| s.exported_apis.iter().find(|e| e.name == api));
    let Some(exported) = exported else {
        if crate::planted::planted(crate::planted::Plant::DeleteCrdWhenUnexported) {
            let _ = shared
                .ctx
                .consumer
                .delete(&crate::crdpull::crd_resource(), None, api, &Default::default())
                .await;
        }
        let message = format!(
            "the provider does not export {api} (it must be a CRD labelled core.kbind.io/exported=true that the credentials can read)"
        );
        return Ok((ApiReport::not_synced(api, reason::API_NOT_EXPORTED, message), None));
    };
    if view.kind == BindingKind::Namespaced && exported.scope == ResourceScope::Cluster {
        let message = format!("{api} is cluster-scoped; only a ClusterBinding can bind it");
        return Ok((
            ApiReport::not_synced(api, reason::CLUSTER_SCOPED_API_IN_BINDING, message),
            None,
        ));
    }
    match placement(shared, all, view, api) {
        Placement::Ours => {}
        Placement::Elsewhere {
            connection,
            binding,
            namespace,
        } => {
            let message = format!(
                "{} is served through Connection {connection:?} ({binding}); nothing is synced here. \
                 Each namespace of an API is served through one Connection: unbind it there, or bind another namespace",
                region(api, namespace.as_deref())
            );
            return Ok((
                ApiReport::not_synced(api, reason::BOUND_THROUGH_ANOTHER_CONNECTION, message)
                    .claiming(ClaimChange::Drop),
                None,
            ));
        }
        Placement::HandingOver {
            connection,
            binding,
            namespace,
        } => {
            let message = format!(
                "{} is being handed over from Connection {connection:?}: {binding} is being deleted and drains its \
                 provider copies; syncing through this Connection starts once it is gone (no consumer object is deleted)",
                region(api, namespace.as_deref())
            );
            return Ok((ApiReport::not_synced(api, reason::PENDING, message), None));
        }
    }
    if let Some(other) = served_by_other(shared, all, view, api) {
        let mut report = ApiReport::not_synced(api, reason::AS_EXPECTED, "").claiming(ClaimChange::Take);
        report.synced = Observed::ok(format!("{api} is synced by {other}"));
        return Ok((report, None));
    }
    if super::schema::pulls_crd(conn) {
        shared.schema_followers.follow(provider, api);
    }
    let binds = |connection: &str| binds_api(shared, all, connection, api);
    let served = match deliver(shared.ctx.consumer.as_ref(), conn, exported, provider, &binds).await {
        Ok(Delivery::Serving(served)) => served,
        Ok(Delivery::Refused { reason, message }) => return Ok((ApiReport::not_synced(api, reason, message), None)),
        Ok(Delivery::Waiting(message)) => return Ok((ApiReport::not_synced(api, reason::PENDING, message), None)),
        Err(e) if e.is_forbidden() => {
            let message = format!("the schema of {api} cannot be read or written: {e}");
            return Ok((ApiReport::not_synced(api, reason::FORBIDDEN, message), None));
        }
        Err(e) => {
            let message = format!("the schema of {api} is not delivered yet: {e}");
            return Ok((ApiReport::not_synced(api, reason::PENDING, message), None));
        }
    };
    let spec = ApiSyncerSpec {
        connection: view.spec.connection_ref.name.clone(),
        binding: view.reference(),
        api: api.to_string(),
        resource: served.resource.clone(),
        namespaced: served.namespaced,
        namespace: view.namespace(),
        conflict_policy: view.spec.conflict_policy,
        consumer_cluster_uid: conn
            .status
            .as_ref()
            .and_then(|s| s.local_cluster_uid.clone())
            .unwrap_or_default(),
        status_subresource: served.status_subresource,
    };
    let seen = shared.syncers.report(&spec.key()).unwrap_or_default();
    // Synced only once the syncer follows both sides. A binding already synced keeps saying
    // so while a restarted syncer lists again (nothing is wrong, and a restart must not
    // rewrite every status); a failing list or watch is said either way.
    let was_synced = view
        .status
        .as_ref()
        .and_then(|s| s.bound_api(api))
        .is_some_and(|b| kbind_api::conditions::is_true(&b.conditions, kbind_api::consts::condition::SYNCED));
    let synced = match (&served.blocked, seen.following.lag(api)) {
        (Some(message), _) => Observed::not(reason::SCHEMA_UPDATE_BLOCKED, message.clone()),
        (None, Some(crate::sync::Lag::Failing(message))) => Observed::not(reason::WATCH_FAILED, message),
        (None, Some(crate::sync::Lag::Listing(message))) if !was_synced => Observed::not(reason::PENDING, message),
        // No count in the message: a condition that changes with every synced object rewrites
        // the binding's status after every restart and every create (metrics carry the count).
        (None, _) => Observed::ok(format!("{api} is syncing")),
    };
    let report = ApiReport {
        name: api.to_string(),
        crd_hash: served.crd_hash,
        synced,
        conflicts: seen.conflicts.len(),
        denied: seen.denied.into_iter().collect(),
        claim: ClaimChange::Take,
    };
    Ok((report, Some(spec)))
}
