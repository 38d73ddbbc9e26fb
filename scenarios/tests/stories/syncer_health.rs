//! Ready never hides a failing syncer: a binding is Ready only once its syncer
//! has listed both sides, and a list the provider keeps failing turns the API's `Synced` to
//! `WatchFailed` naming the verb, the API, the side and the provider's answer — until the list
//! works again, when the binding turns Ready and the object created meanwhile is synced.
//! Before, the binding said Ready "every bound API is syncing" throughout.

use fakeapi::{ErrorRule, InjectedError};
use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{condition, reason};
use serde_json::json;

use crate::story::*;

#[tokio::test(start_paused = true)]
async fn a_binding_whose_provider_list_fails_is_not_ready_and_says_why_until_it_works() {
    let story = "a_binding_whose_provider_list_fails_is_not_ready_and_says_why_until_it_works";
    let (mut world, _cred) = world_with_bundle(story, 3801, &[WIDGETS], |_| {}).await;
    world
        .provider("acme")
        .inject_error(ErrorRule::new(Some("list"), Some("widgets"), InjectedError::Internal));
    world
        .run_until_async(
            "the API says its provider list fails",
            120,
            api_reason_is("acme", WIDGETS, reason::WATCH_FAILED),
        )
        .await;
    let bound = bound_api(&world, "acme", WIDGETS).await.expect("the API's status");
    let synced = conditions::find(&bound.conditions, condition::SYNCED).expect("Synced");
    assert!(
        synced
            .message
            .contains(&format!("list {WIDGETS} on the provider failed"))
            && synced.message.contains("500"),
        "{}",
        synced.message
    );
    assert!(
        !binding_ready(&world, "acme").await,
        "Ready while the syncer cannot list"
    );
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    // The provider answers again: the binding turns Ready and the widget syncs.
    world.provider("acme").clear_errors();
    world
        .run_until_async("the binding turns Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
}
