//! contract §4 "spec up": provider drift in what kbind owns is reverted, what others add on
//! the provider stays, and a copy deleted out of band comes back (§8.1, §8.2, §8.7 checked by
//! the world after every step).

use crate::story;

use kbind_cluster::ClusterClient;
use kbind_scenarios::apis::widgets;
use serde_json::json;
use story::*;

#[tokio::test(start_paused = true)]
async fn a_provider_edit_of_the_spec_we_own_is_reverted() {
    let (mut world, _) = bound_world("a_provider_edit_of_the_spec_we_own_is_reverted", 301).await;
    create_widget(&world, "default", "w1", json!({"size": 3, "color": "blue"})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    patch_copy(
        &world,
        "acme",
        "default",
        "w1",
        json!({"spec": {"size": 99, "color": "red"}}),
    )
    .await;
    world
        .run_until_async(
            "the provider edit of spec.size is reverted",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(3)),
        )
        .await;
    world
        .run_until_async(
            "the provider edit of spec.color is reverted",
            10,
            copy_has("acme", "default", "w1", "/spec/color", json!("blue")),
        )
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert_eq!(
        at(&mine, "/spec/size"),
        Some(json!(3)),
        "the consumer spec never follows the provider"
    );
}

#[tokio::test(start_paused = true)]
async fn provider_metadata_and_fields_added_by_someone_else_stay() {
    let (mut world, _) = bound_world("provider_metadata_and_fields_added_by_someone_else_stay", 302).await;
    create_widget(&world, "default", "w1", json!({"size": 3})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    patch_copy(
        &world,
        "acme",
        "default",
        "w1",
        json!({"metadata": {"labels": {"team": "platform"}, "annotations": {"billing/plan": "gold"}},
               "spec": {"config": {"zone": "eu-1"}}}),
    )
    .await;
    world.steps_for(5).await;
    // A consumer change goes up through server-side apply and leaves the others' fields alone.
    patch_widget(&world, "default", "w1", json!({"spec": {"size": 4}})).await;
    world
        .run_until_async(
            "the update reaches the provider",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(4)),
        )
        .await;
    world.steps_for(10).await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(label(&copy, "team").as_deref(), Some("platform"));
    assert_eq!(annotation(&copy, "billing/plan").as_deref(), Some("gold"));
    assert_eq!(at(&copy, "/spec/config/zone"), Some(json!("eu-1")));
    assert_eq!(label(&copy, kbind_api::consts::label::MANAGED).as_deref(), Some("true"));
}

#[tokio::test(start_paused = true)]
async fn a_copy_deleted_out_of_band_comes_back_with_the_current_spec() {
    let (mut world, _) = bound_world("a_copy_deleted_out_of_band_comes_back_with_the_current_spec", 303).await;
    create_widget(&world, "default", "w1", json!({"size": 3})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    world
        .provider("acme")
        .admin_client()
        .delete(&widgets(), Some("default"), "w1", &Default::default())
        .await
        .expect("deleting the copy out of band");
    patch_widget(&world, "default", "w1", json!({"spec": {"size": 7}})).await;
    world
        .run_until_async(
            "the copy is back with the new spec",
            60,
            copy_has("acme", "default", "w1", "/spec/size", json!(7)),
        )
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(mine.is_some_and(|o| o.metadata.deletion_timestamp.is_none()));
}

#[tokio::test(start_paused = true)]
async fn a_provider_edit_of_a_label_we_own_is_reverted() {
    let (mut world, _) = bound_world("a_provider_edit_of_a_label_we_own_is_reverted", 304).await;
    let mut obj = kbind_scenarios::apis::widget("default", "w1", json!({"size": 3}));
    obj.metadata.labels = Some([("app".to_string(), "web".to_string())].into());
    create_widget_object(&world, obj).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;

    patch_copy(
        &world,
        "acme",
        "default",
        "w1",
        json!({"metadata": {"labels": {"app": "hacked"}}}),
    )
    .await;
    world
        .run_until_async(
            "the label is reverted",
            60,
            copy_has("acme", "default", "w1", &meta_key("labels", "app"), json!("web")),
        )
        .await;
}

#[tokio::test(start_paused = true)]
async fn a_provider_namespace_deleted_out_of_band_is_created_again_with_the_copy() {
    let (mut world, _) = bound_world(
        "a_provider_namespace_deleted_out_of_band_is_created_again_with_the_copy",
        305,
    )
    .await;
    create_widget(&world, "team-a", "w1", json!({"size": 3})).await;
    wait_for_copy(&mut world, "acme", "team-a", "w1").await;

    let namespaces = kbind_cluster::ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    world
        .provider("acme")
        .admin_client()
        .delete(&namespaces, None, "team-a", &Default::default())
        .await
        .expect("deleting the provider namespace out of band");
    world
        .run_until_async(
            "the copy goes with its namespace",
            60,
            copy_gone("acme", "team-a", "w1"),
        )
        .await;
    world
        .run_until_async(
            "the namespace and the copy come back",
            120,
            copy_has("acme", "team-a", "w1", "/spec/size", json!(3)),
        )
        .await;
}
