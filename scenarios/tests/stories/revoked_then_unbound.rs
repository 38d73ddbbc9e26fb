//! The provider credential is revoked (every request answers 401) or may not
//! delete (403), then the bundle is unbound. The drain cannot proceed, and says so: the binding
//! is `Ready=False` with `DeletionBlocked` (`Forbidden` and `PermissionDenied=True` for a 403)
//! and a message carrying the HTTP cause, the Connection's `Connected`/`Ready` name the refused
//! credential, the log carries the status; nothing is deleted on either side (§8.1, §8.7 are
//! checked after every step), and the Orphan escape hatch still releases everything at once.

use crate::story;

use futures::FutureExt;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation, condition, reason};
use kbind_api::{Connection, conditions};
use kbind_cluster::{ApiResource, ClusterClient};
use kbind_scenarios::apis::{exported_crd, widgets, widgets_crd};
use kbind_scenarios::{Credential, ProviderOpts, World, seed_from_env};
use serde_json::json;
use story::*;

/// A cluster-scoped API next to widgets.
const GADGETS: &str = "gadgets.example.org";

/// A world whose konnector writes to `acme` as ServiceAccount `kbind-konnector` bound to
/// ClusterRole `cluster_role`; the ClusterBinding is Ready and widget `default/w1` has its copy.
async fn bound_with_service_account(story: &str, seed: u64, cluster_role: &str) -> (World, Credential) {
    let (mut world, cred) = bound_without_objects(story, seed, cluster_role).await;
    add_widget(&mut world).await;
    (world, cred)
}

/// [`bound_with_service_account`] without any widget.
async fn bound_without_objects(story: &str, seed: u64, cluster_role: &str) -> (World, Credential) {
    let mut world = world_with_widgets(story, seed).await;
    let cred = bind_as(&mut world, cluster_role, &[WIDGETS]).await;
    (world, cred)
}

/// Provider `acme` with the widgets CRD; nothing bound, no konnector yet.
async fn world_with_widgets(story: &str, seed: u64) -> World {
    let mut world = World::builder()
        .seed(seed_from_env(seed))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    world
}

/// Binds `apis` as ServiceAccount `kbind-konnector` bound to ClusterRole `cluster_role`, starts
/// the konnector and waits until the ClusterBinding is Ready.
async fn bind_as(world: &mut World, cluster_role: &str, apis: &[&str]) -> Credential {
    let cred = world
        .mint_service_account("acme", "kbind-konnector", cluster_role)
        .await;
    world.apply_bundle("acme", &cred, apis).await;
    world.start_konnector();
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    cred
}

/// Widget `default/w1`, waited for on the provider.
async fn add_widget(world: &mut World) {
    create_widget(world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(world, "acme", "default", "w1").await;
}

/// Condition `type_` of ClusterBinding `acme`.
async fn binding_condition(w: &World, type_: &str) -> Option<Condition> {
    cluster_binding(w, "acme")
        .await
        .and_then(|b| b.status)
        .and_then(|s| conditions::find(&s.conditions, type_).cloned())
}

fn connection_condition(conn: &Connection, type_: &str) -> Option<Condition> {
    conn.status
        .as_ref()
        .and_then(|s| conditions::find(&s.conditions, type_).cloned())
}

/// Deletes the ClusterBinding and the Connection, as `kbind unbind` does.
async fn unbind(world: &mut World) {
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world.delete_on_consumer(&connections(), None, "acme").await;
}

/// Nothing was deleted: the consumer widget (finalizer held) and its provider copy are there,
/// and the provider never saw a widget delete.
async fn assert_nothing_deleted(world: &World) {
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(mine.is_some(), "the consumer widget stays");
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert!(
        copy.as_ref().is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "the provider copy stays"
    );
    assert_eq!(
        provider_widget_writes(world, "acme", "delete"),
        0,
        "no widget delete reached the provider"
    );
}

/// The documented way out: Orphan on the binding and the Connection releases everything at
/// once, and still deletes nothing on either side.
async fn orphan_releases_everything(world: &mut World) {
    let orphan = json!({"metadata": {"annotations": {annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}});
    patch_consumer(world, &cluster_bindings(), None, "acme", orphan.clone()).await;
    patch_consumer(world, &connections(), None, "acme", orphan).await;
    world
        .run_until_async("the binding and the Connection are released", 30, |w| {
            async move {
                w.consumer_get(&cluster_bindings(), None, "acme").await.is_none()
                    && w.consumer_get(&connections(), None, "acme").await.is_none()
            }
            .boxed()
        })
        .await;
    world
        .run_until_async("the widget's finalizer is released", 30, |w| {
            async move {
                w.consumer_get(&widgets(), Some("default"), "w1")
                    .await
                    .is_some_and(|o| o.metadata.finalizers.unwrap_or_default().is_empty())
            }
            .boxed()
        })
        .await;
    assert_nothing_deleted(world).await;
    assert!(
        world.consumer_get(&crds(), None, WIDGETS).await.is_some(),
        "the consumer CRD stays after an Orphan release"
    );
}

#[tokio::test(start_paused = true)]
async fn a_revoked_credential_blocks_the_unbind_with_the_401_and_orphan_still_lets_go() {
    let story = "a_revoked_credential_blocks_the_unbind_with_the_401_and_orphan_still_lets_go";
    let (mut world, cred) = bound_with_service_account(story, 2401, "cluster-admin").await;
    world.revoke(&cred).await;
    unbind(&mut world).await;

    world
        .run_until_async("the binding says DeletionBlocked with the 401", 60, |w| {
            async move {
                binding_condition(w, condition::READY).await.is_some_and(|c| {
                    c.status == "False" && c.reason == reason::DELETION_BLOCKED && c.message.contains("401")
                })
            }
            .boxed()
        })
        .await;
    // A refused credential is forgiven for the heartbeat Lease's duration (60 s) like any
    // failure of an engaged link, then reported.
    let conn = world
        .run_until_connection(
            "acme",
            "Connected=False/Unauthorized and Ready=False/DeletionBlocked",
            150,
            |c| {
                let connected = connection_condition(c, condition::CONNECTED);
                let ready = connection_condition(c, condition::READY);
                connected.is_some_and(|c| {
                    c.status == "False" && c.reason == reason::UNAUTHORIZED && c.message.contains("401")
                }) && ready.is_some_and(|c| {
                    c.status == "False" && c.reason == reason::DELETION_BLOCKED && c.message.contains("401")
                })
            },
        )
        .await;
    let ready = connection_condition(&conn, condition::READY).expect("the Connection has Ready");
    assert!(
        ready.message.contains(annotation::DELETION_POLICY),
        "the Connection says what to do: {}",
        ready.message
    );
    // A while later it still waits, and still loses nothing.
    world.steps_for(40).await;
    let still = binding_condition(&world, condition::READY)
        .await
        .expect("the binding has Ready");
    assert_eq!(
        still.reason,
        reason::DELETION_BLOCKED,
        "the binding still waits: {still:?}"
    );
    assert!(
        still.message.contains("401"),
        "the binding names the cause: {}",
        still.message
    );
    assert_nothing_deleted(&world).await;
    let log = world.log().text();
    assert!(
        log.lines().any(|l| l.contains("HTTP 401") && l.contains("acme")),
        "a log line carries the HTTP status"
    );

    orphan_releases_everything(&mut world).await;
}

/// Credentials that may do everything but delete.
async fn no_delete_role(world: &World) {
    let role: kbind_cluster::DynamicObject = serde_json::from_value(json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kbind-no-delete"},
        "rules": [{"apiGroups": ["*"], "resources": ["*"], "verbs": ["get", "list", "watch", "create", "update", "patch"]}],
    }))
    .expect("a ClusterRole");
    let res = ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: "ClusterRole".into(),
        plural: "clusterroles".into(),
    };
    world
        .provider("acme")
        .admin_client()
        .create(&res, None, &role, &Default::default())
        .await
        .expect("creating the ClusterRole");
}

#[tokio::test(start_paused = true)]
async fn credentials_that_may_not_delete_block_the_unbind_as_permission_denied() {
    let story = "credentials_that_may_not_delete_block_the_unbind_as_permission_denied";
    let mut world = world_with_widgets(story, 2403).await;
    no_delete_role(&world).await;
    bind_as(&mut world, "kbind-no-delete", &[WIDGETS]).await;
    add_widget(&mut world).await;
    unbind(&mut world).await;

    world
        .run_until_async("the binding says Forbidden with the 403", 60, |w| {
            async move {
                let ready = binding_condition(w, condition::READY).await;
                let denied = binding_condition(w, condition::PERMISSION_DENIED).await;
                ready.is_some_and(|c| c.status == "False" && c.reason == reason::FORBIDDEN && c.message.contains("403"))
                    && denied.is_some_and(|c| {
                        c.status == "True" && c.message.contains("delete") && c.message.contains(WIDGETS)
                    })
            }
            .boxed()
        })
        .await;
    world
        .run_until_connection("acme", "Ready=False/DeletionBlocked naming the 403", 60, |c| {
            connection_condition(c, condition::READY).is_some_and(|c| {
                c.status == "False" && c.reason == reason::DELETION_BLOCKED && c.message.contains("403")
            })
        })
        .await;
    let mine = world.consumer_get(&widgets(), Some("default"), "w1").await;
    assert!(mine.is_some(), "the consumer widget stays");
    assert!(
        world
            .provider_get("acme", &widgets(), Some("default"), "w1")
            .await
            .is_some(),
        "the provider copy stays"
    );
    orphan_releases_everything(&mut world).await;
}

/// The refused API is not the first of the binding: the first (gadgets, no objects) drains at
/// once and waits for the other, yet the binding's `Ready` carries the refusal, not the drained
/// API's `Pending`, and the Connection says `DeletionBlocked` rather than `DrainingBindings`.
#[tokio::test(start_paused = true)]
async fn a_refused_delete_of_a_later_api_is_what_the_binding_and_connection_report() {
    let story = "a_refused_delete_of_a_later_api_is_what_the_binding_and_connection_report";
    let mut world = world_with_widgets(story, 2404).await;
    world
        .install_provider_crd("acme", exported_crd("gadgets", "Gadget", "Cluster"))
        .await;
    no_delete_role(&world).await;
    bind_as(&mut world, "kbind-no-delete", &[GADGETS, WIDGETS]).await;
    add_widget(&mut world).await;
    unbind(&mut world).await;

    world
        .run_until_async("the binding says Forbidden with the 403", 60, |w| {
            async move {
                let ready = binding_condition(w, condition::READY).await;
                ready.is_some_and(|c| c.status == "False" && c.reason == reason::FORBIDDEN && c.message.contains("403"))
            }
            .boxed()
        })
        .await;
    let gadgets = bound_api(&world, "acme", GADGETS).await.expect("gadgets stays listed");
    let widgets_api = bound_api(&world, "acme", WIDGETS).await.expect("widgets stays listed");
    let order: Vec<String> = cluster_binding(&world, "acme")
        .await
        .and_then(|b| b.status)
        .map(|s| s.bound_apis.into_iter().map(|a| a.name).collect())
        .unwrap_or_default();
    assert_eq!(order, [GADGETS, WIDGETS], "boundAPIs keep the spec's order");
    let synced =
        |a: &kbind_api::BoundApiStatus| conditions::find(&a.conditions, condition::SYNCED).map(|c| c.reason.clone());
    assert_eq!(
        synced(&gadgets).as_deref(),
        Some(reason::PENDING),
        "gadgets drained and waits"
    );
    assert_eq!(
        synced(&widgets_api).as_deref(),
        Some(reason::FORBIDDEN),
        "widgets is refused"
    );
    world
        .run_until_connection("acme", "Ready=False/DeletionBlocked naming the 403", 60, |c| {
            connection_condition(c, condition::READY).is_some_and(|c| {
                c.status == "False" && c.reason == reason::DELETION_BLOCKED && c.message.contains("403")
            })
        })
        .await;
    assert_nothing_deleted(&world).await;
    orphan_releases_everything(&mut world).await;
}

#[tokio::test(start_paused = true)]
async fn a_revoked_credential_blocks_removing_related_copies_with_the_401() {
    let story = "a_revoked_credential_blocks_removing_related_copies_with_the_401";
    let (mut world, cred) = bound_without_objects(story, 2402, "cluster-admin").await;
    // Related copies go to the namespaces in use; this widget puts `default` in use, and its own
    // Orphan annotation lets its drain pass without the provider, so the related copy is what
    // the unbind waits for.
    let mut w1 = kbind_scenarios::apis::widget("default", "w1", json!({"size": 1}));
    w1.metadata.annotations = Some(
        [(
            annotation::DELETION_POLICY.to_string(),
            DELETION_POLICY_ORPHAN.to_string(),
        )]
        .into(),
    );
    create_widget_object(&world, w1).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    let secret: kbind_cluster::DynamicObject = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "db-creds", "namespace": "default"}, "stringData": {"password": "p"}}))
    .expect("a Secret");
    world
        .consumer()
        .admin_client()
        .create(&secrets(), Some("default"), &secret, &Default::default())
        .await
        .expect("creating the consumer Secret");
    patch_consumer(
        &world,
        &cluster_bindings(),
        None,
        "acme",
        json!({"spec": {"relatedResources": [
            {"group": "", "resource": "secrets", "direction": "FromConsumer", "selector": {"names": ["db-creds"]}},
        ]}}),
    )
    .await;
    world
        .run_until_async("the related copy is on the provider", 60, |w| {
            async move {
                w.provider_get("acme", &secrets(), Some("default"), "db-creds")
                    .await
                    .is_some()
            }
            .boxed()
        })
        .await;
    world.revoke(&cred).await;
    world.delete_on_consumer(&cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the binding says DeletionBlocked with the 401", 60, |w| {
            async move {
                binding_condition(w, condition::READY).await.is_some_and(|c| {
                    c.status == "False"
                        && c.reason == reason::DELETION_BLOCKED
                        && c.message.contains("related")
                        && c.message.contains("401")
                })
            }
            .boxed()
        })
        .await;
    world.steps_for(30).await;
    assert!(
        world
            .provider_get("acme", &secrets(), Some("default"), "db-creds")
            .await
            .is_some(),
        "the related copy stays on the provider"
    );
    assert!(
        world
            .consumer_get(&secrets(), Some("default"), "db-creds")
            .await
            .is_some(),
        "the consumer Secret stays"
    );
    assert!(
        cluster_binding(&world, "acme").await.is_some(),
        "the binding waits for its related copy"
    );
}
