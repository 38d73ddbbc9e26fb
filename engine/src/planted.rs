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
    /// A syncer writes the provider target before classifying who owns it.
    WriteBeforeClassifying,
    /// A syncer releases its finalizer before the provider copy is deleted.
    ReleaseFinalizerBeforeProviderDelete,
    /// ownerReferences of consumer objects are copied up.
    CopyOwnerReferencesUp,
    /// The consumer CRD is deleted when the provider stops exporting its API.
    DeleteCrdWhenUnexported,
    /// A related copy overwrites a foreign object of the same name.
    OverwriteForeignRelated,
    /// Status comes down without translating observedGeneration.
    SkipObservedGenerationTranslation,
    /// Unbinding with the Orphan escape hatch still removes the consumer CRD.
    OrphanUnbindRemovesCrd,
    /// A ClusterBinding's drain ignores the Bindings that take over their namespaces.
    DrainIgnoresNamespacedSuccessors,
    /// Unbinding decides before the binding and Connection stores have synced.
    UnbindDecidesOnUnsyncedStore,
    /// Provider namespace removal reads a partial discovery as complete.
    NamespaceRemovalOnPartialDiscovery,
    /// The first write of a provider copy is a forced apply, without the create-if-absent guard.
    FirstWriteForcedApply,
    /// autoBind drops an API the provider stopped exporting from its managed binding.
    AutobindDropsUnexported,
    /// A 404 that is not a Kubernetes `NotFound` Status (a proxy's text) reads as "absent"
    /// (switched in kbind-cluster, which cannot see this enum: `cluster/src/planted.rs`).
    NonStatus404IsAbsent,
    /// A second Connection's binding is let into a namespace another Connection serves.
    SecondConnectionInServedNamespace,
    /// Placement ignores the claims recorded in binding statuses and ranks by what the
    /// conditions say now: a serving binding whose Connection blinks loses its namespace.
    IgnoreRecordedClaims,
    /// A changed reference of a bound object keeps following the name it held before.
    FollowStaleReference,
}

impl Plant {
    /// Every planted bug, in the order the gate runs them.
    pub const ALL: [Plant; 21] = [
        Plant::SkipIdentityCheck,
        Plant::ReuseClientAfterDisengage,
        Plant::DeleteOnDisengage,
        Plant::FollowExecKubeconfig,
        Plant::RenewLeaseWhileDisconnected,
        Plant::WriteBeforeClassifying,
        Plant::ReleaseFinalizerBeforeProviderDelete,
        Plant::CopyOwnerReferencesUp,
        Plant::DeleteCrdWhenUnexported,
        Plant::OverwriteForeignRelated,
        Plant::SkipObservedGenerationTranslation,
        Plant::OrphanUnbindRemovesCrd,
        Plant::DrainIgnoresNamespacedSuccessors,
        Plant::UnbindDecidesOnUnsyncedStore,
        Plant::NamespaceRemovalOnPartialDiscovery,
        Plant::FirstWriteForcedApply,
        Plant::AutobindDropsUnexported,
        Plant::NonStatus404IsAbsent,
        Plant::SecondConnectionInServedNamespace,
        Plant::IgnoreRecordedClaims,
        Plant::FollowStaleReference,
    ];

    /// The value of `KBIND_PLANT` that switches this bug on.
    pub fn name(self) -> &'static str {
        match self {
            Plant::SkipIdentityCheck => "skip-identity-check",
            Plant::ReuseClientAfterDisengage => "reuse-client-after-disengage",
            Plant::DeleteOnDisengage => "delete-on-disengage",
            Plant::FollowExecKubeconfig => "follow-exec-kubeconfig",
            Plant::RenewLeaseWhileDisconnected => "renew-lease-while-disconnected",
            Plant::WriteBeforeClassifying => "write-before-classifying",
            Plant::ReleaseFinalizerBeforeProviderDelete => "release-finalizer-before-provider-delete",
            Plant::CopyOwnerReferencesUp => "copy-owner-references-up",
            Plant::DeleteCrdWhenUnexported => "delete-crd-when-unexported",
            Plant::OverwriteForeignRelated => "overwrite-foreign-related",
            Plant::SkipObservedGenerationTranslation => "skip-observed-generation-translation",
            Plant::OrphanUnbindRemovesCrd => "orphan-unbind-removes-crd",
            Plant::DrainIgnoresNamespacedSuccessors => "drain-ignores-namespaced-successors",
            Plant::UnbindDecidesOnUnsyncedStore => "unbind-decides-on-unsynced-store",
            Plant::NamespaceRemovalOnPartialDiscovery => "namespace-removal-on-partial-discovery",
            Plant::FirstWriteForcedApply => "first-write-forced-apply",
            Plant::AutobindDropsUnexported => "autobind-drops-unexported",
            Plant::NonStatus404IsAbsent => "non-status-404-is-absent",
            Plant::SecondConnectionInServedNamespace => "second-connection-in-served-namespace",
            Plant::IgnoreRecordedClaims => "ignore-recorded-claims",
            Plant::FollowStaleReference => "follow-stale-reference",
        }
    }
}

/// Whether `plant` is switched on in this process.
#[cfg(feature = "planted-bugs")]
pub fn planted(plant: Plant) -> bool {
    kbind_cluster::planted::planted(plant.name())
}

/// Whether `plant` is switched on in this process (never, without the `planted-bugs` feature).
#[cfg(not(feature = "planted-bugs"))]
pub fn planted(_plant: Plant) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::Plant;

    #[test]
    fn the_gate_script_names_a_catcher_for_every_planted_bug() {
        let script = include_str!("../../hack/planted");
        for plant in Plant::ALL {
            let row = format!("expect[{}]=\"", plant.name());
            let catchers = script
                .lines()
                .find_map(|line| line.trim().strip_prefix(row.as_str()))
                .and_then(|rest| rest.split('"').next())
                .unwrap_or_default();
            assert!(
                catchers.split_whitespace().any(|c| c.split('/').count() == 3),
                "hack/planted has no expect[{}] row naming a <package>/<test-target>/<filter> catcher",
                plant.name()
            );
        }
    }

    #[test]
    fn every_planted_bug_has_its_own_name() {
        let names: std::collections::BTreeSet<&str> = Plant::ALL.iter().map(|p| p.name()).collect();
        assert_eq!(names.len(), Plant::ALL.len(), "two plants share a KBIND_PLANT name");
    }
}
