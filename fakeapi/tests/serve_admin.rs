//! The admin API (`/fakeapi/v1/...`) through `tower::ServiceExt::oneshot`: no sockets.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use fakeapi::serve::{Token, admin_router};
use fakeapi::{FakeCluster, UserInfo};
use futures::StreamExt;
use http::{Method, Request, StatusCode};
use kbind_cluster::{
    ApiResource, ClusterClient, DeleteParams, DynamicObject, Error, ListParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::{Value, json};
use tower::ServiceExt;

const ADMIN: &str = "admin-secret";

fn configmaps() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

fn setup() -> (FakeCluster, Router) {
    let cluster = FakeCluster::builder("admin-test").seed(3).build();
    let router = admin_router(cluster.clone(), Token::new(ADMIN).unwrap());
    (cluster, router)
}

async fn call(
    router: &Router,
    method: Method,
    path: &str,
    token: Option<&str>,
    body: Option<Value>,
) -> (StatusCode, Value) {
    let mut request = Request::builder().method(method).uri(path);
    if let Some(token) = token {
        request = request.header("authorization", format!("Bearer {token}"));
    }
    let body = body.map_or_else(Body::empty, |b| Body::from(b.to_string()));
    let response = router.clone().oneshot(request.body(body).unwrap()).await.unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let value = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes).unwrap()
    };
    (status, value)
}

async fn admin(router: &Router, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
    call(router, method, path, Some(ADMIN), body).await
}

async fn create_configmap(cluster: &FakeCluster, name: &str) {
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})).unwrap();
    cluster
        .admin_client()
        .create(&configmaps(), Some("default"), &obj, &PostParams::default())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn admin_api_refuses_missing_unknown_and_non_admin_tokens() {
    let (cluster, router) = setup();
    cluster.add_token(
        "alice-token",
        UserInfo {
            name: "alice".into(),
            groups: vec!["system:masters".into()],
        },
    );

    let (status, body) = call(&router, Method::POST, "/fakeapi/v1/partition", None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "Unauthorized");
    let (status, _) = call(&router, Method::POST, "/fakeapi/v1/partition", Some("guess"), None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    let (status, body) = call(
        &router,
        Method::POST,
        "/fakeapi/v1/partition",
        Some("alice-token"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["kind"], "Status");
    assert_eq!(
        body["message"],
        "forbidden: User \"alice\" cannot post path \"/fakeapi/v1/partition\""
    );
    assert!(!cluster.is_partitioned(), "a refused request must not act");
}

#[tokio::test(start_paused = true)]
async fn partition_fails_cluster_requests_and_heal_restores_them() {
    let (cluster, router) = setup();
    let client = cluster.admin_client();

    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/partition", None).await.0,
        StatusCode::NO_CONTENT
    );
    let err = client
        .list(&configmaps(), Some("default"), &ListParams::default())
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Transport(_)), "{err:?}");

    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/heal", None).await.0,
        StatusCode::NO_CONTENT
    );
    client
        .list(&configmaps(), Some("default"), &ListParams::default())
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn injected_errors_hit_only_as_many_requests_as_asked() {
    let (cluster, router) = setup();
    create_configmap(&cluster, "a").await;
    let client = cluster.admin_client();
    let rule = json!({"verb": "get", "resource": "configmaps", "code": 429, "retryAfterSeconds": 7, "times": 2});
    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/errors", Some(rule)).await.0,
        StatusCode::NO_CONTENT
    );

    // Other verbs are untouched.
    client
        .list(&configmaps(), Some("default"), &ListParams::default())
        .await
        .unwrap();
    for _ in 0..2 {
        let err = client.get(&configmaps(), Some("default"), "a").await.unwrap_err();
        assert!(
            matches!(
                err,
                Error::TooManyRequests {
                    retry_after_seconds: Some(7),
                    ..
                }
            ),
            "{err:?}"
        );
    }
    client.get(&configmaps(), Some("default"), "a").await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn deleting_errors_clears_rules_without_a_limit() {
    let (cluster, router) = setup();
    let client = cluster.admin_client();
    for code in [500, 403] {
        let rule = json!({"verb": "list", "code": code});
        assert_eq!(
            admin(&router, Method::POST, "/fakeapi/v1/errors", Some(rule)).await.0,
            StatusCode::NO_CONTENT
        );
    }
    // First match wins; the rule stays until cleared.
    for _ in 0..3 {
        let err = client
            .list(&configmaps(), None, &ListParams::default())
            .await
            .unwrap_err();
        assert!(matches!(err, Error::Server { code: 500, .. }), "{err:?}");
    }
    assert_eq!(
        admin(&router, Method::DELETE, "/fakeapi/v1/errors", None).await.0,
        StatusCode::NO_CONTENT
    );
    client.list(&configmaps(), None, &ListParams::default()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn malformed_error_rules_are_bad_requests_and_install_nothing() {
    let (cluster, router) = setup();
    let bad = [
        json!({"code": 418}),
        json!({"code": 500, "verb": "GET"}),
        json!({"code": 500, "times": 0}),
        json!({"code": 500, "retryAfterSeconds": 3}),
        json!({"code": 500, "resource": ""}),
        json!({"code": 500, "retry_after_seconds": 3}),
        json!({"verb": "get"}),
    ];
    for body in bad {
        let (status, answer) = admin(&router, Method::POST, "/fakeapi/v1/errors", Some(body.clone())).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
        assert_eq!(answer["reason"], "BadRequest", "{body}");
    }
    assert!(fakeapi::cluster::faults_of(&cluster).errors.is_empty());
}

#[tokio::test(start_paused = true)]
async fn users_added_at_run_time_authenticate_but_cannot_administer() {
    let (cluster, router) = setup();
    let user = json!({"name": "bob", "token": "bob-token", "groups": ["dev"]});
    let (status, body) = admin(&router, Method::POST, "/fakeapi/v1/users", Some(user.clone())).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body, json!({"name": "bob", "groups": ["dev", "system:authenticated"]}));
    assert_eq!(
        cluster.authenticate("bob-token"),
        Some(UserInfo {
            name: "bob".into(),
            groups: vec!["dev".into(), "system:authenticated".into()]
        })
    );

    let (status, _) = call(&router, Method::GET, "/fakeapi/v1/identity", Some("bob-token"), None).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
}

#[tokio::test(start_paused = true)]
async fn a_token_already_in_use_cannot_be_given_to_another_user() {
    let (cluster, router) = setup();
    let first = json!({"name": "bob", "token": "shared"});
    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/users", Some(first)).await.0,
        StatusCode::CREATED
    );
    let again = json!({"name": "mallory", "token": "shared"});
    let (status, body) = admin(&router, Method::POST, "/fakeapi/v1/users", Some(again)).await;
    assert_eq!(status, StatusCode::CONFLICT);
    assert_eq!(body["reason"], "AlreadyExists");
    let takeover = json!({"name": "mallory", "token": ADMIN});
    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/users", Some(takeover))
            .await
            .0,
        StatusCode::CONFLICT
    );
    let bad_name = json!({"name": "../x", "token": "t2"});
    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/users", Some(bad_name))
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(cluster.authenticate("shared").map(|u| u.name), Some("bob".into()));
}

#[tokio::test(start_paused = true)]
async fn replace_answers_the_new_identity() {
    let (cluster, router) = setup();
    let (status, before) = admin(&router, Method::GET, "/fakeapi/v1/identity", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(before, json!({"name": "admin-test", "uid": cluster.identity_uid()}));

    let (status, after) = admin(&router, Method::POST, "/fakeapi/v1/replace", None).await;
    assert_eq!(status, StatusCode::OK);
    assert_ne!(after["uid"], before["uid"]);
    assert_eq!(after["uid"], cluster.identity_uid());
    assert_eq!(admin(&router, Method::GET, "/fakeapi/v1/identity", None).await.1, after);
}

#[tokio::test(start_paused = true)]
async fn writes_lists_the_write_log() {
    let (cluster, router) = setup();
    create_configmap(&cluster, "logged").await;
    let (status, writes) = admin(&router, Method::GET, "/fakeapi/v1/writes", None).await;
    assert_eq!(status, StatusCode::OK);
    let writes = writes.as_array().unwrap();
    assert_eq!(writes.len(), cluster.write_log().len());
    let last = writes.last().unwrap();
    assert_eq!(last["verb"], "create");
    assert_eq!(last["name"], "logged");
    assert_eq!(last["namespace"], "default");
    assert_eq!(last["rv"], cluster.resource_version());
}

#[tokio::test(start_paused = true)]
async fn latency_is_set_and_removed() {
    let (cluster, router) = setup();
    let (status, _) = admin(&router, Method::PUT, "/fakeapi/v1/latency", Some(json!({"ms": 250}))).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert_eq!(
        fakeapi::cluster::faults_of(&cluster).latency,
        Some(Duration::from_millis(250))
    );

    let started = tokio::time::Instant::now();
    cluster
        .admin_client()
        .list(&configmaps(), None, &ListParams::default())
        .await
        .unwrap();
    assert!(started.elapsed() >= Duration::from_millis(250));

    admin(&router, Method::PUT, "/fakeapi/v1/latency", Some(json!({"ms": null}))).await;
    assert_eq!(fakeapi::cluster::faults_of(&cluster).latency, None);
    let (status, _) = admin(&router, Method::PUT, "/fakeapi/v1/latency", Some(json!({"seconds": 1}))).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(start_paused = true)]
async fn drop_watches_ends_open_watches() {
    let (cluster, router) = setup();
    let client = cluster.admin_client();
    let rv = cluster.resource_version().to_string();
    let mut watch = client
        .watch(&configmaps(), None, &WatchParams::default(), &rv)
        .await
        .unwrap();

    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/drop-watches", None).await.0,
        StatusCode::NO_CONTENT
    );
    let next = tokio::time::timeout(Duration::from_secs(30), watch.next()).await;
    assert!(matches!(next, Ok(None)), "the watch should have ended: {next:?}");
}

#[tokio::test(start_paused = true)]
async fn compact_makes_old_resource_versions_gone() {
    let (cluster, router) = setup();
    let old = cluster.resource_version().to_string();
    create_configmap(&cluster, "after").await;
    assert_eq!(
        admin(&router, Method::POST, "/fakeapi/v1/compact", None).await.0,
        StatusCode::NO_CONTENT
    );

    let client = cluster.admin_client();
    let gone = match client.watch(&configmaps(), None, &WatchParams::default(), &old).await {
        Err(err) => matches!(err, Error::Gone { .. }),
        Ok(mut watch) => match tokio::time::timeout(Duration::from_secs(30), watch.next()).await {
            Ok(Some(Ok(WatchEvent::Error(e)))) => e.code == 410,
            Ok(Some(Err(Error::Gone { .. }))) => true,
            other => panic!("expected 410 Gone, got {other:?}"),
        },
    };
    assert!(gone);
}

#[tokio::test(start_paused = true)]
async fn garbage_collector_can_be_switched_off_and_on() {
    let (cluster, router) = setup();
    let client = cluster.admin_client();
    let (status, _) = admin(
        &router,
        Method::PUT,
        "/fakeapi/v1/garbage-collector",
        Some(json!({"enabled": false})),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);

    create_configmap(&cluster, "owner").await;
    let owner = client.get(&configmaps(), Some("default"), "owner").await.unwrap();
    let dependent: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": "dependent", "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid,
        }]},
    }))
    .unwrap();
    client
        .create(&configmaps(), Some("default"), &dependent, &PostParams::default())
        .await
        .unwrap();
    client
        .delete(&configmaps(), Some("default"), "owner", &DeleteParams::default())
        .await
        .unwrap();

    // With the collector off, the orphan survives however long we wait.
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert!(client.get(&configmaps(), Some("default"), "dependent").await.is_ok());

    admin(
        &router,
        Method::PUT,
        "/fakeapi/v1/garbage-collector",
        Some(json!({"enabled": true})),
    )
    .await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while client.get(&configmaps(), Some("default"), "dependent").await.is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the collector never removed the dependent"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(start_paused = true)]
async fn wrong_methods_are_refused() {
    let (cluster, router) = setup();
    let (status, _) = admin(&router, Method::GET, "/fakeapi/v1/partition", None).await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED);
    assert!(!cluster.is_partitioned());
}
