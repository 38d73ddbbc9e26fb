//! ownerReference garbage collection: background, foreground, orphan, and switched off.

use std::time::Duration;

use kbind_cluster::{ClusterClientExt, DeleteParams, DynamicObject, PostParams};
use serde_json::json;

use crate::cases::versions::release_finalizers;
use crate::check;
use crate::support::{CaseResult, Context, Scope, config_map, consistently, eventually, object, require_faults, res};
use crate::target::Target;

/// A dependent ConfigMap owned by `owner` (with blockOwnerDeletion and, if `hold`, a finalizer).
fn dependent(name: &str, owner: &DynamicObject, hold: bool) -> CaseResult<DynamicObject> {
    let mut body = json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "ownerReferences": [{
            "apiVersion": "v1", "kind": "ConfigMap",
            "name": owner.metadata.name, "uid": owner.metadata.uid, "blockOwnerDeletion": true,
        }]},
    });
    if hold {
        body["metadata"]["finalizers"] = json!(["conformance.kbind.io/hold"]);
    }
    object(body)
}

async fn owner_and_dependent(s: &Scope<'_>, ns: &str, hold: bool) -> CaseResult<DynamicObject> {
    let pp = PostParams::default();
    let owner = s
        .admin
        .create(&res::config_maps(), Some(ns), &config_map("owner", json!({}))?, &pp)
        .await?;
    s.admin
        .create(&res::config_maps(), Some(ns), &dependent("dep", &owner, hold)?, &pp)
        .await?;
    Ok(owner)
}

async fn wait_gone(s: &Scope<'_>, ns: &str, name: &str) -> CaseResult {
    eventually(s.patience(), &format!("{name} collected"), async || {
        let obj = s.admin.get_opt(&res::config_maps(), Some(ns), name).await?;
        check!(obj.is_none(), "{name} still there: {:?}", obj.map(|o| o.metadata));
        Ok(())
    })
    .await
}

/// Background deletion: the owner goes at once, its dependents after it.
pub async fn gc_background_deletes_dependents(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "gcbg");
    let result = async {
        let ns = s.namespace("a").await?;
        owner_and_dependent(&s, &ns, false).await?;
        let out = s
            .admin
            .delete(&res::config_maps(), Some(&ns), "owner", &DeleteParams::background())
            .await?;
        check!(out.is_none(), "background delete kept the owner: {out:?}");
        wait_gone(&s, &ns, "dep").await
    }
    .await;
    s.finish(result).await
}

/// Foreground deletion: the owner stays (foregroundDeletion) until its blocking dependents are gone.
pub async fn gc_foreground_waits_for_dependents(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "gcfg");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        owner_and_dependent(&s, &ns, true).await?;
        let owner = c
            .delete(&res::config_maps(), Some(&ns), "owner", &DeleteParams::foreground())
            .await?
            .ctx("foreground delete returns the owner")?;
        let fins = owner.metadata.finalizers.clone().unwrap_or_default();
        check!(
            fins.iter().any(|f| f == "foregroundDeletion"),
            "owner finalizers: {fins:?}"
        );
        eventually(s.patience(), "dependent deleted", async || {
            let dep = c.get(&res::config_maps(), Some(&ns), "dep").await?;
            check!(dep.metadata.deletion_timestamp.is_some(), "dependent not deleted yet");
            Ok(())
        })
        .await?;
        let owner = c.get_opt(&res::config_maps(), Some(&ns), "owner").await?;
        check!(owner.is_some(), "the owner went before its blocking dependent");
        release_finalizers(c.as_ref(), &res::config_maps(), &ns, "dep").await?;
        wait_gone(&s, &ns, "dep").await?;
        wait_gone(&s, &ns, "owner").await
    }
    .await;
    s.finish(result).await
}

/// Orphan deletion: the owner goes, dependents stay and lose their ownerReference.
pub async fn gc_orphan_keeps_dependents(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "gcorphan");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let owner = owner_and_dependent(&s, &ns, false).await?;
        c.delete(&res::config_maps(), Some(&ns), "owner", &DeleteParams::orphan())
            .await?;
        wait_gone(&s, &ns, "owner").await?;
        let dep = c
            .get(&res::config_maps(), Some(&ns), "dep")
            .await
            .ctx("orphaned dependent")?;
        let refs = dep.metadata.owner_references.clone().unwrap_or_default();
        check!(
            refs.iter().all(|r| Some(&r.uid) != owner.metadata.uid.as_ref()),
            "the orphaned dependent still points at its owner: {refs:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// With the garbage collector off (as on a bare apiserver) dependents stay; switched on, they go
/// (fake-only).
pub async fn gc_switched_off_keeps_dependents(t: &dyn Target) -> CaseResult {
    let faults = require_faults(t)?;
    let s = Scope::new(t, "gcoff");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        owner_and_dependent(&s, &ns, false).await?;
        faults.set_garbage_collector(false);
        c.delete(&res::config_maps(), Some(&ns), "owner", &DeleteParams::background())
            .await?;
        consistently(Duration::from_millis(300), "dependent kept without GC", async || {
            let dep = c.get_opt(&res::config_maps(), Some(&ns), "dep").await?;
            check!(dep.is_some(), "dependent collected while GC was off");
            Ok(())
        })
        .await?;
        faults.set_garbage_collector(true);
        wait_gone(&s, &ns, "dep").await
    }
    .await;
    faults.set_garbage_collector(true);
    s.finish(result).await
}
