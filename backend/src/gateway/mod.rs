//! The gateway: the HTTP API of contract §7 (`kbind_api::service`) and the embedded UI.
//!
//! [`router`] is the whole gateway as an `axum::Router` value over a [`Gateway`] state. Everything
//! two replicas must agree on (Grants, pickups, namespace claims) lives in the provider cluster;
//! a replica keeps only caches it can rebuild (the catalog's reflector stores).

mod bind;
mod bundle;
mod catalog;
mod error;
mod grants;
mod http;
pub(crate) mod metrics;
mod naming;
mod pickup;
mod ratelimit;
mod serve;
mod ui;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{delete, get, post};
use kbind_api::service::path;
use kbind_cluster::{ClusterClient, SharedClock, SystemClock};

use crate::auth::Authenticator;
use crate::issuer::Issuer;

pub use bundle::{Bundle, BundleFormat, bundle_objects};
pub use error::GatewayError;
pub use metrics::Metrics;
pub use serve::{ConnectionLimits, serve};

/// How long a pickup URL works after a bind (contract §7).
pub const PICKUP_TTL: Duration = Duration::from_secs(5 * 60);

/// The gateway's flags (`kbind-backend run --gateway ...`).
#[derive(clap::Args, Debug, Clone)]
// The group id must be unique among the flattened Options of `kbind-backend run`.
#[group(id = "gateway-options")]
#[command(next_help_heading = "Gateway")]
pub struct Options {
    /// Address the gateway listens on.
    #[arg(long = "listen", env = "KBIND_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    /// The gateway's external URL (what browsers and the CLI reach); pickup URLs start with it.
    #[arg(long = "public-url", env = "KBIND_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// The provider's name: shown to users and naming the bundle's Connection.
    #[arg(long = "provider-name", env = "KBIND_PROVIDER_NAME")]
    pub provider_name: Option<String>,
    /// The provider API server URL issued kubeconfigs point at (https; never an in-cluster address).
    #[arg(long = "provider-url", env = "KBIND_PROVIDER_URL")]
    pub provider_url: Option<String>,
    /// A PEM file with the CA bundle issued kubeconfigs trust for `--provider-url`.
    #[arg(long = "provider-ca", env = "KBIND_PROVIDER_CA")]
    pub provider_ca: Option<PathBuf>,
    /// How long a bind waits for the issuer to provision the Grant.
    #[arg(long = "bind-timeout", default_value = "30s", value_parser = parse_duration)]
    pub bind_timeout: Duration,
    /// Binds per minute one client may make (after the burst).
    #[arg(long = "bind-rate", default_value_t = 30)]
    pub bind_rate_per_minute: u32,
    /// Binds one client may make at once before the rate applies.
    #[arg(long = "bind-burst", default_value_t = 10)]
    pub bind_burst: u32,
    /// Pickups per minute one client may make (after the burst).
    #[arg(long = "pickup-rate", default_value_t = 60)]
    pub pickup_rate_per_minute: u32,
    /// Pickups one client may make at once before the rate applies.
    #[arg(long = "pickup-burst", default_value_t = 20)]
    pub pickup_burst: u32,
    /// Failed sign-ins per minute one client may make with one credential (after the burst);
    /// beyond it that credential from that client answers 429, unchecked, until the allowance
    /// refills. Other credentials, from that client too, are not affected.
    #[arg(long = "auth-failure-rate", default_value_t = 10)]
    pub auth_failure_rate_per_minute: u32,
    /// Failed sign-ins one client may make with one credential before the rate applies.
    #[arg(long = "auth-failure-burst", default_value_t = 10)]
    pub auth_failure_burst: u32,
    /// How many reverse proxies in front of the gateway append the address they were connected
    /// from to `X-Forwarded-For`; the client is the hop the nearest untrusted one reported. 0:
    /// the header is ignored and the peer address is the client.
    #[arg(long = "trusted-proxies", default_value_t = 0, value_name = "N")]
    pub trusted_proxies: usize,
    /// Deprecated spelling of `--trusted-proxies=1`.
    #[arg(long = "trust-forwarded-for", hide = true, conflicts_with = "trusted_proxies")]
    pub trust_forwarded_for: bool,
    /// Largest request body accepted, in bytes.
    #[arg(long = "max-body-bytes", default_value_t = 64 * 1024)]
    pub max_body_bytes: usize,
    /// How long a client may take to send a request's body, counted from its headers; a body
    /// still incomplete then is answered 408 and its connection closed.
    #[arg(long = "body-read-timeout", default_value = "10s", value_parser = parse_duration)]
    pub body_read_timeout: Duration,
    /// How long a client may take to send a request's headers; an idle keep-alive connection,
    /// and a response the client does not read for this long, are closed after it too.
    #[arg(long = "header-read-timeout", default_value = "30s", value_parser = parse_duration)]
    pub header_read_timeout: Duration,
    /// Connections served at once; beyond it new ones wait to be accepted.
    #[arg(long = "max-connections", default_value_t = 1024)]
    pub max_connections: usize,
}

/// `30s`, `5m`, `1h` or plain seconds.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(at) => text.split_at(at),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 30s, 5m or 1h"))?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?} is not a duration like 30s, 5m or 1h")),
    };
    Ok(Duration::from_secs(secs))
}

/// A rate: `per_minute` requests replenished evenly, up to `burst` at once.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rate {
    /// Requests per minute.
    pub per_minute: u32,
    /// Requests at once.
    pub burst: u32,
}

/// The gateway's checked configuration (see [`Options::config`]).
#[derive(Debug, Clone)]
pub struct Config {
    /// External URL without a trailing slash.
    pub public_url: String,
    /// The provider's name.
    pub provider_name: String,
    /// The provider API server URL of issued kubeconfigs.
    pub provider_url: String,
    /// The PEM CA bundle of issued kubeconfigs.
    pub provider_ca_pem: String,
    /// How long a bind waits for the issuer.
    pub bind_timeout: Duration,
    /// How long a pickup URL works.
    pub pickup_ttl: Duration,
    /// Bind rate limit per client.
    pub bind_rate: Rate,
    /// Pickup rate limit per client.
    pub pickup_rate: Rate,
    /// Failed sign-in limit per client and credential.
    pub auth_failure_rate: Rate,
    /// Reverse proxies in front whose `X-Forwarded-For` entries are believed.
    pub trusted_proxies: usize,
    /// Largest request body, in bytes.
    pub max_body_bytes: usize,
    /// How long a request's body may take to arrive after its headers.
    pub body_read_timeout: Duration,
    /// Header-read timeout and connection limit of [`serve`].
    pub connections: ConnectionLimits,
    /// Namespace of the heartbeat Leases.
    pub lease_namespace: String,
}

/// Why the gateway's flags cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// A flag the gateway needs is missing.
    #[error("--gateway needs {0}")]
    Missing(&'static str),
    /// A flag's value is unusable.
    #[error("{flag}: {message}")]
    Invalid {
        /// The flag.
        flag: &'static str,
        /// What is wrong and what to do.
        message: String,
    },
    /// The CA file could not be read.
    #[error("failed to read --provider-ca {path}")]
    ReadCa {
        /// The file.
        path: String,
        /// Why.
        #[source]
        source: std::io::Error,
    },
}

impl Config {
    /// A configuration with the defaults of [`Options`] for everything but the four required values.
    pub fn new(
        public_url: &str,
        provider_name: &str,
        provider_url: &str,
        provider_ca_pem: &str,
    ) -> Result<Self, ConfigError> {
        let public_url = public_url.trim_end_matches('/').to_string();
        if !(public_url.starts_with("https://") || public_url.starts_with("http://")) {
            return Err(ConfigError::Invalid {
                flag: "--public-url",
                message: format!("{public_url:?} is not an http(s) URL"),
            });
        }
        if !provider_url.starts_with("https://") {
            return Err(ConfigError::Invalid {
                flag: "--provider-url",
                message: format!(
                    "{provider_url:?} is not an https URL; issued kubeconfigs never use plain http or skip TLS verification"
                ),
            });
        }
        if !is_dns_label(provider_name) {
            return Err(ConfigError::Invalid {
                flag: "--provider-name",
                message: format!(
                    "{provider_name:?} is not a DNS label (lower-case letters, digits and '-', at most 63)"
                ),
            });
        }
        if !provider_ca_pem.contains("-----BEGIN CERTIFICATE-----") {
            return Err(ConfigError::Invalid {
                flag: "--provider-ca",
                message: "the file holds no PEM certificate".into(),
            });
        }
        Ok(Config {
            public_url,
            provider_name: provider_name.to_string(),
            provider_url: provider_url.trim_end_matches('/').to_string(),
            provider_ca_pem: provider_ca_pem.to_string(),
            bind_timeout: Duration::from_secs(30),
            pickup_ttl: PICKUP_TTL,
            bind_rate: Rate {
                per_minute: 30,
                burst: 10,
            },
            pickup_rate: Rate {
                per_minute: 60,
                burst: 20,
            },
            auth_failure_rate: Rate {
                per_minute: 10,
                burst: 10,
            },
            trusted_proxies: 0,
            max_body_bytes: 64 * 1024,
            body_read_timeout: Duration::from_secs(10),
            connections: ConnectionLimits {
                header_read_timeout: Duration::from_secs(30),
                max_connections: 1024,
            },
            lease_namespace: kbind_api::consts::lease::NAMESPACE.to_string(),
        })
    }
}

impl Options {
    /// Checks the flags and reads the CA file.
    pub fn config(&self) -> Result<Config, ConfigError> {
        let public_url = self.public_url.as_deref().ok_or(ConfigError::Missing("--public-url"))?;
        let provider_name = self
            .provider_name
            .as_deref()
            .ok_or(ConfigError::Missing("--provider-name"))?;
        let provider_url = self
            .provider_url
            .as_deref()
            .ok_or(ConfigError::Missing("--provider-url"))?;
        let ca_path = self.provider_ca.as_ref().ok_or(ConfigError::Missing("--provider-ca"))?;
        let ca = std::fs::read_to_string(ca_path).map_err(|source| ConfigError::ReadCa {
            path: ca_path.display().to_string(),
            source,
        })?;
        let mut config = Config::new(public_url, provider_name, provider_url, &ca)?;
        for (flag, value) in [
            ("--bind-rate", self.bind_rate_per_minute),
            ("--bind-burst", self.bind_burst),
            ("--pickup-rate", self.pickup_rate_per_minute),
            ("--pickup-burst", self.pickup_burst),
            ("--auth-failure-rate", self.auth_failure_rate_per_minute),
            ("--auth-failure-burst", self.auth_failure_burst),
        ] {
            if value == 0 {
                return Err(ConfigError::Invalid {
                    flag,
                    message: "must be at least 1".into(),
                });
            }
        }
        config.bind_timeout = self.bind_timeout;
        config.bind_rate = Rate {
            per_minute: self.bind_rate_per_minute,
            burst: self.bind_burst,
        };
        config.pickup_rate = Rate {
            per_minute: self.pickup_rate_per_minute,
            burst: self.pickup_burst,
        };
        config.auth_failure_rate = Rate {
            per_minute: self.auth_failure_rate_per_minute,
            burst: self.auth_failure_burst,
        };
        config.trusted_proxies = self.trusted_proxies;
        if self.trust_forwarded_for {
            // Its old meaning (the first entry, which the client writes) let anyone pick their
            // own rate-limit key; one trusted proxy is what it was documented for.
            tracing::warn!("--trust-forwarded-for is deprecated: it now means --trusted-proxies=1");
            config.trusted_proxies = 1;
        }
        config.max_body_bytes = self.max_body_bytes;
        if self.body_read_timeout.is_zero() {
            return Err(ConfigError::Invalid {
                flag: "--body-read-timeout",
                message: "must be longer than 0s".into(),
            });
        }
        config.body_read_timeout = self.body_read_timeout;
        config.connections = self.connection_limits()?;
        Ok(config)
    }

    /// The checked `--header-read-timeout` and `--max-connections`: the gateway's listener and
    /// `--metrics-listen` enforce them.
    pub fn connection_limits(&self) -> Result<ConnectionLimits, ConfigError> {
        if self.header_read_timeout.is_zero() {
            return Err(ConfigError::Invalid {
                flag: "--header-read-timeout",
                message: "must be longer than 0s".into(),
            });
        }
        if self.max_connections == 0 {
            return Err(ConfigError::Invalid {
                flag: "--max-connections",
                message: "must be at least 1".into(),
            });
        }
        Ok(ConnectionLimits {
            header_read_timeout: self.header_read_timeout,
            max_connections: self.max_connections,
        })
    }
}

/// The gateway's shared state: the provider, the sign-in methods, the issuer and the caches.
#[derive(Clone)]
pub struct Gateway {
    inner: Arc<Inner>,
}

struct Inner {
    config: Config,
    provider: Arc<dyn ClusterClient>,
    authenticators: crate::auth::Chain,
    issuer: Arc<dyn Issuer>,
    clock: SharedClock,
    catalog: catalog::Stores,
    metrics: Metrics,
    /// Failed sign-ins per client and credential (see [`http::Authenticated`]).
    auth_failures: ratelimit::Limiter<ratelimit::CredentialKey>,
    provider_check: tokio::sync::Mutex<Option<(tokio::time::Instant, Option<String>)>>,
    /// How Grants are named (keyed; see [`naming`]).
    naming: naming::Naming,
}

impl Gateway {
    /// A gateway over `provider`; callers are recognised by the first of `authenticators` that
    /// knows them. Starts the catalog's watches, so it needs a tokio runtime.
    pub fn new(
        config: Config,
        provider: Arc<dyn ClusterClient>,
        authenticators: Vec<Arc<dyn Authenticator>>,
        issuer: Arc<dyn Issuer>,
    ) -> Self {
        Self::with_clock(config, provider, authenticators, issuer, Arc::new(SystemClock))
    }

    /// [`Gateway::new`] with an injected wall clock (pickup expiry, heartbeat ages).
    pub fn with_clock(
        config: Config,
        provider: Arc<dyn ClusterClient>,
        authenticators: Vec<Arc<dyn Authenticator>>,
        issuer: Arc<dyn Issuer>,
        clock: SharedClock,
    ) -> Self {
        Self::with_metrics(config, provider, authenticators, issuer, clock, Metrics::new())
    }

    /// [`Gateway::with_clock`] serving `metrics` (e.g. [`Metrics::with_others`]) on `/metrics`.
    pub fn with_metrics(
        config: Config,
        provider: Arc<dyn ClusterClient>,
        authenticators: Vec<Arc<dyn Authenticator>>,
        issuer: Arc<dyn Issuer>,
        clock: SharedClock,
        metrics: Metrics,
    ) -> Self {
        let catalog = catalog::Stores::start(provider.clone());
        Gateway {
            inner: Arc::new(Inner {
                auth_failures: ratelimit::Limiter::new(config.auth_failure_rate),
                config,
                provider,
                authenticators: crate::auth::Chain::new(authenticators),
                issuer,
                clock,
                catalog,
                metrics,
                provider_check: tokio::sync::Mutex::new(None),
                naming: naming::Naming::default(),
            }),
        }
    }

    /// The checked configuration.
    pub fn config(&self) -> &Config {
        &self.inner.config
    }

    /// The metrics registry `/metrics` serves.
    pub fn metrics(&self) -> &Metrics {
        &self.inner.metrics
    }

    fn provider(&self) -> &dyn ClusterClient {
        self.inner.provider.as_ref()
    }

    fn now(&self) -> jiff::Timestamp {
        self.inner.clock.now()
    }
}

/// The whole gateway: API, health, metrics, the sign-in methods' routes and the embedded UI.
pub fn router(state: Gateway) -> Router {
    let config = state.config().clone();
    let mut app: Router = Router::new()
        .merge(api_routes(&config))
        .merge(health_routes())
        .fallback(ui::serve)
        .method_not_allowed_fallback(http::method_not_allowed)
        .with_state(state.clone());
    app = app.merge(crate::auth::Authenticator::routes(&state.inner.authenticators));
    app.layer(DefaultBodyLimit::max(config.max_body_bytes))
        .layer(axum::middleware::from_fn_with_state(
            config.body_read_timeout,
            http::body_deadline,
        ))
        .layer(axum::middleware::from_fn_with_state(state, http::observe))
}

fn api_routes(config: &Config) -> Router<Gateway> {
    let limit = |rate| {
        axum::middleware::from_fn_with_state(
            ratelimit::RouteLimit::new(rate, config.trusted_proxies),
            ratelimit::enforce,
        )
    };
    let bind = Router::new()
        .route(path::BIND, post(bind::bind))
        .route_layer(limit(config.bind_rate));
    let pickup = Router::new()
        .route(&format!("{}/{{id}}", path::PICKUP), get(pickup::pickup))
        .route_layer(limit(config.pickup_rate));
    Router::new()
        .route(path::PROVIDER, get(http::provider))
        .route(path::WHOAMI, get(http::whoami))
        .route(path::CATALOG, get(catalog::catalog))
        .route(path::GRANTS, get(grants::list))
        .route(&format!("{}/{{name}}", path::GRANTS), delete(grants::revoke))
        .route(
            &format!("{}/{{name}}/namespaces/{{namespace}}", path::GRANTS),
            delete(grants::drop_namespace),
        )
        .merge(bind)
        .merge(pickup)
}

fn health_routes() -> Router<Gateway> {
    Router::new()
        .route(path::HEALTHZ, get(http::healthz))
        .route(path::READYZ, get(http::readyz))
        .route(path::METRICS, get(metrics::serve))
}

/// Whether `name` is an RFC 1123 DNS label (namespaces, provider names).
pub(crate) fn is_dns_label(name: &str) -> bool {
    name.len() <= 63 && is_name_part(name)
}

/// Lower-case letters, digits and '-', starting and ending alphanumeric, not empty.
fn is_name_part(part: &str) -> bool {
    !part.is_empty()
        && part
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !part.starts_with('-')
        && !part.ends_with('-')
}

/// Whether `name` is a Kubernetes object name (a DNS-1123 subdomain as the API server checks
/// it: at most 253 characters, dot-separated parts of lower-case letters, digits and '-' that
/// start and end alphanumeric; unlike DNS, a part may be longer than 63).
pub(crate) fn is_dns_subdomain(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_name_part)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_with_units() {
        assert_eq!(parse_duration("30s"), Ok(Duration::from_secs(30)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("250ms"), Ok(Duration::from_millis(250)));
        assert!(parse_duration("soon").is_err());
        assert!(parse_duration("3d").is_err());
    }

    #[test]
    fn config_refuses_plain_http_providers_and_missing_certificates() {
        let ca = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        assert!(Config::new("https://kbind.example.org/", "acme", "https://api.example.org:6443", ca).is_ok());
        let err = Config::new("https://kbind.example.org", "acme", "http://api.example.org", ca).unwrap_err();
        assert!(err.to_string().contains("--provider-url"), "{err}");
        let err = Config::new("https://kbind.example.org", "acme", "https://api.example.org", "nope").unwrap_err();
        assert!(err.to_string().contains("--provider-ca"), "{err}");
        let err = Config::new("https://kbind.example.org", "Acme Corp", "https://api.example.org", ca).unwrap_err();
        assert!(err.to_string().contains("--provider-name"), "{err}");
        let ok = Config::new("https://kbind.example.org/", "acme", "https://api.example.org/", ca).unwrap();
        assert_eq!(ok.public_url, "https://kbind.example.org");
        assert_eq!(ok.provider_url, "https://api.example.org");
    }

    #[derive(clap::Parser, Debug)]
    struct Flags {
        #[command(flatten)]
        gateway: Options,
    }

    fn config_of(extra: &[&str]) -> Result<Config, String> {
        use clap::Parser as _;
        let mut ca = tempfile::NamedTempFile::new().expect("temp file");
        std::io::Write::write_all(
            &mut ca,
            b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        let ca_flag = format!("--provider-ca={}", ca.path().display());
        let mut args = vec![
            "gateway",
            "--public-url=https://kbind.example.org",
            "--provider-name=acme",
            "--provider-url=https://api.example.org",
            &ca_flag,
        ];
        args.extend_from_slice(extra);
        let flags = Flags::try_parse_from(args).map_err(|e| e.to_string())?;
        flags.gateway.config().map_err(|e| e.to_string())
    }

    #[test]
    fn trusted_proxies_default_to_none_and_the_old_flag_means_one() {
        assert_eq!(config_of(&[]).expect("valid").trusted_proxies, 0);
        assert_eq!(config_of(&["--trusted-proxies=2"]).expect("valid").trusted_proxies, 2);
        assert_eq!(config_of(&["--trust-forwarded-for"]).expect("valid").trusted_proxies, 1);
        let both = config_of(&["--trust-forwarded-for", "--trusted-proxies=2"]).expect_err("conflict");
        assert!(both.contains("--trusted-proxies"), "{both}");
        let config = config_of(&["--auth-failure-rate=5", "--auth-failure-burst=3"]).expect("valid");
        assert_eq!(
            config.auth_failure_rate,
            Rate {
                per_minute: 5,
                burst: 3
            }
        );
        let zero = config_of(&["--auth-failure-burst=0"]).expect_err("zero burst");
        assert!(zero.contains("--auth-failure-burst"), "{zero}");
    }

    #[test]
    fn the_body_read_timeout_defaults_to_ten_seconds_and_is_never_zero() {
        assert_eq!(
            config_of(&[]).expect("valid").body_read_timeout,
            Duration::from_secs(10)
        );
        let set = config_of(&["--body-read-timeout=3s"]).expect("valid");
        assert_eq!(set.body_read_timeout, Duration::from_secs(3));
        let zero = config_of(&["--body-read-timeout=0s"]).expect_err("zero");
        assert!(zero.contains("--body-read-timeout"), "{zero}");
    }

    #[test]
    fn dns_names() {
        assert!(is_dns_label("team-a"));
        assert!(!is_dns_label("Team"));
        assert!(!is_dns_label("-a"));
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(is_dns_subdomain("widgets.example.org"));
        assert!(!is_dns_subdomain("widgets..org"));
        // What the API server accepts as an object name, the gateway accepts as an Export name.
        assert!(is_dns_subdomain(&format!("widgets-{}", "x".repeat(62))));
        assert!(!is_dns_subdomain(&"a".repeat(254)));
        assert!(!is_dns_subdomain("widgets.-org"));
    }
}
