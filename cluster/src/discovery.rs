//! What a cluster serves: groups, versions and resources, as discovery reports them.

use serde::{Deserialize, Serialize};

/// One served resource (a plural under a group-version).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DiscoveredResource {
    /// API group, empty for the core group.
    pub group: String,
    /// Version, e.g. `v1`.
    pub version: String,
    /// Kind, e.g. `Widget`.
    pub kind: String,
    /// Plural resource name, e.g. `widgets`.
    pub plural: String,
    /// Singular name, may be empty.
    #[serde(default)]
    pub singular: String,
    /// Whether the resource is namespaced.
    pub namespaced: bool,
    /// Verbs the resource supports.
    pub verbs: Vec<String>,
    /// Subresources served (e.g. `status`).
    #[serde(default)]
    pub subresources: Vec<String>,
    /// Short names.
    #[serde(default)]
    pub short_names: Vec<String>,
    /// Categories (e.g. `all`).
    #[serde(default)]
    pub categories: Vec<String>,
}

impl DiscoveredResource {
    /// The resource as a kube `ApiResource`.
    pub fn api_resource(&self) -> kube::api::ApiResource {
        let api_version = if self.group.is_empty() {
            self.version.clone()
        } else {
            format!("{}/{}", self.group, self.version)
        };
        kube::api::ApiResource {
            group: self.group.clone(),
            version: self.version.clone(),
            api_version,
            kind: self.kind.clone(),
            plural: self.plural.clone(),
        }
    }

    /// Whether the status subresource is served.
    pub fn has_status(&self) -> bool {
        self.subresources.iter().any(|s| s == "status")
    }
}

/// One API group with its versions, preferred first.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApiGroupInfo {
    /// Group name, empty for the core group.
    pub name: String,
    /// Served versions, preferred first.
    pub versions: Vec<String>,
    /// The preferred version.
    pub preferred_version: String,
}

/// Everything a cluster serves.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Discovery {
    /// Groups, core first.
    pub groups: Vec<ApiGroupInfo>,
    /// Resources of every served group-version (subresources folded into their parent).
    pub resources: Vec<DiscoveredResource>,
    /// Group-versions the server listed but whose resources could not be read (an unavailable
    /// aggregated APIService, a 429 or 5xx): their resources are missing from `resources`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unavailable: Vec<String>,
}

impl Discovery {
    /// Whether every listed group-version answered: only a complete discovery may stand for
    /// "nothing else is there" (contract §8.9).
    pub fn is_complete(&self) -> bool {
        self.unavailable.is_empty()
    }

    /// The resource with this group and plural, in the group's preferred version.
    pub fn find(&self, group: &str, plural: &str) -> Option<&DiscoveredResource> {
        let preferred = self
            .groups
            .iter()
            .find(|g| g.name == group)
            .map(|g| g.preferred_version.as_str());
        let mut candidates = self.resources.iter().filter(|r| r.group == group && r.plural == plural);
        let first = candidates.next()?;
        if Some(first.version.as_str()) == preferred {
            return Some(first);
        }
        candidates
            .find(|r| Some(r.version.as_str()) == preferred)
            .or(Some(first))
    }

    /// The resource with this group, version and plural.
    pub fn find_version(&self, group: &str, version: &str, plural: &str) -> Option<&DiscoveredResource> {
        self.resources
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }
}
