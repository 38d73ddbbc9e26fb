//! The `kbind` CLI as a library: [`run`] is the whole program, so the binary, the `kubectl bind`
//! plugin and the system demo (which drives the CLI path in process) share one code path.
//!
//! It talks to the kbind-backend gateway over HTTP and to the consumer cluster through `kube`;
//! it never depends on the engine or fakeapi (`cargo run -p xtask -- deps` checks it).

use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};

mod args;
mod bind;
pub mod bundle;
mod commands;
mod consumer;
mod creds;
pub mod error;
mod gateway;
pub mod login;
mod output;
mod status;
mod unbind;

pub use error::{CliError, exit};

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

/// The name the program was started as: `kubectl bind` for the plugin, else `kbind`.
fn program_name(args: &[String]) -> &'static str {
    let base = args
        .first()
        .and_then(|a| std::path::Path::new(a).file_name())
        .and_then(|n| n.to_str())
        .unwrap_or("kbind");
    if base.starts_with("kubectl-bind") {
        "kubectl bind"
    } else {
        "kbind"
    }
}

/// Runs the CLI with `args` (the first is the program name) and returns the process exit code.
pub async fn run(args: Vec<String>, mut ctx: Context) -> i32 {
    let name = program_name(&args);
    let command = args::Cli::command().name(name).bin_name(name);
    let matches = match command.try_get_matches_from(&args) {
        Ok(matches) => matches,
        Err(e) => {
            let text = e.render().to_string();
            let out = if e.use_stderr() {
                &mut ctx.stderr
            } else {
                &mut ctx.stdout
            };
            let _ = write!(out, "{text}");
            return if e.use_stderr() { exit::USAGE } else { exit::OK };
        }
    };
    let cli = match args::Cli::from_arg_matches(&matches) {
        Ok(cli) => cli,
        Err(e) => {
            let _ = write!(ctx.stderr, "{}", e.render());
            return exit::USAGE;
        }
    };
    match commands::dispatch(cli, name, &mut ctx).await {
        Ok(()) => exit::OK,
        Err(e) => {
            // Why: hints name commands to run next; as a plugin they are run through kubectl.
            let message = e.to_string().replace("`kbind ", &format!("`{name} "));
            let _ = writeln!(ctx.stderr, "error: {message}");
            e.exit_code()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_plugin_binary_calls_itself_kubectl_bind() {
        assert_eq!(program_name(&["/usr/local/bin/kubectl-bind".into()]), "kubectl bind");
        assert_eq!(program_name(&["kbind".into()]), "kbind");
        assert_eq!(program_name(&[]), "kbind");
    }
}
