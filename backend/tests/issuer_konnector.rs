//! The konnector (kbind's engine, unchanged) runs on nothing but what the Kubernetes issuer
//! granted: the scenarios world's fakeapi provider, RBAC enforced, paused clock. It engages
//! (identity, discovery of the exported CRD by name), pulls the CRD, heartbeats on the
//! pre-created Lease, syncs a widget into the claimed namespace with status coming down, and is
//! refused (PermissionDenied, nothing written) in a namespace the Grant did not claim.
//! A second story binds through a namespaced Binding with related resources (a Secret down, a
//! ConfigMap up) and unbinds: the konnector's clean-up finishes on the same credential.
//! Re-run with `KBIND_SEED=<n>` to vary the world.

use std::sync::Arc;

use futures::FutureExt;
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_api::{
    Binding, BoundApiRef, ClusterBinding, Export, ExportSpec, Grant, GrantIdentity, GrantSpec, RelatedResource,
    RelatedResourceDirection, RelatedResourceSelector, grant_name,
};
use kbind_backend::issuer::{Issuer, KubernetesIssuer, Options};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams};
use kbind_scenarios::apis::{widget, widgets, widgets_crd};
use kbind_scenarios::bundle::{self, Credential};
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

/// What a bind does on the provider for alice's Grant of `export` into `team-a`: the Kubernetes
/// issuer provisions it and mints the token the bundle carries, returned as the scenarios world
/// applies it.
async fn issue(
    world: &World,
    admin: Arc<dyn ClusterClient>,
    export: &Export,
    consumer_uid: &str,
    seed: u64,
) -> Credential {
    let name = grant_name("token:alice", "widgets", consumer_uid);
    let grant = Grant::new(
        &name,
        GrantSpec {
            identity: GrantIdentity {
                subject: "token:alice".into(),
                name: None,
            },
            export: "widgets".into(),
            consumer_cluster_uid: consumer_uid.to_string(),
            namespaces: vec!["team-a".into()],
        },
    );
    let issuer = KubernetesIssuer::new(
        admin,
        Options {
            claimable_namespaces: vec!["*".into()],
            ..Options::default()
        },
    );
    // The CRD may take a few steps to be served; provisioning only needs it to exist.
    issuer
        .provision(&grant, export)
        .await
        .unwrap_or_else(|e| panic!("seed {seed}: provision: {e}"));
    let credential = issuer.credential(&grant).await.expect("a token");
    let user = world
        .provider("acme")
        .authenticate(&credential.token)
        .expect("the token authenticates");
    Credential {
        provider: "acme".into(),
        token: credential.token.clone(),
        user: user.name.clone(),
        service_account: Some(("kbind-grants".into(), name)),
    }
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
            cluster_scoped_sharing: false,
        },
    );
    let cred = issue(&world, admin.clone(), &export, &consumer_uid, seed).await;
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

fn shared(resource: &str, direction: RelatedResourceDirection) -> RelatedResource {
    RelatedResource {
        group: String::new(),
        resource: resource.into(),
        version: None,
        direction,
        selector: RelatedResourceSelector {
            label_selector: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                match_labels: Some([("share".to_string(), "yes".to_string())].into()),
                match_expressions: None,
            }),
            names: vec![],
            references: vec![],
        },
        sync_status: false,
    }
}

fn core(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_namespaced_binding_with_related_resources_syncs_and_unbinds_on_the_issued_credential() {
    let seed = seed_from_env(15);
    let mut world = World::builder()
        .seed(seed)
        .story("a_namespaced_binding_with_related_resources_syncs_and_unbinds_on_the_issued_credential")
        .provider("acme", ProviderOpts::default())
        .build()
        .await;
    world.install_provider_crd("acme", widgets_crd()).await;
    let admin: Arc<dyn ClusterClient> = Arc::new(world.provider("acme").admin_client());
    let consumer_uid = world.consumer().identity_uid();
    let related = vec![
        shared("secrets", RelatedResourceDirection::FromProvider),
        shared("configmaps", RelatedResourceDirection::FromConsumer),
    ];
    let export = Export::new(
        "widgets",
        ExportSpec {
            title: "Widgets".into(),
            description: None,
            icon: None,
            docs: None,
            apis: vec![BoundApiRef { name: WIDGETS.into() }],
            conflict_policy: Default::default(),
            related_resources: related.clone(),
            cluster_scoped_sharing: false,
        },
    );
    let cred = issue(&world, admin.clone(), &export, &consumer_uid, seed).await;

    // The provider's original Secret, in the claimed namespace.
    admin
        .create(
            &core("Secret", "secrets"),
            Some("team-a"),
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "creds", "namespace": "team-a", "labels": {"share": "yes"}},
                "stringData": {"password": "not-logged"}}))
            .unwrap(),
            &Default::default(),
        )
        .await
        .expect("a provider Secret");

    // The bundle as the gateway makes it: a Connection allowing team-a and a Binding there.
    let mut objects = bundle::bundle(
        "acme",
        kbind_scenarios::world::NAMESPACE,
        &world.kubeconfig_for(&cred),
        &[],
    );
    objects[1]["metadata"]["annotations"] = json!({kbind_api::consts::annotation::BINDING_NAMESPACES: "team-a"});
    for obj in objects {
        world.apply_object(obj).await;
    }
    let consumer = world.consumer().admin_client();
    ensure_namespace(&consumer, "team-a").await;
    consumer
        .create(
            &core("ConfigMap", "configmaps"),
            Some("team-a"),
            &serde_json::from_value(json!({"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "settings", "namespace": "team-a", "labels": {"share": "yes"}},
                "data": {"mode": "fast"}}))
            .unwrap(),
            &Default::default(),
        )
        .await
        .expect("a consumer ConfigMap");
    let binding_res = ApiResource::erase::<Binding>(&());
    let binding_body = json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "Binding",
        "metadata": {"name": "widgets", "namespace": "team-a"},
        "spec": {"connectionRef": {"name": "acme"}, "apis": [{"name": WIDGETS}],
                 "relatedResources": serde_json::to_value(&related).unwrap()},
    });
    consumer
        .create(
            &binding_res,
            Some("team-a"),
            &serde_json::from_value(binding_body).unwrap(),
            &Default::default(),
        )
        .await
        .expect("the bundle's Binding");
    world.start_konnector();
    world
        .run_until_async("the widgets CRD pulled to the consumer", 150, |w| {
            async move {
                w.consumer()
                    .admin_client()
                    .list(&widgets(), Some("team-a"), &Default::default())
                    .await
                    .is_ok()
            }
            .boxed()
        })
        .await;
    consumer
        .create(
            &widgets(),
            Some("team-a"),
            &widget("team-a", "w1", json!({"size": 1})),
            &Default::default(),
        )
        .await
        .expect("a consumer widget");

    world
        .run_until_async("the widget, the Secret down and the ConfigMap up", 200, |w| {
            async move {
                w.provider_get("acme", &widgets(), Some("team-a"), "w1").await.is_some()
                    && w.consumer_get(&core("Secret", "secrets"), Some("team-a"), "creds")
                        .await
                        .is_some()
                    && w.provider_get("acme", &core("ConfigMap", "configmaps"), Some("team-a"), "settings")
                        .await
                        .is_some()
            }
            .boxed()
        })
        .await;
    let bound: Option<Binding> = consumer.get_typed_opt(Some("team-a"), "widgets").await.unwrap();
    let status = bound.and_then(|b| b.status).expect("a Binding status");
    assert!(
        !conditions::is_true(&status.conditions, condition::PERMISSION_DENIED),
        "seed {seed}: nothing the konnector needed was refused: {:?}",
        status.conditions
    );

    // Unbind: the Binding's clean-up (copies on both sides) finishes on the same credential.
    // The Secret's source and copy go first, as the story's own deletes, so §8.1 (nothing
    // deleted on the consumer that the story did not delete first) holds through the unbind.
    admin
        .delete(&core("Secret", "secrets"), Some("team-a"), "creds", &Default::default())
        .await
        .expect("the provider removes its Secret");
    world.steps_for(3).await;
    world
        .delete_on_consumer(&core("Secret", "secrets"), Some("team-a"), "creds")
        .await;
    world.steps_for(3).await;
    assert!(
        world
            .consumer_get(&core("Secret", "secrets"), Some("team-a"), "creds")
            .await
            .is_none(),
        "seed {seed}: a copy whose source is gone is not made again"
    );
    consumer
        .delete(&binding_res, Some("team-a"), "widgets", &Default::default())
        .await
        .expect("unbind");
    world
        .run_until_async("the Binding is gone", 200, |w| {
            let binding_res = binding_res.clone();
            async move { w.consumer_get(&binding_res, Some("team-a"), "widgets").await.is_none() }.boxed()
        })
        .await;
    assert!(
        world
            .provider_get("acme", &core("ConfigMap", "configmaps"), Some("team-a"), "settings")
            .await
            .is_none(),
        "seed {seed}: the ConfigMap copy was collected on the provider"
    );
    assert!(
        world
            .provider_get("acme", &core("Namespace", "namespaces"), None, "team-a")
            .await
            .is_some(),
        "seed {seed}: the claimed namespace stays"
    );
}
