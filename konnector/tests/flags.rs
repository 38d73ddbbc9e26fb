//! `konnector` command line: every `run` flag, the defaults, clear errors for bad values, and
//! the exit code when no consumer kubeconfig can be found.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Command as Process;
use std::time::Duration;

use clap::Parser;
use konnector::{Cli, Command, LogFormat, RunArgs};

fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
    let argv = ["konnector", "run"].iter().chain(args).copied();
    match Cli::try_parse_from(argv)?.command {
        Command::Run(args) => Ok(*args),
        other => panic!("parsed as {other:?}"),
    }
}

#[test]
fn defaults_match_the_documented_values() {
    let args = run_args(&[]).unwrap();
    assert_eq!(args, RunArgs::defaults());
    assert_eq!(args.kubeconfig, None);
    assert_eq!(args.context, None);
    assert_eq!(args.namespace, "kbind");
    assert_eq!(args.lease_namespace, "kbind");
    assert_eq!(args.heartbeat_interval, Duration::from_secs(30));
    assert!(args.leader_elect);
    assert_eq!(args.leader_election_lease, "kbind-konnector");
    assert_eq!(args.leader_election_namespace, None);
    assert_eq!(args.lease_duration, Duration::from_secs(15));
    assert_eq!(args.renew_deadline, Duration::from_secs(10));
    assert_eq!(args.retry_period, Duration::from_secs(2));
    assert_eq!(args.resync, Duration::from_secs(600));
    assert_eq!(args.metrics_addr, "0.0.0.0:8080".parse::<SocketAddr>().unwrap());
    assert_eq!(args.health_addr, "0.0.0.0:8081".parse::<SocketAddr>().unwrap());
    assert_eq!(args.log_format, LogFormat::Text);
    assert_eq!(args.log_level, "info");
    assert_eq!(args.identity, None);
    assert!(!args.allow_insecure_providers);
    args.validate().unwrap();
}

#[test]
fn every_flag_parses_and_reaches_the_engine_settings() {
    let args = run_args(&[
        "--kubeconfig=/etc/kbind/kubeconfig",
        "--context=prod",
        "--namespace=kbind-system",
        "--lease-namespace=kbind-leases",
        "--heartbeat-interval=20s",
        "--leader-elect=true",
        "--leader-election-lease=my-lease",
        "--leader-election-namespace=le",
        "--lease-duration=30s",
        "--renew-deadline=20s",
        "--retry-period=5s",
        "--resync=1h 30m",
        "--metrics-addr=127.0.0.1:9090",
        "--health-addr=127.0.0.1:9091",
        "--log-format=json",
        "--log-level=kbind_engine=debug,info",
        "--identity=pod-0",
        "--allow-insecure-providers",
        "--max-response-bytes=1048576",
        "--sync-workers=32",
        "--credential-renew-fraction=0.5",
    ])
    .unwrap();
    args.validate().unwrap();
    assert_eq!(args.kubeconfig, Some(PathBuf::from("/etc/kbind/kubeconfig")));
    assert_eq!(args.context.as_deref(), Some("prod"));
    assert_eq!(args.metrics_addr.port(), 9090);
    assert_eq!(args.health_addr.port(), 9091);
    assert_eq!(args.log_format, LogFormat::Json);
    assert_eq!(args.log_level, "kbind_engine=debug,info");

    let engine = args.engine_config();
    assert_eq!(engine.namespace, "kbind-system");
    assert_eq!(engine.lease_namespace, "kbind-leases");
    assert_eq!(engine.heartbeat_interval, Duration::from_secs(20));
    assert_eq!(engine.rediscovery_interval, Duration::from_secs(90 * 60));
    assert!(engine.allow_insecure_providers);
    assert_eq!(engine.sync_workers, 32);
    assert_eq!(engine.credential_renew_fraction, 0.5);
    assert_eq!(args.max_response_bytes, 1 << 20);

    let leader = args.leader_config().unwrap();
    assert_eq!(leader.namespace, "le");
    assert_eq!(leader.name, "my-lease");
    assert_eq!(leader.identity, "pod-0");
    assert_eq!(leader.lease_duration, Duration::from_secs(30));
    assert_eq!(leader.renew_deadline, Duration::from_secs(20));
    assert_eq!(leader.retry_period, Duration::from_secs(5));
}

#[test]
fn leader_elect_takes_true_or_false() {
    assert!(run_args(&["--leader-elect=false"]).unwrap().leader_config().is_none());
    assert!(run_args(&["--leader-elect"]).unwrap().leader_elect);
    let err = run_args(&["--leader-elect=maybe"]).unwrap_err().to_string();
    assert!(err.contains("--leader-elect"), "{err}");
}

#[test]
fn a_bad_duration_names_the_flag_and_the_expected_form() {
    let err = run_args(&["--heartbeat-interval=soon"]).unwrap_err();
    assert_eq!(err.exit_code(), 2);
    let text = err.to_string();
    assert!(text.contains("--heartbeat-interval"), "{text}");
    assert!(text.contains("'soon'"), "{text}");
    assert!(text.contains("expected a duration such as 30s"), "{text}");
    assert!(run_args(&["--resync=10"]).is_err(), "a bare number has no unit");
}

#[test]
fn a_bad_log_format_or_address_is_refused() {
    assert!(run_args(&["--log-format=xml"]).is_err());
    assert!(run_args(&["--metrics-addr=localhost"]).is_err());
}

#[test]
fn crds_is_still_a_subcommand() {
    assert!(matches!(
        Cli::try_parse_from(["konnector", "crds"]).unwrap().command,
        Command::Crds
    ));
}

/// A `$HOME/.kube/config` that would work must still not be used silently.
#[test]
fn missing_kubeconfig_names_the_three_places_and_exits_2() {
    let home = tempfile::tempdir().unwrap();
    std::fs::create_dir(home.path().join(".kube")).unwrap();
    std::fs::write(
        home.path().join(".kube/config"),
        "apiVersion: v1\nkind: Config\ncurrent-context: a\nclusters: [{name: a, cluster: {server: 'https://127.0.0.1:1'}}]\ncontexts: [{name: a, context: {cluster: a, user: u}}]\nusers: [{name: u, user: {token: t}}]\n",
    )
    .unwrap();
    let out = Process::new(env!("CARGO_BIN_EXE_konnector"))
        .args(["run", "--metrics-addr=127.0.0.1:0", "--health-addr=127.0.0.1:0"])
        .env("HOME", home.path())
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env_remove("KUBERNETES_SERVICE_PORT")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "stderr: {stderr}");
    for place in ["--kubeconfig", "$KUBECONFIG", "in-cluster service account"] {
        assert!(stderr.contains(place), "{place} missing from: {stderr}");
    }
}

#[test]
fn a_bad_duration_on_the_command_line_exits_2() {
    let out = Process::new(env!("CARGO_BIN_EXE_konnector"))
        .args(["run", "--resync=often"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--resync"));
}
