//! The facts about the machine a run was measured on, recorded beside every figure.

use serde::{Deserialize, Serialize};

/// Cores, CPU model, kernel, commit and load: what a reader needs to weigh a figure.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq)]
pub struct Machine {
    /// Cores this process may run on.
    pub cores: usize,
    /// `model name` from /proc/cpuinfo.
    pub cpu_model: String,
    /// Total memory, MiB.
    pub memory_mib: u64,
    /// /proc/sys/kernel/osrelease.
    pub kernel: String,
    /// `git rev-parse --short HEAD` of the working tree, `unknown` outside one.
    pub git_commit: String,
    /// The konnector binary measured.
    pub konnector_binary: String,
    /// The extra flags it ran with (`--konnector-arg`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub konnector_args: Vec<String>,
    /// When the run started, UTC.
    pub started_utc: String,
    /// 1, 5 and 15 minute load averages before the run.
    pub load_before: String,
    /// The same after the run.
    pub load_after: String,
    /// `valgrind --version`, for a run counted under callgrind (the cost workload).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub valgrind: Option<String>,
}

impl Machine {
    /// The facts now; `load_after` is filled by [`Machine::finish`].
    pub fn now(konnector_binary: &str) -> Self {
        Self {
            cores: std::thread::available_parallelism().map_or(0, usize::from),
            cpu_model: cpu_model(),
            memory_mib: memory_mib(),
            kernel: read_trimmed("/proc/sys/kernel/osrelease"),
            git_commit: git_commit(),
            konnector_binary: konnector_binary.to_string(),
            konnector_args: Vec::new(),
            started_utc: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            load_before: load_average(),
            load_after: String::new(),
            valgrind: None,
        }
    }

    /// Records the load average at the end of the run.
    pub fn finish(mut self) -> Self {
        self.load_after = load_average();
        self
    }
}

fn read_trimmed(path: &str) -> String {
    std::fs::read_to_string(path).map_or_else(|_| "unknown".into(), |s| s.trim().to_string())
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find(|l| l.starts_with("model name"))
                .and_then(|l| l.split_once(':'))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown".into())
}

fn memory_mib() -> u64 {
    std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("MemTotal:"))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib / 1024)
}

fn git_commit() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|out| out.status.success())
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .map_or_else(|| "unknown".into(), |s| s.trim().to_string())
}

/// The machine's load averages as `uptime` prints them (`/proc/loadavg`'s first three fields).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
}
