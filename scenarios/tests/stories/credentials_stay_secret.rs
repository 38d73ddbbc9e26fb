//! Story: credentials never show up in the konnector's log, consumer Events or Connection
//! conditions (§8 invariant 7), and the check itself catches a leak.

use crate::common;

use kbind_cluster::{ApiResource, ClusterClient};

#[tokio::test(start_paused = true)]
async fn credentials_never_appear_in_logs_events_or_conditions() {
    let (mut world, cred) = common::connected_world("credentials_never_appear_in_logs_events_or_conditions").await;
    world.steps_for(10).await;
    world.partition("acme");
    world.steps_for(10).await;
    world.heal("acme");
    world.swap_secret("acme", &cred, Some(b"wrong ca")).await;
    world.steps_for(10).await;
    assert!(!world.log().text().is_empty(), "the engine's log was captured");

    // The check is live: a leaked token in an Event fails it.
    let event = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": "leak", "namespace": "kbind"},
        "involvedObject": {"kind": "Connection", "name": "acme"},
        "reason": "Leak", "message": format!("bad token {}", cred.token), "type": "Warning",
    }))
    .unwrap();
    world
        .consumer()
        .admin_client()
        .create(
            &ApiResource::erase::<k8s_openapi::api::core::v1::Event>(&()),
            Some("kbind"),
            &event,
            &Default::default(),
        )
        .await
        .unwrap();
    let violation = world.check_invariants().await.expect("the leak is found");
    assert_eq!(violation.invariant, "§8.7");
    assert!(
        !violation.detail.contains(&cred.token),
        "the report does not repeat the secret"
    );
}
