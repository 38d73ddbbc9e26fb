//! Reaping one stale consumer: plan what goes (its Grants; with `--reap-objects` also its synced
//! provider objects and the claimed namespaces nobody else of its identity uses), then delete it
//! in an order that a crash can resume from: objects, namespaces, and the Grants last, because
//! the Grants are how a later sweep finds the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{annotation, backend};
use kbind_api::{Export, Grant};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, DynamicObject, ListParams, from_dynamic,
};
use kube::api::Preconditions;

use super::Error;

/// What the reaper deletes for a stale consumer.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// A Grant of the consumer; deleting it makes the issuer revoke.
    Grant {
        /// The Grant's name.
        name: String,
    },
    /// A provider object of an Export API synced by the consumer (`--reap-objects`).
    Object {
        /// `<plural>.<group>` of the object's API.
        api: String,
        /// Its namespace; `None` for a cluster-scoped object.
        namespace: Option<String>,
        /// Its name.
        name: String,
    },
    /// A namespace kbind created and claimed for the consumer's identity, used by no remaining
    /// Grant of that identity (`--reap-objects`).
    Namespace {
        /// The namespace.
        name: String,
    },
}

impl Target {
    /// The metric label of its kind.
    pub(crate) fn kind(&self) -> &'static str {
        match self {
            Target::Grant { .. } => "grant",
            Target::Object { .. } => "object",
            Target::Namespace { .. } => "namespace",
        }
    }
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Grant { name } => write!(f, "Grant {name}"),
            Target::Object {
                api,
                namespace: Some(ns),
                name,
            } => write!(f, "{api} {ns}/{name}"),
            Target::Object {
                api,
                namespace: None,
                name,
            } => write!(f, "{api} {name}"),
            Target::Namespace { name } => write!(f, "Namespace {name}"),
        }
    }
}

/// One deletion the reaper made or, in report-only mode, would make.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Action {
    /// The stale consumer's cluster UID.
    pub consumer: String,
    /// What is deleted.
    pub target: Target,
    /// `false` in report-only mode: listed, not deleted.
    pub performed: bool,
}

impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let verb = if self.performed { "deleted" } else { "would delete" };
        write!(f, "{verb} {} of consumer {}", self.target, self.consumer)
    }
}

/// A planned deletion: the target, how to reach it, and the UID it must still have.
pub(crate) struct Planned {
    target: Target,
    res: ApiResource,
    namespace: Option<String>,
    name: String,
    uid: Option<String>,
}

/// The resource of `Grant`.
fn grants() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

fn namespaces() -> ApiResource {
    ApiResource::erase::<k8s_openapi::api::core::v1::Namespace>(&())
}

/// Every object of `res` (paged), optionally by label selector.
async fn list_all(
    client: &dyn ClusterClient,
    res: &ApiResource,
    label_selector: Option<String>,
) -> Result<Vec<DynamicObject>, kbind_cluster::Error> {
    let mut out = Vec::new();
    let mut continue_token = None;
    loop {
        let params = ListParams {
            label_selector: label_selector.clone(),
            limit: Some(500),
            continue_token: continue_token.take(),
            ..ListParams::default()
        };
        let page = client.list(res, None, &params).await?;
        out.extend(page.items);
        match page.metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => continue_token = Some(token),
            None => return Ok(out),
        }
    }
}

fn read_failed(what: impl Into<String>) -> impl FnOnce(kbind_cluster::Error) -> Error {
    let what = what.into();
    move |source| Error::ReadFailed { what, source }
}

/// The Grants labelled with `consumer`, decoded; undecodable ones are skipped (their schema
/// makes them impossible on a real server).
async fn grants_of(client: &dyn ClusterClient, consumer: &str) -> Result<Vec<Grant>, Error> {
    let selector = format!("{}={consumer}", backend::LABEL_CONSUMER_CLUSTER_UID);
    let listed = list_all(client, &grants(), Some(selector))
        .await
        .map_err(read_failed(format!("the Grants of consumer {consumer}")))?;
    Ok(listed.into_iter().filter_map(|o| from_dynamic(o).ok()).collect())
}

fn terminating(grant: &Grant) -> bool {
    grant.metadata.deletion_timestamp.is_some()
}

/// Plans what goes for `consumer`: its Grants, and with `objects` its synced objects and
/// namespaces.
pub(crate) async fn plan(client: &dyn ClusterClient, consumer: &str, objects: bool) -> Result<Vec<Planned>, Error> {
    let mine = grants_of(client, consumer).await?;
    let mut planned = Vec::new();
    if objects {
        planned.extend(plan_objects(client, consumer, &mine).await?);
        planned.extend(plan_namespaces(client, consumer, &mine).await?);
    }
    for grant in mine.iter().filter(|g| !terminating(g)) {
        let Some(name) = grant.metadata.name.clone() else {
            continue;
        };
        planned.push(Planned {
            target: Target::Grant { name: name.clone() },
            res: grants(),
            namespace: None,
            name,
            uid: grant.metadata.uid.clone(),
        });
    }
    Ok(planned)
}

/// The objects of the consumer's Export APIs that carry its consumer-cluster-uid annotation.
async fn plan_objects(client: &dyn ClusterClient, consumer: &str, mine: &[Grant]) -> Result<Vec<Planned>, Error> {
    let exports: BTreeSet<&str> = mine.iter().map(|g| g.spec.export.as_str()).collect();
    let mut apis = BTreeSet::new();
    for export in exports {
        let found: Option<Export> = client
            .get_typed_opt(None, export)
            .await
            .map_err(read_failed(format!("Export {export}")))?;
        // An Export deleted since: its APIs are unknown, nothing of it is reaped.
        if let Some(found) = found {
            apis.extend(found.spec.apis.into_iter().map(|a| a.name));
        }
    }
    let mut planned = Vec::new();
    for api in apis {
        let Some(res) = resource_of(client, &api).await? else {
            continue;
        };
        let listed = list_all(client, &res, None)
            .await
            .map_err(read_failed(format!("the objects of {api}")))?;
        for object in listed {
            let ours = object
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(annotation::CONSUMER_CLUSTER_UID))
                .is_some_and(|uid| uid == consumer);
            if !ours || object.metadata.deletion_timestamp.is_some() {
                continue;
            }
            let Some(name) = object.metadata.name.clone() else {
                continue;
            };
            let namespace = object.metadata.namespace.clone();
            planned.push(Planned {
                target: Target::Object {
                    api: api.clone(),
                    namespace: namespace.clone(),
                    name: name.clone(),
                },
                res: res.clone(),
                namespace,
                name,
                uid: object.metadata.uid.clone(),
            });
        }
    }
    Ok(planned)
}

/// The served resource of the CRD `api` (`<plural>.<group>`) at its storage version; `None`
/// when the CRD is gone.
async fn resource_of(client: &dyn ClusterClient, api: &str) -> Result<Option<ApiResource>, Error> {
    let crd: Option<CustomResourceDefinition> = client
        .get_typed_opt(None, api)
        .await
        .map_err(read_failed(format!("CRD {api}")))?;
    let Some(crd) = crd else { return Ok(None) };
    let versions = &crd.spec.versions;
    let Some(version) = versions
        .iter()
        .find(|v| v.storage && v.served)
        .or_else(|| versions.iter().find(|v| v.served))
    else {
        return Ok(None);
    };
    let group = crd.spec.group.clone();
    Ok(Some(ApiResource {
        api_version: format!("{group}/{}", version.name),
        group,
        version: version.name.clone(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    }))
}

/// The namespaces claimed for the consumer's identities that kbind created and that no
/// remaining Grant of the same identity uses. A Grant being deleted is not remaining: its
/// consumer loses access anyway.
async fn plan_namespaces(client: &dyn ClusterClient, consumer: &str, mine: &[Grant]) -> Result<Vec<Planned>, Error> {
    let mut wanted: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for grant in mine {
        let issued = grant.status.as_ref().and_then(|s| s.issued.as_ref());
        let names = grant
            .spec
            .namespaces
            .iter()
            .chain(issued.map(|i| i.namespaces.iter()).into_iter().flatten());
        for ns in names {
            wanted
                .entry(ns.clone())
                .or_default()
                .insert(grant.spec.identity.subject.clone());
        }
    }
    if wanted.is_empty() {
        return Ok(Vec::new());
    }
    let all = list_all(client, &grants(), None)
        .await
        .map_err(read_failed("the Grants"))?;
    let remaining: Vec<Grant> = all
        .into_iter()
        .filter_map(|o| from_dynamic::<Grant>(o).ok())
        .filter(|g| g.spec.consumer_cluster_uid != consumer && !terminating(g))
        .collect();
    let mut planned = Vec::new();
    for (ns, subjects) in wanted {
        let used = remaining.iter().any(|g| {
            subjects.contains(&g.spec.identity.subject)
                && (g.spec.namespaces.contains(&ns)
                    || g.status
                        .as_ref()
                        .and_then(|s| s.issued.as_ref())
                        .is_some_and(|i| i.namespaces.contains(&ns)))
        });
        if used {
            continue;
        }
        let Some(found) = client
            .get_opt(&namespaces(), None, &ns)
            .await
            .map_err(read_failed(format!("Namespace {ns}")))?
        else {
            continue;
        };
        let created_by_kbind = found
            .metadata
            .labels
            .as_ref()
            .and_then(|l| l.get("app.kubernetes.io/managed-by"))
            .is_some_and(|v| v == backend::MANAGED_BY);
        let claimed_by = found
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(backend::ANNOTATION_CLAIMED_BY));
        let claimed_by_this_identity = claimed_by.is_some_and(|s| subjects.contains(s));
        if !created_by_kbind || !claimed_by_this_identity || found.metadata.deletion_timestamp.is_some() {
            continue;
        }
        planned.push(Planned {
            target: Target::Namespace { name: ns.clone() },
            res: namespaces(),
            namespace: None,
            name: ns,
            uid: found.metadata.uid.clone(),
        });
    }
    Ok(planned)
}

/// Deletes what was planned, in order; returns the targets actually deleted. An object gone
/// meanwhile, or replaced by another of the same name (its UID differs), is skipped.
pub(crate) async fn execute(client: &dyn ClusterClient, planned: Vec<Planned>) -> Result<Vec<Target>, Error> {
    let mut deleted = Vec::new();
    for p in planned {
        let params = DeleteParams {
            preconditions: p.uid.clone().map(|uid| Preconditions {
                uid: Some(uid),
                resource_version: None,
            }),
            ..DeleteParams::background()
        };
        match client.delete(&p.res, p.namespace.as_deref(), &p.name, &params).await {
            Ok(_) => deleted.push(p.target),
            Err(e) if e.is_not_found() || e.is_conflict() => {
                tracing::debug!(target = %p.target, error = %e, "reaper: skipped, gone or replaced");
            }
            Err(source) => {
                return Err(Error::DeleteFailed {
                    what: p.target.to_string(),
                    source,
                });
            }
        }
    }
    Ok(deleted)
}

impl Planned {
    /// The target, for report-only mode.
    pub(crate) fn into_target(self) -> Target {
        self.target
    }
}
