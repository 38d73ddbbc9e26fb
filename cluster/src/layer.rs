//! Layers: a client that wraps another decides, per request, where it goes and sees what comes
//! back; every [`Layer`] is a [`ClusterClient`] without repeating the trait's methods.

use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, ObjectList, Patch, PatchParams, PostParams, WatchParams,
};

use crate::{ClusterClient, Discovery, Error, Result, WatchStream};

/// What a request does, as a layer sees it.
#[derive(Debug, Clone, Copy)]
pub enum Request<'a> {
    /// A read: get, list, discovery, OpenAPI.
    Read,
    /// A watch on `res` in `namespace` (`None`: all namespaces or cluster-scoped).
    Watch {
        /// The watched resource.
        res: &'a ApiResource,
        /// The watched namespace.
        namespace: Option<&'a str>,
    },
    /// A write: create, replace, patch, delete, subresource create.
    Write,
}

/// A wrapper around another client, written once per concern instead of once per method.
#[async_trait]
pub trait Layer: Clone + Send + Sync + 'static {
    /// The client this request goes to, or why it may not be sent.
    async fn route(&self, request: Request<'_>) -> Result<Arc<dyn ClusterClient>>;

    /// Sees every error the routed client returns, watch items included.
    fn observe(&self, _error: &Error) {}

    /// Wraps an open watch (for example to end it when a link is cut).
    fn wrap_watch(&self, stream: WatchStream) -> WatchStream {
        stream
    }

    /// Runs once a write has been answered, before the caller sees the answer (a test can hold
    /// it here: the write landed, its answer is still on the way).
    async fn write_answered(&self) {}
}

fn seen<L: Layer, T>(layer: &L, result: Result<T>) -> Result<T> {
    if let Err(e) = &result {
        layer.observe(e);
    }
    result
}

async fn written<L: Layer, T>(layer: &L, result: Result<T>) -> Result<T> {
    let result = seen(layer, result);
    layer.write_answered().await;
    result
}

#[async_trait]
impl<L: Layer> ClusterClient for L {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        let to = self.route(Request::Read).await?;
        seen(self, to.get(res, namespace, name).await)
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        let to = self.route(Request::Read).await?;
        seen(self, to.list(res, namespace, params).await)
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        let to = self.route(Request::Watch { res, namespace }).await?;
        let stream = seen(self, to.watch(res, namespace, params, resource_version).await)?;
        let layer = self.clone();
        Ok(self.wrap_watch(stream.map(move |item| seen(&layer, item)).boxed()))
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let to = self.route(Request::Write).await?;
        written(self, to.create(res, namespace, obj, params).await).await
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let to = self.route(Request::Write).await?;
        written(self, to.replace(res, namespace, name, obj, params).await).await
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let to = self.route(Request::Write).await?;
        written(self, to.replace_status(res, namespace, name, obj, params).await).await
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let to = self.route(Request::Write).await?;
        written(self, to.patch(res, namespace, name, patch, params).await).await
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        let to = self.route(Request::Write).await?;
        written(self, to.patch_status(res, namespace, name, patch, params).await).await
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        let to = self.route(Request::Write).await?;
        written(self, to.delete(res, namespace, name, params).await).await
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        let to = self.route(Request::Write).await?;
        written(
            self,
            to.create_subresource(res, namespace, name, subresource, body).await,
        )
        .await
    }

    async fn discovery(&self) -> Result<Discovery> {
        let to = self.route(Request::Read).await?;
        seen(self, to.discovery().await)
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value> {
        let to = self.route(Request::Read).await?;
        seen(self, to.openapi_v3(group, version).await)
    }
}
