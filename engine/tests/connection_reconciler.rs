//! The Connection reconciler against in-process fake consumer and provider clusters, on a
//! paused tokio clock: Secret validation (§5), identity pinning, discovery, heartbeat,
//! connection loss and the cleanup finalizers.

mod support;

mod world {
    //! A consumer and a provider FakeCluster with the Connection reconciler running on the
    //! consumer, reaching the provider through the shared FakeConnector.

    use std::sync::Arc;
    use std::time::Duration;

    use base64::Engine as _;
    use fakeapi::{FakeCluster, UserInfo, WriteRecord};
    use kbind_api::{Connection, conditions};
    use kbind_cluster::{
        ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, PostParams, SharedClock, TokioClock,
    };
    use kbind_engine::context::{Context, EngineConfig};
    use serde_json::{Value, json};

    use super::support::*;

    pub struct World {
        pub consumer: FakeCluster,
        pub provider: FakeCluster,
        pub connector: Arc<FakeConnector>,
        pub admin: Arc<dyn ClusterClient>,
        _task: AbortOnDrop,
    }

    pub fn crd(group: &str, plural: &str, kind: &str, exported: bool) -> DynamicObject {
        let labels = if exported {
            json!({"core.kbind.io/exported": "true"})
        } else {
            json!({})
        };
        object(json!({
            "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": format!("{plural}.{group}"), "labels": labels},
            "spec": {
                "group": group, "scope": "Namespaced",
                "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
                "versions": [{"name": "v1", "served": true, "storage": true,
                              "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
            },
        }))
    }

    impl World {
        pub async fn new() -> Self {
            Self::with_provider(FakeCluster::builder("provider").seed(2).build()).await
        }

        pub async fn with_provider(provider: FakeCluster) -> Self {
            let _ = tracing_subscriber::fmt()
                .with_env_filter(tracing_subscriber::EnvFilter::from_default_env())
                .with_test_writer()
                .try_init();
            let consumer = FakeCluster::builder("consumer").seed(1).build();
            let admin: Arc<dyn ClusterClient> = Arc::new(consumer.admin_client());
            install_kbind_crds(&admin).await;
            create_namespace(&admin, "kbind").await;
            let served = admin.clone();
            eventually("the kbind CRDs to be served", Duration::from_secs(30), || {
                let served = served.clone();
                async move {
                    let d = served.discovery().await.unwrap();
                    ["connections", "clusterbindings", "bindings"]
                        .iter()
                        .all(|p| d.find("core.kbind.io", p).is_some())
                }
            })
            .await;
            provider.add_token(ADMIN_TOKEN, UserInfo::admin());
            provider.add_token(NOBODY_TOKEN, UserInfo::user("nobody"));
            let connector = Arc::new(FakeConnector::default());
            connector.route(SERVER, &provider, CA);
            let clock: SharedClock = Arc::new(TokioClock::fixed());
            let ctx = Context {
                consumer: admin.clone(),
                connector: connector.clone(),
                clock: clock.clone(),
                randomness: kbind_cluster::backoff::seeded(1),
                config: EngineConfig::default(),
            };
            let task = AbortOnDrop(tokio::spawn(kbind_engine::connection::run(ctx)));
            Self {
                consumer,
                provider,
                connector,
                admin,
                _task: task,
            }
        }

        pub fn provider_admin(&self) -> Arc<dyn ClusterClient> {
            Arc::new(self.provider.admin_client())
        }

        pub async fn export_widgets(&self) {
            let provider = self.provider_admin();
            for (plural, kind, exported) in [("widgets", "Widget", true), ("gadgets", "Gadget", false)] {
                provider
                    .create(
                        &crds(),
                        None,
                        &crd("example.org", plural, kind, exported),
                        &PostParams::default(),
                    )
                    .await
                    .unwrap();
            }
        }

        pub async fn create_secret(&self, namespace: &str, name: &str, kubeconfig: &str) {
            let b64 = base64::engine::general_purpose::STANDARD;
            let secret = object(json!({
                "apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": name, "namespace": namespace},
                "data": {"kubeconfig": b64.encode(kubeconfig)},
            }));
            self.admin
                .create(&secrets(), Some(namespace), &secret, &PostParams::default())
                .await
                .unwrap();
        }

        pub async fn create_connection(&self, name: &str, secret_ns: &str, secret: &str, annotations: Value) {
            let conn = object(json!({
                "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
                "metadata": {"name": name, "annotations": annotations},
                "spec": {"kubeconfigSecretRef": {"namespace": secret_ns, "name": secret, "key": "kubeconfig"}},
            }));
            self.admin
                .create(&connections(), None, &conn, &PostParams::default())
                .await
                .unwrap();
        }

        pub async fn connection(&self, name: &str) -> Option<Connection> {
            let obj = self.admin.get_opt(&connections(), None, name).await.unwrap()?;
            Some(kbind_cluster::from_dynamic(obj).unwrap())
        }

        pub async fn delete_connection(&self, name: &str) {
            self.admin
                .delete(&connections(), None, name, &DeleteParams::default())
                .await
                .unwrap();
        }

        /// Waits until condition `type_` of Connection `name` has `status` and `reason`.
        pub async fn wait_condition(&self, name: &str, type_: &str, status: &str, reason: &str) -> Connection {
            let what = format!("Connection {name} {type_}={status} ({reason})");
            let mut last = None;
            let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
            loop {
                if let Some(conn) = self.connection(name).await {
                    if let Some(c) = conditions::find(conn.conditions(), type_)
                        && c.status == status
                        && c.reason == reason
                    {
                        return conn;
                    }
                    last = Some(conn.status.clone());
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "timed out waiting for {what}; last status {last:#?}"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }

        pub async fn wait_ready(&self, name: &str) -> Connection {
            self.wait_condition(name, "Ready", "True", "AsExpected").await
        }

        pub fn provider_writes(&self) -> Vec<WriteRecord> {
            self.provider
                .write_log()
                .into_iter()
                .filter(|w| !w.user.starts_with("system:"))
                .collect()
        }

        pub async fn lease(&self, local_uid: &str) -> Option<DynamicObject> {
            self.provider_admin()
                .get_opt(&leases(), Some("kbind"), &format!("consumer-{local_uid}"))
                .await
                .unwrap()
        }

        pub async fn secret_finalizers(&self, name: &str) -> Vec<String> {
            let secret = self.admin.get_opt(&secrets(), Some("kbind"), name).await.unwrap();
            secret.and_then(|s| s.metadata.finalizers).unwrap_or_default()
        }
    }

    pub fn renew_time(lease: &DynamicObject) -> String {
        lease.data["spec"]["renewTime"].as_str().unwrap_or_default().to_string()
    }
}

use std::time::Duration;

use kbind_api::{SchemaSource, conditions};
use kbind_cluster::PostParams;
use serde_json::json;
use support::*;
use world::*;

#[tokio::test(start_paused = true)]
async fn connection_becomes_ready_and_exports_only_labelled_crds() {
    let world = World::new().await;
    world.export_widgets().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let conn = world.wait_ready("acme").await;
    let status = conn.status.clone().unwrap();
    assert_eq!(status.remote_cluster_uid, Some(world.provider.identity_uid()));
    assert_eq!(status.local_cluster_uid, Some(world.consumer.identity_uid()));
    let names: Vec<_> = status.exported_apis.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["widgets.example.org"]);
    assert_eq!(status.exported_apis[0].versions, ["v1"]);
    assert_eq!(status.active_schema_source, Some(SchemaSource::Crd));
    for type_ in ["SecretValid", "Connected", "SchemaInSync"] {
        assert!(
            conditions::is_true(conn.conditions(), type_),
            "{type_}: {:#?}",
            conn.conditions()
        );
    }
    assert!(!conditions::is_true(conn.conditions(), "PermissionDenied"));
    assert!(
        conn.metadata
            .finalizers
            .clone()
            .unwrap()
            .contains(&"core.kbind.io/cleanup".to_string())
    );
    assert_eq!(world.secret_finalizers("acme").await, ["core.kbind.io/cleanup"]);

    let lease = world
        .lease(&world.consumer.identity_uid())
        .await
        .expect("heartbeat lease");
    assert_eq!(
        lease.data["spec"]["holderIdentity"],
        json!(world.consumer.identity_uid())
    );
    assert_eq!(lease.data["spec"]["leaseDurationSeconds"], json!(60));
    assert_eq!(lease.metadata.labels.unwrap()["core.kbind.io/managed"], "true");
    let text = serde_json::to_string(&conn).unwrap();
    assert!(!text.contains(ADMIN_TOKEN), "token leaked into the Connection");
}

#[tokio::test(start_paused = true)]
async fn refused_kubeconfigs_never_reach_the_provider() {
    let world = World::new().await;
    let before = world.provider_writes();
    let token = format!("    token: {ADMIN_TOKEN}\n");
    let http = SERVER.replace("https://", "http://");
    let cases: Vec<(&str, String, &str)> = vec![
        (
            "exec",
            kubeconfig(
                SERVER,
                CA,
                "",
                "    exec:\n      apiVersion: client.authentication.k8s.io/v1\n      command: /bin/sh\n",
            ),
            "UnsupportedCredentials",
        ),
        (
            "token-file",
            kubeconfig(SERVER, CA, "", "    tokenFile: /var/run/secrets/token\n"),
            "UnsupportedCredentials",
        ),
        (
            "skip-verify",
            kubeconfig(SERVER, CA, "    insecure-skip-tls-verify: true\n", &token),
            "UnsupportedCredentials",
        ),
        (
            "plain-http",
            kubeconfig(&http, CA, "", &token),
            "UnsupportedCredentials",
        ),
        (
            "ca-file",
            kubeconfig(SERVER, CA, "    certificate-authority: /etc/ca.pem\n", &token),
            "UnsupportedCredentials",
        ),
        (
            "cert-file",
            kubeconfig(
                SERVER,
                CA,
                "",
                "    client-certificate: /etc/c.pem\n    client-key: /etc/k.pem\n",
            ),
            "UnsupportedCredentials",
        ),
        (
            "proxy",
            kubeconfig(SERVER, CA, "    proxy-url: http://proxy:3128\n", &token),
            "UnsupportedCredentials",
        ),
        ("garbage", "::: not yaml [".to_string(), "InvalidKubeconfig"),
    ];
    for (name, kc, _) in &cases {
        world.create_secret("kbind", name, kc).await;
        world.create_connection(name, "kbind", name, json!({})).await;
    }
    for (name, _, reason) in &cases {
        let conn = world.wait_condition(name, "SecretValid", "False", reason).await;
        let ready = conditions::find(conn.conditions(), "Ready").unwrap();
        assert_eq!(
            (ready.status.as_str(), ready.reason.as_str()),
            ("False", *reason),
            "{name}"
        );
        let text = serde_json::to_string(&conn).unwrap();
        for secret in [ADMIN_TOKEN, "/var/run", "/etc/", "proxy:3128"] {
            assert!(!text.contains(secret), "{name} leaks {secret}");
        }
    }
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        world.connector.calls(),
        0,
        "the connector was asked for a refused kubeconfig"
    );
    assert_eq!(world.provider_writes(), before);
}

#[tokio::test(start_paused = true)]
async fn wrong_ca_fails_verification_before_any_request() {
    let world = World::new().await;
    let before = world.provider_writes();
    let kc = kubeconfig(SERVER, OTHER_CA, "", &format!("    token: {ADMIN_TOKEN}\n"));
    world.create_secret("kbind", "acme", &kc).await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let conn = world
        .wait_condition("acme", "Connected", "False", "ProviderUnreachable")
        .await;
    assert!(conditions::is_true(conn.conditions(), "SecretValid"));
    assert!(conn.status.unwrap().remote_cluster_uid.is_none());
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(world.provider_writes(), before);
}

#[tokio::test(start_paused = true)]
async fn secret_created_after_the_connection_makes_it_ready() {
    let world = World::new().await;
    world.export_widgets().await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    world
        .wait_condition("acme", "SecretValid", "False", "SecretNotFound")
        .await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    let conn = world.wait_ready("acme").await;
    assert!(conn.exports("widgets.example.org"));
}

#[tokio::test(start_paused = true)]
async fn secret_outside_the_konnector_namespace_is_not_allowed() {
    let world = World::new().await;
    world.create_connection("acme", "default", "acme", json!({})).await;
    world
        .wait_condition("acme", "SecretValid", "False", "SecretNamespaceNotAllowed")
        .await;
    assert_eq!(world.connector.calls(), 0);
}

#[tokio::test(start_paused = true)]
async fn rebuilt_provider_is_detected_and_never_written() {
    let world = World::new().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let pinned = world
        .wait_ready("acme")
        .await
        .status
        .unwrap()
        .remote_cluster_uid
        .unwrap();
    world.provider.replace_with_fresh();
    assert_ne!(world.provider.identity_uid(), pinned);
    let writes_after_swap = world.provider_writes().len();
    let conn = world
        .wait_condition("acme", "Connected", "False", "ClusterIdentityChanged")
        .await;
    assert_eq!(
        conn.status.unwrap().remote_cluster_uid.as_deref(),
        Some(pinned.as_str())
    );
    world
        .wait_condition("acme", "Ready", "False", "ClusterIdentityChanged")
        .await;
    tokio::time::sleep(Duration::from_secs(300)).await;
    let late: Vec<_> = world.provider_writes().into_iter().skip(writes_after_swap).collect();
    assert!(late.is_empty(), "writes reached the rebuilt provider: {late:?}");
    assert!(world.lease(&world.consumer.identity_uid()).await.is_none());
}

#[tokio::test(start_paused = true)]
async fn partition_reports_unreachable_and_heal_recovers() {
    let world = World::new().await;
    world.export_widgets().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    world.wait_ready("acme").await;
    world.provider.partition();
    let conn = world
        .wait_condition("acme", "Connected", "False", "ProviderUnreachable")
        .await;
    // Nothing is forgotten while the provider is away.
    assert!(conn.exports("widgets.example.org"));
    assert!(world.connection("acme").await.is_some());
    world.provider.heal();
    let conn = world.wait_ready("acme").await;
    assert!(conn.exports("widgets.example.org"));
}

#[tokio::test(start_paused = true)]
async fn heartbeat_is_renewed_every_interval_only_while_connected() {
    let world = World::new().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    world.wait_ready("acme").await;
    let uid = world.consumer.identity_uid();
    let lease_writes = |w: &World| {
        w.provider_writes()
            .into_iter()
            .filter(|r| r.resource == "leases.coordination.k8s.io")
            .count()
    };
    let first = renew_time(&world.lease(&uid).await.unwrap());
    let writes = lease_writes(&world);
    // Every 30 s, each wait grown by up to a tenth of jitter (a herd of konnectors must not
    // renew in step): three renewals in 100 s, 90 to 99 s after the first.
    tokio::time::sleep(Duration::from_secs(100)).await;
    assert_eq!(
        lease_writes(&world) - writes,
        3,
        "three renewals in 100 s at a 30 s interval with up to 10 % jitter"
    );
    let t0: jiff::Timestamp = first.parse().unwrap();
    let t1: jiff::Timestamp = renew_time(&world.lease(&uid).await.unwrap()).parse().unwrap();
    assert!(
        (90..=99).contains(&(t1 - t0).get_seconds()),
        "{}",
        (t1 - t0).get_seconds()
    );

    world.provider.partition();
    world
        .wait_condition("acme", "Connected", "False", "ProviderUnreachable")
        .await;
    world.provider.heal();
    world.wait_ready("acme").await;
    let t2: jiff::Timestamp = renew_time(&world.lease(&uid).await.unwrap()).parse().unwrap();
    assert!(t2 > t1, "renewed again after recovery");
}

#[tokio::test(start_paused = true)]
async fn kcp_like_provider_pins_its_logical_cluster_and_exports_non_builtin_apis() {
    let provider = FakeCluster::builder("kcp").seed(3).kcp_like(true).build();
    let world = World::with_provider(provider).await;
    world
        .provider_admin()
        .create(
            &res(
                "apiextensions.k8s.io",
                "v1",
                "CustomResourceDefinition",
                "customresourcedefinitions",
            ),
            None,
            &crd("example.org", "widgets", "Widget", false),
            &PostParams::default(),
        )
        .await
        .unwrap();
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let conn = world.wait_ready("acme").await;
    let status = conn.status.unwrap();
    let lc = world
        .provider_admin()
        .get(
            &res("core.kcp.io", "v1alpha1", "LogicalCluster", "logicalclusters"),
            None,
            "cluster",
        )
        .await
        .unwrap();
    assert_eq!(status.remote_cluster_uid, lc.metadata.uid);
    let names: Vec<_> = status.exported_apis.iter().map(|a| a.name.as_str()).collect();
    assert_eq!(names, ["widgets.example.org"]);
    assert_eq!(status.active_schema_source, Some(SchemaSource::OpenApi));
}

#[tokio::test(start_paused = true)]
async fn forbidden_credentials_report_permission_denied() {
    let world = World::new().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(NOBODY_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let conn = world
        .wait_condition("acme", "PermissionDenied", "True", "Forbidden")
        .await;
    let denied = conditions::find(conn.conditions(), "PermissionDenied").unwrap();
    assert!(
        denied.message.contains("get") && denied.message.contains("namespaces"),
        "{}",
        denied.message
    );
    let ready = conditions::find(conn.conditions(), "Ready").unwrap();
    assert_eq!(ready.status, "False");
    assert!(!serde_json::to_string(&conn).unwrap().contains(NOBODY_TOKEN));
}

#[tokio::test(start_paused = true)]
async fn refused_credentials_report_unauthorized_with_the_401() {
    const REVOKED_TOKEN: &str = "provider-revoked-token-s3cret";
    let world = World::new().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(REVOKED_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    let conn = world.wait_condition("acme", "Connected", "False", "Unauthorized").await;
    let connected = conditions::find(conn.conditions(), "Connected").unwrap();
    assert!(connected.message.contains("HTTP 401"), "{}", connected.message);
    let ready = conditions::find(conn.conditions(), "Ready").unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "Unauthorized")
    );
    assert!(
        !conditions::is_true(conn.conditions(), "PermissionDenied"),
        "a 401 refuses the credentials, not a verb"
    );
    assert!(!serde_json::to_string(&conn).unwrap().contains(REVOKED_TOKEN));
}

#[tokio::test(start_paused = true)]
async fn shared_secret_is_released_by_the_last_connection() {
    let world = World::new().await;
    world
        .create_secret("kbind", "shared", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("one", "kbind", "shared", json!({})).await;
    world.create_connection("two", "kbind", "shared", json!({})).await;
    world.wait_ready("one").await;
    world.wait_ready("two").await;
    assert_eq!(world.secret_finalizers("shared").await, ["core.kbind.io/cleanup"]);
    world.delete_connection("one").await;
    let gone = |name: &'static str| {
        let admin = world.admin.clone();
        move || {
            let admin = admin.clone();
            async move { admin.get_opt(&connections(), None, name).await.unwrap().is_none() }
        }
    };
    eventually("Connection one to be released", Duration::from_secs(60), gone("one")).await;
    assert_eq!(world.secret_finalizers("shared").await, ["core.kbind.io/cleanup"]);
    world.delete_connection("two").await;
    eventually("Connection two to be released", Duration::from_secs(60), gone("two")).await;
    assert!(world.secret_finalizers("shared").await.is_empty());
}

#[tokio::test(start_paused = true)]
async fn deletion_waits_for_bindings_unless_orphan() {
    let world = World::new().await;
    world
        .create_secret("kbind", "acme", &token_kubeconfig(ADMIN_TOKEN))
        .await;
    world.create_connection("acme", "kbind", "acme", json!({})).await;
    world.wait_ready("acme").await;
    let binding = object(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
        "metadata": {"name": "widgets"},
        "spec": {"connectionRef": {"name": "acme"}, "apis": [{"name": "widgets.example.org"}]},
    }));
    let bindings = res("core.kbind.io", "v1alpha1", "ClusterBinding", "clusterbindings");
    world
        .admin
        .create(&bindings, None, &binding, &PostParams::default())
        .await
        .unwrap();
    world.delete_connection("acme").await;
    world.wait_condition("acme", "Ready", "False", "DrainingBindings").await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(
        world.connection("acme").await.is_some(),
        "released while a binding still uses it"
    );

    // The escape hatch: Orphan releases at once, without a request to the provider.
    let writes = world.provider_writes();
    world
        .admin
        .patch(
            &connections(),
            None,
            "acme",
            &kbind_cluster::Patch::Merge(
                json!({"metadata": {"annotations": {"core.kbind.io/deletion-policy": "Orphan"}}}),
            ),
            &Default::default(),
        )
        .await
        .unwrap();
    let admin = world.admin.clone();
    eventually(
        "the orphaned Connection to be released",
        Duration::from_secs(60),
        move || {
            let admin = admin.clone();
            async move { admin.get_opt(&connections(), None, "acme").await.unwrap().is_none() }
        },
    )
    .await;
    assert!(world.secret_finalizers("acme").await.is_empty());
    assert_eq!(world.provider_writes(), writes);
    assert!(
        world.lease(&world.consumer.identity_uid()).await.is_some(),
        "the Lease is left to expire"
    );
}

use fakeapi::FakeCluster;
use kbind_cluster::ClusterClientExt;
