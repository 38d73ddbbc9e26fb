//! The `kbind-backend` binary: `crds` prints the service layer's CRDs; `run` starts the enabled
//! modules.

use clap::{Parser, Subcommand};

/// kbind's service layer on a provider cluster.
#[derive(Parser, Debug)]
#[command(name = "kbind-backend", version)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Prints the catalog.kbind.io and iam.kbind.io CRDs as YAML (committed as deploy/crds/kbind-backend-crds.yaml).
    Crds,
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Crds => print!("{}", kbind_api::backend_crds_yaml()),
    }
    Ok(())
}
