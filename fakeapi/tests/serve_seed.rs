//! `fakeapi serve` identities: without `--seed` two servers are two clusters (a random seed,
//! printed so the run can be replayed); the same `--seed` gives the same cluster; without a seed
//! the clock is wall time, with one it starts at the deterministic worlds' fixed instant.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kube::config::{KubeConfigOptions, Kubeconfig};
use serde_json::Value;

const DEADLINE: Duration = Duration::from_secs(30);

/// Kills the server when the test is done with it (or fails).
struct Running(Child);

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A served fake cluster: its printed seed, its kube-system UID and creation time.
struct Served {
    seed: u64,
    kube_system_uid: String,
    kube_system_created: jiff::Timestamp,
    _server: Running,
}

async fn serve(dir: &Path, name: &str, seed: Option<u64>) -> Served {
    let kubeconfig = dir.join(format!("{name}.kubeconfig"));
    let mut command = Command::new(env!("CARGO_BIN_EXE_fakeapi"));
    command
        .args(["serve", "--addr", "127.0.0.1:0"])
        .arg("--kubeconfig")
        .arg(&kubeconfig);
    if let Some(seed) = seed {
        command.args(["--seed", &seed.to_string()]);
    }
    let mut server = Running(
        command
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("the fakeapi binary starts"),
    );
    let stderr = server.0.stderr.take().expect("piped stderr");
    let line = tokio::task::spawn_blocking(move || {
        let mut lines = BufReader::new(stderr).lines();
        let found = lines
            .by_ref()
            .map_while(Result::ok)
            .find(|l| l.starts_with("fakeapi: seed "));
        // Keep draining, so the server never blocks on a full pipe.
        std::thread::spawn(move || lines.for_each(drop));
        found
    });
    let line = tokio::time::timeout(DEADLINE, line)
        .await
        .expect("the seed line within the deadline")
        .unwrap()
        .expect("fakeapi prints its seed on start");
    let printed: u64 = line["fakeapi: seed ".len()..]
        .split_whitespace()
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no seed in {line:?}"));
    let started = Instant::now();
    while !kubeconfig.exists() {
        assert!(started.elapsed() < DEADLINE, "{} never appeared", kubeconfig.display());
        if let Some(status) = server.0.try_wait().unwrap() {
            panic!("fakeapi exited with {status}");
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let config = kube::Config::from_custom_kubeconfig(
        Kubeconfig::read_from(&kubeconfig).unwrap(),
        &KubeConfigOptions::default(),
    )
    .await
    .unwrap();
    let client = kube::Client::try_from(config).unwrap();
    let request = http::Request::get("/api/v1/namespaces/kube-system")
        .body(Vec::new())
        .unwrap();
    let namespace: Value = client.request(request).await.unwrap();
    Served {
        seed: printed,
        kube_system_uid: namespace["metadata"]["uid"].as_str().unwrap().to_string(),
        kube_system_created: namespace["metadata"]["creationTimestamp"]
            .as_str()
            .unwrap()
            .parse()
            .unwrap(),
        _server: server,
    }
}

#[tokio::test]
async fn servers_without_a_seed_are_different_clusters_and_a_printed_seed_replays_one() {
    let dir = tempfile::tempdir().unwrap();
    let a = serve(dir.path(), "a", None).await;
    let b = serve(dir.path(), "b", None).await;
    assert_ne!(a.seed, b.seed, "each start picks its own seed");
    assert_ne!(
        a.kube_system_uid, b.kube_system_uid,
        "two servers without --seed must not share a cluster identity"
    );
    let replay = serve(dir.path(), "replay", Some(a.seed)).await;
    assert_eq!(replay.seed, a.seed, "an explicit seed is printed as given");
    assert_eq!(
        replay.kube_system_uid, a.kube_system_uid,
        "the printed seed replays the cluster"
    );
}

#[tokio::test]
async fn the_same_seed_gives_the_same_cluster() {
    let dir = tempfile::tempdir().unwrap();
    let first = serve(dir.path(), "first", Some(7)).await;
    let second = serve(dir.path(), "second", Some(7)).await;
    assert_eq!(first.kube_system_uid, second.kube_system_uid);
}

#[tokio::test]
async fn a_server_without_a_seed_keeps_wall_time_and_a_seeded_one_the_fixed_clock() {
    let dir = tempfile::tempdir().unwrap();
    let before = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(1);
    let wall = serve(dir.path(), "wall", None).await;
    let after = jiff::Timestamp::now() + jiff::SignedDuration::from_secs(1);
    assert!(
        before <= wall.kube_system_created && wall.kube_system_created <= after,
        "kube-system was created at {}, not between {before} and {after}: AGE columns would be off",
        wall.kube_system_created
    );
    let seeded = serve(dir.path(), "seeded", Some(7)).await;
    let fixed: jiff::Timestamp = "2026-01-01T00:00:00Z".parse().unwrap();
    assert!(
        seeded.kube_system_created >= fixed && seeded.kube_system_created < fixed + jiff::SignedDuration::from_secs(60),
        "a seeded server starts at the fixed instant, not {}",
        seeded.kube_system_created
    );
}
