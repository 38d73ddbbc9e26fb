//! The per-gateway credential cache: one JSON file per gateway under `<config_dir>/credentials`,
//! mode 0600 in a 0700 folder, plus a `current` file naming the gateway commands use by default.

use std::io::Write;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::error::{CliError, Result};

/// A cached credential for one gateway. Never printed.
#[derive(Serialize, Deserialize, Clone)]
#[serde(rename_all = "camelCase")]
pub struct Credential {
    /// The gateway's URL, as given to `login`.
    pub gateway: String,
    /// The bearer token (a static token or an OIDC ID token).
    pub token: String,
    /// The subject the gateway knows the caller as.
    pub subject: String,
    /// When the token stops working (RFC 3339), when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at: Option<String>,
    /// The OIDC issuer signed in at (an OIDC login): later logins to this gateway must use it
    /// unless `--oidc-issuer` names another.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oidc_issuer: Option<String>,
}

impl std::fmt::Debug for Credential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Credential")
            .field("gateway", &self.gateway)
            .field("subject", &self.subject)
            .finish_non_exhaustive()
    }
}

/// A gateway URL in the normal form used as the cache key (no trailing slash).
pub fn normalize(gateway: &str) -> String {
    gateway.trim_end_matches('/').to_string()
}

fn file_name(gateway: &str) -> String {
    let key: String = normalize(gateway)
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{key}.json")
}

fn credentials_dir(config_dir: &Path) -> PathBuf {
    config_dir.join("credentials")
}

/// Stores `cred` and makes its gateway the current one.
pub fn save(config_dir: &Path, cred: &Credential) -> Result<PathBuf> {
    let dir = credentials_dir(config_dir);
    create_private_dir(&dir)?;
    let path = dir.join(file_name(&cred.gateway));
    let text = serde_json::to_vec_pretty(cred).map_err(|e| CliError::failed("cannot encode the credential", e))?;
    write_private(&path, &text)?;
    write_private(&config_dir.join("current"), normalize(&cred.gateway).as_bytes())?;
    Ok(path)
}

/// The credential for `gateway`, or for the current gateway when `None`.
pub fn load(config_dir: &Path, gateway: Option<&str>) -> Result<Credential> {
    let gateway = match gateway {
        Some(g) => normalize(g),
        None => current(config_dir).ok_or_else(|| {
            CliError::Unauthorized(
                "not logged in; run `kbind login <gateway-url>` (OIDC in a browser) or `kbind login <gateway-url> --token <token>` first"
                    .into(),
            )
        })?,
    };
    let cred = read(config_dir, &gateway)?;
    if let Some(expires) = &cred.expires_at
        && let Ok(at) = expires.parse::<jiff::Timestamp>()
        && at < jiff::Timestamp::now()
    {
        return Err(CliError::Unauthorized(format!(
            "your sign-in to {gateway} expired; run `kbind login {gateway}` again"
        )));
    }
    Ok(cred)
}

/// The OIDC issuer of the last sign-in to `gateway`, even when that credential expired.
pub fn previous_issuer(config_dir: &Path, gateway: &str) -> Option<String> {
    read(config_dir, gateway).ok()?.oidc_issuer
}

/// The stored credential for `gateway`, expired or not.
fn read(config_dir: &Path, gateway: &str) -> Result<Credential> {
    let path = credentials_dir(config_dir).join(file_name(gateway));
    let text = match std::fs::read(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(CliError::Unauthorized(format!(
                "not logged in to {gateway}; run `kbind login {gateway}` (OIDC in a browser) or `kbind login {gateway} --token <token>` first"
            )));
        }
        Err(e) => return Err(CliError::failed(&format!("cannot read {}", path.display()), e)),
    };
    serde_json::from_slice(&text).map_err(|_| {
        CliError::Unauthorized(format!(
            "the cached credential for {gateway} is damaged; run `kbind login {gateway}` again"
        ))
    })
}

/// The current gateway, when one is set.
pub fn current(config_dir: &Path) -> Option<String> {
    let text = std::fs::read_to_string(config_dir.join("current")).ok()?;
    let text = text.trim();
    (!text.is_empty()).then(|| text.to_string())
}

/// Forgets the credential of `gateway` (or the current one); returns the gateway forgotten.
pub fn remove(config_dir: &Path, gateway: Option<&str>) -> Result<Option<String>> {
    let Some(gateway) = gateway.map(normalize).or_else(|| current(config_dir)) else {
        return Ok(None);
    };
    let path = credentials_dir(config_dir).join(file_name(&gateway));
    let existed = match std::fs::remove_file(&path) {
        Ok(()) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(CliError::failed(&format!("cannot remove {}", path.display()), e)),
    };
    if current(config_dir).as_deref() == Some(gateway.as_str()) {
        let _ = std::fs::remove_file(config_dir.join("current"));
    }
    Ok(existed.then_some(gateway))
}

fn create_private_dir(dir: &Path) -> Result<()> {
    use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .map_err(|e| CliError::failed(&format!("cannot create {}", dir.display()), e))?;
    std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))
        .map_err(|e| CliError::failed(&format!("cannot restrict {}", dir.display()), e))
}

/// Writes through a 0600 temporary file and renames it, so the secret is never world-readable.
fn write_private(path: &Path, bytes: &[u8]) -> Result<()> {
    use std::os::unix::fs::OpenOptionsExt;
    if let Some(parent) = path.parent() {
        create_private_dir(parent)?;
    }
    let tmp = path.with_extension("tmp");
    let _ = std::fs::remove_file(&tmp);
    let fail = |e: std::io::Error| CliError::failed(&format!("cannot write {}", path.display()), e);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&tmp)
        .map_err(fail)?;
    file.write_all(bytes).map_err(fail)?;
    file.sync_all().map_err(fail)?;
    std::fs::rename(&tmp, path).map_err(fail)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    #[test]
    fn saved_credentials_are_private_and_keyed_by_gateway() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cred = Credential {
            gateway: "http://127.0.0.1:8080/".into(),
            token: "t0k3n".into(),
            subject: "token:alice".into(),
            expires_at: None,
            oidc_issuer: None,
        };
        let path = save(dir.path(), &cred).expect("saved");
        let mode = std::fs::metadata(&path).expect("exists").permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let loaded = load(dir.path(), None).expect("current gateway loads");
        assert_eq!(loaded.token, "t0k3n");
        assert!(!format!("{loaded:?}").contains("t0k3n"), "Debug never shows the token");
        assert_eq!(
            remove(dir.path(), None).expect("removed").as_deref(),
            Some("http://127.0.0.1:8080")
        );
        assert!(matches!(load(dir.path(), None), Err(CliError::Unauthorized(_))));
    }

    #[test]
    fn an_expired_credential_asks_to_log_in_again() {
        let dir = tempfile::tempdir().expect("temp dir");
        let cred = Credential {
            gateway: "https://gw".into(),
            token: "t".into(),
            subject: "s".into(),
            expires_at: Some("2001-01-01T00:00:00Z".into()),
            oidc_issuer: Some("https://idp".into()),
        };
        save(dir.path(), &cred).expect("saved");
        let err = load(dir.path(), Some("https://gw")).expect_err("expired");
        assert!(err.to_string().contains("kbind login https://gw"), "{err}");
        assert_eq!(
            previous_issuer(dir.path(), "https://gw").as_deref(),
            Some("https://idp")
        );
    }
}
