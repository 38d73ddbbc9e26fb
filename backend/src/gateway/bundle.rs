//! The one-apply bundle, assembled at pickup and never stored: a Secret with the provider
//! kubeconfig in the konnector's namespace, a Connection referencing it, and the bindings —
//! one Binding per namespace for namespaced APIs, one ClusterBinding for cluster-scoped ones.

use base64::Engine;
use kbind_api::consts::backend::LABEL_GRANT;
use kbind_api::consts::{API_VERSION, DEFAULT_KUBECONFIG_KEY, annotation};
use kbind_api::{Export, ResourceScope};
use serde_json::{Value, json};

use super::Config;

/// The objects of one bundle, in apply order.
#[derive(Debug, Clone, PartialEq)]
pub struct Bundle {
    /// Secret, Connection, ClusterBinding (if any), then the Bindings by namespace.
    pub objects: Vec<Value>,
}

/// How a bundle is rendered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BundleFormat {
    /// Multi-document YAML (the default).
    Yaml,
    /// A `v1` `List` (for `Accept: application/json`).
    Json,
}

impl Bundle {
    /// The bundle as text in `format`.
    pub fn render(&self, format: BundleFormat) -> Result<String, String> {
        match format {
            BundleFormat::Json => serde_json::to_string_pretty(&json!({
                "apiVersion": "v1",
                "kind": "List",
                "items": self.objects,
            }))
            .map_err(|e| e.to_string()),
            BundleFormat::Yaml => {
                let mut out = String::new();
                for object in &self.objects {
                    out.push_str("---\n");
                    out.push_str(&serde_saphyr::to_string(object).map_err(|e| e.to_string())?);
                }
                Ok(out)
            }
        }
    }
}

/// The bundle of Grant `grant` for `export`, whose APIs have `scopes`; `namespaces` are the
/// Grant's (the consumer uses the same names), `token` the credential minted for this pickup.
pub fn bundle_objects(
    config: &Config,
    grant: &str,
    export: &Export,
    scopes: &[(String, ResourceScope)],
    namespaces: &[String],
    konnector_namespace: &str,
    token: &str,
) -> Bundle {
    let export_name = export.metadata.name.clone().unwrap_or_default();
    let base = object_base_name(&config.provider_name, &export_name, grant);
    let secret_name = format!("{base}-kubeconfig");
    let labels = json!({ LABEL_GRANT: grant });
    let kubeconfig = kubeconfig(config, grant, token);

    let namespaced: Vec<&str> = apis_of(scopes, ResourceScope::Namespaced);
    let cluster: Vec<&str> = apis_of(scopes, ResourceScope::Cluster);

    let mut connection_meta = json!({"name": base, "labels": labels});
    if !namespaced.is_empty() {
        connection_meta["annotations"] = json!({ annotation::BINDING_NAMESPACES: namespaces.join(",") });
    }
    let mut objects = vec![
        json!({
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": secret_name, "namespace": konnector_namespace, "labels": labels},
            "type": "Opaque",
            "stringData": { DEFAULT_KUBECONFIG_KEY: kubeconfig },
        }),
        json!({
            "apiVersion": API_VERSION,
            "kind": "Connection",
            "metadata": connection_meta,
            "spec": {"kubeconfigSecretRef": {
                "namespace": konnector_namespace,
                "name": secret_name,
                "key": DEFAULT_KUBECONFIG_KEY,
            }},
        }),
    ];
    let spec = |apis: &[&str]| {
        let mut spec = json!({
            "connectionRef": {"name": base},
            "apis": apis.iter().map(|name| json!({"name": name})).collect::<Vec<_>>(),
            "conflictPolicy": export.spec.conflict_policy,
        });
        if !export.spec.related_resources.is_empty() {
            spec["relatedResources"] = json!(export.spec.related_resources);
        }
        spec
    };
    if !cluster.is_empty() {
        objects.push(json!({
            "apiVersion": API_VERSION,
            "kind": "ClusterBinding",
            "metadata": {"name": base, "labels": labels},
            "spec": spec(&cluster),
        }));
    }
    if !namespaced.is_empty() {
        for namespace in namespaces {
            objects.push(json!({
                "apiVersion": API_VERSION,
                "kind": "Binding",
                "metadata": {"name": base, "namespace": namespace, "labels": labels},
                "spec": spec(&namespaced),
            }));
        }
    }
    Bundle { objects }
}

fn apis_of(scopes: &[(String, ResourceScope)], scope: ResourceScope) -> Vec<&str> {
    scopes
        .iter()
        .filter(|(_, s)| *s == scope)
        .map(|(name, _)| name.as_str())
        .collect()
}

/// `<provider>-<export>`: one Connection per Export, so two Exports of one provider bound on
/// one consumer never share (and overwrite) a credential. Falls back to the Grant's name when
/// that would be too long for an object name.
fn object_base_name(provider: &str, export: &str, grant: &str) -> String {
    let name = format!("{provider}-{export}");
    if name.len() + "-kubeconfig".len() <= 253 {
        name
    } else {
        format!("{provider}-{grant}")
    }
}

/// The provider kubeconfig: `--provider-url` and `--provider-ca`, a bearer token, nothing else.
fn kubeconfig(config: &Config, grant: &str, token: &str) -> String {
    let ca = base64::engine::general_purpose::STANDARD.encode(config.provider_ca_pem.as_bytes());
    let provider = &config.provider_name;
    let doc = json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": provider, "cluster": {
            "server": config.provider_url,
            "certificate-authority-data": ca,
        }}],
        "users": [{"name": grant, "user": {"token": token}}],
        "contexts": [{"name": provider, "context": {"cluster": provider, "user": grant}}],
        "current-context": provider,
    });
    // Plain strings and maps: YAML serialization cannot fail; JSON is valid YAML regardless.
    serde_saphyr::to_string(&doc).unwrap_or_else(|_| doc.to_string())
}
