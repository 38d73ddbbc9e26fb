//! The command line: `konnector crds` and `konnector run` with every flag, and how the flags
//! become the engine's settings.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::{ArgAction, Args, Parser, Subcommand, ValueEnum};
use kbind_api::consts;
use kbind_engine::{EngineConfig, LeaderConfig};

use crate::Error;

/// The kbind konnector: syncs bound APIs between this consumer cluster and its providers.
#[derive(Parser, Debug, Clone)]
#[command(name = "konnector", version, about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Konnector subcommands.
#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Print the core.kbind.io CRDs as multi-document YAML (`konnector crds | kubectl apply -f -`).
    Crds,
    /// Run the konnector against the consumer cluster until SIGTERM or Ctrl-C.
    Run(Box<RunArgs>),
}

/// How log lines are written to stderr.
#[derive(ValueEnum, Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object per line.
    Json,
}

/// The flags of `konnector run`.
#[derive(Args, Debug, Clone, PartialEq)]
pub struct RunArgs {
    /// Kubeconfig of the consumer cluster (else $KUBECONFIG, else the in-cluster service account).
    #[arg(long, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context to use (default: the kubeconfig's current context).
    #[arg(long, value_name = "NAME")]
    pub context: Option<String>,
    /// The konnector's own namespace on the consumer; Connection Secrets must live here.
    #[arg(long, value_name = "NAME", default_value = consts::DEFAULT_NAMESPACE)]
    pub namespace: String,
    /// Namespace of the heartbeat Lease on each provider.
    #[arg(long, value_name = "NAME", default_value = consts::lease::NAMESPACE)]
    pub lease_namespace: String,
    /// How often the heartbeat Lease on a provider is renewed. Failed provider requests are
    /// forgiven for twice this (the Lease's duration) before the provider is disengaged.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub heartbeat_interval: Duration,
    /// How long a provider request (any but a watch's stream) may take before it is given up:
    /// a connection that died silently is noticed in this time, on HTTP/2 and on HTTP/1.1.
    #[arg(long, value_name = "DURATION", default_value = "30s", value_parser = parse_duration)]
    pub provider_request_timeout: Duration,
    /// Gate everything behind a leader-election Lease on the consumer (`--leader-elect=false` for one replica).
    #[arg(long, value_name = "BOOL", default_value_t = true, action = ArgAction::Set,
          num_args = 0..=1, default_missing_value = "true")]
    pub leader_elect: bool,
    /// Name of the leader-election Lease.
    #[arg(long, value_name = "NAME", default_value = "kbind-konnector")]
    pub leader_election_lease: String,
    /// Namespace of the leader-election Lease (default: --namespace).
    #[arg(long, value_name = "NAME")]
    pub leader_election_namespace: Option<String>,
    /// How long other replicas wait after the leader's last observed renewal.
    #[arg(long, value_name = "DURATION", default_value = "15s", value_parser = parse_duration)]
    pub lease_duration: Duration,
    /// How long the leader keeps trying to renew before it steps down.
    #[arg(long, value_name = "DURATION", default_value = "10s", value_parser = parse_duration)]
    pub renew_deadline: Duration,
    /// Wait between leader-election attempts.
    #[arg(long, value_name = "DURATION", default_value = "2s", value_parser = parse_duration)]
    pub retry_period: Duration,
    /// How often a Ready Connection re-runs discovery, and the backstop pass of every binding
    /// and related-resource syncer (everything else is driven by watches).
    #[arg(long, value_name = "DURATION", default_value = "10m", value_parser = parse_duration)]
    pub resync: Duration,
    /// Address of the `/metrics` endpoint.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Address of the `/healthz` and `/readyz` endpoints.
    #[arg(long, value_name = "ADDR", default_value = "0.0.0.0:8081")]
    pub health_addr: SocketAddr,
    /// Log line format.
    #[arg(long, value_name = "FORMAT", value_enum, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
    /// Log filter in tracing's EnvFilter syntax (`info`, `kbind_engine=debug,info`); RUST_LOG overrides it.
    #[arg(long, value_name = "FILTER", default_value = "info")]
    pub log_level: String,
    /// Leader-election holder identity (default: the hostname, which is the pod name, plus a random suffix).
    #[arg(long, value_name = "ID")]
    pub identity: Option<String>,
    /// DEVELOPMENT ONLY: accept providers over plain http:// or with insecure-skip-tls-verify.
    #[arg(long)]
    pub allow_insecure_providers: bool,
    /// Largest response body read from a cluster, in bytes (per event for watches); a larger one
    /// is refused with an error instead of being buffered.
    #[arg(long, value_name = "BYTES", default_value_t = kbind_cluster::limit::DEFAULT_MAX_RESPONSE_BYTES,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub max_response_bytes: u64,
    /// Objects each syncer (one per binding and API) reconciles at once: more raises throughput
    /// on a busy API at the cost of memory while a first sync runs.
    #[arg(long, value_name = "N", default_value_t = kbind_engine::context::DEFAULT_SYNC_WORKERS,
          value_parser = clap::value_parser!(u16).range(1..))]
    pub sync_workers: u16,
    /// When an issued provider token (a ServiceAccount token with an expiry) is renewed, as a
    /// fraction of its lifetime between 0 and 1 (each renewal comes up to 15 % of that earlier,
    /// spread by jitter). The default leaves a third of the lifetime to retry in.
    #[arg(long, value_name = "FRACTION", default_value_t = kbind_engine::context::DEFAULT_CREDENTIAL_RENEW_FRACTION,
          value_parser = parse_fraction, allow_negative_numbers = true)]
    pub credential_renew_fraction: f64,
}

/// Parses a fraction strictly between 0 and 1.
fn parse_fraction(s: &str) -> Result<f64, String> {
    let value: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number (expected a fraction such as 0.66)"))?;
    if !(value > 0.0 && value < 1.0) {
        return Err(format!("{value} is not between 0 and 1 (exclusive)"));
    }
    Ok(value)
}

/// The heartbeat interval must stay under the heartbeat Lease's duration, or the Lease lapses
/// between renewals and a provider's reaper may take the consumer for gone.
const MAX_HEARTBEAT_INTERVAL: Duration = Duration::from_secs(consts::lease::DURATION_SECONDS as u64);

/// Parses a humantime duration (`30s`, `10m`, `1h 30m`) and names the accepted form on error.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    humantime::parse_duration(s).map_err(|e| format!("{e} (expected a duration such as 30s, 10m or 1h30m)"))
}

impl RunArgs {
    /// The defaults of every flag, as `konnector run` with no flags.
    pub fn defaults() -> Self {
        #[derive(Parser)]
        struct Only {
            #[command(flatten)]
            args: RunArgs,
        }
        Only::parse_from(["konnector"]).args
    }

    /// Checks what clap cannot: the relations between durations that leader election and the
    /// heartbeat rely on.
    pub fn validate(&self) -> Result<(), Error> {
        let invalid = |message: String| Err(Error::InvalidFlags(message));
        for (flag, value) in [
            ("--heartbeat-interval", self.heartbeat_interval),
            ("--provider-request-timeout", self.provider_request_timeout),
            ("--lease-duration", self.lease_duration),
            ("--renew-deadline", self.renew_deadline),
            ("--retry-period", self.retry_period),
            ("--resync", self.resync),
        ] {
            if value.is_zero() {
                return invalid(format!("{flag} must be greater than zero"));
            }
        }
        if self.heartbeat_interval >= MAX_HEARTBEAT_INTERVAL {
            return invalid(format!(
                "--heartbeat-interval must be shorter than the heartbeat Lease's {}s duration",
                consts::lease::DURATION_SECONDS
            ));
        }
        if self.lease_duration.subsec_nanos() != 0 {
            return invalid("--lease-duration must be whole seconds (it is written as leaseDurationSeconds)".into());
        }
        if self.renew_deadline >= self.lease_duration {
            return invalid("--renew-deadline must be shorter than --lease-duration".into());
        }
        if self.retry_period >= self.renew_deadline {
            return invalid("--retry-period must be shorter than --renew-deadline".into());
        }
        Ok(())
    }

    /// The engine's settings.
    pub fn engine_config(&self) -> EngineConfig {
        EngineConfig {
            namespace: self.namespace.clone(),
            lease_namespace: self.lease_namespace.clone(),
            heartbeat_interval: self.heartbeat_interval,
            rediscovery_interval: self.resync,
            allow_insecure_providers: self.allow_insecure_providers,
            sync_workers: self.sync_workers,
            credential_renew_fraction: self.credential_renew_fraction,
            watch_timeout: kbind_engine::context::DEFAULT_WATCH_TIMEOUT,
        }
    }

    /// Leader election settings, `None` with `--leader-elect=false`.
    pub fn leader_config(&self) -> Option<LeaderConfig> {
        if !self.leader_elect {
            return None;
        }
        let namespace = self.leader_election_namespace.as_deref().unwrap_or(&self.namespace);
        Some(LeaderConfig {
            lease_duration: self.lease_duration,
            renew_deadline: self.renew_deadline,
            retry_period: self.retry_period,
            ..LeaderConfig::new(namespace, &self.leader_election_lease, &self.holder_identity())
        })
    }

    /// `--identity`, else `<hostname>_<random>`: the hostname names the pod, and the suffix keeps
    /// two processes on one host from both believing they hold the Lease (client-go does the same).
    pub fn holder_identity(&self) -> String {
        if let Some(id) = &self.identity {
            return id.clone();
        }
        let host = hostname::get()
            .ok()
            .and_then(|h| h.into_string().ok())
            .unwrap_or_else(|| "konnector".to_string());
        format!("{host}_{}", uuid::Uuid::new_v4())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str]) -> RunArgs {
        let argv = ["konnector", "run"].iter().chain(args).copied();
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Run(args) => *args,
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn the_demo_is_no_subcommand_of_the_product() {
        let err = Cli::try_parse_from(["konnector", "demo"]).expect_err("demo must not parse");
        assert_eq!(err.kind(), clap::error::ErrorKind::InvalidSubcommand);
    }

    #[test]
    fn leader_namespace_defaults_to_the_konnector_namespace() {
        let config = run(&["--namespace", "ops", "--identity", "me"])
            .leader_config()
            .unwrap();
        assert_eq!((config.namespace.as_str(), config.identity.as_str()), ("ops", "me"));
        let config = run(&["--leader-election-namespace", "le"]).leader_config().unwrap();
        assert_eq!(config.namespace, "le");
    }

    #[test]
    fn default_identities_differ_between_processes_on_one_host() {
        let args = RunArgs::defaults();
        assert_ne!(args.holder_identity(), args.holder_identity());
    }

    #[test]
    fn leader_timings_must_nest() {
        let err = run(&["--renew-deadline", "15s"]).validate().unwrap_err();
        assert!(
            err.to_string()
                .contains("--renew-deadline must be shorter than --lease-duration")
        );
        let err = run(&["--retry-period", "10s"]).validate().unwrap_err();
        assert!(err.to_string().contains("--retry-period"));
        let err = run(&["--lease-duration", "15500ms"]).validate().unwrap_err();
        assert!(err.to_string().contains("whole seconds"));
        assert!(run(&["--heartbeat-interval", "60s"]).validate().is_err());
        assert!(run(&["--resync", "0s"]).validate().is_err());
        RunArgs::defaults().validate().unwrap();
    }

    #[test]
    fn response_bodies_are_capped_at_64_mib_unless_told_otherwise() {
        assert_eq!(RunArgs::defaults().max_response_bytes, 64 * 1024 * 1024);
        assert_eq!(run(&["--max-response-bytes", "1048576"]).max_response_bytes, 1 << 20);
        let argv = ["konnector", "run", "--max-response-bytes", "0"];
        assert!(Cli::try_parse_from(argv).is_err(), "a zero cap would refuse everything");
    }

    #[test]
    fn sync_workers_default_to_the_engines_and_refuse_zero() {
        assert_eq!(
            RunArgs::defaults().engine_config().sync_workers,
            kbind_engine::context::DEFAULT_SYNC_WORKERS
        );
        assert_eq!(run(&["--sync-workers", "64"]).engine_config().sync_workers, 64);
        let argv = ["konnector", "run", "--sync-workers", "0"];
        assert!(Cli::try_parse_from(argv).is_err(), "no worker would sync nothing");
    }

    #[test]
    fn credentials_are_renewed_at_two_thirds_of_their_life_unless_told_otherwise() {
        let fraction = RunArgs::defaults().engine_config().credential_renew_fraction;
        assert!((fraction - 2.0 / 3.0).abs() < 1e-9, "{fraction}");
        let fast = run(&["--credential-renew-fraction", "0.01"]);
        assert_eq!(fast.engine_config().credential_renew_fraction, 0.01);
        for refused in ["0", "1", "1.5", "-0.2", "NaN", "two thirds"] {
            let argv = ["konnector", "run", "--credential-renew-fraction", refused];
            let err = Cli::try_parse_from(argv).expect_err(refused).to_string();
            assert!(err.contains("--credential-renew-fraction"), "{refused}: {err}");
        }
    }
}
