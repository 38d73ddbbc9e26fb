//! The kbind-backend chart's RBAC on a real kube-apiserver: each component's ServiceAccount,
//! holding only a TokenRequest-minted token, makes the requests its job needs and is refused the
//! rest; the issuer's Role writes pass RBAC's escalation check in both `rbacDelegation` modes and
//! fail where the chart says they do. The reaper's own logic is tested on fakeapi with a paused
//! clock (its TTL is minutes at least); here its RBAC is tried request by request.
//!
//! The cluster comes from `kbind-testenv`; without the Go-built binaries the test prints one line
//! and passes, unless `KBIND_REQUIRE_REAL_K8S=1`. helm renders the chart; without it the same,
//! unless `KBIND_REQUIRE_HELM=1`.

mod reaper_world;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Secret, ServiceAccount};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, Error, KubeClusterClient, PostParams,
};
use kbind_testenv::{Cluster, TestEnv, User};
use reaper_world::chart::*;
use reaper_world::*;
use serde_json::{Value, json};

fn erase<K: kube::Resource<DynamicType = ()>>() -> ApiResource {
    ApiResource::erase::<K>(&())
}

/// The served resource of a rendered object, from discovery.
async fn resource_of(client: &Arc<dyn ClusterClient>, value: &Value) -> ApiResource {
    let api_version = value["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let discovery = client.discovery().await.unwrap();
    discovery
        .resources
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind_of(value))
        .unwrap_or_else(|| panic!("{api_version} {} is not served", kind_of(value)))
        .api_resource()
}

async fn create(client: &Arc<dyn ClusterClient>, value: &Value) -> Result<DynamicObject, Error> {
    let res = resource_of(client, value).await;
    let namespace = value["metadata"]["namespace"].as_str();
    client
        .create(&res, namespace, &object(value.clone()), &PostParams::default())
        .await
}

/// Installs a rendered release; CRDs and Namespaces another release created already are fine.
async fn install(admin: &Arc<dyn ClusterClient>, objects: &[Value]) {
    let rendered: Vec<Value> = objects
        .iter()
        .filter(|o| kind_of(o) == "CustomResourceDefinition")
        .cloned()
        .collect();
    let mut fresh = Vec::new();
    for crd in rendered {
        if admin.get_opt(&crds(), None, name_of(&crd)).await.unwrap().is_none() {
            fresh.push(crd);
        }
    }
    install_crds(admin, &fresh).await;
    let (namespaces, rest): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .filter(|o| kind_of(o) != "CustomResourceDefinition")
        .partition(|o| kind_of(o) == "Namespace");
    for value in namespaces.into_iter().chain(rest) {
        match create(admin, value).await {
            Ok(_) => {}
            Err(e) if e.code() == 409 && kind_of(value) == "Namespace" => {}
            Err(e) => panic!("{} {} refused: {e}", kind_of(value), name_of(value)),
        }
    }
}

/// A client holding only a TokenRequest-minted token of ServiceAccount `NAMESPACE/name`.
async fn as_service_account(cluster: &Cluster, admin: &Arc<dyn ClusterClient>, name: &str) -> Arc<dyn ClusterClient> {
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
        "spec": {"audiences": [], "expirationSeconds": 3600}});
    let minted = admin
        .create_subresource(&erase::<ServiceAccount>(), Some(NAMESPACE), name, "token", &request)
        .await
        .unwrap();
    let token = minted["status"]["token"].as_str().expect("a minted token").to_string();
    let mut config = cluster.config(User::Admin).await.unwrap();
    config.auth_info = serde_json::from_value(json!({"token": token})).unwrap();
    Arc::new(KubeClusterClient::from_config(config).unwrap())
}

fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::Forbidden { .. })),
        "{what}: expected Forbidden, got {result:?}"
    );
}

/// What the issuer writes for a Grant of widgets in `ns`: a Role on the Export's resource and
/// related Secrets, bound to the Grant's ServiceAccount.
async fn issue_role(issuer: &Arc<dyn ClusterClient>, ns: &str) -> Result<(), Error> {
    let rules = json!([
        {"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
    ]);
    create(issuer, &role(ns, "kbind-grant", rules)).await?;
    create(issuer, &role_binding(ns, "kbind-grant", ("kbind-grants", "grant-1"))).await?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_components_chart_rbac_holds_on_a_real_apiserver() {
    let Some(helm) = helm() else { return };
    let Some(env) = TestEnv::start_or_skip(1).await.unwrap() else {
        return;
    };
    let cluster = env.cluster(0);
    let admin: Arc<dyn ClusterClient> =
        Arc::new(KubeClusterClient::from_config(cluster.config(User::Admin).await.unwrap()).unwrap());
    create(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}}),
    )
    .await
    .unwrap();

    // Release `kbind-backend`: defaults (escalate) with reapObjects on example.org.
    let reap_objects = [
        "reaper.reapObjects.enabled=true",
        "reaper.reapObjects.groups={example.org}",
    ];
    install(&admin, &render(&helm, &reap_objects)).await;
    install_export(&admin).await;

    // The gateway: Grants, token minting in the grants namespace, nothing else.
    let gateway = as_service_account(cluster, &admin, GATEWAY).await;
    let name = grant(&gateway, "token:alice", SILENT, &["team-a"]).await;
    let sa =
        json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"namespace": "kbind-grants", "name": name}});
    create(&admin, &sa).await.unwrap();
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}});
    gateway
        .create_subresource(
            &erase::<ServiceAccount>(),
            Some("kbind-grants"),
            &name,
            "token",
            &request,
        )
        .await
        .unwrap();
    assert_forbidden(
        gateway.list(&erase::<Secret>(), None, &Default::default()).await,
        "the gateway listing Secrets",
    );
    assert_forbidden(
        create(&gateway, &role("default", "r", json!([]))).await,
        "the gateway writing a Role",
    );

    // The issuer (escalate): a claimed namespace, a Role for the Export and its binding, the Lease.
    let controller = as_service_account(cluster, &admin, CONTROLLER).await;
    create(
        &controller,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await
    .unwrap();
    issue_role(&controller, "team-a").await.unwrap();
    lease(&controller, SILENT).await;
    assert_forbidden(
        controller.list(&erase::<Secret>(), None, &Default::default()).await,
        "the escalate-mode issuer listing Secrets",
    );

    // The reaper's requests: the Leases, the consumer's Grants, its objects, its namespace.
    controller
        .list(&leases(), Some(LEASE_NS), &Default::default())
        .await
        .unwrap();
    synced(&admin, &widgets(), Some("team-a"), "w1", SILENT).await;
    let selector = format!("iam.kbind.io/consumer-cluster-uid={SILENT}");
    let mine = controller
        .list(&grants(), None, &kbind_cluster::ListParams::default().labels(&selector))
        .await
        .unwrap();
    assert_eq!(mine.items.len(), 1);
    controller.list(&widgets(), None, &Default::default()).await.unwrap();
    controller
        .delete(&widgets(), Some("team-a"), "w1", &DeleteParams::default())
        .await
        .unwrap();
    controller
        .delete(&grants(), None, &name, &DeleteParams::default())
        .await
        .unwrap();
    controller
        .delete(&namespaces(), None, "team-a", &DeleteParams::default())
        .await
        .unwrap();

    // Release `held`: no escalate/bind; the issuer holds example.org and the related resources.
    let held = ["issuer.rbacDelegation=held", "issuer.delegatedGroups={example.org}"];
    let with_related = [&held[..], &["issuer.delegateRelatedResources=true"]].concat();
    install(
        &admin,
        &template_release(&helm, "held", &set_args(&with_related)).unwrap(),
    )
    .await;
    let held_issuer = as_service_account(cluster, &admin, "held-kbind-backend-controller").await;
    create(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-b"}}),
    )
    .await
    .unwrap();
    issue_role(&held_issuer, "team-b").await.unwrap();

    // Release `narrow`: held without the related resources, so a Role handing out Secrets is refused.
    install(&admin, &template_release(&helm, "narrow", &set_args(&held)).unwrap()).await;
    let narrow_issuer = as_service_account(cluster, &admin, "narrow-kbind-backend-controller").await;
    create(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-c"}}),
    )
    .await
    .unwrap();
    assert_forbidden(
        issue_role(&narrow_issuer, "team-c").await,
        "delegating Secrets the issuer does not hold",
    );
    assert_forbidden(
        narrow_issuer.list(&erase::<Secret>(), None, &Default::default()).await,
        "the held-mode issuer listing Secrets",
    );
    drop(env);
}
