//! On fakeapi: a Connection name longer than a label value still syncs
//! (its objects carry the hash form and the full name), a Secret without the referenced key
//! says so, and a deleted Connection names the bindings it waits for and the way out, while
//! those bindings say why they wait.

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{annotation, condition, connection_label_value, label, reason};
use kbind_api::{ClusterBinding, conditions};
use kbind_scenarios::apis::widgets;
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::json;
use story::*;

/// A 200-character Connection name (a Connection's name may have 253).
fn long_name() -> String {
    format!("{}.example", "p".repeat(192))
}

#[tokio::test(start_paused = true)]
async fn a_connection_named_longer_than_a_label_value_syncs_with_the_hash_form() {
    let name = long_name();
    let mut world = World::builder()
        .seed(seed_from_env(3801))
        .story("a_connection_named_longer_than_a_label_value_syncs_with_the_hash_form")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world
        .install_provider_crd("acme", kbind_scenarios::apis::widgets_crd())
        .await;
    let cred = world.mint_admin_token("acme");
    for obj in kbind_scenarios::bundle::bundle(
        &name,
        kbind_scenarios::world::NAMESPACE,
        &world.kubeconfig_for(&cred),
        &[WIDGETS],
    ) {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    let binding = name.clone();
    world
        .run_until_async("the ClusterBinding is Ready", 120, move |w| {
            let binding = binding.clone();
            async move { binding_ready(w, &binding).await }.boxed()
        })
        .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    let widget = world.consumer_get(&widgets(), Some("default"), "w1").await;
    let value = label(&widget, label::CONNECTION).expect("the consumer object is labelled");
    assert_eq!(value, connection_label_value(&name));
    assert!(value.len() <= 63 && value.starts_with("sha256-"), "{value}");
    assert_eq!(annotation(&widget, annotation::CONNECTION), Some(name.clone()));

    // Status comes down through the same Connection.
    patch_copy_status(&world, "acme", "default", "w1", json!({"phase": "Ready"})).await;
    world
        .run_until_async(
            "the status comes down",
            60,
            widget_has("default", "w1", "/status/phase", json!("Ready")),
        )
        .await;

    // The unbind drains the copy and takes label and annotation off with the finalizer.
    world.delete_on_consumer(&cluster_bindings(), None, &name).await;
    world
        .run_until_async("the copy is drained", 60, copy_gone("acme", "default", "w1"))
        .await;
    let binding = name.clone();
    world
        .run_until_async("the binding is gone", 60, move |w| {
            let binding = binding.clone();
            async move { w.consumer_get(&cluster_bindings(), None, &binding).await.is_none() }.boxed()
        })
        .await;
    let widget = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(label(&widget, label::CONNECTION), None);
    assert_eq!(annotation(&widget, annotation::CONNECTION), None);
}

#[tokio::test(start_paused = true)]
async fn a_secret_without_the_key_says_which_keys_it_has() {
    let (mut world, _) = world_with_bundle(
        "a_secret_without_the_key_says_which_keys_it_has",
        3802,
        &[],
        |objects| {
            objects[0]["stringData"] = json!({"config": "not the referenced key", "token": "s3cret-value"});
        },
    )
    .await;
    let conn = world
        .run_until_connection("acme", "SecretValid=False/SecretKeyMissing", 30, |c| {
            c.status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, condition::SECRET_VALID))
                .is_some_and(|r| r.reason == reason::SECRET_KEY_MISSING)
        })
        .await;
    let valid = conn
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, condition::SECRET_VALID))
        .expect("SecretValid is set");
    for want in ["kbind/acme", "\"kubeconfig\"", "config, token"] {
        assert!(valid.message.contains(want), "no {want:?} in: {}", valid.message);
    }
    assert!(!valid.message.contains("s3cret-value"), "{}", valid.message);
}

#[tokio::test(start_paused = true)]
async fn a_deleted_connection_names_its_bindings_and_they_say_why_they_wait() {
    let (mut world, _) = bound_world(
        "a_deleted_connection_names_its_bindings_and_they_say_why_they_wait",
        3803,
    )
    .await;
    world.delete_on_consumer(&connections(), None, "acme").await;
    let conn = world
        .run_until_connection("acme", "Ready=False/DrainingBindings", 30, |c| {
            c.status
                .as_ref()
                .and_then(|s| conditions::find(&s.conditions, condition::READY))
                .is_some_and(|r| r.reason == reason::DRAINING_BINDINGS)
        })
        .await;
    let ready = conn
        .status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, condition::READY))
        .expect("Ready is set");
    for want in [
        "ClusterBinding acme",
        "Delete them",
        "core.kbind.io/deletion-policy=Orphan",
    ] {
        assert!(ready.message.contains(want), "no {want:?} in: {}", ready.message);
    }
    world
        .run_until_async("the binding says its Connection is being deleted", 30, |w| {
            async move {
                cluster_binding(w, "acme").await.is_some_and(|b: ClusterBinding| {
                    b.status
                        .as_ref()
                        .and_then(|s| conditions::find(&s.conditions, condition::READY))
                        .is_some_and(|r| {
                            r.reason == reason::CONNECTION_DELETING && r.message.contains("deletion-policy=Orphan")
                        })
                })
            }
            .boxed()
        })
        .await;
}
