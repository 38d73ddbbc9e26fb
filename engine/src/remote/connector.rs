//! The production `Connector`: an accepted kubeconfig becomes a `kube::Client` (rustls) built
//! field by field, so nothing is read from files or the environment (no `HTTPS_PROXY`).

use std::sync::Arc;

use async_trait::async_trait;
use base64::Engine as _;
use kbind_cluster::{BearerToken, ClusterClient, Error, KubeClusterClient, REQUEST_TIMEOUT, with_request_timeout};
use secrecy::SecretString;

use super::{Connector, Credentials, ProviderKubeconfig};

/// Connects to real providers through the `kube` crate.
#[derive(Debug, Clone, Copy)]
pub struct KubeConnector {
    /// Development only: accept `http://` and `insecure-skip-tls-verify` (re-checked here, so a
    /// kubeconfig parsed elsewhere cannot smuggle them in).
    pub allow_insecure: bool,
    /// The largest response body read from a provider (per event for watches): a provider is
    /// untrusted and must not make the konnector buffer without end.
    pub max_response_bytes: u64,
    /// How long a provider request (every one but a watch's stream) may take before it is
    /// given up ([`REQUEST_TIMEOUT`] by default).
    pub request_timeout: std::time::Duration,
}

impl Default for KubeConnector {
    fn default() -> Self {
        Self {
            allow_insecure: false,
            max_response_bytes: kbind_cluster::limit::DEFAULT_MAX_RESPONSE_BYTES,
            request_timeout: REQUEST_TIMEOUT,
        }
    }
}

#[async_trait]
impl Connector for KubeConnector {
    async fn connect(
        &self,
        kubeconfig: &ProviderKubeconfig,
        bearer: &BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        let config = self.config(kubeconfig)?;
        let built = match kubeconfig.credentials {
            // The token is read from `bearer` on every request, so a renewal needs no new client.
            Credentials::Token(_) => {
                KubeClusterClient::from_config_with_bearer(config, self.max_response_bytes, bearer.clone())
            }
            // from_config turns kube's silent 429/503 retries off, so an unreachable provider shows.
            Credentials::ClientCertificate { .. } => {
                KubeClusterClient::from_config_with_limit(config, self.max_response_bytes)
            }
        };
        let client =
            built.map_err(|_| Error::Transport("failed to build the provider client from the kubeconfig".into()))?;
        // A request on a connection that died silently (HTTP/1.1 has no pings) would otherwise
        // wait out the kernel's retransmissions, about 15 minutes, the heartbeat's included.
        Ok(with_request_timeout(Arc::new(client), self.request_timeout))
    }
}

impl KubeConnector {
    /// The `kube::Config` for `kubeconfig`; never reads files or environment variables.
    pub fn config(&self, kubeconfig: &ProviderKubeconfig) -> Result<kube::Config, Error> {
        let uri: http::Uri = kubeconfig.server.parse().map_err(|_| Error::BadRequest {
            message: "the provider server is not a valid URL".into(),
        })?;
        let insecure = uri.scheme_str() != Some("https") || kubeconfig.insecure_skip_tls_verify;
        if insecure && !self.allow_insecure {
            return Err(Error::BadRequest {
                message: "insecure provider transport refused (development flag not set)".into(),
            });
        }
        let mut config = kube::Config::new(uri);
        config.accept_invalid_certs = kubeconfig.insecure_skip_tls_verify && self.allow_insecure;
        if let Some(pem) = &kubeconfig.ca_pem {
            config.root_cert = Some(pem_certificates(pem));
        }
        match &kubeconfig.credentials {
            Credentials::Token(token) => {
                config.auth_info.token = Some(SecretString::from(token.clone()));
            }
            Credentials::ClientCertificate { cert_pem, key_pem } => {
                let b64 = base64::engine::general_purpose::STANDARD;
                config.auth_info.client_certificate_data = Some(b64.encode(cert_pem));
                config.auth_info.client_key_data = Some(SecretString::from(b64.encode(key_pem)));
            }
        }
        Ok(config)
    }
}

/// The DER certificates of a PEM bundle (blocks other than `CERTIFICATE` are skipped).
pub(crate) fn pem_certificates(pem: &[u8]) -> Vec<Vec<u8>> {
    let text = String::from_utf8_lossy(pem);
    let mut certs = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim) {
        if line == "-----BEGIN CERTIFICATE-----" {
            body = Some(String::new());
        } else if line == "-----END CERTIFICATE-----" {
            if let Some(b) = body.take()
                && let Ok(der) = base64::engine::general_purpose::STANDARD.decode(b)
                && !der.is_empty()
            {
                certs.push(der);
            }
        } else if let Some(b) = body.as_mut() {
            b.push_str(line);
        }
    }
    certs
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kubeconfig(server: &str, skip: bool) -> ProviderKubeconfig {
        ProviderKubeconfig {
            server: server.into(),
            ca_pem: Some(b"-----BEGIN CERTIFICATE-----\nAAEC\n-----END CERTIFICATE-----\n".to_vec()),
            credentials: Credentials::Token("t0ken".into()),
            insecure_skip_tls_verify: skip,
        }
    }

    #[test]
    fn config_carries_the_ca_and_token_and_nothing_from_files() {
        let config = KubeConnector::default()
            .config(&kubeconfig("https://provider.example:6443", false))
            .unwrap();
        assert_eq!(config.root_cert, Some(vec![vec![0, 1, 2]]));
        assert!(config.root_cert_file.is_none());
        assert!(config.proxy_url.is_none());
        assert!(!config.accept_invalid_certs);
        assert!(config.auth_info.token.is_some());
        assert!(config.auth_info.exec.is_none() && config.auth_info.token_file.is_none());
    }

    #[test]
    fn insecure_transport_needs_the_development_flag() {
        let secure = KubeConnector::default();
        assert!(secure.config(&kubeconfig("http://provider.example", false)).is_err());
        assert!(secure.config(&kubeconfig("https://provider.example", true)).is_err());
        let dev = KubeConnector {
            allow_insecure: true,
            ..KubeConnector::default()
        };
        assert!(
            dev.config(&kubeconfig("https://provider.example", true))
                .unwrap()
                .accept_invalid_certs
        );
    }

    /// A provider that stops answering (a black hole: nothing closes, nothing answers) costs a
    /// request [`REQUEST_TIMEOUT`], not the kernel's ~15 minutes of retransmissions.
    #[tokio::test]
    async fn a_provider_request_gives_up_after_the_request_timeout() {
        use fakeapi::serve::{ClusterServeOptions, serve_cluster};
        use kbind_cluster::ApiResource;

        let provider = fakeapi::FakeCluster::builder("provider").build();
        let user = "konnector:konnector-token:system:masters".parse().unwrap();
        let server = serve_cluster(provider.clone(), ClusterServeOptions::default().user(user))
            .await
            .unwrap();
        let kubeconfig = ProviderKubeconfig {
            server: server.url().into(),
            ca_pem: server.ca_pem().map(|pem| pem.as_bytes().to_vec()),
            credentials: Credentials::Token("konnector-token".into()),
            insecure_skip_tls_verify: false,
        };
        let client = KubeConnector::default()
            .connect(&kubeconfig, &BearerToken::new("konnector-token"))
            .await
            .unwrap();
        let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
        client
            .get(&namespaces, None, "default")
            .await
            .expect("answered while the provider is up");

        provider.black_hole();
        // Real sockets on tokio's clock: paused, it jumps to the next deadline once all is idle.
        tokio::time::pause();
        let sent = tokio::time::Instant::now();
        let err = client.get(&namespaces, None, "default").await.unwrap_err();
        assert_eq!(
            err.to_string(),
            "request timed out: get namespaces default: no answer within 30s"
        );
        assert!(sent.elapsed() >= REQUEST_TIMEOUT, "{:?}", sent.elapsed());
    }

    /// A renewed token set on the bearer is what the running client sends next: same client,
    /// same connection, the new identity on the provider's side.
    #[tokio::test]
    async fn the_running_client_sends_the_token_its_bearer_holds_now() {
        use fakeapi::serve::{ClusterServeOptions, serve_cluster};
        use kbind_cluster::ApiResource;

        let provider = fakeapi::FakeCluster::builder("provider").build();
        let user = "konnector:first-token:system:masters".parse().unwrap();
        let server = serve_cluster(provider.clone(), ClusterServeOptions::default().user(user))
            .await
            .unwrap();
        provider.add_token(
            "renewed-token",
            fakeapi::UserInfo {
                name: "renewed".into(),
                groups: vec!["system:masters".into()],
            },
        );
        let kubeconfig = ProviderKubeconfig {
            server: server.url().into(),
            ca_pem: server.ca_pem().map(|pem| pem.as_bytes().to_vec()),
            credentials: Credentials::Token("first-token".into()),
            insecure_skip_tls_verify: false,
        };
        let bearer = BearerToken::new("first-token");
        let client = KubeConnector::default().connect(&kubeconfig, &bearer).await.unwrap();
        let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
        let last_user = || provider.request_log().last().map(|r| r.user.clone());
        client
            .get(&namespaces, None, "default")
            .await
            .expect("the first token works");
        assert_eq!(last_user().as_deref(), Some("konnector"));

        bearer.set("not-a-known-token");
        let err = client.get(&namespaces, None, "default").await.unwrap_err();
        assert!(matches!(err, Error::Unauthorized { .. }), "{err:?}");

        bearer.set("renewed-token");
        client
            .get(&namespaces, None, "default")
            .await
            .expect("the renewed token works");
        assert_eq!(last_user().as_deref(), Some("renewed"));
    }

    #[test]
    fn pem_bundles_yield_each_certificate() {
        let pem = "junk\n-----BEGIN CERTIFICATE-----\nAA\nEC\n-----END CERTIFICATE-----\n-----BEGIN CERTIFICATE-----\nAw==\n-----END CERTIFICATE-----\n";
        assert_eq!(pem_certificates(pem.as_bytes()), vec![vec![0, 1, 2], vec![3]]);
        assert!(pem_certificates(b"no certs").is_empty());
    }
}
