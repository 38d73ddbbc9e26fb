//! The deterministic scenario world: named fake clusters, the engine running against them on
//! tokio's paused clock, faults as verbs between steps, and DESIGN.md §8 checked after each.
