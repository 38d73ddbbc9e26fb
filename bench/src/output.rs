//! The JSON every workload writes (one envelope per run, whatever the workload) and the tables
//! printed from it.

use std::path::Path;

use anyhow::Context as _;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::machine::Machine;

/// One run of one workload: what was asked, where, and what came out.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Envelope {
    /// `initial_sync`, `churn`, `scale_out`, `recovery`, `ceiling`, ...
    pub workload: String,
    /// The workload's flags as run.
    pub params: Value,
    /// The machine and its load.
    pub machine: Machine,
    /// The workload's figures and its correctness checks.
    pub results: Value,
}

impl Envelope {
    /// Writes the envelope as pretty JSON.
    pub fn write(&self, path: &Path) -> anyhow::Result<()> {
        let text = serde_json::to_string_pretty(self).context("encoding the results")?;
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))?;
        }
        std::fs::write(path, text + "\n").with_context(|| format!("writing {}", path.display()))
    }

    /// Reads an envelope written by [`Envelope::write`].
    pub fn read(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    /// Every envelope in `dir` (`*.json`), sorted by file name.
    pub fn read_dir(dir: &Path) -> anyhow::Result<Vec<Self>> {
        let mut paths: Vec<_> = std::fs::read_dir(dir)
            .with_context(|| format!("reading {}", dir.display()))?
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "json"))
            .collect();
        paths.sort();
        paths.iter().map(|p| Self::read(p)).collect()
    }

    /// A number in the results at a JSON pointer (`/sync_seconds`).
    pub fn num(&self, pointer: &str) -> Option<f64> {
        self.results.pointer(pointer).and_then(Value::as_f64)
    }

    /// A parameter at a JSON pointer.
    pub fn param(&self, pointer: &str) -> Option<f64> {
        self.params.pointer(pointer).and_then(Value::as_f64)
    }

    /// The backend the run used (`fake` or `real`).
    pub fn backend(&self) -> &str {
        self.params.pointer("/backend").and_then(Value::as_str).unwrap_or("?")
    }
}

/// A table: printed as aligned markdown, so the same text reads in a terminal and in BENCHMARKS.md.
#[derive(Debug, Clone, Default)]
pub struct Table {
    /// A heading above the table.
    pub title: String,
    /// Column names.
    pub headers: Vec<String>,
    /// Cells, row by row.
    pub rows: Vec<Vec<String>>,
}

impl Table {
    /// An empty table with `headers`.
    pub fn new(title: &str, headers: &[&str]) -> Self {
        Self {
            title: title.into(),
            headers: headers.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    /// Adds a row.
    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Markdown with the columns padded to one width.
    pub fn markdown(&self) -> String {
        let columns = self.headers.len();
        let width = |i: usize| {
            std::iter::once(&self.headers[i])
                .chain(self.rows.iter().filter_map(|r| r.get(i)))
                .map(|c| c.chars().count())
                .max()
                .unwrap_or(3)
                .max(3)
        };
        let widths: Vec<usize> = (0..columns).map(width).collect();
        let line = |cells: &[String]| {
            let padded: Vec<String> = (0..columns)
                .map(|i| {
                    let cell = cells.get(i).map_or("", String::as_str);
                    format!("{cell}{}", " ".repeat(widths[i].saturating_sub(cell.chars().count())))
                })
                .collect();
            format!("| {} |\n", padded.join(" | "))
        };
        let mut out = format!("### {}\n\n", self.title);
        out += &line(&self.headers);
        let rule: Vec<String> = widths.iter().map(|w| "-".repeat(*w)).collect();
        out += &format!("|-{}-|\n", rule.join("-|-"));
        for row in &self.rows {
            out += &line(row);
        }
        out
    }
}

/// A number with `digits` decimals, `–` when absent.
pub fn fmt(value: Option<f64>, digits: usize) -> String {
    value.map_or_else(|| "–".into(), |v| format!("{v:.digits$}"))
}
