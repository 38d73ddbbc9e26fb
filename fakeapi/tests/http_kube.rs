//! The HTTP surface through the real `kube` client, without sockets: the router is the
//! client's tower service.

use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use http::header::{ACCEPT, AUTHORIZATION};
use http::{HeaderValue, Request};
use k8s_openapi::api::core::v1::{ConfigMap, Secret, ServiceAccount};
use kbind_cluster::{ApiResource, ClusterClient, Error, KubeClusterClient};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::watcher;
use kube::{Client, Discovery};
use serde_json::{Value, json};

use fakeapi::{ErrorRule, FakeCluster, InjectedError, UserInfo};

const ADMIN_TOKEN: &str = "admin-token";
const BOB_TOKEN: &str = "bob-token";

fn cluster() -> FakeCluster {
    // Without kube-root-ca.crt in every namespace, so these tests can count ConfigMaps.
    let cluster = FakeCluster::builder("http")
        .seed(3)
        .bookmark_interval(Duration::from_secs(3600))
        .root_ca_publisher(false)
        .build();
    cluster.add_token(ADMIN_TOKEN, UserInfo::admin());
    cluster.add_token(BOB_TOKEN, UserInfo::user("bob"));
    cluster
}

/// A kube client whose requests carry `token` (none when `None`).
fn client_with(cluster: &FakeCluster, token: Option<&str>) -> Client {
    let header = token.map(|t| HeaderValue::from_str(&format!("Bearer {t}")).unwrap());
    let service = tower::ServiceBuilder::new()
        .map_request(move |mut req: Request<kube::client::Body>| {
            if let Some(h) = &header {
                req.headers_mut().insert(AUTHORIZATION, h.clone());
            }
            req.headers_mut()
                .insert(http::header::USER_AGENT, HeaderValue::from_static("kube-test/5.0"));
            req
        })
        .service(fakeapi::http::router(cluster.clone()));
    Client::new(service, "default")
}

fn admin(cluster: &FakeCluster) -> Client {
    client_with(cluster, Some(ADMIN_TOKEN))
}

fn cm_resource() -> ApiResource {
    ApiResource::erase::<ConfigMap>(&())
}

fn configmap(name: &str, data: Value) -> ConfigMap {
    serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}))
        .unwrap()
}

fn api_code(err: kube::Error) -> u16 {
    match err {
        kube::Error::Api(status) => status.code,
        other => panic!("not an API error: {other:?}"),
    }
}

async fn raw(client: &Client, method: &str, uri: &str, accept: Option<&str>) -> http::Response<Vec<u8>> {
    let mut builder = Request::builder().method(method).uri(uri);
    if let Some(accept) = accept {
        builder = builder.header(ACCEPT, accept);
    }
    let response = client
        .send(builder.body(kube::client::Body::empty()).unwrap())
        .await
        .unwrap();
    let (parts, body) = response.into_parts();
    let bytes = http_body_util::BodyExt::collect(body).await.unwrap().to_bytes();
    http::Response::from_parts(parts, bytes.to_vec())
}

fn json_of(response: &http::Response<Vec<u8>>) -> Value {
    serde_json::from_slice(response.body()).unwrap()
}

#[tokio::test(start_paused = true)]
async fn crud_round_trips_through_the_seam() {
    let cluster = cluster();
    let seam = KubeClusterClient::new(admin(&cluster));
    let res = cm_resource();
    let obj: kube::api::DynamicObject = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": "1"}}),
    )
    .unwrap();
    let created = seam
        .create(&res, Some("default"), &obj, &PostParams::default())
        .await
        .unwrap();
    assert_eq!(created.data["data"]["x"], "1");
    assert_eq!(
        created.metadata.managed_fields.as_ref().unwrap()[0].manager.as_deref(),
        Some("kube-test")
    );
    let again = seam
        .create(&res, Some("default"), &obj, &PostParams::default())
        .await
        .unwrap_err();
    assert!(matches!(again, Error::AlreadyExists { .. }), "{again:?}");

    let got = seam.get(&res, Some("default"), "a").await.unwrap();
    assert_eq!(got.metadata.uid, created.metadata.uid);
    let list = seam.list(&res, Some("default"), &ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);

    let mut changed = got.clone();
    changed.data["data"]["x"] = json!("2");
    let replaced = seam
        .replace(&res, Some("default"), "a", &changed, &PostParams::default())
        .await
        .unwrap();
    assert_eq!(replaced.data["data"]["x"], "2");
    let stale = seam
        .replace(&res, Some("default"), "a", &changed, &PostParams::default())
        .await
        .unwrap_err();
    assert!(stale.is_conflict(), "{stale:?}");

    assert!(
        seam.delete(&res, Some("default"), "a", &DeleteParams::default())
            .await
            .unwrap()
            .is_none()
    );
    let gone = seam.get(&res, Some("default"), "a").await.unwrap_err();
    assert!(gone.is_not_found(), "{gone:?}");
}

#[tokio::test(start_paused = true)]
async fn delete_answers_the_object_while_finalizers_hold_it_and_a_status_once_gone() {
    let cluster = cluster();
    let client = admin(&cluster);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    let mut held = configmap("held", json!({}));
    held.metadata.finalizers = Some(vec!["example.org/hold".into()]);
    api.create(&PostParams::default(), &held).await.unwrap();
    let answer = api.delete("held", &DeleteParams::default()).await.unwrap();
    let still = answer.left().expect("the object, held by its finalizer");
    assert!(still.metadata.deletion_timestamp.is_some());

    api.create(&PostParams::default(), &configmap("free", json!({})))
        .await
        .unwrap();
    let status = api
        .delete("free", &DeleteParams::background())
        .await
        .unwrap()
        .right()
        .unwrap();
    assert_eq!(status.details.unwrap().name, "free");

    // ServiceAccounts' store returns the deleted object, as kube-apiserver's does.
    let sas: Api<ServiceAccount> = Api::namespaced(client, "default");
    let sa: ServiceAccount = serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap();
    sas.create(&PostParams::default(), &sa).await.unwrap();
    let deleted = sas.delete("robot", &DeleteParams::default()).await.unwrap();
    assert_eq!(deleted.left().unwrap().metadata.name.as_deref(), Some("robot"));
}

#[tokio::test(start_paused = true)]
async fn delete_preconditions_and_dry_run_are_honoured() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap();
    let dry = DeleteParams {
        dry_run: true,
        ..DeleteParams::default()
    };
    api.delete("a", &dry).await.unwrap();
    assert!(api.get_opt("a").await.unwrap().is_some());
    let wrong_uid = DeleteParams {
        preconditions: Some(kube::api::Preconditions {
            uid: Some("not-the-uid".into()),
            resource_version: None,
        }),
        ..DeleteParams::default()
    };
    assert_eq!(api_code(api.delete("a", &wrong_uid).await.unwrap_err()), 409);
}

#[tokio::test(start_paused = true)]
async fn delete_collection_removes_what_the_selector_matches() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    for (name, tier) in [("a", "x"), ("b", "x"), ("c", "y")] {
        let mut cm = configmap(name, json!({}));
        cm.metadata.labels = Some([("tier".to_string(), tier.to_string())].into());
        api.create(&PostParams::default(), &cm).await.unwrap();
    }
    let deleted = api
        .delete_collection(&DeleteParams::default(), &ListParams::default().labels("tier=x"))
        .await
        .unwrap()
        .left()
        .unwrap();
    assert_eq!(deleted.items.len(), 2);
    let left: Vec<String> = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|c| c.metadata.name)
        .collect();
    assert_eq!(left, ["c"]);
}

#[tokio::test(start_paused = true)]
async fn the_four_patch_types_apply() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    api.create(&PostParams::default(), &configmap("a", json!({"x": "1"})))
        .await
        .unwrap();
    let pp = PatchParams::default();

    let merged = api
        .patch("a", &pp, &Patch::Merge(json!({"data": {"y": "2"}})))
        .await
        .unwrap();
    assert_eq!(merged.data.as_ref().unwrap()["y"], "2");

    let ops: json_patch::Patch =
        serde_json::from_value(json!([{"op": "replace", "path": "/data/x", "value": "10"}])).unwrap();
    let jsonp = api.patch("a", &pp, &Patch::<()>::Json(ops)).await.unwrap();
    assert_eq!(jsonp.data.as_ref().unwrap()["x"], "10");

    let strategic = api
        .patch("a", &pp, &Patch::Strategic(json!({"data": {"z": "3"}})))
        .await
        .unwrap();
    assert_eq!(strategic.data.as_ref().unwrap().len(), 3);

    let apply = PatchParams::apply("applier");
    let applied = api
        .patch(
            "b",
            &apply,
            &Patch::Apply(
                json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "b"}, "data": {"k": "v"}}),
            ),
        )
        .await
        .unwrap();
    assert_eq!(applied.data.as_ref().unwrap()["k"], "v");
    let managers: Vec<_> = applied
        .metadata
        .managed_fields
        .unwrap()
        .into_iter()
        .map(|m| (m.manager.unwrap(), m.operation.unwrap()))
        .collect();
    assert_eq!(managers, [("applier".to_string(), "Apply".to_string())]);
}

#[tokio::test(start_paused = true)]
async fn server_side_apply_conflicts_are_409_with_causes_until_forced() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    let body = |v: &str| {
        Patch::Apply(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}, "data": {"x": v}}))
    };
    api.patch("a", &PatchParams::apply("one"), &body("1")).await.unwrap();
    let err = api
        .patch("a", &PatchParams::apply("two"), &body("2"))
        .await
        .unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error")
    };
    assert_eq!(status.code, 409);
    assert_eq!(status.reason, "Conflict");
    let causes = status.details.unwrap().causes;
    assert_eq!(causes.len(), 1, "{causes:?}");
    assert_eq!(causes[0].reason, "FieldManagerConflict");
    assert_eq!(causes[0].field, ".data.x");
    let forced = api
        .patch("a", &PatchParams::apply("two").force(), &body("2"))
        .await
        .unwrap();
    assert_eq!(forced.data.unwrap()["x"], "2");
}

#[tokio::test(start_paused = true)]
async fn status_subresource_reads_and_writes_only_status() {
    let cluster = cluster();
    let client = admin(&cluster);
    let deploys: Api<k8s_openapi::api::apps::v1::Deployment> = Api::namespaced(client, "default");
    let deploy = serde_json::from_value(json!({
        "metadata": {"name": "d"},
        "spec": {"selector": {"matchLabels": {"app": "d"}}, "template": {"metadata": {"labels": {"app": "d"}}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}},
    }))
    .unwrap();
    deploys.create(&PostParams::default(), &deploy).await.unwrap();
    let patched = deploys
        .patch_status(
            "d",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"readyReplicas": 1}, "spec": {"replicas": 5}})),
        )
        .await
        .unwrap();
    assert_eq!(patched.status.unwrap().ready_replicas, Some(1));
    assert_ne!(patched.spec.unwrap().replicas, Some(5));
    let status = deploys.get_status("d").await.unwrap();
    assert_eq!(status.status.unwrap().ready_replicas, Some(1));
}

#[tokio::test(start_paused = true)]
async fn watch_streams_events_then_bookmarks() {
    let cluster = FakeCluster::builder("http")
        .bookmark_interval(Duration::from_secs(30))
        .build();
    cluster.add_token(ADMIN_TOKEN, UserInfo::admin());
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut events = api.watch(&WatchParams::default(), &rv).await.unwrap().boxed();
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.metadata.name.as_deref(), Some("a")),
        other => panic!("expected ADDED, got {other:?}"),
    }
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Bookmark(b)) => {
            assert_eq!(b.metadata.resource_version, cluster.resource_version().to_string())
        }
        other => panic!("expected BOOKMARK, got {other:?}"),
    }
}

/// A WatchList (client-go's reflector, since v0.35 by default) from a known resourceVersion, as
/// it is sent after every watch error: the current state as ADDED events, then the bookmark
/// annotated `k8s.io/initial-events-end`; without resourceVersionMatch=NotOlderThan, 422.
#[tokio::test(start_paused = true)]
async fn watch_list_from_a_known_version_streams_the_state_then_the_end_bookmark() {
    let cluster = cluster();
    let client = admin(&cluster);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap();
    let rv = api
        .list(&ListParams::default())
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    api.create(&PostParams::default(), &configmap("b", json!({})))
        .await
        .unwrap();
    for from in ["", rv.as_str()] {
        let uri = format!(
            "/api/v1/namespaces/default/configmaps?watch=true&sendInitialEvents=true&resourceVersionMatch=NotOlderThan&allowWatchBookmarks=true&timeoutSeconds=1&resourceVersion={from}"
        );
        let response = raw(&client, "GET", &uri, None).await;
        assert_eq!(response.status(), 200, "from {from:?}");
        let events: Vec<Value> = response
            .body()
            .split(|b| *b == b'\n')
            .filter(|line| !line.is_empty())
            .map(|line| serde_json::from_slice(line).unwrap())
            .collect();
        let seen: Vec<String> = events
            .iter()
            .map(|e| {
                format!(
                    "{} {}",
                    e["type"].as_str().unwrap(),
                    e["object"]["metadata"]["name"].as_str().unwrap_or("")
                )
            })
            .collect();
        assert_eq!(
            seen[..3],
            ["ADDED a", "ADDED b", "BOOKMARK "],
            "from {from:?}: {seen:?}"
        );
        assert_eq!(
            events[2]["object"]["metadata"]["annotations"]["k8s.io/initial-events-end"], "true",
            "from {from:?}"
        );
        assert_eq!(
            events[2]["object"]["metadata"]["resourceVersion"],
            cluster.resource_version().to_string()
        );
    }
    for refused in [
        format!("watch=true&sendInitialEvents=true&resourceVersion={rv}"),
        format!("watch=true&resourceVersionMatch=NotOlderThan&resourceVersion={rv}"),
    ] {
        let response = raw(
            &client,
            "GET",
            &format!("/api/v1/namespaces/default/configmaps?{refused}"),
            None,
        )
        .await;
        assert_eq!(response.status(), 422, "{refused}");
        assert_eq!(json_of(&response)["reason"], "Invalid", "{refused}");
    }
}

#[tokio::test(start_paused = true)]
async fn watches_end_when_their_timeout_passes() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    let mut events = api
        .watch(&WatchParams::default().timeout(5), "0")
        .await
        .unwrap()
        .boxed();
    let end = tokio::time::timeout(Duration::from_secs(60), events.try_next())
        .await
        .expect("the watch must end at its timeout");
    assert!(end.unwrap().is_none());
}

#[tokio::test(start_paused = true)]
async fn a_compacted_resource_version_is_an_error_event_with_410() {
    let cluster = cluster();
    let api: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    let old = api
        .create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    api.create(&PostParams::default(), &configmap("b", json!({})))
        .await
        .unwrap();
    cluster.compact();
    let mut events = api.watch(&WatchParams::default(), &old).await.unwrap().boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => {
            assert_eq!(status.code, 410);
            assert_eq!(status.reason, "Expired");
        }
        other => panic!("expected ERROR 410, got {other:?}"),
    }
    assert!(
        events.try_next().await.unwrap().is_none(),
        "the stream ends after the error"
    );
}

/// History is kept per resource, as kube-apiserver's watch cache is: another resource's churn
/// beyond the history limit never makes a quiet resource's watch 410, while the churning
/// resource's own old versions do go.
#[tokio::test]
async fn another_resources_churn_never_ages_out_a_quiet_resources_history() {
    let cluster = FakeCluster::builder("history")
        .seed(3)
        .root_ca_publisher(false)
        .history_limit(10)
        .build();
    cluster.add_token(ADMIN_TOKEN, UserInfo::admin());
    let configmaps: Api<ConfigMap> = Api::namespaced(admin(&cluster), "default");
    let secrets: Api<Secret> = Api::namespaced(admin(&cluster), "default");
    let quiet = configmaps
        .create(&PostParams::default(), &configmap("quiet", json!({})))
        .await
        .unwrap()
        .metadata
        .resource_version
        .unwrap();
    let mut first_secret = None;
    for i in 0..30 {
        let secret: Secret = serde_json::from_value(json!({"metadata": {"name": format!("s{i}")}})).unwrap();
        let created = secrets.create(&PostParams::default(), &secret).await.unwrap();
        first_secret.get_or_insert(created.metadata.resource_version.unwrap());
    }
    configmaps
        .create(&PostParams::default(), &configmap("later", json!({})))
        .await
        .unwrap();

    let mut events = configmaps.watch(&WatchParams::default(), &quiet).await.unwrap().boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Added(cm)) => assert_eq!(cm.metadata.name.as_deref(), Some("later")),
        other => panic!("the quiet resource's watch resumes with its next event, got {other:?}"),
    }
    let first_secret = first_secret.expect("a Secret was created");
    let mut events = secrets
        .watch(&WatchParams::default(), &first_secret)
        .await
        .unwrap()
        .boxed();
    match events.try_next().await.unwrap() {
        Some(WatchEvent::Error(status)) => assert_eq!(status.code, 410),
        other => panic!("30 Secrets overrun a history of 10: expected ERROR 410, got {other:?}"),
    }
}

type WatcherStream = futures::stream::BoxStream<'static, watcher::Result<watcher::Event<ConfigMap>>>;

async fn next(events: &mut WatcherStream) -> watcher::Result<Option<watcher::Event<ConfigMap>>> {
    tokio::time::timeout(Duration::from_secs(600), events.try_next())
        .await
        .expect("watcher stalled")
}

#[tokio::test(start_paused = true)]
async fn kube_runtime_watcher_relists_after_410() {
    let cluster = cluster();
    let client = admin(&cluster);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "w");
    let ns: k8s_openapi::api::core::v1::Namespace = serde_json::from_value(json!({"metadata": {"name": "w"}})).unwrap();
    Api::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
    let mut events: WatcherStream = watcher(api.clone(), watcher::Config::default()).boxed();
    assert!(matches!(next(&mut events).await.unwrap(), Some(watcher::Event::Init)));
    assert!(matches!(
        next(&mut events).await.unwrap(),
        Some(watcher::Event::InitDone)
    ));
    api.create(&PostParams::default(), &configmap("a", json!({})))
        .await
        .unwrap();
    assert!(matches!(
        next(&mut events).await.unwrap(),
        Some(watcher::Event::Apply(_))
    ));
    // A write elsewhere moves the history past what the watcher has seen; compacting and
    // dropping watches makes its resume point too old.
    Api::<ConfigMap>::namespaced(client, "default")
        .create(&PostParams::default(), &configmap("elsewhere", json!({})))
        .await
        .unwrap();
    cluster.compact();
    cluster.drop_watches();
    let mut relisted = Vec::new();
    loop {
        match next(&mut events).await {
            Ok(Some(watcher::Event::Init)) => relisted.clear(),
            Ok(Some(watcher::Event::InitApply(cm))) => relisted.push(cm.metadata.name.unwrap()),
            Ok(Some(watcher::Event::InitDone)) => break,
            Ok(other) => panic!("unexpected {other:?}"),
            // The 410 surfaces once as an error before the watcher relists.
            Err(e) => assert!(
                e.to_string().contains("410") || e.to_string().contains("too old"),
                "{e}"
            ),
        }
    }
    assert_eq!(relisted, ["a"]);
}

#[tokio::test(start_paused = true)]
async fn discovery_runs_legacy_and_aggregated_and_matches_the_core() {
    let cluster = cluster();
    let client = admin(&cluster);
    for discovery in [
        Discovery::new(client.clone()).run().await.unwrap(),
        Discovery::new(client.clone()).run_aggregated().await.unwrap(),
    ] {
        let apps = discovery.get("apps").expect("apps group");
        let (deploy, caps) = apps
            .recommended_resources()
            .into_iter()
            .find(|(r, _)| r.plural == "deployments")
            .unwrap();
        assert_eq!(deploy.kind, "Deployment");
        assert!(caps.subresources.iter().any(|(s, _)| s.plural == "status"));
        assert!(discovery.get("").is_some());
    }
    let mut over_http = KubeClusterClient::new(client).discovery().await.unwrap();
    let mut direct = cluster.admin_client().discovery().await.unwrap();
    for d in [&mut over_http, &mut direct] {
        d.resources
            .sort_by(|a, b| (&a.group, &a.version, &a.plural).cmp(&(&b.group, &b.version, &b.plural)));
    }
    assert_eq!(over_http, direct);
}

#[tokio::test(start_paused = true)]
async fn aggregated_discovery_answers_with_its_content_type() {
    let cluster = cluster();
    let client = admin(&cluster);
    let response = raw(
        &client,
        "GET",
        "/apis",
        Some("application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList,application/json"),
    )
    .await;
    assert_eq!(
        response.headers()["content-type"],
        "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
    );
    assert_eq!(json_of(&response)["kind"], "APIGroupDiscoveryList");
    let legacy = raw(&client, "GET", "/apis", Some("application/json")).await;
    assert_eq!(json_of(&legacy)["kind"], "APIGroupList");
    let version = client.apiserver_version().await.unwrap();
    assert_eq!((version.major.as_str(), version.minor.as_str()), ("1", "35"));
}

fn widget_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "widgets.example.org"},
        "spec": {
            "group": "example.org",
            "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true,
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": {"type": "object", "properties": {"size": {"type": "integer"}}},
                    "status": {"type": "object", "properties": {"conditions": {"type": "array", "items": {
                        "type": "object", "properties": {"type": {"type": "string"}, "status": {"type": "string"}}}}}},
                }}},
                "additionalPrinterColumns": [
                    {"name": "Size", "type": "integer", "jsonPath": ".spec.size"},
                    {"name": "Ready", "type": "string", "jsonPath": ".status.conditions[?(@.type==\"Ready\")].status"},
                    {"name": "Age", "type": "date", "jsonPath": ".metadata.creationTimestamp"},
                ],
            }],
        },
    })
}

/// Creates the Widget CRD and waits until its group-version is discoverable.
async fn install_widgets(client: &Client) {
    let crds: Api<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition> =
        Api::all(client.clone());
    crds.create(&PostParams::default(), &serde_json::from_value(widget_crd()).unwrap())
        .await
        .unwrap();
    let served = async {
        while client.list_api_group_resources("example.org/v1").await.is_err() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(30), served)
        .await
        .expect("the CRD never became served");
}

#[tokio::test(start_paused = true)]
async fn tables_print_builtin_columns_with_ages_from_the_cluster_clock() {
    let cluster = cluster();
    let client = admin(&cluster);
    let api: Api<ConfigMap> = Api::namespaced(client.clone(), "default");
    api.create(&PostParams::default(), &configmap("a", json!({"x": "1", "y": "2"})))
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(185)).await;
    let table_accept = "application/json;as=Table;v=v1;g=meta.k8s.io,application/json;as=Table;v=v1beta1;g=meta.k8s.io,application/json";
    let response = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        Some(table_accept),
    )
    .await;
    assert_eq!(response.status(), 200);
    let table = json_of(&response);
    assert_eq!(table["kind"], "Table");
    assert_eq!(table["apiVersion"], "meta.k8s.io/v1");
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Data", "Age"]);
    assert_eq!(table["rows"][0]["cells"], json!(["a", 2, "3m5s"]));
    assert_eq!(table["rows"][0]["object"]["kind"], "PartialObjectMetadata");
    assert_eq!(table["rows"][0]["object"]["metadata"]["name"], "a");

    let single = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps/a?includeObject=Object",
        Some(table_accept),
    )
    .await;
    let single = json_of(&single);
    assert_eq!(single["rows"].as_array().unwrap().len(), 1);
    assert_eq!(single["rows"][0]["object"]["kind"], "ConfigMap");
    assert_eq!(single["rows"][0]["object"]["data"]["x"], "1");

    let namespaces = json_of(&raw(&client, "GET", "/api/v1/namespaces", Some(table_accept)).await);
    let default = namespaces["rows"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["cells"][0] == "default")
        .unwrap();
    assert_eq!(default["cells"][1], "Active");
}

#[tokio::test(start_paused = true)]
async fn tables_evaluate_crd_printer_columns() {
    let cluster = cluster();
    let client = admin(&cluster);
    install_widgets(&client).await;
    let widgets: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        "default",
        &ApiResource {
            group: "example.org".into(),
            version: "v1".into(),
            api_version: "example.org/v1".into(),
            kind: "Widget".into(),
            plural: "widgets".into(),
        },
    );
    let widget = serde_json::from_value(json!({
        "apiVersion": "example.org/v1", "kind": "Widget", "metadata": {"name": "w1"},
        "spec": {"size": 3},
        "status": {"conditions": [{"type": "Synced", "status": "False"}, {"type": "Ready", "status": "True"}]},
    }))
    .unwrap();
    widgets.create(&PostParams::default(), &widget).await.unwrap();
    tokio::time::advance(Duration::from_secs(600)).await;
    let table = json_of(
        &raw(
            &client,
            "GET",
            "/apis/example.org/v1/namespaces/default/widgets?includeObject=None",
            Some("application/json;as=Table;v=v1;g=meta.k8s.io"),
        )
        .await,
    );
    let names: Vec<&str> = table["columnDefinitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["Name", "Size", "Ready", "Age"]);
    assert_eq!(table["rows"][0]["cells"], json!(["w1", 3, "True", "10m"]));
    assert!(table["rows"][0].get("object").is_none());
}

#[tokio::test(start_paused = true)]
async fn unknown_or_missing_tokens_are_401_and_rbac_refusals_403() {
    let cluster = cluster();
    for token in [Some("nope"), None] {
        let api: Api<ConfigMap> = Api::namespaced(client_with(&cluster, token), "default");
        assert_eq!(api_code(api.list(&ListParams::default()).await.unwrap_err()), 401);
    }
    let anonymous = client_with(&cluster, None);
    assert_eq!(anonymous.apiserver_version().await.unwrap().minor, "35");

    let bob: Api<Secret> = Api::namespaced(client_with(&cluster, Some(BOB_TOKEN)), "default");
    let err = bob.list(&ListParams::default()).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("not an API error")
    };
    assert_eq!(status.code, 403);
    assert!(
        status.message.contains("User \"bob\" cannot list resource \"secrets\""),
        "{}",
        status.message
    );
    // Discovery is open to every authenticated user (system:discovery).
    Discovery::new(client_with(&cluster, Some(BOB_TOKEN)))
        .run_aggregated()
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn injected_429s_carry_retry_after() {
    let cluster = cluster();
    cluster.inject_error(
        ErrorRule::new(
            Some("list"),
            Some("configmaps"),
            InjectedError::TooManyRequests { retry_after_seconds: 3 },
        )
        .times(2),
    );
    let client = admin(&cluster);
    let response = raw(&client, "GET", "/api/v1/namespaces/default/configmaps", None).await;
    assert_eq!(response.status(), 429);
    assert_eq!(response.headers()["retry-after"], "3");
    let err = KubeClusterClient::new(client)
        .list(&cm_resource(), Some("default"), &ListParams::default())
        .await
        .unwrap_err();
    assert!(
        matches!(
            err,
            Error::TooManyRequests {
                retry_after_seconds: Some(3),
                ..
            }
        ),
        "{err:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn service_account_tokens_from_the_token_subresource_authenticate() {
    let cluster = cluster();
    let client = admin(&cluster);
    let sas: Api<ServiceAccount> = Api::namespaced(client.clone(), "default");
    sas.create(
        &PostParams::default(),
        &serde_json::from_value(json!({"metadata": {"name": "robot"}})).unwrap(),
    )
    .await
    .unwrap();
    let seam = KubeClusterClient::new(client);
    let answer = seam
        .create_subresource(
            &ApiResource::erase::<ServiceAccount>(&()),
            Some("default"),
            "robot",
            "token",
            &json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 600}}),
        )
        .await
        .unwrap();
    let token = answer["status"]["token"].as_str().unwrap();
    let robot: Api<ConfigMap> = Api::namespaced(client_with(&cluster, Some(token)), "default");
    // Authenticated as the ServiceAccount, which RBAC grants nothing: 403, not 401.
    assert_eq!(api_code(robot.list(&ListParams::default()).await.unwrap_err()), 403);
}

#[tokio::test(start_paused = true)]
async fn unknown_paths_and_methods_answer_kube_statuses() {
    let cluster = cluster();
    let client = admin(&cluster);
    let missing = raw(&client, "GET", "/apis/nope.io/v1/things", None).await;
    assert_eq!(missing.status(), 404);
    assert_eq!(json_of(&missing)["reason"], "NotFound");
    let wrong = raw(&client, "POST", "/api/v1/namespaces/default/configmaps/a", None).await;
    assert_eq!(wrong.status(), 405);
    // Built-in kinds are answered in protobuf; a Table in protobuf is not served (as upstream).
    let protobuf_only = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf"),
    )
    .await;
    assert_eq!(protobuf_only.status(), 200);
    assert_eq!(
        protobuf_only.headers()[http::header::CONTENT_TYPE],
        "application/vnd.kubernetes.protobuf"
    );
    let protobuf_table = raw(
        &client,
        "GET",
        "/api/v1/namespaces/default/configmaps",
        Some("application/vnd.kubernetes.protobuf;as=Table;v=v1;g=meta.k8s.io"),
    )
    .await;
    assert_eq!(protobuf_table.status(), 406);
    let obj = json_of(&raw(&client, "GET", "/api/v1/namespaces/default/configmaps/zzz", None).await);
    assert_eq!(obj["details"], json!({"name": "zzz", "kind": "configmaps"}));
}

#[tokio::test(start_paused = true)]
async fn openapi_documents_are_served() {
    let cluster = cluster();
    let client = admin(&cluster);
    let index = json_of(&raw(&client, "GET", "/openapi/v3", None).await);
    let apps = index["paths"]["apis/apps/v1"]["serverRelativeURL"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(apps.starts_with("/openapi/v3/apis/apps/v1?hash="));
    let doc = json_of(&raw(&client, "GET", &apps, None).await);
    assert!(doc["components"]["schemas"]["io.k8s.api.apps.v1.Deployment"].is_object());
    let core = json_of(&raw(&client, "GET", "/openapi/v3/api/v1", None).await);
    assert!(core["components"]["schemas"]["io.k8s.api.core.v1.ConfigMap"].is_object());

    // Asked for in the form client-go sends, answered in the form a real server does.
    let proto = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf";
    let v2 = raw(&client, "GET", "/openapi/v2", Some(proto)).await;
    assert_eq!(v2.status(), 200);
    assert_eq!(
        v2.headers()["content-type"],
        "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
    );
    let v2 = json_of(&raw(&client, "GET", "/openapi/v2", Some("application/json")).await);
    assert_eq!(v2["swagger"], "2.0");
    assert!(v2["definitions"]["io.k8s.api.core.v1.ConfigMap"].is_object());
}
