//! Readings shared by the workloads: a process's memory and CPU from /proc, percentiles of
//! latencies, waiting on a condition with a deadline, and the konnector's `/metrics`.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use serde::Serialize;
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// How often a condition is polled.
pub const POLL: Duration = Duration::from_millis(100);

/// Polls `check` until it yields a value, or fails naming `what`.
pub async fn wait_for<T>(
    what: &str,
    deadline: Duration,
    mut check: impl AsyncFnMut() -> Option<T>,
) -> anyhow::Result<T> {
    let start = Instant::now();
    loop {
        if let Some(value) = check().await {
            return Ok(value);
        }
        if start.elapsed() >= deadline {
            bail!("not observed within {}s: {what}", deadline.as_secs());
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `VmRSS` and `VmHWM` of a process, in KiB.
pub fn memory_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).context("reading /proc/PID/status")?;
    let field = |name: &str| {
        status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .and_then(|rest| rest.split_whitespace().next())
            .and_then(|kib| kib.parse().ok())
            .ok_or_else(|| anyhow!("no {name} in /proc/{pid}/status"))
    };
    Ok((field("VmRSS:")?, field("VmHWM:")?))
}

/// `utime + stime` of a process, in seconds.
pub fn cpu_seconds(pid: u32) -> anyhow::Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).context("reading /proc/PID/stat")?;
    // The command name may contain spaces; the fields after its closing parenthesis do not.
    let after_name = stat
        .rsplit_once(')')
        .map(|(_, rest)| rest)
        .ok_or_else(|| anyhow!("malformed /proc/{pid}/stat"))?;
    let fields: Vec<&str> = after_name.split_whitespace().collect();
    // Fields 14 and 15 of stat(5); `after_name` starts at field 3.
    let tick = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i - 3)
            .and_then(|v| v.parse().ok())
            .ok_or_else(|| anyhow!("no field {i} in /proc/{pid}/stat"))
    };
    Ok((tick(14)? + tick(15)?) as f64 / clock_ticks_per_second() as f64)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when it cannot be asked).
fn clock_ticks_per_second() -> u64 {
    static HZ: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *HZ.get_or_init(|| {
        std::process::Command::new("getconf")
            .arg("CLK_TCK")
            .output()
            .ok()
            .and_then(|out| String::from_utf8(out.stdout).ok())
            .and_then(|text| text.trim().parse().ok())
            .unwrap_or(100)
    })
}

/// p50, p99 and max of a set of latencies, in milliseconds.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Percentiles {
    /// How many were measured.
    pub count: usize,
    /// Median, ms.
    pub p50_ms: Option<f64>,
    /// 99th percentile (nearest rank), ms.
    pub p99_ms: Option<f64>,
    /// Largest, ms.
    pub max_ms: Option<f64>,
}

impl Percentiles {
    /// The percentiles of `latencies` (nearest rank).
    pub fn of(mut latencies: Vec<Duration>) -> Self {
        latencies.sort();
        let at = |q: f64| -> Option<f64> {
            let rank = ((q * latencies.len() as f64).ceil() as usize).max(1);
            latencies.get(rank - 1).map(|d| d.as_secs_f64() * 1000.0)
        };
        Self {
            count: latencies.len(),
            p50_ms: at(0.50),
            p99_ms: at(0.99),
            max_ms: at(1.0),
        }
    }
}

/// A free loopback port for the konnector's `/metrics`.
pub fn free_loopback_addr() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    listener.local_addr().context("reading the free port")
}

/// GETs `/metrics` over plain HTTP/1.0 (the body ends with the connection, no chunking).
pub async fn scrape(addr: SocketAddr) -> anyhow::Result<String> {
    let mut stream = tokio::net::TcpStream::connect(addr)
        .await
        .with_context(|| format!("connecting to the konnector's metrics at {addr}"))?;
    stream
        .write_all(b"GET /metrics HTTP/1.0\r\nHost: konnector\r\n\r\n")
        .await
        .context("sending the metrics request")?;
    let mut response = String::new();
    stream
        .read_to_string(&mut response)
        .await
        .context("reading the metrics response")?;
    let (head, body) = response
        .split_once("\r\n\r\n")
        .ok_or_else(|| anyhow!("a metrics response without a body"))?;
    if !head.starts_with("HTTP/1.0 200") && !head.starts_with("HTTP/1.1 200") {
        bail!("/metrics answered {}", head.lines().next().unwrap_or_default());
    }
    Ok(body.to_string())
}

/// The sum of every series of the metric `name` (exact name, any labels) whose labels contain
/// every one of `with` (e.g. `verb="WATCH"`).
pub fn metric_sum(text: &str, name: &str, with: &[&str]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            if !(rest.starts_with('{') || rest.starts_with(' ')) {
                return None;
            }
            let (series, value) = rest.rsplit_once(' ')?;
            with.iter().all(|w| series.contains(w)).then_some(())?;
            value.parse::<f64>().ok()
        })
        .sum()
}

/// One histogram from an OpenMetrics exposition, summed over its label sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(le, cumulative count)`, ascending; the last bound is `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
}

impl Histogram {
    /// The histogram `name` (without `_bucket`) in `text`; empty when it has no series yet.
    pub fn parse(text: &str, name: &str) -> Self {
        let mut histogram = Self::default();
        for line in text.lines() {
            let Some(rest) = line.strip_prefix(name) else {
                continue;
            };
            let Some((series, value)) = rest.rsplit_once(' ') else {
                continue;
            };
            if let Some(labels) = series.strip_prefix("_bucket") {
                let le = labels
                    .split("le=\"")
                    .nth(1)
                    .and_then(|v| v.split('"').next())
                    .and_then(|v| {
                        if v == "+Inf" {
                            Some(f64::INFINITY)
                        } else {
                            v.parse().ok()
                        }
                    });
                let (Some(le), Ok(count)) = (le, value.parse::<f64>()) else {
                    continue;
                };
                match histogram.buckets.iter_mut().find(|(bound, _)| *bound == le) {
                    Some((_, total)) => *total += count as u64,
                    None => histogram.buckets.push((le, count as u64)),
                }
            } else if series.starts_with("_count") {
                histogram.count += value.parse::<f64>().unwrap_or(0.0) as u64;
            }
        }
        histogram.buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        histogram
    }

    /// What was observed after `before` (both read from the same series).
    pub fn since(&self, before: &Self) -> Self {
        let buckets = self
            .buckets
            .iter()
            .map(|&(le, n)| {
                let earlier = before.buckets.iter().find(|(b, _)| *b == le).map_or(0, |(_, m)| *m);
                (le, n.saturating_sub(earlier))
            })
            .collect();
        Self {
            buckets,
            count: self.count.saturating_sub(before.count),
        }
    }

    /// The upper bound of the bucket holding quantile `q`, ms (`None`: no observations).
    pub fn quantile_le_ms(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        self.buckets
            .iter()
            .find(|(_, n)| *n >= rank)
            .map(|(le, _)| le * 1000.0)
            .filter(|v| v.is_finite())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn percentiles_take_the_nearest_rank() {
        let ms = |v: u64| Duration::from_millis(v);
        let p = Percentiles::of((1..=100).rev().map(ms).collect());
        assert_eq!(
            (p.count, p.p50_ms, p.p99_ms, p.max_ms),
            (100, Some(50.0), Some(99.0), Some(100.0))
        );
        assert_eq!(Percentiles::of(Vec::new()).p50_ms, None);
    }

    #[test]
    fn a_metric_sum_matches_the_exact_name_and_every_label() {
        let text = "# HELP x\napiserver_request_total{verb=\"GET\",code=\"200\"} 3\n\
                    apiserver_request_total{verb=\"WATCH\",code=\"200\"} 2\n\
                    apiserver_request_total_other 100\napiserver_longrunning_requests{verb=\"WATCH\"} 4\n";
        assert_eq!(metric_sum(text, "apiserver_request_total", &[]), 5.0);
        assert_eq!(metric_sum(text, "apiserver_request_total", &["verb=\"WATCH\""]), 2.0);
        assert_eq!(metric_sum(text, "apiserver_longrunning_requests", &[]), 4.0);
    }

    #[test]
    fn a_histogram_window_is_the_difference_of_two_scrapes() {
        let before = "h_bucket{le=\"0.01\"} 1\nh_bucket{le=\"+Inf\"} 1\nh_count 1\n";
        let after = "h_bucket{le=\"0.01\"} 1\nh_bucket{le=\"0.02\"} 3\nh_bucket{le=\"+Inf\"} 3\nh_count 3\n";
        let window = Histogram::parse(after, "h").since(&Histogram::parse(before, "h"));
        assert_eq!(window.count, 2);
        assert_eq!(window.quantile_le_ms(0.99), Some(20.0));
    }
}
