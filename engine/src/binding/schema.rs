//! Delivering one bound API's schema to the consumer (contract §4 "schema"): choose the source,
//! pull the provider CRD or synthesize one from OpenAPI, write it under the Connection's
//! policies, and say which GVR a syncer can run on once the consumer serves it.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::consts::{annotation, reason};
use kbind_api::{Connection, ExportedApi, PullPolicy, SchemaSource};
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt, DynamicObject, Error, from_dynamic};

use crate::crdpull::{self, CrdOutcome, crd_resource};
use crate::openapi;
use crate::provider::EngagedProvider;

/// What the consumer can serve for one bound API.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Delivery {
    /// The consumer CRD serves the API: a syncer can run on `resource`.
    Serving(Served),
    /// The API cannot be served through this binding: a per-API condition says why.
    Refused {
        /// The per-API condition's reason.
        reason: &'static str,
        /// What to do about it.
        message: String,
    },
    /// Not yet (CRD being established, schema not readable yet): retried.
    Waiting(String),
}

/// A served API: the GVR the syncer uses and what the binding's status reports.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Served {
    /// Group, storage version, kind and plural of the consumer CRD.
    pub resource: ApiResource,
    /// Whether instances are namespaced.
    pub namespaced: bool,
    /// Whether the served version has a status subresource.
    pub status_subresource: bool,
    /// The consumer CRD's schema hash.
    pub crd_hash: Option<String>,
    /// A provider schema change held back (`SchemaUpdateBlocked`); syncing goes on meanwhile.
    pub blocked: Option<String>,
}

/// The source in use for `conn`: its spec, or for `Auto` what discovery resolved.
fn source_of(conn: &Connection) -> SchemaSource {
    match conn.spec.schema.source {
        SchemaSource::Auto => conn
            .status
            .as_ref()
            .and_then(|s| s.active_schema_source)
            .filter(|s| *s != SchemaSource::Auto)
            .unwrap_or(SchemaSource::Crd),
        other => other,
    }
}

/// Whether `conn` pulls its consumer CRDs from provider CRDs (whose watches then wake the
/// bindings on a schema change).
pub(crate) fn pulls_crd(conn: &Connection) -> bool {
    conn.spec.schema.pull_policy != PullPolicy::None && source_of(conn) != SchemaSource::OpenApi
}

/// The consumer CRD `conn` wants for `api`, built from the provider.
async fn desired_crd(
    conn: &Connection,
    api: &ExportedApi,
    provider: &EngagedProvider,
) -> Result<Result<CustomResourceDefinition, Delivery>, Error> {
    let connection = conn.metadata.name.clone().unwrap_or_default();
    match source_of(conn) {
        SchemaSource::OpenApi => {
            let discovery = provider.reader.discovery().await?;
            let Some(found) = discovery.find(&api.group, &api.resource) else {
                return Ok(Err(Delivery::Waiting(format!(
                    "the provider's discovery does not list {}",
                    api.name
                ))));
            };
            let version = found.api_resource().version;
            let doc = provider.reader.openapi_v3(&api.group, &version).await?;
            Ok(openapi::crd_from_openapi(found, &doc, &connection).map_err(|e| {
                if e.is_over_budget() {
                    Delivery::Refused {
                        reason: reason::SCHEMA_TOO_COMPLEX,
                        message: format!("the provider's OpenAPI schema of {}: {e}", api.name),
                    }
                } else {
                    Delivery::Waiting(e.to_string())
                }
            }))
        }
        SchemaSource::Crd | SchemaSource::Auto => {
            // The CRD's own watch keeps it current (and its changes trigger the bindings), so
            // a pass reads it from there; only until that watch has listed, or when the
            // credentials may not watch it, is it read from the provider.
            let (cached, _) = provider.cache.subscribe_named(&crd_resource(), &api.name);
            let crd = match cached.is_synced().then(|| cached.get(None, &api.name)).flatten() {
                Some(crd) => (*crd).clone(),
                None => provider.reader.get(&crd_resource(), None, &api.name).await?,
            };
            let crd: CustomResourceDefinition = from_dynamic(crd)?;
            Ok(crdpull::consumer_crd_from_provider(&crd, &connection).map_err(|e| Delivery::Waiting(e.to_string())))
        }
    }
}

/// Writes (or, with pullPolicy `None`, only reads) the consumer CRD of `api` and says whether
/// a syncer can run on it. `binds(c)` says whether Connection `c` has a live binding of `api`:
/// while the Connection that pulled the CRD does, this one serves its own namespaces beside it
/// on that CRD (when its provider's schema fits it) and writes nothing; once it does not, this
/// Connection takes the CRD over (its annotation names this one) and its schema policies apply.
pub(crate) async fn deliver(
    consumer: &dyn ClusterClient,
    conn: &Connection,
    api: &ExportedApi,
    provider: &EngagedProvider,
    binds: &(dyn Fn(&str) -> bool + Send + Sync),
) -> Result<Delivery, Error> {
    let connection = conn.metadata.name.clone().unwrap_or_default();
    let mut blocked = None;
    let mut held = None;
    if conn.spec.schema.pull_policy != PullPolicy::None {
        let desired = match desired_crd(conn, api, provider).await? {
            Ok(crd) => crd,
            Err(not_yet_or_refused) => return Ok(not_yet_or_refused),
        };
        let policy = conn.spec.schema.update_policy;
        let (mut outcome, mut crd) = crdpull::ensure_and_keep(consumer, desired.clone(), policy).await?;
        if let CrdOutcome::OtherConnection(other) = &outcome {
            if !other.is_empty() && binds(other) {
                return Ok(beside(crd, &desired, &api.name, other, &connection));
            }
            // The Connection that pulled it serves it no more: this one takes the CRD over.
            match record_crd_connection(consumer, crd, &connection).await? {
                Some(_) => (outcome, crd) = crdpull::ensure_and_keep(consumer, desired, policy).await?,
                None => {
                    return Ok(Delivery::Waiting(format!(
                        "CustomResourceDefinition {} changed while Connection {connection} claimed it; looking again",
                        api.name
                    )));
                }
            }
        }
        held = Some(crd);
        match outcome {
            CrdOutcome::Created | CrdOutcome::Updated | CrdOutcome::Unchanged | CrdOutcome::Held => {}
            CrdOutcome::Blocked(message) => blocked = Some(message),
            CrdOutcome::NotManaged => {
                return Ok(Delivery::Refused {
                    reason: reason::CRD_NOT_MANAGED,
                    message: format!(
                        "CustomResourceDefinition {} exists on this cluster and kbind did not create it; \
                         it is never overwritten. Delete it, or set the Connection's schema.pullPolicy to None to use it",
                        api.name
                    ),
                });
            }
            CrdOutcome::OtherConnection(other) => return Ok(another_connection(&api.name, &other)),
        }
    }
    // The pull above just read or wrote the CRD: reading it again would double every
    // binding pass's requests for nothing.
    let raw = match held {
        Some(crd) => Some(crd),
        None => consumer.get_opt(&crd_resource(), None, &api.name).await?,
    };
    let Some(raw) = raw else {
        return Ok(Delivery::Waiting(format!(
            "schema.pullPolicy is None: install CustomResourceDefinition {} on this cluster",
            api.name
        )));
    };
    let mut crd: CustomResourceDefinition = from_dynamic(raw.clone())?;
    let named = annotation_of(&crd, annotation::CONNECTION);
    if conn.spec.schema.pull_policy == PullPolicy::None && named != Some(connection.as_str()) {
        if let Some(other) = named
            && crd_connection_exists(consumer, other).await?
        {
            // Several Connections serve one user CRD by namespace: the annotation keeps naming the first.
            if binds(other) {
                return Ok(served(&crd, blocked));
            }
            return Ok(another_connection(&api.name, other));
        }
        match record_crd_connection(consumer, raw, &connection).await? {
            Some(recorded) => crd = recorded,
            None => {
                return Ok(Delivery::Waiting(format!(
                    "CustomResourceDefinition {} changed while Connection {connection} claimed it; looking again",
                    api.name
                )));
            }
        }
    }
    Ok(served(&crd, blocked))
}

/// Whether the Connection a CRD's annotation names still exists (the annotation outlives
/// nothing else: once that Connection is gone another may take the API over).
async fn crd_connection_exists(consumer: &dyn ClusterClient, connection: &str) -> Result<bool, Error> {
    let res = kbind_cluster::ApiResource::erase::<Connection>(&());
    Ok(consumer.get_opt(&res, None, connection).await?.is_some())
}

/// Records that `connection` serves a CRD kbind did not create (`pullPolicy: None`): the
/// `core.kbind.io/connection` annotation, added to the object exactly as read and written back
/// with a replace that must find the resourceVersion that was read (the konnector's RBAC
/// updates CRDs, it does not patch them), so of two Connections racing exactly one records
/// itself and the other reads the annotation. Nothing but that annotation changes. `None` when the CRD
/// changed since the read.
async fn record_crd_connection(
    consumer: &dyn ClusterClient,
    mut raw: DynamicObject,
    connection: &str,
) -> Result<Option<CustomResourceDefinition>, Error> {
    let name = raw.metadata.name.clone().unwrap_or_default();
    if raw.metadata.deletion_timestamp.is_some() {
        return Ok(None);
    }
    raw.metadata
        .annotations
        .get_or_insert_with(Default::default)
        .insert(annotation::CONNECTION.to_string(), connection.to_string());
    let params = kbind_cluster::PostParams {
        field_manager: Some(kbind_api::consts::field_manager::KONNECTOR.to_string()),
        ..Default::default()
    };
    match consumer.replace(&crd_resource(), None, &name, &raw, &params).await {
        Ok(recorded) => {
            tracing::info!(crd = %name, connection, "claimed the CustomResourceDefinition for this Connection");
            from_dynamic(recorded).map(Some)
        }
        Err(e) if e.is_conflict() || e.is_not_found() => Ok(None),
        Err(e) => Err(e),
    }
}

/// Serving `api` beside Connection `other`, which pulled the consumer CRD `existing`: only when
/// this provider's schema (`ours`) holds every field of it in the same storage version and scope
/// (contract §4): objects written through either provider then keep all their fields.
fn beside(
    existing: DynamicObject,
    ours: &CustomResourceDefinition,
    api: &str,
    other: &str,
    connection: &str,
) -> Delivery {
    let existing: CustomResourceDefinition = match from_dynamic(existing) {
        Ok(crd) => crd,
        Err(e) => return Delivery::Waiting(format!("the consumer CRD of {api} cannot be read: {e}")),
    };
    match crdpull::classify_update(&existing, ours) {
        crdpull::UpdateKind::Unchanged | crdpull::UpdateKind::Compatible => served(&existing, None),
        crdpull::UpdateKind::Destructive(what) => Delivery::Refused {
            reason: reason::INCOMPATIBLE_SCHEMA,
            message: format!(
                "the consumer CRD of {api} was pulled through Connection {other:?}; the schema of Connection \
                 {connection:?}'s provider does not fit it ({what}), so nothing is synced through {connection:?}. \
                 Make the two providers' schemas agree, or bind {api} through {other:?}"
            ),
        },
    }
}

fn another_connection(api: &str, other: &str) -> Delivery {
    Delivery::Refused {
        reason: reason::BOUND_THROUGH_ANOTHER_CONNECTION,
        message: format!("{api} is served on this cluster through Connection {other:?}; nothing is synced here"),
    }
}

fn annotation_of<'a>(crd: &'a CustomResourceDefinition, key: &str) -> Option<&'a str> {
    crd.metadata.annotations.as_ref()?.get(key).map(String::as_str)
}

/// The GVR a syncer runs on, once the CRD is Established.
fn served(crd: &CustomResourceDefinition, blocked: Option<String>) -> Delivery {
    let established = crd
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|c| c.iter().any(|c| c.type_ == "Established" && c.status == "True"));
    let name = crd.metadata.name.clone().unwrap_or_default();
    if !established {
        return Delivery::Waiting(format!("CustomResourceDefinition {name} is not Established yet"));
    }
    let Some((resource, namespaced, status_subresource)) = resource_of(crd) else {
        return Delivery::Waiting(format!("CustomResourceDefinition {name} has no storage version"));
    };
    Delivery::Serving(Served {
        resource,
        namespaced,
        status_subresource,
        crd_hash: annotation_of(crd, annotation::SCHEMA_HASH).map(str::to_string),
        blocked,
    })
}

/// The GVR of `crd`'s storage version, whether it is namespaced, and whether that version has a
/// status subresource.
pub(crate) fn resource_of(crd: &CustomResourceDefinition) -> Option<(ApiResource, bool, bool)> {
    let version = crd.spec.versions.iter().find(|v| v.storage)?;
    let group = crd.spec.group.clone();
    let resource = ApiResource {
        api_version: if group.is_empty() {
            version.name.clone()
        } else {
            format!("{group}/{}", version.name)
        },
        group,
        version: version.name.clone(),
        kind: crd.spec.names.kind.clone(),
        plural: crd.spec.names.plural.clone(),
    };
    let status = version.subresources.as_ref().is_some_and(|s| s.status.is_some());
    Some((resource, crd.spec.scope == "Namespaced", status))
}

/// The consumer CRD of `api`, whichever Connection pulled it: several Connections may serve
/// one API (each its own namespaces), and which objects a binding may touch is told by their
/// `core.kbind.io/connection` label, not by the CRD.
pub(crate) async fn consumer_crd(
    consumer: &dyn ClusterClient,
    api: &str,
) -> Result<Option<CustomResourceDefinition>, Error> {
    let Some(crd) = consumer.get_opt(&crd_resource(), None, api).await? else {
        return Ok(None);
    };
    from_dynamic(crd).map(Some)
}

/// Whether `crd` was pulled (or taken over) through Connection `connection`, so its unlabelled
/// instances (synced before objects carried their Connection's label) are that Connection's.
pub(crate) fn pulled_through(crd: &CustomResourceDefinition, connection: &str) -> bool {
    annotation_of(crd, annotation::CONNECTION).is_none_or(|c| c == connection)
}
