//! Which resources a fake cluster serves: the built-ins plus every Established CRD's versions.

use std::collections::BTreeMap;

use kbind_cluster::{ApiGroupInfo, DiscoveredResource, Discovery};
use serde_json::Value;

use crate::{builtins, crd, schema::Schema};

/// A group and plural: the storage identity of a resource, across versions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
pub struct GroupResource {
    /// API group, empty for core.
    pub group: String,
    /// Plural resource name.
    pub resource: String,
}

impl GroupResource {
    /// A group-resource.
    pub fn new(group: &str, resource: &str) -> Self {
        Self {
            group: group.to_string(),
            resource: resource.to_string(),
        }
    }

    /// `resource.group` (or `resource` for core), as messages name it.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.resource.clone()
        } else {
            format!("{}.{}", self.resource, self.group)
        }
    }
}

/// One served version of a resource.
#[derive(Debug, Clone)]
pub struct ResourceInfo {
    /// Discovery entry (group, version, kind, plural, scope, verbs, subresources).
    pub resource: DiscoveredResource,
    /// Schema of the whole object in this version.
    pub schema: Schema,
    /// The CRD that defines it, `None` for built-ins.
    pub crd: Option<String>,
    /// The CRD's additionalPrinterColumns for this version.
    pub printer_columns: Vec<Value>,
}

impl ResourceInfo {
    /// Storage key of the resource.
    pub fn group_resource(&self) -> GroupResource {
        GroupResource::new(&self.resource.group, &self.resource.plural)
    }

    /// `apiVersion` of this version.
    pub fn api_version(&self) -> String {
        self.resource.api_resource().api_version
    }

    /// Whether the status subresource is served (status is then separate from the main resource).
    pub fn has_status(&self) -> bool {
        self.resource.has_status()
    }

    /// Whether this is a custom resource.
    pub fn is_custom(&self) -> bool {
        self.crd.is_some()
    }
}

/// The served resources of one cluster.
#[derive(Debug, Clone, Default)]
pub struct Registry {
    builtins: BTreeMap<(String, String, String), ResourceInfo>,
    custom: BTreeMap<(String, String, String), ResourceInfo>,
}

impl Registry {
    /// The built-ins, plus kcp's LogicalCluster when `kcp_like`.
    pub fn new(kcp_like: bool) -> Self {
        let mut builtins = BTreeMap::new();
        let mut all = builtins::all();
        if kcp_like {
            all.push(builtins::logical_cluster());
        }
        for b in all {
            let r = &b.resource;
            let key = (r.group.clone(), r.version.clone(), r.plural.clone());
            builtins.insert(
                key,
                ResourceInfo {
                    resource: b.resource,
                    schema: b.schema,
                    crd: None,
                    printer_columns: vec![],
                },
            );
        }
        Self {
            builtins,
            custom: BTreeMap::new(),
        }
    }

    /// Replaces the custom resources with those of these Established CRDs.
    pub fn set_crds<'a>(&mut self, crds: impl Iterator<Item = &'a Value>) {
        self.custom.clear();
        for crd_obj in crds {
            let name = crd_obj
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string();
            for (resource, schema) in crd::served_resources(crd_obj) {
                let printer_columns = crd::printer_columns(crd_obj, &resource.version);
                let key = (
                    resource.group.clone(),
                    resource.version.clone(),
                    resource.plural.clone(),
                );
                if self.builtins.contains_key(&key) {
                    continue;
                }
                self.custom.insert(
                    key,
                    ResourceInfo {
                        resource,
                        schema,
                        crd: Some(name.clone()),
                        printer_columns,
                    },
                );
            }
        }
    }

    /// The resource served at group/version/plural.
    pub fn lookup(&self, group: &str, version: &str, plural: &str) -> Option<&ResourceInfo> {
        let key = (group.to_string(), version.to_string(), plural.to_string());
        self.builtins.get(&key).or_else(|| self.custom.get(&key))
    }

    /// Every served version of one group-resource.
    pub fn versions_of(&self, gr: &GroupResource) -> Vec<&ResourceInfo> {
        self.all()
            .filter(|r| r.resource.group == gr.group && r.resource.plural == gr.resource)
            .collect()
    }

    /// Every served resource version, built-ins first.
    pub fn all(&self) -> impl Iterator<Item = &ResourceInfo> {
        self.builtins.values().chain(self.custom.values())
    }

    /// Every namespaced group-resource (what emptying a namespace must visit).
    pub fn namespaced_group_resources(&self) -> Vec<GroupResource> {
        let mut out: Vec<GroupResource> = self
            .all()
            .filter(|r| r.resource.namespaced)
            .map(ResourceInfo::group_resource)
            .collect();
        out.dedup();
        out
    }

    /// Discovery as clients see it: core first, then groups in name order; a group's versions
    /// sorted by Kubernetes version priority, the first preferred.
    pub fn discovery(&self) -> Discovery {
        let mut groups: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for r in self.all() {
            let versions = groups.entry(r.resource.group.clone()).or_default();
            if !versions.contains(&r.resource.version) {
                versions.push(r.resource.version.clone());
            }
        }
        let groups = groups
            .into_iter()
            .map(|(name, mut versions)| {
                versions.sort_by(|a, b| version_priority(b).cmp(&version_priority(a)).then(a.cmp(b)));
                let preferred_version = versions.first().cloned().unwrap_or_default();
                ApiGroupInfo {
                    name,
                    versions,
                    preferred_version,
                }
            })
            .collect();
        Discovery {
            groups,
            resources: self.all().map(|r| r.resource.clone()).collect(),
            unavailable: Vec::new(),
        }
    }
}

/// Kubernetes version ordering: GA > beta > alpha, then by major and minor number.
pub fn version_priority(v: &str) -> (u8, u32, u32) {
    let Some(rest) = v.strip_prefix('v') else {
        return (0, 0, 0);
    };
    let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
    let Ok(major) = digits.parse::<u32>() else {
        return (0, 0, 0);
    };
    let tail = &rest[digits.len()..];
    let (stage, minor) = if tail.is_empty() {
        (3, 0)
    } else if let Some(n) = tail.strip_prefix("beta") {
        (2, n.parse().unwrap_or(0))
    } else if let Some(n) = tail.strip_prefix("alpha") {
        (1, n.parse().unwrap_or(0))
    } else {
        (0, 0)
    };
    (stage, major, minor)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_sort_as_kubernetes_prefers_them() {
        let mut v = vec!["v1alpha1", "v2", "v1beta2", "v1", "v1beta1", "foo"];
        v.sort_by_key(|a| std::cmp::Reverse(version_priority(a)));
        assert_eq!(v, vec!["v2", "v1", "v1beta2", "v1beta1", "v1alpha1", "foo"]);
    }
}
