//! The deterministic scenario world: named fake clusters, the engine running against them on
//! tokio's paused clock, faults as verbs between steps, and contract §8 checked after each.

pub mod apis;
pub mod bundle;
pub mod client;
pub mod connector;
pub mod invariants;
pub mod logcap;
pub mod stage;
pub mod told;
pub mod world;

pub use bundle::Credential;
pub use connector::FakeConnector;
pub use stage::{FakeStage, Stage, TwoProviders};
pub use world::{ProviderOpts, SharedProvider, World, WorldBuilder, seed_from_env};
