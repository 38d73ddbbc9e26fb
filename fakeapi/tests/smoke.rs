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
