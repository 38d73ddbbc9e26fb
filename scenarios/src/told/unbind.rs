//! The unbind stories where data could be lost, told on any [`Stage`]: unbinding with Orphan while the
//! provider is gone, hand-over between ClusterBindings and Bindings, a Binding naming a
//! cluster-scoped API, and provider namespace removal. Each asserts through the API only: UIDs
//! read before and after say whether an object was kept or deleted and re-created.

use std::sync::Arc;

use kbind_api::consts::{BINDING_NAMESPACES_ALL, DELETION_POLICY_ORPHAN, TRUE, annotation, condition, finalizer};
use kbind_api::consts::{label, reason, status};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::apis::{exported_crd, widget, widgets};
use crate::stage::Stage;

/// The API every stage binds.
const WIDGETS: &str = "widgets.example.org";
/// A cluster-scoped API the provider exports for the Binding story.
const GADGETS: &str = "gadgets.example.org";
/// The namespace the stories' Bindings live in.
const TEAM: &str = "team-a";
/// A namespace only the ClusterBinding serves.
const ELSEWHERE: &str = "elsewhere";

fn cluster_bindings() -> ApiResource {
    ApiResource::erase::<kbind_api::ClusterBinding>(&())
}

fn bindings() -> ApiResource {
    ApiResource::erase::<kbind_api::Binding>(&())
}

fn connections() -> ApiResource {
    ApiResource::erase::<kbind_api::Connection>(&())
}

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

fn config_maps() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::ConfigMap>(&())
}

fn crds() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

/// The binding resource for `namespace`: a Binding there, or a ClusterBinding.
fn binding_resource(namespace: Option<&str>) -> ApiResource {
    if namespace.is_some() {
        bindings()
    } else {
        cluster_bindings()
    }
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("a story object is a valid object: {e}"))
}

/// A binding of `apis` through `connection`: a Binding in `namespace`, or a ClusterBinding.
fn binding(namespace: Option<&str>, name: &str, connection: &str, apis: &[&str]) -> DynamicObject {
    let apis: Vec<Value> = apis.iter().map(|a| json!({"name": a})).collect();
    let mut metadata = json!({"name": name});
    if let Some(ns) = namespace {
        metadata["namespace"] = json!(ns);
    }
    let kind = if namespace.is_some() {
        "Binding"
    } else {
        "ClusterBinding"
    };
    object(json!({
        "apiVersion": kbind_api::consts::API_VERSION, "kind": kind, "metadata": metadata,
        "spec": {"connectionRef": {"name": connection}, "apis": apis},
    }))
}

async fn read(
    client: &dyn ClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Option<DynamicObject> {
    client.get_opt(res, namespace, name).await.ok().flatten()
}

fn uid(obj: &DynamicObject) -> String {
    obj.metadata.uid.clone().unwrap_or_default()
}

async fn create(
    stage: &impl Stage,
    client: &dyn ClusterClient,
    res: &ApiResource,
    obj: DynamicObject,
) -> DynamicObject {
    let namespace = obj.metadata.namespace.clone();
    let name = obj.metadata.name.clone().unwrap_or_default();
    client
        .create(res, namespace.as_deref(), &obj, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] creating {} {name}: {e}", stage.backend(), res.kind))
}

async fn ensure_namespace(stage: &impl Stage, client: &dyn ClusterClient, ns: &str) {
    if read(client, &namespaces(), None, ns).await.is_none() {
        let body = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
        create(stage, client, &namespaces(), body).await;
    }
}

async fn annotate(
    stage: &impl Stage,
    client: &dyn ClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
    name: &str,
    key: &str,
    value: &str,
) {
    let patch = json!({"metadata": {"annotations": {key: value}}});
    client
        .patch(res, namespace, name, &Patch::Merge(patch), &PatchParams::default())
        .await
        .unwrap_or_else(|e| panic!("[{}] annotating {} {name}: {e}", stage.backend(), res.kind));
}

/// Lets Bindings in every namespace use the stage's Connection.
async fn allow_bindings(stage: &impl Stage) {
    let consumer = stage.consumer();
    let key = annotation::BINDING_NAMESPACES;
    annotate(
        stage,
        consumer.as_ref(),
        &connections(),
        None,
        stage.connection(),
        key,
        BINDING_NAMESPACES_ALL,
    )
    .await;
}

fn condition_of(obj: &Value, type_: &str) -> Option<(String, String)> {
    let found = obj.get("conditions")?.as_array()?.iter().find(|c| c["type"] == type_)?;
    Some((
        found["status"].as_str()?.to_string(),
        found["reason"].as_str()?.to_string(),
    ))
}

/// Waits until `res` `namespace/name` exists and satisfies `holds`.
async fn wait_for(
    stage: &mut impl Stage,
    what: &str,
    client: &Arc<dyn ClusterClient>,
    res: &ApiResource,
    at: (Option<&str>, &str),
    holds: impl Fn(&DynamicObject) -> bool,
) -> DynamicObject {
    let what = format!("[{}] {what}", stage.backend());
    let (holds, (namespace, name)) = (&holds, at);
    stage
        .eventually(&what, || async move {
            read(client.as_ref(), res, namespace, name).await.filter(|o| holds(o))
        })
        .await
}

/// Waits until `res` `namespace/name` is gone, or terminating when `terminating_will_do`.
async fn wait_gone(
    stage: &mut impl Stage,
    what: &str,
    client: &Arc<dyn ClusterClient>,
    res: &ApiResource,
    at: (Option<&str>, &str),
    terminating_will_do: bool,
) {
    let what = format!("[{}] {what}", stage.backend());
    let (namespace, name) = at;
    stage
        .eventually(&what, || async move {
            let found = read(client.as_ref(), res, namespace, name).await;
            found
                .is_none_or(|o| terminating_will_do && o.metadata.deletion_timestamp.is_some())
                .then_some(())
        })
        .await;
}

/// Creates a binding of `apis` and waits until it is Ready.
async fn bind(stage: &mut impl Stage, namespace: Option<&str>, name: &str, apis: &[&str]) {
    let consumer = stage.consumer();
    let res = binding_resource(namespace);
    create(
        stage,
        consumer.as_ref(),
        &res,
        binding(namespace, name, stage.connection(), apis),
    )
    .await;
    let what = format!("{} {name} is Ready", res.kind);
    wait_for(stage, &what, &consumer, &res, (namespace, name), |b| {
        condition_of(&b.data["status"], condition::READY).is_some_and(|(s, _)| s == status::TRUE)
    })
    .await;
}

/// Deletes a binding as a user does and waits until it is gone.
async fn unbind(stage: &mut impl Stage, namespace: Option<&str>, name: &str) {
    let consumer = stage.consumer();
    let res = binding_resource(namespace);
    stage.delete(&res, namespace, name).await;
    wait_gone(
        stage,
        &format!("{} {name} goes away", res.kind),
        &consumer,
        &res,
        (namespace, name),
        false,
    )
    .await;
}

/// A widget the user created, and its provider copy once it arrived: (consumer UID, copy UID).
async fn synced_widget(stage: &mut impl Stage, ns: &str, name: &str) -> (String, String) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    ensure_namespace(stage, consumer.as_ref(), ns).await;
    let mine = create(
        stage,
        consumer.as_ref(),
        &widgets(),
        widget(ns, name, json!({"size": 1})),
    )
    .await;
    let what = format!("the copy of {ns}/{name} arrives on the provider");
    let copy = wait_for(stage, &what, &provider, &widgets(), (Some(ns), name), |_| true).await;
    (uid(&mine), uid(&copy))
}

/// Fails the story unless `res` `namespace/name` on `client` is still the object with `want`
/// as its UID and is not being deleted.
async fn assert_kept(
    stage: &impl Stage,
    client: &dyn ClusterClient,
    res: &ApiResource,
    at: (Option<&str>, &str),
    want: &str,
    what: &str,
) {
    let (namespace, name) = at;
    let found = read(client, res, namespace, name).await;
    let found = found.unwrap_or_else(|| panic!("[{}] {what}: {} {name} was deleted", stage.backend(), res.kind));
    assert_eq!(
        uid(&found),
        want,
        "[{}] {what}: {} {name} was deleted and re-created",
        stage.backend(),
        res.kind
    );
    assert!(
        found.metadata.deletion_timestamp.is_none(),
        "[{}] {what}: {} {name} is being deleted",
        stage.backend(),
        res.kind
    );
}

/// After a hand-over the remaining binding serves the object: a spec change still goes up.
async fn still_synced(stage: &mut impl Stage, ns: &str, name: &str) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    consumer
        .patch(
            &widgets(),
            Some(ns),
            name,
            &Patch::Merge(json!({"spec": {"size": 6}})),
            &PatchParams::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] resizing widget {ns}/{name}: {e}", stage.backend()));
    let what = format!("a change to {ns}/{name} goes up through the remaining binding");
    wait_for(stage, &what, &provider, &widgets(), (Some(ns), name), |c| {
        c.data["spec"]["size"] == json!(6)
    })
    .await;
}

/// The provider is gone for good; Orphan on the binding and the Connection
/// lets both go and deletes nothing on either side.
pub async fn orphan_deletes_nothing(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    let objects = [("default", "o1"), (TEAM, "o2")];
    let mut uids = Vec::new();
    for (ns, name) in objects {
        uids.push(synced_widget(stage, ns, name).await);
    }
    let crd = read(consumer.as_ref(), &crds(), None, WIDGETS).await;
    let crd_uid = uid(&crd.unwrap_or_else(|| panic!("[{}] the consumer CRD was pulled", stage.backend())));

    stage.partition().await;
    let what = format!("[{}] the Connection is not Ready", stage.backend());
    let (watched, name) = (&consumer, stage.connection());
    stage
        .eventually(&what, || async move {
            let conn = read(watched.as_ref(), &connections(), None, name).await?;
            let (ready, _) = condition_of(&conn.data["status"], condition::READY)?;
            (ready == status::FALSE).then_some(())
        })
        .await;
    let (binding_name, connection) = (stage.cluster_binding(), stage.connection());
    let key = annotation::DELETION_POLICY;
    annotate(
        stage,
        consumer.as_ref(),
        &cluster_bindings(),
        None,
        binding_name,
        key,
        DELETION_POLICY_ORPHAN,
    )
    .await;
    annotate(
        stage,
        consumer.as_ref(),
        &connections(),
        None,
        connection,
        key,
        DELETION_POLICY_ORPHAN,
    )
    .await;
    stage.delete(&cluster_bindings(), None, binding_name).await;
    stage.delete(&connections(), None, connection).await;
    wait_gone(
        stage,
        "the orphaned ClusterBinding goes away",
        &consumer,
        &cluster_bindings(),
        (None, binding_name),
        false,
    )
    .await;
    wait_gone(
        stage,
        "the orphaned Connection goes away",
        &consumer,
        &connections(),
        (None, connection),
        false,
    )
    .await;
    for (ns, name) in objects {
        let what = format!("[{}] the syncer finalizer of {ns}/{name} is released", stage.backend());
        let watched = &consumer;
        let released = stage
            .eventually(&what, || async move {
                // Gone is an answer too: the story fails on it below instead of waiting.
                let Some(w) = read(watched.as_ref(), &widgets(), Some(ns), name).await else {
                    return Some(false);
                };
                let held = w.metadata.finalizers.iter().flatten().any(|f| f == finalizer::SYNCER);
                (!held).then_some(true)
            })
            .await;
        assert!(
            released,
            "[{}] Orphan keeps the consumer side: widget {ns}/{name} was deleted",
            stage.backend()
        );
    }
    stage.settle().await;
    let what = "Orphan keeps the consumer side";
    assert_kept(stage, consumer.as_ref(), &crds(), (None, WIDGETS), &crd_uid, what).await;
    for ((ns, name), (mine, _)) in objects.iter().zip(&uids) {
        assert_kept(stage, consumer.as_ref(), &widgets(), (Some(ns), name), mine, what).await;
    }

    stage.heal().await;
    stage.settle().await;
    for ((ns, name), (_, copy)) in objects.iter().zip(&uids) {
        assert_kept(
            stage,
            provider.as_ref(),
            &widgets(),
            (Some(ns), name),
            copy,
            "Orphan keeps the provider copies",
        )
        .await;
    }
}

/// ClusterBinding → Binding. Deleting the ClusterBinding keeps the copies the
/// Binding serves with their UIDs and drains only the other namespace's.
pub async fn hand_over_cluster_binding_to_binding(stage: &mut impl Stage) {
    let (consumer, provider) = (stage.consumer(), stage.provider());
    allow_bindings(stage).await;
    ensure_namespace(stage, consumer.as_ref(), TEAM).await;
    bind(stage, Some(TEAM), "team-widgets", &[WIDGETS]).await;
    let (_, kept) = synced_widget(stage, TEAM, "w").await;
    let (drained, _) = synced_widget(stage, ELSEWHERE, "w").await;
    let crd = read(consumer.as_ref(), &crds(), None, WIDGETS).await;
    let crd_uid = uid(&crd.unwrap_or_else(|| panic!("[{}] the consumer CRD was pulled", stage.backend())));

    let cluster_binding = stage.cluster_binding();
    unbind(stage, None, cluster_binding).await;
    let what = "the copy only the ClusterBinding served is drained";
    wait_gone(stage, what, &provider, &widgets(), (Some(ELSEWHERE), "w"), false).await;
    stage.settle().await;
    let what = "the Binding still serves team-a";
    assert_kept(stage, provider.as_ref(), &widgets(), (Some(TEAM), "w"), &kept, what).await;
    assert_kept(stage, consumer.as_ref(), &crds(), (None, WIDGETS), &crd_uid, what).await;
    let what = "draining leaves the consumer object";
    assert_kept(
        stage,
        consumer.as_ref(),
        &widgets(),
        (Some(ELSEWHERE), "w"),
        &drained,
        what,
    )
    .await;
    still_synced(stage, TEAM, "w").await;
}

/// Binding → ClusterBinding. Deleting the Binding keeps its copies, which
/// the ClusterBinding serves too.
pub async fn hand_over_binding_to_cluster_binding(stage: &mut impl Stage) {
    let provider = stage.provider();
    allow_bindings(stage).await;
    let consumer = stage.consumer();
    ensure_namespace(stage, consumer.as_ref(), TEAM).await;
    bind(stage, Some(TEAM), "team-widgets", &[WIDGETS]).await;
    let (_, kept) = synced_widget(stage, TEAM, "w").await;

    unbind(stage, Some(TEAM), "team-widgets").await;
    stage.settle().await;
    let what = "the ClusterBinding still serves team-a";
    assert_kept(stage, provider.as_ref(), &widgets(), (Some(TEAM), "w"), &kept, what).await;
    still_synced(stage, TEAM, "w").await;
}

/// Binding → Binding in one namespace (the ClusterBinding handed over
/// first): deleting one keeps the copies the other serves.
pub async fn hand_over_binding_to_binding(stage: &mut impl Stage) {
    let provider = stage.provider();
    allow_bindings(stage).await;
    let consumer = stage.consumer();
    ensure_namespace(stage, consumer.as_ref(), TEAM).await;
    bind(stage, Some(TEAM), "first", &[WIDGETS]).await;
    let cluster_binding = stage.cluster_binding();
    unbind(stage, None, cluster_binding).await;
    bind(stage, Some(TEAM), "second", &[WIDGETS]).await;
    let (_, kept) = synced_widget(stage, TEAM, "w").await;

    unbind(stage, Some(TEAM), "first").await;
    stage.settle().await;
    let what = "Binding second still serves team-a";
    assert_kept(stage, provider.as_ref(), &widgets(), (Some(TEAM), "w"), &kept, what).await;
    still_synced(stage, TEAM, "w").await;
}

/// A Binding naming a cluster-scoped API says so per API and can be deleted,
/// with and without Orphan.
pub async fn binding_naming_a_cluster_scoped_api(stage: &mut impl Stage) {
    let consumer = stage.consumer();
    stage.export_api(exported_crd("gadgets", "Gadget", "Cluster")).await;
    // The consumer CRD is there, so listing gadgets in a namespace is what a careless Binding does.
    let pull_all = json!({"spec": {"schema": {"pullPolicy": "All"}}});
    consumer
        .patch(
            &connections(),
            None,
            stage.connection(),
            &Patch::Merge(pull_all),
            &PatchParams::default(),
        )
        .await
        .unwrap_or_else(|e| panic!("[{}] setting pullPolicy All: {e}", stage.backend()));
    let what = format!("the consumer CRD {GADGETS} is pulled");
    wait_for(stage, &what, &consumer, &crds(), (None, GADGETS), |_| true).await;
    allow_bindings(stage).await;
    ensure_namespace(stage, consumer.as_ref(), TEAM).await;
    for (name, orphan) in [("gadgets", false), ("gadgets-orphaned", true)] {
        let body = binding(Some(TEAM), name, stage.connection(), &[GADGETS]);
        create(stage, consumer.as_ref(), &bindings(), body).await;
        let what = format!("Binding {name} reports Synced=False/ClusterScopedAPIInBinding for {GADGETS}");
        wait_for(stage, &what, &consumer, &bindings(), (Some(TEAM), name), |b| {
            let apis = b.data.pointer("/status/boundAPIs").and_then(Value::as_array);
            let entry = apis.and_then(|a| a.iter().find(|e| e["name"] == GADGETS));
            entry.and_then(|e| condition_of(e, condition::SYNCED))
                == Some((
                    status::FALSE.to_string(),
                    reason::CLUSTER_SCOPED_API_IN_BINDING.to_string(),
                ))
        })
        .await;
        if orphan {
            let key = annotation::DELETION_POLICY;
            annotate(
                stage,
                consumer.as_ref(),
                &bindings(),
                Some(TEAM),
                name,
                key,
                DELETION_POLICY_ORPHAN,
            )
            .await;
        }
        unbind(stage, Some(TEAM), name).await;
    }
}

/// Unbinding removes a provider namespace kbind created only when nothing but
/// its drained copies was in it; one holding an object kbind did not write stays.
pub async fn provider_namespace_removal(stage: &mut impl Stage) {
    let provider = stage.provider();
    stage.allow_namespace_removal().await;
    for ns in ["emptied", "kept"] {
        synced_widget(stage, ns, "w").await;
        let made = read(provider.as_ref(), &namespaces(), None, ns).await;
        let made = made.unwrap_or_else(|| panic!("[{}] provider namespace {ns} exists", stage.backend()));
        let managed = made.metadata.labels.as_ref().and_then(|l| l.get(label::MANAGED));
        assert_eq!(
            managed.map(String::as_str),
            Some(TRUE),
            "[{}] kbind created provider namespace {ns}",
            stage.backend()
        );
    }
    let notes = object(json!({"apiVersion": "v1", "kind": "ConfigMap",
                              "metadata": {"name": "provider-notes", "namespace": "kept"}}));
    let notes_uid = uid(&create(stage, provider.as_ref(), &config_maps(), notes).await);
    let kept = read(provider.as_ref(), &namespaces(), None, "kept").await;
    let kept_uid = uid(&kept.unwrap_or_else(|| panic!("[{}] provider namespace kept exists", stage.backend())));

    let cluster_binding = stage.cluster_binding();
    unbind(stage, None, cluster_binding).await;
    for ns in ["emptied", "kept"] {
        let what = format!("the copy in {ns} is drained");
        wait_gone(stage, &what, &provider, &widgets(), (Some(ns), "w"), false).await;
    }
    let what = "the namespace with nothing but drained copies goes";
    wait_gone(stage, what, &provider, &namespaces(), (None, "emptied"), true).await;
    stage.settle().await;
    let what = "a namespace holding the provider's own object stays";
    assert_kept(stage, provider.as_ref(), &namespaces(), (None, "kept"), &kept_uid, what).await;
    assert_kept(
        stage,
        provider.as_ref(),
        &config_maps(),
        (Some("kept"), "provider-notes"),
        &notes_uid,
        what,
    )
    .await;
}
