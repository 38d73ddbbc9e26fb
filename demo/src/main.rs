//! `kbind-demo`: the whole system in one process, on a fresh machine with no setup. A provider
//! and a consumer fake cluster (fakeapi over HTTPS on loopback), kbind-backend on the provider
//! (gateway with static-token sign-in and the embedded UI, issuer, reaper) and the konnector on
//! the consumer. Interactive by default (prints the UI URL, the token and the `kbind` commands to
//! try, then runs until Ctrl-C); `--once` drives the CLI path in process and exits 0 only if every
//! step was observed. `--konnector-only` runs the konnector alone on the two clusters, without
//! the service layer.

mod cli;
mod konnector_only;
mod once;
mod support;
mod world;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::Parser;

/// The port the gateway tries first when `--port` is not given (a stable URL across restarts).
const DEFAULT_PORT: u16 = 8080;

/// The whole kbind system in one process: two fake clusters, kbind-backend and the konnector.
#[derive(Parser, Debug)]
#[command(name = "kbind-demo", version)]
struct Args {
    /// Drive the CLI path (login, catalog, bind, an object synced both ways, status, unbind), then
    /// exit: 0 only if every step was observed.
    #[arg(long)]
    once: bool,
    /// Folder for the kubeconfigs, the token file, the `kbind`/`kubectl-bind` links and the
    /// `--once` credential cache, kept after exit; a restart with the same folder keeps the token
    /// and the paths. Default: a new temporary folder, removed on exit.
    #[arg(long, value_name = "DIR")]
    dir: Option<PathBuf>,
    /// The gateway's port on 127.0.0.1; 0 picks any free port. Default: 8080, or any free port
    /// when 8080 is taken.
    #[arg(long, conflicts_with = "konnector_only")]
    port: Option<u16>,
    /// The konnector alone: export the sample API, apply the one-apply bundle by hand, sync an
    /// object both ways and print what to try with kubectl (no kbind-backend, no CLI).
    #[arg(long)]
    konnector_only: bool,
}

fn main() -> ExitCode {
    // Started through the `kbind`/`kubectl-bind` links the demo prints: be the CLI, nothing else.
    if cli::invoked_as_cli() {
        std::process::exit(kbind_cli::run_process());
    }
    let args = Args::parse();
    // The demo narrates on stdout; kube's per-request errors while things start would drown it.
    let filter = std::env::var("RUST_LOG").unwrap_or_else(|_| "warn,kube_client=off".into());
    // Colour only on a terminal, and not with NO_COLOR: a log file would keep the codes as text.
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    let _ = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color)
        .with_writer(std::io::stderr)
        .try_init();
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kbind-demo: cannot start the async runtime: {e}");
            return ExitCode::FAILURE;
        }
    };
    match runtime.block_on(run(args)) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("  ✗ {e:#}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> anyhow::Result<()> {
    // Why a TempDir without --dir: it is removed when `run` returns, on success, error or Ctrl-C.
    let (dir, temporary) = match args.dir {
        Some(dir) => {
            std::fs::create_dir_all(&dir).with_context(|| format!("creating {}; pass another --dir", dir.display()))?;
            (dir, None)
        }
        None => {
            let temporary = tempfile::Builder::new()
                .prefix("kbind-demo-")
                .tempdir()
                .context("creating a temporary folder; pass --dir DIR")?;
            (temporary.path().to_path_buf(), Some(temporary))
        }
    };
    if args.konnector_only {
        return konnector_only::run(&dir, args.once).await;
    }
    println!("kbind-demo: the whole system in this process");
    // `--once` runs the CLI in process; only the printed commands need its binaries.
    let cli = match args.once {
        true => None,
        false => Some(cli::link(&dir)?),
    };
    let world = world::World::start(&dir, args.port).await?;
    let result = if let Some(cli) = cli {
        // Why before printing: a Ctrl-C right after "Running until Ctrl-C" must find the handler.
        let interrupted = interrupt().context("cannot wait for Ctrl-C; stop the process another way")?;
        world.print_next_steps(&cli, temporary.is_some());
        println!("\nRunning until Ctrl-C.");
        interrupted.await;
        Ok(())
    } else {
        once::run(&world).await
    };
    world.stop().await;
    if args.once && result.is_ok() {
        println!("\nEvery step was observed.");
    }
    result
}

/// Resolves on SIGINT; the handler is installed when this returns, not when it is first awaited.
#[cfg(unix)]
fn interrupt() -> std::io::Result<impl std::future::Future<Output = ()>> {
    let mut signal = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::interrupt())?;
    Ok(async move {
        signal.recv().await;
    })
}

/// Resolves on Ctrl-C.
#[cfg(not(unix))]
fn interrupt() -> std::io::Result<impl std::future::Future<Output = ()>> {
    Ok(async {
        let _ = tokio::signal::ctrl_c().await;
    })
}
