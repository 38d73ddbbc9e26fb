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
use kbind_api::service::{Catalog, CatalogApi, CatalogCollection, CatalogExport, CatalogField};
use kbind_api::{Collection, Export, ResourceScope};
use kbind_cluster::watcher::{WatchStreamExt, WatcherConfig, watcher};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, from_dynamic};
use kube::runtime::reflector::{self, Store, store::Writer};

use super::http::Authenticated;
use super::{Gateway, GatewayError};
use crate::issuer::IssueError;

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
    let exported: BTreeMap<String, ExportedApi> = stores
        .crds
        .state()
        .iter()
        .filter_map(|crd| Some((crd.metadata.name.clone()?, exported_api(crd)?)))
        .collect();
    let exports: Vec<Export> = typed(&stores.exports);
    let collections: Vec<Collection> = typed(&stores.collections);
    Ok(Json(build(&exports, &collections, &exported)))
}

fn typed<K: serde::de::DeserializeOwned>(store: &Store<DynamicObject>) -> Vec<K> {
    store
        .state()
        .iter()
        .filter_map(|obj| from_dynamic(obj.as_ref().clone()).ok())
        .collect()
}

/// The catalog of `exports` and `collections`, given what the CRD of every exported API says.
pub(crate) fn build(
    exports: &[Export],
    collections: &[Collection],
    exported: &BTreeMap<String, ExportedApi>,
) -> Catalog {
    let mut out: Vec<CatalogExport> = exports
        .iter()
        .filter_map(|export| {
            let name = export.metadata.name.clone()?;
            let apis: Vec<CatalogApi> = export
                .spec
                .apis
                .iter()
                .map(|api| {
                    let crd = exported.get(&api.name);
                    let (resource, group) = api.name.split_once('.').unwrap_or((&api.name, ""));
                    CatalogApi {
                        name: api.name.clone(),
                        exported: crd.is_some(),
                        scope: crd.map(|c| c.scope),
                        group: group.to_string(),
                        resource: resource.to_string(),
                        kind: crd.and_then(|c| c.kind.clone()),
                        versions: crd.map(|c| c.versions.clone()).unwrap_or_default(),
                        fields: crd.map(|c| c.fields.clone()).unwrap_or_default(),
                    }
                })
                .collect();
            let missing: Vec<&str> = apis.iter().filter(|a| !a.exported).map(|a| a.name.as_str()).collect();
            let cluster_scoped: Vec<String> = apis
                .iter()
                .filter(|a| a.scope == Some(ResourceScope::Cluster))
                .map(|a| a.name.clone())
                .collect();
            let shares = !cluster_scoped.is_empty() && export.spec.cluster_scoped_sharing;
            let unshared = IssueError::unshared(export, cluster_scoped).is_some();
            let message = if !missing.is_empty() {
                Some(format!("not exported by the provider: {}", missing.join(", ")))
            } else {
                unshared.then(|| {
                    "has cluster-scoped APIs the provider does not share (spec.clusterScopedSharing)".to_string()
                })
            };
            Some(CatalogExport {
                name,
                title: export.spec.title.clone(),
                description: export.spec.description.clone(),
                icon: https_link(export.spec.icon.as_deref()),
                docs: https_link(export.spec.docs.as_deref()),
                namespaced: apis.iter().any(|a| a.scope == Some(ResourceScope::Namespaced)),
                ready: message.is_none(),
                message,
                cluster_scoped_sharing: shares.then(|| kbind_api::service::CLUSTER_SCOPED_SHARING.to_string()),
                apis,
                related_resources: export.spec.related_resources.clone(),
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

/// What the catalog shows of an exported API, read from its CRD: enough for a user to see what
/// they would bind (the UI lists it) without a second request.
pub(crate) struct ExportedApi {
    scope: ResourceScope,
    kind: Option<String>,
    versions: Vec<String>,
    fields: Vec<CatalogField>,
}

/// At most this many `spec` fields per API: a large CRD must not bloat every catalog answer.
const MAX_FIELDS: usize = 40;
/// Descriptions are cut to this many characters (the CRD has the rest).
const MAX_DESCRIPTION: usize = 160;

/// The catalog's view of an exported CRD, else `None`.
fn exported_api(crd: &DynamicObject) -> Option<ExportedApi> {
    let scope = exported_scope(crd)?;
    let versions = crd.data.pointer("/spec/versions").and_then(|v| v.as_array());
    let versions = versions.map(Vec::as_slice).unwrap_or_default();
    let served: Vec<String> = versions
        .iter()
        .filter(|v| v.get("served").and_then(|s| s.as_bool()).unwrap_or(false))
        .filter_map(|v| Some(v.get("name")?.as_str()?.to_string()))
        .collect();
    // The storage version's schema is the one every stored object satisfies.
    let schema_version = versions
        .iter()
        .find(|v| v.get("storage").and_then(|s| s.as_bool()).unwrap_or(false))
        .or_else(|| versions.first());
    let mut fields = Vec::new();
    if let Some(spec) = schema_version.and_then(|v| v.pointer("/schema/openAPIV3Schema/properties/spec")) {
        spec_fields(spec, "spec", 2, &mut fields);
    }
    Some(ExportedApi {
        scope,
        kind: crd
            .data
            .pointer("/spec/names/kind")
            .and_then(|k| k.as_str())
            .map(str::to_string),
        versions: served,
        fields,
    })
}

/// The properties of `schema` under `prefix`, `depth` levels deep (array items count as their
/// array), until `out` holds [`MAX_FIELDS`].
fn spec_fields(schema: &serde_json::Value, prefix: &str, depth: usize, out: &mut Vec<CatalogField>) {
    let Some(properties) = schema.get("properties").and_then(|p| p.as_object()) else {
        return;
    };
    let required: Vec<&str> = schema
        .get("required")
        .and_then(|r| r.as_array())
        .map(|r| r.iter().filter_map(|n| n.as_str()).collect())
        .unwrap_or_default();
    for (name, property) in properties {
        if out.len() >= MAX_FIELDS {
            return;
        }
        let path = format!("{prefix}.{name}");
        let items = property.get("items");
        out.push(CatalogField {
            path: path.clone(),
            type_: type_name(property),
            required: required.contains(&name.as_str()),
            description: property
                .get("description")
                .and_then(|d| d.as_str())
                .map(|d| shorten(d.trim())),
        });
        if depth > 1 {
            match items {
                Some(items) if items.get("properties").is_some() => {
                    spec_fields(items, &format!("{path}[]"), depth - 1, out)
                }
                _ => spec_fields(property, &path, depth - 1, out),
            }
        }
    }
}

/// `string`, `array of string`, `int-or-string`, … for a schema node.
fn type_name(schema: &serde_json::Value) -> String {
    let own = schema.get("type").and_then(|t| t.as_str());
    if schema.get("x-kubernetes-int-or-string").and_then(|b| b.as_bool()) == Some(true) {
        return "int-or-string".into();
    }
    match own {
        Some("array") => match schema.pointer("/items/type").and_then(|t| t.as_str()) {
            Some(item) => format!("array of {item}"),
            None => "array".into(),
        },
        Some(other) => other.into(),
        None => String::new(),
    }
}

fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_DESCRIPTION) {
        Some((cut, _)) => format!("{}…", text[..cut].trim_end()),
        None => text.to_string(),
    }
}

/// `link` when it is an https URL with a host, else nothing: the CRD's pattern refuses other
/// links, but an Export written before it (or on a cluster whose CRD is older) may hold a
/// `javascript:` or `data:` link, which a catalog must never hand to a browser.
fn https_link(link: Option<&str>) -> Option<String> {
    let link = link?;
    let url = url::Url::parse(link).ok()?;
    (url.scheme() == "https" && url.host().is_some() && !link.chars().any(char::is_whitespace))
        .then(|| link.to_string())
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
        return Err(IssueError::ApiNotExported(missing).into());
    }
    Ok((export, scopes))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crd(spec_schema: serde_json::Value) -> DynamicObject {
        let res = ApiResource::erase::<CustomResourceDefinition>(&());
        let mut crd = DynamicObject::new("gadgets.example.org", &res).data(serde_json::json!({"spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "gadgets", "kind": "Gadget"},
            "versions": [
                {"name": "v1beta1", "served": false, "storage": false},
                {"name": "v1", "served": true, "storage": true,
                 "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": spec_schema}}}},
            ],
        }}));
        crd.metadata.labels = Some([(label::EXPORTED.to_string(), TRUE.to_string())].into());
        crd
    }

    #[test]
    fn an_exported_api_shows_its_kind_served_versions_and_spec_fields() {
        let long = "x".repeat(300);
        let api = exported_api(&crd(serde_json::json!({"type": "object", "required": ["size"], "properties": {
            "size": {"type": "integer", "description": " How big. "},
            "tls": {"type": "object", "properties": {"secretName": {"type": "string", "description": long}}},
            "ports": {"type": "array", "items": {"type": "object", "properties": {"port": {"x-kubernetes-int-or-string": true}}}},
        }})))
        .expect("an exported CRD");
        assert_eq!(api.kind.as_deref(), Some("Gadget"));
        assert_eq!(api.versions, ["v1"]);
        let fields: Vec<(&str, &str, bool)> = api
            .fields
            .iter()
            .map(|f| (f.path.as_str(), f.type_.as_str(), f.required))
            .collect();
        assert_eq!(
            fields,
            [
                ("spec.ports", "array of object", false),
                ("spec.ports[].port", "int-or-string", false),
                ("spec.size", "integer", true),
                ("spec.tls", "object", false),
                ("spec.tls.secretName", "string", false),
            ]
        );
        assert_eq!(api.fields[2].description.as_deref(), Some("How big."));
        let cut = api.fields[4].description.as_deref().expect("a description");
        assert_eq!(
            cut.chars().count(),
            MAX_DESCRIPTION + 1,
            "shortened with an ellipsis: {cut}"
        );
    }

    #[test]
    fn a_huge_spec_is_cut_at_max_fields_and_an_unexported_crd_is_none() {
        let properties: serde_json::Map<String, serde_json::Value> = (0..100)
            .map(|i| (format!("f{i:03}"), serde_json::json!({"type": "string"})))
            .collect();
        let big = crd(serde_json::json!({"type": "object", "properties": properties}));
        assert_eq!(exported_api(&big).expect("exported").fields.len(), MAX_FIELDS);
        let mut unlabelled = big;
        unlabelled.metadata.labels = None;
        assert!(exported_api(&unlabelled).is_none());
    }

    #[test]
    fn only_https_links_reach_the_catalog() {
        for good in ["https://docs.example.org/widgets", "https://cdn.example.org/w.svg?v=2"] {
            assert_eq!(https_link(Some(good)).as_deref(), Some(good));
        }
        for bad in [
            "javascript:alert(document.cookie)",
            "JAVASCRIPT:alert(1)",
            "data:text/html,<script>alert(1)</script>",
            "http://docs.example.org",
            "https://docs.example.org/a b",
            "//docs.example.org",
            "",
        ] {
            assert_eq!(https_link(Some(bad)), None, "{bad:?} must be dropped");
        }
        assert_eq!(https_link(None), None);
    }
}
