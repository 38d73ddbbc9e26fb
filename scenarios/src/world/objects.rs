//! Objects on the world's clusters, read and written as their admins.

use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use serde_json::Value;

use super::{World, object};

impl World {
    /// Installs `crd` on provider `name` (as its admin) and waits until it is served.
    pub async fn install_provider_crd(&mut self, name: &str, crd: Value) {
        let crd_name = crd
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let res = ApiResource::erase::<
            k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
        >(&());
        self.provider(name)
            .admin_client()
            .create(&res, None, &object(crd), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("installing CRD {crd_name} on {name}: {e}"));
        self.note(format!("installed CRD {crd_name} on {name}"));
    }

    /// Reads one object on the consumer (as its admin); `None` when absent.
    pub async fn consumer_get(&self, res: &ApiResource, namespace: Option<&str>, name: &str) -> Option<DynamicObject> {
        self.consumer
            .admin_client()
            .get_opt(res, namespace, name)
            .await
            .ok()
            .flatten()
    }

    /// Reads one object on provider `provider` (as its admin); `None` when absent.
    pub async fn provider_get(
        &self,
        provider: &str,
        res: &ApiResource,
        namespace: Option<&str>,
        name: &str,
    ) -> Option<DynamicObject> {
        self.provider(provider)
            .admin_client()
            .get_opt(res, namespace, name)
            .await
            .ok()
            .flatten()
    }
}
