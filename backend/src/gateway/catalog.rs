//! The catalog: Exports and Collections with each API's export state, served from reflector
//! stores so a catalog read makes no provider request; and the direct, authoritative API check
//! bind and pickup use.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use futures::{FutureExt, StreamExt};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{TRUE, label};
use kbind_api::service::{Catalog, CatalogApi, CatalogCollection, CatalogExport};
use kbind_api::{Collection, Export, ResourceScope};
use kbind_cluster::watcher::{WatchStreamExt, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, from_dynamic};
use kube::runtime::reflector::{self, Store, store::Writer};

use super::http::Authenticated;
use super::{Gateway, GatewayError};

/// How long a catalog read waits for the first list after start-up.
const FIRST_LIST_WAIT: Duration = Duration::from_secs(10);

/// The catalog's caches; the watches stop when the last clone of the gateway goes.
pub(crate) struct Stores {
    exports: Store<DynamicObject>,
    collections: Store<DynamicObject>,
    crds: Store<DynamicObject>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Drop for Stores {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

impl Stores {
    /// Starts watching Exports, Collections and the exported CRDs.
    pub(crate) fn start(client: Arc<dyn ClusterClient>) -> Self {
        let mut tasks = Vec::new();
        let mut reflect = |res: ApiResource, config: WatcherConfig| {
            let writer: Writer<DynamicObject> = Writer::new(res.clone());
            let store = writer.as_reader();
            let events = watcher(client.clone(), res, None, config);
            tasks.push(tokio::spawn(
                reflector::reflector(writer, events)
                    .default_backoff()
                    .for_each(|event| async move {
                        if let Err(e) = event {
                            tracing::warn!(error = %e, "catalog watch failed; retrying");
                        }
                    }),
            ));
            store
        };
        let exports = reflect(ApiResource::erase::<Export>(&()), WatcherConfig::default());
        let collections = reflect(ApiResource::erase::<Collection>(&()), WatcherConfig::default());
        let crds = reflect(
            ApiResource::erase::<CustomResourceDefinition>(&()),
            WatcherConfig::default().labels(&format!("{}={TRUE}", label::EXPORTED)),
        );
        Stores {
            exports,
            collections,
            crds,
            tasks,
        }
    }

    /// Whether every store has its first list.
    pub(crate) fn is_ready(&self) -> bool {
        [&self.exports, &self.collections, &self.crds]
            .iter()
            .all(|store| matches!(store.wait_until_ready().now_or_never(), Some(Ok(()))))
    }

    async fn wait_ready(&self) -> Result<(), GatewayError> {
        let all = async {
            for store in [&self.exports, &self.collections, &self.crds] {
                store.wait_until_ready().await.ok();
            }
        };
        tokio::time::timeout(FIRST_LIST_WAIT, all).await.map_err(|_| {
            GatewayError::NotReady("the catalog is still loading from the provider; try again shortly".into())
        })
    }
}

/// `GET /api/v1/catalog`.
pub(crate) async fn catalog(
    State(state): State<Gateway>,
    Authenticated(_caller): Authenticated,
) -> Result<Json<Catalog>, GatewayError> {
    let stores = &state.inner.catalog;
    stores.wait_ready().await?;
    let scopes: BTreeMap<String, ResourceScope> = stores
        .crds
        .state()
        .iter()
        .filter_map(|crd| Some((crd.metadata.name.clone()?, exported_scope(crd)?)))
        .collect();
    let exports: Vec<Export> = typed(&stores.exports);
    let collections: Vec<Collection> = typed(&stores.collections);
    Ok(Json(build(&exports, &collections, &scopes)))
}

fn typed<K: serde::de::DeserializeOwned>(store: &Store<DynamicObject>) -> Vec<K> {
    store
        .state()
        .iter()
        .filter_map(|obj| from_dynamic(obj.as_ref().clone()).ok())
        .collect()
}

/// The catalog of `exports` and `collections`, given the scope of every exported API.
pub(crate) fn build(
    exports: &[Export],
    collections: &[Collection],
    scopes: &BTreeMap<String, ResourceScope>,
) -> Catalog {
    let mut out: Vec<CatalogExport> = exports
        .iter()
        .filter_map(|export| {
            let name = export.metadata.name.clone()?;
            let apis: Vec<CatalogApi> = export
                .spec
                .apis
                .iter()
                .map(|api| CatalogApi {
                    name: api.name.clone(),
                    exported: scopes.contains_key(&api.name),
                    scope: scopes.get(&api.name).copied(),
                })
                .collect();
            let missing: Vec<&str> = apis.iter().filter(|a| !a.exported).map(|a| a.name.as_str()).collect();
            Some(CatalogExport {
                name,
                title: export.spec.title.clone(),
                description: export.spec.description.clone(),
                icon: export.spec.icon.clone(),
                docs: export.spec.docs.clone(),
                namespaced: apis.iter().any(|a| a.scope == Some(ResourceScope::Namespaced)),
                ready: missing.is_empty(),
                message: (!missing.is_empty()).then(|| format!("not exported by the provider: {}", missing.join(", "))),
                apis,
            })
        })
        .collect();
    out.sort_by(|a, b| a.name.cmp(&b.name));
    let mut groups: Vec<CatalogCollection> = collections
        .iter()
        .filter_map(|collection| {
            Some(CatalogCollection {
                name: collection.metadata.name.clone()?,
                title: collection.spec.title.clone(),
                description: collection.spec.description.clone(),
                exports: collection
                    .spec
                    .exports
                    .iter()
                    .filter(|r| out.iter().any(|e| e.name == r.name))
                    .map(|r| r.name.clone())
                    .collect(),
            })
        })
        .collect();
    groups.sort_by(|a, b| a.name.cmp(&b.name));
    Catalog {
        collections: groups,
        exports: out,
    }
}

/// The scope of a CRD that is exported (labelled `core.kbind.io/exported=true`), else `None`.
fn exported_scope(crd: &DynamicObject) -> Option<ResourceScope> {
    let labelled = crd
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::EXPORTED))
        .is_some_and(|v| v == TRUE);
    if !labelled {
        return None;
    }
    match crd.data.pointer("/spec/scope").and_then(|v| v.as_str()) {
        Some("Namespaced") => Some(ResourceScope::Namespaced),
        Some("Cluster") => Some(ResourceScope::Cluster),
        _ => None,
    }
}

/// An Export read from the provider (not the cache: a bind right after the Export was created
/// must see it), with the scope of each of its APIs; an API not exported fails the whole call.
pub(crate) async fn export_with_scopes(
    provider: &dyn ClusterClient,
    name: &str,
) -> Result<(Export, Vec<(String, ResourceScope)>), GatewayError> {
    let export: Export = provider
        .get_typed_opt(None, name)
        .await?
        .ok_or_else(|| GatewayError::ExportNotFound(name.to_string()))?;
    let crd_res = ApiResource::erase::<CustomResourceDefinition>(&());
    let mut scopes = Vec::new();
    let mut missing = Vec::new();
    for api in &export.spec.apis {
        let crd = provider.get_opt(&crd_res, None, &api.name).await?;
        match crd.as_ref().and_then(exported_scope) {
            Some(scope) => scopes.push((api.name.clone(), scope)),
            None => missing.push(api.name.clone()),
        }
    }
    if !missing.is_empty() {
        return Err(crate::issuer::IssueError::ApiNotExported(missing).into());
    }
    Ok((export, scopes))
}
