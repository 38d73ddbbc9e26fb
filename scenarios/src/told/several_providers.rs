//! contract §4 "Connections per API" told on any [`TwoProviders`] stage: one consumer API served
//! by two providers, each namespace through exactly one Connection. A binding that would make two
//! Connections serve one namespace (or a ClusterBinding beside another Connection's Binding) gets
//! `BoundThroughAnotherConnection` and syncs nothing, never a takeover; an incompatible second
//! schema is refused naming both Connections; a namespace moves between providers by deleting one
//! Binding, with every consumer object kept (same UID), also when the konnector is killed
//! mid-hand-over, and a related copy moves with its namespace. Asserted through the API only,
//! plus the fake stage's write log where [`TwoProviders::widget_writes`] counts.

use std::collections::BTreeMap;
use std::sync::Arc;

use kbind_api::consts::{annotation, condition, finalizer, label, reason};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use serde_json::{Value, json};

use crate::apis::{widget, widgets};
use crate::stage::TwoProviders;

/// The bound API.
const API: &str = "widgets.example.org";

fn bindings() -> ApiResource {
    ApiResource::erase::<kbind_api::Binding>(&())
}

fn cluster_bindings() -> ApiResource {
    ApiResource::erase::<kbind_api::ClusterBinding>(&())
}

fn crds() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

fn object(value: Value) -> DynamicObject {
    serde_json::from_value(value).unwrap_or_else(|e| panic!("a story object is a valid object: {e}"))
}

/// beta's widgets when its schema is incompatible: `size` only, so acme's `color` and `config`
/// would be dropped there.
pub fn widgets_crd_without_color() -> Value {
    let mut crd = crate::apis::widgets_crd();
    let props = "/spec/versions/0/schema/openAPIV3Schema/properties/spec/properties";
    if let Some(props) = crd.pointer_mut(props).and_then(Value::as_object_mut) {
        props.remove("color");
        props.remove("config");
    }
    crd
}

fn annotation_of<'a>(obj: &'a DynamicObject, key: &str) -> Option<&'a str> {
    obj.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The `core.kbind.io/connection` label of a consumer object.
fn connection_label(obj: &DynamicObject) -> Option<&str> {
    obj.metadata.labels.as_ref()?.get(label::CONNECTION).map(String::as_str)
}

fn has_syncer_finalizer(obj: &DynamicObject) -> bool {
    obj.metadata.finalizers.iter().flatten().any(|f| f == finalizer::SYNCER)
}

/// The per-API `Synced` condition of widgets on a binding: status, reason and message.
fn synced(binding: &DynamicObject) -> Option<(String, String, String)> {
    let apis = binding.data.pointer("/status/boundAPIs")?.as_array()?;
    let api = apis.iter().find(|a| a["name"] == API)?;
    let c = api["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == condition::SYNCED)?;
    let field = |k: &str| c[k].as_str().unwrap_or_default().to_string();
    Some((field("status"), field("reason"), field("message")))
}

fn ready(binding: &DynamicObject) -> bool {
    binding
        .data
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter()
                .any(|c| c["type"] == condition::READY && c["status"] == "True")
        })
}

/// What a story reads and writes on a [`TwoProviders`] stage, as the clusters' admins; apart from
/// the stage so a check can read while [`crate::Stage::eventually`] holds the stage.
struct View {
    backend: &'static str,
    consumer: Arc<dyn ClusterClient>,
    providers: BTreeMap<&'static str, Arc<dyn ClusterClient>>,
}

impl View {
    fn of(stage: &impl TwoProviders) -> Self {
        Self {
            backend: stage.backend(),
            consumer: stage.consumer(),
            providers: stage
                .connections()
                .into_iter()
                .map(|c| (c, stage.provider_of(c)))
                .collect(),
        }
    }

    fn provider(&self, connection: &str) -> &dyn ClusterClient {
        self.providers
            .get(connection)
            .unwrap_or_else(|| panic!("no provider behind {connection}"))
            .as_ref()
    }

    async fn ensure_namespace(&self, ns: &str) {
        if self
            .consumer
            .get_opt(&namespaces(), None, ns)
            .await
            .ok()
            .flatten()
            .is_none()
        {
            let body = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}));
            // Another writer may create it first; the read below is what counts.
            let _ = self
                .consumer
                .create(&namespaces(), None, &body, &Default::default())
                .await;
        }
    }

    /// Creates Binding `ns/name` of widgets through `connection`, its namespace first.
    async fn bind(&self, connection: &str, ns: &str, name: &str) {
        self.ensure_namespace(ns).await;
        let body = object(json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}}));
        self.consumer
            .create(&bindings(), Some(ns), &body, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("[{}] creating Binding {ns}/{name}: {e}", self.backend));
    }

    /// Creates ClusterBinding `name` of widgets through `connection`.
    async fn bind_cluster(&self, connection: &str, name: &str) {
        let body = object(json!({"apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
            "metadata": {"name": name},
            "spec": {"connectionRef": {"name": connection}, "apis": [{"name": API}]}}));
        self.consumer
            .create(&cluster_bindings(), None, &body, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("[{}] creating ClusterBinding {name}: {e}", self.backend));
    }

    /// The Binding `ns/name`, or the ClusterBinding `name` when `ns` is `None`.
    async fn binding(&self, ns: Option<&str>, name: &str) -> Option<DynamicObject> {
        let res = if ns.is_some() { bindings() } else { cluster_bindings() };
        self.consumer.get_opt(&res, ns, name).await.ok().flatten()
    }

    /// Sets the related rules of Binding `ns/name`.
    async fn set_rules(&self, ns: &str, name: &str, rules: &Value) {
        self.consumer
            .patch(
                &bindings(),
                Some(ns),
                name,
                &Patch::Merge(json!({"spec": {"relatedResources": rules}})),
                &PatchParams::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("[{}] setting the related rules of {ns}/{name}: {e}", self.backend));
    }

    async fn create_widget(&self, ns: &str, name: &str, spec: Value) -> DynamicObject {
        self.ensure_namespace(ns).await;
        self.consumer
            .create(&widgets(), Some(ns), &widget(ns, name, spec), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("[{}] creating widget {ns}/{name}: {e}", self.backend))
    }

    async fn patch_widget(&self, client: &dyn ClusterClient, ns: &str, name: &str, patch: Value) {
        client
            .patch(
                &widgets(),
                Some(ns),
                name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
            .unwrap_or_else(|e| panic!("[{}] patching widget {ns}/{name}: {e}", self.backend));
    }

    async fn widget(&self, ns: &str, name: &str) -> Option<DynamicObject> {
        self.consumer.get_opt(&widgets(), Some(ns), name).await.ok().flatten()
    }

    async fn copy(&self, connection: &str, ns: &str, name: &str) -> Option<DynamicObject> {
        self.provider(connection)
            .get_opt(&widgets(), Some(ns), name)
            .await
            .ok()
            .flatten()
    }

    /// Every widget on the provider behind `connection`, as `namespace/name`, sorted.
    async fn copies(&self, connection: &str) -> Vec<String> {
        let list = self
            .provider(connection)
            .list(&widgets(), None, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("[{}] listing widgets on {connection}: {e}", self.backend));
        let mut names: Vec<String> = list
            .items
            .iter()
            .map(|w| {
                format!(
                    "{}/{}",
                    w.metadata.namespace.as_deref().unwrap_or_default(),
                    w.metadata.name.as_deref().unwrap_or_default()
                )
            })
            .collect();
        names.sort();
        names
    }

    /// The consumer CRD's `core.kbind.io/connection` annotation.
    async fn crd_connection(&self) -> Option<String> {
        let crd = self.consumer.get_opt(&crds(), None, API).await.ok()??;
        annotation_of(&crd, annotation::CONNECTION).map(str::to_string)
    }

    async fn crd_version(&self) -> Option<String> {
        let crd = self.consumer.get_opt(&crds(), None, API).await.ok()??;
        crd.metadata.resource_version
    }
}

/// Waits until the per-API `Synced` of widgets on the binding has `reason`; its message.
async fn synced_reason(
    stage: &mut impl TwoProviders,
    view: &View,
    ns: Option<&str>,
    name: &str,
    reason: &str,
) -> String {
    let what = format!(
        "[{}] {} {name}: widgets Synced reason {reason}",
        view.backend,
        ns.unwrap_or("cluster")
    );
    stage
        .eventually(&what, || async move {
            let (_, r, message) = synced(&view.binding(ns, name).await?)?;
            (r == reason).then_some(message)
        })
        .await
}

/// Waits until the binding is Ready and its widgets Synced.
async fn serving(stage: &mut impl TwoProviders, view: &View, ns: Option<&str>, name: &str) {
    let what = format!("[{}] {} {name} serves widgets", view.backend, ns.unwrap_or("cluster"));
    stage
        .eventually(&what, || async move {
            let b = view.binding(ns, name).await?;
            (synced(&b)?.0 == "True" && ready(&b)).then_some(())
        })
        .await;
}

/// Waits for the copy of `ns/name` on the provider behind `connection`.
async fn copy_on(stage: &mut impl TwoProviders, view: &View, connection: &str, ns: &str, name: &str) -> DynamicObject {
    let what = format!("[{}] {ns}/{name} on {connection}", view.backend);
    stage
        .eventually(&what, || async move { view.copy(connection, ns, name).await })
        .await
}

/// Resizes consumer widget `ns/name` and waits until the copy behind `connection` has the size.
async fn resize_and_wait(
    stage: &mut impl TwoProviders,
    view: &View,
    connection: &str,
    ns: &str,
    name: &str,
    size: i64,
) {
    view.patch_widget(view.consumer.as_ref(), ns, name, json!({"spec": {"size": size}}))
        .await;
    let what = format!("[{}] {ns}/{name} resized on {connection}", view.backend);
    stage
        .eventually(&what, || async move {
            let copy = view.copy(connection, ns, name).await?;
            (copy.data.pointer("/spec/size") == Some(&json!(size))).then_some(())
        })
        .await;
}

/// Waits until the binding is gone.
async fn gone(stage: &mut impl TwoProviders, view: &View, ns: Option<&str>, name: &str) {
    let what = format!("[{}] binding {name} is gone", view.backend);
    stage
        .eventually(
            &what,
            || async move { view.binding(ns, name).await.is_none().then_some(()) },
        )
        .await;
}

/// Two Bindings partition the API: team-a through the first provider, team-b through the
/// second, each copy on its own provider only, each consumer object labelled with its
/// Connection, the CRD naming the first; a third Binding of team-a through the second provider
/// is refused naming the serving Connection and the namespace, syncs nothing, and never takes
/// over.
pub async fn two_providers_serve_two_namespaces_and_a_binding_into_a_served_namespace_is_refused(
    stage: &mut impl TwoProviders,
) {
    let view = View::of(stage);
    let [acme, beta] = stage.connections();
    view.bind(acme, "team-a", "widgets").await;
    serving(stage, &view, Some("team-a"), "widgets").await;
    view.bind(beta, "team-b", "widgets").await;
    serving(stage, &view, Some("team-b"), "widgets").await;

    let a = view.create_widget("team-a", "w", json!({"size": 1})).await;
    let b = view.create_widget("team-b", "w", json!({"size": 2})).await;
    let a_copy = copy_on(stage, &view, acme, "team-a", "w").await;
    let b_copy = copy_on(stage, &view, beta, "team-b", "w").await;
    let backend = view.backend;
    assert_eq!(
        annotation_of(&a_copy, annotation::CONSUMER_OBJECT_UID),
        a.metadata.uid.as_deref(),
        "[{backend}] acme's copy is team-a's widget"
    );
    assert_eq!(
        annotation_of(&b_copy, annotation::CONSUMER_OBJECT_UID),
        b.metadata.uid.as_deref(),
        "[{backend}] beta's copy is team-b's widget"
    );
    assert_eq!(
        view.copies(acme).await,
        ["team-a/w"],
        "[{backend}] acme has team-a's widget only"
    );
    assert_eq!(
        view.copies(beta).await,
        ["team-b/w"],
        "[{backend}] beta has team-b's widget only"
    );
    // The label is written with the syncer finalizer, before the copy.
    for (ns, connection) in [("team-a", acme), ("team-b", beta)] {
        let mine = view.widget(ns, "w").await;
        assert_eq!(
            mine.as_ref().and_then(connection_label),
            Some(connection),
            "[{backend}] {ns}/w names its Connection"
        );
    }
    assert_eq!(
        view.crd_connection().await.as_deref(),
        Some(acme),
        "[{backend}] the CRD names the first Connection"
    );

    // A Binding of team-a through beta would make two Connections serve team-a.
    let beta_writes = stage.widget_writes(beta, "team-a");
    view.bind(beta, "team-a", "widgets-beta").await;
    let message = synced_reason(
        stage,
        &view,
        Some("team-a"),
        "widgets-beta",
        reason::BOUND_THROUGH_ANOTHER_CONNECTION,
    )
    .await;
    assert!(
        message.contains(&format!("\"{acme}\"")) && message.contains("team-a"),
        "[{backend}] the refusal names the serving Connection and the namespace: {message}"
    );
    let refused = view.binding(Some("team-a"), "widgets-beta").await;
    assert!(
        !refused.as_ref().is_some_and(ready),
        "[{backend}] the refused Binding is not Ready"
    );
    // acme keeps serving team-a: a new widget and a resize reach acme, nothing reaches beta.
    view.create_widget("team-a", "w2", json!({"size": 3})).await;
    copy_on(stage, &view, acme, "team-a", "w2").await;
    resize_and_wait(stage, &view, acme, "team-a", "w", 5).await;
    stage.settle().await;
    assert_eq!(
        stage.widget_writes(beta, "team-a"),
        beta_writes,
        "[{backend}] beta never writes team-a"
    );
    assert_eq!(
        view.copies(beta).await,
        ["team-b/w"],
        "[{backend}] beta got nothing of team-a"
    );
    for name in ["w", "w2"] {
        let mine = view.widget("team-a", name).await;
        assert_eq!(
            mine.as_ref().and_then(connection_label),
            Some(acme),
            "[{backend}] team-a/{name} names acme"
        );
    }
    assert_eq!(
        view.widget("team-a", "w").await.and_then(|w| w.metadata.uid),
        a.metadata.uid,
        "[{backend}] team-a/w is the same consumer object"
    );
    let serving_now = view.binding(Some("team-a"), "widgets").await;
    assert_eq!(
        serving_now.as_ref().and_then(synced).map(|s| s.0).as_deref(),
        Some("True"),
        "[{backend}] never a takeover"
    );
}

/// Widgets w1..w3 in team-a served through the first provider (team-b through the second) and
/// the second's Binding of team-a refused beside it. The consumer UIDs by name.
async fn team_a_on_acme_with_beta_waiting(
    stage: &mut impl TwoProviders,
    view: &View,
) -> BTreeMap<String, Option<String>> {
    let [acme, beta] = stage.connections();
    view.bind(acme, "team-a", "widgets").await;
    serving(stage, view, Some("team-a"), "widgets").await;
    view.bind(beta, "team-b", "widgets").await;
    serving(stage, view, Some("team-b"), "widgets").await;
    let mut uids = BTreeMap::new();
    for (size, name) in (1..).zip(["w1", "w2", "w3"]) {
        let mine = view.create_widget("team-a", name, json!({"size": size})).await;
        uids.insert(name.to_string(), mine.metadata.uid);
    }
    for name in ["w1", "w2", "w3"] {
        copy_on(stage, view, acme, "team-a", name).await;
    }
    view.bind(beta, "team-a", "widgets-beta").await;
    synced_reason(
        stage,
        view,
        Some("team-a"),
        "widgets-beta",
        reason::BOUND_THROUGH_ANOTHER_CONNECTION,
    )
    .await;
    uids
}

/// The end of a hand-over of team-a to the second provider: the first's copies drained, the
/// second has a copy of every widget, each the same consumer object now labelled with the
/// second Connection and held by its syncer, the CRD kept and claimed by the second, which
/// syncs a change.
async fn handed_over_to_beta(stage: &mut impl TwoProviders, view: &View, uids: &BTreeMap<String, Option<String>>) {
    let [acme, beta] = stage.connections();
    let backend = view.backend;
    let what = format!("[{backend}] acme's copies of team-a drained");
    stage
        .eventually(&what, || async move {
            let left = view
                .provider(acme)
                .list(&widgets(), Some("team-a"), &Default::default())
                .await
                .ok()?;
            left.items.is_empty().then_some(())
        })
        .await;
    for (name, uid) in uids {
        let copy = copy_on(stage, view, beta, "team-a", name).await;
        assert_eq!(
            annotation_of(&copy, annotation::CONSUMER_OBJECT_UID),
            uid.as_deref(),
            "[{backend}] beta's copy of {name} mirrors the same consumer object"
        );
        let what = format!("[{backend}] team-a/{name} names beta");
        let mine = stage
            .eventually(&what, || async move {
                let w = view.widget("team-a", name).await?;
                (connection_label(&w) == Some(beta)).then_some(w)
            })
            .await;
        assert_eq!(
            &mine.metadata.uid, uid,
            "[{backend}] team-a/{name} is the same consumer object"
        );
        assert!(
            mine.metadata.deletion_timestamp.is_none(),
            "[{backend}] team-a/{name} is not deleted"
        );
        assert!(
            has_syncer_finalizer(&mine),
            "[{backend}] team-a/{name} is held by beta's syncer"
        );
    }
    let listed = view
        .consumer
        .list(&widgets(), Some("team-a"), &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{backend}] listing team-a's widgets: {e}"));
    let mut names: Vec<String> = listed.items.into_iter().filter_map(|w| w.metadata.name).collect();
    names.sort();
    assert_eq!(
        names,
        uids.keys().cloned().collect::<Vec<_>>(),
        "[{backend}] no consumer object lost"
    );
    let crd = view.consumer.get_opt(&crds(), None, API).await.ok().flatten();
    assert!(
        crd.is_some_and(|c| c.metadata.deletion_timestamp.is_none()),
        "[{backend}] the consumer CRD stays"
    );
    serving(stage, view, Some("team-a"), "widgets-beta").await;
    let what = format!("[{backend}] beta claims the CRD acme no longer uses");
    stage
        .eventually(&what, || async move {
            (view.crd_connection().await.as_deref() == Some(beta)).then_some(())
        })
        .await;
    resize_and_wait(stage, view, beta, "team-a", "w2", 9).await;
    assert!(
        view.copy(acme, "team-a", "w2").await.is_none(),
        "[{backend}] acme got no copy back"
    );
}

/// A namespace moves to the other provider by deleting the serving Binding: the waiting one
/// takes over with fresh copies and no consumer object is lost.
pub async fn a_namespace_moves_to_the_other_provider_and_no_consumer_object_is_lost(stage: &mut impl TwoProviders) {
    let view = View::of(stage);
    let [_, beta] = stage.connections();
    let uids = team_a_on_acme_with_beta_waiting(stage, &view).await;
    assert!(
        view.copies(beta).await.iter().all(|c| !c.starts_with("team-a/")),
        "[{}] beta waits while acme serves team-a",
        view.backend
    );
    view_delete(stage, Some("team-a"), "widgets").await;
    handed_over_to_beta(stage, &view, &uids).await;
    gone(stage, &view, Some("team-a"), "widgets").await;
    assert_eq!(
        view.copies(beta).await,
        ["team-a/w1", "team-a/w2", "team-a/w3"],
        "[{}] beta has team-a's widgets",
        view.backend
    );
}

/// Deletes the binding as its user does (the fake stage counts the deletion as asked for).
async fn view_delete(stage: &mut impl TwoProviders, ns: Option<&str>, name: &str) {
    let res = if ns.is_some() { bindings() } else { cluster_bindings() };
    stage.delete(&res, ns, name).await;
}

/// The second provider's widgets drop a field the first's keep: its Binding is refused naming
/// both Connections and what is missing, nothing is synced through it (no copy, no namespace),
/// its namespace's widget is held by no syncer, and the consumer CRD stays the first's.
pub async fn an_incompatible_schema_from_the_second_provider_is_refused_naming_both(stage: &mut impl TwoProviders) {
    let view = View::of(stage);
    let [acme, beta] = stage.connections();
    let backend = view.backend;
    view.bind(acme, "team-a", "widgets").await;
    serving(stage, &view, Some("team-a"), "widgets").await;
    view.create_widget("team-a", "w", json!({"size": 1})).await;
    copy_on(stage, &view, acme, "team-a", "w").await;
    let crd_before = view.crd_version().await;

    view.bind(beta, "team-b", "widgets").await;
    let message = synced_reason(stage, &view, Some("team-b"), "widgets", reason::INCOMPATIBLE_SCHEMA).await;
    assert!(
        message.contains(&format!("\"{acme}\""))
            && message.contains(&format!("\"{beta}\""))
            && message.contains("color"),
        "[{backend}] the refusal names both Connections and what is missing: {message}"
    );
    let refused = view.binding(Some("team-b"), "widgets").await;
    assert!(
        !refused.as_ref().is_some_and(ready),
        "[{backend}] the refused Binding is not Ready"
    );

    // Nothing is synced through beta; acme keeps serving team-a.
    let b = view
        .create_widget("team-b", "w", json!({"size": 2, "color": "red"}))
        .await;
    view.create_widget("team-a", "w2", json!({"size": 3})).await;
    copy_on(stage, &view, acme, "team-a", "w2").await;
    stage.settle().await;
    assert_eq!(
        stage.widget_writes(beta, "team-b").unwrap_or(0),
        0,
        "[{backend}] nothing is synced through beta"
    );
    assert_eq!(
        view.copies(beta).await,
        Vec::<String>::new(),
        "[{backend}] nothing created on beta"
    );
    assert!(
        view.provider(beta)
            .get_opt(&namespaces(), None, "team-b")
            .await
            .ok()
            .flatten()
            .is_none(),
        "[{backend}] no namespace created on beta"
    );
    assert_eq!(
        view.copies(acme).await,
        ["team-a/w", "team-a/w2"],
        "[{backend}] acme keeps serving team-a"
    );
    let b_now = view.widget("team-b", "w").await;
    assert_eq!(b_now.as_ref().and_then(|w| w.metadata.uid.clone()), b.metadata.uid);
    assert_eq!(
        b_now.as_ref().and_then(connection_label),
        None,
        "[{backend}] team-b/w is served by no Connection"
    );
    assert!(
        !b_now.as_ref().is_some_and(has_syncer_finalizer),
        "[{backend}] team-b/w is held by no syncer"
    );
    assert_eq!(
        view.crd_version().await,
        crd_before,
        "[{backend}] the consumer CRD is left as acme's provider has it"
    );
    assert_eq!(
        view.crd_connection().await.as_deref(),
        Some(acme),
        "[{backend}] the CRD stays acme's"
    );
}

/// A ClusterBinding through the second provider beside the first's Binding is refused and syncs
/// nothing, not even where nobody serves; deleting it deletes nothing. The reverse: a
/// ClusterBinding through the first serves every namespace and the second's Binding beside it
/// is refused.
pub async fn a_cluster_binding_is_refused_beside_another_connections_binding_and_the_reverse(
    stage: &mut impl TwoProviders,
) {
    let view = View::of(stage);
    let [acme, beta] = stage.connections();
    let backend = view.backend;
    view.bind(acme, "team-a", "widgets").await;
    serving(stage, &view, Some("team-a"), "widgets").await;
    let a = view.create_widget("team-a", "w", json!({"size": 1})).await;
    let a_copy = copy_on(stage, &view, acme, "team-a", "w").await;

    // A ClusterBinding through beta beside acme's Binding: all or nothing, so nothing.
    view.bind_cluster(beta, "widgets-beta").await;
    let message = synced_reason(
        stage,
        &view,
        None,
        "widgets-beta",
        reason::BOUND_THROUGH_ANOTHER_CONNECTION,
    )
    .await;
    assert!(
        message.contains(&format!("\"{acme}\"")),
        "[{backend}] the refusal names the serving Connection: {message}"
    );
    let b = view.create_widget("team-b", "w", json!({"size": 2})).await;
    view.create_widget("team-a", "w2", json!({"size": 3})).await;
    copy_on(stage, &view, acme, "team-a", "w2").await;
    stage.settle().await;
    assert_eq!(
        stage.widget_writes(beta, "team-b").unwrap_or(0),
        0,
        "[{backend}] a refused ClusterBinding syncs nothing, not even namespaces nobody serves"
    );
    assert_eq!(
        view.copies(beta).await,
        Vec::<String>::new(),
        "[{backend}] nothing created on beta"
    );
    assert_eq!(view.copies(acme).await, ["team-a/w", "team-a/w2"]);
    assert_eq!(
        view.widget("team-b", "w").await.as_ref().and_then(connection_label),
        None
    );

    // Deleting the refused ClusterBinding deletes nothing.
    view_delete(stage, None, "widgets-beta").await;
    gone(stage, &view, None, "widgets-beta").await;
    assert_eq!(
        view.copy(acme, "team-a", "w").await.and_then(|c| c.metadata.uid),
        a_copy.metadata.uid,
        "[{backend}] acme's copy stays"
    );
    let mine = view.widget("team-a", "w").await;
    assert_eq!(mine.as_ref().and_then(|w| w.metadata.uid.clone()), a.metadata.uid);
    assert_eq!(mine.as_ref().and_then(connection_label), Some(acme));
    assert!(
        view.consumer.get_opt(&crds(), None, API).await.ok().flatten().is_some(),
        "[{backend}] the consumer CRD stays"
    );

    // The reverse: a ClusterBinding through acme serves every namespace, and beta's Binding of
    // team-b beside it is refused.
    view.bind_cluster(acme, "widgets").await;
    serving(stage, &view, None, "widgets").await;
    copy_on(stage, &view, acme, "team-b", "w").await;
    view.bind(beta, "team-b", "widgets").await;
    let message = synced_reason(
        stage,
        &view,
        Some("team-b"),
        "widgets",
        reason::BOUND_THROUGH_ANOTHER_CONNECTION,
    )
    .await;
    assert!(
        message.contains(&format!("\"{acme}\"")) && message.contains("team-b"),
        "[{backend}] the refusal names the serving Connection and the namespace: {message}"
    );
    view.create_widget("team-b", "w3", json!({"size": 4})).await;
    copy_on(stage, &view, acme, "team-b", "w3").await;
    stage.settle().await;
    assert_eq!(
        view.copies(beta).await,
        Vec::<String>::new(),
        "[{backend}] nothing created on beta"
    );
    for name in ["w", "w3"] {
        let mine = view.widget("team-b", name).await;
        assert_eq!(
            mine.as_ref().and_then(connection_label),
            Some(acme),
            "[{backend}] team-b/{name}"
        );
    }
    assert_eq!(
        view.widget("team-b", "w").await.and_then(|w| w.metadata.uid),
        b.metadata.uid,
        "[{backend}] team-b/w is the same consumer object"
    );
}

/// The konnector killed mid-hand-over (a finalizer of the first provider's own holds the drain
/// of one copy): after the restart the first Binding still drains, the second waits (`Pending`,
/// naming the Connection handing over) and copies nothing; once the hold goes the hand-over
/// finishes with nothing lost.
pub async fn the_konnector_restarted_mid_hand_over_loses_nothing(stage: &mut impl TwoProviders) {
    const HOLD: &str = "example.org/hold";
    let view = View::of(stage);
    let [acme, beta] = stage.connections();
    let backend = view.backend;
    let uids = team_a_on_acme_with_beta_waiting(stage, &view).await;
    view.patch_widget(
        view.provider(acme),
        "team-a",
        "w1",
        json!({"metadata": {"finalizers": [HOLD]}}),
    )
    .await;
    view_delete(stage, Some("team-a"), "widgets").await;
    let what = format!("[{backend}] acme's drain started (w1's copy terminating)");
    let v = &view;
    stage
        .eventually(&what, || async move {
            let copy = v.copy(acme, "team-a", "w1").await?;
            copy.metadata.deletion_timestamp.is_some().then_some(())
        })
        .await;
    stage.restart_konnector().await;
    let draining = view.binding(Some("team-a"), "widgets").await;
    assert!(
        draining.is_some_and(|b| b.metadata.deletion_timestamp.is_some()),
        "[{backend}] acme's Binding still drains after the restart"
    );
    let message = synced_reason(stage, &view, Some("team-a"), "widgets-beta", reason::PENDING).await;
    assert!(
        message.contains(&format!("\"{acme}\"")),
        "[{backend}] the wait names the Connection handing over: {message}"
    );
    stage.settle().await;
    assert!(
        view.copies(beta).await.iter().all(|c| !c.starts_with("team-a/")),
        "[{backend}] beta waits while acme drains"
    );
    let held = view.widget("team-a", "w1").await;
    assert_eq!(
        held.as_ref().and_then(connection_label),
        Some(acme),
        "[{backend}] w1 is still acme's until its copy is gone"
    );
    assert!(
        held.as_ref().is_some_and(has_syncer_finalizer),
        "[{backend}] w1 is still held"
    );

    view.patch_widget(
        view.provider(acme),
        "team-a",
        "w1",
        json!({"metadata": {"finalizers": null}}),
    )
    .await;
    handed_over_to_beta(stage, &view, &uids).await;
    gone(stage, &view, Some("team-a"), "widgets").await;
}

/// Issue 37: a namespace moves from the first provider to the second; the Secret its widget names
/// goes with it: the second's Binding copies it (with its own marker), the first's copy is
/// collected with the first's Binding, and the consumer's Secret stays.
pub async fn a_related_copy_moves_with_its_namespace_to_the_other_provider(stage: &mut impl TwoProviders) {
    let view = View::of(stage);
    let [acme, beta] = stage.connections();
    let backend = view.backend;
    stage.allow_related("", "secrets").await;
    let rules = json!([{"group": "", "resource": "secrets", "direction": "FromConsumer",
        "selector": {"references": [{"path": "spec.config.secretName"}]}}]);
    view.bind(acme, "team-a", "widgets").await;
    serving(stage, &view, Some("team-a"), "widgets").await;
    let secret = object(json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"name": "pw", "namespace": "team-a"}, "stringData": {"password": "p"}}));
    view.consumer
        .create(&secrets(), Some("team-a"), &secret, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("[{backend}] creating the Secret: {e}"));
    view.set_rules("team-a", "widgets", &rules).await;
    view.create_widget("team-a", "w1", json!({"size": 1, "config": {"secretName": "pw"}}))
        .await;
    let secret_on = |connection: &'static str, present: bool| {
        let v = &view;
        move || async move {
            let copy = v
                .provider(connection)
                .get_opt(&secrets(), Some("team-a"), "pw")
                .await
                .ok()?;
            (copy.is_some() == present).then_some(copy)
        }
    };
    stage
        .eventually(&format!("[{backend}] acme has the Secret"), secret_on(acme, true))
        .await;

    view.bind(beta, "team-a", "widgets-beta").await;
    view.set_rules("team-a", "widgets-beta", &rules).await;
    view_delete(stage, Some("team-a"), "widgets").await;
    stage
        .eventually(
            &format!("[{backend}] acme's copy goes with acme's Binding"),
            secret_on(acme, false),
        )
        .await;
    let copy = stage
        .eventually(&format!("[{backend}] beta has the Secret"), secret_on(beta, true))
        .await;
    let beta_uid = view
        .binding(Some("team-a"), "widgets-beta")
        .await
        .and_then(|b| b.metadata.uid);
    assert_eq!(
        copy.as_ref()
            .and_then(|c| annotation_of(c, annotation::RELATED_BINDING))
            .map(str::to_string),
        beta_uid,
        "[{backend}] beta's copy is beta's Binding's"
    );
    assert!(
        view.consumer
            .get_opt(&secrets(), Some("team-a"), "pw")
            .await
            .ok()
            .flatten()
            .is_some(),
        "[{backend}] the consumer's Secret stays"
    );
}
