//! The export boundary (contract §2): labelled, readable CRDs on a plain provider; everything
//! outside the built-in groups on a kcp-like one. `source: Auto` never widens it.

use std::collections::BTreeMap;

use kbind_api::consts::{TRUE, is_builtin_group, label};
use kbind_api::{ExportedApi, ResourceScope, SchemaSource};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Error, ListParams, Result};
use serde_json::Value;

/// What discovery found on a provider.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Discovered {
    /// Exported APIs, sorted by name.
    pub apis: Vec<ExportedApi>,
    /// The schema source in use after resolving `Auto`.
    pub source: SchemaSource,
}

/// The CustomResourceDefinition resource.
pub(crate) fn crd_resource() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

/// Discovers what `provider` exports; `kcp_like` when its identity is a LogicalCluster.
pub(crate) async fn discover(
    provider: &dyn ClusterClient,
    kcp_like: bool,
    requested: SchemaSource,
) -> Result<Discovered> {
    let apis = if kcp_like {
        kcp_exports(provider).await?
    } else {
        labelled_crd_exports(provider).await?
    };
    Ok(Discovered {
        apis,
        source: resolve_source(kcp_like, requested),
    })
}

/// The schema source in use for `requested` (`Auto`: OpenAPI on a kcp-like provider, else CRD).
pub(crate) fn resolve_source(kcp_like: bool, requested: SchemaSource) -> SchemaSource {
    match requested {
        SchemaSource::Auto if kcp_like => SchemaSource::OpenApi,
        SchemaSource::Auto => SchemaSource::Crd,
        other => other,
    }
}

/// Everything discoverable outside the built-in groups.
async fn kcp_exports(provider: &dyn ClusterClient) -> Result<Vec<ExportedApi>> {
    let discovery = provider.discovery().await?;
    let mut apis: BTreeMap<String, ExportedApi> = BTreeMap::new();
    for res in discovery.resources.iter().filter(|r| !is_builtin_group(&r.group)) {
        let name = format!("{}.{}", res.plural, res.group);
        let api = apis.entry(name.clone()).or_insert_with(|| ExportedApi {
            name,
            group: res.group.clone(),
            resource: res.plural.clone(),
            scope: if res.namespaced {
                ResourceScope::Namespaced
            } else {
                ResourceScope::Cluster
            },
            versions: Vec::new(),
        });
        if !api.versions.contains(&res.version) {
            api.versions.push(res.version.clone());
        }
    }
    Ok(apis.into_values().collect())
}

/// CRDs labelled `core.kbind.io/exported=true` that the credentials can read. When listing
/// CRDs is forbidden (an issuer grants `get` on the exported CRDs by name), each discovered
/// non-built-in resource's CRD is read by name instead.
async fn labelled_crd_exports(provider: &dyn ClusterClient) -> Result<Vec<ExportedApi>> {
    let selector = format!("{}={TRUE}", label::EXPORTED);
    let params = ListParams::default().labels(&selector);
    let crds = match provider.list(&crd_resource(), None, &params).await {
        Ok(list) => list.items,
        Err(forbidden @ Error::Forbidden { .. }) => crds_by_name(provider, forbidden).await?,
        Err(e) => return Err(e),
    };
    Ok(exported_apis(&crds))
}

/// The exported APIs among `crds` (labelled, well-formed, with a served version), sorted.
pub(crate) fn exported_apis(crds: &[DynamicObject]) -> Vec<ExportedApi> {
    let mut apis: Vec<ExportedApi> = crds
        .iter()
        .filter(|c| is_exported(c))
        .filter_map(exported_api)
        .collect();
    apis.sort_by(|a, b| a.name.cmp(&b.name));
    apis.dedup_by(|a, b| a.name == b.name);
    apis
}

/// Reads the CRD of each discovered non-built-in resource; `list_refusal` is returned when
/// every read was refused too (the credentials can read no CRD at all).
async fn crds_by_name(provider: &dyn ClusterClient, list_refusal: Error) -> Result<Vec<DynamicObject>> {
    let discovery = provider.discovery().await?;
    let mut names: Vec<String> = discovery
        .resources
        .iter()
        .filter(|r| !is_builtin_group(&r.group))
        .map(|r| format!("{}.{}", r.plural, r.group))
        .collect();
    names.sort();
    names.dedup();
    let (mut crds, mut refused) = (Vec::new(), 0usize);
    for name in &names {
        match provider.get(&crd_resource(), None, name).await {
            Ok(crd) => crds.push(crd),
            Err(Error::Forbidden { .. }) => refused += 1,
            Err(Error::NotFound { .. }) => {}
            Err(e) => return Err(e),
        }
    }
    if crds.is_empty() && refused > 0 {
        return Err(list_refusal);
    }
    Ok(crds)
}

pub(crate) fn is_exported(crd: &DynamicObject) -> bool {
    crd.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(label::EXPORTED))
        .is_some_and(|v| v == TRUE)
}

/// The exported API a CRD describes (served versions only); `None` for a malformed CRD.
pub(crate) fn exported_api(crd: &DynamicObject) -> Option<ExportedApi> {
    let spec = crd.data.get("spec")?;
    let group = spec.get("group")?.as_str()?.to_string();
    let resource = spec.get("names")?.get("plural")?.as_str()?.to_string();
    let scope = match spec.get("scope").and_then(Value::as_str) {
        Some("Cluster") => ResourceScope::Cluster,
        _ => ResourceScope::Namespaced,
    };
    let versions: Vec<String> = spec
        .get("versions")?
        .as_array()?
        .iter()
        .filter(|v| v.get("served").and_then(Value::as_bool).unwrap_or(false))
        .filter_map(|v| v.get("name").and_then(Value::as_str).map(str::to_string))
        .collect();
    if versions.is_empty() {
        return None;
    }
    Some(ExportedApi {
        name: format!("{resource}.{group}"),
        group,
        resource,
        scope,
        versions,
    })
}
