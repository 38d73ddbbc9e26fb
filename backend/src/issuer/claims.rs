//! Provider namespace claims: which identity a namespace belongs to, and whether a Grant may use
//! it. The gateway's pre-check and the issuer share these functions so both say the same thing.

use std::collections::{BTreeMap, BTreeSet};

use kbind_api::consts::backend::{ANNOTATION_CLAIMED_BY, LABEL_CLAIMED_BY, MANAGED_BY};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, ListParams, identity::namespace_resource};
use sha2::{Digest, Sha256};

use super::IssueError;

/// The `app.kubernetes.io/managed-by` label key.
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";

/// The value of the `iam.kbind.io/claimed-by` label for `subject`: 40 hex digits of its SHA-256
/// (a label value cannot hold every subject; the annotation holds it verbatim).
pub fn claimed_by_value(subject: &str) -> String {
    let digest = Sha256::digest(subject.as_bytes());
    digest.iter().take(20).map(|b| format!("{b:02x}")).collect()
}

/// The identity subject of `grant` (a Grant as the provider lists it) when it is live (not being
/// deleted) and names consumer cluster `uid`; empty when it names no subject.
pub fn consumer_subject<'a>(grant: &'a DynamicObject, uid: &str) -> Option<&'a str> {
    let spec = |p: &str| grant.data.pointer(p).and_then(serde_json::Value::as_str);
    (grant.metadata.deletion_timestamp.is_none() && spec("/spec/consumerClusterUID") == Some(uid))
        .then(|| spec("/spec/identity/subject").unwrap_or_default())
}

/// What a namespace is to a would-be claimer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NamespaceState {
    /// It does not exist: a claim creates it.
    Missing,
    /// It exists and is claimed by this identity.
    Ours,
}

/// Whether `subject` may claim `namespace` as it is now on the provider (`None`: missing).
/// A namespace claimed by another identity is [`IssueError::NamespaceClaimed`]; any other existing
/// namespace (made by someone else, or kbind's own grants or lease namespace) is
/// [`IssueError::NamespaceNotClaimable`].
pub fn judge(namespace: &str, existing: Option<&DynamicObject>, subject: &str) -> Result<NamespaceState, IssueError> {
    let Some(ns) = existing else {
        return Ok(NamespaceState::Missing);
    };
    let empty = BTreeMap::new();
    let labels = ns.metadata.labels.as_ref().unwrap_or(&empty);
    let annotations = ns.metadata.annotations.as_ref().unwrap_or(&empty);
    match labels.get(LABEL_CLAIMED_BY) {
        // The annotation is compared too, so a hash collision cannot hand over a namespace.
        Some(hash)
            if *hash == claimed_by_value(subject)
                && annotations.get(ANNOTATION_CLAIMED_BY).map(String::as_str) == Some(subject)
                && labels.get(LABEL_MANAGED_BY).map(String::as_str) == Some(MANAGED_BY) =>
        {
            Ok(NamespaceState::Ours)
        }
        Some(_) => Err(IssueError::NamespaceClaimed {
            namespace: namespace.to_string(),
        }),
        None => Err(IssueError::NamespaceNotClaimable {
            namespace: namespace.to_string(),
        }),
    }
}

/// Reads `namespace` on the provider and [`judge`]s it for `subject`.
pub async fn check(client: &dyn ClusterClient, namespace: &str, subject: &str) -> Result<NamespaceState, IssueError> {
    let existing = client.get_opt(&namespace_resource(), None, namespace).await?;
    judge(namespace, existing.as_ref(), subject)
}

/// How many namespaces `subject` holds claimed on the provider (a complete list, or an error).
pub async fn held_by(client: &dyn ClusterClient, subject: &str) -> Result<usize, IssueError> {
    let selector = format!("{LABEL_CLAIMED_BY}={}", claimed_by_value(subject));
    let list = client
        .list(&namespace_resource(), None, &ListParams::default().labels(&selector))
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|ns| matches!(judge("", Some(ns), subject), Ok(NamespaceState::Ours)))
        .count())
}

/// The short id `{identity}` stands for in a claimable pattern: 8 hex digits of the SHA-256
/// of the subject (stable, a valid namespace-name fragment, and not the subject itself).
pub fn identity_id(subject: &str) -> String {
    claimed_by_value(subject)[..8].to_string()
}

/// Whether `name` matches `pattern`, where `*` matches any run of characters.
pub fn matches(pattern: &str, name: &str) -> bool {
    let mut parts = pattern.split('*');
    let first = parts.next().unwrap_or_default();
    let Some(mut rest) = name.strip_prefix(first) else {
        return false;
    };
    let parts: Vec<&str> = parts.collect();
    let Some((last, middle)) = parts.split_last() else {
        return rest.is_empty();
    };
    for part in middle {
        match rest.find(part) {
            Some(at) => rest = &rest[at + part.len()..],
            None => return false,
        }
    }
    rest.len() >= last.len() && rest.ends_with(last)
}

/// The operator's rules for which provider namespaces an identity may claim, checked before
/// the provider is read (the gateway's pre-check and the issuer say the same thing).
#[derive(Debug, Clone)]
pub struct Policy<'a> {
    /// Patterns a claimed namespace must match (one of); `{identity}` is [`identity_id`].
    pub claimable: &'a [String],
    /// Patterns no claimed namespace may match.
    pub unclaimable: &'a [String],
    /// kbind's own namespaces (grants, leases): never claimable.
    pub reserved: [&'a String; 2],
    /// How many namespaces one Grant may claim.
    pub max_per_bind: usize,
}

impl Policy<'_> {
    /// Refuses namespaces the patterns do not allow, or too many of them.
    pub fn check(&self, subject: &str, namespaces: &[String]) -> Result<(), IssueError> {
        let wanted: BTreeSet<&String> = namespaces.iter().collect();
        if wanted.len() > self.max_per_bind {
            return Err(IssueError::TooManyNamespaces {
                max: self.max_per_bind,
                asked: wanted.len(),
            });
        }
        let id = identity_id(subject);
        let claimable: Vec<String> = self.claimable.iter().map(|p| p.replace("{identity}", &id)).collect();
        for ns in wanted {
            let refused = |rule: String| IssueError::NamespaceNotAllowed {
                namespace: ns.clone(),
                rule,
            };
            if self.reserved.contains(&ns) {
                return Err(refused("it is kbind's own namespace".into()));
            }
            if let Some(p) = self.unclaimable.iter().find(|p| matches(p, ns)) {
                return Err(refused(format!("the platform reserves {p:?}")));
            }
            if !claimable.iter().any(|p| matches(p, ns)) {
                return Err(refused(format!(
                    "your namespaces must match {}",
                    claimable
                        .iter()
                        .map(|p| format!("{p:?}"))
                        .collect::<Vec<_>>()
                        .join(" or ")
                )));
            }
        }
        Ok(())
    }
}

/// The Namespace object a claim creates.
pub(crate) fn claimed_namespace(namespace: &str, subject: &str, grant: &str) -> serde_json::Value {
    serde_json::json!({
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {
            "name": namespace,
            "labels": {
                LABEL_CLAIMED_BY: claimed_by_value(subject),
                LABEL_MANAGED_BY: MANAGED_BY,
            },
            "annotations": {
                ANNOTATION_CLAIMED_BY: subject,
                // Which Grant first claimed it; informative only (claims are per identity).
                kbind_api::consts::backend::LABEL_GRANT: grant,
            },
        },
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ns(labels: &[(&str, &str)], annotations: &[(&str, &str)]) -> DynamicObject {
        let mut obj = DynamicObject::new("team-a", &namespace_resource());
        obj.metadata.labels = Some(labels.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect());
        obj.metadata.annotations = Some(
            annotations
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        obj
    }

    #[test]
    fn patterns_match_with_stars_anywhere() {
        assert!(matches("*", "anything"));
        assert!(matches("kube-*", "kube-system"));
        assert!(!matches("kube-*", "kubeflow"));
        assert!(matches("default", "default"));
        assert!(!matches("default", "default2"));
        assert!(matches("t-*-dev", "t-a-dev"));
        assert!(!matches("t-*-dev", "t-dev"));
        assert!(matches("*-prod", "a-prod"));
        assert!(!matches("a*a", "a"));
    }

    #[test]
    fn the_policy_refuses_reserved_denied_unmatched_and_too_many_namespaces() {
        let (grants, lease) = ("kbind-grants".to_string(), "leases".to_string());
        let claimable = ["{identity}-*".to_string(), "shared-*".to_string()];
        let unclaimable = ["kube-*".to_string(), "shared-platform".to_string()];
        let policy = Policy {
            claimable: &claimable,
            unclaimable: &unclaimable,
            reserved: [&grants, &lease],
            max_per_bind: 2,
        };
        let id = identity_id("token:alice");
        assert_eq!(id.len(), 8);
        let own = format!("{id}-app");
        let ns = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        policy.check("token:alice", &ns(&[&own, "shared-x"])).unwrap();
        for (bad, rule) in [
            ("cert-manager", "must match"),
            ("kube-x", "reserves"),
            ("shared-platform", "reserves"),
            ("leases", "kbind's own"),
        ] {
            match policy.check("token:alice", &ns(&[bad])) {
                Err(IssueError::NamespaceNotAllowed { namespace, rule: why }) => {
                    assert_eq!(namespace, bad);
                    assert!(why.contains(rule), "{why}");
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
        // Another identity's prefix is not ours.
        assert!(policy.check("token:bob", &ns(&[&own])).is_err());
        assert!(matches!(
            policy.check("token:alice", &ns(&["shared-a", "shared-b", "shared-c"])),
            Err(IssueError::TooManyNamespaces { max: 2, asked: 3 })
        ));
    }

    #[test]
    fn a_namespace_is_ours_only_with_our_hash_our_subject_and_our_manager() {
        let alice = claimed_by_value("token:alice");
        assert_eq!(alice.len(), 40);
        assert_eq!(judge("team-a", None, "token:alice").unwrap(), NamespaceState::Missing);
        let ours = ns(
            &[(LABEL_CLAIMED_BY, &alice), (LABEL_MANAGED_BY, MANAGED_BY)],
            &[(ANNOTATION_CLAIMED_BY, "token:alice")],
        );
        assert_eq!(
            judge("team-a", Some(&ours), "token:alice").unwrap(),
            NamespaceState::Ours
        );
        assert!(matches!(
            judge("team-a", Some(&ours), "token:bob"),
            Err(IssueError::NamespaceClaimed { .. })
        ));
        // Same hash but another subject in the annotation: not ours.
        let forged = ns(
            &[(LABEL_CLAIMED_BY, &alice), (LABEL_MANAGED_BY, MANAGED_BY)],
            &[(ANNOTATION_CLAIMED_BY, "token:mallory")],
        );
        assert!(matches!(
            judge("team-a", Some(&forged), "token:alice"),
            Err(IssueError::NamespaceClaimed { .. })
        ));
        let foreign = ns(&[], &[]);
        assert!(matches!(
            judge("team-a", Some(&foreign), "token:alice"),
            Err(IssueError::NamespaceNotClaimable { .. })
        ));
        let kbind_made_unclaimed = ns(&[(LABEL_MANAGED_BY, MANAGED_BY)], &[]);
        assert!(matches!(
            judge("team-a", Some(&kbind_made_unclaimed), "token:alice"),
            Err(IssueError::NamespaceNotClaimable { .. })
        ));
    }
}
