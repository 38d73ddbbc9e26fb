//! The heartbeat Lease on the provider (contract §2): `consumer-<localClusterUID>` in the
//! lease namespace, holder = localClusterUID, 60 s duration, labelled managed.
//!
//! One Lease per consumer–provider pair, however many Connections reach that provider (the
//! gateway makes one per Export): [`Pairs`] lets one of them renew it each interval and the
//! others prove their own link still reaches the pinned provider by reading it back at a
//! resourceVersion the pair wrote, so they neither conflict on the update nor re-read the identity.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kbind_api::consts::{TRUE, annotation, label, lease, lease_name};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, PostParams, Result};
use serde_json::{Value, json};

/// The `coordination.k8s.io/v1` Lease resource.
pub(crate) fn lease_resource() -> ApiResource {
    ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    }
}

fn micro_time(now: Timestamp) -> Value {
    serde_json::to_value(MicroTime(now)).unwrap_or(Value::Null)
}

fn object(value: Value) -> Result<DynamicObject> {
    serde_json::from_value(value).map_err(|e| Error::Decode(e.to_string()))
}

/// What the last renewal left: the Lease exactly as the provider returned it.
pub(crate) type Renewed = DynamicObject;

/// Renews the Lease `last` that this link wrote before, with one update carrying its
/// resourceVersion. `Ok(Some(..))`: the provider still holds exactly what we wrote last, which
/// only the cluster we verified can (a replaced or rebuilt provider answers 404 or 409), so the
/// pinned identity stands without another read. `Ok(None)`: that continuity is broken; nothing
/// was written, and the caller reads the identity before [`renew`].
pub(crate) async fn renew_unbroken(
    provider: &dyn ClusterClient,
    namespace: &str,
    local_uid: &str,
    now: Timestamp,
    last: &Renewed,
) -> Result<Option<Renewed>> {
    let mut next = last.clone();
    stamp(&mut next, local_uid, now);
    let name = lease_name(local_uid);
    match provider
        .replace(&lease_resource(), Some(namespace), &name, &next, &ours())
        .await
    {
        Ok(renewed) => Ok(Some(renewed)),
        Err(Error::NotFound { .. }) => Ok(None),
        Err(e) if e.is_conflict() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Reads the Lease through `provider`: `Ok(Some(..))` when it is at one of the `written`
/// versions (uid and resourceVersion), which only the cluster the pair verified holds, so this link reaches it too.
/// `Ok(None)`: not proven (gone, or moved on since), and the caller reads the identity.
pub(crate) async fn check_unbroken(
    provider: &dyn ClusterClient,
    namespace: &str,
    local_uid: &str,
    written: &BTreeSet<String>,
) -> Result<Option<Renewed>> {
    let lease = provider
        .get_opt(&lease_resource(), Some(namespace), &lease_name(local_uid))
        .await?;
    Ok(lease.filter(|l| version(l).is_some_and(|v| written.contains(&v))))
}

/// A Lease's uid and resourceVersion: together they name one write on one cluster (an
/// update's preconditions compare the same two).
fn version(lease: &Renewed) -> Option<String> {
    let meta = &lease.metadata;
    Some(format!(
        "{}/{}",
        meta.uid.as_deref()?,
        meta.resource_version.as_deref()?
    ))
}

/// How many times [`renew`] reads again after another Connection's renewal got in between.
const RENEW_ATTEMPTS: usize = 3;

/// Renews (or creates) the heartbeat Lease of consumer `local_uid` at `now`. An existing Lease
/// is updated with get+update only, so credentials limited to those verbs suffice.
pub(crate) async fn renew(
    provider: &dyn ClusterClient,
    namespace: &str,
    local_uid: &str,
    now: Timestamp,
) -> Result<Renewed> {
    let res = lease_resource();
    let name = lease_name(local_uid);
    let mut attempt = 1;
    loop {
        let written = match provider.get_opt(&res, Some(namespace), &name).await? {
            Some(mut existing) => {
                stamp(&mut existing, local_uid, now);
                provider.replace(&res, Some(namespace), &name, &existing, &ours()).await
            }
            None => create(provider, namespace, &name, local_uid, now).await,
        };
        match written {
            // Another Connection to the same provider renewed (or created) it in between.
            Err(e) if (e.is_conflict() || matches!(e, Error::AlreadyExists { .. })) && attempt < RENEW_ATTEMPTS => {
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// Which Lease a pair is about: the provider's identity and the consumer UID it is named after.
pub(crate) type PairKey = (String, String);

/// How many of its own writes a pair remembers: a read racing one renewal still matches.
const WRITTEN_KEPT: usize = 4;

/// The heartbeat of one consumer–provider pair, shared by the Connections to that provider.
struct Pair {
    /// The Lease as the pair last wrote it.
    lease: Renewed,
    /// The versions (uid and resourceVersion) of the pair's latest writes.
    written: VecDeque<String>,
    /// When its last renewal started.
    renewed_at: Instant,
}

/// What a Connection whose heartbeat is due does.
pub(crate) enum Turn {
    /// Renew the Lease from this one, the pair's latest (or the link's own when the pair has none).
    Renew(Option<Box<Renewed>>),
    /// Another Connection renewed it within this interval: read it back at one of these.
    Check(BTreeSet<String>),
}

/// The heartbeats of all consumer–provider pairs of this konnector.
#[derive(Default)]
pub(crate) struct Pairs {
    pairs: Mutex<BTreeMap<PairKey, Pair>>,
}

impl Pairs {
    /// What a Connection of `key` does at `now`: renew when the pair's last renewal is nearly an
    /// `interval` old (the margin keeps a renewer whose timer fires a little early from skipping
    /// a round), else check.
    pub(crate) fn turn(&self, key: &PairKey, now: Instant, interval: Duration) -> Turn {
        let pairs = self.pairs.lock();
        match pairs.get(key) {
            Some(pair) if now.saturating_duration_since(pair.renewed_at) < interval.mul_f32(0.9) => {
                Turn::Check(pair.written.iter().cloned().collect())
            }
            Some(pair) => Turn::Renew(Some(Box::new(pair.lease.clone()))),
            None => Turn::Renew(None),
        }
    }

    /// Records a renewal of `key`'s Lease started at `at`.
    pub(crate) fn renewed(&self, key: &PairKey, lease: &Renewed, at: Instant) {
        let Some(rv) = version(lease) else {
            return;
        };
        let mut pairs = self.pairs.lock();
        let pair = pairs.entry(key.clone()).or_insert_with(|| Pair {
            lease: lease.clone(),
            written: VecDeque::new(),
            renewed_at: at,
        });
        pair.lease = lease.clone();
        pair.renewed_at = pair.renewed_at.max(at);
        if !pair.written.contains(&rv) {
            pair.written.push_back(rv);
        }
        while pair.written.len() > WRITTEN_KEPT {
            pair.written.pop_front();
        }
    }

    /// Forgets `key`'s renewals: the Lease was not as the pair wrote it, so none of them proves
    /// anything any more.
    pub(crate) fn broken(&self, key: &PairKey) {
        self.pairs.lock().remove(key);
    }
}

/// Sets what a renewal writes: the managed label, holder, duration and renew time.
fn stamp(lease: &mut DynamicObject, local_uid: &str, now: Timestamp) {
    let labels = lease.metadata.labels.get_or_insert_with(Default::default);
    labels.insert(label::MANAGED.to_string(), TRUE.to_string());
    let spec = lease
        .data
        .as_object_mut()
        .map(|d| d.entry("spec").or_insert_with(|| json!({})));
    if let Some(Value::Object(spec)) = spec {
        spec.insert("holderIdentity".into(), json!(local_uid));
        spec.insert("leaseDurationSeconds".into(), json!(lease::DURATION_SECONDS));
        spec.insert("renewTime".into(), micro_time(now));
    }
}

async fn create(
    provider: &dyn ClusterClient,
    namespace: &str,
    name: &str,
    local_uid: &str,
    now: Timestamp,
) -> Result<Renewed> {
    let lease = object(json!({
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": name, "namespace": namespace, "labels": {label::MANAGED: TRUE}},
        "spec": {
            "holderIdentity": local_uid,
            "leaseDurationSeconds": lease::DURATION_SECONDS,
            "acquireTime": micro_time(now),
            "renewTime": micro_time(now),
        },
    }))?;
    let res = lease_resource();
    match provider.create(&res, Some(namespace), &lease, &ours()).await {
        Ok(created) => Ok(created),
        // The lease namespace is missing: create it (managed, like every namespace we create).
        Err(Error::NotFound { .. }) => {
            create_namespace(provider, namespace, local_uid).await?;
            provider.create(&res, Some(namespace), &lease, &ours()).await
        }
        Err(e) => Err(e),
    }
}

async fn create_namespace(provider: &dyn ClusterClient, namespace: &str, local_uid: &str) -> Result<()> {
    let ns = object(json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {label::MANAGED: TRUE},
            "annotations": {annotation::CONSUMER_CLUSTER_UID: local_uid},
        },
    }))?;
    match provider
        .create(&kbind_cluster::identity::namespace_resource(), None, &ns, &ours())
        .await
    {
        Ok(_) | Err(Error::AlreadyExists { .. }) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Writes named for the konnector, so `managedFields` on the provider say who keeps the heartbeat
/// (an unnamed write shows as manager `unknown` on a real apiserver).
fn ours() -> PostParams {
    PostParams {
        field_manager: Some(kbind_api::consts::field_manager::KONNECTOR.to_string()),
        ..PostParams::default()
    }
}

#[cfg(test)]
mod tests {
    use fakeapi::FakeCluster;

    use super::*;

    const CONSUMER: &str = "consumer-uid";

    fn now() -> Timestamp {
        Timestamp::from_second(1_800_000_000).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn versions(lease: &Renewed) -> BTreeSet<String> {
        version(lease).into_iter().collect()
    }

    #[tokio::test]
    async fn a_read_back_proves_the_pinned_cluster_and_nothing_else() {
        let pinned = FakeCluster::builder("pinned").seed(1).build().admin_client();
        let rebuilt = FakeCluster::builder("rebuilt").seed(2).build().admin_client();
        let written = renew(&pinned, "kbind", CONSUMER, now()).await.expect("renewed");
        // The rebuilt cluster holds a Lease of the same name, written the same way (its own
        // UIDs: fakeapi draws them from its seed, kube-apiserver at random).
        renew(&rebuilt, "kbind", CONSUMER, now()).await.expect("renewed");

        let proof = check_unbroken(&pinned, "kbind", CONSUMER, &versions(&written)).await;
        assert!(
            matches!(proof, Ok(Some(_))),
            "the pinned cluster holds what the pair wrote"
        );
        let proof = check_unbroken(&rebuilt, "kbind", CONSUMER, &versions(&written)).await;
        assert!(matches!(proof, Ok(None)), "another cluster's Lease proves nothing");

        // Written since by someone else: the pinned cluster no longer holds the pair's write.
        let later = now() + std::time::Duration::from_secs(30);
        renew(&pinned, "kbind", CONSUMER, later).await.expect("renewed");
        let proof = check_unbroken(&pinned, "kbind", CONSUMER, &versions(&written)).await;
        assert!(matches!(proof, Ok(None)), "a Lease moved on since proves nothing");
    }

    #[tokio::test(start_paused = true)]
    async fn one_connection_of_a_pair_renews_each_interval_and_the_others_check() {
        let cluster = FakeCluster::builder("pinned").seed(1).build().admin_client();
        let pairs = Pairs::default();
        let key: PairKey = ("provider-uid".into(), CONSUMER.into());
        let interval = Duration::from_secs(30);
        let start = Instant::now();
        assert!(matches!(pairs.turn(&key, start, interval), Turn::Renew(None)));

        let lease = renew(&cluster, "kbind", CONSUMER, now()).await.expect("renewed");
        pairs.renewed(&key, &lease, start);
        let Turn::Check(written) = pairs.turn(&key, start + Duration::from_secs(1), interval) else {
            panic!("a Connection whose turn comes a second after the renewal must check, not renew");
        };
        assert_eq!(written, versions(&lease));
        // The renewer's own timer fires one interval later (or a little early): it renews.
        let Turn::Renew(Some(latest)) = pairs.turn(&key, start + Duration::from_secs(28), interval) else {
            panic!("the pair's Lease must be renewed once nearly an interval old");
        };
        assert_eq!(version(&latest), version(&lease));

        pairs.broken(&key);
        assert!(
            matches!(
                pairs.turn(&key, start + Duration::from_secs(29), interval),
                Turn::Renew(None)
            ),
            "a broken pair proves nothing: each Connection goes from its own Lease or its identity"
        );
    }
}
