//! The real `kbind` binary against a gateway that lies (a few lines of axum serving crafted
//! bundles, [`super::fake_gateway`]) and a `fakeapi serve` consumer with kbind's CRDs and a fresh
//! konnector Lease (no konnector: these tests are about what the CLI applies and deletes).

use std::path::Path;

use k8s_openapi::api::core::v1::Secret;
use kbind_api::consts::API_VERSION;
use kbind_api::consts::backend::LABEL_GRANT;
use kbind_cluster::{ClusterClient, ClusterClientExt, PatchParams};
use serde_json::{Value, json};

use super::children::*;
use super::fake_gateway::{CONNECTION, FakeGateway, GRANT, consumer_with_kbind, honest_bundle};
use super::{Cli, Run};

const TOKEN: &str = "a-token-for-the-fake-gateway-0123456789";

struct Consumer {
    dir: tempfile::TempDir,
    lines: Lines,
    cluster: FakeCluster,
    gateway: FakeGateway,
}

impl Consumer {
    /// A consumer with kbind's CRDs, namespaces `kbind`, `team-a` and `other`, a fresh
    /// konnector Lease, two Secrets in kube-system worth stealing, and a login at a fake gateway.
    async fn new(bundle: Vec<Value>) -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let cluster = consumer_with_kbind(dir.path(), &lines).await;
        let c = &cluster.client;
        for name in ["victim-secret", "db-password"] {
            let secret = json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": "kube-system"}, "stringData": {"password": "hunter2"}});
            c.create(
                &erase::<Secret>(),
                Some("kube-system"),
                &object(secret),
                &Default::default(),
            )
            .await
            .expect("Secret created");
        }
        let gateway = FakeGateway::start(bundle).await;
        let world = Self {
            dir,
            lines,
            cluster,
            gateway,
        };
        let url = world.gateway.url.clone();
        let run = world.kbind(&["login", &url, "--token", TOKEN]).await;
        assert_eq!(run.code, 0, "login at the fake gateway: {run:?}");
        world
    }

    async fn kbind(&self, args: &[&str]) -> Run {
        self.kbind_with(args, &self.cluster.kubeconfig, None, &[]).await
    }

    /// Runs `kbind` against `kubeconfig`, with `stdin` and `env` when given.
    async fn kbind_with(&self, args: &[&str], kubeconfig: &Path, stdin: Option<&str>, env: &[(&str, &str)]) -> Run {
        let cli = Cli {
            kubeconfig,
            config_home: &self.dir.path().join("config"),
            lines: &self.lines,
        };
        cli.run(Path::new(env!("CARGO_BIN_EXE_kbind")), args, stdin, env).await
    }

    async fn get(&self, kind: &str, ns: Option<&str>, name: &str) -> Option<Value> {
        let res = match kind {
            "Secret" => erase::<Secret>(),
            "Connection" => erase::<kbind_api::Connection>(),
            "Binding" => erase::<kbind_api::Binding>(),
            _ => widgets(),
        };
        self.cluster
            .client
            .get_opt(&res, ns, name)
            .await
            .expect("read")
            .map(|o| serde_json::to_value(o).expect("json"))
    }

    async fn create(&self, value: Value) {
        let kind = value["kind"].as_str().expect("kind").to_string();
        let ns = value["metadata"]["namespace"].as_str().map(str::to_string);
        let res = match kind.as_str() {
            "Secret" => erase::<Secret>(),
            "Connection" => erase::<kbind_api::Connection>(),
            "Binding" => erase::<kbind_api::Binding>(),
            "CustomResourceDefinition" => {
                erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>()
            }
            _ => widgets(),
        };
        self.cluster
            .client
            .create(&res, ns.as_deref(), &object(value), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{kind} created: {e}"));
    }

    /// Whether nothing of the bundle reached the consumer.
    async fn untouched(&self) -> bool {
        self.get("Connection", None, CONNECTION).await.is_none()
            && self
                .get("Secret", Some("kbind"), &format!("{CONNECTION}-kubeconfig"))
                .await
                .is_none()
            && self.get("Binding", Some("team-a"), CONNECTION).await.is_none()
            && self.get("Binding", Some("kube-system"), CONNECTION).await.is_none()
    }

    fn revoked(&self) -> bool {
        self.gateway.seen().contains(&format!("DELETE /api/v1/grants/{GRANT}"))
    }

    fn asked_for_a_grant(&self) -> bool {
        self.gateway.seen().iter().any(|r| r == "POST /api/v1/bind")
    }
}

/// Turns an honest bundle into a crafted one.
type Craft = fn(Vec<Value>) -> Vec<Value>;

fn check(run: &Run, code: i32, what: &str) {
    assert_eq!(
        run.code, code,
        "{what}: exit code\nstdout:\n{}\nstderr:\n{}",
        run.stdout, run.stderr
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_that_differs_from_the_request_is_refused_whole_and_its_grant_revoked() {
    let world = Consumer::new(Vec::new()).await;
    let stolen = |mut b: Vec<Value>| {
        b[1]["spec"]["kubeconfigSecretRef"] =
            json!({"namespace": "kube-system", "name": "victim-secret", "key": "password"});
        b
    };
    let wildcard = |mut b: Vec<Value>| {
        b[1]["metadata"]["annotations"]["core.kbind.io/binding-namespaces"] = json!("*");
        b
    };
    let kube_system = |_| honest_bundle(&["team-a", "kube-system"]);
    let elsewhere = |_| honest_bundle(&["other"]);
    let cases: [(&str, Craft, &str); 4] = [
        (
            "a secretRef to kube-system/victim-secret",
            stolen,
            "kube-system/victim-secret",
        ),
        ("binding-namespaces: *", wildcard, "core.kbind.io/binding-namespaces"),
        ("a Binding in kube-system", kube_system, "kube-system"),
        ("a Binding in a namespace not asked for", elsewhere, "were asked for"),
    ];
    for (what, craft, why) in cases {
        world.gateway.serve(craft(honest_bundle(&["team-a"])));
        world.gateway.forget();
        let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
        check(&run, 6, what);
        assert!(
            run.stderr.contains(why) && run.stderr.contains("nothing was applied"),
            "{what}: {}",
            run.stderr
        );
        assert!(world.untouched().await, "{what}: something was applied");
        assert!(
            world.revoked(),
            "{what}: the new Grant is revoked again: {:?}",
            world.gateway.seen()
        );
    }
    assert!(
        world
            .get("Secret", Some("kube-system"), "victim-secret")
            .await
            .is_some()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn from_consumer_related_resources_are_shown_and_asked_for() {
    let all_secrets = json!({"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"labelSelector": {}}});
    let mut bundle = honest_bundle(&["team-a"]);
    bundle[2]["spec"]["relatedResources"] = json!([all_secrets]);
    let world = Consumer::new(bundle).await;

    // The catalog did not say: the bundle's rule is shown after the pickup, and without a
    // terminal to ask on nothing is applied and the Grant goes again.
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 6, "an unannounced FromConsumer rule without a terminal");
    assert!(
        run.stdout.contains("FromConsumer") && run.stdout.contains("EVERY one"),
        "{}",
        run.stdout
    );
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    assert!(world.untouched().await);
    assert!(world.revoked());

    // The catalog says: it is shown and asked for before any Grant exists.
    world.gateway.announce_related(vec![all_secrets]);
    world.gateway.forget();
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 2, "an announced FromConsumer rule without --yes");
    assert!(
        run.stdout.contains("namespace team-a") && run.stdout.contains("EVERY one"),
        "{}",
        run.stdout
    );
    assert!(
        !world.asked_for_a_grant(),
        "asked before binding: {:?}",
        world.gateway.seen()
    );

    let run = world
        .kbind(&["bind", "widgets", "-n", "team-a", "--wait=false", "--yes"])
        .await;
    check(&run, 0, "an announced FromConsumer rule with --yes");
    assert!(world.get("Binding", Some("team-a"), CONNECTION).await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_of_another_grant_is_never_overwritten() {
    let world = Consumer::new(honest_bundle(&["team-a"])).await;
    world
        .create(json!({"apiVersion": API_VERSION, "kind": "Connection",
            "metadata": {"name": CONNECTION, "labels": {LABEL_GRANT: "g-other"}},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": format!("{CONNECTION}-kubeconfig"),
                "key": "kubeconfig"}}}))
        .await;
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 6, "a Connection of another Grant");
    assert!(run.stderr.contains("belongs to Grant g-other"), "{}", run.stderr);
    let connection = world.get("Connection", None, CONNECTION).await.expect("still there");
    assert_eq!(connection["metadata"]["labels"][LABEL_GRANT], "g-other");
    assert!(
        world
            .get("Secret", Some("kbind"), &format!("{CONNECTION}-kubeconfig"))
            .await
            .is_none()
    );
    assert!(world.revoked());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_checks_namespaces_before_the_grant_and_undoes_a_half_applied_bundle() {
    let world = Consumer::new(honest_bundle(&["team-a"])).await;
    let run = world.kbind(&["bind", "widgets", "-n", "nope", "--wait=false"]).await;
    check(&run, 6, "a namespace missing on the consumer");
    assert!(run.stderr.contains("namespace nope does not exist"), "{}", run.stderr);
    assert!(
        !world.asked_for_a_grant(),
        "no Grant asked for: {:?}",
        world.gateway.seen()
    );

    // The Binding CRD is gone: the Secret and Connection apply, the Binding fails.
    let c = &world.cluster.client;
    c.delete(
        &erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(),
        None,
        "bindings.core.kbind.io",
        &Default::default(),
    )
    .await
    .expect("CRD deleted");
    eventually("Bindings not served", &world.lines, async || {
        c.list(&erase::<kbind_api::Binding>(), Some("team-a"), &Default::default())
            .await
            .is_err()
            .then_some(())
    })
    .await;
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 1, "a Binding that cannot be applied");
    assert!(run.stderr.contains("removed what this run created"), "{}", run.stderr);
    assert!(world.untouched().await, "the Secret and Connection are removed again");
    assert!(world.revoked());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeem_takes_the_url_from_stdin_or_the_environment_and_picks_it_up_first() {
    let world = Consumer::new(honest_bundle(&["team-a"])).await;
    let url = world.gateway.pickup_url();

    // A consumer that cannot be reached: the URL is spent first anyway, and the error says so.
    let unreachable = world.dir.path().join("unreachable.kubeconfig");
    let port = free_addr().port();
    std::fs::write(
        &unreachable,
        format!(
            "apiVersion: v1\nkind: Config\nclusters: [{{name: c, cluster: {{server: 'https://127.0.0.1:{port}'}}}}]\n\
             users: [{{name: u, user: {{token: t}}}}]\ncontexts: [{{name: c, context: {{cluster: c, user: u}}}}]\ncurrent-context: c\n"
        ),
    )
    .expect("kubeconfig written");
    let run = world
        .kbind_with(
            &["redeem", "-", "-n", "team-a", "--yes"],
            &unreachable,
            Some(&format!("{url}\n")),
            &[],
        )
        .await;
    assert_ne!(run.code, 0, "{run:?}");
    let seen = world.gateway.seen();
    assert!(
        seen.iter().any(|r| r.starts_with("GET /api/v1/pickup/")),
        "picked up first: {seen:?}"
    );
    assert!(run.stderr.contains("used up"), "{}", run.stderr);
    assert!(!run.stderr.contains(&url), "the URL is not echoed");

    // Without --namespace and without a terminal the bundle's namespaces need --yes.
    let run = world
        .kbind_with(&["redeem", "-"], &world.cluster.kubeconfig, Some(&url), &[])
        .await;
    check(&run, 2, "redeem without --namespace nor --yes");
    assert!(run.stdout.contains("team-a"), "{}", run.stdout);
    assert!(world.untouched().await);

    // A bundle binding in a namespace this cluster lacks: refused before anything is applied.
    world.gateway.serve(honest_bundle(&["nope"]));
    let run = world
        .kbind_with(&["redeem", "-", "--yes"], &world.cluster.kubeconfig, Some(&url), &[])
        .await;
    check(&run, 6, "redeem into a missing namespace");
    assert!(
        run.stderr.contains("namespace nope does not exist") && run.stderr.contains("used up"),
        "{}",
        run.stderr
    );
    assert!(world.untouched().await);
    world.gateway.serve(honest_bundle(&["team-a"]));

    // From the environment, with the namespaces stated.
    let run = world
        .kbind_with(
            &["redeem", "-n", "team-a", "--wait=false"],
            &world.cluster.kubeconfig,
            None,
            &[("KBIND_PICKUP_URL", &url)],
        )
        .await;
    check(&run, 0, "redeem from KBIND_PICKUP_URL");
    assert!(world.get("Binding", Some("team-a"), CONNECTION).await.is_some());
}

/// A widget in `namespace`.
fn widget(namespace: &str, name: &str) -> Value {
    json!({"apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": name, "namespace": namespace},
        "spec": {"size": 1}})
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbind_deletes_only_what_its_plan_lists() {
    let world = Consumer::new(Vec::new()).await;
    let mut crd = widgets_crd();
    crd["metadata"]["labels"] = json!({"core.kbind.io/managed": "true"});
    world.create(crd).await;
    // A kbind-managed CRD the cluster does not serve: its objects cannot be listed, yet it goes.
    let mut unserved = widgets_crd();
    unserved["metadata"] = json!({"name": "gadgets.example.org", "labels": {"core.kbind.io/managed": "true"}});
    unserved["spec"]["names"] =
        json!({"plural": "gadgets", "singular": "gadget", "kind": "Gadget", "listKind": "GadgetList"});
    unserved["spec"]["versions"][0]["served"] = json!(false);
    world.create(unserved).await;
    let c = &world.cluster.client;
    eventually("widgets served", &world.lines, async || {
        c.list(&widgets(), None, &Default::default()).await.ok().map(|_| ())
    })
    .await;
    world.create(widget("team-a", "w-bound")).await;
    world.create(widget("other", "w-never-bound")).await;
    // A Connection whose Secret is kube-system's, and one sharing a Secret of its Grant.
    let labels = json!({LABEL_GRANT: GRANT});
    world
        .create(json!({"apiVersion": API_VERSION, "kind": "Connection",
            "metadata": {"name": CONNECTION, "labels": labels},
            "spec": {"kubeconfigSecretRef": {"namespace": "kube-system", "name": "victim-secret", "key": "password"}}}))
        .await;
    world
        .create(json!({"apiVersion": API_VERSION, "kind": "Binding",
            "metadata": {"name": CONNECTION, "namespace": "team-a", "labels": labels},
            "spec": {"connectionRef": {"name": CONNECTION},
                "apis": [{"name": "widgets.example.org"}, {"name": "gadgets.example.org"}]}}))
        .await;
    world
        .create(json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "shared", "namespace": "kbind", "labels": {LABEL_GRANT: "g-2"}},
            "stringData": {"kubeconfig": "x"}}))
        .await;
    for name in ["two", "three"] {
        world
            .create(json!({"apiVersion": API_VERSION, "kind": "Connection",
                "metadata": {"name": name, "labels": {LABEL_GRANT: "g-2"}},
                "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "shared", "key": "kubeconfig"}}}))
            .await;
    }

    let run = world.kbind(&["unbind", CONNECTION, "--yes"]).await;
    check(&run, 0, "unbind");
    // The CRD goes with the last binding: every widget, in every namespace, is in the plan.
    for listed in [
        "CustomResourceDefinition",
        "widgets.example.org",
        "w-bound",
        "other",
        "w-never-bound",
    ] {
        assert!(run.stdout.contains(listed), "{listed} in the plan:\n{}", run.stdout);
    }
    assert!(
        run.stdout
            .contains("CustomResourceDefinition gadgets.example.org is not in the cluster's discovery")
            && run
                .stdout
                .lines()
                .any(|l| l.starts_with("CustomResourceDefinition ") && l.ends_with(" gadgets.example.org")),
        "the unserved CRD is in the plan, its objects unlisted:\n{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("Secret kube-system/victim-secret stays"),
        "{}",
        run.stdout
    );
    assert!(
        world
            .get("Secret", Some("kube-system"), "victim-secret")
            .await
            .is_some()
    );
    assert!(world.get("Connection", None, CONNECTION).await.is_none());

    let run = world.kbind(&["unbind", "two", "--yes"]).await;
    check(&run, 0, "unbind of a Connection sharing its Secret");
    assert!(run.stdout.contains("Connection three uses it too"), "{}", run.stdout);
    assert!(world.get("Secret", Some("kbind"), "shared").await.is_some());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn revoke_warns_to_unbind_first_and_unbind_after_a_revoke_says_to_use_orphan() {
    let world = Consumer::new(Vec::new()).await;
    world
        .create(json!({"apiVersion": API_VERSION, "kind": "Connection",
            "metadata": {"name": CONNECTION, "labels": {LABEL_GRANT: GRANT}},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "s", "key": "kubeconfig"}}}))
        .await;

    let run = world.kbind(&["revoke", GRANT]).await;
    check(&run, 2, "revoke without --yes");
    assert!(run.stderr.contains("unbind before revoke"), "{}", run.stderr);
    assert!(
        run.stderr.contains(&format!("kbind unbind {CONNECTION}")),
        "{}",
        run.stderr
    );
    assert!(!world.revoked());

    // What the konnector reports once the provider answers 401.
    let status = json!({"status": {"conditions": [{"type": "Connected", "status": "False",
        "reason": "Unauthorized", "message": "the provider refuses the credentials (HTTP 401): they were revoked or have expired",
        "lastTransitionTime": "2026-01-01T00:00:00Z"}]}});
    world
        .cluster
        .client
        .patch_status(
            &erase::<kbind_api::Connection>(),
            None,
            CONNECTION,
            &kbind_cluster::Patch::Merge(status),
            &PatchParams::default(),
        )
        .await
        .expect("status written");
    let run = world.kbind(&["unbind", CONNECTION, "--yes"]).await;
    check(&run, 1, "unbind with a refused credential");
    assert!(
        run.stderr.contains("--orphan") && run.stderr.contains("401"),
        "{}",
        run.stderr
    );
    assert!(
        world.get("Connection", None, CONNECTION).await.is_some(),
        "nothing was changed"
    );

    let run = world.kbind(&["unbind", CONNECTION, "--yes", "--orphan"]).await;
    check(&run, 0, "unbind --orphan");
    assert!(world.get("Connection", None, CONNECTION).await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_hands_the_opener_only_https_and_keeps_to_the_pinned_issuer() {
    let dir = tempfile::tempdir().expect("temp dir");
    let gateway = FakeGateway::start(Vec::new()).await;
    gateway.offer_oidc("file:///etc/passwd?response_type=code");
    let opened = dir.path().join("opened");
    let browser = dir.path().join("browser.sh");
    std::fs::write(&browser, format!("#!/bin/sh\necho \"$@\" >> {}\n", opened.display())).expect("script");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&browser, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    }
    let login = |extra: &[&str]| {
        let mut command = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbind"));
        command
            .args(["login", &gateway.url])
            .args(extra)
            .env("XDG_CONFIG_HOME", dir.path().join("config"))
            .env("BROWSER", &browser)
            .env_remove("KBIND_TOKEN")
            .env_remove("KBIND_OIDC_ISSUER")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true);
        command.spawn().expect("kbind starts")
    };

    let mut child = login(&[]);
    let lines = Lines::default();
    // Either it refuses (and exits) or it hands the URL to the "browser" and waits for a callback.
    eventually("login to refuse or open a browser", &lines, async || {
        assert!(
            !opened.exists(),
            "the opener was handed {:?}",
            std::fs::read_to_string(&opened).unwrap_or_default()
        );
        child.try_wait().expect("poll").map(|_| ())
    })
    .await;
    let output = child.wait_with_output().await.expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("only https") && stderr.contains("file://"), "{stderr}");
    assert!(!opened.exists());

    // Pinned to another issuer: refused before anything is fetched from the announced one.
    gateway.forget();
    let child = login(&["--oidc-issuer", "https://idp.example"]);
    let output = child.wait_with_output().await.expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("not at https://idp.example"), "{stderr}");
    assert!(
        !gateway.seen().iter().any(|r| r.contains("openid-configuration")),
        "{:?}",
        gateway.seen()
    );

    // The last sign-in to this gateway was at another issuer: that one is expected by default.
    let credentials = dir.path().join("config/kbind/credentials");
    std::fs::create_dir_all(&credentials).expect("credentials folder");
    let file: String = gateway
        .url
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '.' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect();
    let cached = json!({"gateway": gateway.url, "token": "old", "subject": "oidc:x", "oidcIssuer": "https://idp.example",
        "expiresAt": "2001-01-01T00:00:00Z"});
    std::fs::write(credentials.join(format!("{file}.json")), cached.to_string()).expect("credential written");
    let output = login(&[]).wait_with_output().await.expect("output");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("not at https://idp.example") && stderr.contains("--oidc-issuer"),
        "{stderr}"
    );
}

/// A Connection `connection` of another provider (its Secret need not exist: no konnector runs).
fn other_connection(connection: &str) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "Connection",
        "metadata": {"name": connection, "labels": {LABEL_GRANT: format!("g-{connection}")}},
        "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": format!("{connection}-kubeconfig"),
            "key": "kubeconfig"}}})
}

/// A Binding of widgets in `namespace` through `connection`, named `name`.
fn widgets_binding(namespace: &str, name: &str, connection: &str) -> Value {
    json!({"apiVersion": API_VERSION, "kind": "Binding",
        "metadata": {"name": name, "namespace": namespace, "labels": {LABEL_GRANT: format!("g-{connection}")}},
        "spec": {"connectionRef": {"name": connection}, "apis": [{"name": "widgets.example.org"}]}})
}

impl Consumer {
    /// Writes what the konnector reports for widgets on Binding `namespace/name`: its per-API
    /// Synced condition `status` with `reason`.
    async fn report_synced(&self, namespace: &str, name: &str, status: &str, reason: &str) {
        let condition = |type_: &str, status: &str, reason: &str| {
            json!({"type": type_, "status": status, "reason": reason, "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z"})
        };
        let patch = json!({"status": {
            "boundAPIs": [{"name": "widgets.example.org", "conflictCount": 0,
                "conditions": [condition("Synced", status, reason)]}],
            "conditions": [condition("Synced", status, reason)]}});
        self.cluster
            .client
            .patch_status(
                &erase::<kbind_api::Binding>(),
                Some(namespace),
                name,
                &kbind_cluster::Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
            .expect("status written");
    }

    /// Every Connection, binding and konnector-namespace Secret as `kind ns/name@resourceVersion`.
    async fn inventory(&self) -> Vec<String> {
        let c = &self.cluster.client;
        let mut out = Vec::new();
        for (res, ns) in [
            (erase::<kbind_api::Connection>(), None),
            (erase::<kbind_api::ClusterBinding>(), None),
            (erase::<kbind_api::Binding>(), None),
            (erase::<Secret>(), Some("kbind")),
        ] {
            let list = c.list(&res, ns, &Default::default()).await.expect("list");
            for o in list.items {
                out.push(format!(
                    "{} {}/{}@{}",
                    res.kind,
                    o.metadata.namespace.unwrap_or_default(),
                    o.metadata.name.unwrap_or_default(),
                    o.metadata.resource_version.unwrap_or_default()
                ));
            }
        }
        out.sort();
        out
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_shows_which_connection_serves_each_namespace_of_an_api() {
    let world = Consumer::new(Vec::new()).await;
    for connection in ["acme-eu", "acme-us"] {
        world.create(other_connection(connection)).await;
    }
    world.create(widgets_binding("team-a", "eu-widgets", "acme-eu")).await;
    world.create(widgets_binding("other", "us-widgets", "acme-us")).await;
    // acme-us asked for team-a too: the konnector refuses it there.
    world.create(widgets_binding("team-a", "us-widgets", "acme-us")).await;
    world.report_synced("team-a", "eu-widgets", "True", "AsExpected").await;
    world.report_synced("other", "us-widgets", "True", "AsExpected").await;
    world
        .report_synced("team-a", "us-widgets", "False", "BoundThroughAnotherConnection")
        .await;

    let run = world.kbind(&["status"]).await;
    check(&run, 0, "status");
    let served: Vec<Vec<&str>> = run
        .stdout
        .split("SERVED BY\n")
        .nth(1)
        .unwrap_or_else(|| panic!("a SERVED BY table:\n{}", run.stdout))
        .lines()
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        served[..4],
        [
            vec!["API", "NAMESPACE", "CONNECTION", "BINDING", "STATE"],
            vec![
                "widgets.example.org",
                "other",
                "acme-us",
                "Binding/other/us-widgets",
                "Serving"
            ],
            vec![
                "widgets.example.org",
                "team-a",
                "acme-eu",
                "Binding/team-a/eu-widgets",
                "Serving"
            ],
            vec![
                "widgets.example.org",
                "team-a",
                "acme-us",
                "Binding/team-a/us-widgets",
                "BoundThroughAnotherConnection"
            ],
        ],
        "{}",
        run.stdout
    );
    assert!(
        run.stdout
            .contains("kubectl get widgets.example.org -A -L core.kbind.io/connection"),
        "{}",
        run.stdout
    );

    let run = world.kbind(&["status", "-o", "json"]).await;
    check(&run, 0, "status -o json");
    let status: Value = serde_json::from_str(&run.stdout).expect("JSON only");
    assert_eq!(
        status["servedBy"],
        json!([
            {"api": "widgets.example.org", "namespace": "other", "connection": "acme-us",
             "binding": "Binding/other/us-widgets", "state": "Serving", "deleting": false},
            {"api": "widgets.example.org", "namespace": "team-a", "connection": "acme-eu",
             "binding": "Binding/team-a/eu-widgets", "state": "Serving", "deleting": false},
            {"api": "widgets.example.org", "namespace": "team-a", "connection": "acme-us",
             "binding": "Binding/team-a/us-widgets", "state": "BoundThroughAnotherConnection", "deleting": false},
        ])
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_refuses_a_namespace_another_connection_serves_and_reports_a_partition() {
    let world = Consumer::new(honest_bundle(&["other"])).await;
    world.create(other_connection("acme-us")).await;
    world
        .create(widgets_binding("other", "acme-us-widgets", "acme-us"))
        .await;
    world
        .report_synced("other", "acme-us-widgets", "True", "AsExpected")
        .await;
    let before = world.inventory().await;
    let why = "namespace other of widgets.example.org is already served through Connection acme-us \
               (Binding other/acme-us-widgets); unbind it first (`kbind unbind acme-us`) or bind another namespace";

    // Refused before any Grant, whether applying, printing or a dry run.
    for extra in [&["--wait=false"][..], &["--dry-run"], &["-o", "yaml"]] {
        let args: Vec<&str> = ["bind", "widgets", "-n", "other"]
            .iter()
            .chain(extra)
            .copied()
            .collect();
        let run = world.kbind(&args).await;
        check(&run, 6, &format!("{args:?} into a namespace acme-us serves"));
        assert!(run.stderr.contains(why), "{args:?}: {}", run.stderr);
        assert_eq!(run.stdout, "", "{args:?}: nothing shown as applied");
        assert!(
            !world.asked_for_a_grant(),
            "{args:?}: no Grant asked for: {:?}",
            world.gateway.seen()
        );
    }
    assert_eq!(world.inventory().await, before, "nothing was applied");

    // A bundle from a pickup URL is checked the same way before anything is applied.
    let run = world
        .kbind_with(
            &["redeem", "-", "-n", "other", "--yes", "--wait=false"],
            &world.cluster.kubeconfig,
            Some(&world.gateway.pickup_url()),
            &[],
        )
        .await;
    check(&run, 6, "redeem into a namespace acme-us serves");
    assert!(
        run.stderr.contains(why) && run.stderr.contains("used up"),
        "{}",
        run.stderr
    );
    assert_eq!(world.inventory().await, before, "nothing was applied");

    // Another namespace: a partition. Shown by the dry run, applied, and said after applying.
    world.gateway.serve(honest_bundle(&["team-a"]));
    let partition = format!(
        "widgets.example.org: namespace other → Connection acme-us; namespace team-a → Connection {CONNECTION} (this bind)"
    );
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--dry-run"]).await;
    check(&run, 0, "a dry run of a partition");
    assert!(run.stdout.contains(&partition), "{}", run.stdout);
    assert_eq!(world.inventory().await, before, "a dry run applies nothing");
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 0, "bind of a partition");
    let applied = run.stdout.find("Applied 3 objects").expect("applied");
    let said = run.stdout.find(&partition).unwrap_or_else(|| panic!("{}", run.stdout));
    assert!(applied < said, "said after applying:\n{}", run.stdout);
    assert!(world.get("Binding", Some("team-a"), CONNECTION).await.is_some());
    assert!(world.get("Binding", Some("other"), "acme-us-widgets").await.is_some());

    // A re-bind of the same Connection is no conflict.
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 0, "a re-bind");
}

/// `bundle` with its Secret's kubeconfig pointing at `server` (CA `ca`, base64).
fn pointing_at(mut bundle: Vec<Value>, server: &str, ca: &str) -> Vec<Value> {
    let kubeconfig = format!(
        "apiVersion: v1\nkind: Config\nclusters:\n- name: p\n  cluster:\n    server: {server}\n    certificate-authority-data: {ca}\n\
         contexts:\n- name: p\n  context:\n    cluster: p\n    user: u\ncurrent-context: p\nusers:\n- name: u\n  user:\n    token: t\n"
    );
    for object in &mut bundle {
        if object["kind"] == "Secret" {
            object["stringData"]["kubeconfig"] = json!(kubeconfig);
        }
    }
    bundle
}

/// The server the consumer's Connection Secret points at now.
async fn kubeconfig_server(world: &Consumer) -> String {
    let secret = world
        .get("Secret", Some("kbind"), &format!("{CONNECTION}-kubeconfig"))
        .await
        .expect("the Connection's Secret");
    let data = secret["data"]["kubeconfig"].as_str().expect("kubeconfig data");
    let text = base64::Engine::decode(&base64::engine::general_purpose::STANDARD, data).expect("base64");
    let text = String::from_utf8(text).expect("utf-8");
    text.lines()
        .find_map(|l| l.trim().strip_prefix("server: "))
        .unwrap_or_default()
        .to_string()
}

/// A hostile gateway the user is tricked into using knows the victim's Grant and object names
/// (or computes them) and calls itself by the real provider's name: its bundle matches the
/// existing Connection name for name and label for label, but points at the attacker's server.
/// The CLI records which gateway issued a Connection and never re-points it from a bundle of
/// another origin, server or CA without `--replace-connection`, which shows old and new.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_of_another_gateway_never_re_points_an_existing_connection() {
    const CA: &str = "UFJPVklERVItQ0EK";
    let world = Consumer::new(pointing_at(
        honest_bundle(&["team-a"]),
        "https://provider.example:6443",
        CA,
    ))
    .await;
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 0, "the honest bind");
    let connection = world.get("Connection", None, CONNECTION).await.expect("bound");
    assert_eq!(
        connection["metadata"]["annotations"]["iam.kbind.io/gateway"],
        json!(world.gateway.url.trim_end_matches('/')),
        "the CLI records the issuing gateway"
    );

    // The hostile gateway: same names, same Grant label, the real provider's name.
    let hostile = FakeGateway::start(pointing_at(
        honest_bundle(&["team-a"]),
        "https://attacker.example:6443",
        CA,
    ))
    .await;
    let run = world.kbind(&["login", &hostile.url, "--token", TOKEN]).await;
    check(&run, 0, "login at the hostile gateway");
    let run = world
        .kbind(&[
            "--gateway",
            &hostile.url,
            "bind",
            "widgets",
            "-n",
            "team-a",
            "--yes",
            "--wait=false",
        ])
        .await;
    check(&run, 6, "a bundle of another gateway");
    assert!(
        run.stderr.contains("re-pointed")
            && run.stderr.contains("https://attacker.example:6443")
            && run.stderr.contains("https://provider.example:6443")
            && run.stderr.contains("--replace-connection")
            && run.stderr.contains("Nothing was applied"),
        "{}",
        run.stderr
    );
    assert_eq!(kubeconfig_server(&world).await, "https://provider.example:6443");

    // The same gateway with another CA (a provider that rotated it): refused without the flag,
    // applied with it, old and new shown.
    world.gateway.serve(pointing_at(
        honest_bundle(&["team-a"]),
        "https://provider.example:6443",
        "TkVXLUNBCg==",
    ));
    // (`--gateway`: the last login, the default, was the hostile one.)
    let honest = world.gateway.url.clone();
    let run = world
        .kbind(&["--gateway", &honest, "bind", "widgets", "-n", "team-a", "--wait=false"])
        .await;
    check(&run, 6, "another CA without --replace-connection");
    assert!(run.stderr.contains("CA "), "{}", run.stderr);
    let run = world
        .kbind(&[
            "--gateway",
            &honest,
            "bind",
            "widgets",
            "-n",
            "team-a",
            "--wait=false",
            "--replace-connection",
        ])
        .await;
    check(&run, 0, "another CA with --replace-connection");
    assert!(
        run.stdout.contains("from: gateway") && run.stdout.contains("to:   gateway"),
        "{}",
        run.stdout
    );
    let run = world
        .kbind(&[
            "--gateway",
            &hostile.url,
            "bind",
            "widgets",
            "-n",
            "team-a",
            "--yes",
            "--wait=false",
        ])
        .await;
    check(&run, 6, "the hostile bundle again");
    assert_eq!(kubeconfig_server(&world).await, "https://provider.example:6443");
}

/// A Connection's Grant label is its own word: a hostile Connection labelled with the victim's
/// Grant must not get that Grant revoked at the gateway the user is logged in to. `unbind`
/// revokes only at the gateway the CLI recorded when it applied the bundle.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unbind_revokes_a_grant_only_at_the_gateway_that_issued_it() {
    let world = Consumer::new(honest_bundle(&["team-a"])).await;
    for issued_by in [Some("https://evil.example"), None] {
        let mut metadata = json!({"name": CONNECTION, "labels": {LABEL_GRANT: GRANT}});
        if let Some(origin) = issued_by {
            metadata["annotations"] = json!({"iam.kbind.io/gateway": origin});
        }
        world
            .create(
                json!({"apiVersion": API_VERSION, "kind": "Connection", "metadata": metadata,
                "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": "s", "key": "kubeconfig"}}}),
            )
            .await;
        let run = world.kbind(&["unbind", CONNECTION, "--yes"]).await;
        check(&run, 0, "unbind of a Connection another gateway issued");
        assert!(
            !world.revoked(),
            "{issued_by:?}: the victim's Grant was revoked:\n{}",
            run.stdout
        );
        assert!(
            run.stdout.contains(&format!("Grant {GRANT}")) && run.stdout.contains("not revoked"),
            "{}",
            run.stdout
        );
        assert!(world.get("Connection", None, CONNECTION).await.is_none());
    }
    // A Connection this gateway's bundle made is revoked there.
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 0, "bind");
    let run = world.kbind(&["unbind", CONNECTION, "--yes"]).await;
    check(&run, 0, "unbind");
    assert!(world.revoked(), "{}", run.stdout);
}

/// `bind` lists what the provider writes into this cluster (FromProvider rules) as well as what
/// it takes (FromConsumer), and a selector that excludes by label only — every object but the
/// labelled ones — is warned about like `{}`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bind_lists_from_provider_rules_and_warns_of_a_selector_that_takes_all_but_a_few() {
    let world = Consumer::new(honest_bundle(&["team-a"])).await;
    let all_but_private = json!({"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"labelSelector": {"matchExpressions": [{"key": "private", "operator": "DoesNotExist"}]}}});
    let credentials = json!({"group": "", "resource": "configmaps", "direction": "FromProvider",
        "selector": {"names": ["widget-endpoints"]}});
    world.gateway.announce_related(vec![all_but_private, credentials]);
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--dry-run"]).await;
    check(&run, 0, "dry run");
    assert!(
        run.stdout.contains("FromProvider")
            && run.stdout.contains("configmaps")
            && run.stdout.contains("widget-endpoints"),
        "{}",
        run.stdout
    );
    assert!(
        run.stdout.contains("WARNING: a rule selects every object") && run.stdout.contains("EVERY one"),
        "{}",
        run.stdout
    );
    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 2, "asked for, no --yes");
    assert!(
        run.stdout.contains("FromProvider") && run.stdout.contains("WARNING"),
        "{}",
        run.stdout
    );
    assert!(!world.asked_for_a_grant());
}

/// A bind only adds to a Grant, so a gateway may answer only the namespaces asked for and those
/// the cluster held: one that says the Grant also covers another namespace (and hands a bundle
/// binding it) is refused whole, nothing applied, the Grant revoked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gateway_that_widens_a_grant_beyond_the_request_is_refused() {
    let world = Consumer::new(honest_bundle(&["team-a", "other"])).await;
    world.gateway.script.lock().grant_namespaces = Some(vec!["other".into(), "team-a".into()]);
    let run = world
        .kbind(&["bind", "widgets", "-n", "team-a", "--yes", "--wait=false"])
        .await;
    check(&run, 6, "a Grant wider than asked");
    assert!(
        run.stderr.contains("covers namespace other") && run.stderr.contains("nothing was applied"),
        "{}",
        run.stderr
    );
    assert!(world.untouched().await);
    assert!(world.revoked(), "the Grant this run created goes again");
}

/// The rules that copy an Ingress of this cluster by reference (status synced back) and bring
/// the provider's credentials Secret: `bind` and `redeem` show each with its kind, its selector
/// with the reference path and whether status comes back, and apply nothing without consent
/// (no terminal here, so `--yes`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ingress_taken_by_reference_is_shown_with_its_path_and_needs_consent() {
    let ingress = json!({"group": "networking.k8s.io", "resource": "ingresses", "direction": "FromConsumer",
        "syncStatus": true, "selector": {"references": [{"path": "spec.ingressRef.name"}]}});
    let credentials = json!({"group": "", "resource": "secrets", "direction": "FromProvider",
        "selector": {"names": ["widget-credentials"]}});
    let mut bundle = honest_bundle(&["team-a"]);
    bundle[2]["spec"]["relatedResources"] = json!([ingress.clone(), credentials.clone()]);
    let world = Consumer::new(bundle).await;
    world.gateway.announce_related(vec![ingress.clone(), credentials]);
    let shown = |run: &Run, what: &str| {
        let row = run
            .stdout
            .lines()
            .find(|l| l.starts_with("ingresses.networking.k8s.io "))
            .unwrap_or_else(|| panic!("{what}: no Ingress row in\n{}", run.stdout));
        assert!(
            row.contains("namespace team-a")
                && row.contains("names at spec.ingressRef.name of each widgets.example.org")
                && row.trim_end().ends_with("yes"),
            "{what}: {row}"
        );
        assert!(
            run.stdout.contains("(FromConsumer) copy objects of THIS cluster")
                && run.stdout.contains("STATUS BACK yes: the provider writes the status")
                && run.stdout.contains("(FromProvider) copy objects of the PROVIDER")
                && run.stdout.contains("names widget-credentials"),
            "{what}: {}",
            run.stdout
        );
    };

    let run = world.kbind(&["bind", "widgets", "-n", "team-a", "--wait=false"]).await;
    check(&run, 2, "bind without --yes");
    shown(&run, "bind");
    assert!(run.stderr.contains("--yes"), "{}", run.stderr);
    assert!(
        !world.asked_for_a_grant(),
        "asked before binding: {:?}",
        world.gateway.seen()
    );

    let url = world.gateway.pickup_url();
    let run = world.kbind(&["redeem", &url, "-n", "team-a", "--wait=false"]).await;
    check(&run, 2, "redeem without --yes");
    shown(&run, "redeem");
    assert!(
        run.stderr
            .contains("Apply the bundle and copy the above from this cluster to the provider?"),
        "{}",
        run.stderr
    );
    assert!(world.untouched().await);
    insta::with_settings!({snapshot_path => "../snapshots", prepend_module_to_snapshot => false}, {
        insta::assert_snapshot!("system__redeem_ingress_by_reference", run.stdout);
    });

    let run = world
        .kbind(&["redeem", &url, "-n", "team-a", "--wait=false", "--yes"])
        .await;
    check(&run, 0, "redeem with --yes");
    let binding = world
        .get("Binding", Some("team-a"), CONNECTION)
        .await
        .expect("the Binding");
    assert_eq!(binding["spec"]["relatedResources"][0], ingress, "the rule as shown");
}

/// A hostile gateway: the catalog names one Secret (or nothing), and the bundle's rule also takes
/// every Secret whose name a widget holds at a path the Export never named. What is shown after
/// the pickup is the bundle's own rule, path included; `--yes` agreed only to the catalog's
/// rules, so the bundle is refused, nothing applied, the Grant revoked again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_that_adds_a_secret_reference_the_export_did_not_name_is_shown_and_refused() {
    let named = json!({"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"names": ["db-password"]}});
    let mut widened = named.clone();
    widened["selector"]["references"] = json!([{"path": "spec.passwordSecretRef.name"}]);
    let mut bundle = honest_bundle(&["team-a"]);
    bundle[2]["spec"]["relatedResources"] = json!([widened]);
    let world = Consumer::new(bundle).await;
    for (what, announced) in [
        ("the catalog names the Secret", vec![named]),
        ("the catalog names nothing", vec![]),
    ] {
        world.gateway.announce_related(announced);
        world.gateway.forget();
        let run = world
            .kbind(&["bind", "widgets", "-n", "team-a", "--wait=false", "--yes"])
            .await;
        check(&run, 6, what);
        let (told, rule) = (
            run.stdout
                .find("not the ones shown before the Grant")
                .unwrap_or_else(|| panic!("{what}: not told\n{}", run.stdout)),
            run.stdout
                .rfind("names db-password or names at spec.passwordSecretRef.name of each widgets.example.org")
                .unwrap_or_else(|| panic!("{what}: the bundle's rule not shown\n{}", run.stdout)),
        );
        assert!(
            told < rule,
            "{what}: the bundle's rules follow the notice\n{}",
            run.stdout
        );
        assert!(
            run.stderr.contains("nothing was applied") && run.stderr.contains("--yes agreed only to those"),
            "{what}: {}",
            run.stderr
        );
        assert!(world.untouched().await, "{what}: something was applied");
        assert!(
            world.revoked(),
            "{what}: the Grant goes again: {:?}",
            world.gateway.seen()
        );
    }
}
