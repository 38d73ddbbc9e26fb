//! Shared set-up and reads for the §4 stories: provider `acme` exporting widgets, its bundle
//! applied, the binding Ready, and small readers over consumer and provider objects.

#![allow(dead_code)]

use futures::FutureExt;
use futures::future::BoxFuture;
use kbind_api::consts::condition;
use kbind_api::{BoundApiStatus, ClusterBinding, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{Credential, ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

/// The widgets API's name.
pub const WIDGETS: &str = "widgets.example.org";

/// The CustomResourceDefinition resource.
pub fn crds() -> ApiResource {
    ApiResource::erase::<k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition>(
        &(),
    )
}

/// The ClusterBinding resource.
pub fn cluster_bindings() -> ApiResource {
    ApiResource::erase::<ClusterBinding>(&())
}

/// The Connection resource.
pub fn connections() -> ApiResource {
    ApiResource::erase::<kbind_api::Connection>(&())
}

/// The Secret resource.
pub fn secrets() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&())
}

/// A JSON pointer to a label or annotation key (`/` escaped).
pub fn meta_key(map: &str, key: &str) -> String {
    format!("/metadata/{map}/{}", key.replace('~', "~0").replace('/', "~1"))
}

/// The value at `pointer` in `obj`.
pub fn at(obj: &Option<DynamicObject>, pointer: &str) -> Option<Value> {
    let whole = serde_json::to_value(obj.as_ref()?).ok()?;
    whole.pointer(pointer).cloned()
}

/// An annotation's value.
pub fn annotation(obj: &Option<DynamicObject>, key: &str) -> Option<String> {
    obj.as_ref()?.metadata.annotations.as_ref()?.get(key).cloned()
}

/// A label's value.
pub fn label(obj: &Option<DynamicObject>, key: &str) -> Option<String> {
    obj.as_ref()?.metadata.labels.as_ref()?.get(key).cloned()
}

/// A world with provider `acme` (widgets CRD installed, admin token) and the bundle for `apis`
/// applied (Connection at index 1, a ClusterBinding at index 2 when `apis` is not empty), edited
/// first by `customise`; konnector-0 started, nothing waited for.
pub async fn world_with_bundle(
    story: &str,
    seed: u64,
    apis: &[&str],
    customise: impl FnOnce(&mut [Value]),
) -> (World, Credential) {
    let mut world = World::builder()
        .seed(seed_from_env(seed))
        .story(story)
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let cred = world.mint_admin_token("acme");
    let mut objects = kbind_scenarios::bundle::bundle(
        "acme",
        kbind_scenarios::world::NAMESPACE,
        &world.kubeconfig_for(&cred),
        apis,
    );
    customise(&mut objects);
    for obj in objects {
        world.apply_object(obj).await;
    }
    world.start_konnector();
    (world, cred)
}

/// A world with provider `acme` (widgets CRD installed, admin token), konnector-0 running and
/// the ClusterBinding `acme` Ready; `customise` edits the bundle's objects before they are
/// applied (Connection at index 1, ClusterBinding at index 2).
pub async fn bound_world_with(story: &str, seed: u64, customise: impl FnOnce(&mut [Value])) -> (World, Credential) {
    let (mut world, cred) = world_with_bundle(story, seed, &[WIDGETS], customise).await;
    world
        .run_until_async("the ClusterBinding is Ready", 120, |w| binding_ready(w, "acme").boxed())
        .await;
    (world, cred)
}

/// [`bound_world_with`] with the bundle as is.
pub async fn bound_world(story: &str, seed: u64) -> (World, Credential) {
    bound_world_with(story, seed, |_| {}).await
}

/// ClusterBinding `name` as the consumer stores it.
pub async fn cluster_binding(world: &World, name: &str) -> Option<ClusterBinding> {
    world
        .consumer()
        .admin_client()
        .get_typed_opt(None, name)
        .await
        .ok()
        .flatten()
}

/// Whether ClusterBinding `name` is Ready.
pub async fn binding_ready(world: &World, name: &str) -> bool {
    cluster_binding(world, name)
        .await
        .and_then(|b| b.status)
        .is_some_and(|s| conditions::is_true(&s.conditions, condition::READY))
}

/// The status entry of `api` on ClusterBinding `name`.
pub async fn bound_api(world: &World, name: &str, api: &str) -> Option<BoundApiStatus> {
    cluster_binding(world, name).await?.status?.bound_api(api).cloned()
}

/// The reason of the per-API `Synced` condition of `api` on ClusterBinding `name`.
pub async fn api_reason(world: &World, name: &str, api: &str) -> Option<String> {
    let bound = bound_api(world, name, api).await?;
    conditions::find(&bound.conditions, condition::SYNCED).map(|c| c.reason.clone())
}

/// A check that the per-API `Synced` reason of `api` on ClusterBinding `name` is `reason`.
pub fn api_reason_is<'a>(
    name: &'a str,
    api: &'a str,
    reason: &'a str,
) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + 'a {
    move |w| {
        let (name, api, reason) = (name.to_string(), api.to_string(), reason.to_string());
        async move { api_reason(w, &name, &api).await.as_deref() == Some(reason.as_str()) }.boxed()
    }
}

/// Creates widget `ns/name` on the consumer.
pub async fn create_widget(world: &World, ns: &str, name: &str, spec: Value) -> DynamicObject {
    create_widget_object(world, widget(ns, name, spec)).await
}

/// Creates `obj` (a widget) on the consumer, its namespace first when missing.
pub async fn create_widget_object(world: &World, obj: DynamicObject) -> DynamicObject {
    let ns = obj.metadata.namespace.clone().unwrap_or_else(|| "default".into());
    ensure_namespace(&world.consumer().admin_client(), &ns).await;
    world
        .consumer()
        .admin_client()
        .create(&widgets(), Some(&ns), &obj, &Default::default())
        .await
        .expect("creating a widget on the consumer")
}

/// Creates namespace `ns` unless it exists.
pub async fn ensure_namespace(client: &dyn ClusterClient, ns: &str) {
    let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    if client.get_opt(&namespaces, None, ns).await.ok().flatten().is_some() {
        return;
    }
    let body: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns},
    }))
    .expect("a namespace object");
    let _ = client.create(&namespaces, None, &body, &Default::default()).await;
}

/// Waits until the provider copy of widget `ns/name` exists on `provider`, and returns it.
pub async fn wait_for_copy(world: &mut World, provider: &str, ns: &str, name: &str) -> DynamicObject {
    let (p, n, nm) = (provider.to_string(), ns.to_string(), name.to_string());
    world
        .run_until_async(&format!("the copy of {ns}/{name} is on {provider}"), 60, move |w| {
            let (p, n, nm) = (p.clone(), n.clone(), nm.clone());
            async move { w.provider_get(&p, &widgets(), Some(&n), &nm).await.is_some() }.boxed()
        })
        .await;
    world
        .provider_get(provider, &widgets(), Some(ns), name)
        .await
        .expect("the copy was just seen")
}

/// A check that widget `ns/name` is gone from the consumer.
pub fn consumer_widget_gone(ns: &str, name: &str) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (n, nm) = (ns.to_string(), name.to_string());
    move |w| {
        let (n, nm) = (n.clone(), nm.clone());
        async move { w.consumer_get(&widgets(), Some(&n), &nm).await.is_none() }.boxed()
    }
}

/// A check that the copy of widget `ns/name` is gone from `provider`.
pub fn copy_gone(provider: &str, ns: &str, name: &str) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (p, n, nm) = (provider.to_string(), ns.to_string(), name.to_string());
    move |w| {
        let (p, n, nm) = (p.clone(), n.clone(), nm.clone());
        async move { w.provider_get(&p, &widgets(), Some(&n), &nm).await.is_none() }.boxed()
    }
}

/// A check that the provider copy of `ns/name` has `value` at `pointer`.
pub fn copy_has(
    provider: &str,
    ns: &str,
    name: &str,
    pointer: &str,
    value: Value,
) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (p, n, nm, ptr) = (
        provider.to_string(),
        ns.to_string(),
        name.to_string(),
        pointer.to_string(),
    );
    move |w| {
        let (p, n, nm, ptr, value) = (p.clone(), n.clone(), nm.clone(), ptr.clone(), value.clone());
        async move { at(&w.provider_get(&p, &widgets(), Some(&n), &nm).await, &ptr) == Some(value) }.boxed()
    }
}

/// A check that the consumer widget `ns/name` has `value` at `pointer`.
pub fn widget_has(
    ns: &str,
    name: &str,
    pointer: &str,
    value: Value,
) -> impl for<'w> Fn(&'w World) -> BoxFuture<'w, bool> + use<> {
    let (n, nm, ptr) = (ns.to_string(), name.to_string(), pointer.to_string());
    move |w| {
        let (n, nm, ptr, value) = (n.clone(), nm.clone(), ptr.clone(), value.clone());
        async move { at(&w.consumer_get(&widgets(), Some(&n), &nm).await, &ptr) == Some(value) }.boxed()
    }
}

/// Merge-patches consumer widget `ns/name`.
pub async fn patch_widget(world: &World, ns: &str, name: &str, patch: Value) -> DynamicObject {
    world
        .consumer()
        .admin_client()
        .patch(
            &widgets(),
            Some(ns),
            name,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .expect("patching the consumer widget")
}

/// Merge-patches the provider copy of widget `ns/name` as the provider's admin.
pub async fn patch_copy(world: &World, provider: &str, ns: &str, name: &str, patch: Value) -> DynamicObject {
    world
        .provider(provider)
        .admin_client()
        .patch(
            &widgets(),
            Some(ns),
            name,
            &Patch::Merge(patch),
            &PatchParams::default(),
        )
        .await
        .expect("patching the provider copy")
}

/// Merge-patches the status of the provider copy of widget `ns/name` as the provider's admin
/// (what the provider's controller does).
pub async fn patch_copy_status(world: &World, provider: &str, ns: &str, name: &str, status: Value) -> DynamicObject {
    world
        .provider(provider)
        .admin_client()
        .patch_status(
            &widgets(),
            Some(ns),
            name,
            &Patch::Merge(json!({ "status": status })),
            &PatchParams::default(),
        )
        .await
        .expect("the provider writes status")
}

/// Merge-patches a cluster-scoped consumer object (binding, Connection, CRD) as the admin.
pub async fn patch_consumer(world: &World, res: &ApiResource, ns: Option<&str>, name: &str, patch: Value) {
    world
        .consumer()
        .admin_client()
        .patch(res, ns, name, &Patch::Merge(patch), &PatchParams::default())
        .await
        .unwrap_or_else(|e| panic!("patching {} {name} on the consumer: {e}", res.kind));
}

/// Provider writes of `verb` on widgets so far.
pub fn provider_widget_writes(world: &World, provider: &str, verb: &str) -> usize {
    world
        .provider(provider)
        .write_log()
        .iter()
        .filter(|w| w.verb == verb && w.resource.starts_with("widgets."))
        .count()
}

/// The konnector binary's default `--resync` (konnector/src/cli.rs).
pub const KONNECTOR_RESYNC: std::time::Duration = std::time::Duration::from_secs(600);

/// Consumer `i` of a herd of `story`: a world of its own (a fake consumer cluster, a konnector
/// with the binary's default `--resync`) bound to widgets of the first consumer's provider
/// `acme` (`first`: `None` for the first consumer, which makes the provider and exports widgets).
pub async fn herd_member(seed: u64, i: usize, first: Option<&World>, story: &str) -> World {
    let config = kbind_engine::context::EngineConfig {
        rediscovery_interval: KONNECTOR_RESYNC,
        ..kbind_engine::context::EngineConfig::default()
    };
    let builder = World::builder()
        .seed(seed + i as u64)
        .story(&format!("{story} (consumer {i})"))
        .consumer(&format!("consumer-{i:04}"))
        .engine_config(config)
        // One capture gets every konnector's lines: a herd of a thousand keeps warnings only.
        .log_level(if i >= 100 {
            tracing::Level::WARN
        } else {
            tracing::Level::DEBUG
        });
    let mut world = match first {
        None => {
            builder
                .provider("acme", kbind_scenarios::ProviderOpts::default())
                .build()
                .await
        }
        Some(first) => {
            builder
                .shared_provider("acme", first.share_provider("acme"))
                .build()
                .await
        }
    };
    if first.is_none() {
        world
            .install_provider_crd("acme", kbind_scenarios::apis::widgets_crd())
            .await;
    }
    let cred = world.mint_admin_token("acme");
    world.apply_bundle("acme", &cred, &[WIDGETS]).await;
    world.start_konnector();
    world
}
