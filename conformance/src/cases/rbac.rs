//! RBAC evaluated per user: plain users are denied, Roles and ClusterRoles granted through
//! bindings allow exactly what they say, where they say.

use std::sync::Arc;

use kbind_cluster::{ApiResource, ClusterClient, DeleteParams, Error, ListParams, PostParams};
use serde_json::json;

use crate::check;
use crate::support::{CaseError, CaseResult, Context, Scope, config_map, eventually, object, res};
use crate::target::Target;

fn forbidden_for(
    result: kbind_cluster::Result<impl std::fmt::Debug>,
    verb: &str,
    resource: &str,
    user: &str,
) -> CaseResult {
    match result {
        Err(Error::Forbidden {
            verb: v,
            resource: r,
            message,
        }) => {
            check!(
                v == verb && r == resource,
                "forbidden names {v} {r}, expected {verb} {resource}"
            );
            check!(
                message.contains(&format!("\"{user}\"")),
                "forbidden message does not name {user}: {message}"
            );
            Ok(())
        }
        other => Err(CaseError::failed(format!(
            "{user} {verb} {resource}: expected 403, got {other:?}"
        ))),
    }
}

async fn allowed(c: &dyn ClusterClient, res: &ApiResource, ns: Option<&str>) -> CaseResult {
    c.list(res, ns, &ListParams::default())
        .await
        .map(|_| ())
        .ctx(format!("list {} in {ns:?}", res.plural))
}

/// A plain authenticated user is refused, and the 403 names the verb and resource.
pub async fn rbac_denies_plain_user(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "rbacdeny");
    let result = async {
        let ns = s.namespace("a").await?;
        let alice = t.user("alice");
        forbidden_for(
            alice.list(&res::config_maps(), Some(&ns), &ListParams::default()).await,
            "list",
            "configmaps",
            "alice",
        )?;
        let cm = config_map("cm", json!({}))?;
        forbidden_for(
            alice
                .create(&res::config_maps(), Some(&ns), &cm, &PostParams::default())
                .await,
            "create",
            "configmaps",
            "alice",
        )?;
        forbidden_for(
            alice.get(&res::namespaces(), None, &ns).await,
            "get",
            "namespaces",
            "alice",
        )?;
        forbidden_for(
            alice.list(&res::crds(), None, &ListParams::default()).await,
            "list",
            "customresourcedefinitions.apiextensions.k8s.io",
            "alice",
        )?;
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A RoleBinding grants its Role (or ClusterRole) in its own namespace only, verbs as listed.
pub async fn rbac_role_binding_grants_only_its_namespace(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "rbacrole");
    let result = async {
        let (granted, other) = (s.namespace("a").await?, s.namespace("b").await?);
        let c = &s.admin;
        let pp = PostParams::default();
        let reader = s.name("cm-reader");
        let cluster_role = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": reader},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}],
        }))?;
        c.create(&res::cluster_roles(), None, &cluster_role, &pp).await?;
        s.track(res::cluster_roles(), None, &reader);
        let role = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "secret-writer"},
            "rules": [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["create"]}],
        }))?;
        c.create(&res::roles(), Some(&granted), &role, &pp).await?;
        for (name, kind, role_name) in [
            ("read", "ClusterRole", reader.as_str()),
            ("write", "Role", "secret-writer"),
        ] {
            let binding = object(json!({
                "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": name},
                "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": kind, "name": role_name},
                "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "bob"}],
            }))?;
            c.create(&res::role_bindings(), Some(&granted), &binding, &pp).await?;
        }
        let bob: Arc<dyn ClusterClient> = t.user("bob");
        eventually(s.patience(), "bob may list configmaps where bound", async || {
            allowed(bob.as_ref(), &res::config_maps(), Some(&granted)).await
        })
        .await?;
        let secret = object(json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "s"}}))?;
        bob.create(&res::secrets(), Some(&granted), &secret, &pp)
            .await
            .ctx("bob creates a secret where bound")?;
        forbidden_for(
            bob.list(&res::config_maps(), Some(&other), &ListParams::default())
                .await,
            "list",
            "configmaps",
            "bob",
        )?;
        forbidden_for(
            bob.create(&res::secrets(), Some(&other), &secret, &pp).await,
            "create",
            "secrets",
            "bob",
        )?;
        forbidden_for(
            bob.list(&res::secrets(), Some(&granted), &ListParams::default()).await,
            "list",
            "secrets",
            "bob",
        )?;
        forbidden_for(
            bob.list(&res::config_maps(), None, &ListParams::default()).await,
            "list",
            "configmaps",
            "bob",
        )?;
        Ok(())
    }
    .await;
    s.finish(result).await
}

/// A ClusterRoleBinding grants cluster-wide, and deleting it takes the grant back.
pub async fn rbac_cluster_role_binding_grants_cluster_scope(t: &dyn Target) -> CaseResult {
    let s = Scope::new(t, "rbaccluster");
    let result = async {
        let ns = s.namespace("a").await?;
        let c = &s.admin;
        let pp = PostParams::default();
        let name = s.name("ns-reader");
        let role = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": {"name": name},
            "rules": [{"apiGroups": [""], "resources": ["namespaces", "configmaps"], "verbs": ["get", "list"]}],
        }))?;
        c.create(&res::cluster_roles(), None, &role, &pp).await?;
        s.track(res::cluster_roles(), None, &name);
        let binding = object(json!({
            "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": name},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "carol"}],
        }))?;
        c.create(&res::cluster_role_bindings(), None, &binding, &pp).await?;
        s.track(res::cluster_role_bindings(), None, &name);
        let carol: Arc<dyn ClusterClient> = t.user("carol");
        eventually(s.patience(), "carol may list namespaces", async || {
            allowed(carol.as_ref(), &res::namespaces(), None).await
        })
        .await?;
        allowed(carol.as_ref(), &res::config_maps(), None).await?;
        allowed(carol.as_ref(), &res::config_maps(), Some(&ns)).await?;
        carol
            .get(&res::namespaces(), None, &ns)
            .await
            .ctx("carol gets a namespace")?;
        forbidden_for(
            carol
                .delete(&res::namespaces(), None, &ns, &DeleteParams::default())
                .await,
            "delete",
            "namespaces",
            "carol",
        )?;
        c.delete(&res::cluster_role_bindings(), None, &name, &DeleteParams::default())
            .await?;
        eventually(s.patience(), "grant revoked with its binding", async || {
            forbidden_for(
                carol.list(&res::namespaces(), None, &ListParams::default()).await,
                "list",
                "namespaces",
                "carol",
            )
        })
        .await
    }
    .await;
    s.finish(result).await
}
