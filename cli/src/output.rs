//! How results are shown: kubectl-like tables, YAML or JSON, and progress that is a spinner on
//! a terminal and plain lines otherwise.

use std::io::Write;

use serde::Serialize;

use crate::args::Format;
use crate::consumer::Progress;
use crate::error::{CliError, Result};

/// A kubectl-like table: upper-case headers, columns three spaces apart, no borders.
pub fn table(header: &[&str], rows: Vec<Vec<String>>) -> String {
    let mut table = comfy_table::Table::new();
    table.load_preset(comfy_table::presets::NOTHING);
    table.set_header(header.to_vec());
    for row in rows {
        table.add_row(row.iter().map(|cell| clean(cell)).collect::<Vec<_>>());
    }
    for column in table.column_iter_mut() {
        column.set_padding((0, 3));
    }
    let mut out = String::new();
    for line in table.lines() {
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

/// `text` with every control character escaped, so strings a gateway or a cluster chose cannot
/// move the cursor or rewrite what the terminal already shows.
pub fn clean(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_unicode().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// `value` as YAML or JSON.
pub fn render<T: Serialize>(value: &T, format: Format) -> Result<String> {
    match format {
        Format::Json => serde_json::to_string_pretty(value)
            .map(|s| s + "\n")
            .map_err(|e| CliError::failed("cannot encode JSON", e)),
        Format::Yaml => serde_saphyr::to_string(value).map_err(|e| CliError::failed("cannot encode YAML", e)),
    }
}

/// Writes `text` to `out`.
pub fn emit(out: &mut dyn Write, text: &str) -> Result<()> {
    out.write_all(text.as_bytes())
        .and_then(|()| out.flush())
        .map_err(|e| CliError::failed("cannot write the output", e))
}

/// A duration in seconds the way kubectl shows ages (`45s`, `3m`, `2h`, `5d`).
pub fn age(seconds: i64) -> String {
    let s = seconds.max(0);
    match s {
        0..120 => format!("{s}s"),
        120..7200 => format!("{}m", s / 60),
        7200..172800 => format!("{}h", s / 3600),
        _ => format!("{}d", s / 86400),
    }
}

/// Progress on stderr: plain lines when not a terminal, a spinner when one.
pub struct Reporter<'a> {
    out: &'a mut (dyn Write + Send),
    spinner: Option<indicatif::ProgressBar>,
}

impl<'a> Reporter<'a> {
    /// Progress to `out` (plain) or a spinner on the terminal when `interactive`.
    pub fn new(out: &'a mut (dyn Write + Send), interactive: bool) -> Self {
        let spinner = interactive.then(|| {
            let bar = indicatif::ProgressBar::new_spinner();
            bar.enable_steady_tick(std::time::Duration::from_millis(120));
            bar
        });
        Self { out, spinner }
    }
}

impl Progress for Reporter<'_> {
    fn waiting(&mut self, what: &str) {
        match &self.spinner {
            Some(bar) => bar.set_message(what.to_string()),
            None => {
                let _ = writeln!(self.out, "{what} ...");
            }
        }
    }

    fn done(&mut self, what: &str) {
        match &self.spinner {
            Some(bar) => bar.println(format!("✓ {what}")),
            None => {
                let _ = writeln!(self.out, "{what}");
            }
        }
    }
}

impl Drop for Reporter<'_> {
    fn drop(&mut self) {
        if let Some(bar) = &self.spinner {
            bar.finish_and_clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_look_like_kubectl() {
        let text = table(&["NAME", "READY"], vec![vec!["a-long-name".into(), "True".into()]]);
        assert_eq!(text, "NAME          READY\na-long-name   True\n");
    }

    #[test]
    fn table_cells_cannot_carry_terminal_controls() {
        let text = table(&["NAME"], vec![vec!["a\u{1b}[2Kb\nc\u{9b}".into()]]);
        assert_eq!(text, "NAME\na\\u{1b}[2Kb\\u{a}c\\u{9b}\n");
    }

    #[test]
    fn ages_round_like_kubectl() {
        assert_eq!(age(5), "5s");
        assert_eq!(age(600), "10m");
        assert_eq!(age(3 * 86400), "3d");
    }
}
