//! The Connection reconciler: SecretValid, Connected, PermissionDenied, `exportedAPIs`,
//! Ready, and the cleanup finalizers (contract §2, §4, §5), from one pass of the Connection's
//! provider link (`crate::link`, which owns client, identity, heartbeat, discovery and
//! engagement) per reconcile.
//!
//! Machinery: the engine's one Connection store and one Secret store ([`stores`], shared with
//! the binding reconciler) feed `Controller::for_stream` (kube's
//! `unstable-runtime` feature, enabled in the engine's Cargo.toml); Secrets in the konnector
//! namespace are only a trigger (`watches_stream`) mapped to the Connections that reference
//! them, and are stripped of their data before the mapping, so the trigger queue holds no
//! credentials. Each reconcile reads the Secret from the store. A link's own events (an exported
//! CRD changed on the provider) trigger its Connection too.
//!
//! Choices recorded here (see also docs/decisions.md):
//! - `SchemaInSync` is True once `exportedAPIs` were discovered from the connected provider
//!   with the pinned identity; it does not gate `Ready` (= SecretValid ∧ Connected ∧
//!   ¬PermissionDenied).
//! - While the provider is unreachable or its identity changed, `exportedAPIs` keep their last
//!   discovered value: `Connected=False` is what stops syncers; nothing is deleted anywhere.
//! - Deleting a Connection never deletes anything on the provider, not even the heartbeat
//!   Lease: the issuer may have pre-created it with get/update-only RBAC, and a Lease that stops
//!   being renewed is exactly the signal the reaper watches for.
//! - Identity is read before every provider write of a reconcile unless the link proved since
//!   that it still reaches the pinned cluster: its Lease renewal landed on the version it wrote,
//!   or (another Connection to the same provider renewed this interval) it read the Lease back
//!   at a version the pair wrote. Either way a rebuilt provider is caught at the next heartbeat.

mod announce;
pub(crate) mod finalize;
mod reconcile;
mod status;
pub mod stores;

use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use kbind_api::Connection;
use kbind_cluster::{ApiResource, DynamicObject};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{self, ObjectRef};

use crate::context::Context;
use crate::link::Links;
use stores::{ConsumerStores, StoreChange};

pub use reconcile::{ReconcileError, reconcile};

/// How long to wait before retrying after a failed reconcile or an unreachable provider.
pub const RETRY_INTERVAL: Duration = Duration::from_secs(10);

/// Runs the Connection reconciler until the future is dropped, over stores of its own.
pub async fn run(ctx: Context) {
    let (stores, feed) = ConsumerStores::new(&ctx);
    tokio::join!(feed, run_shared(ctx, stores, Links::new()));
}

/// Runs the Connection reconciler over the engine's shared consumer stores until the future is
/// dropped.
pub async fn run_shared(ctx: Context, stores: ConsumerStores, links: Links) {
    // Leadership lost or shutdown: every link ends (nothing is deleted), the next term starts
    // from `Unlinked`.
    let _drop_links = DropLinksOnDrop(links.clone());
    let store = stores.connections.store().clone();
    let wakes = named_connections(links.wakes(), store.clone());
    let connections = stores.connections.changes().filter_map(|change| async move {
        match change {
            StoreChange::Applied(conn) => Some(Ok::<_, kube::runtime::watcher::Error>(conn.as_ref().clone())),
            StoreChange::Deleted(_) | StoreChange::Synced => None,
        }
    });
    let secret_res = secret_resource();
    let secrets = stores.secrets.changes().filter_map(|change| async move {
        match change {
            StoreChange::Applied(secret) | StoreChange::Deleted(secret) => Some(
                Ok::<_, kube::runtime::watcher::Error>(strip_secret_data(secret.as_ref().clone())),
            ),
            StoreChange::Synced => None,
        }
    });

    let mapper_store = store.clone();
    let shared =
        Arc::new(reconcile::ConnectionReconciler::new(ctx, store.clone(), links).with_secrets(stores.secrets.clone()));
    Controller::for_stream(connections, store)
        .watches_stream_with(
            secrets,
            move |secret: DynamicObject| connections_referencing(&mapper_store, &secret),
            secret_res,
        )
        .reconcile_on(binding_changes(&stores))
        .reconcile_on(wakes)
        .run(reconcile, error_policy, shared)
        .for_each(|result| async move {
            if let Err(e) = result {
                tracing::debug!(error = %e, "connection controller event");
            }
        })
        .await;
}

/// Ends every provider link when the Connection reconciler stops.
struct DropLinksOnDrop(Links);

impl Drop for DropLinksOnDrop {
    fn drop(&mut self) {
        self.0.drop_all();
    }
}

/// The Connections whose bindings are being deleted or went away, as the binding controllers
/// see it (a missed name is caught by the requeue backstop).
fn binding_changes(stores: &ConsumerStores) -> impl futures::Stream<Item = ObjectRef<Connection>> + Send + 'static {
    named_connections(stores.binding_changes.subscribe(), stores.connections.store().clone())
}

/// The Connections named on `rx` (every one after a lag: a missed wake-up is re-delivered).
fn named_connections(
    rx: tokio::sync::broadcast::Receiver<String>,
    store: reflector::Store<Connection>,
) -> impl futures::Stream<Item = ObjectRef<Connection>> + Send + 'static {
    stores::received(rx).flat_map(move |wake| {
        let named = match wake {
            stores::Wake::One(name) => vec![ObjectRef::new(&name)],
            stores::Wake::All => stores::woken(&store, &wake, |_, _| true),
        };
        futures::stream::iter(named)
    })
}

fn error_policy(conn: Arc<Connection>, error: &ReconcileError, shared: Arc<reconcile::ConnectionReconciler>) -> Action {
    tracing::warn!(connection = %kube::ResourceExt::name_any(conn.as_ref()), error = %error, "reconcile failed");
    Action::requeue(shared.jitter(&kube::ResourceExt::name_any(conn.as_ref()), RETRY_INTERVAL))
}

/// Drops `data` and `stringData`, so the controller's trigger queue never holds credentials.
fn strip_secret_data(mut secret: DynamicObject) -> DynamicObject {
    if let Some(map) = secret.data.as_object_mut() {
        map.remove("data");
        map.remove("stringData");
    }
    secret
}

/// The Connections whose `kubeconfigSecretRef` names this Secret.
fn connections_referencing(store: &reflector::Store<Connection>, secret: &DynamicObject) -> Vec<ObjectRef<Connection>> {
    let (Some(ns), Some(name)) = (secret.metadata.namespace.as_deref(), secret.metadata.name.as_deref()) else {
        return Vec::new();
    };
    store
        .state()
        .iter()
        .filter(|c| c.spec.kubeconfig_secret_ref.namespace == ns && c.spec.kubeconfig_secret_ref.name == name)
        .map(|c| ObjectRef::from_obj(c.as_ref()))
        .collect()
}

/// The core Secret resource.
pub(crate) fn secret_resource() -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "Secret".into(),
        plural: "secrets".into(),
    }
}

/// The Connection resource.
pub(crate) fn connection_resource() -> ApiResource {
    ApiResource::erase::<Connection>(&())
}
