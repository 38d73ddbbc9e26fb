//! The engine: the Connection reconciler, provider engagement and the binding reconciler (with
//! its syncers), gated together by leader election when it is enabled (contract §4).

use std::future::Future;
use std::sync::Arc;

use tokio::sync::watch;

use crate::connection::stores::ConsumerStores;
use crate::context::Context;
use crate::leader::{LeaderConfig, LeaderElector};
use crate::link::Links;
use crate::mapper::{Identity, Mapper};
use crate::sync::{NoObserver, SyncObserver, Syncers};

/// Builds an [`Engine`].
#[derive(Clone)]
pub struct EngineBuilder {
    ctx: Context,
    leader: Option<LeaderConfig>,
    mapper: Arc<dyn Mapper>,
    observer: Arc<dyn SyncObserver>,
}

impl EngineBuilder {
    /// Gate everything behind leader election on the consumer (`None`: always lead).
    #[must_use]
    pub fn leader_election(mut self, config: Option<LeaderConfig>) -> Self {
        self.leader = config;
        self
    }

    /// Map consumer keys to provider keys with `mapper` instead of [`Identity`] (contract §4
    /// "keys": installed in code, never by a flag or a CRD field).
    #[must_use]
    pub fn with_mapper(mut self, mapper: impl Mapper + 'static) -> Self {
        self.mapper = Arc::new(mapper);
        self
    }

    /// Report spec-up and status-down latencies to `observer` (default: [`NoObserver`]).
    #[must_use]
    pub fn with_sync_observer(mut self, observer: Arc<dyn SyncObserver>) -> Self {
        self.observer = observer;
        self
    }

    /// The engine.
    pub fn build(self) -> Engine {
        Engine {
            syncers: Syncers::new(self.ctx.clone(), self.mapper).with_observer(self.observer),
            ctx: self.ctx,
            leader: self.leader,
            links: Links::new(),
            leading: watch::channel(false).0,
        }
    }
}

/// The konnector's engine.
pub struct Engine {
    ctx: Context,
    leader: Option<LeaderConfig>,
    links: Links,
    syncers: Syncers,
    leading: watch::Sender<bool>,
}

impl Engine {
    /// A builder over the shared context.
    pub fn builder(ctx: Context) -> EngineBuilder {
        EngineBuilder {
            ctx,
            leader: None,
            mapper: Arc::new(Identity),
            observer: Arc::new(NoObserver),
        }
    }

    /// The engaged providers (for the syncers built on top).
    pub fn providers(&self) -> Links {
        self.links.clone()
    }

    /// The running per-(binding, API) syncers and what they report.
    pub fn syncers(&self) -> Syncers {
        self.syncers.clone()
    }

    /// `true` while this replica runs the gated controllers.
    pub fn leading(&self) -> watch::Receiver<bool> {
        self.leading.subscribe()
    }

    /// Runs until the future is dropped.
    pub async fn run(&self) {
        self.run_until(std::future::pending()).await
    }

    /// Runs until `shutdown` resolves; a held leader Lease is then released.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) {
        match &self.leader {
            None => {
                self.leading.send_replace(true);
                tokio::select! {
                    _ = self.controllers() => {}
                    _ = shutdown => {}
                }
                self.leading.send_replace(false);
            }
            Some(config) => {
                let elector = LeaderElector::new(self.ctx.clone(), config.clone());
                let mut leading = elector.leading();
                let mirror = async {
                    while leading.changed().await.is_ok() {
                        self.leading.send_replace(*leading.borrow());
                    }
                    std::future::pending::<()>().await
                };
                tokio::select! {
                    _ = elector.run(shutdown, |_| self.controllers()) => {}
                    _ = mirror => {}
                }
                self.leading.send_replace(false);
            }
        }
    }

    /// Everything leader election gates, as one future: dropping it stops all of it.
    fn controllers(&self) -> impl Future<Output = ()> + use<'_> {
        let ctx = self.ctx.clone();
        let links = self.links.clone();
        let syncers = self.syncers.clone();
        async move {
            // One watch per thing: one Connection and one Secret store for all three.
            let (stores, feed) = ConsumerStores::new(&ctx);
            tokio::join!(
                feed,
                crate::connection::run_shared(ctx.clone(), stores.clone(), links.clone()),
                crate::binding::run_shared(ctx, links, syncers, stores),
            );
        }
    }
}
