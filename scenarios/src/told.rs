//! Stories told on any [`Stage`]: the main flow, a conflict, an identity change and a connection
//! loss here, the unbind stories in [`unbind`], related kinds in [`related`], and one API from
//! two providers (on a [`crate::TwoProviders`] stage) in [`several_providers`], asserted only
//! through what a user can read on the clusters. The fake world runs them in scenarios/tests/stories/on_any_stage.rs, real
//! clusters in konnector/tests/real_stages.rs.

mod related;
mod several_providers;
mod unbind;

pub use related::{
    a_database_password_found_by_reference_follows_the_reference,
    a_kind_the_consumer_does_not_serve_is_named_and_the_other_rules_keep_syncing,
    a_kind_the_konnector_may_not_read_is_permission_denied_naming_verb_and_resource,
    an_ingress_for_a_certificate_has_its_status_synced_back,
};
pub use several_providers::{
    a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse,
    a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost,
    a_related_copy_moves_with_its_namespace_to_the_other_provider,
    an_incompatible_schema_from_the_second_provider_is_refused_naming_both,
    the_konnector_restarted_mid_hand_over_loses_nothing,
    two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused, widgets_crd_without_color,
};
pub use unbind::{
    binding_naming_a_cluster_scoped_api, hand_over_binding_to_binding, hand_over_binding_to_cluster_binding,
    hand_over_cluster_binding_to_binding, orphan_deletes_nothing, provider_namespace_removal,
};

use kbind_api::consts::{annotation, condition, reason, status};
use kbind_api::{ClusterBinding, Connection, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::apis::{widget, widgets};
use crate::stage::Stage;

/// The namespace the stories' widgets live in (exists on every real cluster; created on fakes).
const NS: &str = "default";

/// Whether ClusterBinding `name` is Ready.
pub async fn binding_ready(consumer: &dyn ClusterClient, name: &str) -> bool {
    let binding: Option<ClusterBinding> = consumer.get_typed_opt(None, name).await.ok().flatten();
    binding
        .and_then(|b| b.status)
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

/// Connection `name` as the consumer stores it.
async fn connection(consumer: &dyn ClusterClient, name: &str) -> Option<Connection> {
    consumer.get_typed_opt(None, name).await.ok().flatten()
}

/// When the konnector last renewed its leader Lease (`kbind/kbind-konnector`, the defaults).
pub async fn leader_renewed_at(consumer: &dyn ClusterClient) -> Option<String> {
    let leases = ApiResource::erase::<k8s_openapi::api::coordination::v1::Lease>(&());
    let lease = consumer
        .get_opt(&leases, Some(crate::world::NAMESPACE), "kbind-konnector")
        .await
        .ok()??;
    lease.data.pointer("/spec/renewTime").map(Value::to_string)
}

/// The reason of Connection `name`'s condition `type_` when its status is `want`.
async fn connection_reason(consumer: &dyn ClusterClient, name: &str, type_: &str, want: &str) -> Option<String> {
    let conn = connection(consumer, name).await?;
    let found = conditions::find(&conn.status?.conditions, type_)?.clone();
    (found.status == want).then_some(found.reason)
}

async fn get(client: &dyn ClusterClient, name: &str) -> Option<DynamicObject> {
    client.get_opt(&widgets(), Some(NS), name).await.ok().flatten()
}

fn annotation_of(obj: &DynamicObject, key: &str) -> Option<String> {
    obj.metadata.annotations.as_ref()?.get(key).cloned()
}

async fn ensure_namespace(client: &dyn ClusterClient) {
    let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    if client.get_opt(&namespaces, None, NS).await.ok().flatten().is_none() {
        let body: DynamicObject = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS},
        }))
        .expect("a namespace object");
        // Another writer may create it first; the read below is what counts.
        let _ = client.create(&namespaces, None, &body, &Default::default()).await;
    }
}

async fn create_widget(stage: &impl Stage, client: &dyn ClusterClient, name: &str, spec: Value) -> DynamicObject {
    ensure_namespace(client).await;
    client
        .create(&widgets(), Some(NS), &widget(NS, name, spec), &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] creating widget {name}: {e}", stage.backend()))
}

async fn merge(stage: &impl Stage, client: &dyn ClusterClient, name: &str, patch: Value, status: bool) {
    let result = if status {
        client
            .patch_status(
                &widgets(),
                Some(NS),
                name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
    } else {
        client
            .patch(
                &widgets(),
                Some(NS),
                name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
    };
    result.unwrap_or_else(|e| panic!("[{}] patching widget {name}: {e}", stage.backend()));
}

/// Waits until widget `name` on `client` exists and `holds`.
async fn widget_where(
    stage: &mut impl Stage,
    what: &str,
    client: &std::sync::Arc<dyn ClusterClient>,
    name: &str,
    holds: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let what = format!("[{}] {what}", stage.backend());
    let holds = &holds;
    stage
        .eventually(&what, || async move {
            get(client.as_ref(), name).await.filter(|o| holds(o))
        })
        .await
}

/// The Go POC's flow: create → spec up → status down with observedGeneration translated →
/// update → delete through the provider.
pub async fn main_flow(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    create_widget(stage, consumer.as_ref(), "main", json!({"size": 3, "color": "blue"})).await;
    let copy = widget_where(stage, "the copy arrives on the provider", &provider, "main", |c| {
        c.data["spec"]["size"] == json!(3)
    })
    .await;
    let copy_generation = copy.metadata.generation.unwrap_or_default();
    let status = json!({"status": {"phase": "Ready", "observedGeneration": copy_generation}});
    merge(stage, provider.as_ref(), "main", status, true).await;
    let mine = widget_where(stage, "the status comes down", &consumer, "main", |w| {
        w.data["status"]["phase"] == json!("Ready")
    })
    .await;
    assert_eq!(
        mine.data["status"]["observedGeneration"],
        json!(mine.metadata.generation.unwrap_or_default()),
        "[{}] observedGeneration is translated to the consumer's generation",
        stage.backend()
    );
    merge(stage, consumer.as_ref(), "main", json!({"spec": {"size": 5}}), false).await;
    widget_where(stage, "the update goes up", &provider, "main", |c| {
        c.data["spec"]["size"] == json!(5)
    })
    .await;
    consumer
        .delete(&widgets(), Some(NS), "main", &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] deleting widget main: {e}", stage.backend()));
    let what = format!(
        "[{}] the delete goes through the provider and completes",
        stage.backend()
    );
    let (consumer, provider) = (&consumer, &provider);
    stage
        .eventually(&what, || async move {
            let gone = get(provider.as_ref(), "main").await.is_none() && get(consumer.as_ref(), "main").await.is_none();
            gone.then_some(())
        })
        .await;
}

/// Fail, the default policy: a provider object kbind did not write keeps its spec, and the
/// consumer object says why it is not synced.
pub async fn fail_conflict(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    create_widget(stage, provider.as_ref(), "taken", json!({"size": 9})).await;
    create_widget(stage, consumer.as_ref(), "taken", json!({"size": 1})).await;
    widget_where(
        stage,
        "the consumer object is marked conflicted",
        &consumer,
        "taken",
        |w| annotation_of(w, annotation::CONFLICT).is_some(),
    )
    .await;
    stage.settle().await;
    let foreign = get(provider.as_ref(), "taken").await;
    let foreign = foreign.unwrap_or_else(|| panic!("[{}] the foreign provider object was deleted", stage.backend()));
    assert_eq!(
        foreign.data["spec"]["size"],
        json!(9),
        "[{}] foreign spec kept",
        stage.backend()
    );
    assert!(
        foreign
            .metadata
            .annotations
            .unwrap_or_default()
            .keys()
            .all(|k| !k.starts_with("core.kbind.io/")),
        "[{}] no kbind marker on the foreign object",
        stage.backend()
    );
}

/// A provider rebuilt with a new identity at the same address, where the credential still works:
/// Connected=False/ClusterIdentityChanged and nothing written there by the konnector.
pub async fn identity_change(stage: &mut impl Stage) {
    let consumer = stage.consumer();
    create_widget(stage, consumer.as_ref(), "before", json!({"size": 2})).await;
    let provider = stage.provider();
    widget_where(stage, "the copy arrives before the swap", &provider, "before", |_| true).await;
    stage.replace_provider().await;
    let what = format!("[{}] Connected=False with ClusterIdentityChanged", stage.backend());
    let (watched, name) = (&consumer, stage.connection());
    stage
        .eventually(&what, || async move {
            let why = connection_reason(watched.as_ref(), name, condition::CONNECTED, status::FALSE).await;
            (why.as_deref() == Some(reason::CLUSTER_IDENTITY_CHANGED)).then_some(())
        })
        .await;
    create_widget(stage, consumer.as_ref(), "after", json!({"size": 4})).await;
    stage.settle().await;
    let fresh = stage.provider();
    for name in ["before", "after"] {
        assert!(
            get(fresh.as_ref(), name).await.is_none(),
            "[{}] widget {name} was written to the new cluster",
            stage.backend()
        );
    }
    let leases = ApiResource::erase::<k8s_openapi::api::coordination::v1::Lease>(&());
    let heartbeats = fresh
        .list(&leases, Some(crate::world::NAMESPACE), &Default::default())
        .await;
    assert!(
        heartbeats.map(|l| l.items.is_empty()).unwrap_or(true),
        "[{}] a heartbeat Lease was written to the new cluster",
        stage.backend()
    );
    assert!(
        get(consumer.as_ref(), "before").await.is_some(),
        "[{}] nothing is deleted on the consumer",
        stage.backend()
    );
}

/// A partition: Ready=False, the status marked stale, nothing deleted; a change made meanwhile
/// arrives after the heal and the mark goes.
pub async fn connection_loss(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    create_widget(stage, consumer.as_ref(), "kept", json!({"size": 1})).await;
    widget_where(stage, "the copy arrives", &provider, "kept", |_| true).await;
    stage.partition().await;
    let what = format!("[{}] the Connection is not Ready", stage.backend());
    let (watched, name) = (&consumer, stage.connection());
    stage
        .eventually(&what, || async move {
            connection_reason(watched.as_ref(), name, condition::READY, status::FALSE)
                .await
                .map(|_| ())
        })
        .await;
    widget_where(stage, "the status is marked stale", &consumer, "kept", |w| {
        annotation_of(w, annotation::STATUS_STALE).is_some()
    })
    .await;
    merge(stage, consumer.as_ref(), "kept", json!({"spec": {"size": 7}}), false).await;
    stage.heal().await;
    widget_where(
        stage,
        "the change made during the partition arrives",
        &provider,
        "kept",
        |c| c.data["spec"]["size"] == json!(7),
    )
    .await;
    widget_where(stage, "the stale mark goes", &consumer, "kept", |w| {
        annotation_of(w, annotation::STATUS_STALE).is_none()
    })
    .await;
}

/// A syncer that cannot list or watch its API on the provider says so — the
/// API's `Synced` turns `WatchFailed` naming the side and the answer, the binding is not Ready —
/// and turns Ready again once the provider lets it watch; a widget created then syncs.
pub async fn a_syncer_that_cannot_watch_says_so(stage: &mut impl Stage) {
    let consumer = stage.consumer();
    let binding = stage.cluster_binding();
    let (c, b) = (&consumer, binding);
    stage
        .eventually("the binding is Ready", || async move {
            binding_ready(c.as_ref(), b).await.then_some(())
        })
        .await;
    stage.refuse_widget_watches().await;
    let message = stage
        .eventually("the API says its provider watch fails", || async move {
            let binding: ClusterBinding = c.get_typed_opt(None, b).await.ok().flatten()?;
            let api = binding
                .status?
                .bound_apis
                .into_iter()
                .find(|a| a.name == "widgets.example.org")?;
            let synced = conditions::find(&api.conditions, condition::SYNCED)?.clone();
            (synced.reason == reason::WATCH_FAILED).then_some(synced.message)
        })
        .await;
    assert!(
        message.contains("widgets.example.org on the provider failed") && message.contains("403"),
        "{}: {message}",
        stage.backend()
    );
    assert!(
        !binding_ready(consumer.as_ref(), binding).await,
        "{}: Ready while the syncer cannot watch",
        stage.backend()
    );
    stage.allow_widget_watches().await;
    stage
        .eventually("the binding is Ready again", || async move {
            binding_ready(c.as_ref(), b).await.then_some(())
        })
        .await;
    create_widget(stage, consumer.as_ref(), "after-the-refusal", json!({"size": 1})).await;
    let provider = stage.provider();
    let p = &provider;
    stage
        .eventually("the widget reaches the provider", || async move {
            get(p.as_ref(), "after-the-refusal").await.map(|_| ())
        })
        .await;
}
