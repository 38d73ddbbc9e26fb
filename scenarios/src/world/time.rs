//! Time: steps of the paused clock, each followed by the invariants, and waits for a condition.

use std::time::Duration;

use super::{TICK, World};
use crate::invariants::Violation;

impl World {
    /// Advances the paused clock one tick, lets every task settle, then checks the invariants.
    pub async fn step(&mut self) {
        tokio::time::sleep(TICK).await;
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
        self.step += 1;
        if let Some(violation) = self.check_invariants().await {
            self.fail(&violation);
        }
    }

    /// Lets `span` of virtual time pass as one step (every timer due within it fires in order,
    /// as the paused clock advances from one to the next), then checks the invariants. For
    /// stories of months, where a step of [`TICK`] at a time would take forever.
    pub async fn let_pass(&mut self, span: Duration) {
        tokio::time::sleep(span).await;
        for _ in 0..32 {
            tokio::task::yield_now().await;
        }
        self.step += 1;
        if let Some(violation) = self.check_invariants().await {
            self.fail(&violation);
        }
    }

    /// Steps `n` times.
    pub async fn steps_for(&mut self, n: u64) {
        for _ in 0..n {
            self.step().await;
        }
    }

    /// Steps until the async check `done` holds, failing the story after `max_steps`.
    pub async fn run_until_async(
        &mut self,
        what: &str,
        max_steps: u64,
        done: impl for<'a> Fn(&'a World) -> futures::future::BoxFuture<'a, bool>,
    ) {
        for _ in 0..=max_steps {
            if done(self).await {
                return;
            }
            self.step().await;
        }
        self.fail(&Violation {
            invariant: "progress",
            detail: format!("not true after {max_steps} steps: {what}"),
        })
    }

    /// Steps until `done` holds, failing the story after `max_steps`.
    pub async fn run_until(&mut self, what: &str, max_steps: u64, done: impl Fn(&World) -> bool) {
        for _ in 0..max_steps {
            if done(self) {
                return;
            }
            self.step().await;
        }
        if !done(self) {
            self.fail(&Violation {
                invariant: "progress",
                detail: format!("not true after {max_steps} steps: {what}"),
            });
        }
    }
}
