//! Smoke test of the real-cluster harness: two clusters, distinct identities, RBAC, replacement, clean teardown.

use std::process::Command;

use k8s_openapi::api::core::v1::Namespace;
use kbind_testenv::{TestEnv, User};
use kube::Api;
use kube::api::{ObjectMeta, PostParams};

async fn kube_system_uid(env: &TestEnv, index: usize) -> String {
    let client = env.cluster(index).client(User::Admin).await.unwrap();
    let namespace = Api::<Namespace>::all(client).get("kube-system").await.unwrap();
    namespace.metadata.uid.expect("kube-system has a uid")
}

fn namespace(name: &str) -> Namespace {
    Namespace {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        ..Default::default()
    }
}

/// Processes whose command line names the environment's folder (every server gets paths under it).
fn processes_under(dir: &str) -> String {
    let out = Command::new("pgrep")
        .args(["-a", "-f", dir])
        .output()
        .expect("pgrep runs");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clusters_have_their_own_identity_rbac_and_replacement_and_leave_no_process() {
    let Some(mut env) = TestEnv::start_or_skip(2).await.unwrap() else {
        return;
    };
    println!("kbind-testenv: 2 clusters ready in {:.1?}", env.startup_time());

    let (uid0, uid1) = (kube_system_uid(&env, 0).await, kube_system_uid(&env, 1).await);
    assert_ne!(uid0, uid1, "each cluster has its own kube-system");

    let admin = Api::<Namespace>::all(env.cluster(0).client(User::Admin).await.unwrap());
    let created = admin.create(&PostParams::default(), &namespace("smoke")).await.unwrap();
    assert!(created.metadata.uid.is_some());
    let other = Api::<Namespace>::all(env.cluster(1).client(User::Admin).await.unwrap());
    assert!(
        other.get_opt("smoke").await.unwrap().is_none(),
        "clusters do not share objects"
    );

    let alice = Api::<Namespace>::all(env.cluster(0).client(User::Alice).await.unwrap());
    match alice.create(&PostParams::default(), &namespace("alice-was-here")).await {
        Err(kube::Error::Api(status)) => assert_eq!(status.code, 403, "{status:?}"),
        other => panic!("alice must be forbidden, got {other:?}"),
    }

    let server = env.cluster(1).server();
    let old_pids = env.cluster(1).pids();
    let began = std::time::Instant::now();
    env.replace_cluster(1).await.unwrap();
    println!("kbind-testenv: cluster 1 replaced in {:.1?}", began.elapsed());
    assert_eq!(env.cluster(1).server(), server, "same address");
    assert_eq!(env.cluster(1).generation(), 1);
    assert_ne!(env.cluster(1).pids(), old_pids);
    let uid1_new = kube_system_uid(&env, 1).await;
    assert_ne!(uid1_new, uid1, "a replaced cluster has a new identity");
    assert_ne!(uid1_new, uid0);
    assert_eq!(kube_system_uid(&env, 0).await, uid0, "the other cluster is untouched");

    let dir = env.work_dir().display().to_string();
    assert!(!processes_under(&dir).is_empty(), "pgrep sees the running servers");
    let pids = env.pids();
    assert_eq!(pids.len(), 5, "one etcd, two apiservers, two controller-managers");
    drop(env);
    assert_eq!(processes_under(&dir), "", "teardown left processes behind");
    for pid in pids {
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "pid {pid} still exists"
        );
    }
    assert!(!std::path::Path::new(&dir).exists(), "the work folder is deleted");
}
