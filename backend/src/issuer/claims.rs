//! Provider namespace claims: which identity a namespace belongs to, and whether a Grant may use
//! it. The gateway's pre-check and the issuer share these functions so both say the same thing.

use std::collections::BTreeMap;

use kbind_api::consts::backend::{ANNOTATION_CLAIMED_BY, LABEL_CLAIMED_BY, MANAGED_BY};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject, identity::namespace_resource};
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
