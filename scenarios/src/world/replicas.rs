//! Konnector replicas: started, restarted, and asked who leads.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use fakeapi::UserInfo;
use kbind_engine::Links;
use kbind_engine::context::Context;
use kbind_engine::engine::Engine;
use kbind_engine::leader::LeaderConfig;

use super::{NAMESPACE, Replica, World, replica_user};
use crate::client::WorldClient;

impl World {
    /// Starts konnector replica `konnector-0`.
    pub fn start_konnector(&mut self) {
        self.start_replica("konnector-0");
    }

    /// Starts (or restarts) konnector replica `id`.
    pub fn start_replica(&mut self, id: &str) {
        let cut = self
            .replicas
            .get(id)
            .map(|r| r.cut.clone())
            .unwrap_or_else(|| Arc::new(AtomicBool::new(false)));
        let consumer = WorldClient::user(
            self.consumer.client(UserInfo {
                name: replica_user(id),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            }),
            cut.clone(),
        );
        let ctx = Context {
            consumer: Arc::new(consumer),
            connector: self.connector.clone(),
            clock: self.clock.clone(),
            randomness: self.randomness.clone(),
            config: self.config.clone(),
        };
        let leader = self
            .leader_election
            .then(|| LeaderConfig::new(NAMESPACE, "kbind-konnector", id));
        let engine = Engine::builder(ctx).leader_election(leader).build();
        let registry = engine.providers();
        let leading = engine.leading();
        let task = tokio::spawn(async move { engine.run().await });
        self.replicas.insert(
            id.to_string(),
            Replica {
                task: Some(task),
                registry,
                leading,
                cut,
            },
        );
        self.note(format!("started {id}"));
    }

    /// The provider registry of replica `konnector-0`.
    pub fn providers(&self) -> Links {
        self.registry_of("konnector-0")
    }

    /// The provider registry of replica `id`.
    pub fn registry_of(&self, id: &str) -> Links {
        self.replicas
            .get(id)
            .map(|r| r.registry.clone())
            .unwrap_or_else(|| panic!("no konnector replica {id:?}"))
    }

    /// Whether replica `id` is running and leads (a crashed replica's last word does not count).
    pub fn is_leading(&self, id: &str) -> bool {
        self.replicas
            .get(id)
            .is_some_and(|r| r.task.as_ref().is_some_and(|t| !t.is_finished()) && *r.leading.borrow())
    }

    /// The consumer user replica `id` writes as.
    pub fn replica_user(&self, id: &str) -> String {
        replica_user(id)
    }
}
