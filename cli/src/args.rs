//! The command line, as clap derive types.

use std::path::PathBuf;
use std::time::Duration;

use clap::{Args, Parser, Subcommand, ValueEnum};

/// The exit codes, shown in `kbind --help`.
pub const EXIT_CODES: &str = "\
Exit codes:
  0  success
  1  error (network, consumer cluster, local files)
  2  usage error, or a confirmation is needed and there is no terminal (pass --yes)
  3  not logged in, or the gateway did not accept the credential (run `kbind login`)
  4  timed out waiting (--timeout)
  5  refused by the gateway (unknown Export, claimed namespace, used pickup URL, ...)
  6  refused on the consumer: no konnector runs there, a namespace is missing, or the bundle does not
     match the request, would overwrite another Grant's objects, or binds a namespace of an API
     that another Connection already serves (nothing applied)
  130  interrupted (Ctrl-C); what was already done is printed";

/// Bind APIs offered by a kbind provider into this cluster.
#[derive(Parser, Debug)]
#[command(version, about = "Bind APIs offered by a kbind provider into this cluster (also `kubectl bind`).", after_long_help = EXIT_CODES, propagate_version = true)]
pub struct Cli {
    /// The gateway to talk to (default: the one you last logged in to).
    #[arg(long, global = true, env = "KBIND_GATEWAY", value_name = "URL")]
    pub gateway: Option<String>,
    /// Kubeconfig of the consumer cluster (default: $KUBECONFIG, else ~/.kube/config).
    #[arg(long, global = true, value_name = "PATH")]
    pub kubeconfig: Option<PathBuf>,
    /// Kubeconfig context of the consumer cluster (default: the current context).
    #[arg(long, global = true, value_name = "NAME")]
    pub context: Option<String>,
    /// The command.
    #[command(subcommand)]
    pub command: Command,
}

/// The commands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Sign in to a kbind gateway and cache the credential (per gateway, mode 0600).
    Login(LoginArgs),
    /// Forget the cached credential of a gateway (default: the current one).
    Logout {
        /// The gateway (default: the current one).
        #[arg(value_name = "GATEWAY-URL")]
        gateway_url: Option<String>,
    },
    /// List the Exports you can bind, grouped by Collection.
    Catalog {
        /// Output format (default: a table).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Bind an Export: get a Grant, pick its bundle up, apply it on this cluster and wait for Ready.
    Bind(BindArgs),
    /// Apply the bundle of a pickup URL (from the web UI) on this cluster and wait for Ready.
    Redeem(RedeemArgs),
    /// Unbind an Export (or a Connection) from this cluster and revoke its Grant.
    Unbind(UnbindArgs),
    /// List your Grants on the gateway, with their consumers' heartbeat age.
    Grants {
        /// Output format (default: a table).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Revoke one of your Grants: the consumer's credential stops working.
    Revoke {
        /// The Grant's name (`kbind grants` lists them).
        grant: String,
        /// Do not ask for confirmation.
        #[arg(short, long)]
        yes: bool,
    },
    /// Show this cluster's Connections and bindings, and which Connection serves each API where.
    Status {
        /// Output format (default: a table).
        #[arg(short, long, value_enum)]
        output: Option<Format>,
    },
    /// Print a shell completion script.
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `kbind login`.
#[derive(Args, Debug)]
pub struct LoginArgs {
    /// The gateway's URL (e.g. https://kbind.example.com).
    #[arg(value_name = "GATEWAY-URL")]
    pub gateway_url: String,
    /// A bearer token issued by the provider (else: OIDC in a browser, when the gateway offers it).
    #[arg(long, env = "KBIND_TOKEN", hide_env_values = true, value_name = "TOKEN")]
    pub token: Option<String>,
    /// Do not try to open a browser for OIDC; print the URL instead.
    #[arg(long)]
    pub no_browser: bool,
    /// A PEM file of extra CA certificates to trust for the OIDC issuer (a private CA).
    #[arg(long, value_name = "PATH")]
    pub oidc_ca_file: Option<std::path::PathBuf>,
    /// The OIDC issuer you expect to sign in at: a gateway announcing another is refused
    /// (default: the issuer of your last sign-in to this gateway, if any).
    #[arg(long, env = "KBIND_OIDC_ISSUER", value_name = "URL")]
    pub oidc_issuer: Option<String>,
}

/// What `bind` and `redeem` share: where the konnector is and how to wait.
#[derive(Args, Debug, Clone)]
pub struct ApplyArgs {
    /// The konnector's namespace on this cluster (where the bundle's Secret goes).
    #[arg(long, default_value = kbind_api::consts::DEFAULT_NAMESPACE, value_name = "NAME")]
    pub konnector_namespace: String,
    /// Wait for the Connection and bindings to be Ready (`--wait=false` to return after applying).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub wait: bool,
    /// How long to wait.
    #[arg(long, default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
    /// Let the bundle point an existing Connection at another gateway, server or CA (a moved
    /// or re-certified provider); old and new are shown. Without it such a bundle is refused.
    #[arg(long)]
    pub replace_connection: bool,
}

/// `kbind bind`.
#[derive(Args, Debug)]
pub struct BindArgs {
    /// The Export to bind (`kbind catalog` lists them).
    pub export: String,
    /// A namespace to bind the Export's namespaced APIs in (repeat, or comma-separate; asked
    /// for on a terminal when the Export needs namespaces).
    #[arg(short, long = "namespace", value_delimiter = ',', value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Print the bundle instead of applying it. This uses up the one-time pickup: apply the
    /// printed bundle yourself (it holds a credential: keep it secret).
    #[arg(short, long, value_enum)]
    pub output: Option<Format>,
    /// Show what would be bound and applied; binds, picks up and applies nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Do not ask before binding an Export whose related resources copy Secrets or ConfigMaps
    /// of this cluster to the provider (FromConsumer); they are shown either way.
    #[arg(short, long)]
    pub yes: bool,
    /// Where to apply and how to wait.
    #[command(flatten)]
    pub apply: ApplyArgs,
}

/// `kbind redeem`.
#[derive(Args, Debug)]
pub struct RedeemArgs {
    /// The one-time pickup URL (works once); `-` reads it from stdin, and without the argument
    /// it comes from KBIND_PICKUP_URL (both keep it out of the process list and shell history).
    #[arg(value_name = "PICKUP-URL|-", env = "KBIND_PICKUP_URL", hide_env_values = true)]
    pub pickup_url: Option<String>,
    /// The namespaces you bound in (repeat, or comma-separate): the bundle must bind exactly
    /// these. Without it the bundle's namespaces are shown and confirmed.
    #[arg(short, long = "namespace", value_delimiter = ',', value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Do not ask (to confirm the bundle's namespaces, or FromConsumer related resources).
    #[arg(short, long)]
    pub yes: bool,
    /// Where to apply and how to wait.
    #[command(flatten)]
    pub apply: ApplyArgs,
}

/// `kbind unbind`.
#[derive(Args, Debug)]
pub struct UnbindArgs {
    /// The Export's name, or the Connection's (`kbind status` lists them).
    #[arg(value_name = "EXPORT|CONNECTION")]
    pub target: String,
    /// Do not ask for confirmation.
    #[arg(short, long)]
    pub yes: bool,
    /// Leave every synced object in place on both sides (the escape hatch when the provider is gone).
    #[arg(long)]
    pub orphan: bool,
    /// Let only these namespaces go (repeat, or comma-separate): their Bindings are drained and
    /// deleted, then the Grant stops covering them; the Connection and its other namespaces stay.
    #[arg(short, long = "namespace", value_delimiter = ',', value_name = "NAME")]
    pub namespaces: Vec<String>,
    /// Wait until the bindings and Connection are gone (`--wait=false` to return at once).
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set, num_args = 0..=1,
          default_missing_value = "true", value_name = "BOOL")]
    pub wait: bool,
    /// How long to wait.
    #[arg(long, default_value = "2m", value_parser = parse_duration, value_name = "DURATION")]
    pub timeout: Duration,
}

/// A machine-readable output format.
#[derive(ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// YAML.
    Yaml,
    /// JSON.
    Json,
}

/// `90s`, `2m`, `1h`, or plain seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let (number, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration like 90s, 2m or 1h"))?;
    let secs = match unit {
        "ms" => return Ok(Duration::from_millis(n)),
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        _ => return Err(format!("{text:?} is not a duration like 90s, 2m or 1h")),
    };
    Ok(Duration::from_secs(secs))
}
