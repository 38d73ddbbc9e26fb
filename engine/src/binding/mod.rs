//! The binding reconciler for ClusterBindings and Bindings (contract §2, §4): Pending while a
//! dependency is missing, the namespace and scope rules, one binding per object (ClusterBinding
//! over Binding, then the oldest), schema delivery through `crdpull`/`openapi`, one syncer per
//! served API, per-API conditions from the syncers' reports, and unbinding.
//!
//! Machinery: two `Controller::for_stream`s (one per kind) over the seam's watchers; a
//! Connection change triggers the bindings that name it, and an engagement change triggers all
//! of them. Dropping the future (leadership lost) stops every syncer; nothing is deleted.
//!
//! Choices recorded here (see also docs/decisions.md):
//! - Removing an API from `spec.apis` stops its syncer without draining; deleting the binding
//!   drains.
//! - `SchemaUpdateBlocked` keeps the syncer running on the schema the consumer has and reports
//!   `Synced=False` with that reason until a user accepts the change.
//! - A second binding of an API already served for the same objects through the same
//!   Connection reports `Synced=True` naming the binding that syncs them, and runs no syncer.

mod extras;
mod namespaces;
mod placement;
mod recall;
mod reconcile;
mod schema;
mod stale;
mod status;
mod triggers;
mod unbind;
mod view;

use std::collections::BTreeSet;
use std::sync::Arc;

use futures::{Stream, StreamExt};
use kbind_api::{Binding, ClusterBinding};
use kube::runtime::WatchStreamExt;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher::Event;

use crate::connection::stores::{ConsumerStores, StoreChange};
use crate::context::Context;
use crate::link::Links;
use crate::sync::{BindingKind, Syncers};
use crate::typed::typed_watcher;

pub use extras::autobind_name;
pub use reconcile::{Binder, BindingError, reconcile};
pub use view::BindingView;

/// Stops every syncer when the binding controllers stop (leadership lost, shutdown).
struct StopSyncersOnDrop(Syncers);

impl Drop for StopSyncersOnDrop {
    fn drop(&mut self) {
        for key in self.0.keys() {
            self.0.stop(&key);
        }
    }
}

/// Runs the ClusterBinding and Binding reconcilers until the future is dropped, over a
/// Connection store of their own.
pub async fn run(ctx: Context, links: Links, syncers: Syncers) {
    let (stores, feed) = ConsumerStores::new(&ctx);
    tokio::join!(feed, run_shared(ctx, links, syncers, stores));
}

/// [`run`] over the engine's shared Connection store.
pub async fn run_shared(ctx: Context, links: Links, syncers: Syncers, stores: ConsumerStores) {
    let _stop = StopSyncersOnDrop(syncers.clone());
    let connections = stores.connections.store().clone();
    let (cluster_bindings, cluster_writer) = reflector::store::<ClusterBinding>();
    let (bindings, bindings_writer) = reflector::store::<Binding>();
    let client = ctx.consumer.clone();
    // The APIs of bindings being deleted or gone: another Connection's bindings of them may take
    // their namespaces over (several Connections may serve one API).
    let (released_tx, _) = tokio::sync::broadcast::channel::<String>(256);
    let (cluster_listed, bindings_listed) = (crate::listed::Listed::default(), crate::listed::Listed::default());
    let cluster_stream = reflector::reflector(
        cluster_writer,
        typed_watcher::<ClusterBinding>(client.clone(), None, ctx.watcher_config()),
    )
    .inspect(mark_listed(cluster_listed.clone()))
    .inspect(tell_connection(stores.binding_changes.clone(), released_tx.clone()));
    let binding_stream = reflector::reflector(
        bindings_writer,
        typed_watcher::<Binding>(client, None, ctx.watcher_config()),
    )
    .inspect(mark_listed(bindings_listed.clone()))
    .inspect(tell_connection(stores.binding_changes.clone(), released_tx.clone()));
    // One Connection stream feeds both controllers through a broadcast of changed names; the
    // watches of pulled provider CRDs announce their Connection on it too.
    let (changed_tx, _) = tokio::sync::broadcast::channel::<String>(256);
    let shared = Arc::new(Binder {
        related: crate::related::RelatedSyncers::new(ctx.clone(), cluster_bindings.clone(), bindings.clone()),
        ctx,
        links: links.clone(),
        syncers: syncers.clone(),
        connections: connections.clone(),
        cluster_bindings: cluster_bindings.clone(),
        bindings: bindings.clone(),
        recall: Default::default(),
        listed: [stores.connections.listed(), cluster_listed, bindings_listed],
        schema_followers: triggers::SchemaFollowers::new(changed_tx.clone()),
    });

    let related_wakes = triggers::related_wakes(&shared.related);
    // Every change of a consumer CRD wakes the bindings of its API (one waiting for it to be
    // Established, or installed by a user for pullPolicy None, goes on at once).
    let consumer_crds = triggers::consumer_crd_changes(&shared.ctx, released_tx.clone());
    let shared_for_extras = shared.clone();
    let forward = {
        let changed_tx = changed_tx.clone();
        stores.connections.changes().for_each(move |change| {
            if let StoreChange::Applied(conn) | StoreChange::Deleted(conn) = &change {
                let _ = changed_tx.send(conn.metadata.name.clone().unwrap_or_default());
            }
            async {}
        })
    };

    let cluster_controller = Controller::for_stream(cluster_stream.applied_objects(), cluster_bindings.clone())
        .reconcile_on(bindings_where(&released_tx, cluster_bindings.clone(), names_api))
        .reconcile_on(bindings_where(&changed_tx, cluster_bindings.clone(), names_connection))
        .reconcile_on(triggers::wakes_of(
            syncers.report_changes(),
            BindingKind::Cluster,
            cluster_bindings.clone(),
        ))
        .reconcile_on(triggers::wakes_of(
            related_wakes.subscribe(),
            BindingKind::Cluster,
            cluster_bindings.clone(),
        ))
        .reconcile_all_on(engagement_changes(&links))
        .run(reconcile_cluster_binding, error_policy_cluster, shared.clone())
        .for_each(|_| async {});
    let binding_controller = Controller::for_stream(binding_stream.applied_objects(), bindings.clone())
        .reconcile_on(bindings_where(&released_tx, bindings.clone(), names_api))
        .reconcile_on(bindings_where(&changed_tx, bindings.clone(), names_connection))
        .reconcile_on(triggers::wakes_of(
            syncers.report_changes(),
            BindingKind::Namespaced,
            bindings.clone(),
        ))
        .reconcile_on(triggers::wakes_of(
            related_wakes.subscribe(),
            BindingKind::Namespaced,
            bindings.clone(),
        ))
        .reconcile_all_on(engagement_changes(&links))
        .run(reconcile_binding, error_policy_binding, shared.clone())
        .for_each(|_| async {});
    let extras = connection_extras(shared_for_extras, changed_tx.subscribe());
    tokio::join!(forward, cluster_controller, binding_controller, extras, consumer_crds);
}

/// Marks `listed` once the watch has listed.
fn mark_listed<K>(
    listed: crate::listed::Listed,
) -> impl FnMut(&Result<Event<K>, kube::runtime::watcher::Error>) + Send + 'static {
    move |event| {
        if matches!(event, Ok(Event::InitDone)) {
            listed.mark();
        }
    }
}

/// Publishes the Connection name of each binding being deleted or gone, so the Connection
/// reconciler looks again at once (a deleted Connection goes with its last binding), and the
/// APIs of each binding that appears or goes, and those added to or removed from a binding's
/// `spec.apis`, on `apis`, so the other bindings of those APIs (of any Connection) look again
/// at who serves what at once (a binding that newly names an API another Connection serves is
/// refused; one that stops naming it leaves its namespaces to the others).
fn tell_connection<K>(
    tx: tokio::sync::broadcast::Sender<String>,
    apis: tokio::sync::broadcast::Sender<String>,
) -> impl FnMut(&Result<Event<K>, kube::runtime::watcher::Error>) + Send + 'static
where
    K: kube::Resource + Send + 'static,
    for<'a> BindingView: From<&'a K>,
{
    // The APIs each binding (by UID) named when last seen.
    let mut named: std::collections::HashMap<String, BTreeSet<String>> = std::collections::HashMap::new();
    move |event| {
        let (binding, going) = match event {
            Ok(Event::Delete(b)) => (b, true),
            Ok(Event::Apply(b) | Event::InitApply(b)) => (b, b.meta().deletion_timestamp.is_some()),
            _ => return,
        };
        let view = BindingView::from(binding);
        // What it names, and what it still claims (an API removed from its spec drains first):
        // a claim that goes wakes the others too.
        let mut now: BTreeSet<String> = view.spec.apis.iter().map(|a| a.name.clone()).collect();
        now.extend(view.stopped_naming());
        let uid = view.meta.uid.clone().unwrap_or_default();
        let before = if matches!(event, Ok(Event::Delete(_))) {
            named.remove(&uid)
        } else {
            named.insert(uid, now.clone())
        };
        // A binding that appeared (no status yet) may outrank another of its API (a
        // ClusterBinding over a Binding); one that goes may leave its namespaces to others.
        let changed: BTreeSet<&String> = if going || view.status.is_none() {
            now.iter().collect()
        } else {
            before
                .as_ref()
                .map_or(BTreeSet::new(), |b| b.symmetric_difference(&now).collect())
        };
        for api in changed {
            let _ = apis.send(api.clone());
        }
        if going {
            // No Connection reconciler listening (the binding controllers run alone) is fine.
            let _ = tx.send(view.spec.connection_ref.name);
        }
    }
}

/// Whether `b` binds API `api` (its binding through another Connection went: wake it).
fn names_api(b: &BindingView, api: &str) -> bool {
    b.spec.apis.iter().any(|a| a.name == api)
}

/// Whether `b` uses Connection `connection` (which changed: wake it).
fn names_connection(b: &BindingView, connection: &str) -> bool {
    b.spec.connection_ref.name == connection
}

/// Each name received on `tx` (a Connection's, an API's), the bindings of one kind that
/// `names` says name it.
fn bindings_where<K>(
    tx: &tokio::sync::broadcast::Sender<String>,
    store: Store<K>,
    names: fn(&BindingView, &str) -> bool,
) -> impl Stream<Item = ObjectRef<K>> + Send + 'static
where
    K: kube::Resource<DynamicType = ()> + Clone + Send + Sync + 'static,
    for<'a> BindingView: From<&'a K>,
{
    let received = crate::connection::stores::received(tx.subscribe());
    received.flat_map(move |wake| {
        let naming = crate::connection::stores::woken(&store, &wake, |b, name| names(&BindingView::from(b), name));
        futures::stream::iter(naming)
    })
}

/// Runs the per-Connection passes on each Connection change (and each change of a pulled
/// provider CRD), and at the resync interval as a backstop.
async fn connection_extras(shared: Arc<Binder>, mut changed: tokio::sync::broadcast::Receiver<String>) {
    loop {
        let names: Vec<String> = tokio::select! {
            received = changed.recv() => match received {
                Ok(name) => vec![name],
                Err(tokio::sync::broadcast::error::RecvError::Lagged(_)) => shared.connections.state().iter().filter_map(|c| c.metadata.name.clone()).collect(),
                Err(tokio::sync::broadcast::error::RecvError::Closed) => return,
            },
            _ = tokio::time::sleep(shared.ctx.jitter("binding/connection-extras", shared.ctx.config.rediscovery_interval)) => shared.connections.state().iter().filter_map(|c| c.metadata.name.clone()).collect(),
        };
        for name in names {
            let Some(conn) = shared.connection(&name) else { continue };
            if let Err(e) = extras::reconcile_connection(&shared, &conn).await {
                tracing::warn!(connection = %name, error = %e, "pullPolicy All / autoBind pass failed");
            }
        }
    }
}

/// A tick each time a provider is engaged or disengaged.
fn engagement_changes(links: &Links) -> impl Stream<Item = ()> + Send + 'static {
    futures::stream::unfold(links.changes(), |mut rx| async move {
        rx.changed().await.ok()?;
        Some(((), rx))
    })
}

async fn reconcile_cluster_binding(b: Arc<ClusterBinding>, shared: Arc<Binder>) -> Result<Action, BindingError> {
    reconcile(BindingView::from(b.as_ref()), shared).await
}

async fn reconcile_binding(b: Arc<Binding>, shared: Arc<Binder>) -> Result<Action, BindingError> {
    reconcile(BindingView::from(b.as_ref()), shared).await
}

fn error_policy_cluster(b: Arc<ClusterBinding>, error: &BindingError, shared: Arc<Binder>) -> Action {
    error_policy(&BindingView::from(b.as_ref()), error, &shared)
}

fn error_policy_binding(b: Arc<Binding>, error: &BindingError, shared: Arc<Binder>) -> Action {
    error_policy(&BindingView::from(b.as_ref()), error, &shared)
}

fn error_policy(view: &BindingView, error: &BindingError, shared: &Binder) -> Action {
    tracing::warn!(binding = %view.display(), error = %error, "binding reconcile failed");
    Action::requeue(shared.ctx.jitter(&view.display(), reconcile::WAIT_INTERVAL * 5))
}
