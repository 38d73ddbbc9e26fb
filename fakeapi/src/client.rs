//! The in-process `ClusterClient`: the engine's seam straight onto a [`FakeCluster`].

use async_trait::async_trait;
use futures::StreamExt;
use kbind_cluster::{
    ApiResource, ClusterClient, DeleteParams, Discovery, DynamicObject, Error, ListParams, ObjectList, Patch,
    PatchParams, PostParams, Result, WatchEvent, WatchParams, WatchStream,
};
use serde_json::Value;

use crate::cluster::FakeCluster;
use crate::ops::{Caller, Subresource};
use crate::rbac::UserInfo;

/// A client of one fake cluster acting as one user.
#[derive(Debug, Clone)]
pub struct FakeClient {
    cluster: FakeCluster,
    caller: Caller,
}

impl FakeCluster {
    /// A client acting as `user`.
    pub fn client(&self, user: UserInfo) -> FakeClient {
        FakeClient {
            cluster: self.clone(),
            caller: Caller::new(user, "kbind-fake-client"),
        }
    }

    /// A client acting as the cluster administrator.
    pub fn admin_client(&self) -> FakeClient {
        self.client(UserInfo::admin())
    }
}

impl FakeClient {
    /// The cluster behind this client.
    pub fn cluster(&self) -> &FakeCluster {
        &self.cluster
    }

    /// The same client with another default field manager (as another User-Agent would give).
    pub fn with_user_agent(mut self, user_agent: &str) -> Self {
        self.caller = Caller::new(self.caller.user.clone(), user_agent);
        self
    }
}

fn to_object(value: Value) -> Result<DynamicObject> {
    serde_json::from_value(value).map_err(|e| Error::Decode(e.to_string()))
}

fn to_value(obj: &DynamicObject) -> Result<Value> {
    serde_json::to_value(obj).map_err(|e| Error::Decode(e.to_string()))
}

#[async_trait]
impl ClusterClient for FakeClient {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        to_object(self.cluster.get(&self.caller, res, namespace, name).await?)
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        let list = self.cluster.list(&self.caller, res, namespace, params).await?;
        serde_json::from_value(list).map_err(|e| Error::Decode(e.to_string()))
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        let stream = self
            .cluster
            .watch(&self.caller, res, namespace, params, resource_version)
            .await?;
        Ok(stream
            .map(|item| {
                item.and_then(|ev| {
                    Ok(match ev {
                        WatchEvent::Added(o) => WatchEvent::Added(to_object(o)?),
                        WatchEvent::Modified(o) => WatchEvent::Modified(to_object(o)?),
                        WatchEvent::Deleted(o) => WatchEvent::Deleted(to_object(o)?),
                        WatchEvent::Bookmark(b) => WatchEvent::Bookmark(b),
                        WatchEvent::Error(s) => return Err(Error::from_status(&s)),
                    })
                })
            })
            .boxed())
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        to_object(
            self.cluster
                .create(&self.caller, res, namespace, to_value(obj)?, params)
                .await?,
        )
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let body = to_value(obj)?;
        to_object(
            self.cluster
                .update(&self.caller, res, namespace, name, body, params, Subresource::Main)
                .await?,
        )
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        let body = to_value(obj)?;
        to_object(
            self.cluster
                .update(&self.caller, res, namespace, name, body, params, Subresource::Status)
                .await?,
        )
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        to_object(
            self.cluster
                .patch(&self.caller, res, namespace, name, patch, params, Subresource::Main)
                .await?,
        )
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        to_object(
            self.cluster
                .patch(&self.caller, res, namespace, name, patch, params, Subresource::Status)
                .await?,
        )
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        self.cluster
            .delete(&self.caller, res, namespace, name, params)
            .await?
            .map(to_object)
            .transpose()
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &Value,
    ) -> Result<Value> {
        self.cluster
            .create_subresource(&self.caller, res, namespace, name, subresource, body)
            .await
    }

    async fn discovery(&self) -> Result<Discovery> {
        self.cluster.discovery(&self.caller).await
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<Value> {
        self.cluster.openapi_v3(&self.caller, group, version).await
    }
}
