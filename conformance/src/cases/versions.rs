//! resourceVersion, optimistic concurrency, immutable metadata and generation.

use kbind_cluster::{ClusterClient, Error, PostParams};
use serde_json::json;

use crate::check;
use crate::support::{
    CaseResult, Context, Scope, WidgetCrd, config_map, expect_err, object, res, rv_of, to_json, widget,
};
use crate::target::Target;

/// Every write returns a resourceVersion greater than all before it, across resources.
pub async fn resource_version_strictly_increases(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "rv");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let mut seen = Vec::new();
        let cm = c
            .create(
                &res::config_maps(),
                Some(&ns),
                &config_map("one", json!({"a": "1"}))?,
                &pp,
            )
            .await?;
        seen.push(("create configmap", rv_of(&cm)?));
        let secret =
            object(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "two"}, "data": {"k": "dg=="}}))?;
        let secret = c.create(&res::secrets(), Some(&ns), &secret, &pp).await?;
        seen.push(("create secret", rv_of(&secret)?));
        let mut cm2 = cm.clone();
        cm2.data["data"]["a"] = json!("2");
        let cm2 = c.replace(&res::config_maps(), Some(&ns), "one", &cm2, &pp).await?;
        seen.push(("replace configmap", rv_of(&cm2)?));
        let sa = object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "three"}}))?;
        let sa = c.create(&res::service_accounts(), Some(&ns), &sa, &pp).await?;
        seen.push(("create serviceaccount", rv_of(&sa)?));
        let list = c.list(&res::config_maps(), Some(&ns), &Default::default()).await?;
        let list_rv = list.metadata.resource_version.as_deref().ctx("list resourceVersion")?;
        check!(
            crate::support::rv_number(Some(list_rv))? >= seen[seen.len() - 1].1,
            "a list after the writes reports resourceVersion {list_rv}, older than the writes {seen:?}"
        );
        for pair in seen.windows(2) {
            check!(pair[1].1 > pair[0].1, "resourceVersion did not increase: {seen:?}");
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A replace carrying a stale resourceVersion is a 409 Conflict and changes nothing.
pub async fn stale_replace_is_conflict(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "stale");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let v1 = c
            .create(
                &res::config_maps(),
                Some(&ns),
                &config_map("cm", json!({"a": "1"}))?,
                &pp,
            )
            .await?;
        let mut v2 = v1.clone();
        v2.data["data"]["a"] = json!("2");
        c.replace(&res::config_maps(), Some(&ns), "cm", &v2, &pp).await?;
        let mut stale = v1.clone();
        stale.data["data"]["a"] = json!("3");
        let err = expect_err(
            c.replace(&res::config_maps(), Some(&ns), "cm", &stale, &pp).await,
            "stale replace",
        )?;
        check!(err.is_conflict(), "stale replace: expected 409 Conflict, got {err:?}");
        let now = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(
            now.data["data"]["a"] == "2",
            "the stale replace changed the object: {:?}",
            now.data
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A replace without resourceVersion is 422 on a custom resource and an unconditional update
/// on a ConfigMap.
pub async fn replace_without_resource_version(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "norv");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(false)).await?;
        c.create(&widgets, Some(&ns), &widget(&group, "w", json!({"size": 1}))?, &pp).await?;
        let unconditional = widget(&group, "w", json!({"size": 2}))?;
        let err = expect_err(c.replace(&widgets, Some(&ns), "w", &unconditional, &pp).await, "CR replace without resourceVersion")?;
        let on_rv = matches!(&err, Error::Invalid { causes, .. } if causes.iter().any(|c| c.field == "metadata.resourceVersion"));
        check!(on_rv, "CR replace without resourceVersion: expected 422 on metadata.resourceVersion, got {err:?}");

        c.create(&res::config_maps(), Some(&ns), &config_map("cm", json!({"a": "1"}))?, &pp).await?;
        let replaced = c
            .replace(&res::config_maps(), Some(&ns), "cm", &config_map("cm", json!({"a": "2"}))?, &pp)
            .await
            .ctx("ConfigMap replace without resourceVersion")?;
        check!(replaced.data["data"]["a"] == "2", "unconditional ConfigMap replace lost the change: {:?}", replaced.data);
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// uid and creationTimestamp are set by the server on create and never change afterwards.
pub async fn uid_and_creation_timestamp_are_immutable(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "immut");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let body = config_map("cm", json!({"a": "1"}))?;
        let created = c.create(&res::config_maps(), Some(&ns), &body, &pp).await?;
        let uid = created.metadata.uid.clone().ctx("uid on create")?;
        let created_at = created
            .metadata
            .creation_timestamp
            .clone()
            .ctx("creationTimestamp on create")?;
        check!(!uid.is_empty(), "empty uid");

        let mut moved = to_json(&created);
        moved["metadata"]["creationTimestamp"] = json!("2001-01-01T00:00:00Z");
        moved["data"]["a"] = json!("2");
        let moved = object(moved)?;
        let updated = c.replace(&res::config_maps(), Some(&ns), "cm", &moved, &pp).await?;
        check!(
            updated.metadata.creation_timestamp.as_ref() == Some(&created_at),
            "creationTimestamp changed on update: {:?} -> {:?}",
            created_at,
            updated.metadata.creation_timestamp
        );
        check!(
            updated.metadata.uid.as_deref() == Some(uid.as_str()),
            "uid changed on update"
        );

        let mut other_uid = updated.clone();
        other_uid.metadata.uid = Some("00000000-0000-0000-0000-000000000001".into());
        let err = expect_err(
            c.replace(&res::config_maps(), Some(&ns), "cm", &other_uid, &pp).await,
            "replace with another uid",
        )?;
        check!(
            err.is_conflict(),
            "replace with another uid: expected 409 (UID precondition), got {err:?}"
        );
        let now = c.get(&res::config_maps(), Some(&ns), "cm").await?;
        check!(
            now.metadata.uid.as_deref() == Some(uid.as_str()),
            "uid changed: {:?}",
            now.metadata.uid
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// generation: 1 on create, bumped by spec changes, not by metadata or status changes (status
/// subresource), and bumped when deletion starts.
pub async fn generation_tracks_spec_changes(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "gen");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(true)).await?;
        let w = c
            .create(&widgets, Some(&ns), &widget(&group, "w", json!({"size": 1}))?, &pp)
            .await?;
        check!(
            w.metadata.generation == Some(1),
            "generation on create: {:?}",
            w.metadata.generation
        );

        let mut spec = w.clone();
        spec.data["spec"]["size"] = json!(2);
        let w = c.replace(&widgets, Some(&ns), "w", &spec, &pp).await?;
        check!(
            w.metadata.generation == Some(2),
            "generation after a spec change: {:?}",
            w.metadata.generation
        );

        let mut labelled = w.clone();
        labelled.metadata.labels = Some([("tier".to_string(), "gold".to_string())].into());
        let w = c.replace(&widgets, Some(&ns), "w", &labelled, &pp).await?;
        check!(
            w.metadata.generation == Some(2),
            "a label change bumped generation: {:?}",
            w.metadata.generation
        );

        let mut status = w.clone();
        status.data["status"] = json!({"ready": true});
        let w = c.replace_status(&widgets, Some(&ns), "w", &status, &pp).await?;
        check!(
            w.metadata.generation == Some(2),
            "a status change bumped generation: {:?}",
            w.metadata.generation
        );

        let mut held = w.clone();
        held.metadata.finalizers = Some(vec!["conformance.kbind.io/hold".into()]);
        let w = c.replace(&widgets, Some(&ns), "w", &held, &pp).await?;
        check!(
            w.metadata.generation == Some(2),
            "a finalizer change bumped generation: {:?}",
            w.metadata.generation
        );
        let deleting = c
            .delete(&widgets, Some(&ns), "w", &Default::default())
            .await?
            .ctx("delete held widget")?;
        check!(
            deleting.metadata.deletion_timestamp.is_some(),
            "no deletionTimestamp: {:?}",
            deleting.metadata
        );
        check!(
            deleting.metadata.generation == Some(3),
            "setting deletionTimestamp did not bump generation: {:?}",
            deleting.metadata.generation
        );
        release_finalizers(c.as_ref(), &widgets, &ns, "w").await
    }
    .await;
    s.finish(result).await
}

/// Removes every finalizer of an object (so cleanup can complete).
pub(crate) async fn release_finalizers(
    c: &dyn ClusterClient,
    resource: &kbind_cluster::ApiResource,
    ns: &str,
    name: &str,
) -> CaseResult {
    let patch = kbind_cluster::Patch::Merge(json!({"metadata": {"finalizers": null}}));
    match c.patch(resource, Some(ns), name, &patch, &Default::default()).await {
        Ok(_) | Err(Error::NotFound { .. }) => Ok(()),
        Err(e) => Err(e).ctx(format!("release finalizers of {name}")),
    }
}
