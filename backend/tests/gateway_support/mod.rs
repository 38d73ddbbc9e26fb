//! Doubles for the gateway's tests: a bearer/session authenticator, an issuer whose credential
//! is a fixed string, and a Grant controller that provisions like the real issuer's will
//! (finalizer, namespace claims, a ServiceAccount, `status.issued`, `observedGeneration`,
//! `Ready`), over any `ClusterClient` — fakeapi in process or a real kube-apiserver.
#![allow(dead_code)]

use std::collections::BTreeSet;
use std::sync::Arc;

use async_trait::async_trait;
use futures::StreamExt;
use k8s_openapi::api::core::v1::{Namespace, ServiceAccount};
use kbind_api::consts::backend::{ANNOTATION_CLAIMED_BY, ISSUER_FINALIZER, LABEL_CLAIMED_BY, LABEL_GRANT, MANAGED_BY};
use kbind_api::service::AuthMethod;
use kbind_api::{Export, Grant, Issued};
use kbind_backend::auth::{AuthError, Authenticator, Caller, Identity, Via};
use kbind_backend::issuer::{Credential, IssueError, Issuer};
use kbind_cluster::watcher::{BackoffPolicy, WatchStreamExt, WatcherConfig, watcher};
use kbind_cluster::{
    ApiResource, ClusterClient, ClusterClientExt, DeleteParams, Patch, PatchParams, SharedClock, from_dynamic,
    to_dynamic,
};
use parking_lot::Mutex;
use serde_json::json;

/// The namespace the double puts ServiceAccounts in (the real issuer's default).
pub mod world;

pub const GRANTS_NAMESPACE: &str = "kbind-grants";
/// The CA every test config carries.
pub const TEST_CA: &str = "-----BEGIN CERTIFICATE-----\nMIIBdGVzdC1jYQ==\n-----END CERTIFICATE-----\n";

/// Bearer tokens `<name>-token` for `token:<name>`; a `cookie: session=<name>` is a browser
/// session of `token:<name>` whose CSRF token is `csrf-<name>`.
pub struct TestAuth {
    pub users: Vec<&'static str>,
}

#[async_trait]
impl Authenticator for TestAuth {
    fn method(&self) -> AuthMethod {
        AuthMethod {
            kind: "token".into(),
            login_path: None,
            ..Default::default()
        }
    }

    async fn authenticate(&self, headers: &http::HeaderMap) -> Result<Option<Caller>, AuthError> {
        let identity = |name: &str| Identity {
            subject: format!("token:{name}"),
            name: Some(name.to_string()),
        };
        if let Some(auth) = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok()) {
            let token = auth.strip_prefix("Bearer ").unwrap_or_default();
            return match self.users.iter().find(|u| format!("{u}-token") == token) {
                Some(user) => Ok(Some(Caller {
                    identity: identity(user),
                    via: Via::Bearer,
                })),
                None => Err(AuthError::Unauthenticated("unknown bearer token".into())),
            };
        }
        if let Some(cookie) = headers.get(http::header::COOKIE).and_then(|v| v.to_str().ok())
            && let Some(user) = cookie.strip_prefix("session=")
            && let Some(user) = self.users.iter().find(|u| **u == user)
        {
            return Ok(Some(Caller {
                identity: identity(user),
                via: Via::Session {
                    csrf_token: format!("csrf-{user}"),
                },
            }));
        }
        Ok(None)
    }
}

/// An issuer whose credential is `token-for-<grant>`; `refusal` makes `check_provider` refuse.
#[derive(Default)]
pub struct TestIssuer {
    pub refusal: Option<String>,
    pub fail_credentials: std::sync::atomic::AtomicBool,
}

#[async_trait]
impl Issuer for TestIssuer {
    fn name(&self) -> &str {
        "test"
    }

    async fn check_provider(&self) -> Result<(), IssueError> {
        match &self.refusal {
            Some(why) => Err(IssueError::UnsupportedProvider(why.clone())),
            None => Ok(()),
        }
    }

    async fn provision(&self, _grant: &Grant, _export: &Export) -> Result<Issued, IssueError> {
        Err(IssueError::UnsupportedProvider(
            "the test issuer provisions through its controller double".into(),
        ))
    }

    async fn credential(&self, grant: &Grant) -> Result<Credential, IssueError> {
        if self.fail_credentials.load(std::sync::atomic::Ordering::SeqCst) {
            return Err(IssueError::Cluster(kbind_cluster::Error::Transport(
                "token request failed".into(),
            )));
        }
        Ok(Credential {
            token: format!("token-for-{}", grant.metadata.name.clone().unwrap_or_default()),
            expires_at: None,
        })
    }

    async fn revoke(&self, _grant: &Grant) -> Result<(), IssueError> {
        Ok(())
    }
}

/// Namespaces the controller double treats as claimed by someone else when it provisions (to
/// exercise a refusal the gateway's pre-check did not see).
pub type ClaimedElsewhere = Arc<Mutex<BTreeSet<String>>>;

/// Runs the Grant controller double until dropped.
pub struct Controller {
    task: tokio::task::JoinHandle<()>,
    pub claimed_elsewhere: ClaimedElsewhere,
}

impl Drop for Controller {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn grant_res() -> ApiResource {
    ApiResource::erase::<Grant>(&())
}

/// Starts the controller double on `client` (which must be allowed everything it does).
pub fn spawn_controller(client: Arc<dyn ClusterClient>, clock: SharedClock) -> Controller {
    let claimed_elsewhere: ClaimedElsewhere = Arc::default();
    let claimed = claimed_elsewhere.clone();
    let task = tokio::spawn(async move {
        let config = WatcherConfig::default().backoff(BackoffPolicy::Exponential {
            initial: std::time::Duration::from_millis(50),
            max: std::time::Duration::from_secs(1),
            factor: 2.0,
        });
        let mut grants = std::pin::pin!(watcher(client.clone(), grant_res(), None, config).touched_objects());
        while let Some(event) = grants.next().await {
            let Ok(object) = event else { continue };
            let Some(name) = object.metadata.name.clone() else {
                continue;
            };
            for _ in 0..5 {
                match reconcile(client.as_ref(), &name, &claimed, &clock).await {
                    Ok(()) => break,
                    Err(e) if e.is_conflict() => continue,
                    Err(e) => {
                        eprintln!("controller double: {name}: {e}");
                        break;
                    }
                }
            }
        }
    });
    Controller {
        task,
        claimed_elsewhere,
    }
}

async fn reconcile(
    client: &dyn ClusterClient,
    name: &str,
    claimed_elsewhere: &ClaimedElsewhere,
    clock: &SharedClock,
) -> Result<(), kbind_cluster::Error> {
    let Some(grant) = client.get_typed_opt::<Grant>(None, name).await? else {
        return Ok(());
    };
    let finalizers = grant.metadata.finalizers.clone().unwrap_or_default();
    let sa_res = ApiResource::erase::<ServiceAccount>(&());
    if grant.metadata.deletion_timestamp.is_some() {
        match client
            .delete(&sa_res, Some(GRANTS_NAMESPACE), name, &DeleteParams::default())
            .await
        {
            Ok(_) => {}
            Err(e) if e.is_not_found() => {}
            Err(e) => return Err(e),
        }
        if finalizers.iter().any(|f| f == ISSUER_FINALIZER) {
            let rest: Vec<&String> = finalizers.iter().filter(|f| *f != ISSUER_FINALIZER).collect();
            let patch = json!({"metadata": {"finalizers": rest, "resourceVersion": grant.metadata.resource_version}});
            client
                .patch(&grant_res(), None, name, &Patch::Merge(patch), &PatchParams::default())
                .await?;
        }
        return Ok(());
    }
    let status = grant.status.clone().unwrap_or_default();
    if status.observed_generation == grant.metadata.generation && !status.conditions.is_empty() {
        return Ok(());
    }
    if !finalizers.iter().any(|f| f == ISSUER_FINALIZER) {
        let mut all = finalizers.clone();
        all.push(ISSUER_FINALIZER.to_string());
        let patch = json!({"metadata": {"finalizers": all, "resourceVersion": grant.metadata.resource_version}});
        client
            .patch(&grant_res(), None, name, &Patch::Merge(patch), &PatchParams::default())
            .await?;
    }
    let now = kbind_cluster::clock::format_time(clock.now());
    let subject = &grant.spec.identity.subject;
    let ns_res = ApiResource::erase::<Namespace>(&());
    let mut refusal = None;
    for namespace in &grant.spec.namespaces {
        let elsewhere = claimed_elsewhere.lock().contains(namespace);
        if elsewhere {
            refusal = Some((
                "NamespaceNotAvailable",
                format!("namespace {namespace:?} is claimed by another identity"),
            ));
            break;
        }
        match client.get_typed_opt::<Namespace>(None, namespace).await? {
            Some(ns) => {
                let owner = ns
                    .metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(ANNOTATION_CLAIMED_BY));
                if owner != Some(subject) {
                    refusal = Some(("NamespaceNotAvailable", format!("namespace {namespace:?} is not yours")));
                    break;
                }
            }
            None => {
                let ns = json!({
                    "apiVersion": "v1", "kind": "Namespace",
                    "metadata": {
                        "name": namespace,
                        "labels": {"app.kubernetes.io/managed-by": MANAGED_BY, LABEL_CLAIMED_BY: kbind_backend::issuer::claims::claimed_by_value(subject)},
                        "annotations": {ANNOTATION_CLAIMED_BY: subject},
                    },
                });
                client
                    .create(
                        &ns_res,
                        None,
                        &serde_json::from_value(ns).map_err(|e| kbind_cluster::Error::Decode(e.to_string()))?,
                        &Default::default(),
                    )
                    .await?;
            }
        }
    }
    let generation = grant.metadata.generation;
    let patch = match refusal {
        Some((reason, message)) => json!({"status": {
            "observedGeneration": generation,
            "conditions": [{"type": "Ready", "status": "False", "reason": reason, "message": message, "lastTransitionTime": now}],
        }}),
        None => {
            let sa = ServiceAccount {
                metadata: kube::api::ObjectMeta {
                    name: Some(name.to_string()),
                    namespace: Some(GRANTS_NAMESPACE.to_string()),
                    labels: Some([(LABEL_GRANT.to_string(), name.to_string())].into()),
                    ..Default::default()
                },
                ..Default::default()
            };
            match client
                .create(&sa_res, Some(GRANTS_NAMESPACE), &to_dynamic(&sa)?, &Default::default())
                .await
            {
                Ok(_) | Err(kbind_cluster::Error::AlreadyExists { .. }) => {}
                Err(e) => return Err(e),
            }
            json!({"status": {
                "issued": {
                    "issuer": "test",
                    "serviceAccount": {"kind": "ServiceAccount", "namespace": GRANTS_NAMESPACE, "name": name},
                    "namespaces": grant.spec.namespaces,
                },
                "observedGeneration": generation,
                "conditions": [{"type": "Ready", "status": "True", "reason": "AsExpected", "message": "issued", "lastTransitionTime": now}],
            }})
        }
    };
    client
        .patch_status(&grant_res(), None, name, &Patch::Merge(patch), &PatchParams::default())
        .await?;
    Ok(())
}

/// The Grants on the provider, by name.
pub async fn grant_names(client: &dyn ClusterClient) -> Vec<String> {
    let list = client
        .list(&grant_res(), None, &Default::default())
        .await
        .unwrap_or_else(|e| panic!("list grants: {e}"));
    list.items
        .into_iter()
        .filter_map(|o| from_dynamic::<Grant>(o).ok()?.metadata.name)
        .collect()
}
