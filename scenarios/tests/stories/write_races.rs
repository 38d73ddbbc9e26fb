//! contract §4 "conflicts" and "deletion", §8.3: another client's write can land between the
//! syncer's read of the provider target and its write. The first write of a copy can only
//! create (an apply carrying a resourceVersion no object has), so an object that appeared
//! meanwhile answers Conflict and is classified (and left alone), never taken over; the
//! delete of a copy carries its UID and resourceVersion, so an object that replaced it meanwhile
//! is never deleted.

use crate::story;

use futures::FutureExt;
use kbind_api::consts::{annotation, label, reason};
use kbind_cluster::ClusterClient;
use kbind_scenarios::apis::{widget, widgets};
use serde_json::{Value, json};
use story::{WIDGETS, at, bound_world, create_widget, meta_key, wait_for_copy, widget_has};

/// A widget someone else made on the provider: no kbind markers.
fn foreign_widget(ns: &str, name: &str, size: i64) -> Value {
    let mut obj = serde_json::to_value(widget(ns, name, json!({"size": size}))).expect("a widget");
    obj["metadata"]["labels"] = json!({"owner": "provider-team"});
    obj
}

/// Someone else's object (spec size 9) replaces whatever is at `default/w1` just before the
/// konnector's next `verb` request on it (`None`: any write).
fn foreign_w1_lands_before(world: &kbind_scenarios::World, verb: Option<&str>) {
    world.provider("acme").interlope(fakeapi::Interloper {
        verb: verb.map(str::to_string),
        resource: "widgets".into(),
        namespace: Some("default".into()),
        name: "w1".into(),
        object: foreign_widget("default", "w1", 9),
    });
}

/// Waits until consumer `default/w1` reports `ForeignObjectExists`.
async fn w1_reports_a_foreign_object(world: &mut kbind_scenarios::World) {
    world
        .run_until_async(
            "the consumer object reports ForeignObjectExists",
            90,
            widget_has(
                "default",
                "w1",
                &meta_key("annotations", annotation::CONFLICT),
                json!(reason::FOREIGN_OBJECT_EXISTS),
            ),
        )
        .await;
}

/// Lets 30 steps pass and checks that the foreign `default/w1` was not written at all: its
/// spec, its owner label, no marker of ours, the same resourceVersion. Returns it.
async fn foreign_w1_stays_untouched(world: &mut kbind_scenarios::World) -> Option<kbind_cluster::DynamicObject> {
    let seed = world.seed();
    let theirs = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    world.steps_for(30).await;
    let now = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(at(&now, "/spec/size"), Some(json!(9)), "seed {seed}: their spec stays");
    assert_eq!(story::label(&now, "owner").as_deref(), Some("provider-team"));
    assert_eq!(
        story::label(&now, label::MANAGED),
        None,
        "seed {seed}: no marker of ours is stamped on it"
    );
    assert_eq!(
        now.as_ref().and_then(|o| o.metadata.resource_version.clone()),
        theirs.and_then(|o| o.metadata.resource_version),
        "seed {seed}: their object is not written at all"
    );
    now
}

#[tokio::test(start_paused = true)]
async fn an_object_made_on_the_provider_just_before_the_first_write_is_never_taken_over() {
    let (mut world, _cred) = bound_world(
        "an_object_made_on_the_provider_just_before_the_first_write_is_never_taken_over",
        611,
    )
    .await;
    // The provider team creates default/w1 after the syncer saw nothing there, before it writes.
    foreign_w1_lands_before(&world, None);
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    w1_reports_a_foreign_object(&mut world).await;
    world
        .run_until_async("the binding counts the conflict", 60, |w| {
            async move {
                story::bound_api(w, "acme", WIDGETS)
                    .await
                    .is_some_and(|b| b.conflict_count == 1)
            }
            .boxed()
        })
        .await;
    let now = foreign_w1_stays_untouched(&mut world).await;
    assert_eq!(story::annotation(&now, annotation::CONSUMER_CLUSTER_UID), None);
    assert_eq!(story::annotation(&now, annotation::CONSUMER_OBJECT_UID), None);
}

#[tokio::test(start_paused = true)]
async fn an_object_that_replaced_a_copy_just_before_its_delete_is_left_alone() {
    let (mut world, _cred) = bound_world(
        "an_object_that_replaced_a_copy_just_before_its_delete_is_left_alone",
        612,
    )
    .await;
    create_widget(&world, "default", "w2", json!({"size": 2})).await;
    let copy = wait_for_copy(&mut world, "acme", "default", "w2").await;
    // Between the syncer's read of the copy and its delete, the copy is replaced by someone
    // else's object of the same name.
    world.provider("acme").interlope(fakeapi::Interloper {
        verb: Some("delete".into()),
        resource: "widgets".into(),
        namespace: Some("default".into()),
        name: "w2".into(),
        object: foreign_widget("default", "w2", 7),
    });
    world.delete_on_consumer(&widgets(), Some("default"), "w2").await;
    world
        .run_until_async(
            "the consumer object's deletion completes",
            90,
            story::consumer_widget_gone("default", "w2"),
        )
        .await;
    world.steps_for(20).await;
    let theirs = world.provider_get("acme", &widgets(), Some("default"), "w2").await;
    assert!(
        theirs.as_ref().and_then(|o| o.metadata.uid.clone()) != copy.metadata.uid && theirs.is_some(),
        "the object that replaced our copy is still there"
    );
    assert_eq!(at(&theirs, "/spec/size"), Some(json!(7)));
    assert_eq!(story::label(&theirs, "owner").as_deref(), Some("provider-team"));
}

/// A copy of ours by its markers appears just before our first write of it (a second konnector
/// of this consumer cluster, a restore): our creating apply is refused. The copy is ours, so
/// the syncer reads it and applies at once, instead of taking the refusal for a failure and
/// retrying seconds later (which, with a provider controller that writes status at once, would
/// hold back nearly every new object).
#[tokio::test(start_paused = true)]
async fn a_copy_of_ours_that_appeared_just_before_our_first_write_is_applied_without_a_failed_pass() {
    let (mut world, _cred) = bound_world(
        "a_copy_of_ours_that_appeared_just_before_our_first_write_is_applied_without_a_failed_pass",
        613,
    )
    .await;
    let seed = world.seed();
    create_widget(&world, "default", "w0", json!({"size": 1})).await;
    let first = wait_for_copy(&mut world, "acme", "default", "w0").await;
    let cluster_uid = story::annotation(&Some(first), annotation::CONSUMER_CLUSTER_UID);
    let created = create_widget(&world, "default", "w1", json!({"size": 3})).await;
    // Still ours by its markers, but written by someone else: without the consumer generation
    // our apply sets, so its arrival shows our apply landed after it.
    let mut changed = serde_json::to_value(widget("default", "w1", json!({"size": 3}))).expect("a widget");
    changed["metadata"]["labels"] = json!({label::MANAGED: "true", "answered": "yes"});
    changed["metadata"]["annotations"] = json!({
        annotation::CONSUMER_CLUSTER_UID: cluster_uid,
        annotation::CONSUMER_OBJECT_UID: created.metadata.uid,
    });
    world.provider("acme").interlope(fakeapi::Interloper {
        verb: Some("patch".into()),
        resource: "widgets".into(),
        namespace: Some("default".into()),
        name: "w1".into(),
        object: changed,
    });
    // Three one-second steps: less than the five seconds an error retry waits.
    world
        .run_until_async("our apply lands on the changed copy", 3, |w| {
            async move {
                let copy = w.provider_get("acme", &widgets(), Some("default"), "w1").await;
                story::label(&copy, "answered").as_deref() == Some("yes")
                    && story::annotation(&copy, annotation::CONSUMER_GENERATION).as_deref() == Some("1")
            }
            .boxed()
        })
        .await;
    let copy = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    assert_eq!(at(&copy, "/spec/size"), Some(json!(3)), "seed {seed}");
    assert_eq!(
        story::annotation(&copy, annotation::CONSUMER_OBJECT_UID),
        created.metadata.uid,
        "seed {seed}"
    );
    // Here the interloper's own event re-triggers the object at once either way; what must not
    // happen is the failure path (its error retry, and the provider namespace read again).
    let log = world.log().text();
    assert!(
        !log.contains("sync failed; retrying"),
        "seed {seed}: the changed copy was taken for a failed sync:\n{log}"
    );
}

/// A spec change is applied with the copy the syncer already knows (its cache, or its own
/// latest write) as the precondition, without reading the copy first. A copy
/// replaced unseen by someone else's object answers that precondition with a Conflict; the
/// next pass reads it, finds it foreign and reports the conflict. Their object is never
/// written.
#[tokio::test(start_paused = true)]
async fn an_object_that_replaced_a_copy_just_before_a_spec_change_is_never_taken_over() {
    let (mut world, _cred) = bound_world(
        "an_object_that_replaced_a_copy_just_before_a_spec_change_is_never_taken_over",
        614,
    )
    .await;
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    wait_for_copy(&mut world, "acme", "default", "w1").await;
    world.steps_for(10).await;
    // Between the spec change and our apply, the copy is replaced by someone else's object.
    foreign_w1_lands_before(&world, Some("patch"));
    story::patch_widget(&world, "default", "w1", json!({"spec": {"size": 2}})).await;
    w1_reports_a_foreign_object(&mut world).await;
    foreign_w1_stays_untouched(&mut world).await;
}

/// The first write of a new copy is an apply that can only create: someone else's object that
/// lands just before it makes the apply's resourceVersion precondition fail, and it is read,
/// found foreign and reported; it is never written.
#[tokio::test(start_paused = true)]
async fn an_object_made_just_before_our_creating_apply_is_never_taken_over() {
    let (mut world, _cred) =
        bound_world("an_object_made_just_before_our_creating_apply_is_never_taken_over", 615).await;
    // The interloper lands before the konnector's first patch of w1: its creating apply.
    foreign_w1_lands_before(&world, Some("patch"));
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    w1_reports_a_foreign_object(&mut world).await;
    foreign_w1_stays_untouched(&mut world).await;
}

/// A copy deleted out of band just as its object's spec changes is re-created by the creating
/// apply (one write, our Apply entry only), never by the apply meant for the copy the syncer
/// knew: an apply to a name where nothing is creates the object (kube-apiserver does so even
/// with a resourceVersion in the body), which would skip the classification and the wait before
/// re-creating a copy someone keeps deleting. The apply names the known copy's UID, so it
/// answers Conflict and the next pass reads and creates. In this world the delete's event reaches the cache first, so this story
/// holds the behaviour without reproducing the race; the race itself showed in the planted-bug
/// gate (`copy-owner-references-up`: the provider's garbage collector deleting each copy right
/// after our writes), where an apply without the UID re-created the copy in a loop.
#[tokio::test(start_paused = true)]
async fn a_copy_deleted_just_before_a_spec_change_is_re_created_by_a_creating_apply() {
    let (mut world, _cred) = bound_world(
        "a_copy_deleted_just_before_a_spec_change_is_re_created_by_a_creating_apply",
        616,
    )
    .await;
    let seed = world.seed();
    create_widget(&world, "default", "w1", json!({"size": 1})).await;
    let first = wait_for_copy(&mut world, "acme", "default", "w1").await;
    world.steps_for(10).await;
    let from = world.provider("acme").request_log().len();
    world
        .provider("acme")
        .admin_client()
        .delete(&widgets(), Some("default"), "w1", &Default::default())
        .await
        .expect("the provider team deletes the copy");
    story::patch_widget(&world, "default", "w1", json!({"spec": {"size": 2}})).await;
    world
        .run_until_async(
            "the copy is back with the new spec",
            60,
            story::copy_has("acme", "default", "w1", "/spec/size", json!(2)),
        )
        .await;
    let again = world.provider_get("acme", &widgets(), Some("default"), "w1").await;
    let owners: Vec<_> = again
        .iter()
        .flat_map(|c| c.metadata.managed_fields.iter().flatten())
        .map(|e| (e.manager.clone(), e.operation.clone()))
        .collect();
    assert_eq!(
        owners,
        vec![(Some("kbind-konnector".to_string()), Some("Apply".to_string()))],
        "seed {seed}: the new copy's field owners"
    );
    assert_ne!(
        again.and_then(|c| c.metadata.uid),
        first.metadata.uid,
        "seed {seed}: a new copy"
    );
    let writes: Vec<String> = world
        .provider("acme")
        .request_log_from(from)
        .into_iter()
        .filter(|r| r.user != "admin" && r.name == "w1" && r.error.is_none() && r.verb != "get")
        .map(|r| r.verb)
        .collect();
    assert_eq!(
        writes,
        vec!["patch".to_string()],
        "seed {seed}: the copy came back by one creating apply: {writes:?}"
    );
}
