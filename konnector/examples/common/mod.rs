//! What the footprint and latency benchmarks share: two fake clusters served over HTTPS in this
//! process, the release `konnector` binary run against them as a child process, N widgets
//! synced, and readings of the child's memory, CPU and `/metrics`.

#![allow(dead_code)] // each benchmark uses a different part of this module

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use fakeapi::serve::{ClusterServeOptions, RunningServer, Token, UserSpec, serve_cluster};
use fakeapi::{FakeClient, FakeCluster, RequestRecord};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use konnector::demo::{provider_rbac, widgets, widgets_crd};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

/// The konnector's user on both clusters, so its requests stand apart from the load generator's.
pub const KONNECTOR_USER: &str = "kbind-konnector";
const SETUP_DEADLINE: Duration = Duration::from_secs(120);
/// How long a sync of N objects may take.
pub const SYNC_DEADLINE: Duration = Duration::from_secs(1800);
const POLL: Duration = Duration::from_millis(50);

/// An `ApiResource` for a typed Kubernetes resource.
pub fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// A `DynamicObject` from JSON.
pub fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building an object")
}

/// The name of the `i`th widget.
pub fn widget_name(i: usize) -> String {
    format!("w-{i:05}")
}

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

async fn ready(client: &dyn ClusterClient, res: &ApiResource, name: &str) -> Option<()> {
    let obj = client.get_opt(res, None, name).await.ok()??;
    let conditions: Vec<Condition> = serde_json::from_value(obj.data.pointer("/status/conditions")?.clone()).ok()?;
    conditions
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True")
        .then_some(())
}

/// The konnector binary: `$KONNECTOR_BIN`, else `target/<profile>/konnector`.
pub fn konnector_binary() -> anyhow::Result<PathBuf> {
    if let Some(path) = std::env::var_os("KONNECTOR_BIN") {
        return Ok(path.into());
    }
    let exe = std::env::current_exe().context("locating this example")?;
    let profile_dir = exe
        .parent()
        .and_then(|examples| examples.parent())
        .ok_or_else(|| anyhow!("unexpected example path {}", exe.display()))?;
    let path = profile_dir.join("konnector");
    if !path.exists() {
        bail!(
            "no konnector binary at {}: run `cargo build --release -p konnector` first",
            path.display()
        );
    }
    Ok(path)
}

/// A free loopback port for the konnector's `/metrics` (it does not report the port it bound).
fn free_loopback_addr() -> anyhow::Result<SocketAddr> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    listener.local_addr().context("reading the free port")
}

/// A provider and a consumer fake cluster, both served over HTTPS, with widgets exported and
/// bound, and the konnector binary running against them.
pub struct Bench {
    /// The provider cluster (in-process handle: request log, write log).
    pub provider_cluster: FakeCluster,
    /// The consumer cluster.
    pub consumer_cluster: FakeCluster,
    /// The load generator's client of the provider (in process: only the konnector talks HTTP).
    pub provider: FakeClient,
    /// The load generator's client of the consumer.
    pub consumer: FakeClient,
    /// The konnector binary that runs.
    pub binary: PathBuf,
    /// The child's process id.
    pub pid: u32,
    /// Where the child serves `/metrics`.
    pub metrics_addr: SocketAddr,
    child: tokio::process::Child,
    provider_server: RunningServer,
    consumer_server: RunningServer,
    _dir: tempfile::TempDir,
}

impl Bench {
    /// Serves both clusters, exports and binds widgets, starts `binary` and waits until the
    /// binding is Ready and widgets are served on the consumer.
    pub async fn start(binary: PathBuf) -> anyhow::Result<Self> {
        let provider_token = Token::random().map_err(|_| anyhow!("no randomness for a token"))?;
        let provider_token_text = provider_token.expose().to_string();
        let consumer_token = Token::random().map_err(|_| anyhow!("no randomness for a token"))?;
        let consumer_token_text = consumer_token.expose().to_string();
        let provider_cluster = FakeCluster::builder("provider").build();
        let consumer_cluster = FakeCluster::builder("consumer").build();
        let provider_server = serve_cluster(
            provider_cluster.clone(),
            ClusterServeOptions::default().user(UserSpec {
                name: KONNECTOR_USER.into(),
                token: provider_token,
                groups: Vec::new(),
            }),
        )
        .await
        .context("serving the provider")?;
        // The konnector is the consumer's admin (as the chart's ClusterRole nearly is) under its
        // own name, so the request log tells its requests from the load generator's.
        let consumer_server = serve_cluster(
            consumer_cluster.clone(),
            ClusterServeOptions::default().user(UserSpec {
                name: KONNECTOR_USER.into(),
                token: consumer_token,
                groups: vec![fakeapi::rbac::SYSTEM_MASTERS.into()],
            }),
        )
        .await
        .context("serving the consumer")?;
        if provider_server.url().starts_with("http:") || consumer_server.url().starts_with("http:") {
            bail!("the fake clusters must be served over HTTPS, as real ones are");
        }
        let provider = provider_cluster.admin_client();
        let consumer = consumer_cluster.admin_client();

        provider
            .create(
                &erase::<CustomResourceDefinition>(),
                None,
                &object(widgets_crd())?,
                &Default::default(),
            )
            .await?;
        for (res, obj) in provider_rbac() {
            provider.create(&res, None, &object(obj)?, &Default::default()).await?;
        }
        for crd in kbind_api::crds() {
            consumer.create_typed(&crd).await?;
        }
        let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "kbind"}});
        consumer
            .create(
                &erase::<k8s_openapi::api::core::v1::Namespace>(),
                None,
                &object(namespace)?,
                &Default::default(),
            )
            .await?;
        wait_for("kbind's CRDs served", SETUP_DEADLINE, async || {
            consumer
                .list(&erase::<kbind_api::Connection>(), None, &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await?;
        let bundle = [
            (
                erase::<k8s_openapi::api::core::v1::Secret>(),
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider", "namespace": "kbind"},
                       "stringData": {"kubeconfig": provider_server.kubeconfig(&provider_token_text, KONNECTOR_USER)}}),
            ),
            (
                erase::<kbind_api::Connection>(),
                json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection", "metadata": {"name": "provider"},
                       "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "provider", "key": "kubeconfig"}}}),
            ),
            (
                erase::<kbind_api::ClusterBinding>(),
                json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding", "metadata": {"name": "widgets"},
                       "spec": {"connectionRef": {"name": "provider"}, "apis": [{"name": "widgets.example.org"}]}}),
            ),
        ];
        for (res, obj) in bundle {
            let ns = obj
                .pointer("/metadata/namespace")
                .and_then(Value::as_str)
                .map(str::to_string);
            consumer
                .create(&res, ns.as_deref(), &object(obj)?, &Default::default())
                .await?;
        }

        let dir = tempfile::tempdir().context("a temporary folder")?;
        let kubeconfig = dir.path().join("consumer.kubeconfig");
        std::fs::write(
            &kubeconfig,
            consumer_server.kubeconfig(&consumer_token_text, KONNECTOR_USER),
        )
        .context("writing the consumer kubeconfig")?;
        let log = std::fs::File::create(dir.path().join("konnector.log")).context("creating the log file")?;
        let metrics_addr = free_loopback_addr()?;
        let child = tokio::process::Command::new(&binary)
            .arg("run")
            .arg("--kubeconfig")
            .arg(&kubeconfig)
            .arg(format!("--metrics-addr={metrics_addr}"))
            .args(["--leader-elect=false", "--health-addr=127.0.0.1:0", "--log-level=warn"])
            .env_remove("RUST_LOG")
            .env_remove("KUBECONFIG")
            .stdout(Stdio::null())
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", binary.display()))?;
        let pid = child.id().ok_or_else(|| anyhow!("the konnector exited at once"))?;

        wait_for("Connection provider Ready", SETUP_DEADLINE, async || {
            ready(&consumer, &erase::<kbind_api::Connection>(), "provider").await
        })
        .await?;
        wait_for("ClusterBinding widgets Ready", SETUP_DEADLINE, async || {
            ready(&consumer, &erase::<kbind_api::ClusterBinding>(), "widgets").await
        })
        .await?;
        wait_for("widgets served on the consumer", SETUP_DEADLINE, async || {
            consumer
                .list(&widgets(), None, &Default::default())
                .await
                .ok()
                .map(|_| ())
        })
        .await?;
        Ok(Self {
            provider_cluster,
            consumer_cluster,
            provider,
            consumer,
            binary,
            pid,
            metrics_addr,
            child,
            provider_server,
            consumer_server,
            _dir: dir,
        })
    }

    /// Creates widgets `0..count` in `default` on the consumer; how long the creates took.
    pub async fn create_widgets(&self, count: usize) -> anyhow::Result<Duration> {
        let start = Instant::now();
        for i in 0..count {
            let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
                                "metadata": {"name": widget_name(i), "namespace": "default"},
                                "spec": {"size": i, "color": "blue"}});
            self.consumer
                .create(&widgets(), Some("default"), &object(widget)?, &Default::default())
                .await?;
        }
        Ok(start.elapsed())
    }

    /// Waits until the provider holds `count` widgets.
    pub async fn wait_synced(&self, count: usize) -> anyhow::Result<()> {
        wait_for(&format!("{count} widgets on the provider"), SYNC_DEADLINE, async || {
            let list = self.provider.list(&widgets(), None, &Default::default()).await.ok()?;
            (list.items.len() == count).then_some(())
        })
        .await
    }

    /// Fails if the konnector has exited.
    pub fn check_running(&mut self) -> anyhow::Result<()> {
        if let Some(status) = self.child.try_wait()? {
            bail!("the konnector exited during the measurement: {status}");
        }
        Ok(())
    }

    /// The child's `VmRSS` and `VmHWM`, in KiB.
    pub fn memory_kib(&self) -> anyhow::Result<(u64, u64)> {
        memory_kib(self.pid)
    }

    /// The child's CPU time so far, in clock ticks.
    pub fn cpu_ticks(&self) -> anyhow::Result<u64> {
        cpu_ticks(self.pid)
    }

    /// The konnector's requests to each cluster (provider, consumer) so far: where a window of
    /// [`Bench::konnector_requests_since`] starts.
    pub fn request_marks(&self) -> (usize, usize) {
        (
            self.provider_cluster.request_log().len(),
            self.consumer_cluster.request_log().len(),
        )
    }

    /// The konnector's requests to (provider, consumer) after `marks`.
    pub fn konnector_requests_since(&self, marks: (usize, usize)) -> (Requests, Requests) {
        (
            Requests::of(&self.provider_cluster.request_log_from(marks.0)),
            Requests::of(&self.consumer_cluster.request_log_from(marks.1)),
        )
    }

    /// The text of the konnector's `/metrics`.
    pub async fn scrape(&self) -> anyhow::Result<String> {
        scrape(self.metrics_addr).await
    }

    /// Stops the konnector and both servers.
    pub async fn shutdown(mut self) -> anyhow::Result<()> {
        self.child.kill().await.context("stopping the konnector")?;
        self.provider_server.shutdown().await;
        self.consumer_server.shutdown().await;
        Ok(())
    }
}

/// The konnector's requests in a window, from a cluster's request log.
#[derive(Debug, Clone, Default)]
pub struct Requests {
    /// Every request (watches included).
    pub all: u64,
    /// Watch requests (each one opened or reopened watch).
    pub watches: u64,
    /// Counts by `verb resource`, to tell what an idle konnector keeps asking.
    pub by_kind: std::collections::BTreeMap<String, u64>,
}

impl Requests {
    fn of(log: &[RequestRecord]) -> Self {
        let ours = log.iter().filter(|r| r.user == KONNECTOR_USER);
        let mut requests = Self::default();
        for r in ours {
            requests.all += 1;
            if r.verb == "watch" {
                requests.watches += 1;
            }
            *requests
                .by_kind
                .entry(format!("{} {}", r.verb, r.resource))
                .or_default() += 1;
        }
        requests
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

/// `utime + stime` of a process, in clock ticks.
pub fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
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
    Ok(tick(14)? + tick(15)?)
}

/// Clock ticks per second (`getconf CLK_TCK`, 100 when it cannot be asked).
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100)
}

/// KiB as MiB with one decimal.
pub fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

/// The machine's load averages as `uptime` prints them (`/proc/loadavg`'s first three fields).
pub fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .map(|text| text.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|| "unknown".into())
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

/// One histogram from an OpenMetrics exposition, summed over its label sets.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Histogram {
    /// `(le, cumulative count)`, ascending; the last bound is `+Inf`.
    pub buckets: Vec<(f64, u64)>,
    /// Observations.
    pub count: u64,
    /// Sum of the observations, in seconds.
    pub sum: f64,
}

impl Histogram {
    /// The histogram `name` (without `_bucket`) in `text`; empty when it has no series yet.
    pub fn parse(text: &str, name: &str) -> Self {
        let mut buckets: Vec<(f64, u64)> = Vec::new();
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
                match buckets.iter_mut().find(|(bound, _)| *bound == le) {
                    Some((_, total)) => *total += count as u64,
                    None => buckets.push((le, count as u64)),
                }
            } else if series.starts_with("_count") {
                histogram.count += value.parse::<f64>().unwrap_or(0.0) as u64;
            } else if series.starts_with("_sum") {
                histogram.sum += value.parse::<f64>().unwrap_or(0.0);
            }
        }
        buckets.sort_by(|a, b| a.0.total_cmp(&b.0));
        histogram.buckets = buckets;
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
            sum: self.sum - before.sum,
        }
    }

    /// The upper bound of the bucket holding quantile `q` (`None`: no observations).
    pub fn quantile_bound(&self, q: f64) -> Option<f64> {
        if self.count == 0 {
            return None;
        }
        let rank = (q * self.count as f64).ceil().max(1.0) as u64;
        self.buckets.iter().find(|(_, n)| *n >= rank).map(|(le, _)| *le)
    }
}
