//! A hostile (or honest) gateway in a few lines of axum: it speaks the gateway's HTTP API, hands
//! out whatever bundle the test crafted, and records every request so a test can tell what the
//! CLI asked for and in which order.

#![allow(dead_code)]

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::routing::{delete, get, post};
use kbind_api::consts::API_VERSION;
use kbind_api::consts::backend::LABEL_GRANT;
use kbind_api::service::path;
use parking_lot::Mutex;
use serde_json::{Value, json};

/// The Grant every bind answers.
pub const GRANT: &str = "g-evil";
/// The Connection name of [`honest_bundle`].
pub const CONNECTION: &str = "evil-widgets";
/// The pickup id (the test's URL is `<base>/api/v1/pickup/<id>`).
const PICKUP_ID: &str = "pickup-0123456789";

/// What the gateway serves and what it saw.
#[derive(Default)]
pub struct Script {
    /// The bundle the pickup answers.
    pub bundle: Vec<Value>,
    /// The Export's `relatedResources` in the catalog.
    pub related: Vec<Value>,
    /// `METHOD path` of every request, in order.
    pub seen: Vec<String>,
    /// When set, the gateway offers OIDC with itself as the issuer, whose discovery document
    /// names this authorization endpoint.
    pub authorization_endpoint: Option<String>,
    /// When set, the pickup answers this HTTP status and kbind error body instead of the bundle.
    pub pickup_error: Option<(u16, Value)>,
    /// When set, a request whose `METHOD path` starts with it never gets an answer (a slow
    /// provider, a hung gateway); [`FakeGateway::arrived`] is notified when one comes in.
    pub stall: Option<&'static str>,
    /// When set, the bind answers that the Grant covers these namespaces.
    pub grant_namespaces: Option<Vec<String>>,
}

/// A running fake gateway.
pub struct FakeGateway {
    /// Its base URL.
    pub url: String,
    /// Its script, shared with the server.
    pub script: Arc<Mutex<Script>>,
    /// Notified when a request matching [`Script::stall`] arrives.
    pub arrived: Arc<tokio::sync::Notify>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for FakeGateway {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl FakeGateway {
    /// Starts serving `bundle` on a free loopback port.
    pub async fn start(bundle: Vec<Value>) -> Self {
        let script = Arc::new(Mutex::new(Script {
            bundle,
            ..Default::default()
        }));
        let arrived = Arc::new(tokio::sync::Notify::new());
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let app = axum::Router::new()
            .route(path::PROVIDER, get(provider))
            .route(path::WHOAMI, get(whoami))
            .route(path::CATALOG, get(catalog))
            .route(path::GRANTS, get(grants))
            .route(&format!("{}/{{name}}", path::GRANTS), delete(revoke))
            .route(path::BIND, post(bind))
            .route(&format!("{}/{{id}}", path::PICKUP), get(pickup))
            .route("/.well-known/openid-configuration", get(discovery))
            .route("/jwks", get(jwks))
            .layer(axum::middleware::from_fn_with_state(
                (script.clone(), arrived.clone()),
                record,
            ))
            .with_state((script.clone(), url.clone()));
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Self {
            url,
            script,
            arrived,
            task,
        }
    }

    /// The pickup URL binds answer.
    pub fn pickup_url(&self) -> String {
        format!("{}{}/{PICKUP_ID}", self.url, path::PICKUP)
    }

    /// The requests seen so far.
    pub fn seen(&self) -> Vec<String> {
        self.script.lock().seen.clone()
    }

    /// Sets the bundle the next pickup answers.
    pub fn serve(&self, bundle: Vec<Value>) {
        self.script.lock().bundle = bundle;
    }

    /// Sets the catalog's `relatedResources`.
    pub fn announce_related(&self, related: Vec<Value>) {
        self.script.lock().related = related;
    }

    /// Offers OIDC sign-in at itself, sending browsers to `endpoint`.
    pub fn offer_oidc(&self, endpoint: &str) {
        self.script.lock().authorization_endpoint = Some(endpoint.into());
    }

    /// Forgets the requests seen.
    pub fn forget(&self) {
        self.script.lock().seen.clear();
    }
}

type GatewayState = (Arc<Mutex<Script>>, String);

async fn record(
    State((script, arrived)): State<(Arc<Mutex<Script>>, Arc<tokio::sync::Notify>)>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let line = format!("{} {}", request.method(), request.uri().path());
    let stalled = {
        let mut script = script.lock();
        let stalled = script.stall.is_some_and(|s| line.starts_with(s));
        script.seen.push(line);
        stalled
    };
    if stalled {
        arrived.notify_one();
        std::future::pending::<()>().await;
    }
    next.run(request).await
}

async fn provider(State((script, url)): State<GatewayState>) -> Json<Value> {
    let method = match script.lock().authorization_endpoint {
        Some(_) => json!({"type": "oidc", "issuerURL": url, "clientID": "kbind-cli"}),
        None => json!({"type": "token"}),
    };
    Json(
        json!({"name": "evil", "providerURL": "https://provider.invalid", "authMethods": [method],
        "issuer": "kubernetes", "version": "0"}),
    )
}

async fn discovery(State((script, url)): State<GatewayState>) -> Json<Value> {
    let endpoint = script.lock().authorization_endpoint.clone();
    Json(
        json!({"issuer": url, "authorization_endpoint": endpoint, "token_endpoint": format!("{url}/token"),
        "jwks_uri": format!("{url}/jwks"), "response_types_supported": ["code"],
        "subject_types_supported": ["public"], "id_token_signing_alg_values_supported": ["RS256"]}),
    )
}

async fn jwks() -> Json<Value> {
    Json(json!({"keys": []}))
}

async fn whoami() -> Json<Value> {
    Json(json!({"subject": "token:alice", "name": "alice"}))
}

async fn catalog(State((script, _)): State<GatewayState>) -> Json<Value> {
    let related = script.lock().related.clone();
    Json(json!({
        "collections": [],
        "exports": [{"name": "widgets", "title": "Widgets", "namespaced": true, "ready": true,
            "apis": [{"name": "widgets.example.org", "exported": true, "scope": "Namespaced"}],
            "relatedResources": related}],
    }))
}

/// The Grant binds answer, as its owner's only one (for another consumer cluster: a bind here
/// never finds it held).
async fn grants() -> Json<Value> {
    Json(
        json!({"grants": [{"name": GRANT, "export": "widgets", "consumerClusterUID": "another-cluster",
        "namespaces": ["team-a"], "ready": true}]}),
    )
}

async fn revoke(Path(_name): Path<String>) -> StatusCode {
    StatusCode::OK
}

async fn bind(State((script, url)): State<GatewayState>) -> (StatusCode, Json<Value>) {
    let mut answer = json!({"grant": GRANT, "pickupURL": format!("{url}{}/{PICKUP_ID}", path::PICKUP),
        "expiresAt": "2099-01-01T00:00:00Z"});
    if let Some(namespaces) = &script.lock().grant_namespaces {
        answer["outcome"] = json!("updated");
        answer["namespaces"] = json!(namespaces);
    }
    (StatusCode::CREATED, Json(answer))
}

async fn pickup(State((script, _)): State<GatewayState>) -> axum::response::Response {
    use axum::response::IntoResponse;
    let script = script.lock();
    if let Some((code, body)) = &script.pickup_error {
        let status = StatusCode::from_u16(*code).expect("a status code");
        return (status, Json(body.clone())).into_response();
    }
    let items = script.bundle.clone();
    Json(json!({"apiVersion": "v1", "kind": "List", "items": items})).into_response()
}

/// What an honest gateway would send for Export widgets bound in `namespaces`.
pub fn honest_bundle(namespaces: &[&str]) -> Vec<Value> {
    let labels = json!({ LABEL_GRANT: GRANT });
    let secret = format!("{CONNECTION}-kubeconfig");
    let mut objects = vec![
        json!({"apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": secret, "namespace": "kbind", "labels": labels},
            "type": "Opaque", "stringData": {"kubeconfig": "apiVersion: v1\nkind: Config\n"}}),
        json!({"apiVersion": API_VERSION, "kind": "Connection",
            "metadata": {"name": CONNECTION, "labels": labels,
                "annotations": {"core.kbind.io/binding-namespaces": namespaces.join(",")}},
            "spec": {"kubeconfigSecretRef": {"namespace": "kbind", "name": secret, "key": "kubeconfig"}}}),
    ];
    for ns in namespaces {
        objects.push(json!({"apiVersion": API_VERSION, "kind": "Binding",
            "metadata": {"name": CONNECTION, "namespace": ns, "labels": labels},
            "spec": {"connectionRef": {"name": CONNECTION}, "apis": [{"name": "widgets.example.org"}],
                "conflictPolicy": "Fail"}}));
    }
    objects
}

/// A `fakeapi serve` consumer with kbind's CRDs, namespaces `kbind`, `team-a` and `other`, and a
/// fresh konnector leader Lease (the CLI checks that a konnector runs; none does here).
pub async fn consumer_with_kbind(
    dir: &std::path::Path,
    lines: &super::children::Lines,
) -> super::children::FakeCluster {
    use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};
    use kbind_cluster::ClusterClientExt;
    let cluster = super::children::FakeCluster::start(dir, "consumer", lines).await;
    super::children::install_kbind(&cluster.client, &["kbind", "team-a", "other"], lines).await;
    let lease = Lease {
        metadata: ObjectMeta {
            name: Some("kbind-konnector".into()),
            namespace: Some("kbind".into()),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some("konnector-0".into()),
            renew_time: Some(MicroTime(jiff::Timestamp::now())),
            ..Default::default()
        }),
    };
    cluster.client.create_typed(&lease).await.expect("Lease created");
    cluster
}
