//! The kbind konnector binary.

use clap::{Parser, Subcommand};

/// The kbind konnector: syncs bound APIs between this consumer cluster and its providers.
#[derive(Parser, Debug)]
#[command(name = "konnector", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// Konnector subcommands; running the controllers comes next, so more variants will follow.
#[derive(Subcommand, Debug)]
enum Command {
    /// Print the core.kbind.io CRDs as multi-document YAML (`konnector crds | kubectl apply -f -`).
    Crds,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => print!("{}", kbind_api::crds_yaml()),
    }
    Ok(())
}
