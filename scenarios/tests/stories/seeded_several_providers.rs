//! The randomized several-providers property (contract §4 "Connections per
//! API", §8): for many seeds, a random schedule across providers `acme` and `beta` of creating
//! Bindings of widgets (3 namespaces) and ClusterBindings through either Connection, deleting
//! them (and "moving" a namespace: deleting one Connection's Binding while the other's exists,
//! or creating the other's next), removing widgets from a binding's `spec.apis` and adding it
//! back (each binding also names a filler API of its own provider, so its spec is never empty),
//! partitioning either provider for a while and healing it, creating, patching and deleting
//! consumer widgets, with a konnector crash and restart now and then in the middle of an action,
//! and restarts while a binding store cannot list yet.
//!
//! After every step (besides the world's own §8 checks): no namespace is served (`Synced=True`)
//! through two Connections; a binding that recorded a claim on widgets keeps it while it lives
//! and names widgets, whatever its Connection does; a namespace's serving Connection changes
//! only after every binding that served it there was deleted or stopped naming widgets (never a
//! takeover); no consumer widget has copies on both providers; no consumer widget is lost (same
//! UIDs); no widget is frozen (labelled for a Connection with no binding that claims its
//! namespace). After every action settles (bounded, no sleeps): each binding's per-API `Synced`
//! and claim are what the model's placement rule says (a recorded claim first, then not refused
//! before refused, then oldest, then namespace and Connection; iterated to a fixed point from
//! the claims before the action), a refused one with `BoundThroughAnotherConnection`; every
//! widget's `core.kbind.io/connection` label names the Connection serving its namespace and its
//! only copy (our consumer-object-uid, its latest spec) is on that provider; an unserved
//! namespace has no copies; the consumer CRD's annotation names a Connection with a live
//! binding. At the end every binding, ClusterBindings included, is deleted: the consumer CRD
//! goes and no copy is left on either provider.
//!
//! `KBIND_SEEDS=N` runs N/20 seeds (default 20; CI's 1,000 run 50); `KBIND_SEED=S` replays seed S. A failure names the
//! seed, the step and the action sequence so far.

use std::collections::{BTreeMap, BTreeSet};

use futures::FutureExt;
use kbind_api::consts::{annotation as kbind_annotation, condition, label as kbind_label, reason};
use kbind_cluster::{ClusterClient, DynamicObject, Patch, PatchParams};
use kbind_scenarios::World;
use kbind_scenarios::apis::{widgets, widgets_crd};
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use serde_json::{Value, json};

use crate::binding_kit::bindings;
use crate::several_providers::{PROVIDERS, two_providers};
use crate::story::*;

const NAMESPACES: [&str; 3] = ["team-a", "team-b", "team-c"];
const WIDGET_NAMES: [&str; 3] = ["w1", "w2", "w3"];
const ACTIONS: usize = 50;
/// Steps an action gets to settle before the story fails.
const SETTLE_WITHIN: u64 = 120;

/// One binding of the pool: Binding `namespace/connection` or ClusterBinding `connection`, both
/// through Connection `connection`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
struct Slot {
    connection: &'static str,
    namespace: Option<&'static str>,
}

impl std::fmt::Display for Slot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self.namespace {
            None => write!(f, "ClusterBinding/{}", self.connection),
            Some(ns) => write!(f, "Binding/{ns}/{}", self.connection),
        }
    }
}

impl Slot {
    fn pool() -> Vec<Slot> {
        let mut slots = Vec::new();
        for connection in PROVIDERS {
            slots.push(Slot {
                connection,
                namespace: None,
            });
            for ns in NAMESPACES {
                slots.push(Slot {
                    connection,
                    namespace: Some(ns),
                });
            }
        }
        slots
    }

    /// The pool slot a stored binding is.
    fn of(obj: &DynamicObject) -> Option<Slot> {
        let connection = obj.data.pointer("/spec/connectionRef/name").and_then(Value::as_str)?;
        let connection = PROVIDERS.into_iter().find(|p| *p == connection)?;
        let namespace = match obj.metadata.namespace.as_deref() {
            None => None,
            Some(ns) => Some(NAMESPACES.into_iter().find(|n| *n == ns)?),
        };
        (obj.metadata.name.as_deref() == Some(connection)).then_some(Slot { connection, namespace })
    }

    fn resource(&self) -> kbind_cluster::ApiResource {
        if self.namespace.is_some() {
            bindings()
        } else {
            cluster_bindings()
        }
    }

    /// Whether this binding covers `namespace` (`None`: the whole API, only a ClusterBinding).
    fn covers(&self, namespace: Option<&str>) -> bool {
        self.namespace.is_none() || (namespace.is_some() && self.namespace == namespace)
    }
}

/// A live binding in the model.
#[derive(Debug, Clone)]
struct Bound {
    uid: String,
    created: String,
    /// Refused for widgets (`BoundThroughAnotherConnection`) as last settled; `false` until then.
    refused: bool,
    /// Holds a claim on widgets (`claimedAt`) as last settled.
    claimed: bool,
    /// Names widgets in its `spec.apis` (else only its filler API).
    names: bool,
}

/// The filler API each provider exports besides widgets, so a binding that stops naming
/// widgets still names something (and no two Connections share it).
fn filler(connection: &str) -> &'static str {
    if connection == "acme" {
        "gizmos.example.org"
    } else {
        "gadgets.example.org"
    }
}

/// The `spec.apis` of a binding of `connection` that names widgets or not.
fn apis(connection: &str, names: bool) -> Value {
    if names {
        json!([{"name": filler(connection)}, {"name": WIDGETS}])
    } else {
        json!([{"name": filler(connection)}])
    }
}

/// A live consumer widget in the model.
#[derive(Debug, Clone)]
struct Widget {
    uid: String,
    size: i64,
}

/// One binding as the consumer stores it.
#[derive(Debug, Clone)]
struct Seen {
    slot: Slot,
    uid: String,
    deleting: bool,
    /// Its per-API `Synced` of widgets: status, reason and message.
    synced: Option<(String, String, String)>,
    /// Whether its status records a claim on widgets.
    claimed: bool,
    /// Whether its spec names widgets.
    names: bool,
}

impl Seen {
    fn serving(&self) -> bool {
        self.synced.as_ref().is_some_and(|(s, _, _)| s == "True")
    }
}

/// Per live binding naming widgets: whether it is refused, and whether it holds a claim.
type Flags = BTreeMap<Slot, (bool, bool)>;
/// A binding's claim, as the design ranks it: no claim, creation, namespace, name; lower wins
/// (both providers export widgets with one schema, so nothing else tells bindings apart).
type Rank = (bool, String, Option<&'static str>, &'static str);
/// The provider copies: `(namespace, name)` → the providers holding one, each with its
/// consumer-object-uid annotation.
type Copies = BTreeMap<(String, String), Vec<(&'static str, Option<String>)>>;

struct Model {
    seed: u64,
    history: Vec<String>,
    live: BTreeMap<Slot, Bound>,
    /// UIDs of the bindings the schedule deleted.
    deleted: BTreeSet<String>,
    /// UIDs of the bindings the schedule made stop naming widgets (until they name it again).
    stopped: BTreeSet<String>,
    widgets: BTreeMap<(&'static str, &'static str), Widget>,
    /// UIDs of the bindings seen holding a claim on widgets (while they name it).
    was_claiming: BTreeSet<String>,
    /// Per namespace, the Connection last seen serving it and its bindings that did.
    servers: BTreeMap<&'static str, (&'static str, BTreeSet<String>)>,
    /// Once every binding is being deleted, the consumer CRD (and its widgets) may go.
    tearing_down: bool,
}

impl Model {
    fn fail(&self, world: &World, what: String) -> ! {
        panic!(
            "seed {} step {}: {what}\nreproduce: KBIND_SEED={} cargo test -p kbind-scenarios --test stories seeded_several_providers\nactions: {:#?}",
            self.seed,
            world.steps(),
            self.seed,
            self.history
        )
    }

    /// Steps once (the world checks §8), then checks the per-step property.
    async fn step(&mut self, world: &mut World) {
        if let Err(panic) = std::panic::AssertUnwindSafe(world.step()).catch_unwind().await {
            let what = panic
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
                .unwrap_or_default();
            self.fail(world, format!("the world failed: {what}"));
        }
        self.check_step(world).await;
    }

    async fn check_step(&mut self, world: &World) {
        let seen = seen_bindings(world).await;
        for b in seen.iter().filter(|b| !b.deleting) {
            if !b.names {
                self.was_claiming.remove(&b.uid);
            } else if b.claimed {
                self.was_claiming.insert(b.uid.clone());
            } else if self.was_claiming.contains(&b.uid) {
                self.fail(
                    world,
                    format!(
                        "{} claimed widgets and lost the claim while it lives and names it: Synced {:?}",
                        b.slot, b.synced
                    ),
                );
            }
        }
        for ns in NAMESPACES {
            let mut by: BTreeMap<&'static str, BTreeSet<String>> = BTreeMap::new();
            for b in seen
                .iter()
                .filter(|b| !b.deleting && b.serving() && b.slot.covers(Some(ns)))
            {
                by.entry(b.slot.connection).or_default().insert(b.uid.clone());
            }
            if by.len() > 1 {
                self.fail(world, format!("{ns} is served through two Connections: {by:?}"));
            }
            let Some((connection, uids)) = by.into_iter().next() else {
                continue;
            };
            if let Some((before, served)) = self.servers.get(ns)
                && *before != connection
                && let Some(kept) = served
                    .iter()
                    .find(|u| !self.deleted.contains(*u) && !self.stopped.contains(*u))
            {
                self.fail(
                    world,
                    format!(
                        "takeover: {ns} moved from {before} to {connection} while {before}'s binding {kept} that served it was never deleted nor stopped naming widgets"
                    ),
                );
            }
            self.servers.insert(ns, (connection, uids));
        }
        let copies = copies(world).await;
        for ((ns, name), on) in &copies {
            let providers: BTreeSet<&str> = on.iter().map(|(p, _)| *p).collect();
            if providers.len() > 1 {
                self.fail(
                    world,
                    format!("widget {ns}/{name} has copies on both providers: {on:?}"),
                );
            }
        }
        // Frozen: a widget labelled for a Connection none of whose bindings (live or draining)
        // claims its namespace would never sync or finish deleting again.
        for (ns, name, connection) in labelled_widgets(world).await {
            let claimed = seen
                .iter()
                .any(|b| b.slot.connection == connection && b.claimed && b.slot.covers(Some(ns.as_str())));
            if !claimed {
                let bindings = describe_bindings(world).await;
                self.fail(
                    world,
                    format!("widget {ns}/{name} is frozen: labelled for {connection}, whose bindings claim no {ns}\nbindings:\n{bindings}"),
                );
            }
        }
        if !self.tearing_down {
            let consumer = consumer_widgets(world).await;
            for ((ns, name), w) in &self.widgets {
                if consumer.get(&(ns.to_string(), name.to_string())) != Some(&w.uid) {
                    self.fail(
                        world,
                        format!(
                            "consumer widget {ns}/{name} ({}) was lost: now {:?}",
                            w.uid,
                            consumer.get(&(ns.to_string(), name.to_string()))
                        ),
                    );
                }
            }
        }
    }

    /// Whether a live binding other than `slot` names widgets (one must, so the API stays in use).
    fn another_names_widgets(&self, slot: &Slot) -> bool {
        self.naming().any(|(s, _)| s != slot)
    }

    /// The live bindings that name widgets, the ones placement is about.
    fn naming(&self) -> impl Iterator<Item = (&Slot, &Bound)> {
        self.live.iter().filter(|(_, b)| b.names)
    }

    /// The model's placement: the flags a fixed point of the design's rule reaches from the
    /// current flags, sweeping the bindings in `order`. A binding that serves claims; a claim
    /// outranks everything else and stays.
    fn fixed_point(&self, order: &[Slot]) -> Option<Flags> {
        let mut flags: Flags = self.naming().map(|(s, b)| (*s, (b.refused, b.claimed))).collect();
        for _ in 0..10 {
            let mut changed = false;
            for slot in order {
                if !flags.contains_key(slot) {
                    continue;
                }
                // Refused holds no claim; one that is not refused serves, and a serving one claims.
                let refused = self.elsewhere(slot, &flags);
                let next = (refused, !refused);
                if flags.insert(*slot, next) != Some(next) {
                    changed = true;
                }
            }
            if !changed {
                return Some(flags);
            }
        }
        None
    }

    /// Whether, for some namespace `v` covers, another Connection's claim beats `v`'s.
    fn elsewhere(&self, v: &Slot, flags: &Flags) -> bool {
        flags.keys().filter(|o| o.connection != v.connection).any(|o| {
            let namespace = v.namespace.or(o.namespace);
            if !o.covers(namespace) {
                return false;
            }
            match (
                self.claim(o.connection, namespace, flags),
                self.claim(v.connection, namespace, flags),
            ) {
                (Some(theirs), Some(ours)) => theirs < ours,
                (Some(_), None) => true,
                _ => false,
            }
        })
    }

    /// Rank of the best live binding of `connection` naming widgets and covering `namespace`
    /// that can claim it: one holding a claim, or one no other Connection's claim keeps out.
    fn claim(&self, connection: &str, namespace: Option<&str>, flags: &Flags) -> Option<Rank> {
        flags
            .iter()
            .filter(|(s, _)| s.connection == connection && s.covers(namespace))
            .filter(|(s, (_, claimed))| *claimed || !Self::blocked(s, flags))
            .filter_map(|(s, (_, claimed))| {
                let b = self.live.get(s)?;
                Some((!claimed, b.created.clone(), s.namespace, s.connection))
            })
            .min()
    }

    /// Whether `slot`, holding no claim, is kept out by another Connection's claim on a
    /// namespace it covers (a ClusterBinding by any: all or nothing).
    fn blocked(slot: &Slot, flags: &Flags) -> bool {
        flags.iter().any(|(o, (_, claimed))| {
            *claimed
                && o.connection != slot.connection
                && (slot.namespace.is_none() || o.namespace.is_none() || o.namespace == slot.namespace)
        })
    }

    /// Every placement the rule may settle on (sweeping forwards and backwards).
    fn expected(&self, world: &World) -> Vec<Flags> {
        let mut order: Vec<Slot> = self.naming().map(|(s, _)| *s).collect();
        let mut outcomes = Vec::new();
        for _ in 0..2 {
            let Some(flags) = self.fixed_point(&order) else {
                self.fail(world, "the model's placement does not converge".into());
            };
            if !outcomes.contains(&flags) {
                outcomes.push(flags);
            }
            order.reverse();
        }
        outcomes
    }

    /// The Connection serving `ns` under `flags`.
    fn server(&self, world: &World, flags: &Flags, ns: &str) -> Option<&'static str> {
        let serving: BTreeSet<&'static str> = flags
            .iter()
            .filter(|(s, (refused, _))| !*refused && s.covers(Some(ns)))
            .map(|(s, _)| s.connection)
            .collect();
        if serving.len() > 1 {
            self.fail(world, format!("the model serves {ns} through {serving:?}"));
        }
        serving.into_iter().next()
    }

    /// What still differs from the settled state the model expects (`Ok`: the placement reached).
    async fn mismatch(&self, world: &World, expected: &[Flags]) -> Result<Flags, String> {
        let seen = seen_bindings(world).await;
        if let Some(b) = seen.iter().find(|b| self.deleted.contains(&b.uid)) {
            return Err(format!("deleted {} is still there", b.slot));
        }
        let mut flags = Flags::new();
        for (slot, bound) in &self.live {
            let Some(b) = seen.iter().find(|b| b.uid == bound.uid) else {
                return Err(format!("{slot} is missing"));
            };
            if b.names != bound.names {
                return Err(format!(
                    "{slot} names widgets: {}, the model says {}",
                    b.names, bound.names
                ));
            }
            if !bound.names {
                // Stopped naming it: drained, and its claim (with its status entry) gone.
                if b.claimed || b.synced.is_some() {
                    return Err(format!(
                        "{slot} stopped naming widgets but still reports {:?}",
                        b.synced
                    ));
                }
                continue;
            }
            let other = PROVIDERS
                .into_iter()
                .find(|p| *p != slot.connection)
                .unwrap_or_default();
            let refused = match b.synced.as_ref().map(|(s, r, m)| (s.as_str(), r.as_str(), m.as_str())) {
                Some(("True", _, _)) => false,
                Some(("False", r, m)) if r == reason::BOUND_THROUGH_ANOTHER_CONNECTION => {
                    if !m.contains(&format!("{other:?}")) {
                        return Err(format!("{slot}'s refusal does not name Connection {other}: {m}"));
                    }
                    true
                }
                other => return Err(format!("{slot} has Synced {other:?}")),
            };
            if b.claimed == refused {
                return Err(format!("{slot} refused: {refused}, claims: {}", b.claimed));
            }
            flags.insert(*slot, (refused, b.claimed));
        }
        if !expected.contains(&flags) {
            return Err(format!("placement {flags:?}, the model expects one of {expected:?}"));
        }
        let crd = world.consumer_get(&crds(), None, WIDGETS).await;
        let Some(claimed) = annotation(&crd, kbind_annotation::CONNECTION) else {
            return Err("the consumer CRD is missing or unclaimed".into());
        };
        if self.naming().next().is_some() && !self.naming().any(|(s, _)| s.connection == claimed) {
            return Err(format!(
                "the consumer CRD names {claimed}, which has no live binding of widgets"
            ));
        }
        let consumer = consumer_widgets(world).await;
        let wanted: BTreeMap<(String, String), String> = self
            .widgets
            .iter()
            .map(|((ns, name), w)| ((ns.to_string(), name.to_string()), w.uid.clone()))
            .collect();
        if consumer != wanted {
            return Err(format!("consumer widgets {consumer:?}, the model has {wanted:?}"));
        }
        let copies = copies(world).await;
        for ((ns, name), on) in &copies {
            let key = (ns.as_str(), name.as_str());
            let Some(w) = self.widgets.iter().find(|(k, _)| (k.0, k.1) == key).map(|(_, w)| w) else {
                return Err(format!("a copy of deleted widget {ns}/{name} is left: {on:?}"));
            };
            let server = self.server(world, &flags, ns);
            for (provider, uid) in on {
                if Some(*provider) != server {
                    let object = world.consumer_get(&widgets(), Some(ns), name).await;
                    let (labels, finalizers) = object
                        .map(|o| (o.metadata.labels, o.metadata.finalizers))
                        .unwrap_or_default();
                    return Err(format!(
                        "{ns}/{name} has a copy on {provider}, served by {server:?} (consumer labels {labels:?}, finalizers {finalizers:?})"
                    ));
                }
                if uid.as_deref() != Some(w.uid.as_str()) {
                    return Err(format!(
                        "{provider}'s copy of {ns}/{name} is of consumer object {uid:?}"
                    ));
                }
            }
        }
        for ((ns, name), w) in &self.widgets {
            let server = self.server(world, &flags, ns);
            let object = world.consumer_get(&widgets(), Some(ns), name).await;
            let labelled = label(&object, kbind_label::CONNECTION);
            if labelled.as_deref() != server {
                return Err(format!("{ns}/{name} is labelled {labelled:?}, served by {server:?}"));
            }
            if let Some(provider) = server {
                let copy = world.provider_get(provider, &widgets(), Some(ns), name).await;
                if at(&copy, "/spec/size") != Some(json!(w.size)) {
                    return Err(format!(
                        "{provider}'s copy of {ns}/{name} lacks size {}: {copy:?}",
                        w.size
                    ));
                }
            }
        }
        Ok(flags)
    }

    /// Steps until the state the model expects is reached (at least one step, so no two
    /// bindings share a creation second), restarting the konnector after `crash_at` steps.
    async fn settle(&mut self, world: &mut World, crash_at: Option<u64>) {
        let expected = self.expected(world);
        if let Some(k) = crash_at {
            for _ in 0..k {
                self.step(world).await;
            }
            world.restart_konnector();
        }
        let mut last = String::new();
        for _ in 0..SETTLE_WITHIN {
            self.step(world).await;
            match self.mismatch(world, &expected).await {
                Ok(flags) => {
                    for (slot, (refused, claimed)) in flags {
                        if let Some(b) = self.live.get_mut(&slot) {
                            b.refused = refused;
                            b.claimed = claimed;
                        }
                    }
                    return;
                }
                Err(what) => last = what,
            }
        }
        let bindings = describe_bindings(world).await;
        self.fail(
            world,
            format!("not settled after {SETTLE_WITHIN} steps: {last}\nbindings:\n{bindings}"),
        );
    }

    /// Creates `slot`; whether it did.
    async fn create(&mut self, world: &World, slot: Slot) -> bool {
        self.history.push(format!("create {slot}"));
        let client = world.consumer().admin_client();
        let mut body = json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": if slot.namespace.is_some() { "Binding" } else { "ClusterBinding" },
            "metadata": {"name": slot.connection},
            "spec": {"connectionRef": {"name": slot.connection}, "apis": apis(slot.connection, true)},
        });
        if let Some(ns) = slot.namespace {
            ensure_namespace(&client, ns).await;
            body["metadata"]["namespace"] = json!(ns);
        }
        let body: DynamicObject = serde_json::from_value(body).expect("a binding object");
        client
            .create(&slot.resource(), slot.namespace, &body, &Default::default())
            .await
            .unwrap_or_else(|e| self.fail(world, format!("creating {slot}: {e}")));
        let obj = world
            .consumer_get(&slot.resource(), slot.namespace, slot.connection)
            .await
            .unwrap_or_else(|| self.fail(world, format!("{slot} was just created")));
        let created = at(&Some(obj.clone()), "/metadata/creationTimestamp")
            .and_then(|t| t.as_str().map(str::to_string))
            .unwrap_or_default();
        let uid = obj.metadata.uid.unwrap_or_default();
        self.live.insert(
            slot,
            Bound {
                uid,
                created,
                refused: false,
                claimed: false,
                names: true,
            },
        );
        true
    }

    /// Makes `slot` name widgets (`names`) or only its filler API.
    async fn edit(&mut self, world: &World, slot: Slot, names: bool) {
        let verb = if names { "add widgets to" } else { "remove widgets from" };
        self.history.push(format!("{verb} {slot}"));
        world
            .consumer()
            .admin_client()
            .patch(
                &slot.resource(),
                slot.namespace,
                slot.connection,
                &Patch::Merge(json!({"spec": {"apis": apis(slot.connection, names)}})),
                &PatchParams::default(),
            )
            .await
            .unwrap_or_else(|e| self.fail(world, format!("editing {slot}: {e}")));
        if let Some(b) = self.live.get_mut(&slot) {
            b.names = names;
            if names {
                // Named again: no claim and no refusal in its status any more.
                self.stopped.remove(&b.uid);
                b.refused = false;
                b.claimed = false;
            } else {
                self.stopped.insert(b.uid.clone());
                b.refused = false;
                b.claimed = false;
            }
        }
    }

    async fn delete(&mut self, world: &mut World, slot: Slot) {
        self.history.push(format!("delete {slot}"));
        if let Some(b) = self.live.remove(&slot) {
            self.deleted.insert(b.uid);
        }
        world
            .delete_on_consumer(&slot.resource(), slot.namespace, slot.connection)
            .await;
    }
}

/// A binding's per-API `Synced` of widgets: status, reason and message.
fn synced_of(obj: &DynamicObject) -> Option<(String, String, String)> {
    let c = obj
        .data
        .pointer("/status/boundAPIs")
        .and_then(Value::as_array)?
        .iter()
        .find(|a| a["name"] == WIDGETS)?["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == condition::SYNCED)?;
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("reason"), field("message")))
}

/// Every binding of the pool as the consumer stores it.
async fn seen_bindings(world: &World) -> Vec<Seen> {
    let client = world.consumer().admin_client();
    let mut out = Vec::new();
    for res in [bindings(), cluster_bindings()] {
        // A schedule step may make the consumer refuse a few lists (a restart with an unlisted
        // store): the property's own read tries again.
        let mut attempt = 0;
        let list = loop {
            match client.list(&res, None, &Default::default()).await {
                Ok(list) => break list,
                Err(e) if attempt < 10 => {
                    attempt += 1;
                    tracing::debug!(error = %e, "the property's binding list was refused; again");
                }
                Err(e) => panic!("listing {}: {e}", res.plural),
            }
        };
        for obj in list.items {
            let Some(slot) = Slot::of(&obj) else {
                continue;
            };
            let names = obj
                .data
                .pointer("/spec/apis")
                .and_then(Value::as_array)
                .is_some_and(|apis| apis.iter().any(|a| a["name"] == WIDGETS));
            let claimed = obj
                .data
                .pointer("/status/boundAPIs")
                .and_then(Value::as_array)
                .and_then(|apis| apis.iter().find(|a| a["name"] == WIDGETS))
                .is_some_and(|a| a["claimedAt"].is_string());
            out.push(Seen {
                slot,
                uid: obj.metadata.uid.clone().unwrap_or_default(),
                deleting: obj.metadata.deletion_timestamp.is_some(),
                synced: synced_of(&obj),
                claimed,
                names,
            });
        }
    }
    out
}

/// Every binding with its per-API `Synced` of widgets, one a line (for failure reports).
async fn describe_bindings(world: &World) -> String {
    let client = world.consumer().admin_client();
    let mut out = String::new();
    for res in [bindings(), cluster_bindings()] {
        let Ok(list) = client.list(&res, None, &Default::default()).await else {
            continue;
        };
        for obj in list.items {
            let synced = synced_of(&obj).map(|(s, r, m)| format!("{s} {r} {m}"));
            let claimed = obj
                .data
                .pointer("/status/boundAPIs")
                .and_then(Value::as_array)
                .and_then(|apis| apis.iter().find(|a| a["name"] == WIDGETS))
                .and_then(|a| a["claimedAt"].as_str().map(str::to_string));
            out.push_str(&format!(
                "  {} {}/{} created {:?} deleting {} apis {}: claimed {claimed:?} Synced {}\n",
                res.kind,
                obj.metadata.namespace.as_deref().unwrap_or(""),
                obj.metadata.name.as_deref().unwrap_or(""),
                at(&Some(obj.clone()), "/metadata/creationTimestamp"),
                obj.metadata.deletion_timestamp.is_some(),
                obj.data.pointer("/spec/apis").map(Value::to_string).unwrap_or_default(),
                synced.unwrap_or_default()
            ));
        }
    }
    out
}

/// The consumer widgets: `(namespace, name)` → UID (empty when the CRD is gone).
async fn consumer_widgets(world: &World) -> BTreeMap<(String, String), String> {
    let Ok(list) = world
        .consumer()
        .admin_client()
        .list(&widgets(), None, &Default::default())
        .await
    else {
        return BTreeMap::new();
    };
    list.items
        .into_iter()
        .map(|w| {
            (
                (
                    w.metadata.namespace.unwrap_or_default(),
                    w.metadata.name.unwrap_or_default(),
                ),
                w.metadata.uid.unwrap_or_default(),
            )
        })
        .collect()
}

/// Every consumer widget that carries the syncer finalizer and a Connection label:
/// namespace, name, Connection.
async fn labelled_widgets(world: &World) -> Vec<(String, String, String)> {
    let Ok(list) = world
        .consumer()
        .admin_client()
        .list(&widgets(), None, &Default::default())
        .await
    else {
        return Vec::new();
    };
    list.items
        .into_iter()
        .filter(|w| {
            w.metadata
                .finalizers
                .as_ref()
                .is_some_and(|f| f.iter().any(|f| f == kbind_api::consts::finalizer::SYNCER))
        })
        .filter_map(|w| {
            let connection = w.metadata.labels.as_ref()?.get(kbind_label::CONNECTION)?.clone();
            Some((w.metadata.namespace?, w.metadata.name?, connection))
        })
        .collect()
}

/// Every provider copy, by consumer key (a partitioned provider's are not seen meanwhile).
async fn copies(world: &World) -> Copies {
    let mut out = Copies::new();
    for provider in PROVIDERS.into_iter().filter(|p| !world.provider(p).is_partitioned()) {
        let list = world
            .provider(provider)
            .admin_client()
            .list(&widgets(), None, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("listing widgets on {provider}: {e}"));
        for copy in list.items {
            let uid = annotation(&Some(copy.clone()), kbind_annotation::CONSUMER_OBJECT_UID);
            let key = (
                copy.metadata.namespace.unwrap_or_default(),
                copy.metadata.name.unwrap_or_default(),
            );
            out.entry(key).or_default().push((provider, uid));
        }
    }
    out
}

fn pick<T: Copy>(rng: &mut ChaCha8Rng, items: &[T]) -> Option<T> {
    (!items.is_empty()).then(|| items[rng.random_range(0..items.len())])
}

async fn run_schedule(seed: u64) {
    let mut world = two_providers(
        "seeded_several_providers_serve_each_namespace_once",
        seed,
        widgets_crd(),
    )
    .await;
    for provider in PROVIDERS {
        let plural = filler(provider).split('.').next().unwrap_or_default();
        let kind = if provider == "acme" { "Gizmo" } else { "Gadget" };
        world
            .install_provider_crd(
                provider,
                kbind_scenarios::apis::exported_crd(plural, kind, "Namespaced"),
            )
            .await;
    }
    let mut model = Model {
        seed,
        history: Vec::new(),
        live: BTreeMap::new(),
        deleted: BTreeSet::new(),
        stopped: BTreeSet::new(),
        widgets: BTreeMap::new(),
        was_claiming: BTreeSet::new(),
        servers: BTreeMap::new(),
        tearing_down: false,
    };
    let pool = Slot::pool();
    let mut rng = ChaCha8Rng::seed_from_u64(seed ^ 0x26_0b1d);
    let first = pool[rng.random_range(0..pool.len())];
    assert!(model.create(&world, first).await, "the first binding is never refused");
    model.settle(&mut world, None).await;
    for ns in NAMESPACES {
        let size = rng.random_range(1..100i64);
        model.history.push(format!("create widget {ns}/w1 size {size}"));
        let uid = create_widget(&world, ns, "w1", json!({"size": size}))
            .await
            .metadata
            .uid;
        model.widgets.insert(
            (ns, "w1"),
            Widget {
                uid: uid.unwrap_or_default(),
                size,
            },
        );
    }
    model.settle(&mut world, None).await;

    for _ in 0..ACTIONS {
        let mut crash_at = rng.random_bool(0.15).then(|| rng.random_range(0..3u64));
        if let Some(k) = crash_at {
            model
                .history
                .push(format!("(the konnector restarts {k} steps into the next action)"));
        }
        match rng.random_range(0..24) {
            0..=5 => {
                let free: Vec<Slot> = pool.iter().copied().filter(|s| !model.live.contains_key(s)).collect();
                let Some(slot) = pick(&mut rng, &free) else {
                    model.history.push("skip: every binding exists".into());
                    continue;
                };
                if !model.create(&world, slot).await {
                    continue;
                }
            }
            6..=8 => {
                let live: Vec<Slot> = model.live.keys().copied().collect();
                // Always keep one binding of widgets, so the API (and its CRD) stays in use.
                let Some(slot) = pick(&mut rng, &live).filter(|s| model.another_names_widgets(s)) else {
                    model.history.push("skip: the only binding of widgets stays".into());
                    continue;
                };
                model.delete(&mut world, slot).await;
            }
            9..=11 => {
                // The move of a namespace: from the Connection serving it by a Binding there to
                // the other one.
                let ns = NAMESPACES[rng.random_range(0..NAMESPACES.len())];
                let Some(from) = model
                    .live
                    .iter()
                    .find(|(s, b)| s.namespace == Some(ns) && b.names && !b.refused)
                    .map(|(s, _)| *s)
                else {
                    model.history.push(format!("skip: no Binding serves {ns}"));
                    continue;
                };
                let to = Slot {
                    connection: PROVIDERS.into_iter().find(|p| *p != from.connection).unwrap_or("beta"),
                    namespace: Some(ns),
                };
                model
                    .history
                    .push(format!("move {ns} from {} to {}", from.connection, to.connection));
                if model.live.contains_key(&to) {
                    if !model.another_names_widgets(&from) {
                        model
                            .history
                            .push(format!("skip: {from} is the only binding of widgets"));
                        continue;
                    }
                    model.delete(&mut world, from).await;
                } else if model.another_names_widgets(&from) {
                    model.delete(&mut world, from).await;
                    model.settle(&mut world, crash_at.take()).await;
                    if !model.create(&world, to).await {
                        continue;
                    }
                } else {
                    if !model.create(&world, to).await {
                        continue;
                    }
                    model.settle(&mut world, crash_at.take()).await;
                    model.delete(&mut world, from).await;
                }
            }
            12..=15 => {
                let ns = NAMESPACES[rng.random_range(0..NAMESPACES.len())];
                let free: Vec<&'static str> = WIDGET_NAMES
                    .into_iter()
                    .filter(|n| !model.widgets.contains_key(&(ns, *n)))
                    .collect();
                let Some(name) = pick(&mut rng, &free) else {
                    model.history.push(format!("skip: every widget in {ns} exists"));
                    continue;
                };
                let size = rng.random_range(1..100i64);
                model.history.push(format!("create widget {ns}/{name} size {size}"));
                let obj = create_widget(&world, ns, name, json!({"size": size})).await;
                let uid = obj.metadata.uid.unwrap_or_default();
                model.widgets.insert((ns, name), Widget { uid, size });
            }
            16..=17 => {
                let live: Vec<(&'static str, &'static str)> = model.widgets.keys().copied().collect();
                let Some((ns, name)) = pick(&mut rng, &live) else {
                    model.history.push("skip: no widget to patch".into());
                    continue;
                };
                let size = rng.random_range(1..100i64);
                model.history.push(format!("patch widget {ns}/{name} size {size}"));
                patch_widget(&world, ns, name, json!({"spec": {"size": size}})).await;
                if let Some(w) = model.widgets.get_mut(&(ns, name)) {
                    w.size = size;
                }
            }
            18..=19 => {
                let live: Vec<(&'static str, &'static str)> = model.widgets.keys().copied().collect();
                let Some((ns, name)) = pick(&mut rng, &live) else {
                    model.history.push("skip: no widget to delete".into());
                    continue;
                };
                model.history.push(format!("delete widget {ns}/{name}"));
                model.widgets.remove(&(ns, name));
                world.delete_on_consumer(&widgets(), Some(ns), name).await;
            }
            20..=21 => {
                // A provider blinks: partitioned for up to one and a half hysteresis windows (its
                // Connection may or may not go not Ready meanwhile), then healed.
                let provider = PROVIDERS[rng.random_range(0..PROVIDERS.len())];
                let steps = rng.random_range(5..=90u64);
                model
                    .history
                    .push(format!("partition {provider} for {steps} steps, then heal"));
                world.partition(provider);
                for _ in 0..steps {
                    model.step(&mut world).await;
                }
                world.heal(provider);
            }
            22 => {
                // kubectl edit of spec.apis: a binding stops naming widgets (its objects drain
                // before its claim goes), or names it again (no CLI pre-check).
                let stop: Vec<Slot> = model
                    .live
                    .iter()
                    .filter(|(s, b)| b.names && model.another_names_widgets(s))
                    .map(|(s, _)| *s)
                    .collect();
                let again: Vec<Slot> = model.live.iter().filter(|(_, b)| !b.names).map(|(s, _)| *s).collect();
                if !again.is_empty() && (stop.is_empty() || rng.random_bool(0.5)) {
                    let Some(slot) = pick(&mut rng, &again) else { continue };
                    model.edit(&world, slot, true).await;
                } else if let Some(slot) = pick(&mut rng, &stop) {
                    model.edit(&world, slot, false).await;
                } else {
                    model.history.push("skip: no spec.apis edit possible".into());
                    continue;
                }
            }
            _ => {
                // The konnector restarts while a binding store cannot list yet: no placement
                // decision, status write or syncer start until it has.
                let res = if rng.random_bool(0.5) {
                    bindings()
                } else {
                    cluster_bindings()
                };
                let refusals = rng.random_range(1..=4u32);
                model
                    .history
                    .push(format!("restart with {refusals} refused lists of {}", res.plural));
                world.consumer().inject_error(
                    fakeapi::ErrorRule::new(Some("list"), Some(&res.plural), fakeapi::InjectedError::Internal)
                        .times(refusals),
                );
                world.crash_konnector();
                world.restart_konnector();
            }
        }
        model.settle(&mut world, crash_at).await;
    }

    // The end: every binding goes, and with the last one the consumer CRD and every copy.
    model.tearing_down = true;
    let live: Vec<Slot> = model.live.keys().copied().collect();
    for slot in live {
        model.delete(&mut world, slot).await;
    }
    let mut last = String::new();
    for _ in 0..SETTLE_WITHIN {
        model.step(&mut world).await;
        let seen = seen_bindings(&world).await;
        let crd = world.consumer_get(&crds(), None, WIDGETS).await;
        let copies = copies(&world).await;
        last = format!(
            "bindings left {:?}, consumer CRD there: {}, copies left {copies:?}",
            seen.iter().map(|b| b.slot.to_string()).collect::<Vec<_>>(),
            crd.is_some()
        );
        if seen.is_empty() && crd.is_none() && copies.is_empty() {
            return;
        }
    }
    model.fail(&world, format!("the unbind did not finish: {last}"));
}

#[test]
fn seeded_several_providers_serve_each_namespace_once() {
    // 50 actions a seed with partitions of up to 90 steps, several times a usual seed's cost: a
    // twentieth of `KBIND_SEEDS` keeps CI's total bounded.
    kbind_scenarios::world::for_each_seed_scaled(20, 20, run_schedule);
}
