//! The konnector (kbind's engine, unchanged) runs on nothing but what the Kubernetes issuer
//! granted: the scenarios world's fakeapi provider, RBAC enforced, paused clock. It engages
//! (identity, discovery of the exported CRD by name), pulls the CRD, heartbeats on the
//! pre-created Lease, syncs a widget into the claimed namespace with status coming down, and is
//! refused (PermissionDenied, nothing written) in a namespace the Grant did not claim.
//! Re-run with `KBIND_SEED=<n>` to vary the world.

use std::sync::Arc;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_api::{BoundApiRef, ClusterBinding, Export, ExportSpec, Grant, GrantIdentity, GrantSpec, grant_name};
use kbind_backend::issuer::{Issuer, KubernetesIssuer, Options};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::bundle::Credential;
use kbind_scenarios::{ProviderOpts, World, seed_from_env};
use serde_json::json;

const WIDGETS: &str = "widgets.example.org";

async fn ensure_namespace(client: &dyn ClusterClient, ns: &str) {
    let body =
        serde_json::from_value(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})).unwrap();
    let _ = client
        .create(
            &ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&()),
            None,
            &body,
            &Default::default(),
        )
        .await;
}

async fn binding(w: &World) -> Option<ClusterBinding> {
    w.consumer()
        .admin_client()
        .get_typed_opt(None, "acme")
        .await
        .ok()
        .flatten()
}

#[tokio::test(start_paused = true)]
async fn the_konnector_works_on_exactly_what_the_issuer_granted() {
    let seed = seed_from_env(14);
    let mut world = World::builder()
        .seed(seed)
        .story("the_konnector_works_on_exactly_what_the_issuer_granted")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let admin: Arc<dyn ClusterClient> = Arc::new(world.provider("acme").admin_client());
    let consumer_uid = world.consumer().identity_uid();

    let export = Export::new(
        "widgets",
        ExportSpec {
            title: "Widgets".into(),
            description: None,
            icon: None,
            docs: None,
            apis: vec![BoundApiRef { name: WIDGETS.into() }],
            conflict_policy: Default::default(),
            related_resources: vec![],
        },
    );
    let name = grant_name("token:alice", "widgets", &consumer_uid);
    let grant = Grant::new(
        &name,
        GrantSpec {
            identity: GrantIdentity {
                subject: "token:alice".into(),
                name: None,
            },
            export: "widgets".into(),
            consumer_cluster_uid: consumer_uid.clone(),
            namespaces: vec!["team-a".into()],
        },
    );
    let issuer = KubernetesIssuer::new(admin.clone(), Options::default());
    // The CRD may take a few steps to be served; provisioning only needs it to exist.
    issuer
        .provision(&grant, &export)
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: provision: {e}"));
    let credential = issuer.credential(&grant).await.expect("a token");
    let user = world
        .provider("acme")
        .authenticate(&credential.token)
        .expect("the token authenticates");
    let cred = Credential {
        provider: "acme".into(),
        token: credential.token.clone(),
        user: user.name.clone(),
        service_account: Some(("kbind-grants".into(), name.clone())),
    };
    world.apply_bundle("acme", &cred, &[WIDGETS]).await;
    world.start_konnector();

    world
        .run_until_async("the widgets API syncs", 150, |w| {
            async move {
                binding(w)
                    .await
                    .and_then(|b| b.status)
                    .and_then(|s| s.bound_api(WIDGETS).cloned())
                    .is_some_and(|a| conditions::is_true(&a.conditions, condition::SYNCED))
            }
            .boxed()
        })
        .await;

    // The heartbeat renews the Lease the issuer pre-created (get + update only).
    let lease_res = ApiResource::erase::<k8s_openapi::api::coordination::v1::Lease>(&());
    let lease = format!("consumer-{consumer_uid}");
    world
        .run_until_async("the konnector renews its Lease", 60, |w| {
            let (lease_res, lease) = (lease_res.clone(), lease.clone());
            async move {
                w.provider_get("acme", &lease_res, Some("kbind"), &lease)
                    .await
                    .and_then(|l| l.data.pointer("/spec/renewTime").cloned())
                    .is_some()
            }
            .boxed()
        })
        .await;

    let consumer = world.consumer().admin_client();
    for ns in ["team-a", "team-b"] {
        ensure_namespace(&consumer, ns).await;
        consumer
            .create(
                &widgets(),
                Some(ns),
                &widget(ns, "w1", json!({"size": 1})),
                &Default::default(),
            )
            .await
            .expect("a consumer widget");
    }
    world
        .run_until_async("the copy reaches the claimed namespace", 60, |w| {
            async move { w.provider_get("acme", &widgets(), Some("team-a"), "w1").await.is_some() }.boxed()
        })
        .await;
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
        .run_until_async("status comes down", 30, |w| {
            async move {
                w.consumer_get(&widgets(), Some("team-a"), "w1")
                    .await
                    .and_then(|o| o.data.pointer("/status/phase").cloned())
                    == Some(json!("Ready"))
            }
            .boxed()
        })
        .await;
    world
        .run_until_async("the unclaimed namespace is reported as PermissionDenied", 90, |w| {
            async move {
                binding(w).await.and_then(|b| b.status).is_some_and(|s| {
                    conditions::find(&s.conditions, condition::PERMISSION_DENIED)
                        .is_some_and(|c| c.status == "True" && c.message.contains(WIDGETS))
                })
            }
            .boxed()
        })
        .await;
    assert!(
        world
            .provider_get("acme", &widgets(), Some("team-b"), "w1")
            .await
            .is_none(),
        "seed {seed}: nothing reached the unclaimed namespace"
    );
}
