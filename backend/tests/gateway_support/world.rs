//! A fakeapi provider with the backend's CRDs, three APIs (widgets namespaced, gadgets
//! cluster-scoped, sprockets not exported), three Exports and a Collection; a gateway router on
//! it with the test authenticator and issuer; the controller double; request helpers.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use fakeapi::FakeCluster;
use http::{HeaderMap, Method, Request, StatusCode};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kbind_api::Grant;
use kbind_api::consts::backend::ANNOTATION_CLAIMED_BY;
use kbind_api::service::ApiError;
use kbind_backend::gateway::{Config, Gateway, Rate, router};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, SharedClock, TokioClock};
use serde_json::{Value, json};
use tower::ServiceExt;

use super::*;

pub const UID: &str = "0c1b5a3e-7f2d-4c4e-9a63-2d1f0e9b8a77";
pub const OTHER_UID: &str = "5f0c2d1e-3b4a-4c5d-8e6f-7a8b9c0d1e2f";

/// A provider with the backend's CRDs, three APIs (widgets namespaced, gadgets cluster-scoped,
/// sprockets not exported), three Exports and a Collection; a gateway on it; the controller double.
pub struct World {
    pub admin: Arc<dyn ClusterClient>,
    pub app: Router,
    pub issuer: Arc<TestIssuer>,
    pub controller: Controller,
    pub config: Config,
    pub clock: SharedClock,
}

impl World {
    /// The name the gateway gives the Grant of (`subject`, `export`, `uid`): keyed by the
    /// provider's grants CRD UID, which the test reads as the gateway does.
    pub async fn grant_name(&self, subject: &str, export: &str, uid: &str) -> String {
        let crd: k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition = self
            .admin
            .get_typed(None, "grants.iam.kbind.io")
            .await
            .expect("the grants CRD");
        kbind_api::keyed_grant_name(crd.metadata.uid.unwrap_or_default().as_bytes(), subject, export, uid)
    }

    /// Another gateway replica on the same provider: it shares nothing with `app` but the cluster.
    pub fn replica(&self) -> Router {
        router(Gateway::with_clock(
            self.config.clone(),
            self.admin.clone(),
            vec![Arc::new(TestAuth {
                users: vec!["alice", "bob"],
            })],
            self.issuer.clone(),
            self.clock.clone(),
        ))
    }
}

pub use kbind_scenarios::apis::crd;

pub async fn create(client: &dyn ClusterClient, res: ApiResource, namespace: Option<&str>, value: Value) {
    let obj = serde_json::from_value(value).unwrap();
    client
        .create(&res, namespace, &obj, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("create: {e}"));
}

/// Waits until the provider serves `res` (fakeapi establishes CRDs asynchronously).
pub async fn wait_served(client: &dyn ClusterClient, res: &ApiResource) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while client.list(res, None, &Default::default()).await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{} is never served", res.plural));
}

pub fn res_of<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

pub fn test_config() -> Config {
    let mut config = Config::new(
        "https://kbind.example.org/",
        "acme",
        "https://api.acme.example.org:6443",
        TEST_CA,
    )
    .unwrap_or_else(|e| panic!("{e}"));
    config.bind_timeout = Duration::from_secs(10);
    config.bind_rate = Rate {
        per_minute: 6000,
        burst: 1000,
    };
    config.pickup_rate = Rate {
        per_minute: 6000,
        burst: 1000,
    };
    config.max_body_bytes = 4096;
    config
}

pub async fn world() -> World {
    world_with(test_config(), TestIssuer::default()).await
}

pub async fn world_with(config: Config, issuer: TestIssuer) -> World {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let cluster = FakeCluster::builder("provider").seed(7).clock(clock.clone()).build();
    let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
    for ns in ["kbind", GRANTS_NAMESPACE] {
        create(
            admin.as_ref(),
            res_of::<Namespace>(),
            None,
            json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        )
        .await;
    }
    for crd in kbind_api::backend_crds() {
        admin.create_typed(&crd).await.unwrap_or_else(|e| panic!("{e}"));
    }
    let crd_res =
        res_of::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>();
    create(
        admin.as_ref(),
        crd_res.clone(),
        None,
        crd("widgets", "Widget", "Namespaced", true),
    )
    .await;
    create(
        admin.as_ref(),
        crd_res.clone(),
        None,
        crd("gadgets", "Gadget", "Cluster", true),
    )
    .await;
    create(
        admin.as_ref(),
        crd_res,
        None,
        crd("sprockets", "Sprocket", "Namespaced", false),
    )
    .await;
    for res in [
        res_of::<kbind_api::Export>(),
        res_of::<kbind_api::Collection>(),
        res_of::<Grant>(),
    ] {
        wait_served(admin.as_ref(), &res).await;
    }
    let export_res = res_of::<kbind_api::Export>();
    create(admin.as_ref(), export_res.clone(), None, json!({
        "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "widgets"},
        "spec": {"title": "Widgets", "description": "Widgets and their gadgets",
            "apis": [{"name": "widgets.example.org"}, {"name": "gadgets.example.org"}],
            "conflictPolicy": "Adopt", "clusterScopedSharing": true,
            "relatedResources": [{"group": "", "resource": "secrets", "direction": "FromProvider", "selector": {"names": ["widget-credentials"]}}]},
    })).await;
    create(
        admin.as_ref(),
        export_res.clone(),
        None,
        json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "gadgets"},
            "spec": {"title": "Gadgets", "apis": [{"name": "gadgets.example.org"}], "clusterScopedSharing": true},
        }),
    )
    .await;
    create(
        admin.as_ref(),
        export_res,
        None,
        json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": "sprockets"},
            "spec": {"title": "Sprockets", "apis": [{"name": "sprockets.example.org"}]},
        }),
    )
    .await;
    create(
        admin.as_ref(),
        res_of::<kbind_api::Collection>(),
        None,
        json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Collection", "metadata": {"name": "tools"},
            "spec": {"title": "Tools", "exports": [{"name": "widgets"}, {"name": "gadgets"}, {"name": "missing"}]},
        }),
    )
    .await;

    let issuer = Arc::new(issuer);
    let gateway = Gateway::with_clock(
        config.clone(),
        admin.clone(),
        vec![Arc::new(TestAuth {
            users: vec!["alice", "bob"],
        })],
        issuer.clone(),
        clock.clone(),
    );
    let controller = spawn_controller(admin.clone(), clock.clone());
    World {
        admin,
        app: router(gateway),
        issuer,
        controller,
        config,
        clock,
    }
}

pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn json<T: serde::de::DeserializeOwned>(&self) -> T {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("{e}: {} {}", self.status, String::from_utf8_lossy(&self.body)))
    }

    pub fn error(&self) -> ApiError {
        let error: ApiError = self.json();
        assert_eq!(error.code, self.status.as_u16(), "{error:?}");
        assert!(!error.message.is_empty());
        error
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

pub async fn send(app: &Router, request: Request<Body>) -> Reply {
    let response = tokio::time::timeout(Duration::from_secs(60), app.clone().oneshot(request))
        .await
        .expect("the gateway answers within a minute")
        .unwrap_or_else(|e| match e {});
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap()
        .to_vec();
    Reply { status, headers, body }
}

pub fn request(method: Method, uri: &str, token: Option<&str>, body: Option<Value>) -> Request<Body> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(token) = token {
        builder = builder.header("authorization", format!("Bearer {token}"));
    }
    match body {
        Some(body) => builder
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap(),
        None => builder.body(Body::empty()).unwrap(),
    }
}

pub async fn bind(app: &Router, token: &str, body: Value) -> Reply {
    send(app, request(Method::POST, "/api/v1/bind", Some(token), Some(body))).await
}

pub fn widgets_bind() -> Value {
    json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["team-a"]})
}

/// The path of a pickup URL.
pub fn pickup_path(url: &str) -> String {
    url.strip_prefix("https://kbind.example.org")
        .unwrap_or_else(|| panic!("pickup URL {url} starts with the public URL"))
        .to_string()
}

pub async fn pickup(app: &Router, path: &str, accept: Option<&str>) -> Reply {
    let mut builder = Request::builder().uri(path);
    if let Some(accept) = accept {
        builder = builder.header("accept", accept);
    }
    send(app, builder.body(Body::empty()).unwrap()).await
}

/// Nothing bob could have left: no Grant of his, no namespace `ns`, no ServiceAccount.
pub async fn assert_nothing_created(world: &World, namespace: Option<&str>) {
    let grants = grant_names(world.admin.as_ref()).await;
    let bobs = [
        world.grant_name("token:bob", "widgets", UID).await,
        world.grant_name("token:bob", "nonexistent", UID).await,
        world.grant_name("token:bob", "widgets", OTHER_UID).await,
        world.grant_name("token:bob", "sprockets", UID).await,
    ];
    for name in &bobs {
        assert!(!grants.contains(name), "grant {name} was left behind: {grants:?}");
        let sa: Option<ServiceAccount> = world.admin.get_typed_opt(Some(GRANTS_NAMESPACE), name).await.unwrap();
        assert!(sa.is_none(), "ServiceAccount {name} was left behind");
    }
    if let Some(namespace) = namespace {
        let ns: Option<Namespace> = world.admin.get_typed_opt(None, namespace).await.unwrap();
        let claimed_by = ns.and_then(|ns| ns.metadata.annotations?.get(ANNOTATION_CLAIMED_BY).cloned());
        assert_ne!(
            claimed_by.as_deref(),
            Some("token:bob"),
            "namespace {namespace} was claimed for bob"
        );
    }
}

/// Waits (with a deadline) until `name` is gone from the provider.
pub async fn wait_gone(world: &World, name: &str) {
    tokio::time::timeout(Duration::from_secs(30), async {
        while grant_names(world.admin.as_ref()).await.iter().any(|n| n == name) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("grant {name} was never deleted"));
}
