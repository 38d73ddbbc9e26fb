//! Key mapping between consumer and provider objects (contract §4 "keys"): a `Mapper` turns
//! a consumer `namespace/name` into the provider's and back, never changing scope.

use kbind_cluster::ApiResource;

/// The namespace (for namespaced resources) and name of one object.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ObjectKey {
    /// `None` for cluster-scoped objects.
    pub namespace: Option<String>,
    /// `metadata.name`.
    pub name: String,
}

impl ObjectKey {
    /// The key of a namespaced object.
    pub fn namespaced(namespace: &str, name: &str) -> Self {
        Self {
            namespace: Some(namespace.to_string()),
            name: name.to_string(),
        }
    }

    /// The key of a cluster-scoped object.
    pub fn cluster(name: &str) -> Self {
        Self {
            namespace: None,
            name: name.to_string(),
        }
    }

    /// The key of an object's metadata, if it has a name.
    pub fn of(obj: &kbind_cluster::DynamicObject) -> Option<Self> {
        Some(Self {
            namespace: obj.metadata.namespace.clone(),
            name: obj.metadata.name.clone()?,
        })
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match &self.namespace {
            Some(ns) => write!(f, "{ns}/{}", self.name),
            None => f.write_str(&self.name),
        }
    }
}

/// Maps consumer object keys to provider keys and back; installed in code (`with_mapper`).
///
/// Contract: a mapper never changes scope (a namespaced key maps to a namespaced key), and
/// `to_consumer(res, &to_provider(res, k)) == Some(k)` for every valid key `k` (§8 invariant 6).
/// `to_consumer` answers `None` for provider objects that no consumer key maps to.
pub trait Mapper: Send + Sync {
    /// The provider key of a consumer object.
    fn to_provider(&self, res: &ApiResource, key: &ObjectKey) -> ObjectKey;
    /// The consumer key of a provider object, if it is the image of one.
    fn to_consumer(&self, res: &ApiResource, key: &ObjectKey) -> Option<ObjectKey>;
}

/// The shipped mapper: the same namespace and name on both sides.
#[derive(Debug, Clone, Copy, Default)]
pub struct Identity;

impl Mapper for Identity {
    fn to_provider(&self, _res: &ApiResource, key: &ObjectKey) -> ObjectKey {
        key.clone()
    }

    fn to_consumer(&self, _res: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
        Some(key.clone())
    }
}

/// Property checks for mappers (cargo feature `testing`).
#[cfg(feature = "testing")]
mod testing {
    use proptest::prelude::*;
    use proptest::test_runner::{Config, TestError, TestRunner};

    use super::{Mapper, ObjectKey};
    use kbind_cluster::ApiResource;

    /// A DNS-1123 label (namespace names): at most 63 characters.
    fn dns1123_label() -> impl Strategy<Value = String> {
        proptest::string::string_regex("[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
            .unwrap_or_else(|e| panic!("invalid DNS-1123 label pattern: {e}"))
    }

    /// A DNS-1123 subdomain (most object names): dot-separated labels, at most 253 characters.
    fn dns1123_subdomain() -> impl Strategy<Value = String> {
        proptest::collection::vec(dns1123_label(), 1..4)
            .prop_map(|labels| labels.join("."))
            .prop_filter("at most 253 characters", |s| s.len() <= 253)
    }

    fn object_key() -> impl Strategy<Value = ObjectKey> {
        (proptest::option::of(dns1123_label()), dns1123_subdomain())
            .prop_map(|(namespace, name)| ObjectKey { namespace, name })
    }

    /// Panics with the failing key unless `mapper` round-trips every generated valid key of
    /// `res` (namespaced and cluster-scoped) without changing its scope.
    pub fn assert_round_trips(mapper: &dyn Mapper, res: &ApiResource) {
        let mut runner = TestRunner::new(Config {
            cases: 512,
            failure_persistence: None,
            ..Config::default()
        });
        let result = runner.run(&object_key(), |key| {
            let provider = mapper.to_provider(res, &key);
            prop_assert_eq!(
                provider.namespace.is_some(),
                key.namespace.is_some(),
                "the mapper changed scope: {} -> {}",
                key,
                provider
            );
            let back = mapper.to_consumer(res, &provider);
            prop_assert_eq!(back.as_ref(), Some(&key), "{} -> {} did not map back", key, provider);
            Ok(())
        });
        match result {
            Ok(()) => {}
            Err(TestError::Fail(reason, key)) => {
                panic!("mapper does not round-trip key {key} of {}: {reason}", res.plural)
            }
            Err(TestError::Abort(reason)) => panic!("mapper round-trip check aborted: {reason}"),
        }
    }
}

#[cfg(feature = "testing")]
pub use testing::assert_round_trips;

#[cfg(test)]
mod tests {
    use super::*;

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    #[test]
    fn identity_maps_both_ways_unchanged() {
        let key = ObjectKey::namespaced("team-a", "w1");
        assert_eq!(Identity.to_provider(&widgets(), &key), key);
        assert_eq!(Identity.to_consumer(&widgets(), &key), Some(key));
        let cluster = ObjectKey::cluster("c1");
        assert_eq!(Identity.to_provider(&widgets(), &cluster), cluster);
    }

    #[test]
    fn keys_display_like_kubectl() {
        assert_eq!(ObjectKey::namespaced("a", "b").to_string(), "a/b");
        assert_eq!(ObjectKey::cluster("b").to_string(), "b");
    }

    #[cfg(feature = "testing")]
    #[test]
    fn identity_round_trips() {
        assert_round_trips(&Identity, &widgets());
    }

    #[cfg(feature = "testing")]
    #[test]
    #[should_panic(expected = "does not round-trip")]
    fn a_lossy_mapper_is_caught_with_its_key() {
        struct Truncate;
        impl Mapper for Truncate {
            fn to_provider(&self, _: &ApiResource, key: &ObjectKey) -> ObjectKey {
                ObjectKey {
                    namespace: key.namespace.clone(),
                    name: key.name.chars().take(3).collect(),
                }
            }
            fn to_consumer(&self, _: &ApiResource, key: &ObjectKey) -> Option<ObjectKey> {
                Some(key.clone())
            }
        }
        assert_round_trips(&Truncate, &widgets());
    }
}
