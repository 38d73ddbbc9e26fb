//! The `ClusterClient` trait: dynamic, object-safe access to one cluster by GVR.

use async_trait::async_trait;
use futures::stream::BoxStream;
use kube::api::{
    ApiResource, DeleteParams, DynamicObject, ListParams, ObjectList, Patch, PatchParams, PostParams, WatchEvent,
    WatchParams,
};
use serde::{Serialize, de::DeserializeOwned};

use crate::{ClusterIdentity, Discovery, Error, Result};

/// A stream of watch events; it ends when the server closes the watch.
pub type WatchStream = BoxStream<'static, Result<WatchEvent<DynamicObject>>>;

/// The narrow seam between kbind's engine and a cluster.
///
/// `namespace` is `None` for cluster-scoped resources and for all-namespace lists and watches.
/// Implementations: [`crate::KubeClusterClient`] over the `kube` crate, and fakeapi's
/// in-process client.
#[async_trait]
pub trait ClusterClient: Send + Sync {
    /// Reads one object.
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject>;

    /// Lists objects (selectors, resourceVersion semantics, limit/continue as in `params`).
    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>>;

    /// Watches objects changed after `resource_version` (`"0"` or `""`: from "any" version).
    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream>;

    /// Creates an object.
    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject>;

    /// Replaces an object; a set `metadata.resourceVersion` is a precondition.
    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject>;

    /// Replaces an object's status subresource.
    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject>;

    /// Patches an object (merge, JSON, strategic or server-side apply).
    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject>;

    /// Patches an object's status subresource.
    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject>;

    /// Deletes an object: `Some(obj)` while finalizers keep it, `None` once it is gone.
    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>>;

    /// Creates on a subresource (e.g. `serviceaccounts/token`) and returns the server's answer.
    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value>;

    /// What the cluster serves.
    async fn discovery(&self) -> Result<Discovery>;

    /// The OpenAPI v3 document of one group-version (`/openapi/v3/apis/<g>/<v>`, or `api/v1`).
    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value>;

    /// The cluster's identity (contract §2): LogicalCluster `cluster`, else `kube-system`.
    async fn identity(&self) -> Result<ClusterIdentity> {
        crate::identity::read_identity(self).await
    }
}

/// Typed conveniences over [`ClusterClient`].
#[async_trait]
pub trait ClusterClientExt: ClusterClient {
    /// Reads one object, `None` on 404.
    async fn get_opt(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<Option<DynamicObject>> {
        match self.get(res, namespace, name).await {
            Ok(obj) => Ok(Some(obj)),
            Err(Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Reads one object as a typed resource.
    async fn get_typed<K>(&self, namespace: Option<&str>, name: &str) -> Result<K>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned + Send,
    {
        let obj = self.get(&ApiResource::erase::<K>(&()), namespace, name).await?;
        from_dynamic(obj)
    }

    /// Reads one object as a typed resource, `None` on 404.
    async fn get_typed_opt<K>(&self, namespace: Option<&str>, name: &str) -> Result<Option<K>>
    where
        K: kube::Resource<DynamicType = ()> + DeserializeOwned + Send,
    {
        match self.get_opt(&ApiResource::erase::<K>(&()), namespace, name).await? {
            Some(obj) => from_dynamic(obj).map(Some),
            None => Ok(None),
        }
    }

    /// Creates a typed object.
    async fn create_typed<K>(&self, obj: &K) -> Result<K>
    where
        K: kube::Resource<DynamicType = ()> + Serialize + DeserializeOwned + Send + Sync,
    {
        let res = ApiResource::erase::<K>(&());
        let dynamic = to_dynamic(obj)?;
        let ns = obj.meta().namespace.clone();
        let created = self
            .create(&res, ns.as_deref(), &dynamic, &PostParams::default())
            .await?;
        from_dynamic(created)
    }

    /// Server-side applies `body` as `manager`.
    async fn apply(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        body: serde_json::Value,
        manager: &str,
        force: bool,
    ) -> Result<DynamicObject> {
        let mut params = PatchParams::apply(manager);
        params.force = force;
        self.patch(res, namespace, name, &Patch::Apply(body), &params).await
    }
}

impl<T: ClusterClient + ?Sized> ClusterClientExt for T {}

/// Converts a dynamic object to a typed one.
pub fn from_dynamic<K: DeserializeOwned>(obj: DynamicObject) -> Result<K> {
    let value = serde_json::to_value(obj).map_err(|e| Error::Decode(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| Error::Decode(e.to_string()))
}

/// Converts a typed object to a dynamic one.
pub fn to_dynamic<K: Serialize>(obj: &K) -> Result<DynamicObject> {
    let value = serde_json::to_value(obj).map_err(|e| Error::Decode(e.to_string()))?;
    serde_json::from_value(value).map_err(|e| Error::Decode(e.to_string()))
}
