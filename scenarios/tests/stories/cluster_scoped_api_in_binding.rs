//! contract §2, §3: a Binding naming a cluster-scoped API (its consumer CRD pulled by
//! `pullPolicy: All`) syncs nothing and says so with `ClusterScopedAPIInBinding`, keeps its
//! status current, and can be deleted; the CRD and the user's objects of that API stay.

use futures::FutureExt;
use kbind_api::consts::{condition, reason};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Patch, PatchParams};
use kbind_scenarios::apis::exported_crd;
use serde_json::json;

use crate::binding_kit::*;
use crate::story::*;

const GADGETS: &str = "gadgets.example.org";

fn gadgets() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Gadget".into(),
        plural: "gadgets".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn a_binding_of_a_cluster_scoped_api_reports_it_stays_current_and_can_be_deleted() {
    let (mut world, _) = bound_world_with(
        "a_binding_of_a_cluster_scoped_api_reports_it_stays_current_and_can_be_deleted",
        311,
        |objects| {
            allow_binding_namespaces(objects, "*");
            objects[1]["spec"]["schema"] = json!({"pullPolicy": "All"});
        },
    )
    .await;
    world
        .install_provider_crd("acme", exported_crd("gadgets", "Gadget", "Cluster"))
        .await;
    world
        .run_until_async("pullPolicy All pulls the gadgets CRD", 120, |w| {
            async move { w.consumer_get(&crds(), None, GADGETS).await.is_some() }.boxed()
        })
        .await;
    let gadget: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "example.org/v1", "kind": "Gadget", "metadata": {"name": "g1"}, "spec": {"size": 2},
    }))
    .expect("a gadget");
    world
        .run_until_async("the consumer serves gadgets", 30, |w| {
            let gadget = gadget.clone();
            async move {
                w.consumer()
                    .admin_client()
                    .create(&gadgets(), None, &gadget, &Default::default())
                    .await
                    .is_ok()
            }
            .boxed()
        })
        .await;

    create_binding(&world, "team-a", "gadgets", &[GADGETS]).await;
    world
        .run_until_async("the Binding reports ClusterScopedAPIInBinding", 60, |w| {
            async move {
                binding_reason(w, "team-a", "gadgets", Some(GADGETS), condition::SYNCED)
                    .await
                    .as_deref()
                    == Some(reason::CLUSTER_SCOPED_API_IN_BINDING)
                    && binding_reason(w, "team-a", "gadgets", None, condition::SYNCED)
                        .await
                        .as_deref()
                        == Some(reason::CLUSTER_SCOPED_API_IN_BINDING)
            }
            .boxed()
        })
        .await;

    // The status follows a spec change: it is not frozen.
    world
        .consumer()
        .admin_client()
        .patch(
            &bindings(),
            Some("team-a"),
            "gadgets",
            &Patch::Merge(json!({"spec": {"apis": [{"name": GADGETS}, {"name": WIDGETS}]}})),
            &PatchParams::default(),
        )
        .await
        .expect("adding widgets to the Binding");
    world
        .run_until_async("the Binding's status names the new API", 60, |w| {
            async move {
                binding(w, "team-a", "gadgets")
                    .await
                    .and_then(|b| b.status)
                    .is_some_and(|s| s.bound_api(WIDGETS).is_some())
            }
            .boxed()
        })
        .await;

    world.delete_on_consumer(&bindings(), Some("team-a"), "gadgets").await;
    world
        .run_until_async("the Binding is deleted", 60, |w| {
            async move { binding(w, "team-a", "gadgets").await.is_none() }.boxed()
        })
        .await;
    world.steps_for(5).await;
    assert!(
        world.consumer_get(&crds(), None, GADGETS).await.is_some(),
        "the Binding never served gadgets: their CRD stays"
    );
    assert!(
        world.consumer_get(&gadgets(), None, "g1").await.is_some(),
        "the user's gadget stays"
    );
    assert!(
        widgets_crd_present(&world).await,
        "the ClusterBinding still uses widgets"
    );
}
