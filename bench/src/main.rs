//! `kbind-bench`: kbind's benchmark harness, one subcommand per workload of issue #16, each
//! printing one table and optionally writing JSON.

mod cost;

use clap::{Parser, Subcommand};

/// kbind's benchmarks.
#[derive(Parser, Debug)]
#[command(name = "kbind-bench", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

/// The workloads.
#[derive(Subcommand, Debug)]
enum Command {
    /// Instructions per synced object under callgrind (engine + in-process fakeapi).
    Cost(#[command(flatten)] cost::CostArgs),
}

fn main() -> anyhow::Result<()> {
    match Cli::parse().command {
        Command::Cost(args) => cost::run(&args),
    }
}
