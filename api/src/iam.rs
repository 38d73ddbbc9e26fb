//! `iam.kbind.io/v1alpha1` `Grant`: the issuance record of one (identity, Export, consumer
//! cluster). Created by the gateway on bind, provisioned and revoked by the issuer through its
//! finalizer, deleted by a revoke or by the reaper.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::CustomResource;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The issuance record of one (identity, Export, consumer cluster).
// Clippy reads the repeated `printcolumn(type_ = ...)` inside `#[kube]` as duplicated attributes.
#[allow(clippy::duplicated_attributes)]
#[derive(CustomResource, Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[kube(
    group = "iam.kbind.io",
    version = "v1alpha1",
    kind = "Grant",
    plural = "grants",
    shortname = "kgr",
    category = "kbind-iam",
    status = "GrantStatus",
    derive = "PartialEq",
    doc = "A Grant records what was issued to one identity for one Export and consumer cluster.",
    printcolumn(name = "Identity", type_ = "string", json_path = ".spec.identity.subject"),
    printcolumn(name = "Export", type_ = "string", json_path = ".spec.export"),
    printcolumn(name = "Consumer", type_ = "string", json_path = ".spec.consumerClusterUID"),
    printcolumn(
        name = "Ready",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].status"#
    ),
    printcolumn(
        name = "Reason",
        type_ = "string",
        json_path = r#".status.conditions[?(@.type=="Ready")].reason"#
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct GrantSpec {
    /// Who bound. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "identity is immutable"}]))]
    pub identity: GrantIdentity,
    /// The Export bound, by name. Immutable.
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "export is immutable"}]))]
    #[schemars(length(min = 1, max = 253))]
    pub export: String,
    /// The consumer cluster's UID (its `kube-system` Namespace UID). Immutable.
    #[serde(rename = "consumerClusterUID")]
    #[schemars(extend("x-kubernetes-validations" = [{"rule": "self == oldSelf", "message": "consumerClusterUID is immutable"}]))]
    #[schemars(length(min = 36, max = 36))]
    pub consumer_cluster_uid: String,
    /// Provider namespaces the consumer uses for the Export's namespaced APIs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "set"))]
    pub namespaces: Vec<String>,
}

/// An authenticated identity, as the backend's authenticator named it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantIdentity {
    /// Stable identifier (`token:<name>`, `oidc:<issuer>#<sub>`).
    #[schemars(length(min = 1, max = 512))]
    pub subject: String,
    /// Display name, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// What was issued, the pending pickup and the Grant's conditions.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct GrantStatus {
    /// What the issuer created for this Grant.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub issued: Option<Issued>,
    /// The one pickup waiting to be redeemed (a hash only; the bundle is assembled at pickup).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pickup: Option<Pickup>,
    /// The `generation` of the spec the issuer last provisioned.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`: issued and usable.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["type"]))]
    pub conditions: Vec<Condition>,
}

/// What an issuer created for a Grant.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Issued {
    /// The name of the issuer that provisioned it (`kubernetes` in tree).
    pub issuer: String,
    /// The ServiceAccount whose tokens the bundle carries, when the issuer uses one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account: Option<IssuedObject>,
    /// The provider namespaces claimed for the identity.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub namespaces: Vec<String>,
    /// Every other object created (Roles, bindings, the Lease).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub objects: Vec<IssuedObject>,
}

/// One object an issuer created.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct IssuedObject {
    /// Its kind (`ServiceAccount`, `Role`, `RoleBinding`, `ClusterRole`, …).
    pub kind: String,
    /// Its namespace; absent for cluster-scoped objects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// Its name.
    pub name: String,
}

/// A pending one-time pickup: only the SHA-256 of its secret part is stored.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Pickup {
    /// `sha256:<hex>` of the pickup secret.
    pub hash: String,
    /// When the pickup URL stops working.
    pub expires_at: Time,
    /// The consumer namespace the bundle's Secret goes to (the konnector's, `kbind` by default).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub konnector_namespace: Option<String>,
    /// When it was redeemed; a claimed pickup never works again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub claimed_at: Option<Time>,
}

/// The Grant name of (identity subject, Export, consumer cluster UID) under the provider's
/// naming `key`: `grant-<20 hex>` of their HMAC-SHA256. Every gateway replica derives the same
/// name (a create race has one winner), and nobody without the key can compute it: a gateway
/// the user is tricked into using cannot name the objects of someone's existing Grant.
pub fn keyed_grant_name(key: &[u8], subject: &str, export: &str, consumer_cluster_uid: &str) -> String {
    use hmac::{Hmac, Mac};
    // HMAC takes keys of any length, so this cannot fail; the fallback keeps the signature total.
    let Ok(mut mac) = Hmac::<sha2::Sha256>::new_from_slice(key) else {
        return grant_name(subject, export, consumer_cluster_uid);
    };
    for part in [subject, export, consumer_cluster_uid] {
        mac.update(part.as_bytes());
        mac.update(&[0u8]);
    }
    let digest = mac.finalize().into_bytes();
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("grant-{hex}")
}

/// The unkeyed Grant name of (identity subject, Export, consumer cluster UID): `grant-<20 hex>` of
/// their SHA-256. Grants made before names were keyed carry it; anybody can compute it.
pub fn grant_name(subject: &str, export: &str, consumer_cluster_uid: &str) -> String {
    use sha2::{Digest, Sha256};
    let mut hash = Sha256::new();
    for part in [subject, export, consumer_cluster_uid] {
        hash.update(part.as_bytes());
        hash.update([0u8]);
    }
    let digest = hash.finalize();
    let hex: String = digest.iter().take(10).map(|b| format!("{b:02x}")).collect();
    format!("grant-{hex}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keyed_names_depend_on_the_key_and_are_not_the_unkeyed_ones() {
        let uid = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
        let a = keyed_grant_name(b"key-1", "token:alice", "widgets", uid);
        assert_eq!(a, keyed_grant_name(b"key-1", "token:alice", "widgets", uid));
        assert_ne!(a, keyed_grant_name(b"key-2", "token:alice", "widgets", uid));
        assert_ne!(a, grant_name("token:alice", "widgets", uid));
        assert_ne!(a, keyed_grant_name(b"key-1", "token:alic", "ewidgets", uid));
        assert!(a.starts_with("grant-") && a.len() == 26, "{a}");
    }

    #[test]
    fn grant_names_are_stable_and_separate_the_three_parts() {
        let a = grant_name("token:alice", "widgets", "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77");
        assert_eq!(
            a,
            grant_name("token:alice", "widgets", "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77")
        );
        assert_eq!(a.len(), "grant-".len() + 20);
        // Moving a character between parts must not give the same name.
        assert_ne!(
            grant_name("token:alic", "ewidgets", "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77"),
            a
        );
        assert_ne!(
            grant_name("token:bob", "widgets", "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77"),
            a
        );
    }
}
