//! The stories of `kbind_scenarios::told` on the fake stage; konnector/tests/real_stages.rs tells
//! the same ones on real kube-apiservers, so both backends answer to the same assertions.

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
