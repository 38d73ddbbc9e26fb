//! The world's §8 checks are live: acting as the konnector, each story breaks one invariant on
//! purpose (a served copy deleted, a delete after a failed list, CA data in a binding condition)
//! and the check names it, with the object and its resourceVersion.

use crate::story;

use base64::Engine as _;
use fakeapi::{ErrorRule, InjectedError, UserInfo};
use kbind_cluster::{ApiResource, ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::widgets;
use serde_json::json;
use story::*;

/// A client of provider `acme` acting as the konnector's credential.
fn as_konnector(world: &kbind_scenarios::World, user: &str) -> fakeapi::FakeClient {
    world.provider("acme").client(UserInfo {
        name: user.to_string(),
        groups: vec!["system:masters".into(), "system:authenticated".into()],
    })
}

#[tokio::test(start_paused = true)]
async fn a_copy_deleted_while_its_binding_still_serves_it_breaks_invariant_8() {
    let (mut world, cred) = bound_world(
        "a_copy_deleted_while_its_binding_still_serves_it_breaks_invariant_8",
        301,
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    as_konnector(&world, &cred.user)
        .delete(&widgets(), Some("default"), "w1", &Default::default())
        .await
        .expect("deleting the copy as the konnector");
    let violation = world.check_invariants().await.expect("the delete is seen");
    assert_eq!(violation.invariant, "§8.8", "{violation:?}");
    assert!(
        violation.detail.contains("widgets.example.org default/w1") && violation.detail.contains("ClusterBinding acme"),
        "the report names the copy and the binding that serves it: {violation:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_namespace_deleted_after_a_failed_list_in_the_same_pass_breaks_invariant_9() {
    let (mut world, cred) = bound_world(
        "a_namespace_deleted_after_a_failed_list_in_the_same_pass_breaks_invariant_9",
        302,
    )
    .await;
    let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    ensure_namespace(&world.provider("acme").admin_client(), "scratch").await;
    world.steps_for(2).await;

    let konnector = as_konnector(&world, &cred.user);
    world
        .provider("acme")
        .inject_error(ErrorRule::new(Some("list"), Some("configmaps"), InjectedError::Internal).times(1));
    let configmaps = ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&());
    assert!(
        konnector
            .list(&configmaps, Some("scratch"), &Default::default())
            .await
            .is_err(),
        "the injected fault answers the list"
    );
    konnector
        .delete(&namespaces, None, "scratch", &Default::default())
        .await
        .expect("deleting the namespace as the konnector");
    let violation = world.check_invariants().await.expect("the delete is seen");
    assert_eq!(violation.invariant, "§8.9", "{violation:?}");
    assert!(
        violation.detail.contains("namespaces. /scratch")
            && violation.detail.contains("list of configmaps. in scratch"),
        "the report names the delete and the failed read: {violation:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn ca_data_in_a_binding_condition_breaks_invariant_7() {
    let (mut world, _) = bound_world("ca_data_in_a_binding_condition_breaks_invariant_7", 303).await;
    world.steps_for(2).await;
    let ca = base64::engine::general_purpose::STANDARD.encode(world.ca_pem("acme"));
    let leak = json!({"status": {"conditions": [{
        "type": "Leak", "status": "True", "reason": "Leak", "message": format!("ca {ca}"),
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    world
        .consumer()
        .admin_client()
        .patch_status(
            &cluster_bindings(),
            None,
            "acme",
            &Patch::Merge(leak),
            &PatchParams::default(),
        )
        .await
        .expect("writing the condition");
    let violation = world.check_invariants().await.expect("the leak is found");
    assert_eq!(violation.invariant, "§8.7", "{violation:?}");
    assert!(!violation.detail.contains(&ca), "the report does not repeat the secret");
}
