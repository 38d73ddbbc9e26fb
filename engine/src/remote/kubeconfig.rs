//! Parsing a provider kubeconfig under contract §5: inline credentials only, verified TLS.
//!
//! Every refusal names the kubeconfig field and what to do instead, and never repeats a value
//! from the kubeconfig: the text ends up in a Connection condition that anyone who can read
//! Connections sees.

use base64::Engine as _;
use kube::config::{AuthInfo, Cluster, Kubeconfig, NamedContext};
use secrecy::ExposeSecret;

use super::{Credentials, ProviderKubeconfig};

/// Why a kubeconfig was not accepted.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// The kubeconfig cannot be parsed or lacks a server, context or credentials.
    #[error("{0}")]
    InvalidKubeconfig(String),
    /// The kubeconfig asks for something §5 forbids (exec, files, proxies, insecure transport).
    #[error("{0}")]
    UnsupportedCredentials(String),
}

impl Refusal {
    /// The condition reason for this refusal.
    pub fn reason(&self) -> &'static str {
        match self {
            Refusal::InvalidKubeconfig(_) => kbind_api::consts::reason::INVALID_KUBECONFIG,
            Refusal::UnsupportedCredentials(_) => kbind_api::consts::reason::UNSUPPORTED_CREDENTIALS,
        }
    }

    /// The human-readable message (never contains a value from the kubeconfig).
    pub fn message(&self) -> &str {
        match self {
            Refusal::InvalidKubeconfig(m) | Refusal::UnsupportedCredentials(m) => m,
        }
    }
}

fn invalid(message: impl Into<String>) -> Refusal {
    Refusal::InvalidKubeconfig(message.into())
}

fn unsupported(field: &str, what: &str) -> Refusal {
    Refusal::UnsupportedCredentials(format!(
        "the kubeconfig uses `{field}`, which kbind does not accept: {what}"
    ))
}

const INLINE_HINT: &str = "use inline `token`, or `client-certificate-data` and `client-key-data`";

/// Parses and vets a provider kubeconfig; `allow_insecure` (development only) admits plain
/// `http://` servers and `insecure-skip-tls-verify`.
pub fn parse_kubeconfig(bytes: &[u8], allow_insecure: bool) -> Result<ProviderKubeconfig, Refusal> {
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("the kubeconfig is not UTF-8 text"))?;
    if text.trim().is_empty() {
        return Err(invalid("the kubeconfig is empty"));
    }
    // The parser's own error text can quote the offending input, so only its position is
    // passed on.
    let config = Kubeconfig::from_yaml(text).map_err(|e| {
        let at = match &e {
            kube::config::KubeconfigError::Parse(parse) => parse
                .location()
                .map(|l| format!(" (YAML error at line {}, column {})", l.line(), l.column()))
                .unwrap_or_default(),
            _ => String::new(),
        };
        invalid(format!(
            "the kubeconfig is not a valid kubeconfig YAML document (kind: Config){at}"
        ))
    })?;
    not_a_kubeconfig(text, &config)?;
    let context = selected_context(&config)?;
    let cluster = config
        .clusters
        .iter()
        .find(|c| c.name == context.cluster)
        .and_then(|c| c.cluster.as_ref())
        .ok_or_else(|| invalid("the current context names a cluster that the kubeconfig does not define"))?;
    let user_name = context
        .user
        .as_deref()
        .ok_or_else(|| invalid("the current context names no user; add a user with inline credentials"))?;
    let user = config
        .auth_infos
        .iter()
        .find(|a| a.name == user_name)
        .and_then(|a| a.auth_info.as_ref())
        .ok_or_else(|| invalid("the current context names a user that the kubeconfig does not define"))?;
    check_user(user)?;
    let (server, insecure_skip_tls_verify, ca_pem) = check_cluster(cluster, allow_insecure)?;
    let credentials = credentials(user)?;
    Ok(ProviderKubeconfig {
        server,
        ca_pem,
        credentials,
        insecure_skip_tls_verify,
    })
}

/// Refuses YAML that parsed without any kubeconfig field (free text, a list, a mapping of other
/// keys): the parser accepts it as an empty kubeconfig, which would read "defines no context".
fn not_a_kubeconfig(text: &str, config: &Kubeconfig) -> Result<(), Refusal> {
    let empty = config.clusters.is_empty()
        && config.contexts.is_empty()
        && config.auth_infos.is_empty()
        && config.current_context.is_none()
        && config.kind.is_none();
    if !empty {
        return Ok(());
    }
    let shape = match serde_saphyr::from_str::<serde_json::Value>(text) {
        Ok(serde_json::Value::Object(_)) => {
            "a YAML mapping without any kubeconfig key (kind, clusters, contexts, users)"
        }
        Ok(serde_json::Value::Array(_)) => "a YAML list, not a mapping",
        Ok(serde_json::Value::String(_)) => "plain text, not a YAML mapping",
        Ok(_) => "a single YAML value, not a mapping",
        Err(_) => "not a YAML mapping",
    };
    let lines = text.lines().count();
    Err(invalid(format!(
        "the kubeconfig is not a kubeconfig: its {lines} line(s) are {shape}; expected a YAML document with \
         kind: Config, clusters, contexts and users (is the Secret's key holding something else?)"
    )))
}

/// The context the kubeconfig selects (`current-context`, or its only context).
fn selected_context(config: &Kubeconfig) -> Result<&kube::config::Context, Refusal> {
    let named: Option<&NamedContext> = match config.current_context.as_deref().filter(|c| !c.is_empty()) {
        Some(current) => Some(
            config
                .contexts
                .iter()
                .find(|c| c.name == current)
                .ok_or_else(|| invalid("`current-context` names a context that the kubeconfig does not define"))?,
        ),
        None if config.contexts.len() == 1 => config.contexts.first(),
        None if config.contexts.is_empty() => return Err(invalid("the kubeconfig defines no context")),
        None => {
            return Err(invalid(
                "the kubeconfig defines several contexts but no `current-context`; set one",
            ));
        }
    };
    named
        .and_then(|c| c.context.as_ref())
        .ok_or_else(|| invalid("the selected context is empty"))
}

/// Refuses every way of authenticating other than inline credentials.
fn check_user(user: &AuthInfo) -> Result<(), Refusal> {
    if user.exec.is_some() && !crate::planted::planted(crate::planted::Plant::FollowExecKubeconfig) {
        return Err(unsupported(
            "exec",
            &format!("the konnector never runs commands; {INLINE_HINT}"),
        ));
    }
    if user.auth_provider.is_some() {
        return Err(unsupported("auth-provider", INLINE_HINT));
    }
    if user.token_file.is_some() {
        return Err(unsupported("tokenFile", "files are never read; use an inline `token`"));
    }
    if user.client_certificate.is_some() {
        return Err(unsupported(
            "client-certificate",
            "files are never read; use `client-certificate-data`",
        ));
    }
    if user.client_key.is_some() {
        return Err(unsupported("client-key", "files are never read; use `client-key-data`"));
    }
    if user.username.is_some() || user.password.is_some() {
        return Err(unsupported("username/password", INLINE_HINT));
    }
    if user.impersonate.is_some()
        || user.impersonate_uid.is_some()
        || user.impersonate_groups.is_some()
        || user.impersonate_user_extra.is_some()
    {
        return Err(unsupported(
            "as (impersonation)",
            "the provider credentials must name the identity itself",
        ));
    }
    if let Some(field) = user.other.keys().next() {
        return Err(unsupported(&format!("users[].user.{field}"), INLINE_HINT));
    }
    Ok(())
}

/// Checks the transport settings; returns the server, skip-verify and the CA bundle.
fn check_cluster(cluster: &Cluster, allow_insecure: bool) -> Result<(String, bool, Option<Vec<u8>>), Refusal> {
    if cluster.certificate_authority.is_some() {
        return Err(unsupported(
            "certificate-authority",
            "files are never read; use `certificate-authority-data`",
        ));
    }
    if cluster.proxy_url.is_some() {
        return Err(unsupported(
            "proxy-url",
            "the konnector connects to the provider directly; remove it",
        ));
    }
    let server = cluster
        .server
        .as_deref()
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| invalid("the cluster entry has no `server`"))?;
    let uri: http::Uri = server
        .parse()
        .map_err(|_| invalid("the cluster `server` is not a valid URL"))?;
    if uri.host().is_none() {
        return Err(invalid("the cluster `server` has no host"));
    }
    match uri.scheme_str() {
        Some("https") => {}
        Some("http") if allow_insecure => {}
        Some("http") => {
            return Err(unsupported(
                "server (http://)",
                "plain HTTP is accepted only when the konnector runs with its insecure development flag; use https://",
            ));
        }
        _ => return Err(invalid("the cluster `server` must be an https:// URL")),
    }
    let skip_verify = cluster.insecure_skip_tls_verify.unwrap_or(false);
    if skip_verify && !allow_insecure {
        return Err(unsupported(
            "insecure-skip-tls-verify",
            "TLS is always verified; provide `certificate-authority-data` instead",
        ));
    }
    let ca_pem = match cluster.certificate_authority_data.as_deref() {
        Some(data) => {
            let pem = decode_base64(data, "certificate-authority-data")?;
            if super::connector::pem_certificates(&pem).is_empty() {
                return Err(invalid(
                    "`certificate-authority-data` holds no PEM certificate (it must be base64 of a PEM bundle)",
                ));
            }
            Some(pem)
        }
        None => None,
    };
    Ok((server.to_string(), skip_verify, ca_pem))
}

/// The inline credentials of `user`.
fn credentials(user: &AuthInfo) -> Result<Credentials, Refusal> {
    let token = user
        .token
        .as_ref()
        .map(|t| t.expose_secret().trim().to_string())
        .filter(|t| !t.is_empty());
    let cert = user.client_certificate_data.as_deref();
    let key = user.client_key_data.as_ref().map(|k| k.expose_secret().to_string());
    match (token, cert, key) {
        (Some(_), Some(_), _) | (Some(_), _, Some(_)) => Err(invalid(
            "the user has both a `token` and a client certificate; keep one",
        )),
        (Some(token), None, None) => Ok(Credentials::Token(token)),
        (None, Some(cert), Some(key)) => Ok(Credentials::ClientCertificate {
            cert_pem: decode_base64(cert, "client-certificate-data")?,
            key_pem: decode_base64(&key, "client-key-data")?,
        }),
        (None, Some(_), None) => Err(invalid("`client-certificate-data` needs `client-key-data`")),
        (None, None, Some(_)) => Err(invalid("`client-key-data` needs `client-certificate-data`")),
        (None, None, None) => Err(invalid(format!("the user has no credentials; {INLINE_HINT}"))),
    }
}

/// `bytes`, a kubeconfig [`parse_kubeconfig`] accepted with a token, with that token replaced
/// by `token`; everything else is kept as it was (the YAML is written again, so comments and
/// formatting are not). Refused when the selected user holds no inline token.
pub fn with_token(bytes: &[u8], token: &str) -> Result<Vec<u8>, Refusal> {
    use serde_json::Value;
    let text = std::str::from_utf8(bytes).map_err(|_| invalid("the kubeconfig is not UTF-8 text"))?;
    let mut doc: Value =
        serde_saphyr::from_str(text).map_err(|_| invalid("the kubeconfig is not a valid kubeconfig YAML document"))?;
    let named = |list: &Value, name: &str| {
        list.as_array()
            .and_then(|items| items.iter().position(|item| item["name"].as_str() == Some(name)))
    };
    let context = match doc["current-context"].as_str().filter(|c| !c.is_empty()) {
        Some(current) => named(&doc["contexts"], current),
        None if doc["contexts"].as_array().is_some_and(|c| c.len() == 1) => Some(0),
        None => None,
    }
    .ok_or_else(|| invalid("the kubeconfig selects no context"))?;
    let user = doc["contexts"][context]["context"]["user"]
        .as_str()
        .map(str::to_string)
        .ok_or_else(|| invalid("the current context names no user"))?;
    let index = named(&doc["users"], &user).ok_or_else(|| invalid("the current context names an undefined user"))?;
    let slot = doc["users"][index]["user"]
        .get_mut("token")
        .filter(|t| t.is_string())
        .ok_or_else(|| invalid("the user holds no inline `token`"))?;
    *slot = Value::String(token.to_string());
    serde_saphyr::to_string(&doc)
        .map(String::into_bytes)
        .map_err(|_| invalid("the kubeconfig could not be written again"))
}

fn decode_base64(data: &str, field: &str) -> Result<Vec<u8>, Refusal> {
    let compact: String = data.chars().filter(|c| !c.is_ascii_whitespace()).collect();
    base64::engine::general_purpose::STANDARD
        .decode(compact)
        .map_err(|_| invalid(format!("`{field}` is not valid base64")))
}

#[cfg(test)]
mod tests {
    use super::*;

    const CA: &str = "-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n";

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    fn kubeconfig(cluster_extra: &str, user: &str) -> String {
        format!(
            "apiVersion: v1\nkind: Config\ncurrent-context: p\nclusters:\n- name: p\n  cluster:\n    server: https://provider.example\n    certificate-authority-data: {}\n{cluster_extra}contexts:\n- name: p\n  context: {{cluster: p, user: u}}\nusers:\n- name: u\n  user:\n{user}",
            b64(CA)
        )
    }

    fn parse(text: &str) -> Result<ProviderKubeconfig, Refusal> {
        parse_kubeconfig(text.as_bytes(), false)
    }

    #[test]
    fn inline_token_is_accepted_with_its_ca() {
        let kc = parse(&kubeconfig("", "    token: s3cret-token\n")).unwrap();
        assert_eq!(kc.server, "https://provider.example");
        assert_eq!(kc.ca_pem.as_deref(), Some(CA.as_bytes()));
        assert_eq!(kc.credentials, Credentials::Token("s3cret-token".into()));
        assert!(!format!("{kc:?}").contains("s3cret"));
    }

    #[test]
    fn inline_client_certificate_is_accepted() {
        let user = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64("CERT"),
            b64("KEY")
        );
        let kc = parse(&kubeconfig("", &user)).unwrap();
        assert_eq!(
            kc.credentials,
            Credentials::ClientCertificate {
                cert_pem: b"CERT".to_vec(),
                key_pem: b"KEY".to_vec()
            }
        );
    }

    #[test]
    fn garbage_is_refused_with_its_shape_or_parse_position_never_its_text() {
        let secret = "hunter2-s3cret";
        for garbage in [
            format!("{secret} is no kubeconfig at all"),
            format!("- {secret}\n- more"),
            format!("token: {secret}\nnote: not a kubeconfig\n"),
            "random: words\n".to_string(),
        ] {
            let refusal = parse(&garbage).expect_err("garbage is refused");
            assert_eq!(refusal.reason(), "InvalidKubeconfig");
            let message = refusal.message();
            assert!(
                message.contains("is not a kubeconfig") || message.contains("YAML error at line 1, column 1"),
                "{garbage:?}: {message}"
            );
            assert!(!message.contains("defines no context"), "{message}");
            assert!(!message.contains(secret), "{message}");
        }
        let broken = format!("apiVersion: v1\nkind: Config\nclusters: [{secret}\n");
        let refusal = parse(&broken).expect_err("unparsable YAML is refused");
        let message = refusal.message();
        assert!(message.contains("YAML error at line"), "{message}");
        assert!(!message.contains(secret), "{message}");
    }

    fn refused_field(cluster_extra: &str, user: &str) -> String {
        match parse(&kubeconfig(cluster_extra, user)) {
            Err(Refusal::UnsupportedCredentials(message)) => message,
            other => panic!("expected UnsupportedCredentials, got {other:?}"),
        }
    }

    #[test]
    fn exec_is_refused_without_running_anything() {
        let user = "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/steal-secrets\n";
        let message = refused_field("", user);
        assert!(message.contains("`exec`"), "{message}");
        assert!(!message.contains("steal"), "{message}");
    }

    #[test]
    fn files_auth_providers_and_proxies_are_refused_by_field_name() {
        let cases = [
            ("", "    tokenFile: /var/run/token\n", "tokenFile"),
            (
                "",
                "    client-certificate: /c.pem\n    client-key-data: eA==\n",
                "client-certificate",
            ),
            (
                "",
                "    client-key: /k.pem\n    client-certificate-data: eA==\n",
                "client-key",
            ),
            ("", "    auth-provider: {name: gcp}\n", "auth-provider"),
            ("", "    username: admin\n    password: hunter2\n", "username/password"),
            (
                "    certificate-authority: /ca.pem\n",
                "    token: t\n",
                "certificate-authority",
            ),
            (
                "    proxy-url: http://proxy.internal:3128\n",
                "    token: t\n",
                "proxy-url",
            ),
            (
                "    insecure-skip-tls-verify: true\n",
                "    token: t\n",
                "insecure-skip-tls-verify",
            ),
        ];
        for (cluster, user, field) in cases {
            let message = refused_field(cluster, user);
            assert!(message.contains(&format!("`{field}`")), "{field}: {message}");
            for secret in ["/var/run", "hunter2", "proxy.internal", "/ca.pem", "/c.pem", "/k.pem"] {
                assert!(!message.contains(secret), "{field} leaks {secret}: {message}");
            }
        }
    }

    #[test]
    fn plain_http_and_skip_verify_are_accepted_only_in_development_mode() {
        let text = kubeconfig("", "    token: t\n").replace("https://", "http://");
        assert!(matches!(parse(&text), Err(Refusal::UnsupportedCredentials(_))));
        let kc = parse_kubeconfig(text.as_bytes(), true).unwrap();
        assert_eq!(kc.server, "http://provider.example");
        let skip = kubeconfig("    insecure-skip-tls-verify: true\n", "    token: t\n");
        assert!(
            parse_kubeconfig(skip.as_bytes(), true)
                .unwrap()
                .insecure_skip_tls_verify
        );
    }

    #[test]
    fn structural_problems_are_invalid_kubeconfig() {
        let no_creds = kubeconfig("", "    {}\n").replace("  user:\n    {}", "  user: {}");
        let cases = [
            "not: [valid".to_string(),
            String::new(),
            no_creds,
            kubeconfig("", "    token: t\n").replace("current-context: p", "current-context: q"),
            kubeconfig("", "    token: t\n").replace("server: https://provider.example", "server: ''"),
            kubeconfig("", "    token: t\n").replace("https://provider.example", "ftp://provider.example"),
        ];
        for text in cases {
            assert!(
                matches!(parse(&text), Err(Refusal::InvalidKubeconfig(_))),
                "{text}: {:?}",
                parse(&text)
            );
        }
    }

    #[test]
    fn ca_data_that_is_not_a_pem_bundle_is_invalid() {
        let text = kubeconfig("", "    token: t\n").replace(&b64(CA), &b64("garbage"));
        assert!(matches!(parse(&text), Err(Refusal::InvalidKubeconfig(_))));
    }

    #[test]
    fn a_new_token_replaces_the_selected_users_token_and_nothing_else() {
        let text = kubeconfig("", "    token: old-token\n")
            .replace("users:\n", "users:\n- name: other\n  user:\n    token: untouched\n");
        let before = parse(&text).unwrap();
        let rewritten = with_token(text.as_bytes(), "new-token").unwrap();
        let after = parse_kubeconfig(&rewritten, false).unwrap();
        assert_eq!(after.credentials, Credentials::Token("new-token".into()));
        assert_eq!((after.server, after.ca_pem), (before.server, before.ca_pem));
        let rewritten = String::from_utf8(rewritten).unwrap();
        assert!(
            rewritten.contains("untouched") && !rewritten.contains("old-token"),
            "{rewritten}"
        );
        let cert = format!(
            "    client-certificate-data: {}\n    client-key-data: {}\n",
            b64("CERT"),
            b64("KEY")
        );
        assert!(with_token(kubeconfig("", &cert).as_bytes(), "new-token").is_err());
    }

    #[test]
    fn the_only_context_is_used_without_current_context() {
        let text = kubeconfig("", "    token: t\n").replace("current-context: p\n", "");
        assert!(parse(&text).is_ok());
    }
}
