//! Provider credentials limited to one namespace (contract §4 "RBAC"): the provider's RBAC is
//! the authorization boundary. The konnector may not watch widgets cluster-wide, so it watches
//! the namespaces in use; the allowed namespace syncs both ways while the other one is reported
//! as `PermissionDenied` naming verb and resource, and nothing stops.

use crate::story;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_cluster::{ApiResource, ClusterClient, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::{Value, json};

fn object(value: Value) -> kbind_cluster::DynamicObject {
    serde_json::from_value(value).unwrap()
}

/// What a provider's platform team grants a tenant: cluster reads kbind needs, and widgets in
/// `team-a` only.
async fn grant_team_a_only(world: &World) {
    let admin = world.provider("acme").admin_client();
    let rbac = |kind: &str, plural: &str| ApiResource {
        group: "rbac.authorization.k8s.io".into(),
        version: "v1".into(),
        api_version: "rbac.authorization.k8s.io/v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    };
    let namespaces = ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&());
    for ns in ["team-a", "team-b"] {
        let _ = admin
            .create(
                &namespaces,
                None,
                &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})),
                &Default::default(),
            )
            .await;
    }
    let base = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": "kbind-tenant-base"},
        "rules": [
            {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
            {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
        ],
    });
    admin
        .create(
            &rbac("ClusterRole", "clusterroles"),
            None,
            &object(base),
            &Default::default(),
        )
        .await
        .unwrap();
    let role = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "widgets", "namespace": "team-a"},
        "rules": [{"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"],
                   "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}],
    });
    admin
        .create(
            &rbac("Role", "roles"),
            Some("team-a"),
            &object(role),
            &Default::default(),
        )
        .await
        .unwrap();
    let binding = json!({
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "widgets", "namespace": "team-a"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "widgets"},
        "subjects": [{"kind": "ServiceAccount", "name": "tenant", "namespace": "kbind"}],
    });
    admin
        .create(
            &rbac("RoleBinding", "rolebindings"),
            Some("team-a"),
            &object(binding),
            &Default::default(),
        )
        .await
        .unwrap();
}

#[tokio::test(start_paused = true)]
async fn namespace_scoped_credentials_sync_their_namespace_and_report_the_other() {
    let mut world = World::builder()
        .seed(seed_from_env(61))
        .story("namespace_scoped_credentials_sync_their_namespace_and_report_the_other")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    grant_team_a_only(&world).await;
    let cred = world.mint_service_account("acme", "tenant", "kbind-tenant-base").await;
    let tenant = world
        .provider("acme")
        .authenticate(&cred.token)
        .expect("the tenant token works");
    let everywhere = world
        .provider("acme")
        .client(tenant)
        .list(&widgets(), None, &Default::default())
        .await;
    assert!(
        matches!(everywhere, Err(kbind_cluster::Error::Forbidden { .. })),
        "the tenant may not list widgets cluster-wide: {everywhere:?}"
    );
    world.apply_bundle("acme", &cred, &[story::WIDGETS]).await;
    world.start_konnector();
    world
        .run_until_async("the binding syncs", 150, |w| {
            async move {
                story::bound_api(w, "acme", story::WIDGETS)
                    .await
                    .is_some_and(|a| conditions::is_true(&a.conditions, condition::SYNCED))
            }
            .boxed()
        })
        .await;
    for ns in ["team-a", "team-b"] {
        story::ensure_namespace(&world.consumer().admin_client(), ns).await;
        world
            .consumer()
            .admin_client()
            .create(
                &widgets(),
                Some(ns),
                &widget(ns, "w1", json!({"size": 1})),
                &Default::default(),
            )
            .await
            .expect("creating a widget");
    }
    story::wait_for_copy(&mut world, "acme", "team-a", "w1").await;
    world
        .run_until_async(
            "team-b is reported as PermissionDenied naming verb and resource",
            90,
            |w| {
                async move {
                    let binding = story::cluster_binding(w, "acme").await.and_then(|b| b.status);
                    binding.is_some_and(|s| {
                        conditions::find(&s.conditions, condition::PERMISSION_DENIED)
                            .is_some_and(|c| c.status == "True" && c.message.contains("widgets.example.org"))
                    })
                }
                .boxed()
            },
        )
        .await;
    // The allowed namespace keeps syncing both ways: status comes down through the
    // per-namespace watch.
    world
        .provider("acme")
        .admin_client()
        .patch_status(
            &widgets(),
            Some("team-a"),
            "w1",
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
            &PatchParams::default(),
        )
        .await
        .expect("the provider reports status");
    world
        .run_until_async("team-a's status comes down", 5, |w| {
            async move {
                let mine = w.consumer_get(&widgets(), Some("team-a"), "w1").await;
                story::at(&mine, "/status/phase") == Some(json!("Ready"))
            }
            .boxed()
        })
        .await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("team-b"), "w1")
            .await
            .is_none(),
        "nothing reached team-b"
    );
    let watched = world.providers().get("acme").expect("engaged").cache.watched();
    assert!(
        watched.iter().any(|w| w == "example.org/v1/widgets@team-a"),
        "team-a is watched on its own: {watched:?}"
    );
    assert!(
        !watched.iter().any(|w| w == "example.org/v1/widgets"),
        "no cluster-wide watch the credentials may not have: {watched:?}"
    );
}

/// Found on real clusters: `kubectl delete -f` of the bundle (Secret, Connection, binding, in
/// file order) converges with tenant credentials, which may not list Secrets or ConfigMaps on
/// the provider; a binding without FromConsumer rules has no related copy there to look for.
#[tokio::test(start_paused = true)]
async fn the_bundle_deleted_with_namespace_scoped_credentials_converges() {
    let mut world = World::builder()
        .seed(seed_from_env(62))
        .story("the_bundle_deleted_with_namespace_scoped_credentials_converges")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    grant_team_a_only(&world).await;
    let cred = world.mint_service_account("acme", "tenant", "kbind-tenant-base").await;
    world.apply_bundle("acme", &cred, &[story::WIDGETS]).await;
    world.start_konnector();
    story::ensure_namespace(&world.consumer().admin_client(), "team-a").await;
    world
        .run_until_async("widgets are served on the consumer", 150, |w| {
            async move {
                w.consumer()
                    .admin_client()
                    .list(&widgets(), None, &Default::default())
                    .await
                    .is_ok()
            }
            .boxed()
        })
        .await;
    world
        .consumer()
        .admin_client()
        .create(
            &widgets(),
            Some("team-a"),
            &widget("team-a", "w1", json!({"size": 1})),
            &Default::default(),
        )
        .await
        .expect("creating a widget");
    story::wait_for_copy(&mut world, "acme", "team-a", "w1").await;
    world.allow_konnector_delete(&story::crds(), None, story::WIDGETS);

    world
        .delete_on_consumer(&story::secrets(), Some(kbind_scenarios::world::NAMESPACE), "acme")
        .await;
    world.delete_on_consumer(&story::connections(), None, "acme").await;
    world.delete_on_consumer(&story::cluster_bindings(), None, "acme").await;
    world
        .run_until_async("the copy is drained", 120, story::copy_gone("acme", "team-a", "w1"))
        .await;
    world
        .run_until_async("the binding, Connection, Secret and CRD are gone", 120, |w| {
            async move {
                w.consumer_get(&story::cluster_bindings(), None, "acme").await.is_none()
                    && w.consumer_get(&story::connections(), None, "acme").await.is_none()
                    && w.consumer_get(&story::secrets(), Some(kbind_scenarios::world::NAMESPACE), "acme")
                        .await
                        .is_none()
                    && w.consumer_get(&story::crds(), None, story::WIDGETS).await.is_none()
            }
            .boxed()
        })
        .await;
}
