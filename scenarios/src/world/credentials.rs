//! Credentials the story mints on the providers, the kubeconfigs and bundles made of them, and
//! the Connections they become.

use std::time::Duration;

use fakeapi::UserInfo;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt};
use rand::RngCore;
use serde_json::{Value, json};

use super::{NAMESPACE, SharedProvider, World, ns_resource, object};
use crate::bundle::{self, Credential};
use crate::connector::FakeConnector;
use crate::invariants::Violation;

/// The lifetime of a ServiceAccount token a story mints without asking for renewals.
const YEAR: Duration = Duration::from_secs(365 * 24 * 3600);

impl World {
    /// A static admin token on `provider` (survives a provider replacement, like a break-glass
    /// token; not revocable).
    pub fn mint_admin_token(&mut self, provider: &str) -> Credential {
        let user = format!("kbind-konnector.{}@{provider}", self.consumer.name());
        self.mint_admin_token_for(provider, &user)
    }

    /// [`Self::mint_admin_token`] authenticating as `user` (tells Connections apart in the
    /// provider's request log).
    pub fn mint_admin_token_for(&mut self, provider: &str, user: &str) -> Credential {
        let token = format!("kbind-admin.{:016x}{:016x}", self.rng.next_u64(), self.rng.next_u64());
        let user = user.to_string();
        self.provider(provider).add_token(
            &token,
            UserInfo {
                name: user.clone(),
                groups: vec!["system:masters".into(), "system:authenticated".into()],
            },
        );
        let cred = Credential {
            provider: provider.to_string(),
            token,
            user,
            service_account: None,
        };
        self.credentials.push(cred.clone());
        cred
    }

    /// A revocable ServiceAccount token on `provider`, bound to ClusterRole `cluster_role`, for a
    /// year (longer than any story) and without the right to renew itself.
    pub async fn mint_service_account(&mut self, provider: &str, name: &str, cluster_role: &str) -> Credential {
        self.service_account_token(provider, name, cluster_role, YEAR, false)
            .await
    }

    /// An issued token as kbind's issuer makes it: a ServiceAccount token on `provider` for
    /// `lifetime`, bound to ClusterRole `cluster_role`, whose Role in its namespace lets it
    /// create tokens for itself (by name) and nothing else, so the konnector renews it.
    pub async fn mint_issued_token(
        &mut self,
        provider: &str,
        name: &str,
        cluster_role: &str,
        lifetime: Duration,
    ) -> Credential {
        self.service_account_token(provider, name, cluster_role, lifetime, true)
            .await
    }

    async fn service_account_token(
        &mut self,
        provider: &str,
        name: &str,
        cluster_role: &str,
        lifetime: Duration,
        renews_itself: bool,
    ) -> Credential {
        let admin = self.provider(provider).admin_client();
        let _ = admin
            .create(
                &ns_resource(),
                None,
                &object(json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})),
                &Default::default(),
            )
            .await;
        let sa_res = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        admin
            .create(
                &sa_res,
                Some(NAMESPACE),
                &object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name, "namespace": NAMESPACE}})),
                &Default::default(),
            )
            .await
            .expect("creating the konnector's ServiceAccount");
        let crb = ApiResource::erase::<k8s_openapi::api::rbac::v1::ClusterRoleBinding>(&());
        admin
            .create(
                &crb,
                None,
                &object(json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
                    "metadata": {"name": format!("{name}-{cluster_role}")},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": cluster_role},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
                })),
                &Default::default(),
            )
            .await
            .expect("binding the konnector's ClusterRole");
        if renews_itself {
            let self_token = format!("{name}-self-token");
            for obj in [
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
                    "metadata": {"name": self_token, "namespace": NAMESPACE},
                    "rules": [{"apiGroups": [""], "resources": ["serviceaccounts/token"], "verbs": ["create"], "resourceNames": [name]}],
                }),
                json!({
                    "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
                    "metadata": {"name": self_token, "namespace": NAMESPACE},
                    "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": self_token},
                    "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": NAMESPACE}],
                }),
            ] {
                let res = match obj["kind"].as_str() {
                    Some("Role") => ApiResource::erase::<k8s_openapi::api::rbac::v1::Role>(&()),
                    _ => ApiResource::erase::<k8s_openapi::api::rbac::v1::RoleBinding>(&()),
                };
                admin
                    .create(&res, Some(NAMESPACE), &object(obj), &Default::default())
                    .await
                    .expect("letting the ServiceAccount renew its own token");
            }
        }
        let request = json!({"spec": {"expirationSeconds": lifetime.as_secs()}});
        let answer = admin
            .create_subresource(&sa_res, Some(NAMESPACE), name, "token", &request)
            .await
            .expect("minting a ServiceAccount token");
        let token = answer
            .pointer("/status/token")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let cred = Credential {
            provider: provider.to_string(),
            token,
            user: format!("system:serviceaccount:{NAMESPACE}:{name}"),
            service_account: Some((NAMESPACE.to_string(), name.to_string())),
        };
        self.credentials.push(cred.clone());
        cred
    }

    /// Provider `name`, to share with a second world (a second consumer of the same provider).
    pub fn share_provider(&self, name: &str) -> SharedProvider {
        let p = self.provider_entry(name);
        SharedProvider {
            cluster: p.cluster.clone(),
            ca_pem: p.ca_pem.clone(),
        }
    }

    /// The CA (PEM) that provider `name`'s server certificate chains to.
    pub fn ca_pem(&self, name: &str) -> &[u8] {
        &self.provider_entry(name).ca_pem
    }

    /// The kubeconfig for `cred`, with the provider's real CA.
    pub fn kubeconfig_for(&self, cred: &Credential) -> String {
        let provider = self.provider_entry(&cred.provider);
        bundle::kubeconfig(
            &FakeConnector::server_url(&cred.provider),
            &provider.ca_pem,
            &cred.token,
        )
    }

    /// Applies the one-apply bundle for Connection `name` to the consumer (as its admin).
    pub async fn apply_bundle(&mut self, name: &str, cred: &Credential, apis: &[&str]) {
        for obj in bundle::bundle(name, NAMESPACE, &self.kubeconfig_for(cred), apis) {
            self.apply_object(obj).await;
        }
        self.note(format!("applied the bundle for {name}"));
    }

    /// Creates one of the bundle's objects (Secret, Connection or ClusterBinding) as the
    /// consumer's admin.
    pub async fn apply_object(&mut self, obj: Value) {
        let res = resource_of(&obj);
        let ns = obj
            .pointer("/metadata/namespace")
            .and_then(Value::as_str)
            .map(str::to_string);
        let what = format!(
            "{} {}",
            res.kind,
            obj.pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or_default()
        );
        self.consumer
            .admin_client()
            .create(&res, ns.as_deref(), &object(obj), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("applying {what}: {e}"));
        self.note(format!("applied {what}"));
    }

    /// Connection `name` as the consumer stores it now.
    pub async fn connection(&self, name: &str) -> Option<kbind_api::Connection> {
        self.consumer
            .admin_client()
            .get_typed_opt(None, name)
            .await
            .ok()
            .flatten()
    }

    /// Steps until Connection `name` satisfies `done`, failing the story after `max_steps`.
    pub async fn run_until_connection(
        &mut self,
        name: &str,
        what: &str,
        max_steps: u64,
        done: impl Fn(&kbind_api::Connection) -> bool,
    ) -> kbind_api::Connection {
        for _ in 0..=max_steps {
            if let Some(conn) = self.connection(name).await.filter(|c| done(c)) {
                return conn;
            }
            self.step().await;
        }
        let status = self.connection(name).await.map(|c| c.status);
        self.fail(&Violation {
            invariant: "progress",
            detail: format!("Connection {name} never reached {what} in {max_steps} steps; last status {status:?}"),
        })
    }
}

/// The resource of one of the bundle's objects.
fn resource_of(obj: &Value) -> ApiResource {
    match obj.get("kind").and_then(Value::as_str) {
        Some("Secret") => ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
        Some("Connection") => ApiResource::erase::<kbind_api::Connection>(&()),
        Some("ClusterBinding") => ApiResource::erase::<kbind_api::ClusterBinding>(&()),
        other => panic!("the bundle has an unexpected kind {other:?}"),
    }
}
