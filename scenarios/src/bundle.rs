//! Provider credentials and the one-apply bundle (contract §1): Secret, Connection and
//! ClusterBinding for one provider.

use base64::Engine as _;
use serde_json::{Value, json};

/// Credentials minted on a provider for the konnector.
#[derive(Clone, PartialEq, Eq)]
pub struct Credential {
    /// The provider's world name.
    pub provider: String,
    /// The bearer token.
    pub token: String,
    /// The user the token authenticates as.
    pub user: String,
    /// The ServiceAccount behind the token, if revocable (`namespace`, `name`).
    pub service_account: Option<(String, String)>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("provider", &self.provider)
            .field("user", &self.user)
            .finish_non_exhaustive()
    }
}

/// A kubeconfig with inline credentials for `server`, verified against `ca_pem`.
pub fn kubeconfig(server: &str, ca_pem: &[u8], token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(ca_pem);
    format!(
        "apiVersion: v1\nkind: Config\ncurrent-context: provider\nclusters:\n- name: provider\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\nusers:\n- name: konnector\n  user:\n    token: {token}\ncontexts:\n- name: provider\n  context:\n    cluster: provider\n    user: konnector\n"
    )
}

/// The bundle's three objects for Connection `name` in konnector namespace `namespace`.
pub fn bundle(name: &str, namespace: &str, kubeconfig: &str, apis: &[&str]) -> Vec<Value> {
    let mut objects = vec![
        json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": name, "namespace": namespace},
            "stringData": {"kubeconfig": kubeconfig},
        }),
        json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
            "metadata": {"name": name},
            "spec": {"kubeconfigSecretRef": {"namespace": namespace, "name": name, "key": "kubeconfig"}},
        }),
    ];
    if !apis.is_empty() {
        let apis: Vec<Value> = apis.iter().map(|a| json!({"name": a})).collect();
        objects.push(json!({
            "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
            "metadata": {"name": name},
            "spec": {"connectionRef": {"name": name}, "apis": apis},
        }));
    }
    objects
}

/// The bundle as one multi-document YAML file (each document in YAML's JSON flow form).
pub fn to_yaml(objects: &[Value]) -> String {
    objects
        .iter()
        .map(|o| serde_json::to_string_pretty(o).unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n---\n")
}
