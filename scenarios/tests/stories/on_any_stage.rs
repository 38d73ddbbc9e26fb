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
