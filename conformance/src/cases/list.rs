//! Lists and selectors: label and field selectors on list and watch, pagination, and
//! resourceVersion semantics.

use kbind_cluster::{ClusterClient, DynamicObject, ListParams, ObjectList, PostParams, WatchParams};
use kube::api::VersionMatch;
use serde_json::{Value, json};

use crate::check;
use crate::support::{
    CaseResult, Context, Scope, config_map, describe, next_change, open_watch, res, rv_number, rv_of,
};
use crate::target::Target;

/// Names in a list, leaving out what kube-controller-manager publishes in every namespace.
fn names(list: &ObjectList<DynamicObject>) -> Vec<String> {
    list.items
        .iter()
        .filter_map(|o| o.metadata.name.clone())
        .filter(|n| n != crate::support::ROOT_CA_CONFIGMAP)
        .collect()
}

fn labelled(name: &str, app: &str) -> CaseResult<DynamicObject> {
    crate::support::object(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "labels": {"app": app}},
        "data": {"v": "0"},
    }))
}

async fn relabel(c: &dyn ClusterClient, ns: &str, name: &str, app: &str) -> CaseResult<DynamicObject> {
    let patch = kbind_cluster::Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    c.patch(&res::config_maps(), Some(ns), name, &patch, &Default::default())
        .await
        .ctx(format!("relabel {name}"))
}

/// Label and field selectors filter lists and watches; an object whose labels stop matching
/// is DELETED for the watch, one that starts matching is ADDED.
pub async fn selectors_filter_list_and_watch(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "select");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        for (name, app) in [("a", "x"), ("b", "y"), ("c", "x")] {
            c.create(&res::config_maps(), Some(&ns), &labelled(name, app)?, &pp)
                .await?;
        }
        let list_with = async |params: ListParams| c.list(&res::config_maps(), Some(&ns), &params).await;
        let by_label = list_with(ListParams::default().labels("app=x")).await?;
        check!(names(&by_label) == ["a", "c"], "app=x listed {:?}", names(&by_label));
        let by_set = list_with(ListParams::default().labels("app in (y),app notin (x)")).await?;
        check!(names(&by_set) == ["b"], "app in (y) listed {:?}", names(&by_set));
        let by_field = list_with(ListParams::default().fields("metadata.name=b")).await?;
        check!(
            names(&by_field) == ["b"],
            "metadata.name=b listed {:?}",
            names(&by_field)
        );
        let both = list_with(ListParams::default().labels("app=x").fields("metadata.name!=a")).await?;
        check!(
            names(&both) == ["c"],
            "app=x,metadata.name!=a listed {:?}",
            names(&both)
        );

        let rv = by_label.metadata.resource_version.clone().ctx("list resourceVersion")?;
        let mut by_label_watch = open_watch(
            c.as_ref(),
            &res::config_maps(),
            Some(&ns),
            &WatchParams::default().labels("app=x"),
            &rv,
        )
        .await?;
        let mut by_field_watch = open_watch(
            c.as_ref(),
            &res::config_maps(),
            Some(&ns),
            &WatchParams::default().fields("metadata.name=b"),
            &rv,
        )
        .await?;
        relabel(c.as_ref(), &ns, "a", "y").await?;
        relabel(c.as_ref(), &ns, "b", "x").await?;
        let patch = kbind_cluster::Patch::Merge(json!({"data": {"v": "1"}}));
        c.patch(&res::config_maps(), Some(&ns), "c", &patch, &Default::default())
            .await?;
        c.create(&res::config_maps(), Some(&ns), &labelled("d", "y")?, &pp)
            .await?;
        c.delete(&res::config_maps(), Some(&ns), "c", &Default::default())
            .await?;
        let expected = [("DELETED", "a"), ("ADDED", "b"), ("MODIFIED", "c"), ("DELETED", "c")];
        for (kind, name) in expected {
            let (k, n, _) = describe(&next_change(&mut by_label_watch, s.patience()).await?);
            check!(
                (k.as_str(), n.as_str()) == (kind, name),
                "app=x watch: expected {kind} {name}, got {k} {n}"
            );
        }
        let (k, n, _) = describe(&next_change(&mut by_field_watch, s.patience()).await?);
        check!(
            (k.as_str(), n.as_str()) == ("MODIFIED", "b"),
            "metadata.name=b watch: got {k} {n}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// limit/continue pages read one snapshot: objects created after the first page never appear.
pub async fn list_pagination_is_a_consistent_snapshot(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "page");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        for i in 1..=5 {
            c.create(
                &res::config_maps(),
                Some(&ns),
                &config_map(&format!("cm-{i}"), json!({}))?,
                &pp,
            )
            .await?;
        }
        let first = c
            .list(&res::config_maps(), Some(&ns), &ListParams::default().limit(2))
            .await?;
        check!(names(&first) == ["cm-1", "cm-2"], "page 1: {:?}", names(&first));
        check!(
            // cm-3..cm-5 and the namespace's kube-root-ca.crt
            first.metadata.remaining_item_count == Some(4),
            "page 1 remainingItemCount: {:?}",
            first.metadata.remaining_item_count
        );
        let token = first
            .metadata
            .continue_
            .clone()
            .filter(|t| !t.is_empty())
            .ctx("continue token of page 1")?;
        for late in ["cm-3a", "cm-9"] {
            c.create(&res::config_maps(), Some(&ns), &config_map(late, json!({}))?, &pp)
                .await?;
        }
        let second = c
            .list(
                &res::config_maps(),
                Some(&ns),
                &ListParams::default().limit(2).continue_token(&token),
            )
            .await?;
        check!(names(&second) == ["cm-3", "cm-4"], "page 2: {:?}", names(&second));
        check!(
            second.metadata.resource_version == first.metadata.resource_version,
            "page 2 read at {:?}, page 1 at {:?}",
            second.metadata.resource_version,
            first.metadata.resource_version
        );
        let token = second
            .metadata
            .continue_
            .clone()
            .filter(|t| !t.is_empty())
            .ctx("continue token of page 2")?;
        let third = c
            .list(
                &res::config_maps(),
                Some(&ns),
                &ListParams::default().limit(2).continue_token(&token),
            )
            .await?;
        check!(names(&third) == ["cm-5"], "page 3: {:?}", names(&third));
        check!(
            third.metadata.continue_.as_deref().is_none_or(str::is_empty),
            "page 3 has a continue token"
        );
        let fresh = c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await?;
        check!(names(&fresh).len() == 7, "a fresh list: {:?}", names(&fresh));
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// resourceVersion "0" reads any version, NotOlderThan reads at least that version, Exact
/// reads exactly that (older) version.
pub async fn list_resource_version_semantics(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "listrv");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let a = c
            .create(&res::config_maps(), Some(&ns), &config_map("a", json!({}))?, &pp)
            .await?;
        let b = c
            .create(&res::config_maps(), Some(&ns), &config_map("b", json!({}))?, &pp)
            .await?;
        let (rv_a, rv_b) = (rv_of(&a)?, rv_of(&b)?);

        let any = c
            .list(&res::config_maps(), Some(&ns), &ListParams::default().match_any())
            .await
            .ctx("list at resourceVersion 0")?;
        rv_number(any.metadata.resource_version.as_deref())?;

        let not_older = ListParams {
            resource_version: Some(rv_b.to_string()),
            version_match: Some(VersionMatch::NotOlderThan),
            ..ListParams::default()
        };
        let fresh = c
            .list(&res::config_maps(), Some(&ns), &not_older)
            .await
            .ctx("NotOlderThan list")?;
        let fresh_rv = rv_number(fresh.metadata.resource_version.as_deref())?;
        check!(fresh_rv >= rv_b, "NotOlderThan {rv_b} answered at {fresh_rv}");
        check!(names(&fresh) == ["a", "b"], "NotOlderThan {rv_b}: {:?}", names(&fresh));

        let exact = ListParams {
            resource_version: Some(rv_a.to_string()),
            version_match: Some(VersionMatch::Exact),
            ..ListParams::default()
        };
        let old = c.list(&res::config_maps(), Some(&ns), &exact).await.ctx("Exact list")?;
        check!(
            rv_number(old.metadata.resource_version.as_deref())? == rv_a,
            "Exact {rv_a} answered at {:?}",
            old.metadata.resource_version
        );
        check!(names(&old) == ["a"], "Exact {rv_a} (before b): {:?}", names(&old));
        let unchanged: Value = json!(old.items[0].data);
        check!(unchanged == json!(a.data), "Exact read changed a's body");
        Ok(())
    }
    .await;
    s.finish(result).await
}
