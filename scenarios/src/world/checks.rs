//! The invariants after every step, and the failure report that reproduces a story.

use std::collections::BTreeSet;

use fakeapi::FakeCluster;
use kbind_cluster::{ApiResource, ClusterClient};
use serde_json::Value;

use super::{World, qualified, replica_user};
use crate::invariants::{self, Violation};

/// How far the previous invariant check read each log.
#[derive(Debug, Default)]
pub(super) struct Checked {
    window: invariants::Window,
    reads: invariants::ReadMemory,
    /// How many bytes of the log were scanned for credentials, and for how many secrets.
    log_scanned: usize,
    log_secrets: usize,
}

impl World {
    /// The consumer users of every konnector replica.
    fn konnector_users(&self) -> BTreeSet<String> {
        self.replicas.keys().map(|id| replica_user(id)).collect()
    }

    /// The provider users the konnector writes as (every credential minted in the world).
    fn konnector_provider_users(&self) -> BTreeSet<String> {
        self.credentials.iter().map(|c| c.user.clone()).collect()
    }

    /// The first broken invariant, if any (invariants 8 and 9 judge what happened since the
    /// previous check).
    pub async fn check_invariants(&self) -> Option<Violation> {
        let consumer = invariants::Logs::of(&self.consumer);
        let providers: Vec<invariants::Logs> = self
            .providers
            .values()
            .map(|p| invariants::Logs::of(&p.cluster))
            .collect();
        let konnector_users = self.konnector_users();
        let provider_users = self.konnector_provider_users();
        let consumer_uid = self.consumer.identity_uid();
        let (window, requests, stepwise) = {
            let mut checked = self.checked.lock();
            let mut window = checked.window.clone();
            window.consumer_to = self.consumer.resource_version();
            checked.window = invariants::Window {
                consumer_from: window.consumer_to,
                consumer_to: window.consumer_to,
                provider_writes_from: providers.iter().map(|p| (p.name.clone(), p.writes.len())).collect(),
                consumer_writes_from: consumer.writes.len(),
            };
            let clusters: Vec<&FakeCluster> = self.providers.values().map(|p| &p.cluster).collect();
            let requests = invariants::new_requests(&self.consumer, &clusters, &mut checked.reads);
            let reads = invariants::deletions_rest_on_complete_reads(
                self.consumer.name(),
                &requests,
                &konnector_users,
                &provider_users,
                &mut checked.reads,
            );
            (window, requests, reads)
        };
        let crd_verdicts = invariants::crd_delete_verdicts(&consumer, &konnector_users);
        if let Some(v) =
            invariants::nothing_deleted_on_consumer(&consumer, &konnector_users, &self.story_deleted, &crd_verdicts)
        {
            return Some(v);
        }
        // §8.2 binds a Connection pinned to the identity that was replaced; one that first met
        // the provider after the replacement pinned the new identity, legitimately.
        let pinned = self.pinned_identities().await;
        for ((name, provider), logs) in self.providers.iter().zip(&providers) {
            let users: BTreeSet<String> = self
                .credentials
                .iter()
                .filter(|c| &c.provider == name)
                .map(|c| c.user.clone())
                .collect();
            for (rv, old) in provider.replacements.iter().filter(|(_, old)| pinned.contains(old)) {
                if let Some(v) = invariants::no_write_after_identity_change(name, logs, *rv, &users) {
                    return Some(Violation {
                        detail: format!("{} (the Connection is pinned to {old})", v.detail),
                        ..v
                    });
                }
            }
        }
        for (name, logs) in self.providers.keys().zip(&providers) {
            if let Some(v) = invariants::no_write_to_foreign_copies(name, logs, &provider_users, &consumer_uid) {
                return Some(v);
            }
        }
        if let Some(v) = invariants::no_overwrite_of_foreign_crds(&consumer, &konnector_users) {
            return Some(v);
        }
        if let Some(v) = invariants::related_copies_keep_their_owner("the consumer", &consumer, &konnector_users, true)
        {
            return Some(v);
        }
        for (name, logs) in self.providers.keys().zip(&providers) {
            if let Some(v) = invariants::related_copies_keep_their_owner(name, logs, &provider_users, false) {
                return Some(v);
            }
        }
        if let Some(v) = invariants::deleted_objects_leave_no_copies(&consumer, &providers, &consumer_uid) {
            return Some(v);
        }
        if let Some(v) = invariants::unbind_keeps_served_copies(
            &consumer,
            &providers,
            &konnector_users,
            &provider_users,
            &consumer_uid,
            &window,
            &requests,
        ) {
            return Some(v);
        }
        if let Some(v) = stepwise {
            return Some(v);
        }
        let mut secrets: Vec<String> = self.credentials.iter().map(|c| c.token.clone()).collect();
        secrets.extend(invariants::credential_material(&consumer));
        // Events, statuses and the log only grow: scan what was added since the previous check
        // (the log from a little before, so a secret written across the boundary is still
        // whole), or all of it when the set of secrets changed.
        let (after_rv, from) = {
            let checked = self.checked.lock();
            if checked.log_secrets == secrets.len() {
                let longest = secrets.iter().map(String::len).max().unwrap_or(0);
                (window.consumer_from, checked.log_scanned.saturating_sub(longest))
            } else {
                (0, 0)
            }
        };
        let surfaces = invariants::consumer_surfaces(&consumer, after_rv);
        let (text, len) = self.log.text_from(from);
        {
            let mut checked = self.checked.lock();
            checked.log_scanned = len;
            checked.log_secrets = secrets.len();
        }
        // Tokens the providers issued (the konnector's own renewals among them) exist only since
        // they were minted, within the text scanned since the previous check.
        let issued: Vec<String> = self
            .providers
            .values()
            .flat_map(|p| p.cluster.issued_tokens())
            .collect();
        invariants::no_credentials_in("consumer events or Connection or binding status", &surfaces, &secrets)
            .or_else(|| invariants::no_credentials_in("the konnector log", &text, &secrets))
            .or_else(|| {
                invariants::no_credentials_in("consumer events or Connection or binding status", &surfaces, &issued)
            })
            .or_else(|| invariants::no_credentials_in("the konnector log", &text, &issued))
    }

    /// The `remoteClusterUID`s the consumer's Connections are pinned to.
    async fn pinned_identities(&self) -> BTreeSet<String> {
        let connections = ApiResource::erase::<kbind_api::Connection>(&());
        let Ok(list) = self
            .consumer
            .admin_client()
            .list(&connections, None, &Default::default())
            .await
        else {
            return BTreeSet::new();
        };
        list.items
            .iter()
            .filter_map(|c| c.data.pointer("/status/remoteClusterUID").and_then(Value::as_str))
            .map(str::to_string)
            .collect()
    }

    /// Fails the story with everything needed to reproduce it.
    pub fn fail(&self, violation: &Violation) -> ! {
        let mut report = format!(
            "\nstory {:?} failed at step {} (seed {}): {} {}\nreproduce: KBIND_SEED={} cargo test -p kbind-scenarios {}\n\nlast story steps:\n",
            self.story,
            self.step,
            self.seed,
            violation.invariant,
            violation.detail,
            self.seed,
            self.story.replace(' ', "_"),
        );
        for note in self.notes.iter().rev().take(15).rev() {
            report.push_str(&format!("  {note}\n"));
        }
        report.push_str("last consumer writes:\n");
        for w in self.consumer.write_log().iter().rev().take(15).rev() {
            report.push_str(&format!(
                "  rv {} {} {} {} {}/{}\n",
                w.rv, w.user, w.verb, w.resource, w.namespace, w.name
            ));
        }
        report.push_str("last log lines:\n");
        for line in self.log.tail(20) {
            report.push_str(&format!("  {line}\n"));
        }
        panic!("{report}");
    }

    /// Records that the konnector may delete this consumer object because of something the
    /// story did (e.g. the consumer CRD removed on unbind), so §8.1 does not count it.
    pub fn allow_konnector_delete(&mut self, res: &ApiResource, namespace: Option<&str>, name: &str) {
        let resource = qualified(res);
        self.story_deleted
            .insert((resource, namespace.unwrap_or("").to_string(), name.to_string()));
        self.note(format!("allowed the konnector to delete {} {name}", res.plural));
    }
}
