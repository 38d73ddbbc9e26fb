//! The harness's clusters run the controllers kbind relies on and authenticate users as documented.

use std::time::Duration;

use k8s_openapi::api::authentication::v1::SelfSubjectReview;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kbind_testenv::{TestEnv, User};
use kube::api::{DeleteParams, ObjectMeta, PostParams};
use kube::{Api, Client};

/// Polls until `gone` reports the object absent, failing after a minute.
async fn wait_gone<K>(api: &Api<K>, name: &str, what: &str)
where
    K: kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while api.get_opt(name).await.unwrap().is_some() {
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
    wait_gone(
        &namespaces,
        "doomed",
        "the namespace controller never finalized the namespace",
    )
    .await;
    wait_gone(
        &configmaps,
        "dependent",
        "the garbage collector never deleted the dependent",
    )
    .await;
}
