//! The independent OIDC provider the sign-in tests run against: the npm package `oidc-provider`
//! from hack/oidc (committed lockfile), served over TLS with a generated CA. Included by path from
//! backend/tests/oidc.rs and cli/tests/login_oidc.rs.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use rcgen::{BasicConstraints, CertificateParams, CertifiedIssuer, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use tokio::io::AsyncBufReadExt as _;

/// The node package's folder.
pub fn hack_oidc() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../hack/oidc")
}

/// Whether the provider can run here; `false` means skip `what` (never with KBIND_REQUIRE_OIDC=1).
pub fn provider_available(what: &str) -> bool {
    let node = std::process::Command::new("node")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    let package = hack_oidc().join("node_modules/oidc-provider/package.json").exists();
    if node && package {
        return true;
    }
    let why = if node {
        "hack/oidc/node_modules is missing (run `npm ci --prefix hack/oidc`)"
    } else {
        "node is not installed"
    };
    assert!(
        std::env::var("KBIND_REQUIRE_OIDC").as_deref() != Ok("1"),
        "KBIND_REQUIRE_OIDC=1 but {why}"
    );
    eprintln!("skipped: {what} needs oidc-provider: {why}");
    false
}

/// A CA and a serving certificate for 127.0.0.1 under `dir`: (CA, certificate, key) paths.
pub fn write_pki(dir: &Path) -> (PathBuf, PathBuf, PathBuf) {
    let mut ca = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca = CertifiedIssuer::self_signed(ca, KeyPair::generate().expect("CA key")).expect("CA");
    let mut serving = CertificateParams::new(vec!["127.0.0.1".to_owned()]).expect("params");
    serving.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let serving_key = KeyPair::generate().expect("serving key");
    let serving = serving.signed_by(&serving_key, &ca).expect("serving cert");
    let paths = (dir.join("ca.crt"), dir.join("tls.crt"), dir.join("tls.key"));
    std::fs::write(&paths.0, ca.pem()).expect("write CA");
    std::fs::write(&paths.1, serving.pem()).expect("write cert");
    std::fs::write(&paths.2, serving_key.serialize_pem()).expect("write key");
    paths
}

/// The running provider; dropping it ends node (killed, and its stdin closes).
pub struct Provider {
    /// Its issuer URL.
    pub issuer: String,
    _child: tokio::process::Child,
}

/// Starts `node server.mjs` with `env` (its `OIDC_*` settings) serving TLS with `cert` and `key`,
/// and waits for the issuer line it prints once listening.
pub async fn start_provider(env: &[(&str, String)], cert: &Path, key: &Path) -> Provider {
    let mut command = tokio::process::Command::new("node");
    command
        .arg("server.mjs")
        .current_dir(hack_oidc())
        .env("OIDC_TLS_CERT", cert)
        .env("OIDC_TLS_KEY", key);
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("node starts");
    let stdout = child.stdout.take().expect("piped stdout");
    let mut lines = tokio::io::BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(30), lines.next_line())
        .await
        .expect("oidc-provider did not print its issuer within 30 s")
        .expect("read node's stdout")
        .expect("node exited before printing its issuer (see its stderr above)");
    let ready: serde_json::Value = serde_json::from_str(&first).expect("a JSON line");
    let issuer = ready["issuer"].as_str().expect("issuer").to_owned();
    Provider { issuer, _child: child }
}
