//! Who owns what kbind writes, and which metadata never crosses between clusters: contract §3's
//! markers and §4's "conflicts", "spec up" and "schema" rows, stated once for provider copies,
//! related copies and pulled CRDs.
//!
//! The rules:
//! - An owner is a consumer cluster (`core.kbind.io/consumer-cluster-uid`) plus one claim: the
//!   consumer object a provider copy stands for (`consumer-object-uid`) or the binding a related
//!   copy belongs to (`related-binding`). A target is *ours* when it carries both of the owner's
//!   markers with the owner's values.
//! - A target is *unmarked* when it carries none of the three ownership markers; only an
//!   unmarked target may be adopted (policy `Adopt`), else it is `ForeignObjectExists`.
//! - A target with our cluster's UID and a claim of the same kind for another value is a stale
//!   copy of this consumer cluster: only `readopt` takes it back.
//! - Anything else is `OwnedByAnother`, whatever the policy. A terminating target that is not a
//!   conflict is waited for.
//! - Labels and annotations that never cross: kbind's own keys and other tools' ownership and
//!   tracking keys (a tool on the other side would act on a copy it never made). Pulled CRDs
//!   also drop cert-manager's CA injection requests: their webhook caBundles are stripped, so
//!   there is nothing to inject into.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kbind_api::consts::{KEY_PREFIX, TRUE, annotation, label, reason};
use kbind_cluster::DynamicObject;

/// The annotations that claim an object for some owner; an object with none is unmarked.
pub(crate) const MARKERS: [&str; 3] = [
    annotation::CONSUMER_CLUSTER_UID,
    annotation::CONSUMER_OBJECT_UID,
    annotation::RELATED_BINDING,
];

/// What an owner claims on its consumer cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Claim<'a> {
    /// The provider copy of the consumer object with this UID.
    Object(&'a str),
    /// A related copy of the binding with this UID.
    RelatedBinding(&'a str),
}

impl Claim<'_> {
    /// The annotation that carries this claim.
    fn key(self) -> &'static str {
        match self {
            Claim::Object(_) => annotation::CONSUMER_OBJECT_UID,
            Claim::RelatedBinding(_) => annotation::RELATED_BINDING,
        }
    }

    fn value(&self) -> &str {
        match self {
            Claim::Object(v) | Claim::RelatedBinding(v) => v,
        }
    }
}

/// One owner of kbind-written objects: a consumer cluster and its claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Owner<'a> {
    /// The consumer cluster's UID.
    pub consumer_cluster_uid: &'a str,
    /// What it claims there.
    pub claim: Claim<'a>,
}

impl<'a> Owner<'a> {
    /// The owner of the provider copy of consumer object `object_uid`.
    pub(crate) fn object(consumer_cluster_uid: &'a str, object_uid: &'a str) -> Self {
        Self {
            consumer_cluster_uid,
            claim: Claim::Object(object_uid),
        }
    }

    /// The owner of binding `binding_uid`'s related copies.
    pub(crate) fn related(consumer_cluster_uid: &'a str, binding_uid: &'a str) -> Self {
        Self {
            consumer_cluster_uid,
            claim: Claim::RelatedBinding(binding_uid),
        }
    }

    /// The annotations (key, value) that mark an object as this owner's.
    pub(crate) fn markers(&self) -> [(&'static str, &str); 2] {
        [
            (annotation::CONSUMER_CLUSTER_UID, self.consumer_cluster_uid),
            (self.claim.key(), self.claim.value()),
        ]
    }
}

/// What may be done with a target before any write to it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing there: create it.
    Create,
    /// Ours (or adoptable): write it; `precondition` is the resourceVersion that was classified
    /// when taking over a target that did not carry our markers yet.
    Update {
        /// resourceVersion the takeover must still find.
        precondition: Option<String>,
    },
    /// Being deleted: wait until it is gone.
    Terminating,
    /// Someone else's: leave it alone, with this reason.
    Conflict(&'static str),
}

/// Which targets without our markers may be taken over.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct Takeover {
    /// Unmarked targets (conflict policy `Adopt`).
    pub adopt: bool,
    /// A stale copy of this consumer cluster (`core.kbind.io/readopt: "true"`).
    pub readopt: bool,
}

/// An annotation of `meta`, if set.
pub(crate) fn annotation_of<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations.as_ref()?.get(key).map(String::as_str)
}

/// Whether `meta` carries both of `owner`'s markers with its values.
pub(crate) fn is_ours(meta: &ObjectMeta, owner: &Owner<'_>) -> bool {
    owner
        .markers()
        .iter()
        .all(|(key, value)| annotation_of(meta, key) == Some(*value))
}

/// Whether `meta` carries none of the ownership markers.
pub(crate) fn is_unmarked(meta: &ObjectMeta) -> bool {
    MARKERS.iter().all(|key| annotation_of(meta, key).is_none())
}

/// Whether `meta` is a copy of `owner`'s consumer cluster with a claim of the same kind for
/// another value (a restored consumer object has a new UID).
fn is_stale_copy_of(meta: &ObjectMeta, owner: &Owner<'_>) -> bool {
    annotation_of(meta, annotation::CONSUMER_CLUSTER_UID) == Some(owner.consumer_cluster_uid)
        && annotation_of(meta, owner.claim.key()).is_some()
}

/// Whether `meta` carries `core.kbind.io/managed: "true"` (kbind created it).
pub(crate) fn is_managed(meta: &ObjectMeta) -> bool {
    meta.labels
        .as_ref()
        .and_then(|l| l.get(label::MANAGED))
        .is_some_and(|v| v == TRUE)
}

/// Classifies the target `live` of `owner` before any write (contract §4 "conflicts").
pub(crate) fn classify(live: Option<&DynamicObject>, owner: &Owner<'_>, takeover: Takeover) -> Verdict {
    let Some(live) = live else {
        return Verdict::Create;
    };
    let meta = &live.metadata;
    let verdict = if is_ours(meta, owner) {
        Verdict::Update { precondition: None }
    } else if is_unmarked(meta) {
        if takeover.adopt {
            Verdict::Update {
                precondition: meta.resource_version.clone(),
            }
        } else {
            Verdict::Conflict(reason::FOREIGN_OBJECT_EXISTS)
        }
    } else if takeover.readopt && is_stale_copy_of(meta, owner) {
        Verdict::Update {
            precondition: meta.resource_version.clone(),
        }
    } else {
        Verdict::Conflict(reason::OWNED_BY_ANOTHER)
    };
    if meta.deletion_timestamp.is_some() && !matches!(verdict, Verdict::Conflict(_)) {
        return Verdict::Terminating;
    }
    verdict
}

/// What is being copied to the other cluster; it decides the few keys dropped beyond the
/// common list.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Copied {
    /// A consumer object going up, or a related copy.
    Object,
    /// A provider CRD pulled into the consumer.
    Crd,
}

/// Label and annotation key prefixes (ending in `/`) that never cross (contract §4 "spec up").
const NEVER_PREFIXES: &[&str] = &[
    KEY_PREFIX,
    "kubectl.kubernetes.io/",
    "meta.helm.sh/",
    "helm.sh/",
    "argocd.argoproj.io/",
];
/// Keys that never cross, exactly.
const NEVER_KEYS: &[&str] = &["app.kubernetes.io/managed-by"];
/// Key domains that never cross by their suffix (`*.fluxcd.io/…`).
const NEVER_DOMAIN_SUFFIXES: &[&str] = &[".fluxcd.io"];
/// Pulled CRDs only: cert-manager's CA injection requests (`inject-ca-from`,
/// `inject-ca-from-secret`).
const CRD_DROPPED_PREFIXES: &[&str] = &["cert-manager.io/inject-ca-from"];

/// Whether a label or annotation key of a source goes with its copy to the other cluster.
pub(crate) fn crosses(what: Copied, key: &str) -> bool {
    if NEVER_KEYS.contains(&key) || NEVER_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return false;
    }
    if what == Copied::Crd && CRD_DROPPED_PREFIXES.iter().any(|p| key.starts_with(p)) {
        return false;
    }
    match key.split_once('/') {
        Some((domain, _)) => !NEVER_DOMAIN_SUFFIXES.iter().any(|s| domain.ends_with(s)),
        None => true,
    }
}

/// The labels or annotations of a source that cross with its copy.
pub(crate) fn crossing(what: Copied, map: Option<&BTreeMap<String, String>>) -> BTreeMap<String, String> {
    map.into_iter()
        .flatten()
        .filter(|(k, _)| crosses(what, k))
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, RngAlgorithm, TestRng, TestRunner};
    use serde_json::{Value, json};

    use super::*;

    fn target(annotations: Value, terminating: bool) -> DynamicObject {
        let mut obj: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "t", "namespace": "n", "resourceVersion": "7", "annotations": annotations},
        }))
        .expect("a valid object");
        if terminating {
            obj.metadata.deletion_timestamp =
                serde_json::from_value(json!("2026-01-01T00:00:00Z")).expect("a valid time");
        }
        obj
    }

    const CL: &str = annotation::CONSUMER_CLUSTER_UID;
    const OBJ: &str = annotation::CONSUMER_OBJECT_UID;
    const REL: &str = annotation::RELATED_BINDING;

    const UPDATE: Verdict = Verdict::Update { precondition: None };
    fn take() -> Verdict {
        Verdict::Update {
            precondition: Some("7".into()),
        }
    }
    const FOREIGN: Verdict = Verdict::Conflict(reason::FOREIGN_OBJECT_EXISTS);
    const ANOTHER: Verdict = Verdict::Conflict(reason::OWNED_BY_ANOTHER);

    /// (case, target annotations, verdict for no takeover, adopt, readopt, adopt and readopt)
    /// for the provider copy of object `o-1` of cluster `cl-1`.
    fn object_table() -> Vec<(&'static str, Value, [Verdict; 4])> {
        let all = |v: Verdict| [v.clone(), v.clone(), v.clone(), v];
        vec![
            ("ours", json!({CL: "cl-1", OBJ: "o-1"}), all(UPDATE)),
            (
                "ours, whatever else is there",
                json!({CL: "cl-1", OBJ: "o-1", REL: "b-1", "note": "x"}),
                all(UPDATE),
            ),
            ("unmarked", json!({"note": "x"}), [FOREIGN, take(), FOREIGN, take()]),
            ("no annotations", json!(null), [FOREIGN, take(), FOREIGN, take()]),
            (
                "stale copy of this cluster",
                json!({CL: "cl-1", OBJ: "o-0"}),
                [ANOTHER, ANOTHER, take(), take()],
            ),
            ("another cluster's copy", json!({CL: "cl-2", OBJ: "o-1"}), all(ANOTHER)),
            ("only our cluster marker", json!({CL: "cl-1"}), all(ANOTHER)),
            ("only our object marker", json!({OBJ: "o-1"}), all(ANOTHER)),
            // A related copy is marked: never adopted as a provider copy.
            ("a related copy", json!({REL: "b-1"}), all(ANOTHER)),
            (
                "a related copy of this cluster",
                json!({REL: "b-1", CL: "cl-1"}),
                all(ANOTHER),
            ),
            ("an empty marker is a marker", json!({OBJ: ""}), all(ANOTHER)),
        ]
    }

    /// The same for related copies of binding `b-1` of cluster `cl-1` (readopt never applies).
    fn related_table() -> Vec<(&'static str, Value, [Verdict; 2])> {
        vec![
            ("ours", json!({REL: "b-1", CL: "cl-1"}), [UPDATE, UPDATE]),
            (
                "ours, with an object marker",
                json!({REL: "b-1", CL: "cl-1", OBJ: "o"}),
                [UPDATE, UPDATE],
            ),
            ("unmarked", json!({"note": "x"}), [FOREIGN, take()]),
            ("another binding's", json!({REL: "b-2", CL: "cl-1"}), [ANOTHER, ANOTHER]),
            ("another cluster's", json!({REL: "b-1", CL: "cl-2"}), [ANOTHER, ANOTHER]),
            ("binding marker only", json!({REL: "b-1"}), [ANOTHER, ANOTHER]),
            ("a provider copy", json!({CL: "cl-1", OBJ: "o"}), [ANOTHER, ANOTHER]),
        ]
    }

    const TAKEOVERS: [Takeover; 4] = [
        Takeover {
            adopt: false,
            readopt: false,
        },
        Takeover {
            adopt: true,
            readopt: false,
        },
        Takeover {
            adopt: false,
            readopt: true,
        },
        Takeover {
            adopt: true,
            readopt: true,
        },
    ];

    #[test]
    fn provider_copies_are_classified_by_the_marker_table() {
        let owner = Owner::object("cl-1", "o-1");
        for (case, annotations, verdicts) in object_table() {
            let live = target(annotations, false);
            for (takeover, want) in TAKEOVERS.iter().zip(verdicts) {
                assert_eq!(classify(Some(&live), &owner, *takeover), want, "{case}, {takeover:?}");
            }
            assert_eq!(
                is_ours(&live.metadata, &owner),
                classify(Some(&live), &owner, Takeover::default()) == UPDATE,
                "{case}"
            );
        }
    }

    #[test]
    fn related_copies_are_classified_by_the_marker_table() {
        let owner = Owner::related("cl-1", "b-1");
        for (case, annotations, verdicts) in related_table() {
            let live = target(annotations, false);
            for (takeover, want) in TAKEOVERS[..2].iter().zip(verdicts) {
                assert_eq!(classify(Some(&live), &owner, *takeover), want, "{case}, {takeover:?}");
            }
        }
    }

    #[test]
    fn an_absent_target_is_created_and_a_terminating_one_waited_for_unless_foreign() {
        let owner = Owner::object("cl-1", "o-1");
        for takeover in TAKEOVERS {
            assert_eq!(classify(None, &owner, takeover), Verdict::Create);
        }
        for (case, annotations, verdicts) in object_table() {
            let live = target(annotations, true);
            for (takeover, alive) in TAKEOVERS.iter().zip(verdicts) {
                let want = if matches!(alive, Verdict::Conflict(_)) {
                    alive
                } else {
                    Verdict::Terminating
                };
                assert_eq!(classify(Some(&live), &owner, *takeover), want, "terminating {case}");
            }
        }
    }

    #[test]
    fn the_strip_list_is_designs_spec_up_list() {
        // (key, crosses with an object, crosses with a CRD)
        let table = [
            ("plain", true, true),
            ("app", true, true),
            ("example.com/team", true, true),
            ("app.kubernetes.io/name", true, true),
            ("app.kubernetes.io/instance", true, true),
            ("fluxcd.io.example.com/x", true, true),
            ("kubernetes.io/description", true, true),
            ("cert-manager.io/issuer", true, true),
            ("core.kbind.io/managed", false, false),
            ("core.kbind.io/related-binding", false, false),
            ("core.kbind.io/anything-new", false, false),
            ("kubectl.kubernetes.io/last-applied-configuration", false, false),
            ("kubectl.kubernetes.io/restartedAt", false, false),
            ("meta.helm.sh/release-name", false, false),
            ("helm.sh/resource-policy", false, false),
            ("argocd.argoproj.io/tracking-id", false, false),
            ("kustomize.toolkit.fluxcd.io/name", false, false),
            ("source.toolkit.fluxcd.io/name", false, false),
            ("app.kubernetes.io/managed-by", false, false),
            ("cert-manager.io/inject-ca-from", true, false),
            ("cert-manager.io/inject-ca-from-secret", true, false),
        ];
        for (key, object, crd) in table {
            assert_eq!(crosses(Copied::Object, key), object, "{key} with an object");
            assert_eq!(crosses(Copied::Crd, key), crd, "{key} with a CRD");
        }
        let map = BTreeMap::from([
            ("app".to_string(), "web".to_string()),
            ("helm.sh/chart".to_string(), "c".to_string()),
            ("core.kbind.io/managed".to_string(), "true".to_string()),
        ]);
        assert_eq!(
            crossing(Copied::Object, Some(&map)),
            BTreeMap::from([("app".to_string(), "web".to_string())])
        );
        assert!(crossing(Copied::Crd, None).is_empty());
    }

    /// Seed of the strip-list property; printed on failure.
    const SEED: [u8; 32] = *b"kbind-ownership-strip-list-seed!";

    #[test]
    fn a_key_crosses_unless_a_tool_or_kbind_owns_its_domain() {
        let config = Config {
            cases: 512,
            failure_persistence: None,
            ..Config::default()
        };
        let mut runner = TestRunner::new_with_rng(config, TestRng::from_seed(RngAlgorithm::ChaCha, &SEED));
        let domains = prop_oneof![
            Just(String::new()),
            Just("core.kbind.io".to_string()),
            Just("kubectl.kubernetes.io".to_string()),
            Just("meta.helm.sh".to_string()),
            Just("helm.sh".to_string()),
            Just("argocd.argoproj.io".to_string()),
            "[a-z]{1,8}\\.fluxcd\\.io",
            "[a-z]{1,8}\\.(example\\.com|kubernetes\\.io|sh|io)",
        ];
        let result = runner.run(&(domains, "[a-zA-Z0-9][-a-zA-Z0-9_.]{0,12}"), |(domain, name)| {
            let key = if domain.is_empty() {
                name.clone()
            } else {
                format!("{domain}/{name}")
            };
            let tool = [
                "core.kbind.io",
                "kubectl.kubernetes.io",
                "meta.helm.sh",
                "helm.sh",
                "argocd.argoproj.io",
            ]
            .contains(&domain.as_str())
                || domain.ends_with(".fluxcd.io");
            prop_assert_eq!(crosses(Copied::Object, &key), !tool, "{}", key);
            prop_assert_eq!(crosses(Copied::Crd, &key), !tool, "{}", key);
            Ok(())
        });
        if let Err(e) = result {
            panic!("seed {SEED:?}: {e}");
        }
    }

    #[test]
    fn managed_means_the_managed_label_is_true() {
        let meta = |labels: Value| -> ObjectMeta {
            serde_json::from_value(json!({"labels": labels})).expect("valid metadata")
        };
        assert!(is_managed(&meta(json!({(label::MANAGED): "true"}))));
        assert!(!is_managed(&meta(json!({(label::MANAGED): "false"}))));
        assert!(!is_managed(&meta(json!({"other": "true"}))));
        assert!(!is_managed(&ObjectMeta::default()));
    }
}
