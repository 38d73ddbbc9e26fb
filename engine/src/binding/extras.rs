//! What a Connection asks for beyond its bindings (contract §2): `schema.pullPolicy: All`
//! pulls every exported API's CRD, and `autoBind` keeps a managed ClusterBinding listing every
//! exported API.
//!
//! Choices recorded here: the autoBind binding is named `autobind-<connection>`, labelled
//! `core.kbind.io/managed`; an API that stops being exported stays in its list (its syncer
//! stops with the per-API `APINotExported` condition, nothing is deleted); an empty export list leaves the binding as it
//! is; turning autoBind off leaves the binding in place for the user to keep or delete (deleting
//! it drains, so that stays a user's decision).

use kbind_api::consts::{TRUE, annotation, field_manager, label};
use kbind_api::{ClusterBinding, Connection, PullPolicy, conditions};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, Patch, PatchParams};
use serde_json::json;

use super::reconcile::{Binder, BindingError};
use super::schema::deliver;

/// The autoBind ClusterBinding's name for Connection `connection`.
pub fn autobind_name(connection: &str) -> String {
    format!("autobind-{connection}")
}

/// Runs the pullPolicy All and autoBind passes for one Connection.
pub(crate) async fn reconcile_connection(shared: &Binder, conn: &Connection) -> Result<(), BindingError> {
    if conn.metadata.deletion_timestamp.is_some()
        || !conditions::is_true(conn.conditions(), kbind_api::consts::condition::READY)
    {
        return Ok(());
    }
    let name = conn.metadata.name.clone().unwrap_or_default();
    let exported = conn
        .status
        .as_ref()
        .map(|s| s.exported_apis.clone())
        .unwrap_or_default();
    if conn.spec.schema.pull_policy == PullPolicy::All
        && let Some(provider) = shared.links.get(&name)
    {
        for api in &exported {
            if super::schema::pulls_crd(conn) {
                shared.schema_followers.follow(&provider, &api.name);
            }
            // Pulling every API never takes a CRD another Connection pulled: only a binding does.
            let never_take_over = |_: &str| true;
            if let Err(e) = deliver(shared.ctx.consumer.as_ref(), conn, api, &provider, &never_take_over).await {
                tracing::debug!(connection = %name, api = %api.name, error = %e, "pullPolicy All: not pulled yet");
            }
        }
    }
    if conn.spec.auto_bind && !exported.is_empty() {
        let apis: Vec<String> = exported.iter().map(|a| a.name.clone()).collect();
        ensure_autobind(shared.ctx.consumer.as_ref(), &name, apis).await?;
    }
    Ok(())
}

/// Keeps the managed binding listing every exported API and every API it listed before: an API
/// that stops being exported stays, with its per-API `APINotExported` condition, so its objects
/// are served (or held) like those of any other binding; removing it would leave them with no
/// binding at all (contract §4 "provider-side changes").
async fn ensure_autobind(
    consumer: &dyn ClusterClient,
    connection: &str,
    exported: Vec<String>,
) -> Result<(), BindingError> {
    let res = ApiResource::erase::<ClusterBinding>(&());
    let name = autobind_name(connection);
    let mut current = Vec::new();
    if let Some(existing) = consumer.get_opt(&res, None, &name).await? {
        let managed = existing
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get(label::MANAGED))
            .map(String::as_str);
        if managed != Some(TRUE) {
            tracing::warn!(binding = %name, "a ClusterBinding kbind did not create has the autoBind name; leaving it alone");
            return Ok(());
        }
        current = existing
            .data
            .pointer("/spec/apis")
            .and_then(|a| a.as_array())
            .map(|a| {
                a.iter()
                    .filter_map(|x| x.get("name")?.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
    }
    let apis = listed(exported, &current);
    if current == apis {
        return Ok(());
    }
    let body = json!({
        "apiVersion": kbind_api::consts::API_VERSION, "kind": "ClusterBinding",
        "metadata": {"name": name, "labels": {label::MANAGED: TRUE}, "annotations": {annotation::CONNECTION: connection}},
        "spec": {"connectionRef": {"name": connection}, "apis": apis.iter().map(|a| json!({"name": a})).collect::<Vec<_>>()},
    });
    let mut params = PatchParams::apply(field_manager::KONNECTOR);
    params.force = true;
    consumer.patch(&res, None, &name, &Patch::Apply(body), &params).await?;
    tracing::info!(binding = %name, apis = apis.len(), "autoBind binding updated");
    Ok(())
}

/// The sorted list the managed binding should carry.
fn listed(exported: Vec<String>, current: &[String]) -> Vec<String> {
    let mut apis = exported;
    if !crate::planted::planted(crate::planted::Plant::AutobindDropsUnexported) {
        apis.extend(current.iter().cloned());
    }
    apis.sort();
    apis.dedup();
    apis
}

#[cfg(test)]
mod tests {
    use super::listed;

    #[test]
    fn an_api_no_longer_exported_stays_listed_and_a_newly_exported_one_joins() {
        let exported = vec!["widgets.example.org".to_string(), "gizmos.example.org".to_string()];
        let current = ["gadgets.example.org".to_string(), "widgets.example.org".to_string()];
        assert_eq!(
            listed(exported, &current),
            ["gadgets.example.org", "gizmos.example.org", "widgets.example.org"]
        );
    }
}
