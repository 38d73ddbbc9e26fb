//! Measures the konnector's footprint: serves a provider and a consumer fakeapi in process, runs
//! the release `konnector` binary against them, times the sync of N widgets, then samples the
//! child's resident memory and its CPU use while idle.
//!
//! ```sh
//! cargo build --release -p konnector
//! cargo run --release -p konnector --example footprint -- 1000 [IDLE_SECONDS]
//! ```
//!
//! `KONNECTOR_BIN` overrides the binary (default: `konnector` next to this example's folder).

use konnector::demo::{provider_rbac, widgets, widgets_crd};
use std::path::PathBuf;
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{Context as _, anyhow, bail};
use fakeapi::FakeCluster;
use fakeapi::serve::{ClusterServeOptions, Token, UserSpec, serve_cluster};
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use serde_json::{Value, json};

const KONNECTOR_USER: &str = "kbind-konnector";
const SETUP_DEADLINE: Duration = Duration::from_secs(120);
const SYNC_DEADLINE: Duration = Duration::from_secs(1800);
const POLL: Duration = Duration::from_millis(50);

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

fn object(value: Value) -> anyhow::Result<DynamicObject> {
    serde_json::from_value(value).context("building an object")
}

/// Polls `check` until it yields a value, or fails naming `what`.
async fn wait_for<T>(what: &str, deadline: Duration, mut check: impl AsyncFnMut() -> Option<T>) -> anyhow::Result<T> {
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
fn konnector_binary() -> anyhow::Result<PathBuf> {
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

/// `VmRSS` and `VmHWM` of a process, in KiB.
fn memory_kib(pid: u32) -> anyhow::Result<(u64, u64)> {
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
fn cpu_ticks(pid: u32) -> anyhow::Result<u64> {
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

fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|out| String::from_utf8(out.stdout).ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(100)
}

fn mib(kib: u64) -> String {
    format!("{:.1} MiB", kib as f64 / 1024.0)
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let mut args = std::env::args().skip(1);
    let count: usize = args
        .next()
        .map_or(Ok(1000), |n| n.parse())
        .context("N must be a number")?;
    let idle_seconds: u64 = args
        .next()
        .map_or(Ok(30), |n| n.parse())
        .context("IDLE_SECONDS must be a number")?;
    let binary = konnector_binary()?;

    let token = Token::random().map_err(|_| anyhow!("no randomness for a token"))?;
    let token_text = token.expose().to_string();
    let provider_cluster = FakeCluster::builder("provider").build();
    let consumer_cluster = FakeCluster::builder("consumer").build();
    let provider_server = serve_cluster(
        provider_cluster.clone(),
        ClusterServeOptions::default().user(UserSpec {
            name: KONNECTOR_USER.into(),
            token,
            groups: Vec::new(),
        }),
    )
    .await
    .context("serving the provider")?;
    let consumer_server = serve_cluster(consumer_cluster.clone(), ClusterServeOptions::default())
        .await
        .context("serving the consumer")?;
    // Setup and polling go through the in-process clients, so only the konnector talks HTTP.
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
                   "stringData": {"kubeconfig": provider_server.kubeconfig(&token_text, KONNECTOR_USER)}}),
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
    let admin = consumer_server
        .admin_kubeconfig()
        .ok_or_else(|| anyhow!("no admin kubeconfig"))?;
    std::fs::write(&kubeconfig, admin).context("writing the consumer kubeconfig")?;
    let log = std::fs::File::create(dir.path().join("konnector.log")).context("creating the log file")?;
    let mut child = tokio::process::Command::new(&binary)
        .arg("run")
        .arg("--kubeconfig")
        .arg(&kubeconfig)
        .args([
            "--leader-elect=false",
            "--metrics-addr=127.0.0.1:0",
            "--health-addr=127.0.0.1:0",
            "--log-level=warn",
        ])
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
    let (rss_ready, _) = memory_kib(pid)?;

    let cpu_before_sync = cpu_ticks(pid)?;
    let start = Instant::now();
    for i in 0..count {
        let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
                            "metadata": {"name": format!("w-{i:05}"), "namespace": "default"},
                            "spec": {"size": i, "color": "blue"}});
        consumer
            .create(&widgets(), Some("default"), &object(widget)?, &Default::default())
            .await?;
    }
    let created = start.elapsed();
    wait_for(&format!("{count} widgets on the provider"), SYNC_DEADLINE, async || {
        let list = provider.list(&widgets(), None, &Default::default()).await.ok()?;
        (list.items.len() == count).then_some(())
    })
    .await?;
    let synced = start.elapsed();
    let cpu_sync = cpu_ticks(pid)? - cpu_before_sync;
    let (rss_synced, _) = memory_kib(pid)?;

    // Two halves: the first may still hold the tail of the sync (status and finalizer writes
    // echoing back through the watches), the second is the steady idle cost.
    let half = Duration::from_secs(idle_seconds) / 2;
    let cpu_before_idle = cpu_ticks(pid)?;
    tokio::time::sleep(half).await;
    let cpu_first_half = cpu_ticks(pid)? - cpu_before_idle;
    let (rss_half, _) = memory_kib(pid)?;
    tokio::time::sleep(half).await;
    let cpu_idle = cpu_ticks(pid)? - cpu_before_idle;
    let cpu_second_half = cpu_idle - cpu_first_half;
    let (rss_idle, hwm) = memory_kib(pid)?;
    if let Some(status) = child.try_wait()? {
        bail!("the konnector exited during the measurement: {status}");
    }

    let hz = clock_ticks_per_second() as f64;
    println!("konnector footprint ({})", binary.display());
    println!("  objects:                  {count} widgets, one ClusterBinding");
    println!("  created on the consumer:  {:.2} s", created.as_secs_f64());
    println!(
        "  synced to the provider:   {:.2} s after the first create ({:.0} objects/s)",
        synced.as_secs_f64(),
        count as f64 / synced.as_secs_f64()
    );
    println!("  CPU during the sync:      {:.2} s", cpu_sync as f64 / hz);
    println!(
        "  CPU while idle:           {:.2} s over {idle_seconds} s ({:.2} % of one core)",
        cpu_idle as f64 / hz,
        100.0 * cpu_idle as f64 / hz / idle_seconds as f64
    );
    println!(
        "    first / second half:    {:.2} s / {:.2} s",
        cpu_first_half as f64 / hz,
        cpu_second_half as f64 / hz
    );
    println!("  RSS before the sync:      {}", mib(rss_ready));
    println!("  RSS after the sync:       {}", mib(rss_synced));
    println!("  RSS half-way through idle: {}", mib(rss_half));
    println!("  RSS after the idle time:  {}", mib(rss_idle));
    println!("  RSS peak (VmHWM):         {}", mib(hwm));

    child.kill().await.context("stopping the konnector")?;
    provider_server.shutdown().await;
    consumer_server.shutdown().await;
    Ok(())
}
