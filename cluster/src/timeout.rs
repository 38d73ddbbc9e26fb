//! A deadline on every request except a watch's stream: a request on a connection whose peer
//! vanished without a FIN or RST (a dropped route, a stateful firewall or NAT that forgot the
//! flow) otherwise waits until the kernel gives up retransmitting, about 15 minutes on Linux,
//! and on HTTP/1.1 nothing else notices. The deadline runs on tokio's clock, so it holds for
//! the in-process clients of the deterministic world on a paused clock too.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, ObjectList, Patch, PatchParams, PostParams, WatchParams,
};

use crate::{ClusterClient, Discovery, Error, Result, WatchStream};

/// How long a request may take before it is given up.
///
/// Below the 60 s of the konnector's heartbeat Lease, so a renewal stuck on a dead connection
/// is abandoned and retried (on the 30 s heartbeat) while the Lease still holds; far above what
/// a healthy apiserver needs for any single request we send (a 500-object list page, a write
/// through admission webhooks, which kube-apiserver bounds at 10 s each by default); and
/// as long as the HTTP/2 ping interval, so on HTTP/2 a dead connection is usually noticed by
/// whichever of the two comes first.
pub const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// A [`ClusterClient`] that gives up any request (and the opening of a watch) not answered
/// within its timeout with [`Error::Timeout`]; an open watch's stream is never cut by it.
#[derive(Clone)]
pub struct RequestTimeout {
    inner: Arc<dyn ClusterClient>,
    timeout: Duration,
}

impl fmt::Debug for RequestTimeout {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The inner client may hold credentials; only the timeout is ours to print.
        f.debug_struct("RequestTimeout")
            .field("timeout", &self.timeout)
            .finish_non_exhaustive()
    }
}

impl RequestTimeout {
    /// Bounds every request `inner` sends by `timeout`.
    pub fn new(inner: Arc<dyn ClusterClient>, timeout: Duration) -> Self {
        Self { inner, timeout }
    }

    /// The timeout every request gets.
    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Runs `call`, or gives it up after the timeout (dropping it, which on a real connection
    /// resets the HTTP/2 stream or closes the HTTP/1.1 connection).
    async fn bounded<T>(&self, what: impl FnOnce() -> String, call: impl Future<Output = Result<T>>) -> Result<T> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(answer) => answer,
            Err(_) => Err(Error::Timeout(format!(
                "{}: no answer within {:?}",
                what(),
                self.timeout
            ))),
        }
    }
}

/// `client` with every request bounded by `timeout` (see [`RequestTimeout`]).
pub fn with_request_timeout(client: Arc<dyn ClusterClient>, timeout: Duration) -> Arc<dyn ClusterClient> {
    Arc::new(RequestTimeout::new(client, timeout))
}

/// `resource` as kube-apiserver names it in messages: `plural.group`, or `plural` for the core group.
struct Resource<'a>(&'a ApiResource);

impl fmt::Display for Resource<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0.group.as_str() {
            "" => f.write_str(&self.0.plural),
            group => write!(f, "{}.{group}", self.0.plural),
        }
    }
}

/// The object or collection a request is about: `namespace/name`, `name` or the namespace alone.
struct Target<'a>(Option<&'a str>, Option<&'a str>);

impl fmt::Display for Target<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.0, self.1) {
            (Some(ns), Some(name)) => write!(f, " {ns}/{name}"),
            (None, Some(name)) => write!(f, " {name}"),
            (Some(ns), None) => write!(f, " in {ns}"),
            (None, None) => Ok(()),
        }
    }
}

#[async_trait]
impl ClusterClient for RequestTimeout {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        let what = || format!("get {}{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.get(res, namespace, name)).await
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        let what = || format!("list {}{}", Resource(res), Target(namespace, None));
        self.bounded(what, self.inner.list(res, namespace, params)).await
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        // Only the opening (until the answer's headers): the stream that follows is long-lived
        // by design and ends by the server's timeout, a broken connection or an HTTP/2 ping.
        let what = || format!("watch {}{}", Resource(res), Target(namespace, None));
        self.bounded(what, self.inner.watch(res, namespace, params, resource_version))
            .await
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let name = obj.metadata.name.as_deref();
        let what = || format!("create {}{}", Resource(res), Target(namespace, name));
        self.bounded(what, self.inner.create(res, namespace, obj, params)).await
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let what = || format!("update {}{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.replace(res, namespace, name, obj, params))
            .await
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let what = || format!("update {}/status{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.replace_status(res, namespace, name, obj, params))
            .await
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let what = || format!("patch {}{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.patch(res, namespace, name, patch, params))
            .await
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let what = || format!("patch {}/status{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.patch_status(res, namespace, name, patch, params))
            .await
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        let what = || format!("delete {}{}", Resource(res), Target(namespace, Some(name)));
        self.bounded(what, self.inner.delete(res, namespace, name, params))
            .await
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let what = || {
            format!(
                "create {}/{subresource}{}",
                Resource(res),
                Target(namespace, Some(name))
            )
        };
        self.bounded(
            what,
            self.inner.create_subresource(res, namespace, name, subresource, body),
        )
        .await
    }

    async fn discovery(&self) -> Result<Discovery> {
        self.bounded(|| "discovery".to_string(), self.inner.discovery()).await
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value> {
        let what = || match group {
            "" => format!("get openapi/v3/api/{version}"),
            group => format!("get openapi/v3/apis/{group}/{version}"),
        };
        self.bounded(what, self.inner.openapi_v3(group, version)).await
    }

    // `identity` keeps the trait's default, which reads through `get` above and so is bounded.
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use kube::api::WatchEvent;
    use tokio::time::Instant;

    use super::*;

    const TIMEOUT: Duration = Duration::from_secs(5);

    fn configmaps() -> ApiResource {
        ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
    }

    fn widgets() -> ApiResource {
        ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        }
    }

    /// A server that never answers a request; a watch it opens at once, and its events come
    /// every [`Hole::EVENT_EVERY`], each later than the timeout.
    struct Hole;

    impl Hole {
        const EVENT_EVERY: Duration = Duration::from_secs(3 * TIMEOUT.as_secs());
    }

    async fn never<T>() -> Result<T> {
        std::future::pending().await
    }

    #[async_trait]
    impl ClusterClient for Hole {
        async fn get(&self, _: &ApiResource, _: Option<&str>, _: &str) -> Result<DynamicObject> {
            never().await
        }
        async fn list(&self, _: &ApiResource, _: Option<&str>, _: &ListParams) -> Result<ObjectList<DynamicObject>> {
            never().await
        }
        async fn watch(&self, res: &ApiResource, _: Option<&str>, _: &WatchParams, _: &str) -> Result<WatchStream> {
            let object = DynamicObject::new("w", res);
            Ok(futures::stream::unfold(object, |object| async move {
                tokio::time::sleep(Hole::EVENT_EVERY).await;
                Some((Ok(WatchEvent::Added(object.clone())), object))
            })
            .boxed())
        }
        async fn create(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            never().await
        }
        async fn replace(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            never().await
        }
        async fn replace_status(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DynamicObject,
            _: &PostParams,
        ) -> Result<DynamicObject> {
            never().await
        }
        async fn patch(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &Patch<serde_json::Value>,
            _: &PatchParams,
        ) -> Result<DynamicObject> {
            never().await
        }
        async fn patch_status(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &Patch<serde_json::Value>,
            _: &PatchParams,
        ) -> Result<DynamicObject> {
            never().await
        }
        async fn delete(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &DeleteParams,
        ) -> Result<Option<DynamicObject>> {
            never().await
        }
        async fn create_subresource(
            &self,
            _: &ApiResource,
            _: Option<&str>,
            _: &str,
            _: &str,
            _: &serde_json::Value,
        ) -> Result<serde_json::Value> {
            never().await
        }
        async fn discovery(&self) -> Result<Discovery> {
            never().await
        }
        async fn openapi_v3(&self, _: &str, _: &str) -> Result<serde_json::Value> {
            never().await
        }
    }

    /// The timeout's message, and that it came exactly after the timeout on the paused clock.
    async fn timed_out<T: fmt::Debug>(call: impl Future<Output = Result<T>>) -> String {
        let sent = Instant::now();
        let answer = call.await;
        assert_eq!(
            sent.elapsed(),
            TIMEOUT,
            "given up after the timeout, not before or later"
        );
        match answer {
            Err(Error::Timeout(message)) => message,
            other => panic!("expected a timeout, got {other:?}"),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_without_an_answer_becomes_a_timeout_that_names_it() {
        let client = with_request_timeout(Arc::new(Hole), TIMEOUT);
        let (cm, widgets) = (configmaps(), widgets());
        let obj = DynamicObject::new("c", &cm);
        let patch = Patch::Merge(serde_json::json!({}));
        assert_eq!(
            timed_out(client.get(&cm, Some("default"), "c")).await,
            "get configmaps default/c: no answer within 5s"
        );
        assert_eq!(
            Error::Timeout("x".into()).to_string(),
            "request timed out: x",
            "the seam's own wording around it"
        );
        assert_eq!(
            timed_out(client.list(&widgets, None, &ListParams::default())).await,
            "list widgets.example.org: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.create(&cm, Some("ns"), &obj, &PostParams::default())).await,
            "create configmaps ns/c: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.replace(&widgets, None, "w", &obj, &PostParams::default())).await,
            "update widgets.example.org w: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.replace_status(&cm, Some("ns"), "c", &obj, &PostParams::default())).await,
            "update configmaps/status ns/c: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.patch(&cm, Some("ns"), "c", &patch, &PatchParams::default())).await,
            "patch configmaps ns/c: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.patch_status(&cm, Some("ns"), "c", &patch, &PatchParams::default())).await,
            "patch configmaps/status ns/c: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.delete(&cm, Some("ns"), "c", &DeleteParams::default())).await,
            "delete configmaps ns/c: no answer within 5s"
        );
        let sa = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        assert_eq!(
            timed_out(client.create_subresource(&sa, Some("ns"), "s", "token", &serde_json::json!({}))).await,
            "create serviceaccounts/token ns/s: no answer within 5s"
        );
        assert_eq!(timed_out(client.discovery()).await, "discovery: no answer within 5s");
        assert_eq!(
            timed_out(client.openapi_v3("", "v1")).await,
            "get openapi/v3/api/v1: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.openapi_v3("apps", "v1")).await,
            "get openapi/v3/apis/apps/v1: no answer within 5s"
        );
        assert_eq!(
            timed_out(client.identity()).await,
            "get logicalclusters.core.kcp.io cluster: no answer within 5s",
            "the identity read goes through the bounded get"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_open_watch_outlives_the_timeout() {
        let client = RequestTimeout::new(Arc::new(Hole), TIMEOUT);
        assert_eq!(client.timeout(), TIMEOUT);
        let opened = Instant::now();
        let mut watch = client
            .watch(&configmaps(), None, &WatchParams::default(), "0")
            .await
            .expect("the watch opens at once");
        for n in 1..=3u32 {
            let event = watch.next().await.expect("the watch goes on");
            assert!(matches!(event, Ok(WatchEvent::Added(_))), "{event:?}");
            assert_eq!(
                opened.elapsed(),
                Hole::EVENT_EVERY * n,
                "each event well after the timeout"
            );
        }
        assert!(!format!("{client:?}").contains("Hole"), "Debug prints the timeout only");
    }
}
