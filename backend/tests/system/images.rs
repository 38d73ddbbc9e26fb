//! The container images run (`hack/image-test` builds both with `hack/image`, then runs this
//! ignored test): the kbind-backend image serves the gateway and issuer on a `fakeapi serve`
//! provider until `/readyz` answers and a bind returns a bundle, and the konnector image, given
//! that bundle, brings its Connection to Ready on a `fakeapi serve` consumer, answers its probes
//! and syncs both ways.
//!
//! Containers run under podman on the host network (so `127.0.0.1` is the host's fakeapi), as the
//! image's own non-root user, with the chart's restrictions (read-only root, no capabilities, no
//! privilege escalation); the kubeconfigs, token file and CA are mounted read-only. The podman
//! flags are the ones this machine kind needs: runc (crun refuses its hybrid cgroups), cgroupfs,
//! and file limits under the machine's hard limit. Images come from `KBIND_KONNECTOR_IMAGE` and
//! `KBIND_BACKEND_IMAGE`, else the charts' defaults; podman's storage driver from
//! `BUILDAH_STORAGE_DRIVER` (as `hack/image`), else vfs.

use std::path::Path;
use std::process::Stdio;

use super::*;

/// Where the mounted files appear inside a container.
const MOUNT: &str = "/etc/kbind";

/// The image `component` runs as: `KBIND_<COMPONENT>_IMAGE`, else the chart's default, which is
/// what `hack/image COMPONENT` builds (`reaper_chart::hack_image_builds_the_image_each_chart_runs`).
fn image(component: &str, variable: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| format!("ghcr.io/kbind/{component}:{}", env!("CARGO_PKG_VERSION")))
}

/// podman with the global flags this machine kind needs.
fn podman() -> std::process::Command {
    let mut command = std::process::Command::new("podman");
    command.args(podman_globals());
    command
}

fn podman_globals() -> Vec<String> {
    let driver = std::env::var("BUILDAH_STORAGE_DRIVER").unwrap_or_else(|_| "vfs".into());
    vec![
        format!("--storage-driver={driver}"),
        "--runtime=runc".into(),
        "--cgroup-manager=cgroupfs".into(),
    ]
}

/// Fails with what to run when `image` is not in podman's storage.
fn require_image(image: &str, component: &str) {
    let status = podman()
        .args(["image", "exists", image])
        .status()
        .expect("podman runs (Debian: apt-get install podman runc)");
    assert!(
        status.success(),
        "no image {image} in podman's storage; build it with `hack/image {component}` (or run hack/image-test)"
    );
    let user = podman()
        .args(["image", "inspect", "--format", "{{.Config.User}}", image])
        .output()
        .expect("podman runs");
    assert_eq!(
        String::from_utf8_lossy(&user.stdout).trim(),
        "65532:65532",
        "{image} runs as the charts' non-root user"
    );
}

/// A container run with `podman run --rm`, its stderr in the test's lines; removed when dropped
/// (killing the podman client alone would leave the container running).
struct Container {
    name: String,
    who: String,
    process: parking_lot::Mutex<Process>,
}

impl Container {
    /// Runs `image` with `args`, `mounts` mounted read-only at [`MOUNT`].
    fn run(image: &str, who: &str, mounts: &Path, args: &[String], lines: &Lines) -> Self {
        // hack/image-test names the run, so it can remove what a killed test leaves behind.
        let run = std::env::var("KBIND_IMAGE_TEST_RUN").unwrap_or_else(|_| std::process::id().to_string());
        let name = format!("kbind-image-test-{run}-{who}");
        let mut podman_args = podman_globals();
        podman_args.extend(
            [
                "run",
                "--rm",
                "--name",
                &name,
                "--network=host",
                "--ulimit=nofile=20000:20000",
                "--ulimit=nproc=4096:4096",
                "--read-only",
                "--cap-drop=all",
                "--security-opt=no-new-privileges",
                "--volume",
                &format!("{}:{MOUNT}:ro", mounts.display()),
                image,
            ]
            .map(String::from),
        );
        podman_args.extend(args.iter().cloned());
        let process = Process::start(Path::new("podman"), &podman_args, who, lines);
        Self {
            name,
            who: who.to_string(),
            process: parking_lot::Mutex::new(process),
        }
    }

    /// Fails with the logs once the container has exited: a container that cannot start would
    /// otherwise show only as a wait running into its deadline.
    fn running(&self, lines: &Lines) {
        let mut process = self.process.lock();
        if let Ok(Some(status)) = process.child.try_wait() {
            panic!("the {} container exited ({status}); logs:\n{}", self.who, dump(lines));
        }
    }
}

impl Drop for Container {
    fn drop(&mut self) {
        let _ = podman()
            .args(["rm", "--force", "--time=0", "--ignore", &self.name])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status();
    }
}

/// Writes `contents` into `dir` as `name`, readable by the container's user; its path inside.
fn mount_file(dir: &Path, name: &str, contents: &[u8]) -> String {
    use std::os::unix::fs::PermissionsExt;
    let path = dir.join(name);
    std::fs::write(&path, contents).expect("mounted file written");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).expect("chmod");
    format!("{MOUNT}/{name}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "runs the container images under podman; hack/image-test builds them and runs this"]
async fn the_backend_image_issues_a_bundle_that_the_konnector_image_syncs() {
    let konnector_image = image("konnector", "KBIND_KONNECTOR_IMAGE");
    let backend_image = image("kbind-backend", "KBIND_BACKEND_IMAGE");
    require_image(&konnector_image, "konnector");
    require_image(&backend_image, "kbind-backend");

    let world = World::new().await;
    let lines = world.lines.clone();
    let mounts = world.dir.path().join("mounts");
    std::fs::create_dir(&mounts).expect("mount dir");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&mounts, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }

    // The backend image: gateway and issuer on the provider, until /readyz answers.
    let (server, ca) = world.provider.server_and_ca();
    let provider_kubeconfig = std::fs::read(&world.provider.kubeconfig).expect("provider kubeconfig");
    let addr = free_addr();
    let url = format!("http://{addr}");
    let backend_args = [
        "run".to_string(),
        "--gateway".into(),
        "--issuer".into(),
        format!(
            "--kubeconfig={}",
            mount_file(&mounts, "provider.kubeconfig", &provider_kubeconfig)
        ),
        format!("--listen={addr}"),
        format!("--public-url={url}"),
        "--provider-name=acme".into(),
        format!("--provider-url={server}"),
        format!(
            "--provider-ca={}",
            mount_file(&mounts, "provider-ca.pem", ca.as_bytes())
        ),
        format!(
            "--token-file={}",
            mount_file(&mounts, "tokens.csv", format!("{TOKEN},alice\n").as_bytes())
        ),
        "--claimable-namespaces=*".into(),
    ];
    let backend = Container::run(&backend_image, "backend", &mounts, &backend_args, &lines);
    eventually("the backend image's /readyz", &lines, async || {
        backend.running(&lines);
        (http_status(addr, "/readyz").await? == 200).then_some(())
    })
    .await;

    // A bind through its gateway returns a bundle.
    eventually("the catalog to offer widgets as ready", &lines, async || {
        backend.running(&lines);
        let (status, body) = world
            .call(world.http.get(format!("{url}{}", path::CATALOG)).bearer_auth(TOKEN))
            .await;
        let catalog: Catalog = serde_json::from_value(body).ok()?;
        (status == 200 && catalog.exports.iter().any(|e| e.name == "widgets" && e.ready)).then_some(())
    })
    .await;
    let bound = world.bind(&url).await;
    let documents = world.pickup_and_apply(&bound.pickup_url).await;
    let connection = named(&documents, "Connection")[0]["metadata"]["name"]
        .as_str()
        .expect("named")
        .to_string();
    let binding = named(&documents, "Binding")[0]["metadata"]["name"]
        .as_str()
        .expect("named")
        .to_string();

    // The konnector image on the consumer, with the bundle applied.
    let consumer_kubeconfig = std::fs::read(&world.consumer.kubeconfig).expect("consumer kubeconfig");
    let health = free_addr();
    let metrics = free_addr();
    let konnector_args = [
        "run".to_string(),
        format!(
            "--kubeconfig={}",
            mount_file(&mounts, "consumer.kubeconfig", &consumer_kubeconfig)
        ),
        "--namespace=kbind".into(),
        "--identity=konnector-image".into(),
        format!("--health-addr={health}"),
        format!("--metrics-addr={metrics}"),
        "--log-format=json".into(),
    ];
    let konnector = Container::run(&konnector_image, "konnector", &mounts, &konnector_args, &lines);
    let c = &world.consumer.client;
    let p = &world.provider.client;
    for (res, ns, name) in [
        (erase::<kbind_api::Connection>(), None, connection.as_str()),
        (erase::<kbind_api::Binding>(), Some(TEAM), binding.as_str()),
    ] {
        eventually(&format!("{} {name} Ready", res.kind), &lines, async || {
            konnector.running(&lines);
            let ready = condition(c, &res, ns, name, "Ready").await?;
            (ready.status == "True").then_some(())
        })
        .await;
    }
    for (addr, path) in [(health, "/healthz"), (health, "/readyz"), (metrics, "/metrics")] {
        eventually(&format!("the konnector image's {path}"), &lines, async || {
            konnector.running(&lines);
            (http_status(addr, path).await? == 200).then_some(())
        })
        .await;
    }

    // Spec up, status down.
    let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": TEAM}, "spec": {"size": 1, "color": "blue"}});
    eventually("widgets served on the consumer", &lines, async || {
        c.list(&widgets(), Some(TEAM), &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    c.create(&widgets(), Some(TEAM), &object(widget), &Default::default())
        .await
        .expect("widget created");
    eventually("w1 on the provider", &lines, async || {
        konnector.running(&lines);
        let copy = p.get_opt(&widgets(), Some(TEAM), "w1").await.ok()??;
        (copy.data["spec"]["size"] == 1).then_some(())
    })
    .await;
    p.patch_status(
        &widgets(),
        Some(TEAM),
        "w1",
        &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        &PatchParams::default(),
    )
    .await
    .expect("provider status written");
    eventually("w1's status down on the consumer", &lines, async || {
        konnector.running(&lines);
        let obj = c.get_opt(&widgets(), Some(TEAM), "w1").await.ok()??;
        (obj.data["status"]["phase"] == "Ready").then_some(())
    })
    .await;
}
