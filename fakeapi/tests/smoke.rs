//! Smoke test of the in-process fake through the seam.

use futures::StreamExt;
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DynamicObject, ListParams, PostParams, WatchEvent, WatchParams,
};
use serde_json::json;

fn cm() -> ApiResource {
    ApiResource {
        group: "".into(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: "ConfigMap".into(),
        plural: "configmaps".into(),
    }
}

#[tokio::test(start_paused = true)]
async fn create_list_watch_roundtrip() {
    let cluster = fakeapi::FakeCluster::builder("smoke").seed(7).build();
    let c = cluster.admin_client();
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"x":"1"}}))
            .unwrap();
    let created = c
        .create(&cm(), Some("default"), &obj, &PostParams::default())
        .await
        .unwrap();
    let rv = created.metadata.resource_version.clone().unwrap();
    let list = c.list(&cm(), Some("default"), &ListParams::default()).await.unwrap();
    assert_eq!(list.items.len(), 1);
    let mut w = c
        .watch(&cm(), Some("default"), &WatchParams::default(), &rv)
        .await
        .unwrap();
    c.delete(&cm(), Some("default"), "a", &Default::default())
        .await
        .unwrap();
    match w.next().await.unwrap().unwrap() {
        WatchEvent::Deleted(o) => assert_eq!(o.metadata.name.as_deref(), Some("a")),
        other => panic!("unexpected {other:?}"),
    }
    assert!(c.get_opt(&cm(), Some("default"), "a").await.unwrap().is_none());
    let id = c.identity().await.unwrap();
    assert_eq!(id.uid, cluster.identity_uid());
}

/// The managers of an object, as `manager/operation`, in order.
fn managers(obj: &DynamicObject) -> Vec<String> {
    obj.metadata
        .managed_fields
        .iter()
        .flatten()
        .map(|e| {
            format!(
                "{}/{}",
                e.manager.as_deref().unwrap_or(""),
                e.operation.as_deref().unwrap_or("")
            )
        })
        .collect()
}

/// As kube-apiserver does: a write that changes only who owns what is stored (an apply of
/// values another manager set; a patch removing a managedFields entry), one that changes
/// nothing is not.
#[tokio::test(start_paused = true)]
async fn ownership_only_writes_are_stored_and_no_op_writes_are_not() {
    use kbind_cluster::{Patch, PatchParams};
    let cluster = fakeapi::FakeCluster::builder("smoke").seed(7).build();
    let c = cluster.admin_client();
    let obj: DynamicObject =
        serde_json::from_value(json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"x":"1"}}))
            .expect("a ConfigMap");
    let created = c
        .create(
            &cm(),
            Some("default"),
            &obj,
            &PostParams {
                field_manager: Some("creator".into()),
                ..PostParams::default()
            },
        )
        .await
        .expect("create");
    assert_eq!(managers(&created), ["creator/Update"]);
    let body = json!({"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a"},"data":{"x":"1"}});
    let applied = c
        .patch(
            &cm(),
            Some("default"),
            "a",
            &Patch::Apply(body.clone()),
            &PatchParams::apply("applier"),
        )
        .await
        .expect("apply");
    assert_ne!(
        applied.metadata.resource_version, created.metadata.resource_version,
        "an apply that adds its entry is stored"
    );
    assert_eq!(managers(&applied), ["applier/Apply", "creator/Update"]);
    let again = c
        .patch(
            &cm(),
            Some("default"),
            "a",
            &Patch::Apply(body),
            &PatchParams::apply("applier"),
        )
        .await
        .expect("apply again");
    assert_eq!(
        again.metadata.resource_version, applied.metadata.resource_version,
        "the same apply again changes nothing"
    );
    let index = again
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .position(|e| e.manager.as_deref() == Some("creator"))
        .expect("the create's entry");
    let removal: json_patch::Patch =
        serde_json::from_value(json!([{"op": "remove", "path": format!("/metadata/managedFields/{index}")}]))
            .expect("a JSON patch");
    let removed = c
        .patch(
            &cm(),
            Some("default"),
            "a",
            &Patch::Json(removal),
            &PatchParams::default(),
        )
        .await
        .expect("remove the create's entry");
    assert_eq!(managers(&removed), ["applier/Apply"]);
    let read = c
        .get_opt(&cm(), Some("default"), "a")
        .await
        .expect("get")
        .expect("present");
    assert_eq!(managers(&read), ["applier/Apply"], "the removal is stored");
}
