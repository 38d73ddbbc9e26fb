//! The state of one provider link and its step: the whole engagement protocol in one place
//! (contract §2 "Identity", §4 "connection loss"). [`step`] is pure: the link feeds it what it
//! just learnt and carries out the [`Effect`] it returns, so every transition reads here and is
//! tested without a cluster.
//!
//! ```text
//!              client built           identity = pin            Connection Ready
//!  Unlinked ─────────────────► Linked ─────────────► Verified ────────────────────► Engaged
//!     ▲ ▲                        │                      │                               │ ▲
//!     │ └──────────────── not Ready, or no binding left to drain (dropped) ─────────────┤ │
//!     │                          │  identity ≠ pin      │                               │ │ renewal
//!     │                          ▼                      │                  renewal      │ │ proven
//!     │                   IdentityChanged ◄─────────────┴───────────────── failed ──►  Faltering
//!     │                  (no write; dropped)                                              │
//!     └──── failed (not engaged), new or refused kubeconfig, failures outlast the window ─┘
//!                (disengage: caches stopped, guarded client closed, the client dropped)
//! ```

use std::time::Duration;

use tokio::time::Instant;

/// Where one Connection's provider link stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkState {
    /// No client: no accepted kubeconfig yet, or the last link failed or was dropped.
    Unlinked,
    /// A client built from the accepted kubeconfig; its identity not (or no longer) proven.
    Linked,
    /// The identity read through the client is the pinned one; not engaged (the Connection
    /// is not Ready, or a deleted one has no binding left to drain).
    Verified {
        /// The provider's cluster UID.
        uid: String,
    },
    /// Engaged: write client, reader and watch caches built on the verified client.
    Engaged {
        /// The pinned cluster UID.
        uid: String,
    },
    /// Engaged, but renewals (heartbeat, discovery, identity reads) have failed since `since`:
    /// syncers, caches and watches are kept until failures last the hysteresis window.
    Faltering {
        /// The pinned cluster UID.
        uid: String,
        /// When the first failure of this run happened.
        since: Instant,
        /// Failures in a row.
        failures: u32,
    },
    /// The identity read through the client differs from the pin: no write reaches that
    /// cluster, the client is dropped and the next pass reads the identity afresh.
    IdentityChanged {
        /// The UID the cluster now reports.
        found: String,
    },
}

impl LinkState {
    /// Whether an engagement hangs off this state (syncers may run).
    pub fn is_engaged(&self) -> bool {
        matches!(self, LinkState::Engaged { .. } | LinkState::Faltering { .. })
    }

    /// Whether the provider is known to be down or another cluster (not merely "not engaged
    /// yet", as right after a restart).
    pub fn is_down(&self, failed: bool) -> bool {
        matches!(self, LinkState::IdentityChanged { .. }) || (failed && !self.is_engaged())
    }
}

/// What the link learnt in one pass, fed to [`step`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Event {
    /// A client was built from the accepted kubeconfig.
    Connected,
    /// The identity was read (or its continuity proven by a renewal) and equals the pin.
    Proven {
        /// The provider's cluster UID.
        uid: String,
    },
    /// The identity read differs from the pin.
    Mismatch {
        /// The UID the cluster reports.
        found: String,
    },
    /// A pass of the link that started at `started` failed at `at` (unreachable, throttled,
    /// 5xx, timeout, 401): failures last from the start of the first failed pass, so a request
    /// that hung until its timeout counts from when it was sent.
    Failed {
        /// When the failed pass started.
        started: Instant,
        /// When it failed.
        at: Instant,
    },
    /// The Connection wants an engagement (Ready, or deleted with bindings to drain).
    Wanted,
    /// The Connection wants none (not Ready, or deleted with nothing left to drain).
    Unwanted,
    /// The kubeconfig changed, went or was refused: the link starts over.
    Reset,
}

/// What the link must do after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Effect {
    /// Nothing beyond the new state.
    Stay,
    /// Build the engagement on the verified client.
    Engage,
    /// End the engagement and drop the client (recovery connects afresh).
    Drop,
}

/// The next state of a link in `state` after `event`, with failures forgiven for `window`
/// (the heartbeat Lease's duration: a provider that answers again within it cost only time).
pub(crate) fn step(state: &LinkState, event: Event, window: Duration) -> (LinkState, Effect) {
    use LinkState as S;
    match (state, event) {
        (_, Event::Reset) => (S::Unlinked, Effect::Drop),
        (_, Event::Mismatch { found }) => (S::IdentityChanged { found }, Effect::Drop),
        (S::Unlinked | S::IdentityChanged { .. }, Event::Connected) => (S::Linked, Effect::Stay),
        (S::Engaged { uid } | S::Faltering { uid, .. }, Event::Proven { uid: proven }) if *uid == proven => {
            (S::Engaged { uid: proven }, Effect::Stay)
        }
        // An engagement never changes its pin: anything else proven starts over.
        (S::Engaged { .. } | S::Faltering { .. }, Event::Proven { .. }) => (S::Unlinked, Effect::Drop),
        (_, Event::Proven { uid }) => (S::Verified { uid }, Effect::Stay),
        (S::Engaged { .. }, Event::Failed { started, at }) if at.saturating_duration_since(started) >= window => {
            (S::Unlinked, Effect::Drop)
        }
        (S::Engaged { uid }, Event::Failed { started, .. }) => (
            S::Faltering {
                uid: uid.clone(),
                since: started,
                failures: 1,
            },
            Effect::Stay,
        ),
        (S::Faltering { uid, since, failures }, Event::Failed { at, .. }) => {
            if at.saturating_duration_since(*since) >= window {
                (S::Unlinked, Effect::Drop)
            } else {
                (
                    S::Faltering {
                        uid: uid.clone(),
                        since: *since,
                        failures: failures + 1,
                    },
                    Effect::Stay,
                )
            }
        }
        (_, Event::Failed { .. }) => (S::Unlinked, Effect::Drop),
        (S::Verified { uid }, Event::Wanted) => (S::Engaged { uid: uid.clone() }, Effect::Engage),
        // Recovery builds a fresh client (contract §4 "connection loss").
        (S::Engaged { .. } | S::Faltering { .. }, Event::Unwanted) => (S::Unlinked, Effect::Drop),
        (other, Event::Wanted | Event::Unwanted | Event::Connected) => (other.clone(), Effect::Stay),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_secs(60);

    fn engaged() -> LinkState {
        LinkState::Engaged { uid: "p".into() }
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_renewal_keeps_the_engagement_until_failures_outlast_the_window() {
        let t0 = Instant::now();
        let (s, effect) = step(&engaged(), Event::Failed { started: t0, at: t0 }, WINDOW);
        assert_eq!(effect, Effect::Stay, "one failed renewal must not disengage");
        assert!(s.is_engaged());
        let (s, effect) = step(
            &s,
            Event::Failed {
                started: t0 + Duration::from_secs(30),
                at: t0 + Duration::from_secs(59),
            },
            WINDOW,
        );
        assert_eq!(effect, Effect::Stay);
        assert_eq!(
            s,
            LinkState::Faltering {
                uid: "p".into(),
                since: t0,
                failures: 2
            }
        );
        let (s, effect) = step(
            &s,
            Event::Failed {
                started: t0 + Duration::from_secs(58),
                at: t0 + Duration::from_secs(60),
            },
            WINDOW,
        );
        assert_eq!((s, effect), (LinkState::Unlinked, Effect::Drop));
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_hung_for_the_whole_window_ends_the_engagement_at_once() {
        let t0 = Instant::now();
        let (s, effect) = step(
            &engaged(),
            Event::Failed {
                started: t0,
                at: t0 + WINDOW,
            },
            WINDOW,
        );
        assert_eq!((s, effect), (LinkState::Unlinked, Effect::Drop));
    }

    #[tokio::test(start_paused = true)]
    async fn a_proven_renewal_ends_the_trouble_and_another_identity_ends_the_link() {
        let t0 = Instant::now();
        let (faltering, _) = step(&engaged(), Event::Failed { started: t0, at: t0 }, WINDOW);
        let (s, effect) = step(&faltering, Event::Proven { uid: "p".into() }, WINDOW);
        assert_eq!((s, effect), (engaged(), Effect::Stay));
        let (s, effect) = step(&faltering, Event::Mismatch { found: "q".into() }, WINDOW);
        assert_eq!(
            (s, effect),
            (LinkState::IdentityChanged { found: "q".into() }, Effect::Drop)
        );
    }

    #[test]
    fn a_link_engages_only_once_verified_and_wanted_and_a_disengage_drops_the_client() {
        let (s, _) = step(&LinkState::Unlinked, Event::Connected, WINDOW);
        assert_eq!(s, LinkState::Linked);
        assert_eq!(step(&s, Event::Wanted, WINDOW), (LinkState::Linked, Effect::Stay));
        let (s, _) = step(&s, Event::Proven { uid: "p".into() }, WINDOW);
        let (s, effect) = step(&s, Event::Wanted, WINDOW);
        assert_eq!((s.clone(), effect), (engaged(), Effect::Engage));
        let (s, effect) = step(&s, Event::Unwanted, WINDOW);
        assert_eq!((s, effect), (LinkState::Unlinked, Effect::Drop));
    }

    #[test]
    fn a_failure_before_any_engagement_is_not_forgiven() {
        for state in [
            LinkState::Linked,
            LinkState::Verified { uid: "p".into() },
            LinkState::Unlinked,
        ] {
            let now = Instant::now();
            let (s, effect) = step(&state, Event::Failed { started: now, at: now }, WINDOW);
            assert_eq!((s, effect), (LinkState::Unlinked, Effect::Drop), "from {state:?}");
        }
    }
}
