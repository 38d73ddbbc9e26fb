//! `kbind bind` and `kbind redeem`: get a bundle, check it against what was asked for, show it
//! (and ask before it copies anything of this cluster to the provider or has the provider write
//! anything but Secrets and ConfigMaps into it), refuse it when another
//! Connection already serves one of its namespaces of an API, apply it, say which Connection
//! serves which namespace when the API is shared, wait for Ready.

use kbind_api::service::BindRequest;
use serde_json::{Value, json};

use crate::Context;
use crate::apply;
use crate::args::{ApplyArgs, BindArgs, Format, RedeemArgs};
use crate::bundle::{self, BundleObject, CheckedBundle, Expected};
use crate::commands::{confirm, session};
use crate::consumer::Progress;
use crate::consumer::{self, Awaited, Target};
use crate::error::{CliError, Result};
use crate::gateway;
use crate::origin;
use crate::output::{Reporter, emit, render, table};
use crate::placement::{self, Planned};
use crate::rules;
use crate::status;

/// How far an interrupted `bind` got, for what it prints on Ctrl-C.
enum Stage {
    /// Nothing was asked of the gateway yet.
    Checking,
    /// The bind request was sent: the gateway may be creating the Grant.
    Requested { export: String },
    /// The gateway answered with Grant `grant`; its bundle was not picked up yet.
    Granted { grant: String, held: bool },
    /// The bundle was picked up (its one-time URL is spent); nothing applied yet.
    PickedUp { grant: String },
    /// Applying the bundle's `objects` objects, or waiting for them to be Ready.
    Applying {
        grant: String,
        export: String,
        objects: usize,
    },
}

impl Stage {
    /// What was done before the interrupt, and what to do about it.
    fn interrupted(&self) -> String {
        match self {
            Stage::Checking => {
                "interrupted before anything was asked of the gateway; nothing was bound or applied".into()
            }
            Stage::Requested { export } => format!(
                "interrupted while the gateway was issuing a Grant for Export {export}: it may exist now, with nothing applied here; \
                 `kbind grants` lists it, `kbind revoke <grant>` removes it, or bind again"
            ),
            Stage::Granted { grant, held: false } => format!(
                "interrupted after the gateway created Grant {grant}, before its bundle was picked up; nothing was applied: \
                 run `kbind revoke {grant}`, or bind again"
            ),
            Stage::Granted { grant, held: true } => format!(
                "interrupted after the gateway answered for Grant {grant} (held by this cluster before this run), before its \
                 bundle was picked up; nothing was applied here: bind again"
            ),
            Stage::PickedUp { grant } => format!(
                "interrupted after picking up Grant {grant}'s bundle (its pickup URL is used up); nothing was applied: \
                 bind again, or run `kbind revoke {grant}`"
            ),
            Stage::Applying { grant, export, objects } => format!(
                "interrupted while applying Grant {grant}'s bundle ({objects} objects) or waiting for it to be Ready: some or \
                 all of it may be applied; `kbind status` shows what is there, `kbind unbind {export}` removes it, or bind again"
            ),
        }
    }
}

/// `kbind bind <export>`; on Ctrl-C, says what was already done and exits 130.
pub async fn bind(args: &BindArgs, gateway: Option<&str>, target: &Target, ctx: &mut Context) -> Result<()> {
    let stage = parking_lot::Mutex::new(Stage::Checking);
    let interrupt = async {
        // Without a signal handler there is nothing to wait for: never resolve.
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    tokio::select! {
        result = bind_steps(args, gateway, target, ctx, &stage) => result,
        () = interrupt => {
            let stage = stage.lock();
            Err(CliError::Interrupted(stage.interrupted()))
        }
    }
}

fn set(stage: &parking_lot::Mutex<Stage>, now: Stage) {
    *stage.lock() = now;
}

/// `bind`'s steps, recording in `stage` how far they got.
async fn bind_steps(
    args: &BindArgs,
    gateway: Option<&str>,
    target: &Target,
    ctx: &mut Context,
    stage: &parking_lot::Mutex<Stage>,
) -> Result<()> {
    check_namespace_names(&args.namespaces)?;
    if args.dry_run && args.output.is_some() {
        return Err(CliError::Usage(
            "--dry-run shows a plan and -o prints the bundle, which exists only once the gateway issued the Grant; \
             drop -o to see the plan, or --dry-run to get the bundle"
                .into(),
        ));
    }
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
    let applying = args.output.is_none();
    if applying {
        consumer::require_konnector(&client, &args.apply.konnector_namespace).await?;
    }
    let namespaces = namespaces(args, export.namespaced, ctx)?;
    if let Some(ns) = namespaces
        .iter()
        .find(|n| !bundle::namespace_allowed(n, &args.apply.konnector_namespace))
    {
        return Err(CliError::Usage(format!(
            "kbind does not bind in namespace {ns:?} (kube-* and the konnector's namespace hold the cluster's and kbind's own credentials); pick another"
        )));
    }
    // Why before the Grant: whatever can be checked locally is, so a bind that cannot be
    // applied leaves no Grant, claim or credential behind.
    if applying {
        apply::require_namespaces(&client, &namespaces).await?;
    }
    // Another Connection's bindings of the Export's APIs: a namespace one of them serves would
    // be refused by the konnector, so it is refused here, before any Grant, in every mode.
    let provider = session.provider().await?;
    let existing = placement::served(&status::bindings_if_installed(&client).await?);
    let shared = match bundle_connection(&provider.name, &export.name) {
        Some(connection) => Planned::of_export(&connection, export, &namespaces).check(&existing)?,
        None => Vec::new(),
    };
    // The Grant this cluster already holds for the Export, if any: a bind adds to its namespaces
    // (and a failed bind must never revoke it).
    let held_grant = session
        .grants()
        .await?
        .grants
        .into_iter()
        .find(|g| g.export == export.name && g.consumer_cluster_uid == uid && !g.revoking);
    let before: Vec<String> = held_grant.as_ref().map(|g| g.namespaces.clone()).unwrap_or_default();
    let mut after = before.clone();
    after.extend(namespaces.iter().cloned());
    after.sort();
    after.dedup();
    // What the bundle's bindings will carry: every rule of the Export in every namespace the
    // Grant will cover (held ones included: the bundle binds them all again).
    let shown = rules::of_export(export, &after);

    if args.dry_run {
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
            for n in &after {
                rows.push(vec!["Binding".into(), n.clone(), base.clone()]);
            }
        }
        let text = format!(
            "Dry run: would bind Export {} for consumer cluster {uid}{}.\n{}\nIt would apply:\n{}{}{}Nothing was bound or applied.\n",
            export.name,
            if namespaces.is_empty() {
                String::new()
            } else {
                format!(" in namespaces {}", namespaces.join(","))
            },
            grant_change(held_grant.as_ref().map(|g| g.name.as_str()), &before, &after),
            table(&["KIND", "NAMESPACE", "NAME"], rows),
            rules::text(&shown),
            placement::notice(&shared),
        );
        return emit(&mut ctx.stdout, &text);
    }
    if applying {
        emit(&mut ctx.stdout, &rules::text(&shown))?;
        if let Some(what) = rules::consent(&shown) {
            confirm(&format!("Bind {} and {what}?", export.name), args.yes, ctx)?;
        }
    }

    let held = held_grant.is_some();
    let request = BindRequest {
        export: export.name.clone(),
        consumer_cluster_uid: uid,
        namespaces: namespaces.clone(),
        konnector_namespace: Some(args.apply.konnector_namespace.clone()),
    };
    set(
        stage,
        Stage::Requested {
            export: export.name.clone(),
        },
    );
    // Why a progress line: the gateway waits for the provider to issue the Grant, which can
    // take many seconds, and a silent terminal looks hung.
    let bound = {
        let mut reporter = Reporter::new(&mut *ctx.stderr, ctx.interactive);
        reporter.waiting(&format!(
            "waiting for the gateway to issue the Grant for {} (it waits for the provider)",
            export.name
        ));
        session.bind(&request).await
    }?;
    set(
        stage,
        Stage::Granted {
            grant: bound.grant.clone(),
            held,
        },
    );
    let undo = GrantUndo {
        session: &session,
        grant: bound.grant.clone(),
        held,
    };
    // What the Grant covers now: an older gateway does not say, and replaced the namespaces.
    let bundled = bound.namespaces.clone().unwrap_or_else(|| namespaces.clone());
    let _ = writeln_err(
        ctx,
        &format!(
            "{}; picking the bundle up.",
            bind_outcome(&bound, held, &before, &bundled)
        ),
    );
    // The gateway may only add what was asked to what the Grant held.
    if let Some(stray) = bundled.iter().find(|n| !namespaces.contains(n) && !before.contains(n)) {
        let e = CliError::ConsumerRefused(format!(
            "the gateway says Grant {} covers namespace {stray}, which this cluster neither held nor asked for; nothing was applied",
            bound.grant
        ));
        return Err(undo.after(e).await);
    }
    if let Some(missing) = namespaces.iter().find(|n| !bundled.contains(n)) {
        let e = CliError::ConsumerRefused(format!(
            "the gateway's Grant {} does not cover namespace {missing}, which was asked for; nothing was applied",
            bound.grant
        ));
        return Err(undo.after(e).await);
    }
    let objects = match gateway::pickup(&bound.pickup_url).await {
        Ok(objects) => objects,
        Err(e) => return Err(undo.after(e).await),
    };
    set(
        stage,
        Stage::PickedUp {
            grant: bound.grant.clone(),
        },
    );
    if let Some(format) = args.output {
        // The bundle is printed, not applied: its bindings are checked all the same, and who
        // would serve what goes to stderr (stdout is the bundle).
        let shared = match Planned::of_objects(&objects).map(|p| p.check(&existing)) {
            Some(Err(e)) => return Err(undo.after(e).await),
            Some(Ok(lines)) => lines,
            None => Vec::new(),
        };
        emit(&mut ctx.stderr, &placement::notice(&shared))?;
        let list = json!({"apiVersion": "v1", "kind": "List", "items": objects});
        let text = match format {
            Format::Json => render(&list, format)?,
            Format::Yaml => yaml_documents(&objects)?,
        };
        return emit(&mut ctx.stdout, &text);
    }
    let expected = Expected {
        konnector_namespace: &args.apply.konnector_namespace,
        namespaces: Some(&bundled),
        grant: Some(&bound.grant),
    };
    // The namespaces were checked before the Grant, and the bundle must bind in exactly the
    // Grant's (those it held and those asked for).
    let ask = async |checked: &CheckedBundle, ctx: &mut Context| {
        set(
            stage,
            Stage::Applying {
                grant: bound.grant.clone(),
                export: export.name.clone(),
                objects: checked.objects.len(),
            },
        );
        // What is shown now is the bundle's own rules: those are what the konnector obeys.
        let new = rules::unshown(&checked.related, &shown).len();
        if new > 0 {
            emit(
                &mut ctx.stdout,
                &format!(
                    "The bundle's related-resource rules are not the ones shown before the Grant ({new} not shown); the bundle's rules:\n{}",
                    rules::text(&checked.related)
                ),
            )?;
            // --yes agreed to what was shown, not to what the gateway added since.
            if args.yes || !ctx.interactive {
                return Err(CliError::ConsumerRefused(format!(
                    "refusing the bundle, nothing was applied: its related-resource rules (above) differ from those shown \
                     before the Grant{}; bind again to see the Export's rules as the catalog gives them now",
                    if args.yes {
                        ", and --yes agreed only to those"
                    } else {
                        ", and there is no terminal to ask on (--yes agrees only to what was shown before the Grant)"
                    }
                )));
            }
            confirm(
                "Apply the bundle with these rules, which the catalog did not show?",
                false,
                ctx,
            )?;
        }
        Ok(())
    };
    let origin = origin::of_url(session.base())?;
    apply_bundle(&objects, expected, &origin, &args.apply, &client, ctx, ask, async |e| {
        undo.after(e).await
    })
    .await
}

/// What the bind will do to the Grant, for `--dry-run`.
fn grant_change(held: Option<&str>, before: &[String], after: &[String]) -> String {
    match held {
        None if after.is_empty() => "Grant: a new one.".to_string(),
        None => format!("Grant: a new one for namespaces {}.", after.join(",")),
        Some(grant) if before == after => format!("Grant {grant} unchanged (namespaces {}).", after.join(",")),
        Some(grant) => format!(
            "Grant {grant}: namespaces {} -> {} (a bind only adds: `kbind unbind --namespace` lets one go).",
            before.join(","),
            after.join(",")
        ),
    }
}

/// What the bind did to the Grant, as the gateway said (or, from an older gateway, as known).
fn bind_outcome(bound: &kbind_api::service::BindResponse, held: bool, before: &[String], after: &[String]) -> String {
    use kbind_api::service::BindOutcome;
    let grant = &bound.grant;
    match bound.outcome {
        Some(BindOutcome::Created) => format!("Grant {grant} created"),
        Some(BindOutcome::Unchanged) => format!("Grant {grant} unchanged"),
        Some(BindOutcome::Updated) => format!(
            "Grant {grant} updated: namespaces {} -> {}",
            before.join(","),
            after.join(",")
        ),
        None if held => format!("Grant {grant} updated"),
        None => format!("Grant {grant} created"),
    }
}

/// Revokes the Grant a failed bind created (not one the cluster held before), and says so.
struct GrantUndo<'a> {
    session: &'a crate::gateway::Gateway,
    grant: String,
    held: bool,
}

impl GrantUndo<'_> {
    async fn after(self, e: CliError) -> CliError {
        let grant = &self.grant;
        let note = if self.held {
            format!("Grant {grant} existed before this run and stays")
        } else {
            match self.session.revoke(grant).await {
                Ok(()) => format!("Grant {grant} was revoked again"),
                Err(r) => format!("revoking Grant {grant} failed too ({r}); run `kbind revoke {grant}`"),
            }
        };
        e.noted(&note)
    }
}

/// Where `redeem` gets its pickup URL: the argument, `-` for one line on stdin, else
/// `KBIND_PICKUP_URL` (clap reads it into the argument).
fn pickup_url(args: &RedeemArgs) -> Result<String> {
    let given = match args.pickup_url.as_deref() {
        Some("-") => {
            let mut line = String::new();
            std::io::stdin()
                .read_line(&mut line)
                .map_err(|e| CliError::failed("cannot read the pickup URL from stdin", e))?;
            if line.trim().is_empty() {
                return Err(CliError::Usage(
                    "`-` reads the pickup URL from stdin, and stdin was empty; pipe it in \
                     (`printf '%s\\n' \"$URL\" | kbind redeem -`), or set KBIND_PICKUP_URL"
                        .into(),
                ));
            }
            line
        }
        Some(url) => url.to_string(),
        None => String::new(),
    };
    let url = given.trim().to_string();
    if url.is_empty() {
        return Err(CliError::Usage(
            "no pickup URL: pass `-` and give it on stdin, set KBIND_PICKUP_URL, or pass it as the argument".into(),
        ));
    }
    Ok(url)
}

/// `kbind redeem [<pickup-url>|-]`.
pub async fn redeem(args: &RedeemArgs, target: &Target, ctx: &mut Context) -> Result<()> {
    check_namespace_names(&args.namespaces)?;
    let url = pickup_url(args)?;
    // Reading the kubeconfig is local; the one-time URL is spent before any API call, so it
    // is not left usable while the consumer is checked.
    let client = consumer::connect(target).await?;
    let origin = origin::of_url(&url)?;
    let objects = gateway::pickup(&url).await?;
    drop(url);
    let spent = |e: CliError, grant: Option<&str>| {
        let grant = grant.map_or_else(String::new, |g| {
            format!("; Grant {g} stays on the provider: `kbind revoke {g}` or revoke it in the web UI")
        });
        e.noted(&format!("the pickup URL is used up, get a new one to try again{grant}"))
    };
    let grant_of = |objects: &[Value]| {
        objects
            .iter()
            .find_map(|o| o["metadata"]["labels"][kbind_api::consts::backend::LABEL_GRANT].as_str())
            .map(str::to_string)
    };
    let grant = grant_of(&objects);
    if let Err(e) = consumer::require_konnector(&client, &args.apply.konnector_namespace).await {
        return Err(spent(e, grant.as_deref()));
    }
    let given = given_namespaces(&args.namespaces);
    let expected = Expected {
        konnector_namespace: &args.apply.konnector_namespace,
        namespaces: (!given.is_empty()).then_some(given.as_slice()),
        grant: None,
    };
    let ask = async |checked: &CheckedBundle, ctx: &mut Context| {
        let unconfirmed = given.is_empty() && !checked.namespaces.is_empty();
        emit(&mut ctx.stdout, &rules::text(&checked.related))?;
        let namespaces = checked.namespaces.join(",");
        let question = match (unconfirmed, rules::consent(&checked.related)) {
            (true, Some(what)) => Some(format!("Bind in namespace(s) {namespaces} of this cluster and {what}?")),
            (true, None) => Some(format!("Bind in namespace(s) {namespaces} of this cluster?")),
            (false, Some(what)) => Some(format!("Apply the bundle and {what}?")),
            (false, None) => None,
        };
        if let Some(question) = question {
            confirm(&question, args.yes, ctx)?;
        }
        apply::require_namespaces(&client, &checked.namespaces).await
    };
    apply_bundle(&objects, expected, &origin, &args.apply, &client, ctx, ask, async |e| {
        spent(e, grant.as_deref())
    })
    .await
}

/// Checks the bundle against `expected`, shows what it applies, lets `ask` confirm (and check)
/// what the caller must, installs it, then waits with `--wait`; an error before the wait goes
/// through `undo`, which says what this run left behind. `origin` is the gateway the bundle
/// came from: recorded on the Connection, and an existing Connection of another origin or
/// endpoint is not re-pointed without `--replace-connection`.
#[allow(clippy::too_many_arguments)]
async fn apply_bundle(
    objects: &[Value],
    expected: Expected<'_>,
    origin: &str,
    args: &ApplyArgs,
    client: &kbind_cluster::KubeClusterClient,
    ctx: &mut Context,
    ask: impl AsyncFnOnce(&CheckedBundle, &mut Context) -> Result<()>,
    undo: impl AsyncFnOnce(CliError) -> CliError,
) -> Result<()> {
    let installed = async {
        let mut checked = bundle::check(objects, expected).map_err(|e| CliError::ConsumerRefused(e.to_string()))?;
        origin::stamp(&mut checked, origin);
        if let Some(repoint) = origin::repoint(client, &checked, origin).await? {
            if !args.replace_connection {
                return Err(origin::refusal(&repoint));
            }
            emit(
                &mut ctx.stdout,
                &format!(
                    "{repoint}
(--replace-connection)
"
                ),
            )?;
        }
        let existing = placement::served(&status::bindings_if_installed(client).await?);
        let shared = match Planned::of_objects(checked.objects.iter().map(|o| &o.body)) {
            Some(planned) => planned.check(&existing)?,
            None => Vec::new(),
        };
        emit(
            &mut ctx.stdout,
            &format!("Applying:\n{}", objects_table(&checked.objects)),
        )?;
        ask(&checked, ctx).await?;
        install(&checked, client, ctx).await?;
        // Applied: a failed write of the notice must not undo the bind.
        let _ = emit(&mut ctx.stdout, &placement::notice(&shared));
        Ok(checked)
    }
    .await;
    match installed {
        Ok(checked) => wait(&checked, args, client, ctx).await,
        Err(e) => Err(undo(e).await),
    }
}

/// The name the gateway gives the Connection (and bindings) of `export`: `<provider>-<export>`,
/// unless that is too long for an object name (then it is the Grant's, unknown before binding).
fn bundle_connection(provider: &str, export: &str) -> Option<String> {
    let name = format!("{provider}-{export}");
    (name.len() + "-kubeconfig".len() <= 253).then_some(name)
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
    let given = given_namespaces(&args.namespaces);
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
    check_namespace_names(&answer)?;
    Ok(answer)
}

/// Checks the consumer for the bundle and applies it, undoing what it created on a failure (its
/// namespaces are the caller's to check: bind does before the Grant).
async fn install(checked: &CheckedBundle, client: &kbind_cluster::KubeClusterClient, ctx: &mut Context) -> Result<()> {
    let existing = apply::preflight(client, checked).await?;
    apply::apply_or_undo(client, checked, &existing).await?;
    emit(
        &mut ctx.stdout,
        &format!(
            "Applied {} objects (field manager {}).\n",
            checked.objects.len(),
            consumer::FIELD_MANAGER
        ),
    )
}

/// With `--wait`, waits for the Connection and its bindings to be Ready.
async fn wait(
    checked: &CheckedBundle,
    args: &ApplyArgs,
    client: &kbind_cluster::KubeClusterClient,
    ctx: &mut Context,
) -> Result<()> {
    if !args.wait {
        return Ok(());
    }
    let awaited: Vec<Awaited> = checked
        .objects
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

/// The `--namespace` values, trimmed, without empty ones.
fn given_namespaces(flags: &[String]) -> Vec<String> {
    flags
        .iter()
        .map(|n| n.trim().to_string())
        .filter(|n| !n.is_empty())
        .collect()
}

/// Refuses a `--namespace` value that cannot be a namespace name (a DNS-1123 label), before
/// anything is asked of a cluster or the gateway: advising to create it would only fail.
fn check_namespace_names(flags: &[String]) -> Result<()> {
    for name in flags {
        let name = name.trim();
        if name.is_empty() {
            return Err(CliError::Usage(
                "--namespace has an empty name (two commas in a row, or one at either end); nothing was bound".into(),
            ));
        }
        if !is_dns_label(name) {
            // A name can be long (a pasted paragraph): show its start and its length.
            let shown: String = name.chars().take(40).collect();
            let shown = if shown.len() < name.len() {
                format!("{shown:?}… ({} characters)", name.chars().count())
            } else {
                format!("{name:?}")
            };
            return Err(CliError::Usage(format!(
                "{shown} is not a namespace name: use lower-case letters, digits and '-', starting and ending with \
                 a letter or digit, at most 63 characters; nothing was bound"
            )));
        }
    }
    Ok(())
}

/// A DNS-1123 label: what Kubernetes accepts as a namespace name.
fn is_dns_label(name: &str) -> bool {
    let bytes = name.as_bytes();
    let edge = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    !bytes.is_empty()
        && bytes.len() <= 63
        && bytes.first().is_some_and(edge)
        && bytes.last().is_some_and(edge)
        && bytes.iter().all(|b| edge(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_names_are_dns_labels() {
        assert!(is_dns_label("team-a"));
        assert!(is_dns_label(&"a".repeat(63)));
        for bad in ["Team-A", "-a", "a-", "", "a_b", "a.b"] {
            assert!(!is_dns_label(bad), "{bad:?}");
        }
        assert!(!is_dns_label(&"a".repeat(64)));
        assert!(check_namespace_names(&["a".into(), String::new(), "b".into()]).is_err());
        let long = check_namespace_names(&["x".repeat(300)])
            .expect_err("too long")
            .to_string();
        assert!(long.contains("(300 characters)"), "{long}");
    }
}
