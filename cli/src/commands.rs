//! One function per command, and what they share: the logged-in gateway and confirmations.

use std::collections::BTreeSet;

use kbind_api::consts::backend::LABEL_GRANT;
use kbind_api::service::Catalog;

use crate::Context;
use crate::args::{Cli, Command, Format};
use crate::consumer::{self, Target};
use crate::creds;
use crate::error::{CliError, Result};
use crate::gateway::Gateway;
use crate::output::{age, emit, render, table};

/// Runs the parsed command.
pub async fn dispatch(cli: Cli, program: &str, ctx: &mut Context) -> Result<()> {
    let target = Target {
        kubeconfig: cli.kubeconfig.clone().or_else(|| ctx.kubeconfig.clone()),
        context: cli.context.clone(),
    };
    let gateway = cli.gateway.as_deref();
    match cli.command {
        Command::Login(args) => crate::login::login(&args, ctx).await,
        Command::Logout { gateway_url } => logout(gateway_url.as_deref().or(gateway), ctx),
        Command::Catalog { output } => catalog(gateway, output, ctx).await,
        Command::Bind(args) => crate::bind::bind(&args, gateway, &target, ctx).await,
        Command::Redeem(args) => crate::bind::redeem(&args, &target, ctx).await,
        Command::Unbind(args) => crate::unbind::unbind(&args, gateway, &target, ctx).await,
        Command::Grants { output } => grants(gateway, output, ctx).await,
        Command::Revoke { grant, yes } => revoke(gateway, &grant, yes, &target, ctx).await,
        Command::Status { output } => crate::status::status(&target, output, ctx).await,
        Command::Completion { shell } => {
            let mut command = <Cli as clap::CommandFactory>::command();
            let mut buf = Vec::new();
            clap_complete::generate(shell, &mut command, program.replace(' ', "-"), &mut buf);
            emit(&mut ctx.stdout, &String::from_utf8_lossy(&buf))
        }
    }
}

/// The gateway of the cached credential (`--gateway`, else the current one).
pub fn session(gateway: Option<&str>, ctx: &Context) -> Result<Gateway> {
    let cred = creds::load(&ctx.config_dir, gateway)?;
    Gateway::new(&cred.gateway, Some(cred.token))
}

/// Asks `question` on a terminal; without one, `--yes` is required.
pub fn confirm(question: &str, yes: bool, ctx: &mut Context) -> Result<()> {
    if yes {
        return Ok(());
    }
    if !ctx.interactive {
        return Err(CliError::Usage(format!(
            "{question} There is no terminal to ask on: pass --yes to confirm."
        )));
    }
    let confirmed = dialoguer::Confirm::new()
        .with_prompt(question)
        .default(false)
        .interact()
        .map_err(|e| CliError::failed("cannot ask for confirmation", e))?;
    if confirmed {
        Ok(())
    } else {
        Err(CliError::Failed("cancelled; nothing was changed".into()))
    }
}

fn logout(gateway: Option<&str>, ctx: &mut Context) -> Result<()> {
    match creds::remove(&ctx.config_dir, gateway)? {
        Some(g) => emit(&mut ctx.stdout, &format!("Logged out of {g}.\n")),
        None => emit(&mut ctx.stdout, "Not logged in; nothing to forget.\n"),
    }
}

async fn catalog(gateway: Option<&str>, output: Option<Format>, ctx: &mut Context) -> Result<()> {
    let catalog = session(gateway, ctx)?.catalog().await?;
    let text = match output {
        Some(format) => render(&catalog, format)?,
        None => catalog_table(&catalog),
    };
    emit(&mut ctx.stdout, &text)
}

/// The catalog as a table: Exports by Collection, those in none last under `-`.
pub fn catalog_table(catalog: &Catalog) -> String {
    let mut rows = Vec::new();
    let mut listed = BTreeSet::new();
    let row = |collection: &str, e: &kbind_api::service::CatalogExport| {
        let apis: Vec<&str> = e.apis.iter().map(|a| a.name.as_str()).collect();
        vec![
            collection.to_string(),
            e.name.clone(),
            e.title.clone(),
            if e.namespaced { "Namespaced" } else { "Cluster" }.to_string(),
            if e.ready {
                "True".to_string()
            } else {
                format!("False ({})", e.message.clone().unwrap_or_default())
            },
            apis.join(","),
        ]
    };
    for collection in &catalog.collections {
        for name in &collection.exports {
            if let Some(e) = catalog.exports.iter().find(|e| &e.name == name) {
                rows.push(row(&collection.name, e));
                listed.insert(name.clone());
            }
        }
    }
    for e in catalog.exports.iter().filter(|e| !listed.contains(&e.name)) {
        rows.push(row("-", e));
    }
    if rows.is_empty() {
        return "No Exports on this provider yet.\n".into();
    }
    table(&["COLLECTION", "EXPORT", "TITLE", "SCOPE", "READY", "APIS"], rows)
}

async fn grants(gateway: Option<&str>, output: Option<Format>, ctx: &mut Context) -> Result<()> {
    let list = session(gateway, ctx)?.grants().await?;
    let text = match output {
        Some(format) => render(&list, format)?,
        None if list.grants.is_empty() => "You have no grants.\n".into(),
        None => {
            let rows = list
                .grants
                .iter()
                .map(|g| {
                    let ready = if g.revoking {
                        "Revoking".to_string()
                    } else if g.ready {
                        "True".into()
                    } else {
                        format!("False ({})", g.reason.clone().unwrap_or_default())
                    };
                    vec![
                        g.name.clone(),
                        g.export.clone(),
                        g.consumer_cluster_uid.clone(),
                        if g.namespaces.is_empty() {
                            "-".into()
                        } else {
                            g.namespaces.join(",")
                        },
                        ready,
                        g.heartbeat_age_seconds.map(age).unwrap_or_else(|| "never".into()),
                    ]
                })
                .collect();
            table(
                &["NAME", "EXPORT", "CONSUMER", "NAMESPACES", "READY", "HEARTBEAT"],
                rows,
            )
        }
    };
    emit(&mut ctx.stdout, &text)
}

async fn revoke(gateway: Option<&str>, grant: &str, yes: bool, target: &Target, ctx: &mut Context) -> Result<()> {
    let session = session(gateway, ctx)?;
    // Why first: asking to confirm the revocation of a Grant that does not exist misleads.
    let mine = session.grants().await?;
    if !mine.grants.iter().any(|g| g.name == grant) {
        return Err(CliError::Refused(format!(
            "no grant {grant} of yours at {}; `kbind grants` lists them",
            session.base()
        )));
    }
    let question = match applied_here(target, grant).await {
        Some(connection) => {
            emit(
                &mut ctx.stderr,
                &format!(
                    "Warning: Grant {grant}'s bundle is still applied on this cluster (Connection {connection}): unbind before revoke \
                     (`kbind unbind {connection}`). After a revoke the konnector cannot drain the provider copies, and unbinding \
                     needs `--orphan`, which deletes nothing on either side.\n"
                ),
            )?;
            format!("Revoke Grant {grant} anyway, before unbinding Connection {connection}?")
        }
        None => format!("Revoke Grant {grant}? Its consumer's credential will stop working."),
    };
    confirm(&question, yes, ctx)?;
    session.revoke(grant).await?;
    emit(
        &mut ctx.stdout,
        &format!("Grant {grant} revoked; its consumer's Connection goes not Ready, its objects stay.\n"),
    )
}

/// The Connection on the current consumer that applies Grant `grant`'s bundle, if any. Best
/// effort: revoking is about the gateway, so an unreachable consumer just skips the warning.
async fn applied_here(target: &Target, grant: &str) -> Option<String> {
    let look = async {
        let client = consumer::connect(target).await.ok()?;
        let connections = consumer::list(&client, &consumer::resource_of("Connection"), None)
            .await
            .ok()?;
        connections
            .iter()
            .find(|c| c["metadata"]["labels"][LABEL_GRANT].as_str() == Some(grant))
            .and_then(|c| c["metadata"]["name"].as_str().map(str::to_string))
    };
    tokio::time::timeout(std::time::Duration::from_secs(10), look)
        .await
        .ok()
        .flatten()
}
