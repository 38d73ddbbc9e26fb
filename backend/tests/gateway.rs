//! The gateway in process: its router over a fakeapi provider, a test authenticator, a test
//! issuer and a Grant controller double (tests/gateway_support). Bind → pickup → bundle, replay
//! and expiry, every bad input with nothing half-created, CSRF, rate limits, and pickup ids kept
//! out of logs and metrics.

mod gateway_support;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use gateway_support::world::*;
use gateway_support::*;
use http::{Method, Request, StatusCode};
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kbind_api::Grant;
use kbind_api::service::{BindResponse, Catalog, GrantList, ProviderInfo, WhoAmI};
use kbind_backend::gateway::Rate;
use kbind_cluster::{Clock, ClusterClientExt, TokioClock};
use kube::api::ObjectMeta;
use parking_lot::Mutex;
use serde_json::{Value, json};

#[tokio::test(start_paused = true)]
async fn bind_then_pickup_delivers_the_bundle_once() {
    let world = world().await;
    let reply = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let bound: BindResponse = reply.json();
    let name = world.grant_name("token:alice", "widgets", UID).await;
    assert_eq!(bound.grant, name);
    assert!(
        bound
            .pickup_url
            .starts_with(&format!("https://kbind.example.org/api/v1/pickup/{name}."))
    );
    assert_eq!(bound.expires_at, "2026-01-01T00:05:00Z");

    // Only the hash is stored.
    let grant: Grant = world.admin.get_typed(None, &name).await.unwrap();
    let secret = bound.pickup_url.rsplit('.').next().unwrap().to_string();
    let stored = serde_json::to_string(&grant).unwrap();
    assert!(!stored.contains(&secret), "the pickup secret is stored: {stored}");
    let pending = grant.status.unwrap().pickup.unwrap();
    assert!(pending.hash.starts_with("sha256:") && pending.claimed_at.is_none());

    let path = pickup_path(&bound.pickup_url);
    let first = pickup(&world.app, &path, None).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.text());
    assert_eq!(first.headers["content-type"], "application/yaml");
    assert_eq!(first.headers["cache-control"], "no-store");
    insta::assert_snapshot!("widgets_bundle_yaml", first.text());

    let again = pickup(&world.app, &path, None).await;
    assert_eq!(again.status, StatusCode::GONE);
    assert_eq!(again.error().reason, "PickupGone");
    let grant: Grant = world.admin.get_typed(None, &name).await.unwrap();
    assert!(grant.status.unwrap().pickup.unwrap().claimed_at.is_some());
}

#[tokio::test(start_paused = true)]
async fn replicas_share_nothing_but_the_provider() {
    let world = world().await;
    let other = world.replica();
    let bound: BindResponse = bind(&world.app, "alice-token", widgets_bind()).await.json();
    let path = pickup_path(&bound.pickup_url);
    let reply = pickup(&other, &path, None).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let replay = pickup(&world.app, &path, None).await;
    assert_eq!(replay.status, StatusCode::GONE);
    assert_eq!(replay.error().reason, "PickupGone");
}

#[tokio::test(start_paused = true)]
async fn a_json_accept_gets_a_list_and_a_rebind_replaces_the_earlier_url() {
    let world = world().await;
    let first: BindResponse = bind(&world.app, "alice-token", widgets_bind()).await.json();
    let second = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(second.status, StatusCode::CREATED);
    let second: BindResponse = second.json();
    assert_eq!(first.grant, second.grant);

    let stale = pickup(&world.app, &pickup_path(&first.pickup_url), Some("application/json")).await;
    assert_eq!(stale.status, StatusCode::NOT_FOUND);
    assert_eq!(stale.error().reason, "PickupNotFound");

    let reply = pickup(&world.app, &pickup_path(&second.pickup_url), Some("application/json")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    assert_eq!(reply.headers["content-type"], "application/json");
    let list: Value = reply.json();
    assert_eq!(list["kind"], "List");
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Secret", "Connection", "ClusterBinding", "Binding"]);
    let kubeconfig = list["items"][0]["stringData"]["kubeconfig"].as_str().unwrap();
    assert!(
        kubeconfig.contains("server: https://api.acme.example.org:6443"),
        "{kubeconfig}"
    );
    assert!(
        kubeconfig.contains(&format!("token: token-for-{}", second.grant)),
        "{kubeconfig}"
    );
    assert!(!kubeconfig.contains("insecure"), "{kubeconfig}");
    let parsed = kube::config::Kubeconfig::from_yaml(kubeconfig).unwrap_or_else(|e| panic!("{e}: {kubeconfig}"));
    let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
    assert_eq!(
        cluster.certificate_authority_data.as_deref(),
        Some(base64_of(TEST_CA).as_str())
    );
    assert_eq!(cluster.insecure_skip_tls_verify, None);
}

#[tokio::test(start_paused = true)]
async fn a_cluster_scoped_export_gets_only_a_cluster_binding() {
    let world = world().await;
    let reply = bind(
        &world.app,
        "alice-token",
        json!({"export": "gadgets", "consumerClusterUID": UID}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let bound: BindResponse = reply.json();
    let list: Value = pickup(&world.app, &pickup_path(&bound.pickup_url), Some("application/json"))
        .await
        .json();
    let kinds: Vec<&str> = list["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["Secret", "Connection", "ClusterBinding"]);
    assert!(
        list["items"][1]["metadata"].get("annotations").is_none(),
        "{}",
        list["items"][1]
    );
}

#[tokio::test(start_paused = true)]
async fn an_expired_pickup_is_gone() {
    let world = world().await;
    let bound: BindResponse = bind(&world.app, "alice-token", widgets_bind()).await.json();
    tokio::time::advance(Duration::from_secs(5 * 60)).await;
    let reply = pickup(&world.app, &pickup_path(&bound.pickup_url), None).await;
    assert_eq!(reply.status, StatusCode::GONE);
    assert_eq!(reply.error().reason, "PickupGone");
    assert!(reply.error().message.contains("expired"));
}

#[tokio::test(start_paused = true)]
async fn a_pickup_whose_credential_fails_can_be_retried() {
    let world = world().await;
    let bound: BindResponse = bind(&world.app, "alice-token", widgets_bind()).await.json();
    let path = pickup_path(&bound.pickup_url);
    world
        .issuer
        .fail_credentials
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let failed = pickup(&world.app, &path, None).await;
    assert_eq!(failed.status, StatusCode::BAD_GATEWAY);
    assert_eq!(failed.error().reason, "ProviderError");
    world
        .issuer
        .fail_credentials
        .store(false, std::sync::atomic::Ordering::SeqCst);
    assert_eq!(pickup(&world.app, &path, None).await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn unknown_and_malformed_pickups_are_not_found() {
    let world = world().await;
    for path in [
        "/api/v1/pickup/nothing",
        "/api/v1/pickup/grant-0123456789abcdef0123.secret",
        "/api/v1/pickup/grant-x.se%2Fcret",
    ] {
        let reply = pickup(&world.app, path, None).await;
        assert_eq!(reply.status, StatusCode::NOT_FOUND, "{path}");
        assert_eq!(reply.error().reason, "PickupNotFound");
    }
}

/// (what, request, status, reason, a namespace that must not be claimed for bob).
type BadBind = (
    &'static str,
    Request<Body>,
    StatusCode,
    &'static str,
    Option<&'static str>,
);

#[tokio::test(start_paused = true)]
async fn bad_binds_answer_clear_errors_and_leave_nothing() {
    let world = world().await;
    // alice claims team-a first; another team's namespace exists outside kbind.
    assert_eq!(
        bind(&world.app, "alice-token", widgets_bind()).await.status,
        StatusCode::CREATED
    );
    create(
        world.admin.as_ref(),
        res_of::<Namespace>(),
        None,
        json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "payroll"}}),
    )
    .await;

    let oversized = json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["x".repeat(5000)]});
    let cases: Vec<BadBind> = vec![
        (
            "unknown export",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "nonexistent", "consumerClusterUID": UID})),
            ),
            StatusCode::NOT_FOUND,
            "ExportNotFound",
            None,
        ),
        (
            "export with an API not exported",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "sprockets", "consumerClusterUID": UID, "namespaces": ["bobs"]})),
            ),
            StatusCode::CONFLICT,
            "APINotExported",
            Some("bobs"),
        ),
        (
            "bad token",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("mallory-token"),
                Some(widgets_bind()),
            ),
            StatusCode::UNAUTHORIZED,
            "Unauthenticated",
            None,
        ),
        (
            "no token",
            request(Method::POST, "/api/v1/bind", None, Some(widgets_bind())),
            StatusCode::UNAUTHORIZED,
            "Unauthenticated",
            None,
        ),
        (
            "oversized body",
            request(Method::POST, "/api/v1/bind", Some("bob-token"), Some(oversized)),
            StatusCode::PAYLOAD_TOO_LARGE,
            "PayloadTooLarge",
            None,
        ),
        (
            "malformed JSON",
            Request::builder()
                .method(Method::POST)
                .uri("/api/v1/bind")
                .header("authorization", "Bearer bob-token")
                .header("content-type", "application/json")
                .body(Body::from("{\"export\": \"widgets\","))
                .unwrap(),
            StatusCode::BAD_REQUEST,
            "MalformedRequest",
            None,
        ),
        (
            "consumer UID not a UUID",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "widgets", "consumerClusterUID": "kube-system", "namespaces": ["bobs"]})),
            ),
            StatusCode::BAD_REQUEST,
            "InvalidConsumerClusterUID",
            Some("bobs"),
        ),
        (
            "namespace claimed by another identity",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["bobs", "team-a"]})),
            ),
            StatusCode::CONFLICT,
            "NamespaceNotAvailable",
            Some("bobs"),
        ),
        (
            "namespace kbind did not create",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["payroll"]})),
            ),
            StatusCode::CONFLICT,
            "NamespaceNotAvailable",
            Some("payroll"),
        ),
        (
            "namespaced API without namespaces",
            request(
                Method::POST,
                "/api/v1/bind",
                Some("bob-token"),
                Some(json!({"export": "widgets", "consumerClusterUID": UID})),
            ),
            StatusCode::BAD_REQUEST,
            "NamespacesRequired",
            None,
        ),
    ];
    for (what, req, status, reason, namespace) in cases {
        let reply = send(&world.app, req).await;
        assert_eq!(reply.status, status, "{what}: {}", reply.text());
        assert_eq!(reply.error().reason, reason, "{what}");
        assert_nothing_created(&world, namespace).await;
    }
}

#[tokio::test(start_paused = true)]
async fn an_issuer_refusal_deletes_the_grant_the_bind_created() {
    let world = world().await;
    world
        .controller
        .claimed_elsewhere
        .lock()
        .insert("contested".to_string());
    let reply = bind(
        &world.app,
        "bob-token",
        json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["contested"]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    assert_eq!(reply.error().reason, "NamespaceNotAvailable");
    wait_gone(&world, &world.grant_name("token:bob", "widgets", UID).await).await;
    assert_nothing_created(&world, Some("contested")).await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_bind_tried_again_gets_the_real_reason_not_grant_revoking() {
    let world = world().await;
    world
        .controller
        .claimed_elsewhere
        .lock()
        .insert("contested".to_string());
    let contested = json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["contested"]});
    let name = world.grant_name("token:bob", "widgets", UID).await;
    // The refused bind's Grant is still terminating (a finalizer the issuer has not removed
    // yet) when the user tries again.
    let hold = "test.kbind.io/hold";
    let held: Grant = serde_json::from_value(json!({
        "apiVersion": "iam.kbind.io/v1alpha1", "kind": "Grant",
        "metadata": {"name": name, "finalizers": [hold]},
        "spec": {"identity": {"subject": "token:bob"}, "export": "widgets", "consumerClusterUID": UID,
            "namespaces": ["contested"]},
    }))
    .unwrap();
    world.admin.create_typed(&held).await.unwrap();
    world
        .admin
        .delete(&res_of::<Grant>(), None, &name, &Default::default())
        .await
        .unwrap();
    let release = async {
        // The issuer gets to it a second later.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let patch = json!({"metadata": {"finalizers": null}});
        world
            .admin
            .patch(
                &res_of::<Grant>(),
                None,
                &name,
                &kbind_cluster::Patch::Merge(patch),
                &Default::default(),
            )
            .await
            .unwrap();
    };
    let (reply, ()) = tokio::join!(bind(&world.app, "bob-token", contested.clone()), release);
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    assert_eq!(reply.error().reason, "NamespaceNotAvailable");
    // And straight away once more: the undo of the refusal above does not answer for it.
    let again = bind(&world.app, "bob-token", contested).await;
    assert_eq!(again.error().reason, "NamespaceNotAvailable", "{}", again.text());
    wait_gone(&world, &name).await;
}

#[tokio::test(start_paused = true)]
async fn an_export_with_a_name_longer_than_a_label_value_binds() {
    let world = world().await;
    let long = format!("widgets-{}", "x".repeat(62));
    create(
        world.admin.as_ref(),
        res_of::<kbind_api::Export>(),
        None,
        json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": long},
            "spec": {"title": "Long", "apis": [{"name": "widgets.example.org"}]},
        }),
    )
    .await;
    let reply = bind(
        &world.app,
        "alice-token",
        json!({"export": long, "consumerClusterUID": UID, "namespaces": ["team-a"]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
    let grant: Grant = world
        .admin
        .get_typed(None, &world.grant_name("token:alice", &long, UID).await)
        .await
        .unwrap();
    assert_eq!(grant.spec.export, long);
    let labels = grant.metadata.labels.unwrap_or_default();
    let label = &labels[kbind_api::consts::backend::LABEL_EXPORT];
    assert!(label.len() <= 63 && label.starts_with("sha256-"), "{label}");
    let pickup = pickup(&world.app, &pickup_path(&reply.json::<BindResponse>().pickup_url), None).await;
    assert_eq!(pickup.status, StatusCode::OK, "{}", pickup.text());
}

#[tokio::test(start_paused = true)]
async fn a_refused_rebind_leaves_the_working_grant_as_it_was() {
    let world = world().await;
    assert_eq!(
        bind(&world.app, "alice-token", widgets_bind()).await.status,
        StatusCode::CREATED
    );
    world
        .controller
        .claimed_elsewhere
        .lock()
        .insert("contested".to_string());
    let reply = bind(
        &world.app,
        "alice-token",
        json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": ["team-a", "contested"]}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    assert_eq!(reply.error().reason, "NamespaceNotAvailable");
    let name = world.grant_name("token:alice", "widgets", UID).await;
    let grant: Grant = world.admin.get_typed(None, &name).await.unwrap();
    assert_eq!(grant.spec.namespaces, ["team-a"]);
    assert!(grant.metadata.deletion_timestamp.is_none());
    // The issuer provisions the restored spec again, and the Grant is usable.
    let again = bind(&world.app, "alice-token", widgets_bind()).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.text());
}

#[tokio::test(start_paused = true)]
async fn a_bind_nobody_provisions_times_out_and_leaves_nothing() {
    let mut config = test_config();
    config.bind_timeout = Duration::from_secs(3);
    let world = world_with(config, TestIssuer::default()).await;
    drop(world.controller);
    let reply = bind(
        &world.app,
        "bob-token",
        json!({"export": "gadgets", "consumerClusterUID": UID}),
    )
    .await;
    assert_eq!(reply.status, StatusCode::GATEWAY_TIMEOUT, "{}", reply.text());
    assert_eq!(reply.error().reason, "BindTimeout");
    let grants = grant_names(world.admin.as_ref()).await;
    assert!(grants.is_empty(), "{grants:?}");
}

#[tokio::test(start_paused = true)]
async fn a_provider_the_issuer_cannot_serve_is_reported_and_refused() {
    let world = world_with(
        test_config(),
        TestIssuer {
            refusal: Some("this provider is kcp-like; run an issuer for kcp".into()),
            ..TestIssuer::default()
        },
    )
    .await;
    let info: ProviderInfo = send(&world.app, request(Method::GET, "/api/v1/provider", None, None))
        .await
        .json();
    assert_eq!(info.name, "acme");
    assert_eq!(info.provider_url, "https://api.acme.example.org:6443");
    assert_eq!(info.issuer, "test");
    assert_eq!(info.auth_methods.len(), 1);
    assert_eq!(
        info.unavailable.as_deref(),
        Some("this provider is kcp-like; run an issuer for kcp")
    );
    let reply = bind(&world.app, "bob-token", widgets_bind()).await;
    assert_eq!(reply.status, StatusCode::NOT_IMPLEMENTED);
    assert_eq!(reply.error().reason, "UnsupportedProvider");
    assert_nothing_created(&world, Some("team-a")).await;
}

#[tokio::test(start_paused = true)]
async fn browser_sessions_must_echo_their_csrf_token() {
    let world = world().await;
    let session = |csrf: Option<&str>| {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/bind")
            .header("cookie", "session=bob")
            .header("content-type", "application/json");
        if let Some(csrf) = csrf {
            builder = builder.header(kbind_api::service::CSRF_HEADER, csrf);
        }
        builder
            .body(Body::from(
                json!({"export": "gadgets", "consumerClusterUID": UID}).to_string(),
            ))
            .unwrap()
    };
    for csrf in [None, Some("csrf-alice"), Some("")] {
        let reply = send(&world.app, session(csrf)).await;
        assert_eq!(reply.status, StatusCode::FORBIDDEN, "{csrf:?}");
        assert_eq!(reply.error().reason, "CSRFTokenMismatch");
        assert!(grant_names(world.admin.as_ref()).await.is_empty());
    }
    let whoami: WhoAmI = send(
        &world.app,
        Request::builder()
            .uri("/api/v1/whoami")
            .header("cookie", "session=bob")
            .body(Body::empty())
            .unwrap(),
    )
    .await
    .json();
    assert_eq!(whoami.subject, "token:bob");
    let reply = send(&world.app, session(whoami.csrf_token.as_deref())).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());

    let name = world.grant_name("token:bob", "gadgets", UID).await;
    let revoke = |csrf: Option<&str>| {
        let mut builder = Request::builder()
            .method(Method::DELETE)
            .uri(format!("/api/v1/grants/{name}"))
            .header("cookie", "session=bob");
        if let Some(csrf) = csrf {
            builder = builder.header(kbind_api::service::CSRF_HEADER, csrf);
        }
        builder.body(Body::empty()).unwrap()
    };
    assert_eq!(send(&world.app, revoke(None)).await.status, StatusCode::FORBIDDEN);
    assert_eq!(send(&world.app, revoke(Some("csrf-bob"))).await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_revoke_while_the_issuer_is_off_says_pending_until_it_ran() {
    let world = world().await;
    assert_eq!(
        bind(&world.app, "alice-token", widgets_bind()).await.status,
        StatusCode::CREATED
    );
    let name = world.grant_name("token:alice", "widgets", UID).await;
    let World {
        admin,
        app,
        controller,
        clock,
        ..
    } = world;
    drop(controller);
    let revoke = || {
        request(
            Method::DELETE,
            &format!("/api/v1/grants/{name}"),
            Some("alice-token"),
            None,
        )
    };
    let reply = send(&app, revoke()).await;
    assert_eq!(reply.status, StatusCode::ACCEPTED, "{}", reply.text());
    let answer: Value = reply.json();
    assert_eq!(answer["state"], "pending", "{answer}");
    assert_eq!(answer["revoking"], true, "{answer}");
    let message = answer["message"].as_str().unwrap_or_default();
    assert!(
        message.contains("keeps working") && message.contains("--issuer"),
        "{message}"
    );
    // Asked again while the issuer is still off: still pending, never "revoked".
    let again: Value = send(&app, revoke()).await.json();
    assert_eq!(again["state"], "pending", "{again}");
    // Once the issuer runs, the Grant goes and the credential with it.
    let _controller = spawn_controller(admin.clone(), clock);
    tokio::time::timeout(Duration::from_secs(30), async {
        while grant_names(admin.as_ref()).await.contains(&name) {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .expect("the issuer removes the revoked grant");
    assert_eq!(send(&app, revoke()).await.status, StatusCode::NOT_FOUND);
}

#[tokio::test(start_paused = true)]
async fn grants_list_the_callers_own_with_heartbeat_age_and_revoke_only_those() {
    let world = world().await;
    assert_eq!(
        bind(&world.app, "alice-token", widgets_bind()).await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        bind(
            &world.app,
            "bob-token",
            json!({"export": "gadgets", "consumerClusterUID": OTHER_UID})
        )
        .await
        .status,
        StatusCode::CREATED
    );
    let renewed = TokioClock::fixed().now();
    world
        .admin
        .create_typed(&Lease {
            metadata: ObjectMeta {
                name: Some(format!("consumer-{UID}")),
                namespace: Some("kbind".into()),
                ..ObjectMeta::default()
            },
            spec: Some(LeaseSpec {
                renew_time: Some(MicroTime(renewed)),
                ..LeaseSpec::default()
            }),
        })
        .await
        .unwrap();
    tokio::time::advance(Duration::from_secs(42)).await;

    let list: GrantList = send(
        &world.app,
        request(Method::GET, "/api/v1/grants", Some("alice-token"), None),
    )
    .await
    .json();
    assert_eq!(list.grants.len(), 1, "{list:?}");
    let alices = &list.grants[0];
    assert_eq!(alices.name, world.grant_name("token:alice", "widgets", UID).await);
    assert_eq!(alices.namespaces, ["team-a"]);
    assert!(alices.ready && !alices.revoking);
    assert!(alices.heartbeat_age_seconds.is_some_and(|age| age >= 42), "{alices:?}");

    let bobs = world.grant_name("token:bob", "gadgets", OTHER_UID).await;
    let reply = send(
        &world.app,
        request(
            Method::DELETE,
            &format!("/api/v1/grants/{bobs}"),
            Some("alice-token"),
            None,
        ),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND);
    assert_eq!(reply.error().reason, "GrantNotFound");
    assert!(grant_names(world.admin.as_ref()).await.contains(&bobs));

    let reply = send(
        &world.app,
        request(
            Method::DELETE,
            &format!("/api/v1/grants/{}", alices.name),
            Some("alice-token"),
            None,
        ),
    )
    .await;
    // The issuer (its double) runs: the answer waits for it and says the credential is dead.
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let answer: Value = reply.json();
    assert_eq!(answer["state"], "revoked", "{answer}");
    assert_eq!(answer["name"], alices.name.as_str(), "a GrantView as before: {answer}");
    assert!(
        grant_names(world.admin.as_ref())
            .await
            .iter()
            .all(|n| n != &alices.name)
    );
    let sa: Option<ServiceAccount> = world
        .admin
        .get_typed_opt(Some(GRANTS_NAMESPACE), &alices.name)
        .await
        .unwrap();
    assert!(sa.is_none(), "revocation went through the finalizer");
}

#[tokio::test(start_paused = true)]
async fn the_export_crd_refuses_links_that_are_not_https() {
    let world = world().await;
    let export = |name: &str, field: &str, link: &str| {
        serde_json::from_value::<kbind_api::Export>(json!({
            "apiVersion": "catalog.kbind.io/v1alpha1", "kind": "Export", "metadata": {"name": name},
            "spec": {"title": "Links", "apis": [{"name": "widgets.example.org"}], field: link},
        }))
        .unwrap()
    };
    for (field, link) in [
        ("docs", "javascript:alert(document.cookie)"),
        ("icon", "data:image/svg+xml,<svg onload=alert(1)>"),
        ("docs", "http://docs.example.org"),
    ] {
        let err = world
            .admin
            .create_typed(&export("bad-link", field, link))
            .await
            .expect_err("a non-https link is refused");
        assert!(err.to_string().contains(field), "{field}={link}: {err}");
    }
    world
        .admin
        .create_typed(&export("good-link", "docs", "https://docs.example.org/widgets"))
        .await
        .expect("an https link is accepted");
}

#[tokio::test(start_paused = true)]
async fn the_catalog_shows_every_export_with_its_state() {
    let world = world().await;
    let unauthenticated = send(&world.app, request(Method::GET, "/api/v1/catalog", None, None)).await;
    assert_eq!(unauthenticated.status, StatusCode::UNAUTHORIZED);
    let reply = send(
        &world.app,
        request(Method::GET, "/api/v1/catalog", Some("alice-token"), None),
    )
    .await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let catalog: Catalog = reply.json();
    let names: Vec<&str> = catalog.exports.iter().map(|e| e.name.as_str()).collect();
    assert_eq!(names, ["gadgets", "sprockets", "widgets"]);
    let widgets = &catalog.exports[2];
    assert!(widgets.ready && widgets.namespaced);
    assert!(!catalog.exports[0].namespaced);
    let sprockets = &catalog.exports[1];
    assert!(!sprockets.ready);
    assert!(
        sprockets
            .message
            .as_deref()
            .is_some_and(|m| m.contains("sprockets.example.org"))
    );
    assert_eq!(catalog.collections.len(), 1);
    assert_eq!(catalog.collections[0].exports, ["widgets", "gadgets"]);
}

#[tokio::test]
async fn binds_and_pickups_beyond_the_rate_get_429() {
    let mut config = test_config();
    config.bind_rate = Rate {
        per_minute: 1,
        burst: 2,
    };
    config.pickup_rate = Rate {
        per_minute: 1,
        burst: 3,
    };
    let world = world_with(config, TestIssuer::default()).await;
    let bad = || {
        request(
            Method::POST,
            "/api/v1/bind",
            Some("bob-token"),
            Some(json!({"export": "nonexistent", "consumerClusterUID": UID})),
        )
    };
    for _ in 0..2 {
        assert_eq!(send(&world.app, bad()).await.status, StatusCode::NOT_FOUND);
    }
    let limited = send(&world.app, bad()).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.error().reason, "TooManyRequests");
    assert!(limited.headers.contains_key("retry-after"));
    for _ in 0..3 {
        assert_eq!(
            pickup(&world.app, "/api/v1/pickup/none", None).await.status,
            StatusCode::NOT_FOUND
        );
    }
    let limited = pickup(&world.app, "/api/v1/pickup/none", None).await;
    assert_eq!(limited.status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(limited.error().reason, "TooManyRequests");
    // Other routes are not limited.
    assert_eq!(
        send(&world.app, request(Method::GET, "/healthz", None, None))
            .await
            .status,
        StatusCode::OK
    );
}

/// `request` as if it came from `peer` (what the served gateway's connect-info adds).
fn from_peer(mut request: Request<Body>, peer: &str) -> Request<Body> {
    let peer: std::net::SocketAddr = peer.parse().unwrap();
    request.extensions_mut().insert(axum::extract::ConnectInfo(peer));
    request
}

#[tokio::test(start_paused = true)]
async fn failed_sign_ins_are_throttled_per_credential_and_never_deny_another() {
    let mut config = test_config();
    config.auth_failure_rate = Rate {
        per_minute: 6,
        burst: 3,
    };
    let world = world_with(config, TestIssuer::default()).await;
    let whoami = |token: &str, peer: &str| from_peer(request(Method::GET, "/api/v1/whoami", Some(token), None), peer);
    // Everyone behind one ingress has its address.
    let shared = "192.0.2.10:40000";
    // Right tokens spend nothing.
    for _ in 0..5 {
        assert_eq!(
            send(&world.app, whoami("alice-token", shared)).await.status,
            StatusCode::OK
        );
    }
    for _ in 0..3 {
        let refused = send(&world.app, whoami("guess", shared)).await;
        assert_eq!(refused.status, StatusCode::UNAUTHORIZED);
        assert_eq!(refused.error().reason, "Unauthenticated");
    }
    // Beyond the burst the same credential is refused before it is looked at, and told how
    // long to wait...
    for _ in 0..30 {
        let throttled = send(&world.app, whoami("guess", shared)).await;
        assert_eq!(throttled.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(throttled.error().reason, "TooManyRequests");
        assert_eq!(throttled.headers["retry-after"], "10");
    }
    // ...while every other credential from that address is served: the throttle cannot lock
    // another tenant out of sign-in.
    for token in ["alice-token", "bob-token"] {
        assert_eq!(
            send(&world.app, whoami(token, shared)).await.status,
            StatusCode::OK,
            "{token}"
        );
    }
    let bind = send(
        &world.app,
        from_peer(
            request(Method::POST, "/api/v1/bind", Some("alice-token"), Some(widgets_bind())),
            shared,
        ),
    )
    .await;
    assert_eq!(bind.status, StatusCode::CREATED, "{}", bind.text());
    // A new wrong credential is checked (and refused) like any other: guessing is defeated by
    // the tokens' entropy, not by this throttle.
    let other_guess = send(&world.app, whoami("guess-2", shared)).await;
    assert_eq!(other_guess.status, StatusCode::UNAUTHORIZED);
    // In-process requests without a peer address share one key too, and are not locked out.
    for _ in 0..5 {
        send(&world.app, request(Method::GET, "/api/v1/whoami", Some("nope"), None)).await;
    }
    assert_eq!(
        send(
            &world.app,
            request(Method::GET, "/api/v1/whoami", Some("bob-token"), None)
        )
        .await
        .status,
        StatusCode::OK
    );
    // No credential at all is not a guess: it spends nothing.
    for _ in 0..5 {
        let anonymous = send(
            &world.app,
            from_peer(request(Method::GET, "/api/v1/whoami", None, None), shared),
        )
        .await;
        assert_eq!(anonymous.status, StatusCode::UNAUTHORIZED);
    }
    // One interval later the repeated credential has one attempt back.
    tokio::time::advance(Duration::from_secs(10)).await;
    assert_eq!(
        send(&world.app, whoami("guess", shared)).await.status,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(
        send(&world.app, whoami("guess", shared)).await.status,
        StatusCode::TOO_MANY_REQUESTS
    );
}

#[tokio::test(start_paused = true)]
async fn behind_a_trusted_proxy_the_client_cannot_pick_its_own_rate_limit_key() {
    let mut config = test_config();
    config.pickup_rate = Rate {
        per_minute: 1,
        burst: 2,
    };
    config.trusted_proxies = 1;
    let world = world_with(config, TestIssuer::default()).await;
    let via_proxy = |forwarded_for: String| {
        let mut request = Request::builder()
            .uri("/api/v1/pickup/none")
            .header("x-forwarded-for", forwarded_for)
            .body(Body::empty())
            .unwrap();
        request.extensions_mut().insert(axum::extract::ConnectInfo(
            "10.0.0.1:8443".parse::<std::net::SocketAddr>().unwrap(),
        ));
        request
    };
    // A new made-up first entry each time: the proxy's entry (the last) is what counts.
    let mut statuses = Vec::new();
    for i in 0..4 {
        statuses.push(
            send(&world.app, via_proxy(format!("198.51.100.{i}, 203.0.113.7")))
                .await
                .status,
        );
    }
    assert_eq!(
        statuses,
        [
            StatusCode::NOT_FOUND,
            StatusCode::NOT_FOUND,
            StatusCode::TOO_MANY_REQUESTS,
            StatusCode::TOO_MANY_REQUESTS
        ]
    );
    // Another client behind the same proxy has its own allowance.
    let other = send(&world.app, via_proxy("198.51.100.1, 203.0.113.8".into())).await;
    assert_eq!(other.status, StatusCode::NOT_FOUND);
}

/// Reads until the server closes the connection; the deadline is far beyond any timeout.
async fn read_until_closed(stream: &mut tokio::net::TcpStream, which: &str) -> String {
    use tokio::io::AsyncReadExt as _;
    let mut answer = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(600), stream.read_to_end(&mut answer))
        .await
        .unwrap_or_else(|_| panic!("the server never closed the {which} connection"));
    match read {
        Ok(_) => {}
        // A server that closed with unread bytes pending resets the connection: closed too.
        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {}
        Err(e) => panic!("{which}: {e}"),
    }
    String::from_utf8_lossy(&answer).into_owned()
}

#[tokio::test(start_paused = true)]
async fn a_half_sent_request_is_closed_and_frees_its_connection_slot() {
    use tokio::io::AsyncWriteExt as _;
    let world = world().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = kbind_backend::gateway::ConnectionLimits {
        header_read_timeout: Duration::from_secs(10),
        max_connections: 1,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kbind_backend::gateway::serve(
        listener,
        world.app.clone(),
        limits,
        stop.clone(),
    ));
    // A client that starts a request and never finishes its headers takes the only slot...
    let mut slow = tokio::net::TcpStream::connect(addr).await.unwrap();
    slow.write_all(b"GET /healthz HTTP/1.1\r\nHost: kbind\r\nX-Slow: ")
        .await
        .unwrap();
    // ...so a whole request waits for it, and is answered once the header timeout closed it.
    let mut whole = tokio::net::TcpStream::connect(addr).await.unwrap();
    whole
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: kbind\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut whole, "whole").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    // By then the slow client's connection is gone: finishing its request now gets no answer.
    // (Its write may already fail: the server closed the socket.)
    let _ = slow.write_all(b"x\r\n\r\n").await;
    let slow_answer = read_until_closed(&mut slow, "half-sent").await;
    assert!(!slow_answer.contains("200 OK"), "{slow_answer}");
    stop.cancel();
    server.await.unwrap().unwrap();
}

/// A request body that sends `first` and then nothing, ever (a slowloris body).
fn stalled_body(first: &'static str) -> Body {
    let chunk = futures::stream::once(async move { Ok::<_, std::io::Error>(axum::body::Bytes::from(first)) });
    Body::from_stream(futures::StreamExt::chain(chunk, futures::stream::pending()))
}

#[tokio::test(start_paused = true)]
async fn a_body_that_never_finishes_gets_a_json_408_and_the_connection_closes() {
    let world = world().await;
    let request = Request::builder()
        .method(Method::POST)
        .uri("/api/v1/bind")
        .header("authorization", "Bearer alice-token")
        .header("content-type", "application/json")
        .header("content-length", "1000")
        .body(stalled_body("{\"export\": "))
        .unwrap();
    let reply = send(&world.app, request).await;
    assert_eq!(reply.status, StatusCode::REQUEST_TIMEOUT, "{}", reply.text());
    assert_eq!(reply.error().reason, "RequestTimeout");
    assert_eq!(reply.headers["connection"], "close");
    // A body that arrives in time is unaffected.
    assert_eq!(
        bind(&world.app, "alice-token", widgets_bind()).await.status,
        StatusCode::CREATED
    );
}

#[tokio::test(start_paused = true)]
async fn slow_bodies_on_every_slot_time_out_and_free_them_for_health_checks() {
    use tokio::io::AsyncWriteExt as _;
    let world = world().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let limits = kbind_backend::gateway::ConnectionLimits {
        header_read_timeout: Duration::from_secs(30),
        max_connections: 2,
    };
    let stop = tokio_util::sync::CancellationToken::new();
    let server = tokio::spawn(kbind_backend::gateway::serve(
        listener,
        world.app.clone(),
        limits,
        stop.clone(),
    ));
    // Whole headers, then a body that never ends, on every slot.
    let mut slow = Vec::new();
    for _ in 0..limits.max_connections {
        let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
        stream
            .write_all(
                b"POST /api/v1/bind HTTP/1.1\r\nHost: kbind\r\nAuthorization: Bearer alice-token\r\n\
                  Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"export\": ",
            )
            .await
            .unwrap();
        slow.push(stream);
    }
    let mut health = tokio::net::TcpStream::connect(addr).await.unwrap();
    health
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: kbind\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let answer = read_until_closed(&mut health, "health").await;
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    for (i, stream) in slow.iter_mut().enumerate() {
        let answer = read_until_closed(stream, "slow-body").await;
        assert!(answer.starts_with("HTTP/1.1 408"), "slow client {i}: {answer}");
        assert!(answer.contains("RequestTimeout"), "slow client {i}: {answer}");
    }
    stop.cancel();
    server.await.unwrap().unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_pickup_path_that_is_not_utf8_gets_a_json_error() {
    let world = world().await;
    let reply = pickup(&world.app, "/api/v1/pickup/%FF%FE", None).await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text());
    assert_eq!(reply.error().reason, "PickupNotFound");
    assert_eq!(reply.headers["content-type"], "application/json");
}

#[tokio::test(start_paused = true)]
async fn health_ui_and_unknown_routes() {
    let world = world().await;
    assert_eq!(
        send(&world.app, request(Method::GET, "/healthz", None, None))
            .await
            .status,
        StatusCode::OK
    );
    let ready = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            if send(&world.app, request(Method::GET, "/readyz", None, None))
                .await
                .status
                == StatusCode::OK
            {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
    assert!(ready.is_ok(), "/readyz never answered 200");
    let index = send(&world.app, request(Method::GET, "/", None, None)).await;
    assert_eq!(index.status, StatusCode::OK);
    assert_eq!(index.headers["content-type"], "text/html; charset=utf-8");
    assert!(index.text().contains("<title>kbind</title>"));
    assert_eq!(
        send(&world.app, request(Method::GET, "/grants/mine", None, None))
            .await
            .status,
        StatusCode::OK
    );
    let missing = send(&world.app, request(Method::GET, "/api/v1/nothing", None, None)).await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    assert_eq!(missing.error().reason, "NotFound");
    let post = send(&world.app, request(Method::POST, "/", None, None)).await;
    assert_eq!(post.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(post.error().reason, "MethodNotAllowed");
    let asset = send(&world.app, request(Method::GET, "/missing.js", None, None)).await;
    assert_eq!(asset.status, StatusCode::NOT_FOUND);
    let wrong = send(
        &world.app,
        request(Method::PUT, "/api/v1/bind", Some("alice-token"), None),
    )
    .await;
    assert_eq!(wrong.status, StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(wrong.error().reason, "MethodNotAllowed");
}

/// Requests per second of `n` requests made by `concurrency` workers; `make(i)` builds request `i`.
async fn throughput(
    app: &Router,
    n: usize,
    concurrency: usize,
    expect: StatusCode,
    make: impl Fn(usize) -> Request<Body>,
) -> f64 {
    let requests: Vec<Request<Body>> = (0..n).map(make).collect();
    let queue = Arc::new(Mutex::new(requests.into_iter().enumerate().collect::<Vec<_>>()));
    let started = std::time::Instant::now();
    let workers = (0..concurrency).map(|_| {
        let (app, queue) = (app.clone(), queue.clone());
        tokio::spawn(async move {
            loop {
                let next = queue.lock().pop();
                let Some((i, request)) = next else { break };
                let reply = send(&app, request).await;
                assert_eq!(reply.status, expect, "request {i}: {}", reply.text());
            }
        })
    });
    for worker in futures::future::join_all(workers).await {
        worker.unwrap();
    }
    n as f64 / started.elapsed().as_secs_f64()
}

/// Catalog, bind and pickup requests/s of the router on a fakeapi provider, in process.
/// Reports numbers, asserts none: `cargo test -p kbind-backend --test gateway -- --ignored --nocapture`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement, not a test: run with --ignored --nocapture"]
async fn measure_catalog_bind_and_pickup_throughput() {
    let world = world().await;
    let (n, concurrency) = (400, 16);
    // Warm the catalog caches.
    assert_eq!(
        send(
            &world.app,
            request(Method::GET, "/api/v1/catalog", Some("alice-token"), None)
        )
        .await
        .status,
        StatusCode::OK
    );
    let catalog = throughput(&world.app, n * 5, concurrency, StatusCode::OK, |_| {
        request(Method::GET, "/api/v1/catalog", Some("alice-token"), None)
    })
    .await;
    let uid = |i: usize| format!("00000000-0000-4000-8000-{i:012x}");
    let fresh = throughput(&world.app, n, concurrency, StatusCode::CREATED, |i| {
        request(
            Method::POST,
            "/api/v1/bind",
            Some("alice-token"),
            Some(json!({"export": "gadgets", "consumerClusterUID": uid(i)})),
        )
    })
    .await;
    let urls = Arc::new(Mutex::new(Vec::new()));
    let started = std::time::Instant::now();
    for i in 0..n {
        let bound: BindResponse = bind(
            &world.app,
            "alice-token",
            json!({"export": "gadgets", "consumerClusterUID": uid(i)}),
        )
        .await
        .json();
        urls.lock().push(pickup_path(&bound.pickup_url));
    }
    let rebind = n as f64 / started.elapsed().as_secs_f64();
    let paths = urls.lock().clone();
    let pickups = throughput(&world.app, n, concurrency, StatusCode::OK, |i| {
        Request::builder().uri(paths[i].clone()).body(Body::empty()).unwrap()
    })
    .await;
    println!(
        "gateway throughput (in process, fakeapi provider, {concurrency} concurrent callers, {} build): catalog {catalog:.0}/s, bind of a new Grant {fresh:.0}/s, re-bind of an issued Grant (sequential) {rebind:.0}/s, pickup {pickups:.0}/s",
        if cfg!(debug_assertions) { "debug" } else { "release" }
    );
}

fn base64_of(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// A bind adds its namespaces to the Grant (a live binding of another
/// namespace keeps working), and says truthfully what it did; narrowing is its own call, which
/// never drops the Grant's last namespace.
#[tokio::test(start_paused = true)]
async fn a_bind_adds_namespaces_and_narrowing_is_explicit() {
    let world = world().await;
    let bind_ns = |ns: &str| json!({"export": "widgets", "consumerClusterUID": UID, "namespaces": [ns]});
    let first: BindResponse = {
        let reply = bind(&world.app, "alice-token", bind_ns("team-a")).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
        reply.json()
    };
    assert_eq!(first.outcome, Some(kbind_api::service::BindOutcome::Created));
    let second: BindResponse = {
        let reply = bind(&world.app, "alice-token", bind_ns("team-b")).await;
        assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
        reply.json()
    };
    assert_eq!(second.grant, first.grant);
    assert_eq!(second.outcome, Some(kbind_api::service::BindOutcome::Updated));
    assert_eq!(
        second.namespaces.as_deref(),
        Some(&["team-a".to_string(), "team-b".to_string()][..])
    );
    let grant: Grant = world.admin.get_typed(None, &first.grant).await.unwrap();
    assert_eq!(grant.spec.namespaces, ["team-a", "team-b"], "team-a stays covered");
    let again: BindResponse = bind(&world.app, "alice-token", bind_ns("team-b")).await.json();
    assert_eq!(again.outcome, Some(kbind_api::service::BindOutcome::Unchanged));

    let drop = |ns: &str| {
        request(
            Method::DELETE,
            &format!("/api/v1/grants/{}/namespaces/{ns}", first.grant),
            Some("alice-token"),
            None,
        )
    };
    let reply = send(&world.app, drop("team-a")).await;
    assert_eq!(reply.status, StatusCode::OK, "{}", reply.text());
    let grant: Grant = world.admin.get_typed(None, &first.grant).await.unwrap();
    assert_eq!(grant.spec.namespaces, ["team-b"]);
    let reply = send(&world.app, drop("team-b")).await;
    assert_eq!(reply.status, StatusCode::CONFLICT, "{}", reply.text());
    assert_eq!(reply.error().reason, "LastNamespace");
    // Somebody else's Grant is answered like a missing one.
    let reply = send(
        &world.app,
        request(
            Method::DELETE,
            &format!("/api/v1/grants/{}/namespaces/team-b", first.grant),
            Some("bob-token"),
            None,
        ),
    )
    .await;
    assert_eq!(reply.status, StatusCode::NOT_FOUND, "{}", reply.text());
}

#[tokio::test(start_paused = true)]
async fn a_bind_body_not_declared_json_gets_415_and_leaves_nothing() {
    let world = world().await;
    let body = widgets_bind().to_string();
    let post = |content_type: Option<&str>| {
        let mut builder = Request::builder()
            .method(Method::POST)
            .uri("/api/v1/bind")
            .header("authorization", "Bearer bob-token");
        if let Some(t) = content_type {
            builder = builder.header("content-type", t);
        }
        builder.body(Body::from(body.clone())).unwrap()
    };
    for (what, content_type, named) in [
        ("text/plain", Some("text/plain"), "Content-Type: text/plain"),
        (
            "curl -d without -H",
            Some("application/x-www-form-urlencoded"),
            "Content-Type: application/x-www-form-urlencoded",
        ),
        ("no Content-Type", None, "no Content-Type"),
    ] {
        let reply = send(&world.app, post(content_type)).await;
        assert_eq!(
            reply.status,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "{what}: {}",
            reply.text()
        );
        let error = reply.error();
        assert_eq!(error.reason, "UnsupportedMediaType", "{what}");
        assert!(
            error.message.contains("Content-Type: application/json") && error.message.contains(named),
            "{what}: {}",
            error.message
        );
        assert_nothing_created(&world, Some("team-a")).await;
    }
    // Parameters (a charset) and any letter case are still JSON.
    let reply = send(&world.app, post(Some("Application/JSON; charset=utf-8"))).await;
    assert_eq!(reply.status, StatusCode::CREATED, "{}", reply.text());
}
