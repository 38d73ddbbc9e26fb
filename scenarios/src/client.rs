//! `WorldClient`: how actors of the world reach a fake cluster — as a fixed user or by bearer
//! token (re-authenticated on every request, so revocation bites at once), behind a switch
//! that cuts this one client off (a network split between one actor and one cluster).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use fakeapi::{FakeClient, FakeCluster};
use kbind_cluster::{
    ApiResource, ClusterClient, DeleteParams, Discovery, DynamicObject, Error, ListParams, ObjectList, Patch,
    PatchParams, PostParams, Result, WatchParams, WatchStream,
};

/// Who the client acts as.
#[derive(Debug, Clone)]
enum Principal {
    /// A fixed user.
    User(FakeClient),
    /// Whoever the bearer token authenticates as, at the time of each request.
    Token {
        cluster: FakeCluster,
        token: String,
        /// The server's generation (bumped when the server behind the URL is rebuilt).
        server_generation: Arc<AtomicU64>,
        /// The generation this client's connection was made to.
        connected_to: Arc<AtomicU64>,
    },
}

/// A client of one world cluster with its own network switch.
#[derive(Debug, Clone)]
pub struct WorldClient {
    principal: Principal,
    cut: Arc<AtomicBool>,
}

impl WorldClient {
    /// A client acting as a fixed user.
    pub fn user(client: FakeClient, cut: Arc<AtomicBool>) -> Self {
        Self {
            principal: Principal::User(client),
            cut,
        }
    }

    /// A client authenticating with a bearer token to a server of generation `server_generation`.
    pub fn token(cluster: FakeCluster, token: &str, server_generation: Arc<AtomicU64>, cut: Arc<AtomicBool>) -> Self {
        let connected_to = Arc::new(AtomicU64::new(server_generation.load(Ordering::SeqCst)));
        Self {
            principal: Principal::Token {
                cluster,
                token: token.to_string(),
                server_generation,
                connected_to,
            },
            cut,
        }
    }

    fn resolve(&self) -> Result<FakeClient> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(Error::Transport("dial tcp: connect: connection refused".into()));
        }
        match &self.principal {
            Principal::User(client) => Ok(client.clone()),
            Principal::Token {
                cluster,
                token,
                server_generation,
                connected_to,
            } => {
                // A rebuilt server resets the connections to the old one; the client redials.
                let now = server_generation.load(Ordering::SeqCst);
                if connected_to.swap(now, Ordering::SeqCst) != now {
                    return Err(Error::Transport("read tcp: connection reset by peer".into()));
                }
                Self::authenticated(cluster, token)
            }
        }
    }

    fn authenticated(cluster: &FakeCluster, token: &str) -> Result<FakeClient> {
        {
            match cluster.authenticate(token) {
                Some(user) => Ok(cluster.client(user)),
                None => Err(Error::Unauthorized {
                    message: "Unauthorized".into(),
                }),
            }
        }
    }
}

#[async_trait]
impl ClusterClient for WorldClient {
    async fn get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Result<DynamicObject> {
        self.resolve()?.get(res, namespace, name).await
    }

    async fn list(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &ListParams,
    ) -> Result<ObjectList<DynamicObject>> {
        self.resolve()?.list(res, namespace, params).await
    }

    async fn watch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        params: &WatchParams,
        resource_version: &str,
    ) -> Result<WatchStream> {
        let stream = self.resolve()?.watch(res, namespace, params, resource_version).await?;
        // A cut ends open watches too, as a broken connection would.
        let cut = self.cut.clone();
        Ok(Box::pin(futures::StreamExt::take_while(stream, move |_| {
            let open = !cut.load(Ordering::SeqCst);
            async move { open }
        })))
    }

    async fn create(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.resolve()?.create(res, namespace, obj, params).await
    }

    async fn replace(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.resolve()?.replace(res, namespace, name, obj, params).await
    }

    async fn replace_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        obj: &DynamicObject,
        params: &PostParams,
    ) -> Result<DynamicObject> {
        self.resolve()?.replace_status(res, namespace, name, obj, params).await
    }

    async fn patch(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        self.resolve()?.patch(res, namespace, name, patch, params).await
    }

    async fn patch_status(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        patch: &Patch<serde_json::Value>,
        params: &PatchParams,
    ) -> Result<DynamicObject> {
        self.resolve()?.patch_status(res, namespace, name, patch, params).await
    }

    async fn delete(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        params: &DeleteParams,
    ) -> Result<Option<DynamicObject>> {
        self.resolve()?.delete(res, namespace, name, params).await
    }

    async fn create_subresource(
        &self,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
        subresource: &str,
        body: &serde_json::Value,
    ) -> Result<serde_json::Value> {
        self.resolve()?
            .create_subresource(res, namespace, name, subresource, body)
            .await
    }

    async fn discovery(&self) -> Result<Discovery> {
        self.resolve()?.discovery().await
    }

    async fn openapi_v3(&self, group: &str, version: &str) -> Result<serde_json::Value> {
        self.resolve()?.openapi_v3(group, version).await
    }
}
