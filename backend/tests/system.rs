//! The whole service-layer path with the real binaries: two `fakeapi serve` clusters
//! (provider, consumer), `kbind-backend run --gateway --issuer --reaper` on the provider and an
//! unchanged `konnector run` on the consumer, driven only through HTTP and the Kubernetes API.
//!
//! authenticate → catalog → bind → pickup → apply the bundle → the konnector syncs both ways →
//! a replayed pickup fails → with the backend stopped and the konnector restarted, sync goes on →
//! revoke → the Connection goes not Ready with a reason → a consumer that stops heartbeating is
//! reaped. Its `images` module (ignored; `hack/image-test` runs it) takes the same path with the
//! container images.

#[path = "../../tests/support/children.rs"]
mod children;
#[path = "system/images.rs"]
mod images;

use std::time::Duration;

use children::*;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kbind_api::service::{BindRequest, BindResponse, Catalog, GrantList, WhoAmI, path};
use kbind_cluster::{ClusterClient, ClusterClientExt, Patch, PatchParams};
use serde_json::{Value, json};

const TOKEN: &str = "alice-secret-token-0123456789abcdef";
const TEAM: &str = "team-a";

/// The provider and consumer clusters, the provider's offer and kbind installed on the consumer.
struct World {
    dir: tempfile::TempDir,
    lines: Lines,
    provider: FakeCluster,
    consumer: FakeCluster,
    http: reqwest::Client,
}

impl World {
    async fn new() -> Self {
        let dir = tempfile::tempdir().expect("temp dir");
        let lines = Lines::default();
        let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
        let consumer = FakeCluster::start(dir.path(), "consumer", &lines).await;
        let world = Self {
            dir,
            lines,
            provider,
            consumer,
            http: reqwest::Client::new(),
        };
        world.offer_widgets().await;
        world.install_kbind().await;
        world
    }

    /// What a provider's platform team does once: the backend's CRDs, an exported API and an Export.
    async fn offer_widgets(&self) {
        offer_widgets(&self.provider.client, &self.lines).await;
    }

    /// What a consumer's admin does once: kbind's CRDs, its namespace, and the team's namespace.
    async fn install_kbind(&self) {
        install_kbind(&self.consumer.client, &["kbind", TEAM], &self.lines).await;
    }

    async fn consumer_uid(&self) -> String {
        let ns: Namespace = self
            .consumer
            .client
            .get_typed(None, "kube-system")
            .await
            .expect("kube-system");
        ns.metadata.uid.expect("kube-system has a uid")
    }

    /// `kbind-backend run` with every module on the provider.
    async fn backend(&self, reap_ttl: &str) -> Backend {
        let reap_ttl = format!("--reap-ttl={reap_ttl}");
        let backend = start_backend(
            std::path::Path::new(env!("CARGO_BIN_EXE_kbind-backend")),
            &self.provider,
            self.dir.path(),
            &format!("{TOKEN},alice\n"),
            // These stories name namespaces freely (team-a); the default is a per-identity prefix.
            &["--claimable-namespaces=*", "--reaper", &reap_ttl],
            &self.lines,
        )
        .await;
        Backend {
            process: backend.process,
            url: backend.url,
        }
    }

    /// `konnector run` on the consumer, heartbeating every second so the reaper's TTL can be short.
    fn konnector(&self) -> Process {
        konnector(&self.consumer.kubeconfig, &["--identity=konnector"], &self.lines)
    }

    async fn call(&self, request: reqwest::RequestBuilder) -> (u16, Value) {
        let response = request.send().await.expect("the gateway answers");
        let status = response.status().as_u16();
        let text = response.text().await.expect("a body");
        let body = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, body)
    }

    /// Binds the widgets Export for `TEAM` through the gateway at `url` and returns the pickup URL.
    async fn bind(&self, url: &str) -> BindResponse {
        let request = BindRequest {
            export: "widgets".into(),
            consumer_cluster_uid: self.consumer_uid().await,
            namespaces: vec![TEAM.into()],
            konnector_namespace: None,
        };
        let (status, body) = self
            .call(
                self.http
                    .post(format!("{url}{}", path::BIND))
                    .bearer_auth(TOKEN)
                    .json(&request),
            )
            .await;
        assert_eq!(status, 201, "bind answered {body}\n{}", dump(&self.lines));
        serde_json::from_value(body).expect("a BindResponse")
    }

    /// Picks the bundle up and applies every document on the consumer, as `kbind redeem` will.
    async fn pickup_and_apply(&self, pickup_url: &str) -> Vec<Value> {
        let response = self.http.get(pickup_url).send().await.expect("pickup answers");
        assert_eq!(response.status().as_u16(), 200, "pickup failed\n{}", dump(&self.lines));
        let yaml = response.text().await.expect("a bundle");
        let documents: Vec<Value> = serde_saphyr::from_multiple(&yaml).expect("the bundle is YAML");
        let c = &self.consumer.client;
        for doc in &documents {
            let kind = doc["kind"].as_str().unwrap_or_default();
            let res = match kind {
                "Secret" => erase::<k8s_openapi::api::core::v1::Secret>(),
                "Connection" => erase::<kbind_api::Connection>(),
                "ClusterBinding" => erase::<kbind_api::ClusterBinding>(),
                "Binding" => erase::<kbind_api::Binding>(),
                other => panic!("the bundle carries a {other}, which `kbind` would refuse"),
            };
            let name = doc["metadata"]["name"].as_str().expect("named");
            let ns = doc["metadata"]["namespace"].as_str();
            c.apply(&res, ns, name, doc.clone(), "kbind-test", true)
                .await
                .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
        }
        documents
    }
}

/// A running `kbind-backend`.
struct Backend {
    process: Process,
    url: String,
}

fn named<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn authenticate_catalog_bind_pickup_sync_replay_restart_revoke_and_reap() {
    let world = World::new().await;
    let lines = world.lines.clone();
    let backend = world.backend("20s").await;
    let url = backend.url.clone();

    // Authenticate: a wrong token is a 401 with a JSON reason; the right one names alice.
    let (status, body) = world
        .call(world.http.get(format!("{url}{}", path::WHOAMI)).bearer_auth("wrong"))
        .await;
    assert_eq!(status, 401, "{body}");
    assert!(body["reason"].is_string(), "a JSON ApiError: {body}");
    let (status, body) = world
        .call(world.http.get(format!("{url}{}", path::WHOAMI)).bearer_auth(TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let me: WhoAmI = serde_json::from_value(body).expect("WhoAmI");
    assert_eq!(me.subject, "token:alice");

    // Catalog: the Export, bindable, namespaced, in its Collection.
    let catalog: Catalog = eventually("the catalog to offer widgets as ready", &lines, async || {
        let (status, body) = world
            .call(world.http.get(format!("{url}{}", path::CATALOG)).bearer_auth(TOKEN))
            .await;
        let catalog: Catalog = serde_json::from_value(body).ok()?;
        (status == 200 && catalog.exports.iter().any(|e| e.name == "widgets" && e.ready)).then_some(catalog)
    })
    .await;
    let widgets_export = catalog.exports.iter().find(|e| e.name == "widgets").expect("listed");
    assert!(widgets_export.namespaced);
    assert_eq!(catalog.collections[0].exports, ["widgets"]);

    // Bind and pick the bundle up; apply it on the consumer; start the konnector.
    let bound = world.bind(&backend.url).await;
    let documents = world.pickup_and_apply(&bound.pickup_url).await;
    let connection = named(&documents, "Connection")[0]["metadata"]["name"]
        .as_str()
        .expect("named")
        .to_string();
    let binding = named(&documents, "Binding");
    assert_eq!(binding.len(), 1, "one Binding for the one namespace");
    assert_eq!(binding[0]["metadata"]["namespace"], TEAM);
    let binding_name = binding[0]["metadata"]["name"].as_str().expect("named").to_string();
    let kubeconfig = named(&documents, "Secret")[0]["stringData"]["kubeconfig"]
        .as_str()
        .expect("kubeconfig")
        .to_string();
    assert!(
        !kubeconfig.contains("insecure-skip-tls-verify"),
        "issued kubeconfigs verify TLS"
    );
    assert!(
        kubeconfig.contains(&world.provider.server_and_ca().0),
        "issued kubeconfigs use --provider-url"
    );

    // A replayed pickup is a clear 410 with a JSON body.
    let (status, body) = world.call(world.http.get(&bound.pickup_url)).await;
    assert_eq!(status, 410, "{body}");
    assert_eq!(body["reason"], "PickupGone", "{body}");

    let konnector = world.konnector();
    let c = &world.consumer.client;
    let p = &world.provider.client;
    for (res, ns, name) in [
        (erase::<kbind_api::Connection>(), None, connection.as_str()),
        (erase::<kbind_api::Binding>(), Some(TEAM), binding_name.as_str()),
    ] {
        eventually(&format!("{} {name} Ready", res.kind), &lines, async || {
            let ready = condition(c, &res, ns, name, "Ready").await?;
            (ready.status == "True").then_some(())
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
        let obj = c.get_opt(&widgets(), Some(TEAM), "w1").await.ok()??;
        (obj.data["status"]["phase"] == "Ready").then_some(())
    })
    .await;

    // The backend stopped and the konnector restarted: sync goes on without it.
    backend.process.stop().await;
    konnector.stop().await;
    let konnector = world.konnector();
    c.patch(
        &widgets(),
        Some(TEAM),
        "w1",
        &Patch::Merge(json!({"spec": {"size": 2}})),
        &PatchParams::default(),
    )
    .await
    .expect("consumer spec changed");
    eventually("size 2 up with the backend gone", &lines, async || {
        let copy = p.get_opt(&widgets(), Some(TEAM), "w1").await.ok()??;
        (copy.data["spec"]["size"] == 2).then_some(())
    })
    .await;

    // Revoke: the Grant goes (the issuer revoked), and the Connection goes not Ready with a reason.
    let backend = world.backend("20s").await;
    let url = backend.url.clone();
    let (status, body) = world
        .call(world.http.get(format!("{url}{}", path::GRANTS)).bearer_auth(TOKEN))
        .await;
    assert_eq!(status, 200, "{body}");
    let grants: GrantList = serde_json::from_value(body).expect("GrantList");
    assert_eq!(grants.grants.len(), 1);
    assert_eq!(grants.grants[0].name, bound.grant);
    let (status, body) = world
        .call(
            world
                .http
                .delete(format!("{url}{}/{}", path::GRANTS, bound.grant))
                .bearer_auth(TOKEN),
        )
        .await;
    assert!((200..300).contains(&status), "revoke answered {status} {body}");
    eventually("the Grant revoked and gone", &lines, async || {
        p.get_opt(&erase::<kbind_api::Grant>(), None, &bound.grant)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let sa: Option<ServiceAccount> = p.get_typed_opt(Some("kbind-grants"), &bound.grant).await.expect("read");
    assert!(sa.is_none(), "the revoked Grant's ServiceAccount is gone");
    let reason = eventually("the Connection not Ready after revoke", &lines, async || {
        let ready = condition(c, &erase::<kbind_api::Connection>(), None, &connection, "Ready").await?;
        (ready.status == "False").then_some(ready.reason)
    })
    .await;
    assert!(!reason.is_empty(), "a reason says why");
    // Nothing the consumer bound is lost: the widget stays on both sides.
    assert!(c.get_opt(&widgets(), Some(TEAM), "w1").await.expect("read").is_some());
    assert!(p.get_opt(&widgets(), Some(TEAM), "w1").await.expect("read").is_some());

    // Bind again, heartbeat, then stop heartbeating: the reaper deletes the Grant.
    let bound = world.bind(&backend.url).await;
    world.pickup_and_apply(&bound.pickup_url).await;
    let lease = format!("consumer-{}", world.consumer_uid().await);
    let first_renewal = eventually("the konnector renewing its heartbeat Lease", &lines, async || {
        let lease: k8s_openapi::api::coordination::v1::Lease = p.get_typed_opt(Some("kbind"), &lease).await.ok()??;
        lease.spec?.renew_time
    })
    .await;
    eventually("a second renewal", &lines, async || {
        let l: k8s_openapi::api::coordination::v1::Lease = p.get_typed_opt(Some("kbind"), &lease).await.ok()??;
        (l.spec?.renew_time? != first_renewal).then_some(())
    })
    .await;
    assert!(
        p.get_opt(&erase::<kbind_api::Grant>(), None, &bound.grant)
            .await
            .expect("read")
            .is_some(),
        "a heartbeating consumer keeps its Grant"
    );
    konnector.stop().await;
    eventually("the silent consumer's Grant reaped", &lines, async || {
        p.get_opt(&erase::<kbind_api::Grant>(), None, &bound.grant)
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let _ = Duration::ZERO;
    backend.process.stop().await;
}
