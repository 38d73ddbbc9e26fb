//! The stories of `kbind_scenarios::told` on the fake stage; konnector/tests/real_stages.rs tells
//! the same ones on real kube-apiservers, so both backends answer to the same assertions.

use kbind_scenarios::apis::widgets_crd;
use kbind_scenarios::{FakeStage, seed_from_env, told};

#[tokio::test(start_paused = true)]
async fn main_flow() {
    let mut stage = FakeStage::bound("on_any_stage::main_flow", seed_from_env(71)).await;
    told::main_flow(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn fail_conflict() {
    let mut stage = FakeStage::bound("on_any_stage::fail_conflict", seed_from_env(72)).await;
    told::fail_conflict(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn identity_change() {
    let mut stage = FakeStage::bound("on_any_stage::identity_change", seed_from_env(73)).await;
    told::identity_change(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn connection_loss() {
    let mut stage = FakeStage::bound("on_any_stage::connection_loss", seed_from_env(74)).await;
    told::connection_loss(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn orphan_deletes_nothing() {
    let mut stage = FakeStage::bound("on_any_stage::orphan_deletes_nothing", seed_from_env(75)).await;
    told::orphan_deletes_nothing(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn hand_over_cluster_binding_to_binding() {
    let story = "on_any_stage::hand_over_cluster_binding_to_binding";
    let mut stage = FakeStage::bound(story, seed_from_env(76)).await;
    told::hand_over_cluster_binding_to_binding(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn hand_over_binding_to_cluster_binding() {
    let story = "on_any_stage::hand_over_binding_to_cluster_binding";
    let mut stage = FakeStage::bound(story, seed_from_env(77)).await;
    told::hand_over_binding_to_cluster_binding(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn hand_over_binding_to_binding() {
    let mut stage = FakeStage::bound("on_any_stage::hand_over_binding_to_binding", seed_from_env(78)).await;
    told::hand_over_binding_to_binding(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn binding_naming_a_cluster_scoped_api() {
    let story = "on_any_stage::binding_naming_a_cluster_scoped_api";
    let mut stage = FakeStage::bound(story, seed_from_env(79)).await;
    told::binding_naming_a_cluster_scoped_api(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn provider_namespace_removal() {
    let mut stage = FakeStage::bound("on_any_stage::provider_namespace_removal", seed_from_env(80)).await;
    told::provider_namespace_removal(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_syncer_that_cannot_watch_says_so() {
    let mut stage = FakeStage::bound("on_any_stage::a_syncer_that_cannot_watch_says_so", seed_from_env(3802)).await;
    told::a_syncer_that_cannot_watch_says_so(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_database_password_found_by_reference_follows_the_reference() {
    let story = "on_any_stage::a_database_password_found_by_reference_follows_the_reference";
    let mut stage = FakeStage::bound(story, seed_from_env(3701)).await;
    told::a_database_password_found_by_reference_follows_the_reference(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn an_ingress_for_a_certificate_has_its_status_synced_back() {
    let story = "on_any_stage::an_ingress_for_a_certificate_has_its_status_synced_back";
    let mut stage = FakeStage::bound(story, seed_from_env(3702)).await;
    told::an_ingress_for_a_certificate_has_its_status_synced_back(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing() {
    let story = "on_any_stage::a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing";
    let mut stage = FakeStage::bound(story, seed_from_env(3703)).await;
    told::a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource() {
    let story = "on_any_stage::a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource";
    let mut stage = FakeStage::bound(story, seed_from_env(3704)).await;
    told::a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused() {
    let story = "on_any_stage::two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused";
    let mut stage = FakeStage::two_providers(story, seed_from_env(2601), widgets_crd()).await;
    told::two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost() {
    let story = "on_any_stage::a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost";
    let mut stage = FakeStage::two_providers(story, seed_from_env(2602), widgets_crd()).await;
    told::a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn an_incompatible_schema_from_the_second_provider_is_refused_naming_both() {
    let story = "on_any_stage::an_incompatible_schema_from_the_second_provider_is_refused_naming_both";
    let mut stage = FakeStage::two_providers(story, seed_from_env(2603), told::widgets_crd_without_color()).await;
    told::an_incompatible_schema_from_the_second_provider_is_refused_naming_both(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse() {
    let story = "on_any_stage::a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse";
    let mut stage = FakeStage::two_providers(story, seed_from_env(2605), widgets_crd()).await;
    told::a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn the_konnector_restarted_mid_hand_over_loses_nothing() {
    let story = "on_any_stage::the_konnector_restarted_mid_hand_over_loses_nothing";
    let mut stage = FakeStage::two_providers(story, seed_from_env(2609), widgets_crd()).await;
    told::the_konnector_restarted_mid_hand_over_loses_nothing(&mut stage).await;
}

#[tokio::test(start_paused = true)]
async fn a_related_copy_moves_with_its_namespace_to_the_other_provider() {
    let story = "on_any_stage::a_related_copy_moves_with_its_namespace_to_the_other_provider";
    let mut stage = FakeStage::two_providers(story, seed_from_env(3705), widgets_crd()).await;
    told::a_related_copy_moves_with_its_namespace_to_the_other_provider(&mut stage).await;
}
