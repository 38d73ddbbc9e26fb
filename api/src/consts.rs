//! The exact strings of the kbind contract (DESIGN.md §2–§3): group, labels, annotations,
//! finalizers, field managers, condition types and reasons. Entries marked *(ours)* are
//! additive to the Go slim-core contract.

/// API group of the core kbind types.
pub const GROUP: &str = "core.kbind.io";
/// API version of the core kbind types.
pub const VERSION: &str = "v1alpha1";
/// `apiVersion` of the core kbind types.
pub const API_VERSION: &str = "core.kbind.io/v1alpha1";
/// The konnector's own namespace; a Connection's Secret must live here.
pub const DEFAULT_NAMESPACE: &str = "kbind";
/// Default key of the kubeconfig inside a Connection's Secret.
pub const DEFAULT_KUBECONFIG_KEY: &str = "kubeconfig";
/// Category every kbind CRD belongs to (`kubectl get kbind`).
pub const CATEGORY: &str = "kbind";
/// Value of boolean-like labels and annotations (`managed`, `exported`, `readopt`).
pub const TRUE: &str = "true";
/// Prefix of every kbind label and annotation key.
pub const KEY_PREFIX: &str = "core.kbind.io/";

/// Label keys.
pub mod label {
    /// On a provider CRD: `"true"` opts the API into export.
    pub const EXPORTED: &str = "core.kbind.io/exported";
    /// `"true"` on everything the konnector writes on the provider, on pulled consumer CRDs,
    /// related copies, provider namespaces it creates and the Lease.
    pub const MANAGED: &str = "core.kbind.io/managed";
    /// *(ours)* On a synced consumer object: the Connection that serves it (several
    /// Connections may serve one API, each its own namespaces). Its value is
    /// [`connection_label_value`](super::connection_label_value) of the Connection's name.
    pub const CONNECTION: &str = "core.kbind.io/connection";
}

/// Annotation keys.
pub mod annotation {
    /// On a pulled consumer CRD: the name of the Connection that serves the API. *(ours)* Also on
    /// a synced consumer object whose [`label::CONNECTION`](super::label::CONNECTION) holds the
    /// hash form of a long name: the full name.
    pub const CONNECTION: &str = "core.kbind.io/connection";
    /// On a pulled consumer CRD: `sha256:<16 hex>` of the schema it was pulled from.
    pub const SCHEMA_HASH: &str = "core.kbind.io/schema-hash";
    /// On a provider copy: the consumer cluster UID that owns it.
    pub const CONSUMER_CLUSTER_UID: &str = "core.kbind.io/consumer-cluster-uid";
    /// On a provider copy: the UID of the consumer object it mirrors.
    pub const CONSUMER_OBJECT_UID: &str = "core.kbind.io/consumer-object-uid";
    /// On a related copy: the UID of the binding that created it.
    pub const RELATED_BINDING: &str = "core.kbind.io/related-binding";
    /// On a consumer object: the conflict reason that stops its sync.
    pub const CONFLICT: &str = "core.kbind.io/conflict";
    /// On a consumer object, binding or Connection: `Orphan` keeps provider state on delete.
    pub const DELETION_POLICY: &str = "core.kbind.io/deletion-policy";
    /// *(ours)* On a provider copy: the consumer generation its spec answers, written with it.
    pub const CONSUMER_GENERATION: &str = "core.kbind.io/consumer-generation";
    /// *(ours)* On a consumer object: RFC 3339 time since which its provider is disengaged.
    pub const STATUS_STALE: &str = "core.kbind.io/status-stale";
    /// *(ours)* On a consumer object: `"true"` takes back our copy whose object UID is stale.
    pub const READOPT: &str = "core.kbind.io/readopt";
    /// *(ours)* On a Connection: comma list of namespaces (or `*`) whose Bindings may use it.
    pub const BINDING_NAMESPACES: &str = "core.kbind.io/binding-namespaces";
    /// *(ours)* On a pulled consumer CRD: the schema hash whose destructive update a user accepts.
    pub const ACCEPT_SCHEMA_HASH: &str = "core.kbind.io/accept-schema-hash";
}

/// Value of [`annotation::DELETION_POLICY`] that releases without touching the provider.
pub const DELETION_POLICY_ORPHAN: &str = "Orphan";
/// Value of [`annotation::BINDING_NAMESPACES`] that allows Bindings in every namespace.
pub const BINDING_NAMESPACES_ALL: &str = "*";
/// Prefix of [`annotation::SCHEMA_HASH`] values and of `boundAPIs[].crdHash`.
pub const SCHEMA_HASH_PREFIX: &str = "sha256:";

/// Finalizers.
pub mod finalizer {
    /// On synced consumer objects, until their provider copy is gone.
    pub const SYNCER: &str = "core.kbind.io/syncer";
    /// On Connections, bindings, and the Secret a Connection references.
    pub const CLEANUP: &str = "core.kbind.io/cleanup";
}

/// Server-side apply field managers and the event reporting component.
pub mod field_manager {
    /// Field manager for synced instances (and every other konnector write).
    pub const KONNECTOR: &str = "kbind-konnector";
    /// Field manager for related-resource copies.
    pub const KONNECTOR_RELATED: &str = "kbind-konnector-related";
}

/// Reporting component of the konnector's Events.
pub const EVENT_COMPONENT: &str = "kbind-konnector";

/// Condition types.
pub mod condition {
    /// Connection: the referenced Secret exists and holds an acceptable kubeconfig.
    pub const SECRET_VALID: &str = "SecretValid";
    /// Connection and bindings: the provider is reachable with the pinned identity.
    pub const CONNECTED: &str = "Connected";
    /// Connection: exported schemas are pulled and current.
    pub const SCHEMA_IN_SYNC: &str = "SchemaInSync";
    /// Connection and bindings: some verb on some resource is forbidden on the provider.
    pub const PERMISSION_DENIED: &str = "PermissionDenied";
    /// Summary condition of every kind.
    pub const READY: &str = "Ready";
    /// Bindings: instances of the bound APIs are syncing.
    pub const SYNCED: &str = "Synced";
    /// Bindings: some objects are left alone because of conflicts.
    pub const CONFLICTS: &str = "Conflicts";
}

/// Condition status values.
pub mod status {
    /// Condition holds.
    pub const TRUE: &str = "True";
    /// Condition does not hold.
    pub const FALSE: &str = "False";
    /// Condition cannot be determined.
    pub const UNKNOWN: &str = "Unknown";
}

/// Condition reasons.
pub mod reason {
    /// Everything is as it should be.
    pub const AS_EXPECTED: &str = "AsExpected";
    /// Waiting for a missing piece (Secret, Connection, exported API, …).
    pub const PENDING: &str = "Pending";
    /// *(ours)* Synced=False: a syncer's list or watch of the API fails on the consumer or the provider
    /// (the message names verb, API, side and cause); it is retried.
    pub const WATCH_FAILED: &str = "WatchFailed";
    /// The Connection's Secret does not exist.
    pub const SECRET_NOT_FOUND: &str = "SecretNotFound";
    /// *(ours)* The Connection's Secret exists but has no `kubeconfigSecretRef.key`.
    pub const SECRET_KEY_MISSING: &str = "SecretKeyMissing";
    /// *(ours)* On a binding: its Connection is being deleted and waits for this binding to be
    /// deleted (or annotated Orphan); nothing syncs meanwhile.
    pub const CONNECTION_DELETING: &str = "ConnectionDeleting";
    /// The provider's identity differs from the pinned `remoteClusterUID`.
    pub const CLUSTER_IDENTITY_CHANGED: &str = "ClusterIdentityChanged";
    /// A bound API is not in the Connection's `exportedAPIs`.
    pub const API_NOT_EXPORTED: &str = "APINotExported";
    /// A provider object without kbind markers is in the way (policy `Fail`).
    pub const FOREIGN_OBJECT_EXISTS: &str = "ForeignObjectExists";
    /// A provider object carries another owner's markers.
    pub const OWNED_BY_ANOTHER: &str = "OwnedByAnother";
    /// The provider credentials may not perform a needed verb.
    pub const FORBIDDEN: &str = "Forbidden";
    /// *(ours)* Ready=False: a related-resources rule names a kind a side does not serve, or a
    /// cluster-scoped one (the message names the kind and the side).
    pub const RELATED_KIND_NOT_SERVED: &str = "RelatedKindNotServed";
    /// A deleted Connection waits for its bindings to drain.
    pub const DRAINING_BINDINGS: &str = "DrainingBindings";
    /// *(ours)* The Secret is outside the konnector's namespace.
    pub const SECRET_NAMESPACE_NOT_ALLOWED: &str = "SecretNamespaceNotAllowed";
    /// *(ours)* The Secret's kubeconfig cannot be parsed or used.
    pub const INVALID_KUBECONFIG: &str = "InvalidKubeconfig";
    /// *(ours)* The kubeconfig uses exec, auth-provider, files, proxies or insecure transport.
    pub const UNSUPPORTED_CREDENTIALS: &str = "UnsupportedCredentials";
    /// *(ours)* The provider cannot be reached.
    pub const PROVIDER_UNREACHABLE: &str = "ProviderUnreachable";
    /// *(ours)* The API is already served on this consumer through another Connection.
    pub const BOUND_THROUGH_ANOTHER_CONNECTION: &str = "BoundThroughAnotherConnection";
    /// *(ours)* The Connection does not allow Bindings in this namespace.
    pub const NAMESPACE_NOT_ALLOWED: &str = "NamespaceNotAllowed";
    /// *(ours)* A namespaced Binding names a cluster-scoped API.
    pub const CLUSTER_SCOPED_API_IN_BINDING: &str = "ClusterScopedAPIInBinding";
    /// *(ours)* The consumer CRD exists but was not created by kbind.
    pub const CRD_NOT_MANAGED: &str = "CRDNotManaged";
    /// *(ours)* An incompatible schema change waits for a user to accept it.
    pub const SCHEMA_UPDATE_BLOCKED: &str = "SchemaUpdateBlocked";
    /// *(ours)* The provider's OpenAPI schema is too deep or too large to inline into a CRD.
    pub const SCHEMA_TOO_COMPLEX: &str = "SchemaTooComplex";
    /// *(ours)* Another provider serves this API's other namespaces and this provider's schema
    /// lacks a field of the consumer CRD or stores another version.
    pub const INCOMPATIBLE_SCHEMA: &str = "IncompatibleSchema";
    /// *(ours)* The per-API `Synced` reasons that say a binding serves nothing of that API, so it
    /// claims none of its namespaces (DESIGN.md §4 "Connections per API").
    pub const API_REFUSALS: [&str; 7] = [
        BOUND_THROUGH_ANOTHER_CONNECTION,
        NAMESPACE_NOT_ALLOWED,
        CLUSTER_SCOPED_API_IN_BINDING,
        API_NOT_EXPORTED,
        CRD_NOT_MANAGED,
        INCOMPATIBLE_SCHEMA,
        SCHEMA_TOO_COMPLEX,
    ];
    /// *(ours)* Deletion waits because the provider is unreachable or refuses the deletes.
    pub const DELETION_BLOCKED: &str = "DeletionBlocked";
    /// *(ours)* The provider answered 401: it refuses the Connection's credentials (revoked or
    /// expired).
    pub const UNAUTHORIZED: &str = "Unauthorized";
    /// *(ours)* The provider answered 401 and the issued token in the Secret is past its
    /// expiry (it could not be renewed in time): bind or redeem again for a new one.
    pub const CREDENTIAL_EXPIRED: &str = "CredentialExpired";
}

/// kcp's LogicalCluster: its presence marks a CRD-less provider and its UID is the identity.
pub mod kcp {
    /// API group of LogicalCluster.
    pub const GROUP: &str = "core.kcp.io";
    /// API version of LogicalCluster.
    pub const VERSION: &str = "v1alpha1";
    /// Kind of LogicalCluster.
    pub const KIND: &str = "LogicalCluster";
    /// Plural resource name of LogicalCluster.
    pub const RESOURCE: &str = "logicalclusters";
    /// Name of the one LogicalCluster object in a workspace.
    pub const LOGICAL_CLUSTER_NAME: &str = "cluster";
}

/// Namespace whose UID identifies a plain Kubernetes cluster.
pub const IDENTITY_NAMESPACE: &str = "kube-system";

/// The provider-side heartbeat Lease.
pub mod lease {
    /// Default provider namespace of the heartbeat Lease.
    pub const NAMESPACE: &str = "kbind";
    /// Lease name prefix; the full name is `consumer-<localClusterUID>`.
    pub const NAME_PREFIX: &str = "consumer-";
    /// `leaseDurationSeconds` of the heartbeat Lease.
    pub const DURATION_SECONDS: i32 = 60;
    /// How often the konnector renews the Lease while connected.
    pub const RENEW_INTERVAL_SECONDS: u64 = 30;
}

/// Built-in API groups that a CRD-less provider never exports (besides the core group `""`).
pub const BUILTIN_GROUPS: &[&str] = &["", "apps", "batch", "policy", "autoscaling", "extensions"];
/// Group suffixes that mark a built-in API group.
pub const BUILTIN_GROUP_SUFFIXES: &[&str] = &[".k8s.io", ".kubernetes.io", ".kcp.io"];

/// Whether `group` is a built-in API group that kbind never exports.
pub fn is_builtin_group(group: &str) -> bool {
    BUILTIN_GROUPS.contains(&group) || BUILTIN_GROUP_SUFFIXES.iter().any(|suffix| group.ends_with(suffix))
}

/// The longest label value kube-apiserver accepts.
pub const MAX_LABEL_VALUE: usize = 63;
/// Prefix of the hash form of [`label::CONNECTION`] for a name that is no valid label value.
pub const CONNECTION_LABEL_HASH_PREFIX: &str = "sha256-";

/// Whether kube-apiserver accepts `value` as a label value: at most 63 characters, empty or
/// `[A-Za-z0-9._-]` starting and ending alphanumeric.
pub fn is_label_value(value: &str) -> bool {
    let edge = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    value.is_empty()
        || (value.len() <= MAX_LABEL_VALUE
            && value
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))
            && edge(value.chars().next())
            && edge(value.chars().last()))
}

/// The value of [`label::CONNECTION`] for the Connection `name`: the name itself when it is a
/// label value, else `sha256-` and the first 56 hex digits of its SHA-256 (63 characters; a
/// Connection name may have 253). The one place every writer and reader of the label takes it
/// from; the full name then goes in [`annotation::CONNECTION`] on the object.
pub fn connection_label_value(name: &str) -> String {
    if is_label_value(name) {
        return name.to_string();
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(name.as_bytes());
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let keep = MAX_LABEL_VALUE - CONNECTION_LABEL_HASH_PREFIX.len();
    format!("{CONNECTION_LABEL_HASH_PREFIX}{}", &hex[..keep])
}

/// The heartbeat Lease name for a consumer cluster UID.
pub fn lease_name(local_cluster_uid: &str) -> String {
    format!("{}{local_cluster_uid}", lease::NAME_PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_groups_cover_core_named_groups_and_suffixes() {
        for group in [
            "",
            "apps",
            "batch",
            "rbac.authorization.k8s.io",
            "metrics.k8s.io",
            "tenancy.kcp.io",
        ] {
            assert!(is_builtin_group(group), "{group:?} should be built-in");
        }
        for group in ["example.org", "k8s.io.example.com", "apps.example.org", "kcp.io"] {
            assert!(!is_builtin_group(group), "{group:?} should not be built-in");
        }
    }

    #[test]
    fn a_connection_label_value_always_fits_and_a_short_name_is_itself() {
        assert_eq!(connection_label_value("acme"), "acme");
        let max = "a".repeat(63);
        assert_eq!(connection_label_value(&max), max);
        let long = format!("{}.example", "p".repeat(245));
        assert_eq!(long.len(), 253);
        let hashed = connection_label_value(&long);
        assert_eq!(hashed.len(), MAX_LABEL_VALUE, "{hashed}");
        assert!(hashed.starts_with(CONNECTION_LABEL_HASH_PREFIX) && is_label_value(&hashed));
        assert_eq!(hashed, connection_label_value(&long), "the hash form is stable");
        assert_ne!(hashed, connection_label_value(&format!("{long}x")));
        assert!(connection_label_value(&"b".repeat(64)).starts_with(CONNECTION_LABEL_HASH_PREFIX));
    }

    #[test]
    fn label_values_follow_kube_apiserver() {
        for ok in ["", "a", "A_b.c-9", &"z".repeat(63)] {
            assert!(is_label_value(ok), "{ok:?}");
        }
        for bad in ["-a", "a-", ".a", "a b", "a/b", "é", &"z".repeat(64)] {
            assert!(!is_label_value(bad), "{bad:?}");
        }
    }

    #[test]
    fn lease_name_prefixes_the_consumer_uid() {
        assert_eq!(lease_name("1234-abcd"), "consumer-1234-abcd");
    }

    #[test]
    fn every_marker_key_lives_under_the_kbind_prefix() {
        let keys = [
            label::EXPORTED,
            label::MANAGED,
            annotation::CONNECTION,
            annotation::SCHEMA_HASH,
            annotation::CONSUMER_CLUSTER_UID,
            annotation::CONSUMER_OBJECT_UID,
            annotation::RELATED_BINDING,
            annotation::CONFLICT,
            annotation::DELETION_POLICY,
            annotation::CONSUMER_GENERATION,
            annotation::STATUS_STALE,
            annotation::READOPT,
            annotation::BINDING_NAMESPACES,
            annotation::ACCEPT_SCHEMA_HASH,
            finalizer::SYNCER,
            finalizer::CLEANUP,
        ];
        for key in keys {
            assert!(key.starts_with(KEY_PREFIX), "{key} is outside {KEY_PREFIX}");
        }
        assert_eq!(API_VERSION, format!("{GROUP}/{VERSION}"));
    }
}

/// The service layer's exact strings (DESIGN.md §7): `catalog.kbind.io` and `iam.kbind.io`.
pub mod backend {
    /// API group of Export and Collection.
    pub const CATALOG_GROUP: &str = "catalog.kbind.io";
    /// API group of Grant.
    pub const IAM_GROUP: &str = "iam.kbind.io";
    /// The issuer's finalizer on a Grant: revocation runs before the Grant goes.
    pub const ISSUER_FINALIZER: &str = "iam.kbind.io/issuer";
    /// Label on a Grant and on everything issued for it: the Grant's name.
    pub const LABEL_GRANT: &str = "iam.kbind.io/grant";
    /// Label on a Grant: the Export's name.
    pub const LABEL_EXPORT: &str = "iam.kbind.io/export";
    /// Label on a Grant: the consumer cluster UID.
    pub const LABEL_CONSUMER_CLUSTER_UID: &str = "iam.kbind.io/consumer-cluster-uid";
    /// Label on a claimed provider namespace: a hash of the claiming identity (labels cannot
    /// hold every subject).
    pub const LABEL_CLAIMED_BY: &str = "iam.kbind.io/claimed-by";
    /// Annotation on a claimed provider namespace: the claiming identity's subject.
    pub const ANNOTATION_CLAIMED_BY: &str = "iam.kbind.io/claimed-by";
    /// `app.kubernetes.io/managed-by` value on everything the backend creates.
    pub const MANAGED_BY: &str = "kbind-backend";
    /// Annotation the CLI writes on a Connection and its Secret: the origin
    /// (`scheme://host[:port]`) of the gateway whose bundle it applied. A bundle of another
    /// origin never re-points that Connection, and `unbind` revokes its Grant only there.
    pub const ANNOTATION_GATEWAY: &str = "iam.kbind.io/gateway";
    /// Field manager of the backend's writes.
    pub const FIELD_MANAGER: &str = "kbind-backend";
    /// Prefix of the heartbeat Lease name (`consumer-<consumer cluster UID>`, DESIGN.md §2).
    pub const LEASE_PREFIX: &str = "consumer-";
}
