//! Faults a test switches on and off: partition, latency, injected errors per verb and
//! resource, group-versions discovery cannot read, another client's write racing ours, dropped
//! watches, forced compaction and (through the cluster) replacement.

use std::collections::BTreeSet;
use std::time::Duration;

use kbind_cluster::Error;
use serde_json::Value;

/// Which error an injected fault answers with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InjectedError {
    /// 500 InternalError.
    Internal,
    /// 429 with `Retry-After` seconds.
    TooManyRequests {
        /// Seconds the client should wait.
        retry_after_seconds: u32,
    },
    /// 403 Forbidden (as if RBAC refused).
    Forbidden,
}

/// An error injected into matching requests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ErrorRule {
    /// Verb to match (`get`, `list`, `watch`, `create`, `update`, `patch`, `delete`); `None`: all.
    pub verb: Option<String>,
    /// Plural resource to match; `None`: all.
    pub resource: Option<String>,
    /// What to answer.
    pub error: InjectedError,
    /// How many requests it hits; `None`: until cleared.
    pub remaining: Option<u32>,
}

impl ErrorRule {
    /// A rule for every request of `verb` on `resource` (either may be `None` for all).
    pub fn new(verb: Option<&str>, resource: Option<&str>, error: InjectedError) -> Self {
        Self {
            verb: verb.map(str::to_string),
            resource: resource.map(str::to_string),
            error,
            remaining: None,
        }
    }

    /// Limits the rule to the next `n` matching requests.
    pub fn times(mut self, n: u32) -> Self {
        self.remaining = Some(n);
        self
    }
}

/// One request as the fault gate answered it (the request log invariant §8.9 reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRecord {
    /// Position in one process-wide order, so requests to two clusters of one world compare.
    pub seq: u64,
    /// The cluster's resourceVersion when it was answered (before any write it makes).
    pub rv: u64,
    /// When it was answered, on the cluster's clock (one pass of a controller shares an instant
    /// on a paused clock).
    pub at: jiff::Timestamp,
    /// The caller.
    pub user: String,
    /// get, list, watch, create, update, patch, delete; `discovery` and `openapi` for those reads.
    pub verb: String,
    /// `resource.group` (empty for discovery and OpenAPI).
    pub resource: String,
    /// Namespace, empty for cluster-scoped or all namespaces.
    pub namespace: String,
    /// Object name, empty for lists, watches and discovery.
    pub name: String,
    /// Why it was refused (fault, RBAC, not served), `None` when it was admitted.
    pub error: Option<String>,
}

/// Another client's write that lands just before one of ours: the window between a client's
/// read and its write, which a real server never closes.
#[derive(Debug, Clone, PartialEq)]
pub struct Interloper {
    /// The write it lands before (`create`, `update`, `patch`, `delete`); `None`: any of them.
    pub verb: Option<String>,
    /// Plural resource of the object.
    pub resource: String,
    /// Namespace of the object, `None` when cluster-scoped.
    pub namespace: Option<String>,
    /// Name of the object.
    pub name: String,
    /// What the other client puts there, replacing whatever was there (a new UID).
    pub object: Value,
}

impl Interloper {
    /// Whether it lands before a `verb` request on `resource` `namespace/name`.
    pub fn matches(&self, verb: &str, resource: &str, namespace: Option<&str>, name: Option<&str>) -> bool {
        self.verb.as_deref().is_none_or(|v| v == verb)
            && self.resource == resource
            && self.namespace.as_deref() == namespace
            && Some(self.name.as_str()) == name
    }
}

/// The faults currently switched on.
#[derive(Debug, Clone, Default)]
pub struct FaultState {
    /// Every request fails as unreachable and watches end.
    pub partitioned: bool,
    /// Nothing answers and nothing ends: a request sent meanwhile is never answered (not even
    /// once the hole is lifted: its answer was lost) and open watches deliver nothing until it
    /// is lifted; served connections stall (see `FakeCluster::black_hole`).
    pub black_holed: bool,
    /// Added before every answer, on the injectable (tokio) clock.
    pub latency: Option<Duration>,
    /// Injected errors, first match wins.
    pub errors: Vec<ErrorRule>,
    /// Group-versions (`v1`, `batch/v1`) discovery cannot read, as with an unavailable
    /// APIService: left out of discovery's resources and reported as unavailable.
    pub undiscoverable: BTreeSet<String>,
    /// Writes of other clients waiting for the request they race, each used once.
    pub interlopers: Vec<Interloper>,
}

impl FaultState {
    /// The interloper racing a `verb` request on `resource` `namespace/name`, taken out.
    pub fn take_interloper(
        &mut self,
        verb: &str,
        resource: &str,
        namespace: Option<&str>,
        name: Option<&str>,
    ) -> Option<Interloper> {
        let idx = self
            .interlopers
            .iter()
            .position(|i| i.matches(verb, resource, namespace, name))?;
        Some(self.interlopers.remove(idx))
    }

    /// The error a request gets, consuming one use of a limited rule.
    pub fn check(&mut self, cluster: &str, verb: &str, resource: &str) -> Result<(), Error> {
        if self.partitioned {
            return Err(Error::Transport(format!(
                "cluster {cluster} is unreachable (partitioned)"
            )));
        }
        let Some(idx) = self.errors.iter().position(|r| {
            r.verb.as_deref().is_none_or(|v| v == verb) && r.resource.as_deref().is_none_or(|res| res == resource)
        }) else {
            return Ok(());
        };
        let rule = &mut self.errors[idx];
        let error = rule.error.clone();
        if let Some(n) = rule.remaining.as_mut() {
            *n = n.saturating_sub(1);
            if *n == 0 {
                self.errors.remove(idx);
            }
        }
        Err(match error {
            InjectedError::Internal => Error::Server {
                code: 500,
                reason: "InternalError".into(),
                message: format!("Internal error occurred: injected fault on {verb} {resource}"),
            },
            InjectedError::TooManyRequests { retry_after_seconds } => Error::TooManyRequests {
                message: "the server has received too many requests and has asked us to try again later".into(),
                retry_after_seconds: Some(retry_after_seconds),
            },
            InjectedError::Forbidden => Error::Forbidden {
                verb: verb.to_string(),
                resource: resource.to_string(),
                message: format!("{resource} is forbidden: injected fault: cannot {verb} resource \"{resource}\""),
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
    use serde_json::json;

    use super::*;
    use crate::FakeCluster;

    fn configmaps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn configmap(who: &str) -> Value {
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c"}, "data": {"who": who}})
    }

    #[tokio::test(start_paused = true)]
    async fn a_black_hole_swallows_requests_and_silences_watches_until_restored() {
        use futures::StreamExt;
        use kbind_cluster::{WatchEvent, WatchParams};
        use std::time::Duration;
        // On the paused clock an hour passes at once when nothing else can run.
        const AN_HOUR: Duration = Duration::from_secs(3600);

        let cluster = FakeCluster::builder("t").build();
        let client = cluster.admin_client();
        let rv = cluster.resource_version().to_string();
        let mut watch = client
            .watch(&configmaps(), Some("default"), &WatchParams::default(), &rv)
            .await
            .unwrap();
        let cm: DynamicObject = serde_json::from_value(configmap("us")).unwrap();
        client
            .create(&configmaps(), Some("default"), &cm, &Default::default())
            .await
            .unwrap();

        cluster.black_hole();
        assert!(cluster.is_black_holed());
        let res = configmaps();
        let mut lost = client.get(&res, Some("default"), "c");
        assert!(
            tokio::time::timeout(AN_HOUR, &mut lost).await.is_err(),
            "a request into the hole is not answered"
        );
        assert_eq!(cluster.requests_in_black_hole(), 1);
        assert!(
            tokio::time::timeout(AN_HOUR, watch.next()).await.is_err(),
            "an open watch delivers nothing and does not end"
        );

        cluster.restore();
        assert!(!cluster.is_black_holed());
        match tokio::time::timeout(AN_HOUR, watch.next()).await {
            Ok(Some(Ok(WatchEvent::Added(obj)))) => assert_eq!(obj.metadata.name.as_deref(), Some("c")),
            other => panic!("the watch goes on where it stopped, got {other:?}"),
        }
        let live = client.get(&configmaps(), Some("default"), "c").await.unwrap();
        assert_eq!(live.data["data"]["who"], "us", "new requests are answered");
        assert!(
            tokio::time::timeout(AN_HOUR, &mut lost).await.is_err(),
            "the answer to a request sent into the hole stays lost"
        );
        drop(lost);
        assert_eq!(
            cluster.requests_in_black_hole(),
            0,
            "a caller that gave up is counted out"
        );
    }

    #[tokio::test]
    async fn an_undiscoverable_group_version_is_left_out_and_reported() {
        let cluster = FakeCluster::builder("t").build();
        let client = cluster.admin_client();
        cluster.set_undiscoverable("rbac.authorization.k8s.io/v1", true);
        let partial = client.discovery().await.unwrap();
        assert!(partial.find("rbac.authorization.k8s.io", "roles").is_none());
        assert!(
            partial.find("", "configmaps").is_some(),
            "the other groups are still there"
        );
        assert_eq!(partial.unavailable, ["rbac.authorization.k8s.io/v1"]);
        assert!(!partial.is_complete());
        cluster.set_undiscoverable("rbac.authorization.k8s.io/v1", false);
        assert!(client.discovery().await.unwrap().is_complete());
    }

    #[tokio::test]
    async fn an_interloper_lands_once_just_before_the_matching_write() {
        let cluster = FakeCluster::builder("t").build();
        let client = cluster.admin_client();
        cluster.interlope(Interloper {
            verb: Some("create".into()),
            resource: "configmaps".into(),
            namespace: Some("default".into()),
            name: "c".into(),
            object: configmap("them"),
        });
        let mine: DynamicObject = serde_json::from_value(configmap("us")).unwrap();
        let refused = client
            .create(&configmaps(), Some("default"), &mine, &Default::default())
            .await
            .unwrap_err();
        assert!(matches!(refused, Error::AlreadyExists { .. }), "{refused}");
        let live = client.get(&configmaps(), Some("default"), "c").await.unwrap();
        assert_eq!(live.data["data"]["who"], "them");
        client
            .delete(&configmaps(), Some("default"), "c", &Default::default())
            .await
            .unwrap();
        assert!(
            client
                .get_opt(&configmaps(), Some("default"), "c")
                .await
                .unwrap()
                .is_none(),
            "used once: the next write is not raced"
        );
    }
}
