//! Log lines on stderr, as text or JSON, filtered by `--log-level` unless `RUST_LOG` is set.
//!
//! Nothing the konnector logs carries credentials: kubeconfigs are never logged, the engine's
//! provider kubeconfig type redacts itself, and consumer kubeconfig errors withhold YAML details.

use tracing_subscriber::EnvFilter;

use crate::Error;
use crate::cli::LogFormat;

/// The filter: `RUST_LOG` when set and non-empty, else `level`.
pub fn filter(level: &str, rust_log: Option<&str>) -> Result<EnvFilter, Error> {
    let (directives, origin) = match rust_log.filter(|s| !s.trim().is_empty()) {
        Some(env) => (env, "RUST_LOG"),
        None => (level, "--log-level"),
    };
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| Error::InvalidFlags(format!("{origin} is not a valid log filter: {e}")))
}

/// Whether log lines may carry colour codes: only on a terminal, and not with `NO_COLOR` set to
/// anything non-empty (a file or a log collector would keep the escape codes as text).
pub fn colour() -> bool {
    let no_color = std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty());
    std::io::IsTerminal::is_terminal(&std::io::stderr()) && !no_color
}

/// Installs the global subscriber; `false` when one was already installed (an embedding
/// binary set up its own), which is left alone.
pub fn init(format: LogFormat, level: &str) -> Result<bool, Error> {
    let filter = filter(level, std::env::var("RUST_LOG").ok().as_deref())?;
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(colour())
        .with_writer(std::io::stderr);
    let installed = match format {
        LogFormat::Text => builder.try_init().is_ok(),
        LogFormat::Json => builder.json().flatten_event(true).try_init().is_ok(),
    };
    Ok(installed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_log_overrides_the_flag() {
        assert_eq!(filter("info", Some("debug")).unwrap().to_string(), "debug");
        assert_eq!(filter("warn", Some(" ")).unwrap().to_string(), "warn");
        assert_eq!(
            filter("kbind_engine=debug,info", None).unwrap().to_string(),
            "kbind_engine=debug,info"
        );
    }

    #[test]
    fn a_bad_filter_names_its_origin() {
        let err = filter("info", Some("=[")).unwrap_err().to_string();
        assert!(err.contains("RUST_LOG"), "{err}");
        let err = filter("kbind=notalevel", None).unwrap_err().to_string();
        assert!(err.contains("--log-level"), "{err}");
    }
}
