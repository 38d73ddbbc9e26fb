//! The CustomResourceDefinitions of `core.kbind.io`, as objects and as the committed YAML.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

use crate::{Binding, ClusterBinding, Connection};

/// Where the generated YAML is committed, relative to the repository root.
pub const CRDS_YAML_PATH: &str = "deploy/crds/kbind-crds.yaml";

/// The command that regenerates [`CRDS_YAML_PATH`].
pub const REGENERATE_COMMAND: &str = "cargo run -p konnector -- crds > deploy/crds/kbind-crds.yaml";

/// Every `core.kbind.io` CRD, ordered by name.
pub fn crds() -> Vec<CustomResourceDefinition> {
    let mut crds = vec![Connection::crd(), ClusterBinding::crd(), Binding::crd()];
    crds.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
    crds
}

/// [`crds`] as one multi-document YAML stream, headed by a "generated" comment.
pub fn crds_yaml() -> String {
    let header = format!("# Generated from the kbind-api types; do not edit. Regenerate with:\n#   {REGENERATE_COMMAND}\n");
    // CRDs are plain maps, strings, numbers and booleans: serialization cannot fail.
    let documents = serde_saphyr::to_string_multiple(&crds()).unwrap_or_else(|err| panic!("CRDs serialize to YAML: {err}"));
    format!("{header}---\n{documents}")
}
