//! The generated certificate authority, apiserver serving certificate and service-account signing key of an environment.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair,
    KeyUsagePurpose,
};

use crate::Error;

/// PEM files on disk that every apiserver and controller-manager of an environment shares.
#[derive(Clone, Debug)]
pub(crate) struct Pki {
    /// The CA certificate clients trust (also `--client-ca-file` and `--root-ca-file`).
    pub ca_cert: PathBuf,
    /// The CA certificate as PEM text, for kubeconfigs.
    pub ca_pem: String,
    /// The serving certificate, valid for 127.0.0.1 and localhost.
    pub serving_cert: PathBuf,
    /// The serving certificate's private key.
    pub serving_key: PathBuf,
    /// The service-account token signing key (private).
    pub service_account_key: PathBuf,
    /// The service-account token verification key (public).
    pub service_account_pub: PathBuf,
}

impl Pki {
    /// Generates a fresh CA, serving certificate and service-account key and writes them under `dir`.
    pub(crate) fn generate(dir: &Path) -> Result<Self, Error> {
        let ca = certificate_authority()?;
        let serving_key = KeyPair::generate()?;
        let serving = serving_params()?.signed_by(&serving_key, &ca)?;
        let service_account_key = KeyPair::generate()?;

        let pki = Pki {
            ca_cert: dir.join("ca.crt"),
            ca_pem: ca.pem(),
            serving_cert: dir.join("serving.crt"),
            serving_key: dir.join("serving.key"),
            service_account_key: dir.join("sa.key"),
            service_account_pub: dir.join("sa.pub"),
        };
        write(&pki.ca_cert, &pki.ca_pem)?;
        write(&pki.serving_cert, &serving.pem())?;
        write(&pki.serving_key, &serving_key.serialize_pem())?;
        write(&pki.service_account_key, &service_account_key.serialize_pem())?;
        write(&pki.service_account_pub, &service_account_key.public_key_pem())?;
        Ok(pki)
    }
}

fn certificate_authority() -> Result<CertifiedIssuer<'static, KeyPair>, Error> {
    let mut params = CertificateParams::new(Vec::<String>::new())?;
    params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    params.distinguished_name.push(DnType::CommonName, "kbind-testenv-ca");
    params.key_usages = vec![
        KeyUsagePurpose::KeyCertSign,
        KeyUsagePurpose::CrlSign,
        KeyUsagePurpose::DigitalSignature,
    ];
    Ok(CertifiedIssuer::self_signed(params, KeyPair::generate()?)?)
}

fn serving_params() -> Result<CertificateParams, Error> {
    let mut params = CertificateParams::new(vec!["127.0.0.1".to_string(), "localhost".to_string()])?;
    params.distinguished_name.push(DnType::CommonName, "kube-apiserver");
    params.key_usages = vec![KeyUsagePurpose::DigitalSignature, KeyUsagePurpose::KeyEncipherment];
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    Ok(params)
}

fn write(path: &Path, pem: &str) -> Result<(), Error> {
    std::fs::write(path, pem).map_err(|source| Error::io(format!("failed to write {}", path.display()), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_files_are_pem() {
        let dir = tempfile::tempdir().unwrap();
        let pki = Pki::generate(dir.path()).unwrap();
        for (path, label) in [
            (&pki.ca_cert, "CERTIFICATE"),
            (&pki.serving_cert, "CERTIFICATE"),
            (&pki.serving_key, "PRIVATE KEY"),
            (&pki.service_account_key, "PRIVATE KEY"),
            (&pki.service_account_pub, "PUBLIC KEY"),
        ] {
            let text = std::fs::read_to_string(path).unwrap();
            assert!(
                text.starts_with(&format!("-----BEGIN {label}-----")),
                "{}: {text}",
                path.display()
            );
        }
        assert_ne!(
            std::fs::read_to_string(&pki.ca_cert).unwrap(),
            std::fs::read_to_string(&pki.serving_cert).unwrap()
        );
    }
}
