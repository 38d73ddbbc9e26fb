//! Grant names. A Grant's name is derived from (identity, Export, consumer cluster UID) so every
//! gateway replica agrees on it and a create race has one winner; it is keyed, so that no third
//! party — a gateway a user is tricked into using — can compute the name of someone's existing
//! Grant and hand out a bundle whose objects match it. The key is the UID of the provider's
//! `grants.iam.kbind.io` CRD: every replica reads the same one, no tenant credential can read
//! it (an issued role reads exported CRDs only), and it lives exactly as long as the Grants do
//! (deleting the CRD deletes every Grant). Grants made before names were keyed keep theirs.

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kbind_api::{Grant, grant_name, keyed_grant_name};
use kbind_cluster::{ClusterClient, ClusterClientExt, Error as ClusterError};

use super::GatewayError;

/// The name of the CRD whose UID keys Grant names.
const GRANTS_CRD: &str = "grants.iam.kbind.io";

/// The naming key, read once per process.
#[derive(Debug, Default)]
pub(crate) struct Naming {
    key: tokio::sync::OnceCell<String>,
}

impl Naming {
    async fn key(&self, provider: &dyn ClusterClient) -> Result<&str, GatewayError> {
        let key = self
            .key
            .get_or_try_init(|| async {
                let crd: CustomResourceDefinition =
                    provider
                        .get_typed_opt(None, GRANTS_CRD)
                        .await?
                        .ok_or_else(|| ClusterError::NotFound {
                            message: format!(
                                "customresourcedefinitions {GRANTS_CRD:?} not found: install kbind-backend's CRDs"
                            ),
                        })?;
                crd.metadata
                    .uid
                    .filter(|uid| !uid.is_empty())
                    .ok_or_else(|| GatewayError::from(ClusterError::Decode(format!("{GRANTS_CRD} has no UID"))))
            })
            .await?;
        Ok(key)
    }

    /// The name of the Grant of (`subject`, `export`, `uid`): the keyed one, or the unkeyed one
    /// when a Grant of exactly this triple was made under it before names were keyed.
    pub(crate) async fn name_for(
        &self,
        provider: &dyn ClusterClient,
        subject: &str,
        export: &str,
        uid: &str,
    ) -> Result<String, GatewayError> {
        let legacy = grant_name(subject, export, uid);
        if let Some(existing) = provider.get_typed_opt::<Grant>(None, &legacy).await?
            && same_triple(&existing, subject, export, uid)
        {
            return Ok(legacy);
        }
        Ok(keyed_grant_name(
            self.key(provider).await?.as_bytes(),
            subject,
            export,
            uid,
        ))
    }

    /// Whether `name` is the name the gateway gives `grant` (keyed, or unkeyed from before): a
    /// Grant somebody made by hand under another name is not one the gateway answers for.
    pub(crate) async fn is_name_of(
        &self,
        provider: &dyn ClusterClient,
        grant: &Grant,
        name: &str,
    ) -> Result<bool, GatewayError> {
        let spec = &grant.spec;
        let (subject, export, uid) = (&spec.identity.subject, &spec.export, &spec.consumer_cluster_uid);
        Ok(grant_name(subject, export, uid) == name
            || keyed_grant_name(self.key(provider).await?.as_bytes(), subject, export, uid) == name)
    }
}

fn same_triple(grant: &Grant, subject: &str, export: &str, uid: &str) -> bool {
    grant.spec.identity.subject == subject && grant.spec.export == export && grant.spec.consumer_cluster_uid == uid
}
