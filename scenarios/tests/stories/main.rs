//! The scenario suite, one story per module, linked into one test binary: a binary per story
//! meant 27 links of the whole engine, minutes of CPU and gigabytes of disk (CONTRIBUTING.md).

mod common;
mod story;

mod binding_kit;

mod autobind_keeps_unexported_apis;
mod causes_named;
mod claims;
mod cluster_scoped_api_in_binding;
mod conflicts;
mod connection_events;
mod connection_loss;
mod connection_released_with_its_last_binding;
mod credential_refusals;
mod credential_renewal;
mod credentials_stay_secret;
mod deletion;
mod determinism;
mod drift;
mod hand_overs;
mod herd;
mod identity_changes;
mod internet_scale;
mod invariants_are_live;
mod leader_hand_over;
mod main_flow;
mod metadata;
mod namespace_scoped_credentials;
mod needs_connection_reconciler;
mod observed_generation;
mod on_any_stage;
mod one_connection_claims_a_user_crd;
mod order_independent_apply;
mod orphan;
mod provider_namespace_removal;
mod provider_namespaces;
mod provider_replaced_by_a_fresh_cluster;
mod provider_side_changes;
mod quiet;
mod related_resources;
mod resync_forever;
mod revoked_then_unbound;
mod schema_policies;
mod schema_sources;
mod secret_swapped_to_an_untrusted_ca;
mod seeded_fault_schedules;
mod seeded_hand_overs;
mod seeded_several_providers;
mod seeded_sync_schedules;
mod several_providers;
mod syncer_health;
mod two_consumers;
mod unbind_on_cold_caches;
mod waits_on_events;
mod write_races;
