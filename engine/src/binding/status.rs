//! The binding's status: one entry per bound API with its own conditions, and the binding's
//! `Connected`, `Synced`, `Conflicts`, `PermissionDenied` and `Ready` (contract §2).

pub(crate) use crate::observed::Observed;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kbind_api::conditions::{self, ConditionStatus};
use kbind_api::consts::{condition, field_manager, reason};
use kbind_api::{BindingStatus, BoundApiStatus};
use kbind_cluster::{ClusterClient, Patch, PatchParams};
use serde_json::json;

use super::view::BindingView;

/// What a reconcile does with the binding's claim on one API (`boundAPIs[].claimedAt`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum ClaimChange {
    /// Keep what the status records (claimed or not): the pass learnt nothing about it (the
    /// Connection is not Ready, not engaged, the API not exported now ...).
    #[default]
    Keep,
    /// This binding's Connection serves what it covers of the API: record the claim if none is.
    Take,
    /// Another Connection's binding holds the better claim: this one holds none.
    Drop,
}

/// What one reconcile learnt about one bound API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct ApiReport {
    pub name: String,
    pub crd_hash: Option<String>,
    pub synced: Observed,
    /// Consumer objects in conflict.
    pub conflicts: usize,
    /// Refused provider operations, `"<verb> <resource>"`.
    pub denied: Vec<String>,
    /// The claim on the API.
    pub claim: ClaimChange,
}

impl ApiReport {
    /// An API that is not synced, and why.
    pub(crate) fn not_synced(name: &str, reason: &'static str, message: impl Into<String>) -> Self {
        Self {
            name: name.to_string(),
            crd_hash: None,
            synced: Observed::not(reason, message),
            conflicts: 0,
            denied: Vec::new(),
            claim: ClaimChange::Keep,
        }
    }

    /// The same report, with `claim` done to the binding's claim.
    pub(crate) fn claiming(mut self, claim: ClaimChange) -> Self {
        self.claim = claim;
        self
    }
}

/// The claim the status records after `change`, from the `old` one: a claim once taken stays
/// (with its time) until another binding's better claim displaces it or the API goes from the
/// spec (then its `boundAPIs` entry goes with it). A claim only inferred from an older status
/// (a `Synced` condition that holds) is written down, so it outlives the condition.
fn claim_after(old: Option<&BoundApiStatus>, change: ClaimChange, now: &Time) -> Option<Time> {
    let held = old.and_then(BoundApiStatus::claim).cloned();
    match change {
        ClaimChange::Drop => None,
        ClaimChange::Keep => held,
        ClaimChange::Take => Some(held.unwrap_or_else(|| now.clone())),
    }
}

/// What one reconcile learnt about the binding.
#[derive(Debug, Clone)]
pub(crate) struct Report {
    pub connected: Observed,
    pub apis: Vec<ApiReport>,
    /// Related-resource copies: their conflicts and refusals count toward the binding's.
    pub related: crate::related::RelatedReport,
}

fn set(
    list: &mut Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    type_: &str,
    o: &Observed,
    generation: Option<i64>,
    now: &Time,
) {
    conditions::set(
        list,
        conditions::new(type_, o.status, o.reason, o.message.clone(), generation),
        now,
    );
}

/// The status `report` asks for, keeping transition times of conditions that did not flip.
pub(crate) fn desired_status(view: &BindingView, report: &Report, now: &Time) -> BindingStatus {
    let old = view.status.clone().unwrap_or_default();
    let generation = view.meta.generation;
    let mut bound_apis = Vec::new();
    for api in &report.apis {
        let previous = old.bound_api(&api.name);
        let claimed_at = claim_after(previous, api.claim, now);
        let mut conds = previous.map(|b| b.conditions.clone()).unwrap_or_default();
        set(&mut conds, condition::SYNCED, &api.synced, generation, now);
        set(
            &mut conds,
            condition::CONFLICTS,
            &conflicts_observed(api.conflicts),
            generation,
            now,
        );
        set(
            &mut conds,
            condition::PERMISSION_DENIED,
            &denied_observed(&api.denied, &[]),
            generation,
            now,
        );
        bound_apis.push(BoundApiStatus {
            name: api.name.clone(),
            crd_hash: api.crd_hash.clone(),
            conflict_count: i64::try_from(api.conflicts).unwrap_or(i64::MAX),
            conditions: conds,
            claimed_at,
        });
    }
    let synced = synced_observed(&report.apis);
    let conflicts =
        conflicts_observed(report.apis.iter().map(|a| a.conflicts).sum::<usize>() + report.related.conflicts.len());
    let denied: Vec<String> = report
        .apis
        .iter()
        .flat_map(|a| a.denied.iter().cloned())
        .chain(report.related.denied.iter().cloned())
        .collect();
    let denied = denied_observed(&denied, &report.related.consumer_denied);
    let ready = if !report.connected.holds() {
        Observed::not(report.connected.reason, report.connected.message.clone())
    } else if !synced.holds() {
        Observed::not(synced.reason, synced.message.clone())
    } else if !report.related.failing.is_empty() {
        let mut failing = report.related.failing.clone();
        failing.sort();
        failing.dedup();
        Observed::not(
            reason::WATCH_FAILED,
            format!("related resources are not followed: {}; retried", failing.join("; ")),
        )
    } else if !report.related.unserved.is_empty() {
        let mut unserved = report.related.unserved.clone();
        unserved.sort();
        unserved.dedup();
        Observed::not(reason::RELATED_KIND_NOT_SERVED, unserved.join("; "))
    } else if denied.holds() {
        Observed::not(reason::FORBIDDEN, denied.message.clone())
    } else {
        Observed::ok("every bound API is syncing")
    };
    let mut conds = old.conditions.clone();
    for (type_, o) in [
        (condition::CONNECTED, &report.connected),
        (condition::SYNCED, &synced),
        (condition::CONFLICTS, &conflicts),
        (condition::PERMISSION_DENIED, &denied),
        (condition::READY, &ready),
    ] {
        set(&mut conds, type_, o, generation, now);
    }
    BindingStatus {
        bound_apis,
        conditions: conds,
    }
}

fn synced_observed(apis: &[ApiReport]) -> Observed {
    match apis.iter().find(|a| !a.synced.holds()) {
        None => Observed::ok("every bound API is syncing"),
        Some(first) => {
            let waiting: Vec<&str> = apis
                .iter()
                .filter(|a| !a.synced.holds())
                .map(|a| a.name.as_str())
                .collect();
            Observed::not(
                first.synced.reason,
                format!("{}: {}", waiting.join(", "), first.synced.message),
            )
        }
    }
}

fn conflicts_observed(count: usize) -> Observed {
    if count == 0 {
        Observed::not(reason::AS_EXPECTED, "no object is in conflict")
    } else {
        Observed::new(
            ConditionStatus::True,
            reason::OWNED_BY_ANOTHER,
            format!(
                "{count} object(s) were left alone because a provider object is in the way; \
                 see their core.kbind.io/conflict annotation"
            ),
        )
    }
}

/// `PermissionDenied` from refused provider requests and the konnector's refused consumer
/// requests (related kinds its RBAC on the consumer does not grant).
fn denied_observed(denied: &[String], consumer_denied: &[String]) -> Observed {
    let sorted = |l: &[String]| {
        let mut list = l.to_vec();
        list.sort();
        list.dedup();
        list.join(", ")
    };
    let mut parts = Vec::new();
    if !denied.is_empty() {
        parts.push(format!("the provider credentials may not: {}", sorted(denied)));
    }
    if !consumer_denied.is_empty() {
        parts.push(format!(
            "the konnector's RBAC on the consumer may not: {}",
            sorted(consumer_denied)
        ));
    }
    if parts.is_empty() {
        Observed::not(reason::AS_EXPECTED, "no provider request was refused")
    } else {
        Observed::new(ConditionStatus::True, reason::FORBIDDEN, parts.join("; "))
    }
}

/// Writes `status` with a merge patch on the status subresource, when it changed, on the
/// condition that the binding is still at the resourceVersion `view` was read at: a status
/// computed from an older view (a cache a step behind, a spec edit since) must not overwrite a
/// newer one, least of all drop a claim it never saw. A `Conflict` means: look again.
pub(crate) async fn write_status(
    consumer: &dyn ClusterClient,
    view: &BindingView,
    status: BindingStatus,
) -> kbind_cluster::Result<()> {
    if view.status.as_ref() == Some(&status) {
        return Ok(());
    }
    let body = serde_json::to_value(&status).map_err(|e| kbind_cluster::Error::Decode(e.to_string()))?;
    let params = PatchParams {
        field_manager: Some(field_manager::KONNECTOR.to_string()),
        ..PatchParams::default()
    };
    consumer
        .patch_status(
            &view.resource(),
            view.namespace().as_deref(),
            &view.name(),
            &Patch::Merge(json!({
                "metadata": {"resourceVersion": view.meta.resource_version},
                "status": {"boundAPIs": body.get("boundAPIs").cloned().unwrap_or(json!([])), "conditions": body.get("conditions").cloned().unwrap_or(json!([]))},
            })),
            &params,
        )
        .await
        .map(|_| ())
}
