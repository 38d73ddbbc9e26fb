//! Tenant isolation, black-box: the real `kbind-backend run --gateway --issuer` with
//! its default claim rules on a `fakeapi serve` provider, driven only over HTTP as tenants
//! would (and by the provider's admin where the story needs the platform or a konnector).
//!
//! A tenant's concurrent binds stay within its namespace quota; the default claimable pattern
//! keeps the platform's future namespaces unclaimable; a consumer cluster whose konnector
//! heartbeated cannot be pre-claimed after its owner unbinds; a take-back is acted on by event;
//! a refusal never says whose a namespace is.

#[path = "../../tests/support/children.rs"]
mod children;

use std::time::Duration;

use children::*;
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kbind_api::service::{BindRequest, WhoAmI, path};
use kbind_cluster::{ClusterClient, ClusterClientExt, ListParams, Patch, PatchParams};
use serde_json::{Value, json};

const ALICE: &str = "alice-secret-token-0123456789abcdef";
const MALLORY: &str = "mallory-secret-token-0123456789abcd";
const ALICE_UID: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
const MALLORY_UID: &str = "7d0e8c1f-2b3a-4c5d-8e9f-a0b1c2d3e4f5";

struct World {
    _dir: tempfile::TempDir,
    lines: Lines,
    provider: FakeCluster,
    http: reqwest::Client,
    url: String,
    _backend: Process,
}

impl World {
    /// A provider offering widgets and the backend with its default claim rules (no
    /// `--claimable-namespaces`, the default quota of 20 per identity).
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
        offer_widgets(&provider.client, &lines).await;
        let backend = start_backend(
            std::path::Path::new(env!("CARGO_BIN_EXE_kbind-backend")),
            &provider,
            dir.path(),
            &format!("{ALICE},alice\n{MALLORY},mallory\n"),
            // The quota story binds in bursts; the per-client bind rate is another story.
            &["--bind-burst=100"],
            &lines,
        )
        .await;
        let (url, backend) = (backend.url, backend.process);
        let http = reqwest::Client::new();
        Self {
            _dir: dir,
            lines,
            provider,
            http,
            url,
            _backend: backend,
        }
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
    }

    /// The namespace prefix the default pattern gives the caller of `token`.
    async fn prefix(&self, token: &str) -> String {
        let (status, body) = self
            .call(
                self.http
                    .get(format!("{}{}", self.url, path::WHOAMI))
                    .bearer_auth(token),
            )
            .await;
        assert_eq!(status, 200, "{body}");
        let who: WhoAmI = serde_json::from_value(body).expect("a WhoAmI");
        format!("{}-", kbind_backend::issuer::claims::identity_id(&who.subject))
    }

    async fn bind(&self, token: &str, uid: &str, namespaces: &[String]) -> (u16, Value) {
        let request = BindRequest {
            export: "widgets".into(),
            consumer_cluster_uid: uid.into(),
            namespaces: namespaces.to_vec(),
            konnector_namespace: None,
        };
        self.call(
            self.http
                .post(format!("{}{}", self.url, path::BIND))
                .bearer_auth(token)
                .json(&request),
        )
        .await
    }

    async fn revoke(&self, token: &str, grant: &str) {
        let (status, body) = self
            .call(
                self.http
                    .delete(format!("{}{}/{grant}", self.url, path::GRANTS))
                    .bearer_auth(token),
            )
            .await;
        assert_eq!(status, 200, "revoke: {body}\n{}", dump(&self.lines));
    }

    async fn namespace(&self, name: &str) -> Option<Namespace> {
        self.provider.client.get_typed_opt(None, name).await.expect("read")
    }

    /// The provider namespaces whose names start with `prefix`.
    async fn namespaces_with(&self, prefix: &str) -> usize {
        self.names_with(prefix).await.len()
    }

    /// The provider namespaces whose names start with `prefix`, by name.
    async fn names_with(&self, prefix: &str) -> Vec<String> {
        let all = self
            .provider
            .client
            .list(&erase::<Namespace>(), None, &ListParams::default())
            .await
            .expect("namespaces");
        all.items
            .into_iter()
            .filter_map(|ns| ns.metadata.name)
            .filter(|n| n.starts_with(prefix))
            .collect()
    }
}

fn names(prefix: &str, tag: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}{tag}-{i}")).collect()
}

/// Six concurrent binds of ten new namespaces each, from one identity, against its quota of 20:
/// at most two are issued, and at most 20 namespaces are held, round after round.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_binds_of_one_tenant_cannot_exceed_its_namespace_quota() {
    let world = World::new().await;
    let prefix = world.prefix(MALLORY).await;
    for round in 0..3 {
        let tag = format!("r{round}");
        // Six consumer clusters of hers: six Grants, which the issuer provisions concurrently.
        let binds = (0..6).map(|i| {
            let namespaces = names(&prefix, &format!("{tag}b{i}"), 10);
            let uid = format!("7d0e8c1f-2b3a-4c5d-8e9f-a0b1c2d3e4f{i}");
            let world = &world;
            async move { world.bind(MALLORY, &uid, &namespaces).await }
        });
        let answers = futures::future::join_all(binds).await;
        let issued = answers.iter().filter(|(status, _)| *status == 201).count();
        for (status, body) in answers.iter().filter(|(status, _)| *status != 201) {
            assert_eq!(*status, 409, "round {round}: {body}");
            assert_eq!(body["reason"], "NamespaceQuotaExceeded", "round {round}: {body}");
        }
        let held = world.namespaces_with(&format!("{prefix}{tag}")).await;
        assert!(
            issued <= 2 && held <= 20,
            "round {round}: {issued} binds issued, {held} namespaces held against a quota of 20\n{}",
            dump(&world.lines)
        );
        // Free the quota for the next round: revoke what was issued, and the platform removes
        // the namespaces (claims outlive their Grants).
        for (_, body) in answers.iter().filter(|(status, _)| *status == 201) {
            world.revoke(MALLORY, body["grant"].as_str().expect("a grant")).await;
        }
        for name in world.names_with(&prefix).await {
            world
                .provider
                .client
                .delete(&erase::<Namespace>(), None, &name, &Default::default())
                .await
                .expect("namespace deleted");
        }
    }
}

/// With the default claim rules a tenant cannot claim a name the platform will create later
/// (cert-manager, monitoring, argocd …): only its own prefix. A refusal never says whose a
/// namespace is: another tenant's and the platform's read the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_claim_rules_keep_the_platforms_future_namespaces_and_say_only_not_available() {
    let world = World::new().await;
    for future in ["cert-manager", "monitoring", "argocd", "istio-system", "vault"] {
        let (status, body) = world.bind(MALLORY, MALLORY_UID, &[future.to_string()]).await;
        assert_eq!(
            (status, body["reason"].as_str()),
            (409, Some("NamespaceNotAllowed")),
            "{body}"
        );
        assert!(world.namespace(future).await.is_none(), "{future} was claimed");
    }
    let alice = world.prefix(ALICE).await;
    let (status, body) = world.bind(ALICE, ALICE_UID, &[format!("{alice}team")]).await;
    assert_eq!(status, 201, "{body}\n{}", dump(&world.lines));

    // The platform's own namespace and alice's: one answer, whoever holds it. Mallory's pattern
    // is only her prefix, so she is asked about a name matching it.
    let mallory = world.prefix(MALLORY).await;
    world
        .provider
        .client
        .create(
            &erase::<Namespace>(),
            None,
            &object(
                json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": format!("{mallory}platform")}}),
            ),
            &Default::default(),
        )
        .await
        .expect("the platform's namespace");
    let (status, platforms) = world.bind(MALLORY, MALLORY_UID, &[format!("{mallory}platform")]).await;
    assert_eq!(status, 409, "{platforms}");
    assert_eq!(platforms["reason"], "NamespaceNotAvailable");
    let message = platforms["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("not available") && !message.contains("kbind") && !message.contains("identity"),
        "{platforms}"
    );
}

/// Alice's konnector heartbeated for her consumer cluster; she unbinds (revokes); Mallory, who
/// read the UID off a provider copy, binds it: refused. Alice binds it again: issued.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_cluster_that_heartbeated_cannot_be_pre_claimed_after_its_owner_unbinds() {
    let world = World::new().await;
    let alice = world.prefix(ALICE).await;
    let mallory = world.prefix(MALLORY).await;
    let (status, body) = world.bind(ALICE, ALICE_UID, &[format!("{alice}team")]).await;
    assert_eq!(status, 201, "{body}\n{}", dump(&world.lines));
    let grant = body["grant"].as_str().expect("a grant").to_string();
    // What the konnector's heartbeat does to the Lease.
    world
        .provider
        .client
        .patch(
            &erase::<k8s_openapi::api::coordination::v1::Lease>(),
            Some("kbind"),
            &format!("consumer-{ALICE_UID}"),
            &Patch::Merge(json!({"spec": {"renewTime": "2026-12-05T10:00:00.000000Z"}})),
            &PatchParams::default(),
        )
        .await
        .expect("the heartbeat");
    world.revoke(ALICE, &grant).await;
    let (status, body) = world.bind(MALLORY, ALICE_UID, &[format!("{mallory}team")]).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("ConsumerClusterClaimed")),
        "{body}"
    );
    assert!(world.namespace(&format!("{mallory}team")).await.is_none());
    let (status, body) = world.bind(ALICE, ALICE_UID, &[format!("{alice}team")]).await;
    assert_eq!(
        status,
        201,
        "alice binds her cluster again: {body}\n{}",
        dump(&world.lines)
    );
}

/// The platform takes a claimed namespace back (removes the claim label): the Grant's access
/// there goes by event, within seconds rather than at the 10-minute resync, and a re-bind of it
/// is refused rather than answered with a pickup.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_take_back_is_acted_on_at_once_and_a_rebind_is_refused() {
    let world = World::new().await;
    let alice = world.prefix(ALICE).await;
    let namespace = format!("{alice}team");
    let (status, body) = world.bind(ALICE, ALICE_UID, std::slice::from_ref(&namespace)).await;
    assert_eq!(status, 201, "{body}\n{}", dump(&world.lines));
    let grant = body["grant"].as_str().expect("a grant").to_string();
    let role_binding = format!("kbind:{grant}");
    let c = &world.provider.client;
    let rb: Option<RoleBinding> = c.get_typed_opt(Some(&namespace), &role_binding).await.expect("read");
    assert!(rb.is_some(), "issued");
    c.patch(
        &erase::<Namespace>(),
        None,
        &namespace,
        &Patch::Merge(json!({"metadata": {"labels": {"iam.kbind.io/claimed-by": null}}})),
        &PatchParams::default(),
    )
    .await
    .expect("taken back");
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let rb: Option<RoleBinding> = c.get_typed_opt(Some(&namespace), &role_binding).await.expect("read");
        if rb.is_none() {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "the take-back waits for the resync\n{}",
            dump(&world.lines)
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (status, body) = world.bind(ALICE, ALICE_UID, std::slice::from_ref(&namespace)).await;
    assert_eq!(
        (status, body["reason"].as_str()),
        (409, Some("NamespaceNotAvailable")),
        "{body}"
    );
}
