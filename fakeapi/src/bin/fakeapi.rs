//! `fakeapi serve`: a fake Kubernetes API server on a real socket, for kubectl and scripts.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, RunningServer, Transport, UserSpec, serve_cluster};

#[derive(Parser)]
#[command(name = "fakeapi", version, about = "An in-process fake Kubernetes API server")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Serve a fresh fake cluster until SIGTERM or Ctrl-C.
    Serve(ServeArgs),
}

#[derive(clap::Args)]
struct ServeArgs {
    /// Address to listen on; port 0 picks a free port.
    #[arg(long, default_value = "127.0.0.1:6443")]
    addr: SocketAddr,
    /// Where to write the admin kubeconfig once listening (users get FILE.<name>).
    #[arg(long)]
    kubeconfig: PathBuf,
    /// A user to register: NAME:TOKEN or NAME:TOKEN:GROUP,GROUP (repeatable).
    #[arg(long = "user", value_name = "NAME:TOKEN[:GROUPS]")]
    users: Vec<UserSpec>,
    /// Serve plain HTTP instead of HTTPS (development only).
    #[arg(long)]
    insecure_http: bool,
    /// Serve HTTP/1.1 only (no h2 in ALPN, no cleartext HTTP/2), as a proxy without HTTP/2.
    #[arg(long)]
    http1_only: bool,
    /// Seed of the cluster's randomness (uids, generated names); without it each start picks a
    /// random one (two servers are two clusters) and prints it, so the run can be replayed.
    #[arg(long)]
    seed: Option<u64>,
    /// Serve kcp's LogicalCluster API and identity object.
    #[arg(long)]
    kcp_like: bool,
    /// Turn the ownerReference garbage collector off.
    #[arg(long)]
    no_gc: bool,
    /// The cluster's name (in logs, certificates and kubeconfigs).
    #[arg(long, default_value = "fakeapi")]
    name: String,
}

#[tokio::main]
async fn main() -> Result<()> {
    // Colour only on a terminal, and not with NO_COLOR: a log file would keep the codes as text.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .init();
    match Cli::parse().command {
        Command::Serve(args) => run_serve(args).await,
    }
}

async fn run_serve(args: ServeArgs) -> Result<()> {
    let seed = args.seed.unwrap_or_else(random_seed);
    // On stderr, whatever the log filter: stdout's first line stays the "listening on" line.
    eprintln!("fakeapi: seed {seed} (replay with --seed {seed})");
    let mut builder = FakeCluster::builder(&args.name)
        .seed(seed)
        .kcp_like(args.kcp_like)
        .garbage_collector(!args.no_gc);
    // A served cluster is looked at by kubectl and by controllers that compare its times with
    // their own (AGE columns, Lease ages): wall time, unless --seed asks for a replayable run,
    // whose clock starts at the deterministic worlds' fixed instant.
    if args.seed.is_none() {
        builder = builder.clock(std::sync::Arc::new(kbind_cluster::SystemClock));
    }
    let cluster = builder.build();
    let transport = if args.insecure_http {
        Transport::InsecureHttp
    } else {
        Transport::Https
    };
    let options = ClusterServeOptions {
        addr: args.addr,
        transport,
        users: args.users,
        http1_only: args.http1_only,
        ..ClusterServeOptions::default()
    };
    let server = serve_cluster(cluster, options)
        .await
        .context("failed to start serving")?;
    write_kubeconfigs(&server, &args.kubeconfig)?;
    println!("listening on {} kubeconfig {}", server.url(), args.kubeconfig.display());
    wait_for_signal().await?;
    tracing::info!("shutting down");
    server.shutdown().await;
    Ok(())
}

/// A seed from the process's randomly keyed hasher: no two starts share a cluster identity.
fn random_seed() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u32(std::process::id());
    hasher.finish()
}

/// Writes the users' kubeconfigs first, so the admin one appearing means all are there.
fn write_kubeconfigs(server: &RunningServer, admin_path: &Path) -> Result<()> {
    for user in server.users() {
        let path = user_kubeconfig_path(admin_path, &user.name);
        let yaml = server.kubeconfig(user.token.expose(), &user.name);
        write_atomically(&path, &yaml)?;
    }
    let admin = server
        .admin_kubeconfig()
        .context("a served cluster always has an admin")?;
    write_atomically(admin_path, &admin)
}

fn user_kubeconfig_path(admin_path: &Path, user: &str) -> PathBuf {
    let mut name = admin_path.as_os_str().to_owned();
    name.push(".");
    name.push(user);
    PathBuf::from(name)
}

/// Writes `contents` to a temporary file next to `path` and renames it: a reader sees the
/// whole file or none. The file holds a token, so only its owner may read it.
fn write_atomically(path: &Path, contents: &str) -> Result<()> {
    use std::io::Write;
    let mut tmp_name = path.as_os_str().to_owned();
    tmp_name.push(format!(".tmp-{}", std::process::id()));
    let tmp = PathBuf::from(tmp_name);
    let mut options = std::fs::OpenOptions::new();
    options.write(true).create(true).truncate(true);
    #[cfg(unix)]
    std::os::unix::fs::OpenOptionsExt::mode(&mut options, 0o600);
    let mut file = options
        .open(&tmp)
        .with_context(|| format!("failed to create {}", tmp.display()))?;
    file.write_all(contents.as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("failed to write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("failed to rename {} to {}", tmp.display(), path.display()))
}

#[cfg(unix)]
async fn wait_for_signal() -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).context("failed to listen for SIGTERM")?;
    tokio::select! {
        _ = term.recv() => {}
        result = tokio::signal::ctrl_c() => result.context("failed to listen for Ctrl-C")?,
    }
    Ok(())
}

#[cfg(not(unix))]
async fn wait_for_signal() -> Result<()> {
    tokio::signal::ctrl_c().await.context("failed to listen for Ctrl-C")
}
