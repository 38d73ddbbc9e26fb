//! Every way a command fails, each mapped to one documented exit code, so scripts can tell
//! "log in again" from "the gateway said no" from "it did not become Ready in time".

/// The exit codes `kbind` documents (in `kbind --help` and docs/decisions.md).
pub mod exit {
    /// Success.
    pub const OK: i32 = 0;
    /// Any other failure (network, consumer cluster, local files).
    pub const ERROR: i32 = 1;
    /// The command line is wrong, or a confirmation is needed and there is no terminal.
    pub const USAGE: i32 = 2;
    /// Not logged in, or the gateway did not accept the credential.
    pub const UNAUTHORIZED: i32 = 3;
    /// `--wait` ran out of `--timeout`.
    pub const TIMEOUT: i32 = 4;
    /// The gateway refused the request (unknown Export, claimed namespace, used pickup, …).
    pub const REFUSED: i32 = 5;
    /// The consumer cannot take the bundle: no konnector runs there, a namespace is missing, or
    /// the bundle does not match the request, would overwrite another Grant's objects, or binds a
    /// namespace of an API that another Connection already serves.
    /// Nothing was applied.
    pub const CONSUMER_REFUSED: i32 = 6;
    /// Interrupted (Ctrl-C): 128 + SIGINT, as a shell reports a process SIGINT ended.
    pub const INTERRUPTED: i32 = 130;
}

/// A failed command; the message says what to do next.
#[derive(Debug, thiserror::Error)]
pub enum CliError {
    /// Wrong usage (exit 2).
    #[error("{0}")]
    Usage(String),
    /// Not logged in or not accepted (exit 3).
    #[error("{0}")]
    Unauthorized(String),
    /// Waiting ran out of time (exit 4).
    #[error("{0}")]
    Timeout(String),
    /// The gateway refused (exit 5).
    #[error("{0}")]
    Refused(String),
    /// The consumer cannot take the bundle (exit 6).
    #[error("{0}")]
    ConsumerRefused(String),
    /// Anything else (exit 1).
    #[error("{0}")]
    Failed(String),
    /// Interrupted by Ctrl-C (exit 130); the message says what was already done.
    #[error("{0}")]
    Interrupted(String),
}

impl CliError {
    /// The process exit code of this error.
    pub fn exit_code(&self) -> i32 {
        match self {
            CliError::Usage(_) => exit::USAGE,
            CliError::Unauthorized(_) => exit::UNAUTHORIZED,
            CliError::Timeout(_) => exit::TIMEOUT,
            CliError::Refused(_) => exit::REFUSED,
            CliError::ConsumerRefused(_) => exit::CONSUMER_REFUSED,
            CliError::Failed(_) => exit::ERROR,
            CliError::Interrupted(_) => exit::INTERRUPTED,
        }
    }

    /// The same failure (and exit code) with `note` after its message.
    pub fn noted(self, note: &str) -> Self {
        match self {
            CliError::Usage(m) => CliError::Usage(format!("{m}; {note}")),
            CliError::Unauthorized(m) => CliError::Unauthorized(format!("{m}; {note}")),
            CliError::Timeout(m) => CliError::Timeout(format!("{m}; {note}")),
            CliError::Refused(m) => CliError::Refused(format!("{m}; {note}")),
            CliError::ConsumerRefused(m) => CliError::ConsumerRefused(format!("{m}; {note}")),
            CliError::Failed(m) => CliError::Failed(format!("{m}; {note}")),
            CliError::Interrupted(m) => CliError::Interrupted(format!("{m}; {note}")),
        }
    }

    /// A failure with `context` before the cause.
    pub fn failed(context: &str, cause: impl std::fmt::Display) -> Self {
        CliError::Failed(format!("{context}: {cause}"))
    }
}

/// A result of a command.
pub type Result<T, E = CliError> = std::result::Result<T, E>;
