//! `kbind unbind`: show everything that will be deleted (the provider copies the drain removes;
//! on this cluster the bindings, the Connection, its Secret when it is this Grant's alone, and
//! each CRD no other binding serves with every object of it), ask, delete the bindings, then the
//! Connection and its Secret, and revoke the Grant at the gateway; `--orphan` first marks
//! everything with the escape hatch so no synced object is deleted on either side.

use std::collections::BTreeSet;

use k8s_openapi::api::core::v1::Secret;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::backend::{ANNOTATION_GATEWAY, LABEL_GRANT};
use kbind_api::consts::{DELETION_POLICY_ORPHAN, TRUE, annotation, condition, label};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DiscoveredResource, Patch, PatchParams};
use serde_json::{Value, json};

use crate::Context;
use crate::args::UnbindArgs;
use crate::commands::{confirm, session};
use crate::consumer::{self, Awaited, Target, consumer_error};
use crate::error::{CliError, Result};
use crate::origin;
use crate::output::{Reporter, emit, table};
use crate::status::{BindingRef, bindings, discover, find_api, served_objects};

/// `kbind unbind <export|connection>`.
pub async fn unbind(args: &UnbindArgs, gateway: Option<&str>, target: &Target, ctx: &mut Context) -> Result<()> {
    let client = consumer::connect(target).await?;
    let connections = consumer::list(&client, &consumer::resource_of("Connection"), None).await?;
    let connection = find_connection(&connections, &args.target)?;
    let name = connection["metadata"]["name"].as_str().unwrap_or_default().to_string();
    let grant = connection["metadata"]["labels"][LABEL_GRANT]
        .as_str()
        .map(str::to_string);
    let issued_by = connection["metadata"]["annotations"][ANNOTATION_GATEWAY]
        .as_str()
        .map(str::to_string);
    if !args.orphan
        && let Some(why) = credential_refused(connection)
    {
        return Err(CliError::Failed(format!(
            "the provider refuses Connection {name}'s credential ({why}; was its Grant revoked before unbinding?): \
             the konnector cannot drain the provider copies, so this unbind would wait forever. Nothing was changed. \
             Run `kbind unbind {name} --orphan` to release everything and delete nothing on either side \
             (the provider copies stay: ask the provider to remove them), or bind again for a working credential first"
        )));
    }
    let all = bindings(&client).await?;
    if !args.namespaces.is_empty() {
        let mine = all.into_iter().filter(|(c, _)| *c == name).map(|(_, b)| b).collect();
        let narrowing = Narrowing {
            connection,
            grant: grant.as_deref(),
            issued_by: issued_by.as_deref(),
            bindings: mine,
        };
        return narrowing.run(args, gateway, &client, ctx).await;
    }
    let (mine, others): (Vec<_>, Vec<_>) = all.into_iter().partition(|(c, _)| *c == name);
    let mine: Vec<BindingRef> = mine.into_iter().map(|(_, b)| b).collect();
    let secret = deletable_secret(&client, connection, grant.as_deref(), &connections).await?;

    let listing = drained_listing(&client, mine.iter()).await?;

    // On this cluster: the bindings, the Connection, its Secret when it is this Grant's alone,
    // and (without --orphan) each CRD no other binding serves, with every object of it in
    // every namespace (also namespaces never bound: deleting a CRD deletes all its objects).
    let mut here: Vec<Vec<String>> = mine.iter().map(|b| row(&b.kind, &b.object)).collect();
    here.push(vec!["Connection".into(), "-".into(), name.clone()]);
    let secret_note = match &secret {
        Ok((ns, n)) => {
            here.push(vec!["Secret".into(), ns.clone(), n.clone()]);
            String::new()
        }
        Err(why) => format!("{why}\n"),
    };
    let crds = if args.orphan {
        Vec::new()
    } else {
        crds_that_go(&client, &mine, &others).await?
    };
    let mut unlisted = String::new();
    for (crd, res) in &crds {
        here.push(vec!["CustomResourceDefinition".into(), "-".into(), crd.clone()]);
        // Why list it anyway: the konnector deletes it, and whatever is stored of it, all the same.
        let Some(res) = res else {
            unlisted.push_str(&format!(
                "CustomResourceDefinition {crd} is not in the cluster's discovery, so its objects could not be listed: \
                 every object of it goes with it unseen (--orphan keeps it).\n"
            ));
            continue;
        };
        let mut objects: Vec<Vec<String>> = consumer::list(&client, res, None)
            .await?
            .iter()
            .map(|o| row(&res.kind, o))
            .collect();
        objects.sort();
        here.extend(objects);
    }
    let here = format!(
        "Deleted on this cluster{}:\n{}{secret_note}{unlisted}",
        if crds.is_empty() {
            ""
        } else {
            " (a CRD no other binding serves goes, and with it every object of it, in every namespace)"
        },
        table(&["KIND", "NAMESPACE", "NAME"], here)
    );

    let plan = if args.orphan {
        format!(
            "Unbinding Connection {name} with --orphan: no synced object is deleted on either side. These objects stay on this cluster and their copies stay on the provider, unmanaged:\n{listing}{here}"
        )
    } else {
        format!(
            "Unbinding Connection {name}: the konnector deletes these objects' copies on the provider (use --orphan to keep everything):\n{listing}{here}"
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
        consumer::delete(&client, &binding.kind, binding.namespace.as_deref(), &binding.name).await?;
        awaited.push(Awaited {
            kind: binding.kind.clone(),
            namespace: binding.namespace.clone(),
            name: binding.name.clone(),
        });
    }
    consumer::delete(&client, "Connection", None, &name).await?;
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
    if let Ok((ns, secret)) = &secret {
        consumer::delete(&client, "Secret", Some(ns), secret).await?;
    }
    emit(&mut ctx.stdout, &format!("Unbound {name}.\n"))?;

    match grant {
        None => Ok(()),
        Some(grant) => match session(gateway, ctx) {
            // A Grant label is the Connection's word: only the gateway that issued the bundle
            // (recorded by kbind when it applied it) is asked to revoke, so a Connection made
            // to look like someone else's cannot revoke their Grant here.
            Ok(session) if issued_by.as_deref() != Some(origin::of_url(session.base())?.as_str()) => emit(
                &mut ctx.stdout,
                &match &issued_by {
                    Some(other) => format!(
                        "Grant {grant} was issued through {other}, not {}: it was not revoked here                          (`kbind --gateway {other} revoke {grant}` revokes it there, or it is reaped).
",
                        session.base()
                    ),
                    None => format!(
                        "Connection {name} does not record which gateway issued it (made by hand or by an older kbind):                          Grant {grant} was not revoked. If {} issued it, run `kbind revoke {grant}`.
",
                        session.base()
                    ),
                },
            ),
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

/// The provider copies the drain of `bindings` removes, as a table (or a line saying there are
/// none).
async fn drained_listing(client: &dyn ClusterClient, bindings: impl Iterator<Item = &BindingRef>) -> Result<String> {
    let mut rows = Vec::new();
    for binding in bindings {
        for (res, object) in served_objects(client, binding).await? {
            rows.push(row(&res.kind, &object));
        }
    }
    rows.sort();
    rows.dedup();
    Ok(if rows.is_empty() {
        "No synced objects: nothing is deleted on the provider.\n".to_string()
    } else {
        table(&["KIND", "NAMESPACE", "NAME"], rows)
    })
}

fn row(kind: &str, object: &Value) -> Vec<String> {
    vec![
        kind.to_string(),
        object["metadata"]["namespace"].as_str().unwrap_or("-").to_string(),
        object["metadata"]["name"].as_str().unwrap_or_default().to_string(),
    ]
}

/// Why the provider refuses the Connection's credential, when its conditions say so (a 401:
/// typically its Grant was revoked).
pub fn credential_refused(connection: &Value) -> Option<String> {
    // The konnector says `Connected=False, Unauthorized`; one from before that reason said
    // `PermissionDenied=True` with the 401 in its message.
    let conditions = connection.pointer("/status/conditions")?.as_array()?;
    conditions.iter().find_map(|c| {
        let failing = c["status"]
            == if c["type"] == condition::PERMISSION_DENIED {
                "True"
            } else {
                "False"
            };
        let reason = c["reason"].as_str().unwrap_or_default();
        let message = c["message"].as_str().unwrap_or_default();
        let refused = reason == kbind_api::consts::reason::UNAUTHORIZED || message.contains("401");
        (failing && refused).then(|| format!("{}: {reason}: {message}", c["type"].as_str().unwrap_or("?")))
    })
}

/// The Connection's Secret when unbind may delete it: labelled for this Grant and referenced by
/// no other Connection; else why it stays.
async fn deletable_secret(
    client: &dyn ClusterClient,
    connection: &Value,
    grant: Option<&str>,
    connections: &[Value],
) -> Result<Result<(String, String), String>> {
    let reference = &connection["spec"]["kubeconfigSecretRef"];
    let (Some(ns), Some(name)) = (reference["namespace"].as_str(), reference["name"].as_str()) else {
        return Ok(Err("The Connection names no Secret.".into()));
    };
    let this = connection["metadata"]["name"].as_str().unwrap_or_default();
    let secret: Option<Secret> = client
        .get_typed_opt(Some(ns), name)
        .await
        .map_err(|e| consumer_error(&format!("cannot read Secret {ns}/{name}"), e))?;
    let Some(secret) = secret else {
        return Ok(Err(format!("Secret {ns}/{name} is gone already.")));
    };
    let label = secret.metadata.labels.as_ref().and_then(|l| l.get(LABEL_GRANT));
    match (grant, label) {
        (Some(g), Some(l)) if g == l => {}
        _ => {
            return Ok(Err(format!(
                "Secret {ns}/{name} stays: it is not labelled {LABEL_GRANT}={} like this Connection.",
                grant.unwrap_or("<none>")
            )));
        }
    }
    let shared = connections.iter().find(|c| {
        c["metadata"]["name"].as_str() != Some(this)
            && c["spec"]["kubeconfigSecretRef"]["namespace"].as_str() == Some(ns)
            && c["spec"]["kubeconfigSecretRef"]["name"].as_str() == Some(name)
    });
    if let Some(other) = shared {
        return Ok(Err(format!(
            "Secret {ns}/{name} stays: Connection {} uses it too.",
            other["metadata"]["name"].as_str().unwrap_or_default()
        )));
    }
    Ok(Ok((ns.to_string(), name.to_string())))
}

/// The consumer CRDs the konnector removes when `mine` go: kbind-managed, and bound by no
/// binding in `others`; with the resource to list their objects, `None` when discovery lacks it.
async fn crds_that_go(
    client: &dyn ClusterClient,
    mine: &[BindingRef],
    others: &[(String, BindingRef)],
) -> Result<Vec<(String, Option<ApiResource>)>> {
    let still: BTreeSet<String> = others.iter().flat_map(|(_, b)| b.apis()).collect();
    let going: BTreeSet<String> = mine
        .iter()
        .flat_map(BindingRef::apis)
        .filter(|a| !still.contains(a))
        .collect();
    if going.is_empty() {
        return Ok(Vec::new());
    }
    let discovery = discover(client).await?;
    let mut out = Vec::new();
    for api in going {
        let crd: Option<CustomResourceDefinition> = client
            .get_typed_opt(None, &api)
            .await
            .map_err(|e| consumer_error(&format!("cannot read CRD {api}"), e))?;
        let managed = crd
            .and_then(|c| c.metadata.labels)
            .is_some_and(|l| l.get(label::MANAGED).map(String::as_str) == Some(TRUE));
        if managed {
            let res = find_api(&discovery, &api).map(DiscoveredResource::api_resource);
            out.push((api, res));
        }
    }
    Ok(out)
}

/// The Connection named `target`, else the one bound for Export `target` (`<provider>-<export>`).
fn find_connection<'a>(connections: &'a [Value], target: &str) -> Result<&'a Value> {
    let name_of = |c: &Value| c["metadata"]["name"].as_str().unwrap_or_default().to_string();
    if let Some(c) = connections.iter().find(|c| name_of(c) == target) {
        return Ok(c);
    }
    let suffix = format!("-{target}");
    let matching: Vec<&Value> = connections.iter().filter(|c| name_of(c).ends_with(&suffix)).collect();
    match matching.as_slice() {
        [one] => Ok(*one),
        [] => Err(CliError::Usage(format!(
            "no Connection for {target:?} on this cluster; `kbind status` lists what is bound"
        ))),
        many => Err(CliError::Usage(format!(
            "{target:?} matches several Connections ({}); name one",
            many.iter().map(|c| name_of(c)).collect::<Vec<_>>().join(", ")
        ))),
    }
}

/// `kbind unbind <connection> --namespace NS`: lets some namespaces of a Connection go. The
/// consumer side goes first — the Bindings are deleted and waited for, so the konnector drains
/// their copies with a credential that still covers them — and only then does the Grant stop
/// covering the namespaces, at the gateway that issued it.
struct Narrowing<'a> {
    connection: &'a Value,
    grant: Option<&'a str>,
    issued_by: Option<&'a str>,
    bindings: Vec<BindingRef>,
}

impl Narrowing<'_> {
    async fn run(
        self,
        args: &UnbindArgs,
        gateway: Option<&str>,
        client: &kbind_cluster::KubeClusterClient,
        ctx: &mut Context,
    ) -> Result<()> {
        let name = self.connection["metadata"]["name"]
            .as_str()
            .unwrap_or_default()
            .to_string();
        let in_namespace = |b: &BindingRef, ns: &str| b.kind == "Binding" && b.namespace.as_deref() == Some(ns);
        let mut going = Vec::new();
        for ns in &args.namespaces {
            match self.bindings.iter().find(|b| in_namespace(b, ns)) {
                Some(binding) => going.push(binding),
                None => {
                    return Err(CliError::Usage(format!(
                        "Connection {name} has no Binding in namespace {ns}; `kbind status` lists its bindings"
                    )));
                }
            }
        }
        if self.bindings.len() == going.len() {
            return Err(CliError::Usage(format!(
                "those are all of Connection {name}'s bindings: run `kbind unbind {name}` to unbind it whole (and revoke its Grant)"
            )));
        }
        let listing = drained_listing(client, going.iter().copied()).await?;
        let here: Vec<Vec<String>> = going.iter().map(|b| row(&b.kind, &b.object)).collect();
        emit(
            &mut ctx.stdout,
            &format!(
                "Letting namespace(s) {} of Connection {name} go: the konnector deletes these objects' copies on the provider:\n{listing}\
                 On this cluster:\n{}The Connection and its other namespaces stay; then the Grant{} stops covering {}.\n",
                args.namespaces.join(","),
                table(&["KIND", "NAMESPACE", "NAME"], here),
                self.grant.map(|g| format!(" {g}")).unwrap_or_default(),
                args.namespaces.join(",")
            ),
        )?;
        confirm(
            &format!(
                "Let namespace(s) {} of Connection {name} go?",
                args.namespaces.join(",")
            ),
            args.yes,
            ctx,
        )?;
        let mut awaited = Vec::new();
        for binding in &going {
            consumer::delete(client, "Binding", binding.namespace.as_deref(), &binding.name).await?;
            awaited.push(Awaited {
                kind: "Binding".into(),
                namespace: binding.namespace.clone(),
                name: binding.name.clone(),
            });
        }
        // The drain needs the namespaces covered: the Grant narrows only once they are gone.
        let mut reporter = Reporter::new(&mut *ctx.stderr, ctx.interactive);
        consumer::wait_gone(client, &awaited, args.timeout, &mut reporter).await?;
        drop(reporter);
        self.forget_namespaces(client, &args.namespaces).await?;
        emit(
            &mut ctx.stdout,
            &format!(
                "Namespace(s) {} of Connection {name} let go.\n",
                args.namespaces.join(",")
            ),
        )?;
        let Some(grant) = self.grant else {
            return Ok(());
        };
        let session = match session(gateway, ctx) {
            Ok(session) => session,
            Err(CliError::Unauthorized(_)) => {
                return emit(
                    &mut ctx.stdout,
                    &format!(
                        "Not logged in: Grant {grant} still covers {} until you log in and run this again, or revoke it.\n",
                        args.namespaces.join(",")
                    ),
                );
            }
            Err(e) => return Err(e),
        };
        if self.issued_by != Some(origin::of_url(session.base())?.as_str()) {
            return emit(
                &mut ctx.stdout,
                &format!(
                    "Grant {grant} was not issued through {}: it still covers {} there (log in to its gateway and run this again).\n",
                    session.base(),
                    args.namespaces.join(",")
                ),
            );
        }
        for ns in &args.namespaces {
            session.drop_namespace(grant, ns).await?;
        }
        emit(
            &mut ctx.stdout,
            &format!(
                "Grant {grant} no longer covers {} at {}.\n",
                args.namespaces.join(","),
                session.base()
            ),
        )
    }

    /// Takes `namespaces` off the Connection's `binding-namespaces` annotation, so the konnector
    /// refuses a Binding there from now on.
    async fn forget_namespaces(&self, client: &kbind_cluster::KubeClusterClient, namespaces: &[String]) -> Result<()> {
        let name = self.connection["metadata"]["name"].as_str().unwrap_or_default();
        let Some(allowed) = self.connection["metadata"]["annotations"][annotation::BINDING_NAMESPACES].as_str() else {
            return Ok(());
        };
        if allowed == kbind_api::consts::BINDING_NAMESPACES_ALL {
            return Ok(());
        }
        let kept: Vec<&str> = allowed
            .split(',')
            .map(str::trim)
            .filter(|ns| !ns.is_empty() && !namespaces.iter().any(|n| n == ns))
            .collect();
        let patch = json!({"metadata": {"annotations": {annotation::BINDING_NAMESPACES: kept.join(",")}}});
        client
            .patch(
                &consumer::resource_of("Connection"),
                None,
                name,
                &Patch::Merge(patch),
                &PatchParams::default(),
            )
            .await
            .map_err(|e| consumer_error(&format!("cannot update Connection {name}"), e))?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(condition: Value) -> Value {
        json!({"status": {"conditions": [condition]}})
    }

    #[test]
    fn a_refused_credential_is_recognised_in_old_and_new_conditions() {
        let new = with(json!({"type": "Connected", "status": "False", "reason": "Unauthorized",
            "message": "the provider refuses the credentials (HTTP 401)"}));
        assert!(credential_refused(&new).is_some_and(|w| w.contains("Unauthorized")));
        let old = with(
            json!({"type": "PermissionDenied", "status": "True", "reason": "Forbidden",
            "message": "the provider did not accept the credentials (401 Unauthorized)"}),
        );
        assert!(credential_refused(&old).is_some());
        let fine = with(json!({"type": "Connected", "status": "True", "reason": "AsExpected", "message": ""}));
        assert!(credential_refused(&fine).is_none());
        let unreachable = with(
            json!({"type": "Connected", "status": "False", "reason": "ProviderUnreachable",
            "message": "the provider cannot be reached"}),
        );
        assert!(credential_refused(&unreachable).is_none());
    }
}
