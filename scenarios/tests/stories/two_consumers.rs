//! Two consumer clusters bind the same provider API (contract §4 "conflicts"): the first
//! writer wins, the second gets `OwnedByAnother` and the copy is never touched by it (§8.3 is
//! checked on both worlds after every step); once the first deletes its object, the second's
//! takes the name.

use kbind_api::consts::{annotation, condition};
use kbind_api::{ClusterBinding, conditions};
use kbind_cluster::{ClusterClient, ClusterClientExt, DynamicObject};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

fn at(obj: &Option<DynamicObject>, pointer: &str) -> Option<Value> {
    obj.as_ref().and_then(|o| o.data.pointer(pointer).cloned())
}

fn annotation_of(obj: &Option<DynamicObject>, key: &str) -> Option<String> {
    obj.as_ref()?.metadata.annotations.as_ref()?.get(key).cloned()
}

async fn binding(world: &World) -> Option<ClusterBinding> {
    world
        .consumer()
        .admin_client()
        .get_typed_opt(None, "acme")
        .await
        .ok()
        .flatten()
}

/// Steps `a` (advancing the shared clock) and checks `b`'s invariants too, until `done`.
async fn until(a: &mut World, b: &World, what: &str, max_steps: u64, done: impl AsyncFn(&World, &World) -> bool) {
    for _ in 0..=max_steps {
        if done(a, b).await {
            return;
        }
        a.step().await;
        if let Some(v) = b.check_invariants().await {
            b.fail(&v);
        }
    }
    a.fail(&kbind_scenarios::invariants::Violation {
        invariant: "progress",
        detail: format!("not true after {max_steps} steps: {what}"),
    });
}

#[tokio::test(start_paused = true)]
async fn the_first_consumer_wins_and_the_second_takes_over_only_after_it_lets_go() {
    let seed = seed_from_env(51);
    let mut first = World::builder()
        .seed(seed)
        .story("the_first_consumer_wins (consumer one)")
        .consumer("consumer-one")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    first.install_provider_crd("acme", widgets_crd()).await;
    let mut second = World::builder()
        .seed(seed + 1)
        .story("the_first_consumer_wins (consumer two)")
        .consumer("consumer-two")
        .shared_provider("acme", first.share_provider("acme"))
        .build()
        .await;
    for world in [&mut first, &mut second] {
        let cred = world.mint_admin_token("acme");
        world.apply_bundle("acme", &cred, &["widgets.example.org"]).await;
        world.start_konnector();
    }
    until(&mut first, &second, "both bindings are Ready", 150, async |a, b| {
        let ready = |b: Option<ClusterBinding>| {
            b.and_then(|b| b.status)
                .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
        };
        ready(binding(a).await) && ready(binding(b).await)
    })
    .await;

    first
        .consumer()
        .admin_client()
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w1", json!({"size": 1})),
            &Default::default(),
        )
        .await
        .expect("consumer one creates w1");
    until(
        &mut first,
        &second,
        "consumer one's copy is on the provider",
        60,
        async |a, _| {
            a.provider_get("acme", &widgets(), Some("default"), "w1")
                .await
                .is_some()
        },
    )
    .await;
    second
        .consumer()
        .admin_client()
        .create(
            &widgets(),
            Some("default"),
            &widget("default", "w1", json!({"size": 2})),
            &Default::default(),
        )
        .await
        .expect("consumer two creates w1 too");
    until(
        &mut first,
        &second,
        "consumer two is told OwnedByAnother",
        60,
        async |_, b| {
            let mine = b.consumer_get(&widgets(), Some("default"), "w1").await;
            annotation_of(&mine, annotation::CONFLICT).as_deref() == Some("OwnedByAnother")
        },
    )
    .await;
    let copy = first.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(at(&copy, "/spec/size"), Some(json!(1)), "the first writer's spec stays");
    assert_eq!(
        annotation_of(&copy, annotation::CONSUMER_CLUSTER_UID),
        Some(first.consumer().identity_uid()),
        "the copy stays consumer one's"
    );
    until(
        &mut first,
        &second,
        "consumer two's binding reports the conflict",
        30,
        async |_, b| {
            let status = binding(b).await.and_then(|b| b.status);
            status.is_some_and(|s| {
                conditions::is_true(&s.conditions, condition::CONFLICTS)
                    && s.bound_apis.first().is_some_and(|a| a.conflict_count == 1)
            })
        },
    )
    .await;

    // Consumer one lets go: its copy goes, and consumer two's object takes the name.
    first.delete_on_consumer(&widgets(), Some("default"), "w1").await;
    until(
        &mut first,
        &second,
        "consumer two's copy replaces it",
        120,
        async |a, b| {
            let copy = a.provider_get("acme", &widgets(), Some("default"), "w1").await;
            annotation_of(&copy, annotation::CONSUMER_CLUSTER_UID) == Some(b.consumer().identity_uid())
                && at(&copy, "/spec/size") == Some(json!(2))
        },
    )
    .await;
}
