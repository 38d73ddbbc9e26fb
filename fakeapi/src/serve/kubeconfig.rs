//! Kubeconfig documents for a served cluster: inline CA and bearer token, one context.

use base64::Engine;
use base64::engine::general_purpose::STANDARD;

/// Renders a kubeconfig for `server` that trusts `ca_pem` (if any) and sends `token` as `user`.
///
/// Every scalar is written as a JSON string, which is also a valid YAML double-quoted
/// scalar: no user name or cluster name can break the document's structure.
pub fn render(cluster_name: &str, server: &str, ca_pem: Option<&str>, user: &str, token: &str) -> String {
    let context = format!("{user}@{cluster_name}");
    let ca_line = ca_pem
        .map(|pem| format!("    certificate-authority-data: {}\n", quote(&STANDARD.encode(pem))))
        .unwrap_or_default();
    format!(
        "apiVersion: v1\n\
         kind: Config\n\
         clusters:\n\
         - name: {cluster}\n  \
           cluster:\n    \
             server: {server}\n\
         {ca_line}\
         users:\n\
         - name: {user}\n  \
           user:\n    \
             token: {token}\n\
         contexts:\n\
         - name: {context}\n  \
           context:\n    \
             cluster: {cluster}\n    \
             user: {user}\n\
         current-context: {context}\n",
        cluster = quote(cluster_name),
        server = quote(server),
        user = quote(user),
        token = quote(token),
        context = quote(&context),
    )
}

fn quote(s: &str) -> String {
    serde_json::Value::String(s.to_string()).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kube_reads_server_ca_and_token() {
        let yaml = render("kind: x", "https://127.0.0.1:6443", Some("PEM"), "alice", "tok\"en");
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
        assert_eq!(
            cluster.certificate_authority_data.as_deref(),
            Some(STANDARD.encode("PEM").as_str())
        );
        assert_eq!(config.clusters[0].name, "kind: x");
        assert_eq!(config.auth_infos[0].name, "alice");
        assert_eq!(config.current_context.as_deref(), Some("alice@kind: x"));
        let auth = serde_json::to_value(config.auth_infos[0].auth_info.as_ref().unwrap()).unwrap();
        assert_eq!(auth["token"], "tok\"en");
    }

    #[test]
    fn plain_http_has_no_ca() {
        let yaml = render("c", "http://127.0.0.1:1", None, "alice", "t");
        assert!(!yaml.contains("certificate-authority-data"));
        let config = kube::config::Kubeconfig::from_yaml(&yaml).unwrap();
        let cluster = config.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.certificate_authority_data, None);
    }
}
