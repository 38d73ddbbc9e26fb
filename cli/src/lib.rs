//! The `kbind` CLI as a library: [`run`] is the whole program, so the binary, the `kubectl bind`
//! plugin and the system demo (which drives the CLI path in process) share one code path.
//!
//! It talks to the kbind-backend gateway over HTTP and to the consumer cluster through `kube`;
//! it never depends on the engine or fakeapi (`cargo run -p xtask -- deps` checks it).

use std::io::Write;
use std::path::PathBuf;

use clap::{CommandFactory, FromArgMatches};

mod apply;
mod args;
mod bind;
pub mod bundle;
mod commands;
mod consumer;
mod creds;
pub mod error;
mod gateway;
pub mod login;
mod origin;
mod output;
mod placement;
pub mod rules;
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
            if let Some(text) = no_output_flag(&e, &args, name) {
                let _ = writeln!(ctx.stderr, "error: {text}");
                return exit::USAGE;
            }
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

/// For `-o`/`--output` given to a command that has none: what clap would say ("unexpected
/// argument", with a tip to pass it after `--`, which cannot help) in plain words, naming the
/// commands that do take it.
fn no_output_flag(e: &clap::Error, args: &[String], program: &str) -> Option<String> {
    if e.kind() != clap::error::ErrorKind::UnknownArgument {
        return None;
    }
    let invalid = match e.get(clap::error::ContextKind::InvalidArg) {
        Some(clap::error::ContextValue::String(arg)) => arg.clone(),
        _ => return None,
    };
    let is_output = invalid == "--output" || invalid.starts_with("--output=") || invalid.starts_with("-o");
    if !is_output {
        return None;
    }
    let command = args::Cli::command();
    let subcommands: Vec<&clap::Command> = command.get_subcommands().collect();
    let takes_output = |c: &clap::Command| c.get_arguments().any(|a| a.get_id() == "output");
    let with_output: Vec<&str> = subcommands
        .iter()
        .filter(|c| takes_output(c))
        .map(|c| c.get_name())
        .collect();
    let given = args
        .iter()
        .skip(1)
        .find_map(|a| subcommands.iter().find(|c| c.get_name() == a.as_str()));
    let text = match given {
        // `kbind -o yaml status`: the flag belongs to the command, so it goes after it.
        Some(c) if takes_output(c) => {
            format!(
                "-o/--output goes after the command: `{program} {} -o yaml`",
                c.get_name()
            )
        }
        Some(c) => format!(
            "`{program} {}` has no -o/--output; these commands print YAML or JSON with -o: {}",
            c.get_name(),
            with_output.join(", ")
        ),
        None => format!(
            "`{program}` itself has no -o/--output; these commands print YAML or JSON with -o: {}",
            with_output.join(", ")
        ),
    };
    Some(text)
}

/// The process's entry point for both binaries (`kbind`, `kubectl-bind`): the real terminal,
/// `$XDG_CONFIG_HOME/kbind` (else `~/.config/kbind`) and the process's arguments; the exit code.
pub fn run_process() -> i32 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(e) => {
            eprintln!("kbind: cannot start the async runtime: {e}");
            return 1;
        }
    };
    let interactive = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let config_dir = std::env::var_os("XDG_CONFIG_HOME")
        .map(std::path::PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".config")))
        .unwrap_or_else(|| std::path::PathBuf::from("."))
        .join("kbind");
    let ctx = Context {
        stdout: Box::new(std::io::stdout()),
        stderr: Box::new(std::io::stderr()),
        interactive,
        config_dir,
        kubeconfig: None,
    };
    runtime.block_on(run(std::env::args().collect(), ctx))
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
