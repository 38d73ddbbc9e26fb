//! Shared set-up for the unbind and hand-over stories: a Connection that allows namespaced
//! Bindings, Bindings created and read as the user, and the provider copies' UIDs that a
//! hand-over must keep (contract §4 "unbind", §8.8).

#![allow(dead_code)]

use std::collections::BTreeMap;

use futures::FutureExt;
use futures::future::BoxFuture;
use kbind_api::consts::{annotation, condition};
use kbind_api::{Binding, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject};
use kbind_scenarios::World;
use kbind_scenarios::apis::widgets;
use serde_json::{Value, json};

use crate::story::{WIDGETS, ensure_namespace, world_with_bundle};

/// The Binding resource.
pub fn bindings() -> ApiResource {
    ApiResource::erase::<Binding>(&())
}

/// Edits the bundle's Connection (index 1) to allow Bindings in `namespaces` (`"*"` for all).
pub fn allow_binding_namespaces(objects: &mut [Value], namespaces: &str) {
    objects[1]["metadata"]["annotations"] = json!({annotation::BINDING_NAMESPACES: namespaces});
}

/// A world with provider `acme` exporting widgets, a Connection that allows Bindings in every
/// namespace and no ClusterBinding, konnector-0 running and the Connection Ready.
pub async fn connected_for_bindings(story: &str, seed: u64) -> World {
    let (mut world, _) = world_with_bundle(story, seed, &[], |objects| allow_binding_namespaces(objects, "*")).await;
    world
        .run_until_connection("acme", "Ready", 120, |c| {
            conditions::is_true(c.conditions(), condition::READY)
        })
        .await;
    world
}

/// Creates Binding `ns/name` of `apis` through Connection `acme`, its namespace first.
pub async fn create_binding(world: &World, ns: &str, name: &str, apis: &[&str]) {
    let client = world.consumer().admin_client();
    ensure_namespace(&client, ns).await;
    let apis: Vec<Value> = apis.iter().map(|a| json!({"name": a})).collect();
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"connectionRef": {"name": "acme"}, "apis": apis},
    }))
    .expect("a Binding object");
    client
        .create(&bindings(), Some(ns), &body, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating Binding {ns}/{name}: {e}"));
}

/// Creates ClusterBinding `name` of widgets through Connection `acme`.
pub async fn create_cluster_binding(world: &World, name: &str) {
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "ClusterBinding",
        "metadata": {"name": name},
        "spec": {"connectionRef": {"name": "acme"}, "apis": [{"name": WIDGETS}]},
    }))
    .expect("a ClusterBinding object");
    world
        .consumer()
        .admin_client()
        .create(&crate::story::cluster_bindings(), None, &body, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("creating ClusterBinding {name}: {e}"));
}

/// Binding `ns/name` as the consumer stores it.
pub async fn binding(world: &World, ns: &str, name: &str) -> Option<Binding> {
    world
        .consumer()
        .admin_client()
        .get_typed_opt(Some(ns), name)
        .await
        .ok()
        .flatten()
}

/// The reason of Binding `ns/name`'s condition `type_`, or of its per-API `Synced` for `api`.
pub async fn binding_reason(world: &World, ns: &str, name: &str, api: Option<&str>, type_: &str) -> Option<String> {
    let status = binding(world, ns, name).await?.status?;
    let list = match api {
        Some(api) => status.bound_api(api)?.conditions.clone(),
        None => status.conditions.clone(),
    };
    conditions::find(&list, type_).map(|c| c.reason.clone())
}

/// A check that Binding `ns/name` is Ready.
pub fn binding_is_ready(ns: &str, name: &str) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (ns, name) = (ns.to_string(), name.to_string());
    move |w| {
        let (ns, name) = (ns.clone(), name.clone());
        async move {
            binding(w, &ns, &name)
                .await
                .and_then(|b| b.status)
                .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
        }
        .boxed()
    }
}

/// The UID of the provider copy of widget `ns/name` on `acme`, if there is one.
pub async fn copy_uid(world: &World, ns: &str, name: &str) -> Option<String> {
    world
        .provider_get("acme", &widgets(), Some(ns), name)
        .await
        .and_then(|c| c.metadata.uid)
}

/// The UIDs of the provider copies of `keys` (`(namespace, name)`), panicking if one is missing.
pub async fn copy_uids(world: &World, keys: &[(&str, &str)]) -> BTreeMap<(String, String), String> {
    let mut uids = BTreeMap::new();
    for (ns, name) in keys {
        let uid = copy_uid(world, ns, name)
            .await
            .unwrap_or_else(|| panic!("the copy of {ns}/{name} is on the provider"));
        uids.insert((ns.to_string(), name.to_string()), uid);
    }
    uids
}

/// Steps `n` times, failing as soon as a copy in `uids` is gone or has another UID.
pub async fn steps_keeping(world: &mut World, n: u64, uids: &BTreeMap<(String, String), String>) {
    for _ in 0..n {
        world.step().await;
        assert_copies_kept(world, uids).await;
    }
}

/// Fails when a copy in `uids` is gone or was re-created (another UID).
pub async fn assert_copies_kept(world: &World, uids: &BTreeMap<(String, String), String>) {
    for ((ns, name), uid) in uids {
        let now = copy_uid(world, ns, name).await;
        assert_eq!(
            now.as_deref(),
            Some(uid.as_str()),
            "step {}: the provider copy of {ns}/{name} was deleted or re-created (§8.8)",
            world.steps()
        );
    }
}

/// Whether the consumer CRD of widgets is still there.
pub async fn widgets_crd_present(world: &World) -> bool {
    world.consumer_get(&crate::story::crds(), None, WIDGETS).await.is_some()
}

/// The finalizers of consumer widget `ns/name` (`None` when it is gone).
pub async fn widget_finalizers(world: &World, ns: &str, name: &str) -> Option<Vec<String>> {
    world
        .consumer_get(&widgets(), Some(ns), name)
        .await
        .map(|w| w.metadata.finalizers.unwrap_or_default())
}
