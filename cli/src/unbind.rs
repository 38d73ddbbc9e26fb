//! `kbind unbind`: show what the drain deletes on the provider, ask, delete the bindings, then
//! the Connection and its Secret, and revoke the Grant at the gateway; `--orphan` first marks
//! everything with the escape hatch so nothing is deleted on either side.

use kbind_api::consts::backend::LABEL_GRANT;
use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation};
use kbind_cluster::{ClusterClient, DeleteParams, Patch, PatchParams};
use serde_json::{Value, json};

use crate::Context;
use crate::args::UnbindArgs;
use crate::commands::{confirm, session};
use crate::consumer::{self, Awaited, Target, consumer_error, qualified};
use crate::error::{CliError, Result};
use crate::output::{Reporter, emit, table};
use crate::status::{BindingRef, bindings, served_objects};

/// `kbind unbind <export|connection>`.
pub async fn unbind(args: &UnbindArgs, gateway: Option<&str>, target: &Target, ctx: &mut Context) -> Result<()> {
    let client = consumer::connect(target).await?;
    let connection = find_connection(&client, &args.target).await?;
    let name = connection["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let grant = connection["metadata"]["labels"][LABEL_GRANT]
        .as_str()
        .map(str::to_string);
    let secret_ref = &connection["spec"]["kubeconfigSecretRef"];
    let secret = secret_ref["name"].as_str().map(|n| {
        (
            secret_ref["namespace"].as_str().unwrap_or_default().to_string(),
            n.to_string(),
        )
    });
    let mine: Vec<BindingRef> = bindings(&client)
        .await?
        .into_iter()
        .filter(|(c, _)| *c == name)
        .map(|(_, b)| b)
        .collect();

    let mut rows = Vec::new();
    for binding in &mine {
        for (res, object) in served_objects(&client, binding).await? {
            rows.push(vec![
                res.kind.clone(),
                object["metadata"]["namespace"].as_str().unwrap_or("-").to_string(),
                object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
            ]);
        }
    }
    rows.sort();
    rows.dedup();
    let listing = if rows.is_empty() {
        "No synced objects: nothing is deleted on the provider.\n".to_string()
    } else {
        table(&["KIND", "NAMESPACE", "NAME"], rows.clone())
    };
    let plan = if args.orphan {
        format!(
            "Unbinding Connection {name} with --orphan: nothing is deleted on either side. These objects stay on this cluster and their copies stay on the provider, unmanaged:\n{listing}"
        )
    } else {
        format!(
            "Unbinding Connection {name}: the konnector deletes these objects on the provider; on this cluster they go with their API's CRD when no other binding serves it (use --orphan to keep everything):\n{listing}"
        )
    };
    emit(&mut ctx.stdout, &plan)?;
    confirm(&format!("Unbind {name}?"), args.yes, ctx)?;

    if args.orphan {
        let patch =
            Patch::Merge(json!({"metadata": {"annotations": {annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}}));
        for binding in &mine {
            client
                .patch(
                    &consumer::resource_of(&binding.kind),
                    binding.namespace.as_deref(),
                    &binding.name,
                    &patch,
                    &PatchParams::default(),
                )
                .await
                .map_err(|e| consumer_error(&format!("cannot mark {} {} Orphan", binding.kind, binding.name), e))?;
        }
        client
            .patch(
                &consumer::resource_of("Connection"),
                None,
                &name,
                &patch,
                &PatchParams::default(),
            )
            .await
            .map_err(|e| consumer_error(&format!("cannot mark Connection {name} Orphan"), e))?;
    }
    let mut awaited = Vec::new();
    for binding in &mine {
        delete(&client, &binding.kind, binding.namespace.as_deref(), &binding.name).await?;
        awaited.push(Awaited {
            kind: binding.kind.clone(),
            namespace: binding.namespace.clone(),
            name: binding.name.clone(),
        });
    }
    delete(&client, "Connection", None, &name).await?;
    awaited.push(Awaited {
        kind: "Connection".into(),
        namespace: None,
        name: name.clone(),
    });
    if args.wait {
        let mut reporter = Reporter::new(&mut *ctx.stderr, ctx.interactive);
        consumer::wait_gone(&client, &awaited, args.timeout, &mut reporter).await?;
    }
    // Why after the Connection: the konnector needs the credential to drain the provider.
    if let Some((ns, secret)) = &secret {
        delete(&client, "Secret", Some(ns), secret).await?;
    }
    emit(&mut ctx.stdout, &format!("Unbound {name}.\n"))?;

    match grant {
        None => Ok(()),
        Some(grant) => match session(gateway, ctx) {
            Ok(session) => match session.revoke(&grant).await {
                Ok(()) => emit(
                    &mut ctx.stdout,
                    &format!("Grant {grant} revoked at {}.\n", session.base()),
                ),
                Err(CliError::Refused(m)) if m.contains("GrantNotFound") => emit(
                    &mut ctx.stdout,
                    &format!("Grant {grant} was already gone at {}.\n", session.base()),
                ),
                Err(e) => Err(e),
            },
            Err(CliError::Unauthorized(_)) => emit(
                &mut ctx.stdout,
                &format!(
                    "Not logged in: grant {grant} stays on the provider until revoked (`kbind login`, then `kbind revoke {grant}`) or reaped.\n"
                ),
            ),
            Err(e) => Err(e),
        },
    }
}

async fn delete(client: &dyn ClusterClient, kind: &str, ns: Option<&str>, name: &str) -> Result<()> {
    match client
        .delete(&consumer::resource_of(kind), ns, name, &DeleteParams::default())
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if e.is_not_found() => Ok(()),
        Err(e) => Err(consumer_error(
            &format!("cannot delete {kind} {}", qualified(ns, name)),
            e,
        )),
    }
}

/// The Connection named `target`, else the one bound for Export `target` (`<provider>-<export>`).
async fn find_connection(client: &dyn ClusterClient, target: &str) -> Result<Value> {
    let connections = consumer::list(client, &consumer::resource_of("Connection"), None).await?;
    let name_of = |c: &Value| c["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if let Some(c) = connections.iter().find(|c| name_of(c) == target) {
        return Ok(c.clone());
    }
    let suffix = format!("-{target}");
    let matching: Vec<&Value> = connections.iter().filter(|c| name_of(c).ends_with(&suffix)).collect();
    match matching.as_slice() {
        [one] => Ok((*one).clone()),
        [] => Err(CliError::Usage(format!(
            "no Connection for {target:?} on this cluster; `kbind status` lists what is bound"
        ))),
        many => Err(CliError::Usage(format!(
            "{target:?} matches several Connections ({}); name one",
            many.iter().map(|c| name_of(c)).collect::<Vec<_>>().join(", ")
        ))),
    }
}
