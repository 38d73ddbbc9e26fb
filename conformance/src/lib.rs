//! kbind's conformance suite: cases written once against the `ClusterClient` seam and run on
//! the in-process fake, over HTTP, and on a real kube-apiserver.
//!
//! A test crate runs every case with `kbind_conformance::conformance_tests!(make_target);`
//! where `make_target` is an `async fn() -> Arc<dyn Target>`: one `#[tokio::test]` per case,
//! each under a timeout naming the case and target, skipping the pairs [`DIFFERENCES`] lists.

pub mod cases;
pub mod differences;
pub mod support;
pub mod target;

use std::future::Future;
use std::time::Duration;

pub use differences::{DIFFERENCES, Difference, On, difference_for, differences_json};
pub use support::{CaseError, CaseResult};
pub use target::{FaultControl, HttpTarget, InProcessTarget, Target, TargetKind, USERS};

/// Calls `$crate::$callback! { ($($args)*) case, case, ... }` with every case name: the one
/// list both [`CASES`] and [`conformance_tests!`] are built from.
#[doc(hidden)]
#[macro_export]
macro_rules! __with_cases {
    ($callback:ident ! ($($args:tt)*)) => {
        $crate::$callback! { ($($args)*)
            resource_version_strictly_increases,
            stale_replace_is_conflict,
            replace_without_resource_version,
            uid_and_creation_timestamp_are_immutable,
            generation_tracks_spec_changes,
            empty_labels_annotations_and_finalizers_are_omitted,
            watch_delivers_events_in_order,
            watch_resumes_from_any_resource_version,
            watch_from_compacted_version_is_gone_and_relist_recovers,
            seam_watcher_relists_after_compaction,
            watch_sends_bookmarks_when_requested,
            list_then_watch_loses_nothing_under_writes,
            selectors_filter_list_and_watch,
            list_pagination_is_a_consistent_snapshot,
            list_resource_version_semantics,
            finalizers_hold_deletion,
            finalizer_cannot_be_added_to_terminating_object,
            delete_preconditions_are_checked,
            create_in_missing_namespace_is_not_found,
            create_in_terminating_namespace_is_forbidden,
            labels_are_validated,
            deleting_namespace_empties_it,
            gc_background_deletes_dependents,
            gc_foreground_waits_for_dependents,
            gc_orphan_keeps_dependents,
            gc_switched_off_keeps_dependents,
            status_subresource_is_separate,
            apply_creates_and_records_manager,
            apply_merges_list_maps_by_key,
            apply_removes_fields_dropped_from_reapply,
            apply_conflict_is_409_with_causes,
            apply_force_transfers_ownership,
            apply_with_a_uid_lands_only_on_that_object,
            apply_with_an_unmatchable_resource_version_only_creates,
            merge_patch_sets_and_removes,
            json_patch_applies_and_failed_test_is_invalid,
            strategic_merge_patch_merges_containers_by_name,
            strategic_merge_patch_on_custom_resource_is_415,
            crd_served_after_established,
            crd_prunes_unknown_fields,
            crd_applies_defaults,
            crd_accepts_int_or_string,
            crd_preserves_unknown_fields_where_marked,
            crd_validates_types,
            crd_cel_rule_keeps_field_immutable,
            deleting_crd_removes_instances,
            kube_system_uid_is_identity,
            secret_round_trips,
            config_map_round_trips,
            lease_round_trips,
            service_account_token_request,
            events_in_both_groups,
            events_share_storage_across_groups,
            deployment_is_stored_not_run,
            deployment_gets_defaults,
            kcp_logical_cluster_is_identity,
            rbac_denies_plain_user,
            rbac_role_binding_grants_only_its_namespace,
            rbac_cluster_role_binding_grants_cluster_scope,
            fault_partition_and_heal,
            fault_latency_on_paused_clock,
            fault_latency_holds_answers_until_removed,
            fault_too_many_requests_has_retry_after,
            fault_injected_forbidden_and_internal,
            fault_dropped_watches_end_streams,
            fault_replace_with_fresh_changes_identity,
            fake_is_deterministic,
            protobuf_round_trips_every_builtin_kind,
            protobuf_token_request,
            protobuf_watch_streams_frames,
            protobuf_errors_are_statuses,
            protobuf_custom_resources_fall_back_to_json,
            protobuf_table_is_not_acceptable,
        }
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __case_names {
    (() $($case:ident),* $(,)?) => {
        /// Every case's name, in suite order.
        pub const CASES: &[&str] = &[$(stringify!($case)),*];
    };
}

__with_cases!(__case_names!());

#[doc(hidden)]
#[macro_export]
macro_rules! __case_tests {
    (($make:expr) $($case:ident),* $(,)?) => {
        $(
            #[tokio::test]
            async fn $case() {
                let target: ::std::sync::Arc<dyn $crate::Target> = ($make)().await;
                $crate::run_case(stringify!($case), &*target, $crate::cases::$case(&*target)).await;
            }
        )*
    };
}

/// Expands to one `#[tokio::test]` per case, each running on the target `$make().await` gives
/// (an `async fn() -> Arc<dyn Target>`), under a timeout that names the case and target.
#[macro_export]
macro_rules! conformance_tests {
    ($make:expr) => {
        $crate::__with_cases!(__case_tests!($make));
    };
}

/// How long one case may take on a target before its test fails.
pub fn case_timeout(case: &str, kind: TargetKind) -> Duration {
    match (kind, case) {
        // kube-apiserver sends bookmarks about once a minute.
        (TargetKind::RealApiserver, "watch_sends_bookmarks_when_requested") => Duration::from_secs(240),
        (TargetKind::RealApiserver, _) => Duration::from_secs(180),
        (_, _) => Duration::from_secs(60),
    }
}

/// Runs one case on `target`: skips a listed deliberate difference, enforces the case's
/// timeout, prints skips, and panics with the case and target named on failure.
pub async fn run_case(case: &str, target: &dyn Target, body: impl Future<Output = CaseResult<()>>) {
    if let Some(why) = target.unavailable() {
        println!("{case} on {}: skipped: {why}", target.name());
        return;
    }
    if let Some(diff) = difference_for(case, target.kind()) {
        println!("{case} on {}: deliberate difference: {}", target.name(), diff.why);
        return;
    }
    let limit = case_timeout(case, target.kind());
    match tokio::time::timeout(limit, body).await {
        Ok(Ok(())) => {}
        Ok(Err(CaseError::Skipped(why))) => println!("{case} on {}: skipped: {why}", target.name()),
        Ok(Err(CaseError::Failed(why))) => panic!("conformance case {case} failed on {}: {why}", target.name()),
        Err(_) => panic!(
            "conformance case {case} did not finish within {limit:?} on {}",
            target.name()
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_difference_names_an_existing_case() {
        for d in DIFFERENCES {
            assert!(CASES.contains(&d.case), "DIFFERENCES lists unknown case {:?}", d.case);
        }
    }

    #[test]
    fn case_names_are_unique() {
        let mut names = CASES.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), CASES.len());
    }

    #[test]
    fn differences_serialize_with_case_target_and_why() {
        let json = differences_json();
        let first = &json[0];
        assert_eq!(first["case"], DIFFERENCES[0].case);
        assert!(first["target"].is_string() && first["why"].is_string(), "{json}");
        assert_eq!(json.as_array().map(Vec::len), Some(DIFFERENCES.len()));
    }

    #[test]
    fn a_difference_covers_only_its_target() {
        let d = difference_for("deployment_is_stored_not_run", TargetKind::RealApiserver);
        assert!(d.is_some());
        assert!(difference_for("deployment_is_stored_not_run", TargetKind::InProcess).is_none());
        assert!(On::All.covers(TargetKind::Http));
    }
}
