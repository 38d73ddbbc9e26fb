//! `kbind bind` and `kbind redeem`: get a bundle, check it, show it, apply it, wait for Ready.

use kbind_api::service::BindRequest;
use serde_json::{Value, json};

use crate::Context;
use crate::args::{ApplyArgs, BindArgs, Format, RedeemArgs};
use crate::bundle::{self, BundleObject};
use crate::commands::session;
use crate::consumer::{self, Awaited, Target};
use crate::error::{CliError, Result};
use crate::gateway;
use crate::output::{Reporter, emit, render, table};

/// `kbind bind <export>`.
pub async fn bind(args: &BindArgs, gateway: Option<&str>, target: &Target, ctx: &mut Context) -> Result<()> {
    let session = session(gateway, ctx)?;
    let catalog = session.catalog().await?;
    let Some(export) = catalog.exports.iter().find(|e| e.name == args.export) else {
        return Err(CliError::Refused(format!(
            "no Export {:?} on this provider; `kbind catalog` lists what can be bound",
            args.export
        )));
    };
    if !export.ready {
        return Err(CliError::Refused(format!(
            "Export {} cannot be bound now: {}",
            export.name,
            export
                .message
                .clone()
                .unwrap_or_else(|| "not every API is exported".into())
        )));
    }
    let client = consumer::connect(target).await?;
    let uid = consumer::cluster_uid(&client).await?;
    if args.output.is_none() {
        consumer::require_konnector(&client, &args.apply.konnector_namespace).await?;
    }
    let namespaces = namespaces(args, export.namespaced, ctx)?;

    if args.dry_run {
        let provider = session.provider().await?;
        let base = format!("{}-{}", provider.name, export.name);
        let ns = &args.apply.konnector_namespace;
        let mut rows = vec![
            vec!["Secret".into(), ns.clone(), format!("{base}-kubeconfig")],
            vec!["Connection".into(), "-".into(), base.clone()],
        ];
        let cluster_scoped = export
            .apis
            .iter()
            .any(|a| a.scope == Some(kbind_api::ResourceScope::Cluster));
        if cluster_scoped {
            rows.push(vec!["ClusterBinding".into(), "-".into(), base.clone()]);
        }
        if export.namespaced {
            for n in &namespaces {
                rows.push(vec!["Binding".into(), n.clone(), base.clone()]);
            }
        }
        let text = format!(
            "Dry run: would bind Export {} for consumer cluster {uid}{} and apply:\n{}Nothing was bound or applied.\n",
            export.name,
            if namespaces.is_empty() {
                String::new()
            } else {
                format!(" in namespaces {}", namespaces.join(","))
            },
            table(&["KIND", "NAMESPACE", "NAME"], rows)
        );
        return emit(&mut ctx.stdout, &text);
    }

    let request = BindRequest {
        export: export.name.clone(),
        consumer_cluster_uid: uid,
        namespaces,
        konnector_namespace: Some(args.apply.konnector_namespace.clone()),
    };
    let bound = session.bind(&request).await?;
    let _ = writeln_err(ctx, &format!("Grant {} created; picking the bundle up.", bound.grant));
    let objects = gateway::pickup(&bound.pickup_url).await?;
    if let Some(format) = args.output {
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let text = match format {
            Format::Json => render(&list, format)?,
            Format::Yaml => yaml_documents(&objects)?,
        };
        return emit(&mut ctx.stdout, &text);
    }
    apply_and_wait(&objects, &args.apply, &client, ctx).await
}

/// `kbind redeem <pickup-url>`.
pub async fn redeem(args: &RedeemArgs, target: &Target, ctx: &mut Context) -> Result<()> {
    let client = consumer::connect(target).await?;
    consumer::require_konnector(&client, &args.apply.konnector_namespace).await?;
    let objects = gateway::pickup(&args.pickup_url).await?;
    apply_and_wait(&objects, &args.apply, &client, ctx).await
}

fn writeln_err(ctx: &mut Context, line: &str) -> std::io::Result<()> {
    use std::io::Write;
    writeln!(ctx.stderr, "{line}")
}

fn yaml_documents(objects: &[Value]) -> Result<String> {
    let mut out = String::new();
    for object in objects {
        out.push_str("---\n");
        out.push_str(&render(object, Format::Yaml)?);
    }
    Ok(out)
}

/// The namespaces to bind in: the flags, else asked for on a terminal, else an error.
fn namespaces(args: &BindArgs, namespaced: bool, ctx: &mut Context) -> Result<Vec<String>> {
    let given: Vec<String> = args
        .namespaces
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if !namespaced {
        if !given.is_empty() {
            return Err(CliError::Usage(format!(
                "Export {} has only cluster-scoped APIs; drop --namespace",
                args.export
            )));
        }
        return Ok(given);
    }
    if !given.is_empty() {
        return Ok(given);
    }
    if !ctx.interactive || args.output.is_some() {
        return Err(CliError::Usage(format!(
            "Export {} has namespaced APIs: say where with --namespace <name> (repeat for more)",
            args.export
        )));
    }
    let answer: String = dialoguer::Input::new()
        .with_prompt(format!("Namespaces to bind {} in (comma-separated)", args.export))
        .interact_text()
        .map_err(|e| CliError::failed("cannot ask for namespaces", e))?;
    let answer: Vec<String> = answer
        .split(',')
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect();
    if answer.is_empty() {
        return Err(CliError::Usage("no namespace given; nothing was bound".into()));
    }
    Ok(answer)
}

/// Checks the bundle, shows it, applies it and (with `--wait`) waits for Ready.
async fn apply_and_wait(
    objects: &[Value],
    args: &ApplyArgs,
    client: &kbind_cluster::KubeClusterClient,
    ctx: &mut Context,
) -> Result<()> {
    let checked =
        bundle::check(objects, &args.konnector_namespace).map_err(|e| CliError::ConsumerRefused(e.to_string()))?;
    emit(&mut ctx.stdout, &format!("Applying:\n{}", objects_table(&checked)))?;
    consumer::apply(client, &checked).await?;
    emit(
        &mut ctx.stdout,
        &format!(
            "Applied {} objects (field manager {}).\n",
            checked.len(),
            consumer::FIELD_MANAGER
        ),
    )?;
    if !args.wait {
        return Ok(());
    }
    let awaited: Vec<Awaited> = checked
        .iter()
        .filter(|o| o.kind != "Secret")
        .map(|o| Awaited {
            kind: o.kind.clone(),
            namespace: o.namespace.clone(),
            name: o.name.clone(),
        })
        .collect();
    {
        let mut reporter = Reporter::new(&mut *ctx.stderr, ctx.interactive);
        consumer::wait_ready(client, &awaited, args.timeout, &mut reporter).await?;
    }
    emit(&mut ctx.stdout, "Bound: the Connection and its bindings are Ready.\n")
}

/// A short table of bundle objects (the Secret's content is never shown).
fn objects_table(objects: &[BundleObject]) -> String {
    let rows = objects
        .iter()
        .map(|o| {
            vec![
                o.kind.clone(),
                o.namespace.clone().unwrap_or_else(|| "-".into()),
                o.name.clone(),
            ]
        })
        .collect();
    table(&["KIND", "NAMESPACE", "NAME"], rows)
}
