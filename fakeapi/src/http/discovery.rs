//! Discovery documents: `/api`, `/apis`, `/apis/<g>`, `/api/v1`, `/apis/<g>/<v>` (legacy and
//! aggregated `apidiscovery.k8s.io` v2/v2beta1 forms) and `/version`.

use kbind_cluster::{DiscoveredResource, Discovery, Error};
use serde_json::{Value, json};

/// The group-version, kind and verbs of a subresource as discovery reports them.
struct SubresourceInfo {
    group: String,
    version: String,
    kind: String,
    verbs: &'static [&'static str],
}

fn subresource_info(parent: &DiscoveredResource, sub: &str) -> SubresourceInfo {
    let own = |verbs| SubresourceInfo {
        group: parent.group.clone(),
        version: parent.version.clone(),
        kind: parent.kind.clone(),
        verbs,
    };
    match sub {
        "scale" => SubresourceInfo {
            group: "autoscaling".into(),
            version: "v1".into(),
            kind: "Scale".into(),
            verbs: &["get", "patch", "update"],
        },
        "token" => SubresourceInfo {
            group: "authentication.k8s.io".into(),
            version: "v1".into(),
            kind: "TokenRequest".into(),
            verbs: &["create"],
        },
        "finalize" => own(&["update"]),
        _ => own(&["get", "patch", "update"]),
    }
}

/// `/version`: what a kube-apiserver 1.35 reports.
pub(crate) fn version() -> Value {
    json!({
        "major": "1",
        "minor": "35",
        "emulationMajor": "1",
        "emulationMinor": "35",
        "minCompatibilityMajor": "1",
        "minCompatibilityMinor": "34",
        "gitVersion": "v1.35.0+fakeapi",
        "gitCommit": "0000000000000000000000000000000000000000",
        "gitTreeState": "clean",
        "buildDate": "2025-12-17T00:00:00Z",
        "goVersion": "go1.25.5",
        "compiler": "gc",
        "platform": "linux/amd64",
    })
}

/// `/api` in the legacy form (`APIVersions`).
pub(crate) fn core_versions(discovery: &Discovery, server_address: &str) -> Value {
    let versions: Vec<&String> = discovery
        .groups
        .iter()
        .filter(|g| g.name.is_empty())
        .flat_map(|g| &g.versions)
        .collect();
    json!({
        "kind": "APIVersions",
        "versions": versions,
        "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": server_address}],
    })
}

/// `/apis` in the legacy form (`APIGroupList`).
pub(crate) fn group_list(discovery: &Discovery) -> Value {
    let groups: Vec<Value> = discovery
        .groups
        .iter()
        .filter(|g| !g.name.is_empty())
        .map(|g| group_value(&g.name, &g.versions, &g.preferred_version))
        .collect();
    json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": groups})
}

/// `/apis/<group>` (`APIGroup`).
pub(crate) fn group(discovery: &Discovery, name: &str) -> Result<Value, Error> {
    let group = discovery
        .groups
        .iter()
        .find(|g| g.name == name && !name.is_empty())
        .ok_or_else(|| Error::NotFound {
            message: super::errors::UNKNOWN_RESOURCE.into(),
        })?;
    let mut value = group_value(&group.name, &group.versions, &group.preferred_version);
    value["kind"] = json!("APIGroup");
    value["apiVersion"] = json!("v1");
    Ok(value)
}

fn group_value(name: &str, versions: &[String], preferred: &str) -> Value {
    let gv = |v: &str| json!({"groupVersion": format!("{name}/{v}"), "version": v});
    json!({
        "name": name,
        "versions": versions.iter().map(|v| gv(v)).collect::<Vec<_>>(),
        "preferredVersion": gv(preferred),
    })
}

/// `/api/v1` or `/apis/<g>/<v>` (`APIResourceList`): each resource, then `<plural>/<sub>` entries.
pub(crate) fn resource_list(discovery: &Discovery, group: &str, version: &str) -> Result<Value, Error> {
    let resources: Vec<&DiscoveredResource> = discovery
        .resources
        .iter()
        .filter(|r| r.group == group && r.version == version)
        .collect();
    if resources.is_empty() {
        return Err(Error::NotFound {
            message: super::errors::UNKNOWN_RESOURCE.into(),
        });
    }
    let mut entries: Vec<Value> = Vec::new();
    for r in resources {
        let mut entry = json!({
            "name": r.plural,
            "singularName": r.singular,
            "namespaced": r.namespaced,
            "kind": r.kind,
            "verbs": r.verbs,
        });
        if !r.short_names.is_empty() {
            entry["shortNames"] = json!(r.short_names);
        }
        if !r.categories.is_empty() {
            entry["categories"] = json!(r.categories);
        }
        entries.push(entry);
        for sub in &r.subresources {
            let info = subresource_info(r, sub);
            let mut entry = json!({
                "name": format!("{}/{sub}", r.plural),
                "singularName": "",
                "namespaced": r.namespaced,
                "kind": info.kind,
                "verbs": info.verbs,
            });
            if (info.group.as_str(), info.version.as_str()) != (r.group.as_str(), r.version.as_str()) {
                entry["group"] = json!(info.group);
                entry["version"] = json!(info.version);
            }
            entries.push(entry);
        }
    }
    entries.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let group_version = if group.is_empty() {
        version.to_string()
    } else {
        format!("{group}/{version}")
    };
    Ok(json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": group_version,
        "resources": entries,
    }))
}

/// `/api` (`core = true`) or `/apis` as an aggregated `APIGroupDiscoveryList` of `version`.
pub(crate) fn aggregated(discovery: &Discovery, core: bool, version: &str) -> Value {
    let items: Vec<Value> = discovery
        .groups
        .iter()
        .filter(|g| g.name.is_empty() == core)
        .map(|g| {
            let mut metadata = json!({"creationTimestamp": null});
            if !g.name.is_empty() {
                metadata["name"] = json!(g.name);
            }
            let versions: Vec<Value> = g
                .versions
                .iter()
                .map(|v| {
                    let mut resources: Vec<&DiscoveredResource> = discovery
                        .resources
                        .iter()
                        .filter(|r| r.group == g.name && &r.version == v)
                        .collect();
                    resources.sort_by(|a, b| a.plural.cmp(&b.plural));
                    json!({
                        "version": v,
                        "resources": resources.into_iter().map(aggregated_resource).collect::<Vec<_>>(),
                        "freshness": "Current",
                    })
                })
                .collect();
            json!({"metadata": metadata, "versions": versions})
        })
        .collect();
    json!({
        "kind": "APIGroupDiscoveryList",
        "apiVersion": format!("apidiscovery.k8s.io/{version}"),
        "metadata": {},
        "items": items,
    })
}

fn aggregated_resource(r: &DiscoveredResource) -> Value {
    let scope = if r.namespaced { "Namespaced" } else { "Cluster" };
    let subresources: Vec<Value> = r
        .subresources
        .iter()
        .map(|sub| {
            let info = subresource_info(r, sub);
            json!({
                "subresource": sub,
                "responseKind": {"group": info.group, "version": info.version, "kind": info.kind},
                "verbs": info.verbs,
            })
        })
        .collect();
    let mut entry = json!({
        "resource": r.plural,
        "responseKind": {"group": r.group, "version": r.version, "kind": r.kind},
        "scope": scope,
        "singularResource": r.singular,
        "verbs": r.verbs,
    });
    if !r.short_names.is_empty() {
        entry["shortNames"] = json!(r.short_names);
    }
    if !r.categories.is_empty() {
        entry["categories"] = json!(r.categories);
    }
    if !subresources.is_empty() {
        entry["subresources"] = json!(subresources);
    }
    entry
}

/// The content type of an aggregated discovery answer of `version`.
pub(crate) fn aggregated_content_type(version: &str) -> String {
    format!("application/json;g=apidiscovery.k8s.io;v={version};as=APIGroupDiscoveryList")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::Registry;

    fn discovery() -> Discovery {
        Registry::new(false).discovery()
    }

    #[test]
    fn resource_lists_carry_subresources_as_slash_entries() {
        let list = resource_list(&discovery(), "apps", "v1").unwrap();
        let names: Vec<&str> = list["resources"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["name"].as_str().unwrap())
            .collect();
        assert_eq!(names, ["deployments", "deployments/scale", "deployments/status"]);
        let scale = &list["resources"][1];
        assert_eq!(scale["kind"], "Scale");
        assert_eq!(scale["group"], "autoscaling");
        assert_eq!(list["resources"][0]["shortNames"], json!(["deploy"]));
    }

    #[test]
    fn unknown_group_versions_are_not_found() {
        assert_eq!(resource_list(&discovery(), "nope.io", "v1").unwrap_err().code(), 404);
        assert_eq!(group(&discovery(), "nope.io").unwrap_err().code(), 404);
    }

    #[test]
    fn aggregated_core_group_has_no_name_and_the_rest_do() {
        let core = aggregated(&discovery(), true, "v2");
        assert_eq!(core["items"].as_array().unwrap().len(), 1);
        assert!(core["items"][0]["metadata"].get("name").is_none());
        let apis = aggregated(&discovery(), false, "v2beta1");
        assert_eq!(apis["apiVersion"], "apidiscovery.k8s.io/v2beta1");
        let apps = apis["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|g| g["metadata"]["name"] == "apps")
            .unwrap();
        let deploy = &apps["versions"][0]["resources"][0];
        assert_eq!(deploy["scope"], "Namespaced");
        assert_eq!(deploy["subresources"][0]["subresource"], "status");
    }
}
