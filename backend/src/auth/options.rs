//! The auth flags and [`authenticator`], which builds the chain of the enabled methods.

use std::path::PathBuf;
use std::sync::Arc;

use openidconnect::{ClientId, ClientSecret, IssuerUrl, RedirectUrl};

use super::Authenticator;
use super::chain::Chain;
use super::clock::Clock;
use super::oidc::{CALLBACK_PATH, Oidc, OidcConfig};
use super::sealed::SessionKey;
use super::static_tokens::StaticTokens;

/// How callers sign in to the gateway (any combination; at least one).
#[derive(clap::Args, Debug, Clone, Default)]
// The group id must be unique among the flattened Options of `kbind-backend run`.
#[group(id = "auth-options")]
#[command(next_help_heading = "Authentication")]
pub struct Options {
    /// Static bearer tokens: lines `token,user` (kube-apiserver's token file format; further
    /// columns ignored, `#` comments). A caller is `token:<user>`.
    #[arg(long, value_name = "PATH")]
    pub token_file: Option<PathBuf>,

    /// OIDC issuer URL; enables browser sign-in (code + PKCE) and ID tokens as bearer tokens.
    #[arg(long, value_name = "URL", requires_all = ["oidc_client_id", "session_key_file"])]
    pub oidc_issuer_url: Option<String>,

    /// The gateway's OIDC client id (the audience of accepted ID tokens).
    #[arg(long, value_name = "ID")]
    pub oidc_client_id: Option<String>,

    /// The public native OIDC client `kbind login` signs in as (PKCE, loopback redirect
    /// `http://127.0.0.1/callback` on any port); its ID tokens are accepted too. Absent → no CLI sign-in.
    #[arg(long, value_name = "ID")]
    pub oidc_cli_client_id: Option<String>,

    /// File holding the OIDC client secret; absent → a public client (PKCE only).
    #[arg(long, value_name = "PATH")]
    pub oidc_client_secret_file: Option<PathBuf>,

    /// Where the IdP redirects after sign-in; default `<public-url>/auth/oidc/callback`.
    #[arg(long, value_name = "URL")]
    pub oidc_redirect_url: Option<String>,

    /// PEM file of extra CA certificates to trust for the OIDC issuer (a private CA).
    #[arg(long, value_name = "PATH")]
    pub oidc_ca_file: Option<PathBuf>,

    /// File with at least 32 bytes of secret material sealing login state and session cookies;
    /// every gateway replica must have the same.
    #[arg(long, value_name = "PATH")]
    pub session_key_file: Option<PathBuf>,
}

/// Why the auth methods could not be set up (at start, before serving).
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    /// A file named by a flag could not be read.
    #[error("failed to read {what} {path}: {source}")]
    ReadFile {
        /// The flag.
        what: &'static str,
        /// The file.
        path: PathBuf,
        /// Why.
        #[source]
        source: std::io::Error,
    },
    /// The token file is malformed.
    #[error("--token-file {path}, line {line}: {problem}")]
    TokenFile {
        /// The file.
        path: PathBuf,
        /// The 1-based line (0: the whole file).
        line: usize,
        /// What is wrong (never the token).
        problem: String,
    },
    /// The session key is unusable.
    #[error("--session-key-file: {0}")]
    SessionKey(String),
    /// The OIDC flags are inconsistent.
    #[error("OIDC: {0}")]
    Oidc(String),
    /// No method is enabled.
    #[error("no sign-in method is configured: give --token-file and/or --oidc-issuer-url")]
    NoMethod,
}

/// The enabled methods as one [`Chain`]: static tokens first, then OIDC. `public_url` is the
/// gateway's external URL (`--public-url`): the default redirect URL, the session cookie's path
/// and whether cookies are `Secure` (https) derive from it.
pub fn authenticator(opts: &Options, public_url: &str) -> Result<Arc<Chain>, SetupError> {
    authenticator_with_clock(opts, public_url, Clock::system())
}

/// [`authenticator`] on an injected clock (tests).
pub fn authenticator_with_clock(opts: &Options, public_url: &str, clock: Clock) -> Result<Arc<Chain>, SetupError> {
    let mut methods: Vec<Arc<dyn Authenticator>> = Vec::new();
    if let Some(path) = &opts.token_file {
        methods.push(Arc::new(StaticTokens::from_file(path)?));
    }
    match &opts.oidc_issuer_url {
        Some(issuer) => methods.push(Arc::new(Oidc::new(oidc_config(opts, issuer, public_url)?, clock)?)),
        None => {
            let orphans = [
                ("--oidc-client-id", opts.oidc_client_id.is_some()),
                ("--oidc-cli-client-id", opts.oidc_cli_client_id.is_some()),
                ("--oidc-client-secret-file", opts.oidc_client_secret_file.is_some()),
                ("--oidc-redirect-url", opts.oidc_redirect_url.is_some()),
                ("--oidc-ca-file", opts.oidc_ca_file.is_some()),
            ];
            if let Some((flag, _)) = orphans.iter().find(|(_, given)| *given) {
                return Err(SetupError::Oidc(format!("{flag} needs --oidc-issuer-url")));
            }
        }
    }
    if methods.is_empty() {
        return Err(SetupError::NoMethod);
    }
    Ok(Arc::new(Chain::new(methods)))
}

fn oidc_config(opts: &Options, issuer: &str, public_url: &str) -> Result<OidcConfig, SetupError> {
    let bad = |what: String| SetupError::Oidc(what);
    let issuer = IssuerUrl::new(issuer.to_owned())
        .map_err(|e| bad(format!("--oidc-issuer-url {issuer:?} is not a URL: {e}")))?;
    let client_id = opts
        .oidc_client_id
        .clone()
        .filter(|id| !id.trim().is_empty())
        .ok_or_else(|| bad("--oidc-client-id is required with --oidc-issuer-url".into()))?;
    let client_secret = match &opts.oidc_client_secret_file {
        None => None,
        Some(path) => {
            let secret = std::fs::read_to_string(path).map_err(|source| SetupError::ReadFile {
                what: "--oidc-client-secret-file",
                path: path.clone(),
                source,
            })?;
            let secret = secret.trim();
            if secret.is_empty() {
                return Err(bad(format!("--oidc-client-secret-file {} is empty", path.display())));
            }
            Some(ClientSecret::new(secret.to_owned()))
        }
    };
    let public =
        url::Url::parse(public_url).map_err(|e| bad(format!("the public URL {public_url:?} is not a URL: {e}")))?;
    let redirect = match &opts.oidc_redirect_url {
        Some(r) => r.clone(),
        None => format!("{}{CALLBACK_PATH}", public_url.trim_end_matches('/')),
    };
    let redirect_url = RedirectUrl::new(redirect.clone())
        .map_err(|e| bad(format!("the redirect URL {redirect:?} is not a URL: {e}")))?;
    let key_file = opts.session_key_file.as_ref().ok_or_else(|| {
        bad("--session-key-file is required with --oidc-issuer-url (the same file on every replica)".into())
    })?;
    let key = SessionKey::from_file(key_file)?;
    let extra_roots = match &opts.oidc_ca_file {
        None => Vec::new(),
        Some(path) => {
            let pem = std::fs::read(path).map_err(|source| SetupError::ReadFile {
                what: "--oidc-ca-file",
                path: path.clone(),
                source,
            })?;
            let roots = reqwest::Certificate::from_pem_bundle(&pem)
                .map_err(|e| bad(format!("--oidc-ca-file {}: {e}", path.display())))?;
            if roots.is_empty() {
                return Err(bad(format!("--oidc-ca-file {} holds no certificate", path.display())));
            }
            roots
        }
    };
    Ok(OidcConfig {
        issuer,
        client_id: ClientId::new(client_id),
        cli_client_id: opts
            .oidc_cli_client_id
            .clone()
            .filter(|id| !id.trim().is_empty())
            .map(ClientId::new),
        client_secret,
        redirect_url,
        cookie_path: match public.path().trim_end_matches('/') {
            "" => "/".to_owned(),
            prefix => prefix.to_owned(),
        },
        secure_cookies: public.scheme() == "https",
        key,
        extra_roots,
    })
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    fn file(text: &str) -> tempfile::NamedTempFile {
        let mut f = tempfile::NamedTempFile::new().expect("temp file");
        f.write_all(text.as_bytes()).expect("write");
        f
    }

    #[derive(clap::Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        auth: Options,
    }

    #[test]
    fn the_flags_parse_into_options() {
        use clap::Parser as _;
        let flags = Flags::try_parse_from([
            "gateway",
            "--token-file=/etc/kbind/tokens.csv",
            "--oidc-issuer-url=https://idp.example",
            "--oidc-client-id=kbind",
            "--oidc-client-secret-file=/etc/kbind/oidc-secret",
            "--oidc-redirect-url=https://kbind.example/auth/oidc/callback",
            "--oidc-ca-file=/etc/kbind/idp-ca.pem",
            "--session-key-file=/etc/kbind/session-key",
        ])
        .expect("parses");
        assert_eq!(flags.auth.oidc_client_id.as_deref(), Some("kbind"));
        assert_eq!(
            flags.auth.session_key_file,
            Some(PathBuf::from("/etc/kbind/session-key"))
        );
        let missing = Flags::try_parse_from(["gateway", "--oidc-issuer-url=https://idp.example"]);
        assert!(
            missing.is_err(),
            "an issuer without client id and session key is refused by clap"
        );
    }

    #[test]
    fn an_oidc_flag_without_the_issuer_is_an_error() {
        let tokens = file("t0ken-value-0123456789abcdef0123456,alice\n");
        let opts = Options {
            token_file: Some(tokens.path().to_owned()),
            oidc_client_id: Some("kbind".into()),
            ..Options::default()
        };
        let err = authenticator(&opts, "https://kbind.example").expect_err("orphan flag");
        assert!(
            err.to_string().contains("--oidc-client-id needs --oidc-issuer-url"),
            "{err}"
        );
    }

    #[test]
    fn redirect_url_cookie_path_and_secure_follow_the_public_url() {
        let key = file(&"k".repeat(40));
        let mut opts = Options {
            oidc_client_id: Some("kbind".into()),
            session_key_file: Some(key.path().to_owned()),
            ..Options::default()
        };
        let cfg = oidc_config(&opts, "https://idp.example", "https://kbind.example/portal/").expect("valid");
        assert_eq!(
            cfg.redirect_url.as_str(),
            "https://kbind.example/portal/auth/oidc/callback"
        );
        assert_eq!(cfg.cookie_path, "/portal");
        assert!(cfg.secure_cookies);
        opts.oidc_redirect_url = Some("https://login.kbind.example/cb".into());
        let cfg = oidc_config(&opts, "https://idp.example", "http://127.0.0.1:8080").expect("valid");
        assert_eq!(cfg.redirect_url.as_str(), "https://login.kbind.example/cb");
        assert_eq!(cfg.cookie_path, "/");
        assert!(!cfg.secure_cookies, "an http public URL cannot carry Secure cookies");
    }

    #[test]
    fn a_ca_file_without_a_certificate_is_refused() {
        let key = file(&"k".repeat(40));
        let ca = file("not a certificate\n");
        let opts = Options {
            oidc_client_id: Some("kbind".into()),
            session_key_file: Some(key.path().to_owned()),
            oidc_ca_file: Some(ca.path().to_owned()),
            ..Options::default()
        };
        let err = oidc_config(&opts, "https://idp.example", "https://kbind.example").expect_err("no cert");
        assert!(err.to_string().contains("--oidc-ca-file"), "{err}");
    }

    #[test]
    fn no_method_is_an_error_naming_the_flags() {
        let err = authenticator(&Options::default(), "https://kbind.example").expect_err("none");
        assert!(err.to_string().contains("--token-file"), "{err}");
    }

    #[test]
    fn oidc_needs_a_client_id_and_a_session_key() {
        let mut opts = Options {
            oidc_issuer_url: Some("https://idp.example".into()),
            ..Options::default()
        };
        let err = authenticator(&opts, "https://kbind.example").expect_err("no client id");
        assert!(err.to_string().contains("--oidc-client-id"), "{err}");
        opts.oidc_client_id = Some("kbind".into());
        let err = authenticator(&opts, "https://kbind.example").expect_err("no key");
        assert!(err.to_string().contains("--session-key-file"), "{err}");
        let key = file(&"k".repeat(40));
        opts.session_key_file = Some(key.path().to_owned());
        let chain = authenticator(&opts, "https://kbind.example/").expect("valid");
        let methods = chain.methods();
        assert_eq!(methods.len(), 1);
        assert_eq!(methods[0].kind, "oidc");
        assert_eq!(methods[0].login_path.as_deref(), Some("/auth/oidc/login"));
    }

    #[test]
    fn both_methods_are_listed_tokens_first() {
        let tokens = file("t0ken-value-0123456789abcdef0123456,alice\n");
        let key = file(&"k".repeat(40));
        let opts = Options {
            token_file: Some(tokens.path().to_owned()),
            oidc_issuer_url: Some("https://idp.example".into()),
            oidc_client_id: Some("kbind".into()),
            session_key_file: Some(key.path().to_owned()),
            ..Options::default()
        };
        let kinds: Vec<String> = authenticator(&opts, "https://kbind.example")
            .expect("valid")
            .methods()
            .into_iter()
            .map(|m| m.kind)
            .collect();
        assert_eq!(kinds, ["token", "oidc"]);
    }

    #[test]
    fn a_bad_token_file_is_refused_at_start_without_echoing_it() {
        let tokens = file("only-a-token-xyz\n");
        let opts = Options {
            token_file: Some(tokens.path().to_owned()),
            ..Options::default()
        };
        let err = authenticator(&opts, "https://kbind.example").expect_err("bad file");
        let text = err.to_string();
        assert!(text.contains("line 1"), "{text}");
        assert!(!text.contains("only-a-token-xyz"), "{text}");
    }
}
