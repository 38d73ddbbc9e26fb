//! A throwaway certificate authority and a serving certificate for the loopback names.

use std::sync::Arc;

use rcgen::{
    BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, Issuer, KeyPair, KeyUsagePurpose,
    PKCS_ECDSA_P256_SHA256,
};
use tokio_rustls::rustls::{
    self, ServerConfig,
    pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer},
};

use super::Error;

/// The names the serving certificate is valid for: what a local client dials.
pub const SERVING_NAMES: [&str; 3] = ["127.0.0.1", "localhost", "::1"];

/// ALPN protocols in preference order: kubectl and client-go speak HTTP/2 over TLS.
const ALPN: [&[u8]; 2] = [b"h2", b"http/1.1"];

/// `config` offering HTTP/1.1 only, as a TLS-terminating proxy without HTTP/2 does.
pub(crate) fn http1_only(config: &ServerConfig) -> ServerConfig {
    let mut config = config.clone();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    config
}

/// A freshly generated CA and the TLS configuration of a server whose certificate it signed.
#[derive(Clone)]
pub struct Certificates {
    /// The CA certificate clients trust, PEM-encoded.
    pub ca_pem: String,
    /// The rustls configuration serving the CA-signed certificate.
    pub server_config: Arc<ServerConfig>,
}

impl std::fmt::Debug for Certificates {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // The configuration holds the private key: never print it.
        f.debug_struct("Certificates").finish_non_exhaustive()
    }
}

impl Certificates {
    /// Generates an ECDSA P-256 CA and a serving certificate for [`SERVING_NAMES`].
    pub fn generate(cluster_name: &str) -> Result<Self, Error> {
        let (ca_pem, issuer) = new_ca(cluster_name)?;
        let (cert, key) = new_serving_cert(cluster_name, &issuer)?;
        let server_config = server_config(cert, key)?;
        Ok(Self {
            ca_pem,
            server_config: Arc::new(server_config),
        })
    }
}

fn new_ca(cluster_name: &str) -> Result<(String, Issuer<'static, KeyPair>), Error> {
    let mut params = CertificateParams::new(Vec::<String>::new()).map_err(Error::Certificate)?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params
        .distinguished_name
        .push(DnType::CommonName, format!("fakeapi-ca@{cluster_name}"));
    params.key_usages = vec![
        KeyUsagePurpose::DigitalSignature,
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
    ];
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(Error::Certificate)?;
    let cert = params.self_signed(&key).map_err(Error::Certificate)?;
    Ok((cert.pem(), Issuer::new(params, key)))
}

fn new_serving_cert(
    cluster_name: &str,
    issuer: &Issuer<'static, KeyPair>,
) -> Result<(CertificateDer<'static>, PrivateKeyDer<'static>), Error> {
    let names: Vec<String> = SERVING_NAMES.iter().map(|n| n.to_string()).collect();
    let mut params = CertificateParams::new(names).map_err(Error::Certificate)?;
    params
        .distinguished_name
        .push(DnType::CommonName, format!("fakeapi@{cluster_name}"));
    params.use_authority_key_identifier_extension = true;
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let key = KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256).map_err(Error::Certificate)?;
    let cert = params.signed_by(&key, issuer).map_err(Error::Certificate)?;
    let key_der = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
    Ok((cert.der().clone(), key_der))
}

fn server_config(cert: CertificateDer<'static>, key: PrivateKeyDer<'static>) -> Result<ServerConfig, Error> {
    // An explicit provider: the process-wide default may be unset or differ between crates.
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(Error::Tls)?
        .with_no_client_auth()
        .with_single_cert(vec![cert], key)
        .map_err(Error::Tls)?;
    config.alpn_protocols = ALPN.iter().map(|p| p.to_vec()).collect();
    Ok(config)
}
