//! Reading a Connection's kubeconfig for engagement: a narrow reader of the inline-credential
//! subset of DESIGN.md §5 (the Connection reconciler's `SecretValid` check is the full
//! policy; this refuses anything outside the subset rather than guessing).

use base64::Engine as _;
use serde_json::Value;

use crate::remote::{Credentials, ProviderKubeconfig};

/// Why a kubeconfig cannot be used for engagement (never carries credential material).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeconfigError {
    /// Not YAML/JSON, or the current context does not resolve.
    #[error("failed to read the kubeconfig: {0}")]
    Invalid(String),
    /// exec, auth-provider, files, proxies or insecure transport.
    #[error("the kubeconfig uses unsupported credentials or transport: {0}")]
    Unsupported(String),
}

/// Fields that make a kubeconfig unacceptable (§5): anything that runs, reads files or proxies.
const REFUSED_USER_FIELDS: &[&str] = &[
    "exec",
    "auth-provider",
    "tokenFile",
    "client-certificate",
    "client-key",
    "username",
    "password",
    "as",
];
const REFUSED_CLUSTER_FIELDS: &[&str] = &["certificate-authority", "proxy-url"];

/// Parses `bytes` into accepted provider credentials.
pub fn parse(bytes: &[u8], allow_insecure: bool) -> Result<ProviderKubeconfig, KubeconfigError> {
    let text = std::str::from_utf8(bytes).map_err(|_| KubeconfigError::Invalid("not UTF-8".into()))?;
    let doc: Value =
        serde_saphyr::from_str(text).map_err(|_| KubeconfigError::Invalid("not a YAML document".into()))?;
    let context_name = doc
        .get("current-context")
        .and_then(Value::as_str)
        .ok_or_else(|| KubeconfigError::Invalid("no current-context".into()))?;
    let context = named(&doc, "contexts", context_name, "context")?;
    let cluster_name = field_str(context, "cluster")?;
    let user_name = field_str(context, "user")?;
    let cluster = named(&doc, "clusters", cluster_name, "cluster")?;
    let user = named(&doc, "users", user_name, "user")?;
    refuse_fields(cluster, REFUSED_CLUSTER_FIELDS)?;
    refuse_fields(user, REFUSED_USER_FIELDS)?;

    let server = field_str(cluster, "server")?.to_string();
    let insecure_skip_tls_verify = cluster
        .get("insecure-skip-tls-verify")
        .and_then(Value::as_bool)
        .unwrap_or(false);
    if !allow_insecure && (insecure_skip_tls_verify || !server.starts_with("https://")) {
        return Err(KubeconfigError::Unsupported(
            "plain http or insecure-skip-tls-verify".into(),
        ));
    }
    let ca_pem = cluster
        .get("certificate-authority-data")
        .and_then(Value::as_str)
        .map(decode)
        .transpose()?;
    let credentials = match (
        user.get("token").and_then(Value::as_str),
        user.get("client-certificate-data").and_then(Value::as_str),
        user.get("client-key-data").and_then(Value::as_str),
    ) {
        (Some(token), None, None) if !token.is_empty() => Credentials::Token(token.to_string()),
        (None, Some(cert), Some(key)) => Credentials::ClientCertificate {
            cert_pem: decode(cert)?,
            key_pem: decode(key)?,
        },
        _ => return Err(KubeconfigError::Invalid("no usable inline credentials".into())),
    };
    Ok(ProviderKubeconfig {
        server,
        ca_pem,
        credentials,
        insecure_skip_tls_verify,
    })
}

fn named<'a>(doc: &'a Value, list: &str, name: &str, inner: &str) -> Result<&'a Value, KubeconfigError> {
    doc.get(list)
        .and_then(Value::as_array)
        .and_then(|items| {
            items
                .iter()
                .find(|i| i.get("name").and_then(Value::as_str) == Some(name))
        })
        .and_then(|item| item.get(inner))
        .ok_or_else(|| KubeconfigError::Invalid(format!("{list} has no entry {name:?}")))
}

fn field_str<'a>(obj: &'a Value, field: &str) -> Result<&'a str, KubeconfigError> {
    obj.get(field)
        .and_then(Value::as_str)
        .ok_or_else(|| KubeconfigError::Invalid(format!("missing {field}")))
}

fn refuse_fields(obj: &Value, refused: &[&str]) -> Result<(), KubeconfigError> {
    match refused.iter().find(|f| obj.get(**f).is_some()) {
        Some(field) => Err(KubeconfigError::Unsupported((*field).to_string())),
        None => Ok(()),
    }
}

fn decode(data: &str) -> Result<Vec<u8>, KubeconfigError> {
    base64::engine::general_purpose::STANDARD
        .decode(data.trim())
        .map_err(|_| KubeconfigError::Invalid("bad base64 data".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN_KUBECONFIG: &str = "apiVersion: v1\nkind: Config\ncurrent-context: acme\nclusters:\n- name: acme\n  cluster:\n    server: https://acme.fake\n    certificate-authority-data: Q0E=\nusers:\n- name: k\n  user:\n    token: secret-token\ncontexts:\n- name: acme\n  context: {cluster: acme, user: k}\n";

    #[test]
    fn inline_token_kubeconfig_is_accepted() {
        let kc = parse(TOKEN_KUBECONFIG.as_bytes(), false).unwrap();
        assert_eq!(kc.server, "https://acme.fake");
        assert_eq!(kc.ca_pem.as_deref(), Some(&b"CA"[..]));
        assert!(kc.credentials == Credentials::Token("secret-token".into()));
    }

    #[test]
    fn exec_credentials_are_refused_without_echoing_them() {
        let text = TOKEN_KUBECONFIG.replace("token: secret-token", "exec: {command: /bin/steal}");
        let err = parse(text.as_bytes(), false).unwrap_err();
        assert_eq!(err, KubeconfigError::Unsupported("exec".into()));
        assert!(!err.to_string().contains("steal"));
    }

    #[test]
    fn plain_http_is_refused_unless_insecure_is_allowed() {
        let text = TOKEN_KUBECONFIG.replace("https://", "http://");
        assert!(matches!(
            parse(text.as_bytes(), false),
            Err(KubeconfigError::Unsupported(_))
        ));
        assert!(parse(text.as_bytes(), true).is_ok());
    }
}
