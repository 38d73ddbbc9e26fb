//! The `kbind` CLI as a library: [`run`] is the whole program, so the binary, the `kubectl bind`
//! plugin and the system demo (which drives the CLI path in process) share one code path.
//!
//! It talks to the kbind-backend gateway over HTTP and to the consumer cluster through `kube`;
//! it never depends on the engine or fakeapi (`cargo run -p xtask -- deps` checks it).

use std::path::PathBuf;

pub mod login;

/// Where a run reads and writes: its output streams, its configuration folder and the consumer.
pub struct Context {
    /// Standard output (tables, YAML, JSON).
    pub stdout: Box<dyn std::io::Write + Send>,
    /// Standard error (progress, prompts, errors).
    pub stderr: Box<dyn std::io::Write + Send>,
    /// Whether stdin/stderr are a terminal (progress bars and prompts only then).
    pub interactive: bool,
    /// Folder of the per-gateway credential cache (default `$XDG_CONFIG_HOME/kbind`, else `~/.config/kbind`).
    pub config_dir: PathBuf,
    /// The consumer kubeconfig (`--kubeconfig`, else `$KUBECONFIG`, else `~/.kube/config`), resolved by the command.
    pub kubeconfig: Option<PathBuf>,
}

/// Runs the CLI with `args` (the first is the program name) and returns the process exit code.
pub async fn run(args: Vec<String>, ctx: Context) -> i32 {
    let _ = (args, ctx);
    // Replaced by the commands (issue #15).
    2
}
