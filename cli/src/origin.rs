//! Where a Connection came from: the gateway whose bundle `kbind` applied (an annotation the CLI
//! writes itself, never the bundle's word) and the provider endpoint its kubeconfig names
//! (server and CA). A bundle is a gateway's word: one from another gateway, or one that points an
//! existing Connection at another server or CA, re-points a live binding — every synced object
//! and related Secret would go to that server. So it is refused unless `--replace-connection`
//! says so, and then old and new are shown before anything is applied.

use std::fmt;

use k8s_openapi::api::core::v1::Secret;
use kbind_api::consts::DEFAULT_KUBECONFIG_KEY;
use kbind_api::consts::backend::ANNOTATION_GATEWAY;
use kbind_cluster::{ClusterClient, ClusterClientExt};
use serde_json::Value;
use sha2::{Digest, Sha256};

use crate::bundle::CheckedBundle;
use crate::consumer::consumer_error;
use crate::error::{CliError, Result};

/// The origin (`scheme://host[:port]`) of a gateway or pickup URL.
pub fn of_url(url: &str) -> Result<String> {
    let parsed = url::Url::parse(url).map_err(|e| CliError::Usage(format!("{url:?} is not a URL: {e}")))?;
    match parsed.origin() {
        origin @ url::Origin::Tuple(..) => Ok(origin.ascii_serialization()),
        url::Origin::Opaque(_) => Err(CliError::Usage(format!("{url:?} has no http(s) origin"))),
    }
}

/// A provider endpoint as a Connection uses it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Endpoint {
    /// The gateway whose bundle made it (`None`: made by hand or by an older kbind).
    pub gateway: Option<String>,
    /// The kubeconfig's server.
    pub server: Option<String>,
    /// The first 16 hex digits of the SHA-256 of the kubeconfig's CA (`None`: system roots).
    pub ca: Option<String>,
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let or = |v: &Option<String>, none: &'static str| v.clone().unwrap_or_else(|| none.to_string());
        write!(
            f,
            "gateway {}, server {}, CA {}",
            or(&self.gateway, "unknown"),
            or(&self.server, "unknown"),
            or(&self.ca, "system roots")
        )
    }
}

/// An existing Connection a bundle would point elsewhere.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repoint {
    /// The Connection's name.
    pub connection: String,
    /// Where it points now.
    pub from: Endpoint,
    /// Where the bundle would point it.
    pub to: Endpoint,
}

impl fmt::Display for Repoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Connection {} would be re-pointed\n  from: {}\n  to:   {}",
            self.connection, self.from, self.to
        )
    }
}

/// Server and CA fingerprint of a kubeconfig's current context (or its only cluster).
fn kubeconfig_endpoint(text: &str) -> (Option<String>, Option<String>) {
    let Ok(config) = kube::config::Kubeconfig::from_yaml(text) else {
        return (None, None);
    };
    let cluster_name = config
        .current_context
        .as_ref()
        .and_then(|current| config.contexts.iter().find(|c| &c.name == current))
        .and_then(|c| c.context.as_ref())
        .map(|c| c.cluster.clone());
    let cluster = match cluster_name {
        Some(name) => config.clusters.iter().find(|c| c.name == name),
        None => config.clusters.first(),
    }
    .and_then(|c| c.cluster.as_ref());
    let Some(cluster) = cluster else {
        return (None, None);
    };
    let ca = cluster
        .certificate_authority_data
        .as_deref()
        .or(cluster.certificate_authority.as_deref())
        .map(|ca| {
            let digest = Sha256::digest(ca.trim().as_bytes());
            digest.iter().take(8).map(|b| format!("{b:02x}")).collect()
        });
    (cluster.server.clone(), ca)
}

/// The kubeconfig text of a Secret object as a bundle carries it (`stringData`) or as the
/// cluster returns it (`data`, decoded by the typed read).
fn bundle_kubeconfig(secret: &Value, key: &str) -> Option<String> {
    secret["stringData"][key].as_str().map(str::to_string)
}

/// Writes this run's gateway origin on the bundle's Connection and Secret, replacing whatever
/// the bundle said (a gateway does not get to name its own origin).
pub fn stamp(bundle: &mut CheckedBundle, origin: &str) {
    for object in &mut bundle.objects {
        if !matches!(object.kind.as_str(), "Connection" | "Secret") {
            continue;
        }
        let metadata = &mut object.body["metadata"];
        if !metadata["annotations"].is_object() {
            metadata["annotations"] = Value::Object(Default::default());
        }
        metadata["annotations"][ANNOTATION_GATEWAY] = Value::String(origin.to_string());
    }
}

/// Where the bundle points its Connection.
fn bundle_endpoint(bundle: &CheckedBundle, origin: &str) -> Endpoint {
    let connection = bundle.objects.iter().find(|o| o.kind == "Connection");
    let key = connection
        .and_then(|c| c.body["spec"]["kubeconfigSecretRef"]["key"].as_str())
        .unwrap_or(DEFAULT_KUBECONFIG_KEY);
    let secret = bundle.objects.iter().find(|o| o.kind == "Secret");
    let (server, ca) = secret
        .and_then(|s| bundle_kubeconfig(&s.body, key))
        .map(|text| kubeconfig_endpoint(&text))
        .unwrap_or_default();
    Endpoint {
        gateway: Some(origin.to_string()),
        server,
        ca,
    }
}

/// Where the existing Connection `name` points, when it exists.
async fn current_endpoint(client: &dyn ClusterClient, name: &str) -> Result<Option<Endpoint>> {
    let connection = client
        .get_opt(&crate::consumer::resource_of("Connection"), None, name)
        .await
        .map_err(|e| consumer_error(&format!("cannot read Connection {name} on the consumer"), e))?;
    let Some(connection) = connection else {
        return Ok(None);
    };
    let gateway = connection
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_GATEWAY))
        .cloned();
    let reference = &connection.data["spec"]["kubeconfigSecretRef"];
    let (server, ca) = match (reference["namespace"].as_str(), reference["name"].as_str()) {
        (Some(ns), Some(secret)) => {
            let key = reference["key"].as_str().unwrap_or(DEFAULT_KUBECONFIG_KEY);
            let found: Option<Secret> = client
                .get_typed_opt(Some(ns), secret)
                .await
                .map_err(|e| consumer_error(&format!("cannot read Secret {ns}/{secret} on the consumer"), e))?;
            found
                .and_then(|s| s.data)
                .and_then(|d| d.get(key).cloned())
                .map(|bytes| kubeconfig_endpoint(&String::from_utf8_lossy(&bytes.0)))
                .unwrap_or_default()
        }
        _ => (None, None),
    };
    Ok(Some(Endpoint { gateway, server, ca }))
}

/// Whether applying `bundle` (from the gateway at `origin`) would point an existing Connection
/// elsewhere: another gateway than the one recorded, or another server or CA. A Connection with
/// no recorded gateway (made by hand or by an older kbind) is judged by server and CA alone.
pub async fn repoint(client: &dyn ClusterClient, bundle: &CheckedBundle, origin: &str) -> Result<Option<Repoint>> {
    let Some(from) = current_endpoint(client, &bundle.connection).await? else {
        return Ok(None);
    };
    let to = bundle_endpoint(bundle, origin);
    let moved = from.gateway.as_ref().is_some_and(|g| Some(g) != to.gateway.as_ref())
        || from.server != to.server
        || from.ca != to.ca;
    Ok(moved.then(|| Repoint {
        connection: bundle.connection.clone(),
        from,
        to,
    }))
}

/// The refusal of a re-point the user did not ask for.
pub fn refusal(repoint: &Repoint) -> CliError {
    CliError::ConsumerRefused(format!(
        "{repoint}\nA bundle of another gateway or provider endpoint never replaces a working Connection: every object it \
         syncs and every related Secret would go to the new server. Nothing was applied. If you trust the new gateway and \
         mean to move this Connection, run again with --replace-connection"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    const KUBECONFIG: &str = "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: https://provider.example:6443\n    certificate-authority-data: Q0EK\ncontexts:\n- name: p\n  context:\n    cluster: p\n    user: u\ncurrent-context: p\nusers:\n- name: u\n  user:\n    token: secret-token\n";

    #[test]
    fn an_origin_is_scheme_host_and_port() {
        assert_eq!(
            of_url("https://gw.example/api/v1/pickup/x.y").ok().as_deref(),
            Some("https://gw.example")
        );
        assert_eq!(
            of_url("http://127.0.0.1:8080/").ok().as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert!(of_url("not a url").is_err());
    }

    #[test]
    fn a_kubeconfig_endpoint_is_its_server_and_a_ca_fingerprint_never_the_token() {
        let (server, ca) = kubeconfig_endpoint(KUBECONFIG);
        assert_eq!(server.as_deref(), Some("https://provider.example:6443"));
        let ca = ca.unwrap_or_default();
        assert_eq!(ca.len(), 16);
        let shown = Endpoint {
            gateway: Some("https://gw.example".into()),
            server,
            ca: Some(ca),
        }
        .to_string();
        assert!(!shown.contains("secret-token"), "{shown}");
        assert_eq!(kubeconfig_endpoint("garbage: ["), (None, None));
    }
}
