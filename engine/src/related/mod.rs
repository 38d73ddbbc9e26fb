//! Related resources (DESIGN.md §2, §4): objects of any namespaced kind a binding copies next
//! to its instances, `FromConsumer` up to the provider and `FromProvider` down to the consumer,
//! with server-side apply as `kbind-konnector-related`, the same conflict rule as instances, and
//! garbage collection of only the copies that carry this binding's markers.
//!
//! Kinds (`kinds.rs`): Secrets and ConfigMaps are core `v1`; any other kind is resolved by
//! discovery on the side of the originals (the rule's version or the preferred one) and must be
//! served, namespaced, on the other side too; otherwise the syncer of that kind reports why
//! (`RelatedKindNotServed`) and asks again later, and the other kinds sync on. A copy of a
//! Secret or ConfigMap carries its content, one of any other kind every top-level field but
//! `status`. Selection: labels and names (`select.rs`), and references (`references.rs`): the
//! names at dotted paths of the consumer's bound objects, from one shared consumer watch per
//! (API, paths) that keeps only those names and wakes the syncers when the set changes. With
//! `syncStatus` the copy's status is written onto the original's status subresource.
//!
//! Machinery (everything by watches): [`RelatedSyncers`] runs one syncer per
//! (binding, kind, direction) with rules, over shared watch caches on both sides: the engaged
//! provider's cache (one watch per GVR per Connection, per namespace in use when a cluster-wide
//! list is refused) and one engine-wide consumer cache, whose watch of a kind starts when the
//! first rule of that kind needs it. A change of a source or a copy converges just that
//! object; a relist, a missed event or a change of the namespaces in use converges the
//! binding's set for the kind. A ClusterBinding's namespaces in use come from one shared
//! consumer watch of each bound API's instances that keeps keys only (`namespaces.rs`), never
//! from a LIST. [`reconcile`] is the same convergence as one pass of LISTs, for callers
//! without caches.
//!
//! Cost, stated: a converged binding makes no request. Writes happen only when a store shows
//! a change: then one fresh GET of the target (the verdict never rests on a cache alone) and
//! the apply or delete. Starting a syncer costs one `limit=1` LIST per side to learn whether a
//! cluster-wide watch is allowed (and one per namespace in use when it is not), and one GET of
//! each bound API's CRD while its index does not run yet. The backstop is a full converge from
//! the stores every `--resync` (`EngineConfig::rediscovery_interval`): no request unless
//! something drifted, CPU in the number of objects of the kind in the stores of both sides.
//! It re-reads the stores, not the servers: a watch relists on its own when the server says
//! its version is too old, and a syncer that falls behind its events looks at everything. An
//! object that could not be written is looked at again after 10 s (30 s after a refusal).
//! Memory: the consumer cache holds every object of a kind of the consumer once a rule of
//! that kind exists, lean (no managedFields, no last-applied copy); the instance index holds
//! `namespace/name` keys, a reference index the referenced names of each bound object.
//!
//! Choices recorded here (see also docs/decisions.md):
//! - Keys are not mapped: a copy has the source's namespace and name (the `Mapper` is for
//!   instances only).
//! - Namespaces: a Binding copies in its own namespace; a ClusterBinding in the namespaces
//!   where the consumer has instances of its bound APIs ([`namespaces_in_use`]). The
//!   konnector's own namespace is never a source or a target (it holds provider credentials).
//! - Conflicts: an unmarked target is `ForeignObjectExists` and left alone; `conflictPolicy:
//!   Adopt` takes over unmarked targets on the provider only, never on the consumer (§8.3).
//!   Anything else marked is `OwnedByAnother`. Objects that are some binding's copy are never
//!   sources, so two directions over one kind cannot copy copies back and forth.
//! - Garbage collection: a provider copy (`FromConsumer`) goes as soon as its source is not
//!   selected any more (label changed, name dropped, source deleted, rule removed, namespace
//!   out of use). A consumer copy (`FromProvider`) goes only when the binding itself no longer
//!   selects it (its rule, names or labels as copied, or its namespace): §8.1 forbids deleting
//!   consumer objects because of a provider-side change, so a source deleted or relabelled on
//!   the provider leaves the last copy in place. A syncer collects only on a complete picture
//!   (§8.9): every bound API's index listed once, and the source store of the namespace listed.
//! - Unbind ([`remove_copies`]): every copy this binding owns goes, on both sides. With the
//!   Orphan escape hatch it is not called at all: every copy stays, in both directions. A
//!   syncer stops by itself once the binding store shows its binding deleting or gone, so it
//!   never re-creates a copy the unbind removed.
//! - Secret content is never logged and never part of an error, condition or report: errors
//!   name the resource, namespace and name only.
//! - A kind and direction without rules runs no syncer and no watch: a one-shot sweep lists
//!   the binding's copies there (on the binding's first ensure after a start, and when its last
//!   rule goes) and deletes them until a list finds none; a refusal of that list is ignored (a
//!   binding without rules must not need the verb). The binding reconciler remembers a binding
//!   with neither rules nor copies and skips it until a rule comes back.

mod copy;
mod kinds;
mod namespaces;
mod references;
mod select;
mod syncer;
mod syncers;
mod watches;

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{TRUE, field_manager, label};
use kbind_api::{ConflictPolicy, RelatedKind, RelatedResource, RelatedResourceDirection, RelatedResourceSelector};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, ListParams};

pub use references::names_at;
pub use select::{label_selector_matches, selects};
pub use syncer::ChangeHook;
pub use syncers::{RelatedSpec, RelatedSyncers};

use crate::context::Context;
use crate::provider::EngagedProvider;
use crate::sync::{BindingKind, BindingRef};
use copy::{Owner, Verdict};

/// Which cluster an operation ran against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    /// The consumer cluster.
    Consumer,
    /// The provider cluster.
    Provider,
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Side::Consumer => "consumer",
            Side::Provider => "provider",
        })
    }
}

/// What one [`reconcile`] pass found, or what the syncers of a binding know now
/// ([`RelatedSyncers::report`]).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RelatedReport {
    /// Copies in place and current after this pass.
    pub copied: usize,
    /// Targets left alone: (`"<resource> <namespace>/<name>"`, reason).
    pub conflicts: Vec<(String, String)>,
    /// Provider operations refused, as `"<verb> <resource>"`, sorted and unique.
    pub denied: Vec<String>,
    /// Copies deleted because nothing selects their source any more.
    pub removed: usize,
    /// Copies of this binding that the pass found (before collecting), on both sides; a side
    /// that may not be listed counts none (nothing there is collected either).
    pub owned: usize,
    /// Lists or watches of related kinds that keep failing, in words (sorted, unique).
    pub failing: Vec<String>,
    /// Rules whose kind a side does not serve (or is cluster-scoped), in words naming the kind.
    pub unserved: Vec<String>,
    /// Consumer requests the konnector's own RBAC refused, as `"<verb> <resource>"`.
    pub consumer_denied: Vec<String>,
}

/// Errors of related-resource copying; they name objects, never their content.
#[derive(Debug, thiserror::Error)]
pub enum RelatedError {
    /// Listing sources or copies failed.
    #[error("failed to list {resource} on the {side} ({})", crate::cause::http_cause(.source))]
    ListFailed {
        /// Where.
        side: Side,
        /// `secrets`, `configmaps` or an instance resource.
        resource: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// Reading one target failed.
    #[error("failed to read {resource} {object} on the {side} ({})", crate::cause::http_cause(.source))]
    ReadFailed {
        /// Where.
        side: Side,
        /// The resource (plural).
        resource: String,
        /// `<namespace>/<name>`.
        object: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
    /// Writing or deleting one copy failed.
    #[error("failed to {step} {resource} {object} on the {side} ({})", crate::cause::http_cause(.source))]
    WriteFailed {
        /// Where.
        side: Side,
        /// `apply` or `delete`.
        step: &'static str,
        /// The resource (plural).
        resource: String,
        /// `<namespace>/<name>`.
        object: String,
        /// Cause.
        #[source]
        source: kbind_cluster::Error,
    },
}

impl RelatedError {
    /// The provider's answer, when a request to the provider failed.
    pub fn provider_error(&self) -> Option<&kbind_cluster::Error> {
        match self {
            RelatedError::ListFailed {
                side: Side::Provider,
                source,
                ..
            }
            | RelatedError::ReadFailed {
                side: Side::Provider,
                source,
                ..
            }
            | RelatedError::WriteFailed {
                side: Side::Provider,
                source,
                ..
            } => Some(source),
            _ => None,
        }
    }
}

/// The kinds every binding may have copies of (swept without discovery).
fn builtin_kinds() -> [RelatedKind; 2] {
    [RelatedKind::secrets(), RelatedKind::config_maps()]
}

/// The built-in kinds, then the other kinds `rules` name, each once.
fn kinds_of(rules: &[RelatedResource]) -> Vec<RelatedKind> {
    let mut kinds = builtin_kinds().to_vec();
    for kind in rules.iter().map(RelatedResource::kind) {
        if !kinds.contains(&kind) {
            kinds.push(kind);
        }
    }
    kinds
}

type Key = (String, String);

const DIRECTIONS: [RelatedResourceDirection; 2] = [
    RelatedResourceDirection::FromConsumer,
    RelatedResourceDirection::FromProvider,
];

fn key_of(obj: &DynamicObject) -> (String, String) {
    (
        obj.metadata.namespace.clone().unwrap_or_default(),
        obj.metadata.name.clone().unwrap_or_default(),
    )
}

fn describe(res: &ApiResource, (ns, name): &(String, String)) -> String {
    format!("{} {ns}/{name}", res.plural)
}

fn managed_copies() -> ListParams {
    ListParams::default().labels(&format!("{}={TRUE}", label::MANAGED))
}

/// `"<verb> <resource>"` of a refused request.
fn denial(e: &kbind_cluster::Error) -> Option<String> {
    match e {
        kbind_cluster::Error::Forbidden { verb, resource, .. } => Some(format!("{verb} {resource}")),
        _ => None,
    }
}

/// The two clusters of one binding, by side.
struct Sides<'a> {
    consumer: &'a dyn ClusterClient,
    provider: Option<&'a EngagedProvider>,
}

impl<'a> Sides<'a> {
    /// Fresh reads (the provider's direct reader).
    fn reader(&self, side: Side) -> Option<&'a dyn ClusterClient> {
        match side {
            Side::Consumer => Some(self.consumer),
            Side::Provider => self.provider.map(|p| p.reader.as_ref()),
        }
    }

    /// Writes (the provider's identity-guarded client).
    fn writer(&self, side: Side) -> Option<&'a dyn ClusterClient> {
        match side {
            Side::Consumer => Some(self.consumer),
            Side::Provider => self.provider.map(|p| p.client.as_ref()),
        }
    }
}

/// Source and target sides of a direction.
fn sides_of(direction: RelatedResourceDirection) -> (Side, Side) {
    match direction {
        RelatedResourceDirection::FromConsumer => (Side::Consumer, Side::Provider),
        RelatedResourceDirection::FromProvider => (Side::Provider, Side::Consumer),
    }
}

/// Everything one reconcile pass works with.
struct Pass<'a> {
    sides: Sides<'a>,
    binding: &'a BindingRef,
    owner: Owner,
    adopt: bool,
    namespaces: BTreeSet<String>,
    report: RelatedReport,
    denied: BTreeSet<String>,
}

/// Converges the related copies of `binding`: copies what `rules` select in `namespaces`
/// (see [`namespaces_in_use`]), reports conflicts and refusals, and deletes the copies it
/// owns that nothing selects any more, in one pass of LISTs. The engine runs [`RelatedSyncers`]
/// instead (the same rules per object, over watch caches); this is for callers without caches.
/// It does not read the bound objects, so it follows no `references`: a kind whose rules have
/// any is copied by its labels and names only and never collected here, since a reference may
/// still select any copy of it.
#[allow(clippy::too_many_arguments)]
pub async fn reconcile(
    ctx: &Context,
    binding: &BindingRef,
    rules: &[RelatedResource],
    policy: ConflictPolicy,
    provider: &EngagedProvider,
    consumer_cluster_uid: &str,
    namespaces: &BTreeSet<String>,
) -> Result<RelatedReport, RelatedError> {
    let namespaces = namespaces
        .iter()
        .filter(|ns| **ns != ctx.config.namespace)
        .filter(|ns| binding.namespace.as_ref().is_none_or(|own| own == *ns))
        .cloned()
        .collect();
    let mut pass = Pass {
        sides: Sides {
            consumer: ctx.consumer.as_ref(),
            provider: Some(provider),
        },
        binding,
        owner: Owner {
            binding_uid: binding.uid.clone(),
            consumer_cluster_uid: consumer_cluster_uid.to_string(),
        },
        adopt: policy == ConflictPolicy::Adopt,
        namespaces,
        report: RelatedReport::default(),
        denied: BTreeSet::new(),
    };
    for kind in kinds_of(rules) {
        for direction in DIRECTIONS {
            let lane: Vec<&RelatedResource> = rules
                .iter()
                .filter(|r| r.kind() == kind && r.direction == direction)
                .collect();
            let selectors: Vec<&RelatedResourceSelector> = lane.iter().map(|r| &r.selector).collect();
            let version = lane.iter().find_map(|r| r.version.as_deref());
            let res = if lane.is_empty() {
                kinds::builtin(&kind, None)
            } else {
                let (source, target) = sides_of(direction);
                let side = |s: Side| (s, pass.sides.reader(s).expect("a reconcile pass has both sides"));
                match kinds::resolve(&kind, version, side(source), side(target)).await {
                    Ok(resolved) => Some(resolved.res),
                    Err(kinds::Unresolved::NotServed(why) | kinds::Unresolved::Failed(why)) => {
                        pass.report.unserved.push(why);
                        None
                    }
                }
            };
            if let Some(res) = res {
                pass.converge(&res, direction, &selectors).await?;
            }
        }
    }
    pass.report.denied = pass.denied.into_iter().collect();
    Ok(pass.report)
}

impl Pass<'_> {
    async fn converge(
        &mut self,
        res: &ApiResource,
        direction: RelatedResourceDirection,
        selectors: &[&RelatedResourceSelector],
    ) -> Result<(), RelatedError> {
        let res = res.clone();
        let (source_side, target_side) = sides_of(direction);
        let Some(sources) = self.sources(&res, source_side, selectors).await? else {
            // Never collect on a partial picture of the sources.
            return Ok(());
        };
        for source in sources.values() {
            self.copy(&res, target_side, source).await?;
        }
        if selectors.iter().any(|s| !s.references.is_empty()) {
            return Ok(());
        }
        let Some(copies) = self.our_copies(&res, target_side, !selectors.is_empty()).await? else {
            return Ok(());
        };
        self.report.owned += copies.len();
        for copy in copies {
            let key = key_of(&copy);
            if sources.contains_key(&key) || copy.metadata.deletion_timestamp.is_some() {
                continue;
            }
            // A consumer copy stays while the binding still selects it (§8.1).
            if target_side == Side::Consumer && still_selected(&self.namespaces, &copy, selectors, &BTreeSet::new()) {
                continue;
            }
            let writer = self.sides.writer(target_side).expect("a reconcile pass has both sides");
            if delete_copy(writer, &res, target_side, &key).await? {
                tracing::info!(binding = %self.binding.name, object = %describe(&res, &key), side = %target_side, "removed a related copy nothing selects any more");
                self.report.removed += 1;
            }
        }
        Ok(())
    }

    /// The selected sources by (namespace, name), or `None` when some list was refused.
    async fn sources(
        &mut self,
        res: &ApiResource,
        side: Side,
        selectors: &[&RelatedResourceSelector],
    ) -> Result<Option<BTreeMap<(String, String), DynamicObject>>, RelatedError> {
        let mut sources = BTreeMap::new();
        if selectors.is_empty() {
            return Ok(Some(sources));
        }
        let reader = self.sides.reader(side).expect("a reconcile pass has both sides");
        let mut complete = true;
        for ns in &self.namespaces {
            let list = match reader.list(res, Some(ns), &ListParams::default()).await {
                Ok(list) => list,
                Err(e) if side == Side::Provider && e.is_forbidden() => {
                    self.denied.extend(denial(&e));
                    complete = false;
                    continue;
                }
                Err(source) => {
                    return Err(RelatedError::ListFailed {
                        side,
                        resource: res.plural.clone(),
                        source,
                    });
                }
            };
            for obj in list.items {
                if !is_source(&obj, selectors, &BTreeSet::new()) {
                    continue;
                }
                sources.insert(key_of(&obj), obj);
            }
        }
        Ok(complete.then_some(sources))
    }

    /// Copies `source` to `side` if the target there may be written.
    async fn copy(&mut self, res: &ApiResource, side: Side, source: &DynamicObject) -> Result<(), RelatedError> {
        let adopt = self.adopt && side == Side::Provider;
        match copy_to(&self.sides, &self.owner, adopt, res, side, source).await? {
            Outcome::Current => self.report.copied += 1,
            Outcome::Conflict(reason) => {
                self.report
                    .conflicts
                    .push((describe(res, &key_of(source)), reason.to_string()));
            }
            Outcome::Denied(denied) => {
                self.denied.insert(denied);
            }
            Outcome::Later => {}
        }
        Ok(())
    }

    /// This binding's copies on `side`, or `None` when that side refuses to list them and no
    /// rule needs them (a binding without related resources must not need the verb: the chart
    /// grants the konnector Secrets only in its own namespace), or the provider refuses.
    async fn our_copies(
        &mut self,
        res: &ApiResource,
        side: Side,
        needed: bool,
    ) -> Result<Option<Vec<DynamicObject>>, RelatedError> {
        let reader = self.sides.reader(side).expect("a reconcile pass has both sides");
        match list_copies(reader, res, side, self.binding, &self.namespaces, &self.owner).await {
            Ok(copies) => Ok(Some(copies)),
            Err(RelatedError::ListFailed { source, .. })
                if source.is_forbidden() && (side == Side::Provider || !needed) =>
            {
                if needed {
                    self.denied.extend(denial(&source));
                }
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }
}

/// Whether the binding selects `copy` as it is (its namespace is in use and a rule picks its
/// name and copied labels, or a bound object references it): a consumer copy that is stays
/// (§8.1).
fn still_selected(
    namespaces: &BTreeSet<String>,
    copy: &DynamicObject,
    selectors: &[&RelatedResourceSelector],
    referenced: &BTreeSet<Key>,
) -> bool {
    let key = key_of(copy);
    let labels = copy::copied_metadata(copy.metadata.labels.as_ref());
    namespaces.contains(&key.0) && (referenced.contains(&key) || selectors.iter().any(|s| selects(s, &key.1, &labels)))
}

/// Whether `obj` is a source the selectors pick by labels and names, or a bound object
/// references (`referenced`); some binding's copy never is.
fn is_source(obj: &DynamicObject, selectors: &[&RelatedResourceSelector], referenced: &BTreeSet<Key>) -> bool {
    let key = key_of(obj);
    let empty = BTreeMap::new();
    let labels = obj.metadata.labels.as_ref().unwrap_or(&empty);
    !copy::is_related_copy(obj) && (referenced.contains(&key) || selectors.iter().any(|s| selects(s, &key.1, labels)))
}

/// What one attempt to write a copy came to.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Outcome {
    /// The copy is in place and current.
    Current,
    /// The target is someone else's and stays as it is, for this reason.
    Conflict(&'static str),
    /// The provider refused a read or the write (`"<verb> <resource>"`).
    Denied(String),
    /// Not written now (the target terminates, its namespace is missing, it changed since it was
    /// read): look again later.
    Later,
}

/// Copies `source` to `side` if the target there may be written: a fresh read of the target,
/// the ownership verdict (DESIGN.md §4 "conflicts"; `adopt` takes over unmarked targets), and
/// a server-side apply as `kbind-konnector-related` unless the target is current already.
async fn copy_to(
    sides: &Sides<'_>,
    owner: &Owner,
    adopt: bool,
    res: &ApiResource,
    side: Side,
    source: &DynamicObject,
) -> Result<Outcome, RelatedError> {
    let key = key_of(source);
    let (Some(reader), Some(writer)) = (sides.reader(side), sides.writer(side)) else {
        return Ok(Outcome::Later);
    };
    let live = match reader.get_opt(res, Some(&key.0), &key.1).await {
        Ok(live) => live,
        Err(e) if side == Side::Provider && e.is_forbidden() => return Ok(denied_or_later(&e)),
        Err(source) => {
            return Err(RelatedError::ReadFailed {
                side,
                resource: res.plural.clone(),
                object: describe(res, &key),
                source,
            });
        }
    };
    let precondition = match copy::classify(live.as_ref(), owner, adopt) {
        Verdict::Create => None,
        Verdict::Update { precondition } => precondition,
        Verdict::Terminating => return Ok(Outcome::Later),
        Verdict::Conflict(reason) => return Ok(Outcome::Conflict(reason)),
    };
    let body = copy::apply_body(res, source, owner, precondition.as_deref());
    if live.as_ref().is_some_and(|l| copy::up_to_date(res, l, &body)) {
        return Ok(Outcome::Current);
    }
    match writer
        .apply(res, Some(&key.0), &key.1, body, field_manager::KONNECTOR_RELATED, true)
        .await
    {
        Ok(_) => Ok(Outcome::Current),
        Err(e) if side == Side::Provider && e.is_forbidden() => Ok(denied_or_later(&e)),
        // The namespace is not there yet, or the target changed since it was classified: look
        // again later.
        Err(e) if e.is_not_found() || matches!(e, kbind_cluster::Error::Conflict { .. }) => Ok(Outcome::Later),
        Err(source) => Err(RelatedError::WriteFailed {
            side,
            step: "apply",
            resource: res.plural.clone(),
            object: describe(res, &key),
            source,
        }),
    }
}

fn denied_or_later(e: &kbind_cluster::Error) -> Outcome {
    denial(e).map_or(Outcome::Later, Outcome::Denied)
}

/// The copies `owner` has on one side: in the Binding's namespace, or cluster-wide for a
/// ClusterBinding, falling back to `fallback` namespaces when a cluster-wide list is refused.
async fn list_copies(
    reader: &dyn ClusterClient,
    res: &ApiResource,
    side: Side,
    binding: &BindingRef,
    fallback: &BTreeSet<String>,
    owner: &Owner,
) -> Result<Vec<DynamicObject>, RelatedError> {
    let failed = |source| RelatedError::ListFailed {
        side,
        resource: res.plural.clone(),
        source,
    };
    let items = match (&binding.kind, &binding.namespace) {
        (BindingKind::Namespaced, Some(ns)) => {
            reader
                .list(res, Some(ns), &managed_copies())
                .await
                .map_err(failed)?
                .items
        }
        _ => match reader.list(res, None, &managed_copies()).await {
            Ok(list) => list.items,
            Err(e) if e.is_forbidden() => {
                let mut items = Vec::new();
                for ns in fallback {
                    items.extend(
                        reader
                            .list(res, Some(ns), &managed_copies())
                            .await
                            .map_err(failed)?
                            .items,
                    );
                }
                items
            }
            Err(e) => return Err(failed(e)),
        },
    };
    Ok(items.into_iter().filter(|o| copy::is_ours(o, owner)).collect())
}

/// Deletes one copy; `true` when it is gone by the end of the call.
async fn delete_copy(
    writer: &dyn ClusterClient,
    res: &ApiResource,
    side: Side,
    key: &(String, String),
) -> Result<bool, RelatedError> {
    match writer
        .delete(res, Some(&key.0), &key.1, &DeleteParams::background())
        .await
    {
        Ok(gone) => Ok(gone.is_none()),
        Err(e) if e.is_not_found() => Ok(true),
        Err(source) => Err(RelatedError::WriteFailed {
            side,
            step: "delete",
            resource: res.plural.clone(),
            object: describe(res, key),
            source,
        }),
    }
}

/// Unbind: deletes every related copy `binding` owns, on the consumer always and on the
/// provider unless `skip_provider` (no provider copy can exist, or it may not be listed).
/// Returns whether nothing of ours is left; `false` while copies terminate or while provider
/// copies must go and no provider is engaged (call again). The Orphan escape hatch does not
/// call it: Orphan deletes nothing on either side.
pub async fn remove_copies(
    ctx: &Context,
    binding: &BindingRef,
    consumer_cluster_uid: &str,
    provider: Option<&EngagedProvider>,
    skip_provider: bool,
) -> Result<bool, RelatedError> {
    remove_copies_of(ctx, binding, consumer_cluster_uid, provider, skip_provider, &[]).await
}

/// [`remove_copies`], looking also for copies of the kinds `rules` name (resolved by discovery
/// on each side; a side that does not serve a kind holds no copy of it).
pub async fn remove_copies_of(
    ctx: &Context,
    binding: &BindingRef,
    consumer_cluster_uid: &str,
    provider: Option<&EngagedProvider>,
    skip_provider: bool,
    rules: &[RelatedResource],
) -> Result<bool, RelatedError> {
    let owner = Owner {
        binding_uid: binding.uid.clone(),
        consumer_cluster_uid: consumer_cluster_uid.to_string(),
    };
    let sides = Sides {
        consumer: ctx.consumer.as_ref(),
        provider,
    };
    let mut complete = true;
    let mut targets = vec![Side::Consumer];
    if !skip_provider {
        targets.push(Side::Provider);
    }
    for side in targets {
        let (Some(reader), Some(writer)) = (sides.reader(side), sides.writer(side)) else {
            complete = false;
            continue;
        };
        let fallback = match side {
            Side::Provider if binding.kind == BindingKind::Cluster => consumer_namespaces(ctx).await?,
            _ => BTreeSet::new(),
        };
        for kind in kinds_of(rules) {
            let res = match kinds::resolve_on(&kind, reader).await {
                Ok(Some(res)) => res,
                Ok(None) => continue,
                Err(why) => {
                    tracing::warn!(binding = %binding.name, %side, reason = %why, "related copies of a kind not looked for yet");
                    complete = false;
                    continue;
                }
            };
            for copy in list_copies(reader, &res, side, binding, &fallback, &owner).await? {
                if copy.metadata.deletion_timestamp.is_some()
                    || !delete_copy(writer, &res, side, &key_of(&copy)).await?
                {
                    complete = false;
                }
            }
        }
    }
    Ok(complete)
}

/// Every namespace of the consumer (where a ClusterBinding's provider copies can be).
async fn consumer_namespaces(ctx: &Context) -> Result<BTreeSet<String>, RelatedError> {
    let res = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    let list = ctx
        .consumer
        .list(&res, None, &ListParams::default())
        .await
        .map_err(|source| RelatedError::ListFailed {
            side: Side::Consumer,
            resource: res.plural.clone(),
            source,
        })?;
    Ok(list.items.iter().filter_map(|n| n.metadata.name.clone()).collect())
}

/// The namespaces whose related resources `binding` copies, by LISTs (the syncers read them from
/// an index instead): a Binding's own namespace; for a ClusterBinding, every namespace where the consumer has instances of the bound `apis`
/// (`<plural>.<group>`; APIs whose consumer CRD is missing or cluster-scoped add none).
pub async fn namespaces_in_use(
    ctx: &Context,
    binding: &BindingRef,
    apis: &[String],
) -> Result<BTreeSet<String>, RelatedError> {
    if let Some(ns) = &binding.namespace {
        return Ok(BTreeSet::from([ns.clone()]));
    }
    let consumer = ctx.consumer.as_ref();
    let crds = crate::crdpull::crd_resource();
    let failed = |resource: &str, source| RelatedError::ListFailed {
        side: Side::Consumer,
        resource: resource.to_string(),
        source,
    };
    let mut namespaces = BTreeSet::new();
    for api in apis {
        let crd = match consumer.get_opt(&crds, None, api).await {
            Ok(Some(crd)) => crd,
            Ok(None) => continue,
            Err(source) => return Err(failed(api, source)),
        };
        let Ok(crd) = kbind_cluster::from_dynamic::<CustomResourceDefinition>(crd) else {
            continue;
        };
        let Some(res) = namespaced_resource(&crd) else { continue };
        match consumer.list(&res, None, &ListParams::default()).await {
            Ok(list) => namespaces.extend(list.items.into_iter().filter_map(|o| o.metadata.namespace)),
            // Not served yet (a CRD just created): no instances. A 429 is not read that way, though
            // real apiservers answer it while a new CRD's storage initialises: it is also plain
            // throttling, and a pass that took busy namespaces for unused ones would collect their
            // copies. The pass fails and is retried instead.
            Err(e) if e.is_not_found() => {}
            Err(source) => return Err(failed(api, source)),
        }
    }
    Ok(namespaces)
}

/// The storage version's resource of a namespaced CRD.
fn namespaced_resource(crd: &CustomResourceDefinition) -> Option<ApiResource> {
    if crd.spec.scope != "Namespaced" {
        return None;
    }
    let version = crd.spec.versions.iter().find(|v| v.storage)?;
    let group = crd.spec.group.clone();
    Some(ApiResource {
        api_version: format!("{group}/{}", version.name),
        group,
        version: version.name.clone(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    })
}
