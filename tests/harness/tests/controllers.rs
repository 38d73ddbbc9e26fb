//! The harness's clusters run the controllers kbind relies on and authenticate users as documented.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::api::rbac::v1::ClusterRole;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kbind_testenv::{TestEnv, User};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

/// Polls `holds` every 200 ms until it is true, failing with `what` after a minute.
async fn eventually<F: std::future::Future<Output = bool>>(what: &str, mut holds: impl FnMut() -> F) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !holds().await {
        assert!(tokio::time::Instant::now() < deadline, "{what}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

async fn groups_of(client: Client) -> (String, Vec<String>) {
    let review = Api::<SelfSubjectReview>::all(client)
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .unwrap();
    let user = review
        .status
        .and_then(|s| s.user_info)
        .expect("a review names the user");
    (user.username.unwrap_or_default(), user.groups.unwrap_or_default())
}

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_and_garbage_collector_controllers_run_and_users_have_their_groups() {
    let Some(env) = TestEnv::start_or_skip(1).await.unwrap() else {
        return;
    };
    let cluster = env.cluster(0);
    let admin = cluster.client(User::Admin).await.unwrap();

    let (name, groups) = groups_of(admin.clone()).await;
    assert_eq!(name, "admin");
    assert!(groups.contains(&"system:masters".to_string()), "{groups:?}");
    let (name, groups) = groups_of(cluster.client(User::Bob).await.unwrap()).await;
    assert_eq!(name, "bob");
    assert_eq!(groups, vec!["system:authenticated".to_string()]);

    let namespaces: Api<Namespace> = Api::all(admin.clone());
    namespaces
        .create(
            &PostParams::default(),
            &Namespace {
                metadata: meta("doomed"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let configmaps: Api<ConfigMap> = Api::namespaced(admin.clone(), "default");
    let owner = configmaps
        .create(
            &PostParams::default(),
            &ConfigMap {
                metadata: meta("owner"),
                ..Default::default()
            },
        )
        .await
        .unwrap();
    let owned_by = OwnerReference {
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        name: "owner".into(),
        uid: owner.metadata.uid.expect("created objects have a uid"),
        ..Default::default()
    };
    let dependent = ConfigMap {
        metadata: ObjectMeta {
            owner_references: Some(vec![owned_by]),
            ..meta("dependent")
        },
        ..Default::default()
    };
    configmaps.create(&PostParams::default(), &dependent).await.unwrap();

    namespaces.delete("doomed", &DeleteParams::default()).await.unwrap();
    configmaps.delete("owner", &DeleteParams::default()).await.unwrap();
    eventually("the namespace controller never finalized the namespace", || async {
        namespaces.get_opt("doomed").await.unwrap().is_none()
    })
    .await;
    eventually("the garbage collector never deleted the dependent", || async {
        configmaps.get_opt("dependent").await.unwrap().is_none()
    })
    .await;

    let roles: Api<ClusterRole> = Api::all(admin.clone());
    eventually("the aggregation controller never filled the edit role", || async {
        !roles.get("edit").await.unwrap().rules.unwrap_or_default().is_empty()
    })
    .await;
    let kube_system: Api<ConfigMap> = Api::namespaced(admin, "kube-system");
    eventually("the root CA publisher never published kube-root-ca.crt", || async {
        kube_system.get_opt("kube-root-ca.crt").await.unwrap().is_some()
    })
    .await;
}
