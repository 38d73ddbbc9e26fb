//! Fake-only fault switches: partition and heal, latency on a paused clock, injected 429, 403
//! and 500, dropped watches, a replaced cluster, and determinism of a seeded fake.

use std::time::Duration;

use fakeapi::{ErrorRule, FakeCluster, InjectedError};
use kbind_cluster::{ClusterClient, ClusterClientExt, Error, ListParams, PostParams, WatchParams};
use serde_json::json;
use tokio::runtime::RuntimeFlavor;
use tokio::time::Instant;

use crate::check;
use crate::support::{
    CaseError, CaseResult, Context, Scope, WidgetCrd, config_map, describe, eventually, expect_err, next_change,
    next_event, object, open_watch, require_faults, res,
};
use crate::target::{Target, TargetKind};

/// A partition fails requests with transport errors and ends watches; heal restores service.
pub async fn fault_partition_and_heal(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "partition");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let rv = faults.resource_version().to_string();
        let mut w = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), &rv).await?;
        faults.partition();
        let err = expect_err(c.get(&res::namespaces(), None, &ns).await, "get while partitioned")?;
        // In process the partition is a transport error; behind the in-process router (no
        // socket to cut) it is a 503. Both are what the engine must treat as unreachable.
        check!(
            err.is_transient(),
            "expected an unreachable-provider error, got {err:?}"
        );
        let err = expect_err(
            c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await,
            "list while partitioned",
        )?;
        check!(
            err.is_transient(),
            "expected an unreachable-provider error, got {err:?}"
        );
        loop {
            match next_event(&mut w, s.patience()).await? {
                None => break,
                Some(Ok(ev)) => {
                    return Err(CaseError::failed(format!(
                        "event while partitioned: {:?}",
                        describe(&ev)
                    )));
                }
                Some(Err(e)) => check!(matches!(e, Error::Transport(_)), "watch ended with {e:?}"),
            }
        }
        faults.heal();
        c.get(&res::namespaces(), None, &ns).await.ctx("get after heal")?;
        Ok(())
    }
    .await;
    faults.heal();
    s.finish(result).await
}

/// Latency delays every answer by exactly the configured time on a paused clock.
pub async fn fault_latency_on_paused_clock(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    if t.kind() != TargetKind::InProcess {
        // tokio advances a paused clock to the next timer whenever the runtime parks, even
        // with a socket already readable, so over loopback every wait on the server jumps to
        // the client's HTTP/2 keep-alive and the connection times out. The socket targets run
        // `fault_latency_holds_answers_until_removed` on the real clock instead.
        return Err(CaseError::Skipped(
            "a paused clock jumps over socket waits; see fault_latency_holds_answers_until_removed".into(),
        ));
    }
    if tokio::runtime::Handle::current().runtime_flavor() != RuntimeFlavor::CurrentThread {
        return Err(CaseError::Skipped(
            "pausing the clock needs a current-thread runtime".into(),
        ));
    }
    let c = t.admin();
    let latency = Duration::from_secs(2);
    faults.set_latency(Some(latency));
    tokio::time::pause();
    let result = async {
        let start = Instant::now();
        c.get(&res::namespaces(), None, "kube-system").await?;
        let took = start.elapsed();
        check!(
            took >= latency && took < latency + Duration::from_millis(50),
            "a request took {took:?} with {latency:?} latency"
        );
        let cut = tokio::time::timeout(latency / 2, c.get(&res::namespaces(), None, "default")).await;
        check!(cut.is_err(), "a request finished before its latency: {cut:?}");
        check!(
            faults.delayed_requests() == 0,
            "the server still holds the request its client gave up"
        );
        faults.set_latency(None);
        let start = Instant::now();
        c.get(&res::namespaces(), None, "kube-system").await?;
        check!(
            start.elapsed() < Duration::from_millis(50),
            "latency still applied after removal: {:?}",
            start.elapsed()
        );
        Ok(())
    }
    .await;
    faults.set_latency(None);
    tokio::time::resume();
    result
}

/// Latency holds answers until it is removed; a request its client gives up leaves the server.
pub async fn fault_latency_holds_answers_until_removed(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let patience = t.patience();
    // Far beyond the case's timeout: an answer that arrives at all came without the latency.
    faults.set_latency(Some(Duration::from_secs(3600)));
    let result = async {
        let c = t.admin();
        let held = tokio::spawn(async move { c.get(&res::namespaces(), None, "kube-system").await.map(|_| ()) });
        eventually(patience, "the request is held by the latency", async || {
            let n = faults.delayed_requests();
            check!(n == 1, "{n} request(s) waiting out the latency");
            Ok(())
        })
        .await?;
        check!(!held.is_finished(), "a request was answered during its latency");
        held.abort();
        // Over HTTP/2 the client resets the stream and the server drops the handler.
        eventually(patience, "the abandoned request leaves the server", async || {
            let n = faults.delayed_requests();
            check!(n == 0, "{n} request(s) still waiting out the latency");
            Ok(())
        })
        .await?;
        faults.set_latency(None);
        t.admin()
            .get(&res::namespaces(), None, "kube-system")
            .await
            .ctx("get after the latency was removed")?;
        Ok(())
    }
    .await;
    faults.set_latency(None);
    result
}

/// An injected 429 surfaces as TooManyRequests with its Retry-After seconds, once.
pub async fn fault_too_many_requests_has_retry_after(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "toomany");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &config_map("cm", json!({}))?,
            &PostParams::default(),
        )
        .await?;
        faults.inject_error(
            ErrorRule::new(
                Some("get"),
                Some("configmaps"),
                InjectedError::TooManyRequests { retry_after_seconds: 3 },
            )
            .times(1),
        );
        c.list(&res::config_maps(), Some(&ns), &ListParams::default())
            .await
            .ctx("a list is not a get")?;
        let err = expect_err(c.get(&res::config_maps(), Some(&ns), "cm").await, "get under 429")?;
        check!(
            matches!(
                err,
                Error::TooManyRequests {
                    retry_after_seconds: Some(3),
                    ..
                }
            ) && err.is_transient(),
            "expected 429 with Retry-After 3, got {err:?}"
        );
        c.get(&res::config_maps(), Some(&ns), "cm")
            .await
            .ctx("get after the one 429")?;
        Ok(())
    }
    .await;
    faults.clear_errors();
    s.finish(result).await
}

/// Injected 403 and 500 answer matching requests as often as asked; clear_errors ends them.
pub async fn fault_injected_forbidden_and_internal(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "inject");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let cm = config_map("cm", json!({}))?;
        faults.inject_error(ErrorRule::new(Some("create"), Some("configmaps"), InjectedError::Forbidden).times(1));
        let err = expect_err(
            c.create(&res::config_maps(), Some(&ns), &cm, &PostParams::default())
                .await,
            "create under 403",
        )?;
        check!(
            matches!(&err, Error::Forbidden { verb, .. } if verb == "create"),
            "expected 403 create, got {err:?}"
        );
        c.create(&res::config_maps(), Some(&ns), &cm, &PostParams::default())
            .await
            .ctx("create after the 403")?;
        faults.inject_error(ErrorRule::new(Some("list"), None, InjectedError::Internal).times(2));
        for attempt in 1..=2 {
            let err = expect_err(
                c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await,
                "list under 500",
            )?;
            check!(
                matches!(err, Error::Server { code: 500, .. }) && err.is_transient(),
                "attempt {attempt}: expected 500, got {err:?}"
            );
        }
        c.list(&res::config_maps(), Some(&ns), &ListParams::default())
            .await
            .ctx("list after two 500s")?;
        faults.inject_error(ErrorRule::new(Some("get"), Some("configmaps"), InjectedError::Internal));
        for _ in 0..3 {
            expect_err(
                c.get(&res::config_maps(), Some(&ns), "cm").await,
                "get under a standing 500",
            )?;
        }
        faults.clear_errors();
        c.get(&res::config_maps(), Some(&ns), "cm")
            .await
            .ctx("get after clear_errors")?;
        Ok(())
    }
    .await;
    faults.clear_errors();
    s.finish(result).await
}

/// Dropped watches end their streams; a watch resumed from the last seen version loses nothing.
pub async fn fault_dropped_watches_end_streams(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "dropwatch");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let list = c.list(&res::config_maps(), Some(&ns), &ListParams::default()).await?;
        let rv = list.metadata.resource_version.ctx("list resourceVersion")?;
        let mut a = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), &rv).await?;
        let mut b = open_watch(c.as_ref(), &res::config_maps(), None, &WatchParams::default(), &rv).await?;
        faults.drop_watches();
        c.create(
            &res::config_maps(),
            Some(&ns),
            &config_map("after", json!({}))?,
            &PostParams::default(),
        )
        .await?;
        for w in [&mut a, &mut b] {
            loop {
                match next_event(w, s.patience()).await? {
                    None => break,
                    Some(Ok(ev)) if describe(&ev).1 == "after" => {
                        return Err(CaseError::failed("a dropped watch delivered a later event"));
                    }
                    Some(_) => {}
                }
            }
        }
        let mut resumed = open_watch(c.as_ref(), &res::config_maps(), Some(&ns), &WatchParams::default(), &rv).await?;
        let (kind, name, _) = describe(&next_change(&mut resumed, s.patience()).await?);
        check!(
            (kind.as_str(), name.as_str()) == ("ADDED", "after"),
            "resumed watch: {kind} {name}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// replace_with_fresh swaps in an empty cluster with a new identity; resourceVersions go on.
pub async fn fault_replace_with_fresh_changes_identity(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "fresh");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let before = c.identity().await?;
        let mut w = open_watch(c.as_ref(), &res::config_maps(), None, &WatchParams::default(), "0").await?;
        let rv_before = faults.resource_version();
        faults.replace_with_fresh();
        let after = c.identity().await.ctx("identity after replacement")?;
        check!(after.uid != before.uid, "identity unchanged: {}", after.uid);
        check!(
            faults.identity_uid() == after.uid,
            "fake identity_uid disagrees with identity()"
        );
        check!(
            c.get_opt(&res::namespaces(), None, &ns).await?.is_none(),
            "namespace {ns} survived the replacement"
        );
        c.get(&res::namespaces(), None, "kube-system")
            .await
            .ctx("a fresh cluster has kube-system")?;
        let cm = c
            .create(
                &res::config_maps(),
                Some("default"),
                &config_map("fresh", json!({}))?,
                &PostParams::default(),
            )
            .await?;
        let rv = crate::support::rv_of(&cm)?;
        check!(rv > rv_before, "resourceVersion went back: {rv} after {rv_before}");
        loop {
            match next_event(&mut w, s.patience()).await? {
                None => break,
                Some(Ok(ev)) if describe(&ev).1 == "fresh" => {
                    return Err(CaseError::failed("a watch survived the replacement"));
                }
                Some(_) => {}
            }
        }
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// One scripted story on a fresh seeded fake under a paused clock; its event log as JSON.
async fn deterministic_story(seed: u64) -> CaseResult<String> {
    let cluster = FakeCluster::builder("determinism").seed(seed).build();
    let c = cluster.admin_client();
    let pp = PostParams::default();
    let ns = object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "story"}}))?;
    c.create(&res::namespaces(), None, &ns, &pp).await?;
    let owner = c
        .create(
            &res::config_maps(),
            Some("story"),
            &config_map("owner", json!({"v": "1"}))?,
            &pp,
        )
        .await?;
    let dep = object(
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"generateName": "dep-",
        "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}}),
    )?;
    c.create(&res::config_maps(), Some("story"), &dep, &pp).await?;
    tokio::time::sleep(Duration::from_secs(7)).await;
    let patch = kbind_cluster::Patch::Merge(json!({"data": {"v": "2"}}));
    c.patch(&res::config_maps(), Some("story"), "owner", &patch, &Default::default())
        .await?;
    let group = "story.conformance.kbind.io";
    let crd = WidgetCrd::open(true);
    let scope_crd = crate::support::object(crd_manifest(&crd, group))?;
    c.create(&res::crds(), None, &scope_crd, &pp).await?;
    let widgets = crate::support::widgets(group);
    eventually(Duration::from_secs(5), "story CRD served", async || {
        c.list(&widgets, Some("story"), &ListParams::default())
            .await
            .map(|_| ())
            .ctx("list widgets")
    })
    .await?;
    c.create(
        &widgets,
        Some("story"),
        &crate::support::widget(group, "w", json!({"size": 1}))?,
        &pp,
    )
    .await?;
    c.delete(&res::config_maps(), Some("story"), "owner", &Default::default())
        .await?;
    tokio::time::sleep(Duration::from_secs(3)).await;
    c.delete(&res::namespaces(), None, "story", &Default::default()).await?;
    eventually(Duration::from_secs(5), "story namespace gone", async || {
        let gone = c.get_opt(&res::namespaces(), None, "story").await?;
        check!(gone.is_none(), "still there");
        Ok(())
    })
    .await?;
    serde_json::to_string(&cluster.event_log()).map_err(|e| CaseError::failed(format!("event log: {e}")))
}

fn crd_manifest(crd: &WidgetCrd, group: &str) -> serde_json::Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("widgets.{group}")},
        "spec": {
            "group": group, "scope": "Namespaced",
            "names": {"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
            "versions": [{"name": "v1", "served": true, "storage": true,
                "subresources": if crd.status_subresource { json!({"status": {}}) } else { json!({}) },
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {"spec": crd.spec_schema}}}}],
        },
    })
}

fn run_paused(seed: u64) -> CaseResult<String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .map_err(|e| CaseError::failed(format!("runtime: {e}")))?;
    runtime.block_on(deterministic_story(seed))
}

/// The same seed, paused clock and script give byte-identical event logs; another seed does not
/// (fake-only).
pub async fn fake_is_deterministic(t: &dyn Target) -> CaseResult {
    require_faults(t)?;
    let runs = tokio::task::spawn_blocking(|| [run_paused(42), run_paused(42), run_paused(43)])
        .await
        .map_err(|e| CaseError::failed(format!("story thread: {e}")))?;
    let [first, second, other] = runs;
    let (first, second, other) = (first?, second?, other?);
    check!(first.len() > 1000, "the story logged too little to compare: {first}");
    if first != second {
        let at = first.bytes().zip(second.bytes()).position(|(a, b)| a != b).unwrap_or(0);
        let from = at.saturating_sub(80);
        return Err(CaseError::failed(format!(
            "same seed, different event logs; first difference at byte {at}: {:?} vs {:?}",
            &first[from..(at + 80).min(first.len())],
            &second[from..(at + 80).min(second.len())]
        )));
    }
    check!(
        first != other,
        "seeds 42 and 43 gave identical logs (uids do not come from the seed)"
    );
    Ok(())
}
