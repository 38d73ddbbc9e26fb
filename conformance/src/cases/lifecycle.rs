//! Deletion: finalizers and deletionTimestamp, delete preconditions, and namespaces.

use kbind_cluster::{ClusterClientExt, DeleteParams, Error, Patch, PostParams};
use kube::api::Preconditions;
use serde_json::json;

use crate::cases::versions::release_finalizers;
use crate::check;
use crate::support::{
    CaseError, CaseResult, Context, Scope, WidgetCrd, config_map, eventually, expect_err, object, res, widget,
};
use crate::target::Target;

const HOLD: &str = "conformance.kbind.io/hold";

fn held_config_map(name: &str) -> CaseResult<kbind_cluster::DynamicObject> {
    object(json!({
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "finalizers": [HOLD]},
        "data": {"v": "1"},
    }))
}

/// A finalizer holds a deleted object (delete returns it with deletionTimestamp); removing the
/// last finalizer deletes it; an object without finalizers is gone at once.
pub async fn finalizers_hold_deletion(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "fin");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &held_config_map("held")?,
            &PostParams::default(),
        )
        .await?;
        let deleting = c
            .delete(&res::config_maps(), Some(&ns), "held", &DeleteParams::default())
            .await?
            .ctx("delete of a held object returns it")?;
        check!(
            deleting.metadata.deletion_timestamp.is_some(),
            "no deletionTimestamp: {:?}",
            deleting.metadata
        );
        check!(
            deleting.metadata.finalizers.as_deref() == Some(&[HOLD.to_string()][..]),
            "finalizers: {:?}",
            deleting.metadata.finalizers
        );
        let still = c
            .get(&res::config_maps(), Some(&ns), "held")
            .await
            .ctx("held object after delete")?;
        check!(
            still.metadata.deletion_timestamp.is_some(),
            "the held object lost its deletionTimestamp"
        );
        let again = c
            .delete(&res::config_maps(), Some(&ns), "held", &DeleteParams::default())
            .await?;
        check!(again.is_some(), "a second delete of a held object reported it gone");
        let mut released = still.clone();
        released.metadata.finalizers = None;
        let _ = c
            .replace(
                &res::config_maps(),
                Some(&ns),
                "held",
                &released,
                &PostParams::default(),
            )
            .await;
        eventually(s.patience(), "object gone after its last finalizer", async || {
            let gone = c.get_opt(&res::config_maps(), Some(&ns), "held").await?;
            check!(gone.is_none(), "still there: {:?}", gone.map(|o| o.metadata));
            Ok(())
        })
        .await?;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &config_map("free", json!({}))?,
            &PostParams::default(),
        )
        .await?;
        let out = c
            .delete(&res::config_maps(), Some(&ns), "free", &DeleteParams::default())
            .await?;
        check!(out.is_none(), "delete of an object without finalizers returned {out:?}");
        let gone = c.get_opt(&res::config_maps(), Some(&ns), "free").await?;
        check!(gone.is_none(), "deleted object still readable");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Adding a finalizer to a terminating object is refused: 422 with metadata.finalizers Forbidden.
pub async fn finalizer_cannot_be_added_to_terminating_object(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "finadd");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &held_config_map("held")?,
            &PostParams::default(),
        )
        .await?;
        c.delete(&res::config_maps(), Some(&ns), "held", &DeleteParams::default())
            .await?;
        let patch = Patch::Merge(json!({"metadata": {"finalizers": [HOLD, "conformance.kbind.io/late"]}}));
        let err = expect_err(
            c.patch(&res::config_maps(), Some(&ns), "held", &patch, &Default::default())
                .await,
            "add a finalizer to a terminating object",
        )?;
        let on_finalizers = matches!(&err, Error::Invalid { causes, .. }
            if causes.iter().any(|c| c.field == "metadata.finalizers" && c.reason == "FieldValueForbidden"));
        check!(on_finalizers, "expected 422 metadata.finalizers Forbidden, got {err:?}");
        let now = c.get(&res::config_maps(), Some(&ns), "held").await?;
        check!(
            now.metadata.finalizers.as_deref() == Some(&[HOLD.to_string()][..]),
            "finalizers: {:?}",
            now.metadata.finalizers
        );
        release_finalizers(c.as_ref(), &res::config_maps(), &ns, "held").await
    }
    .await;
    s.finish(result).await
}

/// Delete preconditions on uid and resourceVersion: a mismatch is 409 and deletes nothing.
pub async fn delete_preconditions_are_checked(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "precond");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let cm = c
            .create(
                &res::config_maps(),
                Some(&ns),
                &config_map("cm", json!({}))?,
                &PostParams::default(),
            )
            .await?;
        let with = |uid: Option<&str>, rv: Option<&str>| DeleteParams {
            preconditions: Some(Preconditions {
                uid: uid.map(str::to_string),
                resource_version: rv.map(str::to_string),
            }),
            ..DeleteParams::default()
        };
        let wrong_uid = with(Some("00000000-0000-0000-0000-000000000001"), None);
        let err = expect_err(
            c.delete(&res::config_maps(), Some(&ns), "cm", &wrong_uid).await,
            "delete with a wrong uid",
        )?;
        check!(err.is_conflict(), "wrong uid precondition: expected 409, got {err:?}");
        let wrong_rv = with(None, Some("1"));
        let err = expect_err(
            c.delete(&res::config_maps(), Some(&ns), "cm", &wrong_rv).await,
            "delete with a wrong rv",
        )?;
        check!(
            err.is_conflict(),
            "wrong resourceVersion precondition: expected 409, got {err:?}"
        );
        check!(
            c.get_opt(&res::config_maps(), Some(&ns), "cm").await?.is_some(),
            "a failed precondition deleted the object"
        );
        let right = with(cm.metadata.uid.as_deref(), cm.metadata.resource_version.as_deref());
        c.delete(&res::config_maps(), Some(&ns), "cm", &right)
            .await
            .ctx("delete with matching preconditions")?;
        check!(
            c.get_opt(&res::config_maps(), Some(&ns), "cm").await?.is_none(),
            "object survived its delete"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Creating in a namespace that does not exist is 404.
pub async fn create_in_missing_namespace_is_not_found(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "nons");
    let result = async {
        let missing = s.name("missing");
        let err = expect_err(
            s.admin
                .create(
                    &res::config_maps(),
                    Some(&missing),
                    &config_map("cm", json!({}))?,
                    &PostParams::default(),
                )
                .await,
            "create in a missing namespace",
        )?;
        check!(err.is_not_found(), "expected 404, got {err:?}");
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Creating in a terminating namespace is 403; the namespace goes once its content is gone.
pub async fn create_in_terminating_namespace_is_forbidden(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "termns");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        c.create(
            &res::config_maps(),
            Some(&ns),
            &held_config_map("held")?,
            &PostParams::default(),
        )
        .await?;
        c.delete(&res::namespaces(), None, &ns, &DeleteParams::default())
            .await?;
        let mut attempt = 0;
        eventually(s.patience(), "create refused in a terminating namespace", async || {
            attempt += 1;
            let cm = config_map(&format!("late-{attempt}"), json!({}))?;
            let err = expect_err(
                c.create(&res::config_maps(), Some(&ns), &cm, &PostParams::default())
                    .await,
                "create",
            )?;
            check!(err.is_forbidden(), "expected 403, got {err:?}");
            Ok(())
        })
        .await?;
        eventually(s.patience(), "held object terminating", async || {
            let held = c.get(&res::config_maps(), Some(&ns), "held").await?;
            check!(
                held.metadata.deletion_timestamp.is_some(),
                "namespace controller has not deleted it yet"
            );
            Ok(())
        })
        .await?;
        let nsobj = c
            .get(&res::namespaces(), None, &ns)
            .await
            .ctx("namespace held by its content")?;
        check!(
            nsobj.data["status"]["phase"] == "Terminating",
            "namespace status: {:?}",
            nsobj.data["status"]
        );
        release_finalizers(c.as_ref(), &res::config_maps(), &ns, "held").await?;
        eventually(s.patience(), "namespace gone", async || {
            let gone = c.get_opt(&res::namespaces(), None, &ns).await?;
            check!(gone.is_none(), "namespace still there");
            Ok(())
        })
        .await
    }
    .await;
    s.finish(result).await
}

/// Deleting a namespace marks it Terminating, deletes everything in it, then removes it.
pub async fn deleting_namespace_empties_it(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "delns");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        c.create(&res::config_maps(), Some(&ns), &config_map("cm", json!({}))?, &pp)
            .await?;
        let secret = object(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))?;
        c.create(&res::secrets(), Some(&ns), &secret, &pp).await?;
        let deleting = c
            .delete(&res::namespaces(), None, &ns, &DeleteParams::default())
            .await?
            .ctx("namespace delete returns the terminating namespace")?;
        check!(
            deleting.metadata.deletion_timestamp.is_some(),
            "no deletionTimestamp on the namespace"
        );
        check!(
            deleting.data["status"]["phase"] == "Terminating",
            "namespace status: {:?}",
            deleting.data["status"]
        );
        eventually(s.patience(), "namespace gone", async || {
            let gone = c.get_opt(&res::namespaces(), None, &ns).await?;
            check!(
                gone.is_none(),
                "namespace still there: {:?}",
                gone.map(|n| n.data["status"].clone())
            );
            Ok(())
        })
        .await?;
        check!(
            c.get_opt(&res::config_maps(), Some(&ns), "cm").await?.is_none(),
            "ConfigMap survived its namespace"
        );
        check!(
            c.get_opt(&res::secrets(), Some(&ns), "s").await?.is_none(),
            "Secret survived its namespace"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// Label keys and values kube-apiserver refuses are a 422 Invalid naming `metadata.labels`, on
/// create and on patch, for built-in and custom resources; a 63-character value and a prefixed
/// key are accepted.
pub async fn labels_are_validated(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "labels");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let labelled = |name: &str, key: &str, value: &str| {
            object(json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "labels": {key: value}},
            }))
        };
        let long = "v".repeat(64);
        let refused = [
            ("long-value", "a", long.as_str(), Some("must be no more than 63 bytes")),
            ("bad-value", "a", "-v", None),
            (
                "long-key",
                &*"k".repeat(64),
                "v",
                Some("name part must be no more than 63 bytes"),
            ),
            ("bad-prefix", "Example.com/a", "v", Some("prefix part")),
            ("two-slashes", "a/b/c", "v", None),
        ];
        for (name, key, value, wording) in refused {
            let err = expect_err(
                c.create(&res::config_maps(), Some(&ns), &labelled(name, key, value)?, &pp)
                    .await,
                name,
            )?;
            let Error::Invalid { causes, .. } = &err else {
                return Err(CaseError::failed(format!("{name}: expected 422 Invalid, got {err:?}")));
            };
            check!(
                causes
                    .iter()
                    .all(|c| c.field == "metadata.labels" && c.reason == "FieldValueInvalid"),
                "{name}: causes {causes:?}"
            );
            if let Some(wording) = wording {
                check!(
                    causes.iter().any(|c| c.message.contains(wording)),
                    "{name}: no cause says {wording:?}: {causes:?}"
                );
            }
        }
        let fits = "z".repeat(63);
        c.create(
            &res::config_maps(),
            Some(&ns),
            &labelled("fits", "example.com/My_name.1", &fits)?,
            &pp,
        )
        .await?;
        let patch = Patch::Merge(json!({"metadata": {"labels": {"b": long}}}));
        let err = expect_err(
            c.patch(&res::config_maps(), Some(&ns), "fits", &patch, &Default::default())
                .await,
            "patch with a long value",
        )?;
        check!(
            matches!(&err, Error::Invalid { causes, .. } if causes.iter().any(|c| c.field == "metadata.labels")),
            "patch with a long value: expected 422 on metadata.labels, got {err:?}"
        );
        let group = s.group();
        let widgets = s.widget_crd(&WidgetCrd::open(false)).await?;
        let mut w = widget(&group, "w", json!({}))?;
        w.metadata.labels = Some([("a".to_string(), long.clone())].into());
        let err = expect_err(c.create(&widgets, Some(&ns), &w, &pp).await, "custom resource")?;
        check!(
            matches!(&err, Error::Invalid { causes, .. } if causes.iter().any(|c| c.field == "metadata.labels")),
            "custom resource with a long label value: expected 422 on metadata.labels, got {err:?}"
        );
        Ok(())
    }
    .await;
    s.finish(result).await
}
