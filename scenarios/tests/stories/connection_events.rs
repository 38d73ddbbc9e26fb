//! Connection Events: an unreachable provider is announced by one Warning Event on
//! the Connection however many reconciles see it, a return to Ready by one Normal Event, and a
//! second outage counts once more in the same Event's series; notes carry no credentials.

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::{condition, reason};
use kbind_cluster::{ClusterClient, DynamicObject};
use kbind_scenarios::World;
use serde_json::{Value, json};

use story::bound_world;

/// Events about Connection `name` with `reason` (cluster-scoped objects' Events live in `default`).
async fn connection_events(world: &World, name: &str, why: &str) -> Vec<DynamicObject> {
    let events = world
        .consumer()
        .admin_client()
        .list(
            &kbind_engine::events::event_resource(),
            Some("default"),
            &Default::default(),
        )
        .await
        .expect("listing events");
    events
        .items
        .into_iter()
        .filter(|e| {
            e.data.pointer("/regarding/kind") == Some(&json!("Connection"))
                && e.data.pointer("/regarding/name") == Some(&json!(name))
                && e.data.get("reason") == Some(&json!(why))
        })
        .collect()
}

/// How often the one Event of `why` was counted: 1 without a series.
fn occurrences(events: &[DynamicObject]) -> i64 {
    assert_eq!(events.len(), 1, "one Event per reason, got {events:?}");
    events[0]
        .data
        .pointer("/series/count")
        .and_then(Value::as_i64)
        .unwrap_or(1)
}

fn ready(world: &World) -> futures::future::BoxFuture<'_, bool> {
    async move {
        world
            .connection("acme")
            .await
            .and_then(|c| c.status)
            .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
    }
    .boxed()
}

fn unreachable(world: &World) -> futures::future::BoxFuture<'_, bool> {
    async move {
        world.connection("acme").await.and_then(|c| c.status).is_some_and(|s| {
            conditions::find(&s.conditions, condition::CONNECTED)
                .is_some_and(|c| c.reason == reason::PROVIDER_UNREACHABLE)
        })
    }
    .boxed()
}

#[tokio::test(start_paused = true)]
async fn an_unreachable_provider_is_announced_once_per_outage() {
    let (mut world, cred) = bound_world("an_unreachable_provider_is_announced_once_per_outage", 71).await;
    assert!(
        connection_events(&world, "acme", reason::PROVIDER_UNREACHABLE)
            .await
            .is_empty(),
        "no outage yet"
    );

    world.partition("acme");
    world
        .run_until_async("the Connection reports ProviderUnreachable", 120, unreachable)
        .await;
    // Many reconciles (one per retry interval) keep seeing the same outage.
    world.steps_for(60).await;
    let warnings = connection_events(&world, "acme", reason::PROVIDER_UNREACHABLE).await;
    assert_eq!(occurrences(&warnings), 1, "one Event for one outage: {warnings:?}");
    let warning = &warnings[0];
    assert_eq!(warning.data.get("type"), Some(&json!("Warning")));
    let note = warning.data.get("note").and_then(Value::as_str).unwrap_or_default();
    assert!(note.contains("acme"), "the note names the Connection: {note}");
    assert!(!note.contains(&cred.token), "the note carries the token: {note}");

    world.heal("acme");
    world.run_until_async("the Connection is Ready again", 120, ready).await;
    world.steps_for(30).await;
    let normal = connection_events(&world, "acme", condition::READY).await;
    let readies = occurrences(&normal);
    assert_eq!(normal[0].data.get("type"), Some(&json!("Normal")));

    world.partition("acme");
    world
        .run_until_async("the Connection reports ProviderUnreachable again", 120, unreachable)
        .await;
    world.steps_for(60).await;
    let warnings = connection_events(&world, "acme", reason::PROVIDER_UNREACHABLE).await;
    assert_eq!(
        occurrences(&warnings),
        2,
        "the second outage counts once more: {warnings:?}"
    );
    assert_eq!(
        occurrences(&connection_events(&world, "acme", condition::READY).await),
        readies,
        "no Ready Event while unreachable"
    );
}
