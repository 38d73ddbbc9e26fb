//! Watches: ordering, resuming, 410 after compaction, bookmarks, and list-then-watch.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use kbind_cluster::{ClusterClient, ListParams, PostParams, WatchEvent, WatchParams};
use serde_json::json;
use tokio::time::Instant;

use crate::check;
use crate::support::{
    CaseError, CaseResult, Context, Scope, config_map, describe, expect_err, next_change, next_event, open_watch,
    require_faults, res, rv_number, rv_of,
};
use crate::target::{Target, TargetKind};

async fn list_rv(c: &dyn ClusterClient, ns: &str) -> CaseResult<String> {
    let list = c.list(&res::config_maps(), Some(ns), &ListParams::default()).await?;
    list.metadata.resource_version.ctx("list resourceVersion")
}

/// Events arrive once each, in the order of the writes, with their writes' resourceVersions.
pub async fn watch_delivers_events_in_order(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "order");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let start = list_rv(c.as_ref(), &ns).await?;
        let mut w = open_watch(
            c.as_ref(),
            &res::config_maps(),
            Some(&ns),
            &WatchParams::default(),
            &start,
        )
        .await?;
        let a = c
            .create(
                &res::config_maps(),
                Some(&ns),
                &config_map("a", json!({"v": "1"}))?,
                &pp,
            )
            .await?;
        let b = c
            .create(
                &res::config_maps(),
                Some(&ns),
                &config_map("b", json!({"v": "1"}))?,
                &pp,
            )
            .await?;
        let mut a2 = a.clone();
        a2.data["data"]["v"] = json!("2");
        let a2 = c.replace(&res::config_maps(), Some(&ns), "a", &a2, &pp).await?;
        c.delete(&res::config_maps(), Some(&ns), "b", &Default::default())
            .await?;
        let expected = [
            ("ADDED", "a", Some(rv_of(&a)?)),
            ("ADDED", "b", Some(rv_of(&b)?)),
            ("MODIFIED", "a", Some(rv_of(&a2)?)),
            ("DELETED", "b", None),
        ];
        let mut last = rv_number(Some(&start))?;
        for (kind, name, rv) in expected {
            let ev = next_change(&mut w, s.patience()).await?;
            let (k, n, r) = describe(&ev);
            let r = rv_number(Some(&r))?;
            check!(k == kind && n == name, "expected {kind} {name}, got {k} {n}");
            check!(
                rv.is_none_or(|rv| rv == r),
                "{kind} {name}: event resourceVersion {r}, write returned {rv:?}"
            );
            check!(r > last, "{kind} {name}: resourceVersion {r} not after {last}");
            last = r;
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Resuming a watch from any resourceVersion it delivered replays exactly what came after.
pub async fn watch_resumes_from_any_resource_version(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "resume");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let start = list_rv(c.as_ref(), &ns).await?;
        let mut w = open_watch(
            c.as_ref(),
            &res::config_maps(),
            Some(&ns),
            &WatchParams::default(),
            &start,
        )
        .await?;
        for i in 0..4 {
            c.create(
                &res::config_maps(),
                Some(&ns),
                &config_map(&format!("cm-{i}"), json!({"v": "0"}))?,
                &pp,
            )
            .await?;
        }
        let mut first = c.get(&res::config_maps(), Some(&ns), "cm-0").await?;
        first.data["data"]["v"] = json!("1");
        c.replace(&res::config_maps(), Some(&ns), "cm-0", &first, &pp).await?;
        c.delete(&res::config_maps(), Some(&ns), "cm-1", &Default::default())
            .await?;
        let mut truth = Vec::new();
        for _ in 0..6 {
            truth.push(describe(&next_change(&mut w, s.patience()).await?));
        }
        let mut from = vec![start.clone()];
        from.extend(truth.iter().map(|(_, _, rv)| rv.clone()));
        for (k, rv) in from.iter().enumerate() {
            let mut resumed =
                open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), rv).await?;
            for want in &truth[k..] {
                let got = describe(&next_change(&mut resumed, s.patience()).await?);
                check!(&got == want, "resumed from {rv}: expected {want:?}, got {got:?}");
            }
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

fn is_gone(result: &Option<kbind_cluster::Result<WatchEvent<kbind_cluster::DynamicObject>>>) -> bool {
    match result {
        Some(Err(e)) => e.is_gone(),
        Some(Ok(WatchEvent::Error(status))) => status.code == 410,
        _ => false,
    }
}

/// After compaction a watch from an old resourceVersion is 410 Gone; a relist and a watch from
/// the list's resourceVersion (what kube's watcher does) recover everything (fake-only).
pub async fn watch_from_compacted_version_is_gone_and_relist_recovers(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "gone");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let a = c
            .create(&res::config_maps(), Some(&ns), &config_map("a", json!({}))?, &pp)
            .await?;
        c.create(&res::config_maps(), Some(&ns), &config_map("b", json!({}))?, &pp)
            .await?;
        faults.compact();
        let old = a.metadata.resource_version.clone().ctx("rv of a")?;
        match c
            .watch(&res::config_maps(), Some(&ns), &WatchParams::default(), &old)
            .await
        {
            Err(e) => check!(e.is_gone(), "watch from a compacted version: expected 410, got {e:?}"),
            Ok(mut w) => {
                let first = next_event(&mut w, s.patience()).await?;
                check!(
                    is_gone(&first),
                    "watch from a compacted version: expected 410 first, got {first:?}"
                );
            }
        }
        let exact = ListParams {
            resource_version: Some(old.clone()),
            version_match: Some(kube::api::VersionMatch::Exact),
            ..ListParams::default()
        };
        let err = expect_err(
            c.list(&res::config_maps(), Some(&ns), &exact).await,
            "Exact list at a compacted version",
        )?;
        check!(
            err.is_gone(),
            "Exact list at a compacted version: expected 410, got {err:?}"
        );
        let list = c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await?;
        let names: BTreeSet<_> = list
            .items
            .iter()
            .filter_map(|o| o.metadata.name.clone())
            .filter(|n| n != crate::support::ROOT_CA_CONFIGMAP)
            .collect();
        check!(
            names == BTreeSet::from(["a".to_string(), "b".to_string()]),
            "relist: {names:?}"
        );
        let rv = list.metadata.resource_version.ctx("relist resourceVersion")?;
        let mut w = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), &rv).await?;
        c.create(&res::config_maps(), Some(&ns), &config_map("c", json!({}))?, &pp)
            .await?;
        let (kind, name, _) = describe(&next_change(&mut w, s.patience()).await?);
        check!(
            (kind.as_str(), name.as_str()) == ("ADDED", "c"),
            "after relist: {kind} {name}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Bookmarks come when requested (and only then), and a watch ends at its timeout.
pub async fn watch_sends_bookmarks_when_requested(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "bookmark");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let start = list_rv(c.as_ref(), &ns).await?;
        // kube-apiserver sends a bookmark ~2 s before a watch's timeout (or every minute).
        let timeout = if t.kind() == TargetKind::RealApiserver { 10 } else { 3 };
        let limit = Duration::from_secs(u64::from(timeout)) + s.patience();
        for bookmarks in [true, false] {
            let params = WatchParams {
                bookmarks,
                timeout: Some(timeout),
                ..WatchParams::default()
            };
            let mut w = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &params, &start).await?;
            let deadline = Instant::now() + limit;
            let mut seen = Vec::new();
            loop {
                let left = deadline.saturating_duration_since(Instant::now());
                match next_event(&mut w, left).await? {
                    None => break,
                    Some(Ok(WatchEvent::Bookmark(b))) => {
                        let rv = rv_number(Some(&b.metadata.resource_version))?;
                        check!(
                            rv >= rv_number(Some(&start))?,
                            "bookmark at {rv}, older than the watch start {start}"
                        );
                        seen.push(rv);
                    }
                    Some(other) => return Err(CaseError::failed(format!("unexpected watch item {other:?}"))),
                }
            }
            check!(
                bookmarks != seen.is_empty(),
                "bookmarks requested: {bookmarks}; bookmarks seen: {seen:?}"
            );
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A list followed by a watch from the list's resourceVersion sees every object written
/// concurrently, each exactly once.
pub async fn list_then_watch_loses_nothing_under_writes(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "listwatch");
    let result = async {
        let ns = s.namespace("a").await?;
        let c: Arc<dyn ClusterClient> = s.admin.clone();
        const TOTAL: usize = 30;
        let (started_tx, started_rx) = tokio::sync::oneshot::channel();
        let writer = {
            let (c, ns) = (c.clone(), ns.clone());
            tokio::spawn(async move {
                let mut started = Some(started_tx);
                for i in 0..TOTAL {
                    let cm = config_map(&format!("cm-{i:02}"), json!({}))?;
                    c.create(&res::config_maps(), Some(&ns), &cm, &PostParams::default())
                        .await?;
                    if i == TOTAL / 3 {
                        // The list below starts while two thirds of the writes are still to come.
                        started.take().map(|tx| tx.send(()));
                    }
                }
                Ok::<(), CaseError>(())
            })
        };
        started_rx
            .await
            .map_err(|_| CaseError::failed("writer failed before a third of its writes"))?;
        let list = c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await?;
        let mut names: BTreeSet<String> = list.items.iter().filter_map(|o| o.metadata.name.clone()).collect();
        let rv = list.metadata.resource_version.ctx("list resourceVersion")?;
        let mut w = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), &rv).await?;
        while names.len() < TOTAL {
            let (kind, name, _) = describe(&next_change(&mut w, s.patience()).await?);
            check!(kind == "ADDED", "unexpected {kind} {name}");
            check!(
                names.insert(name.clone()),
                "{name} delivered twice (listed and watched, or watched twice)"
            );
        }
        writer
            .await
            .map_err(|e| CaseError::failed(format!("writer panicked: {e}")))??;
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// The seam's watcher (`kbind_cluster::watcher`) meets a 410 when it resumes after compaction,
/// relists (Init … InitDone with every object) and keeps watching (fake-only).
pub async fn seam_watcher_relists_after_compaction(t: &dyn Target) -> CaseResult {
    use futures::StreamExt;
    use kbind_cluster::watcher::{BackoffPolicy, Event, WatcherConfig, watcher};

    let faults = require_faults(t)?;
    let s = Scope::new(t, "relist");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        c.create(&res::config_maps(), Some(&ns), &config_map("a", json!({}))?, &pp)
            .await?;
        let config = WatcherConfig::default().backoff(BackoffPolicy::Immediate);
        let mut events = Box::pin(watcher(c.clone(), res::config_maps(), Some(ns.clone()), config));
        let mut next = async || -> CaseResult<Event<kbind_cluster::DynamicObject>> {
            loop {
                match tokio::time::timeout(s.patience(), events.next()).await {
                    Ok(Some(Ok(Event::InitApply(o) | Event::Apply(o))))
                        if o.metadata.name.as_deref() == Some(crate::support::ROOT_CA_CONFIGMAP) =>
                    {
                        continue;
                    }
                    Ok(Some(Ok(ev))) => return Ok(ev),
                    Ok(Some(Err(_))) => continue,
                    Ok(None) => return Err(CaseError::Failed("watcher stream ended".into())),
                    Err(_) => return Err(CaseError::Failed("no watcher event in time".into())),
                }
            }
        };
        let name = |o: &kbind_cluster::DynamicObject| o.metadata.name.clone().unwrap_or_default();
        check!(matches!(next().await?, Event::Init), "first event is Init");
        let first = next().await?;
        check!(
            matches!(&first, Event::InitApply(o) if name(o) == "a"),
            "InitApply a, got {first:?}"
        );
        check!(matches!(next().await?, Event::InitDone), "then InitDone");
        // Hold the watcher off while history moves on and is compacted away.
        faults.inject_error(
            fakeapi::ErrorRule::new(Some("watch"), Some("configmaps"), fakeapi::InjectedError::Internal).times(2),
        );
        faults.drop_watches();
        c.create(&res::config_maps(), Some(&ns), &config_map("b", json!({}))?, &pp)
            .await?;
        faults.compact();
        let mut seen = BTreeSet::new();
        let mut relisted = false;
        while !relisted {
            match next().await? {
                Event::Init => seen.clear(),
                Event::InitApply(o) => {
                    seen.insert(name(&o));
                }
                Event::InitDone => relisted = true,
                other => return Err(CaseError::Failed(format!("expected a relist, got {other:?}"))),
            }
        }
        check!(
            seen == BTreeSet::from(["a".to_string(), "b".to_string()]),
            "relist saw {seen:?}"
        );
        c.create(&res::config_maps(), Some(&ns), &config_map("c", json!({}))?, &pp)
            .await?;
        let after = next().await?;
        check!(
            matches!(&after, Event::Apply(o) if name(o) == "c"),
            "then Apply c, got {after:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}
