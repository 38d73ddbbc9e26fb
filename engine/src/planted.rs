//! Planted bugs for the anti-toy gate: with the `planted-bugs` feature, `KBIND_PLANT=<name>`
//! switches one bug on at run time, so CI builds the planted variant once and runs the suite
//! once per bug (`hack/planted`). Without the feature every check is a constant `false`.

/// One deliberately planted bug.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plant {
    /// Writes skip the identity guard.
    SkipIdentityCheck,
    /// Re-engagement reuses the client of the dead engagement.
    ReuseClientAfterDisengage,
    /// Disengaging "cleans up" the consumer CRDs pulled through the Connection.
    DeleteOnDisengage,
    /// An `exec` kubeconfig is accepted instead of refused.
    FollowExecKubeconfig,
    /// The heartbeat Lease is renewed even when the provider's identity changed.
    RenewLeaseWhileDisconnected,
}

impl Plant {
    /// Every planted bug, in the order the gate runs them.
    pub const ALL: [Plant; 5] = [
        Plant::SkipIdentityCheck,
        Plant::ReuseClientAfterDisengage,
        Plant::DeleteOnDisengage,
        Plant::FollowExecKubeconfig,
        Plant::RenewLeaseWhileDisconnected,
    ];

    /// The value of `KBIND_PLANT` that switches this bug on.
    pub fn name(self) -> &'static str {
        match self {
            Plant::SkipIdentityCheck => "skip-identity-check",
            Plant::ReuseClientAfterDisengage => "reuse-client-after-disengage",
            Plant::DeleteOnDisengage => "delete-on-disengage",
            Plant::FollowExecKubeconfig => "follow-exec-kubeconfig",
            Plant::RenewLeaseWhileDisconnected => "renew-lease-while-disconnected",
        }
    }
}

/// Whether `plant` is switched on in this process.
#[cfg(feature = "planted-bugs")]
pub fn planted(plant: Plant) -> bool {
    std::env::var("KBIND_PLANT").is_ok_and(|v| v == plant.name())
}

/// Whether `plant` is switched on in this process (never, without the `planted-bugs` feature).
#[cfg(not(feature = "planted-bugs"))]
pub fn planted(_plant: Plant) -> bool {
    false
}
