//! The embedded web UI in a real browser: `fakeapi serve` as the provider, `kbind-backend
//! run --gateway --issuer` on it, and `node web/tests/ui.spec.mjs` driving Debian's chromium through
//! playwright-core: sign in, browse, bind, copy the command, download the bundle, Grants, revoke;
//! axe-core on every page, 375 px without horizontal overflow, a keyboard-only pass, and a PNG
//! screenshot of each page under `<target dir>/ui-screenshots/` (the ones in `docs/ui/` are copies).
//! What a signed-out user sees is checked by computed visibility; the bind result says
//! "Bundle ready", never "Bound"; the bind page shows each API's fields and the caller's Grants;
//! hostile Export `docs`/`icon` URLs (injected into the catalog answer) render no link; the revoke
//! dialog says to unbind first.
//!
//! Skipped (with the reason) when chromium, node or `web/node_modules` is missing, unless
//! `KBIND_REQUIRE_BROWSER=1` (CI), where that fails the test.

#[path = "../../tests/support/children.rs"]
mod children;

use std::path::{Path, PathBuf};
use std::process::Stdio;

use children::*;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
use kbind_api::service::{GrantList, path};
use kbind_cluster::{ClusterClient, ClusterClientExt};
use serde_json::json;

const TOKEN: &str = "alice-secret-token-0123456789abcdef";
/// A consumer with a heartbeat Lease (the pointer pass binds it).
const UID_1: &str = "3f1e2d4c-5b6a-4978-8877-665544332211";
/// A consumer without one (the keyboard pass binds it).
const UID_2: &str = "9a8b7c6d-5e4f-4a3b-8c2d-1e0f9a8b7c6d";

fn web_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../web")
}

/// What the browser test needs that this machine lacks, if anything.
fn missing_tools() -> Option<String> {
    let chromium = chromium();
    if !chromium.exists() {
        return Some(format!(
            "no browser at {} (apt-get install chromium, or set KBIND_CHROMIUM)",
            chromium.display()
        ));
    }
    let node_ok = std::process::Command::new("node")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !node_ok {
        return Some("no node on PATH".into());
    }
    for package in ["playwright-core", "axe-core"] {
        if !web_dir().join("node_modules").join(package).exists() {
            return Some(format!(
                "web/node_modules/{package} is missing (run npm ci --prefix web)"
            ));
        }
    }
    None
}

fn chromium() -> PathBuf {
    std::env::var_os("KBIND_CHROMIUM")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from("/usr/bin/chromium"))
}

fn screenshots_dir() -> PathBuf {
    // CARGO_TARGET_TMPDIR is <target dir>/tmp: the screenshots go next to it, as test output.
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .map(|target| target.join("ui-screenshots"))
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("ui-screenshots"))
}

/// The provider's offer: the backend's CRDs, an exported CRD, an Export in a Collection, and a
/// fresh heartbeat Lease of `UID_1`.
async fn offer(provider: &FakeCluster, lines: &Lines) {
    let p = &provider.client;
    offer_widgets(p, lines).await;
    let namespace =
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": kbind_api::consts::lease::NAMESPACE}});
    p.create(&erase::<Namespace>(), None, &object(namespace), &Default::default())
        .await
        .expect("lease namespace created");
    p.create_typed(&Lease {
        metadata: ObjectMeta {
            name: Some(kbind_api::consts::lease_name(UID_1)),
            namespace: Some(kbind_api::consts::lease::NAMESPACE.into()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..LeaseSpec::default()
        }),
    })
    .await
    .expect("heartbeat Lease created");
}

#[tokio::test(flavor = "multi_thread")]
async fn the_web_ui_works_in_a_real_browser() {
    if let Some(missing) = missing_tools() {
        assert!(
            std::env::var("KBIND_REQUIRE_BROWSER").as_deref() != Ok("1"),
            "KBIND_REQUIRE_BROWSER=1 but the browser test cannot run: {missing}"
        );
        eprintln!("SKIPPED the web UI browser test: {missing}");
        return;
    }
    let dir = tempfile::tempdir().expect("temp dir");
    let lines = Lines::default();
    let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
    offer(&provider, &lines).await;

    let backend = start_backend(
        Path::new(env!("CARGO_BIN_EXE_kbind-backend")),
        &provider,
        dir.path(),
        &format!("{TOKEN},alice\n"),
        // These stories name namespaces freely (team-a); the default is a per-identity prefix.
        &["--claimable-namespaces=*"],
        &lines,
    )
    .await;
    let (url, _backend) = (backend.url, backend.process);
    let http = reqwest::Client::new();

    let screenshots = screenshots_dir();
    let _ = std::fs::remove_dir_all(&screenshots);
    let run = tokio::process::Command::new("node")
        .arg(web_dir().join("tests/ui.spec.mjs"))
        .current_dir(web_dir())
        .env("KBIND_UI_URL", &url)
        .env("KBIND_UI_TOKEN", TOKEN)
        .env("KBIND_UI_CONSUMER_UID", UID_1)
        .env("KBIND_UI_CONSUMER_UID_2", UID_2)
        .env("KBIND_UI_SCREENSHOTS", &screenshots)
        .env("KBIND_CHROMIUM", chromium())
        .stdin(Stdio::null())
        .kill_on_drop(true)
        .output();
    let output = tokio::time::timeout(DEADLINE * 2, run)
        .await
        .unwrap_or_else(|_| panic!("the browser test did not finish in {:?}", DEADLINE * 2))
        .expect("node runs");
    let report = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    // The summary (axe results, screenshot paths) is test output whether or not it passed.
    println!("{report}");
    assert!(
        output.status.success(),
        "the browser test failed ({}):\n{report}\nbackend and provider logs:\n{}",
        output.status,
        dump(&lines)
    );

    // What the UI did, seen through the API: both grants were made and revoked.
    let list: GrantList = http
        .get(format!("{url}{}", path::GRANTS))
        .bearer_auth(TOKEN)
        .send()
        .await
        .expect("grants answer")
        .json()
        .await
        .expect("a GrantList");
    for grant in &list.grants {
        assert!(grant.revoking, "the UI revoked every grant it made: {grant:?}");
    }
    let pngs = std::fs::read_dir(&screenshots)
        .expect("the screenshot folder exists")
        .filter_map(Result::ok)
        .filter(|e| e.path().extension().is_some_and(|x| x == "png"))
        .count();
    assert!(
        pngs >= 16,
        "a screenshot of each of 8 pages at two widths, found {pngs} in {}",
        screenshots.display()
    );
}
