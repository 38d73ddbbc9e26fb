//! Faults the story injects: partitions, black holes, replaced providers, revoked or swapped
//! credentials, crashed and isolated replicas.

use std::sync::atomic::Ordering;

use kbind_cluster::{ApiResource, ClusterClient};
use serde_json::json;

use super::{NAMESPACE, World, qualified};
use crate::bundle::{self, Credential};
use crate::connector::FakeConnector;

impl World {
    /// Cuts provider `name` off from everyone.
    pub fn partition(&mut self, name: &str) {
        self.provider(name).partition();
        self.note(format!("partitioned {name}"));
    }

    /// Ends the partition of provider `name`.
    pub fn heal(&mut self, name: &str) {
        self.provider(name).heal();
        self.note(format!("healed {name}"));
    }

    /// Makes provider `name` a black hole: nothing is answered and nothing ends (see
    /// `FakeCluster::black_hole`); only the konnector's request timeout notices.
    pub fn black_hole(&mut self, name: &str) {
        self.provider(name).black_hole();
        self.note(format!("black-holed {name}"));
    }

    /// Lifts the black hole of provider `name`.
    pub fn restore(&mut self, name: &str) {
        self.provider(name).restore();
        self.note(format!("restored {name}"));
    }

    /// Replaces provider `name` with a fresh, empty cluster with a new identity (same URL, CA
    /// and static tokens).
    pub fn replace_provider(&mut self, name: &str) {
        let cluster = self.provider(name).clone();
        let rv = cluster.resource_version();
        let old_identity = cluster.identity_uid();
        cluster.replace_with_fresh();
        self.connector.server_rebuilt(name);
        if let Some(p) = self.providers.get_mut(name) {
            p.replacements.push((rv, old_identity));
        }
        self.note(format!("replaced {name} with a fresh cluster"));
    }

    /// Revokes a ServiceAccount credential (deletes the ServiceAccount: its tokens die).
    pub async fn revoke(&mut self, cred: &Credential) {
        let (ns, name) = cred
            .service_account
            .clone()
            .expect("only ServiceAccount credentials can be revoked");
        let sa_res = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        self.provider(&cred.provider)
            .admin_client()
            .delete(&sa_res, Some(&ns), &name, &Default::default())
            .await
            .expect("revoking the ServiceAccount");
        self.note(format!("revoked {} on {}", cred.user, cred.provider));
    }

    /// Points Connection `name`'s Secret at `cred` (possibly another provider), with `ca_pem`
    /// (`None`: the right CA of `cred`'s provider).
    pub async fn swap_secret(&mut self, name: &str, cred: &Credential, ca_pem: Option<&[u8]>) {
        let provider = self.provider_entry(&cred.provider);
        let kubeconfig = bundle::kubeconfig(
            &FakeConnector::server_url(&cred.provider),
            ca_pem.unwrap_or(&provider.ca_pem),
            &cred.token,
        );
        self.consumer
            .admin_client()
            .patch(
                &ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
                Some(NAMESPACE),
                name,
                &kbind_cluster::Patch::Merge(json!({"stringData": {"kubeconfig": kubeconfig}})),
                &Default::default(),
            )
            .await
            .expect("swapping the Secret");
        self.note(format!("swapped the Secret of {name} to {}", cred.provider));
    }

    /// Deletes a consumer object as the story (allowed by invariant 1).
    pub async fn delete_on_consumer(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        let resource = qualified(res);
        self.story_deleted
            .insert((resource, namespace.unwrap_or("").to_string(), name.to_string()));
        let _ = self
            .consumer
            .admin_client()
            .delete(res, namespace, name, &Default::default())
            .await;
        self.note(format!("deleted {} {name} on the consumer", res.plural));
    }

    /// Kills replica `konnector-0` without any cleanup.
    pub fn crash_konnector(&mut self) {
        self.crash_replica("konnector-0");
    }

    /// Kills replica `id` without any cleanup (no Lease release).
    pub fn crash_replica(&mut self, id: &str) {
        if let Some(task) = self.replicas.get_mut(id).and_then(|r| r.task.take()) {
            task.abort();
        }
        self.note(format!("crashed {id}"));
    }

    /// Restarts replica `konnector-0` from scratch.
    pub fn restart_konnector(&mut self) {
        self.crash_replica("konnector-0");
        self.start_replica("konnector-0");
    }

    /// Cuts replica `id` off from the consumer (`false` restores it).
    pub fn isolate_replica(&mut self, id: &str, isolated: bool) {
        if let Some(r) = self.replicas.get(id) {
            r.cut.store(isolated, Ordering::SeqCst);
        }
        self.note(format!(
            "{} {id} from the consumer",
            if isolated { "isolated" } else { "reconnected" }
        ));
    }
}
