//! The `konnector` binary on real kube-apiservers under network faults: a partition and its heal, latency
//! with every watch cut, the provider replaced by a cluster with another identity, and a kill -9 during a partition.
//!
//! The faults come from `kbind_testenv::FaultProxy`, a TCP proxy in front of the provider apiserver that the
//! provider kubeconfig in the bundle names (TLS passes through, the apiserver's CA still verifies); the provider
//! admin's own client goes straight to the apiserver. Skips like real_clusters.rs without the binaries or helm,
//! unless `KBIND_REQUIRE_REAL_K8S=1` / `KBIND_REQUIRE_HELM=1`. One story at a time (the `SERIAL` lock).
//!
//! What real servers (behind the proxy) did differently from fakeapi's fault API, as far as these stories can tell:
//! - Partition: fakeapi fails every request at once with `Error::Transport("... partitioned")` and ends each watch
//!   with one Transport item. Through the proxy, new connections are closed before the TLS handshake, which hyper
//!   reports as `client error (Connect)`; open watches end with rustls' UnexpectedEof ("peer closed connection
//!   without sending TLS close_notify", logged by the watcher as `eof in poll`); requests in flight on a pooled
//!   connection fail with `client error (SendRequest)`. All are transport errors to the engine: the reason is
//!   `ProviderUnreachable`, as on fakeapi.
//! - How quickly: the disengage is not driven by those watch or request errors but by the Connection's next
//!   reconcile, which is due with the heartbeat (30 s by default): `Connected=False` comes within that interval of
//!   the cut, with `status-stale` on every synced widget in the same pass. Until then the binding's passes keep
//!   retrying ("related resources not converged: failed to list secrets on the provider"); the identity guard
//!   holds writes. On fakeapi's paused clock that window is invisible. After the heal the Connection retries on its
//!   backoff, then the provider is engaged afresh, the held changes (update, create, a deletion waiting on the
//!   syncer finalizer) go up and the annotation goes.
//! - Dropped watches: fakeapi's `drop_watches` ends a watch cleanly (the stream just ends); a cut TCP connection
//!   ends it with the UnexpectedEof error above, and also fails whatever unrelated request shared the connection
//!   (`SendRequest`). The watcher re-lists and the syncers converge; no duplicate copy, Apply manager or Lease.
//! - Latency: fakeapi adds it once before each answer; the proxy adds it to every chunk both ways, so the TLS
//!   handshake and every watch event pay it too; it changes nothing but the pace.
//! - Identity swap: the harness replaces a cluster behind the same address (fakeapi: `replace_with_fresh` behind
//!   the same handle). As on fakeapi, ServiceAccount tokens die with their ServiceAccount: a TokenRequest token
//!   carries the ServiceAccount's UID, so the rebuilt provider answers the old token with 401 until its admin
//!   re-creates the ServiceAccount and mints a new one into the consumer's Secret. The Secret change made the
//!   engager disengage ("the pinned identity or the kubeconfig Secret changed") and refuse to re-engage ("the
//!   provider's identity ... differs from the pinned ..."), then reported `ClusterIdentityChanged`. A sweep
//!   of every listable resource on the new cluster found nothing managed by `kbind-konnector` or labelled managed.
//! - Field managers: on a real apiserver the heartbeat Lease and the provider namespace `kbind` carry manager
//!   `unknown` (created with no fieldManager and no User-Agent the apiserver can name); only instance writes carry
//!   `kbind-konnector` (contract §3 asks no more). The sweep therefore also looks for the `managed` label.
//! - kill -9 during a partition: the restarted konnector reports `ProviderUnreachable` on its first pass, keeps
//!   every copy on the provider and every object on the consumer, and converges after the heal.

mod child;
mod real;

use std::time::Duration;

use kbind_api::consts::{annotation, field_manager};
use real::*;

fn connection_resource() -> ApiResource {
    erase::<kbind_api::Connection>()
}

fn lease_resource() -> ApiResource {
    erase::<k8s_openapi::api::coordination::v1::Lease>()
}

fn condition(obj: &DynamicObject, type_: &str) -> Option<Condition> {
    conditions(obj).into_iter().find(|c| c.type_ == type_)
}

fn has_reason(obj: &DynamicObject, type_: &str, status: &str, reason: &str) -> bool {
    condition(obj, type_).is_some_and(|c| c.status == status && c.reason == reason)
}

impl Consumer {
    async fn connection(&self) -> Option<DynamicObject> {
        self.admin
            .get_opt(&connection_resource(), None, "provider")
            .await
            .ok()?
    }

    /// Waits until the Connection says `Connected=False` with `reason`, and `Ready=False`.
    async fn disconnected(&self, reason: &str, lines: &Lines) -> DynamicObject {
        eventually(&format!("Connected=False/{reason}"), lines, async || {
            let conn = self.connection().await?;
            (has_reason(&conn, "Connected", "False", reason) && has_condition(&conn, "Ready", "False")).then_some(conn)
        })
        .await
    }
}

fn is_stale(obj: &DynamicObject) -> bool {
    annotation(obj, annotation::STATUS_STALE).is_some()
}

/// One provider copy per consumer object, each naming its original's UID.
fn assert_one_copy_each(copies: &BTreeMap<String, DynamicObject>, originals: &BTreeMap<String, DynamicObject>) {
    assert_eq!(copies.keys().collect::<Vec<_>>(), originals.keys().collect::<Vec<_>>());
    for (name, original) in originals {
        assert_eq!(
            annotation(&copies[name], "core.kbind.io/consumer-object-uid"),
            original.metadata.uid.as_deref(),
            "{name}: the copy belongs to this consumer object"
        );
        assert_eq!(spec(&copies[name]), spec(original), "{name}: the latest spec is up");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partition_disengages_marks_status_stale_deletes_nothing_and_heals() {
    let _turn = SERIAL.lock().await;
    let Some((world, proxy)) = World::start_behind_proxy("partition", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("partition", &lines).await;
    consumer.wait_ready(&lines).await;
    for (name, size) in [("steady", 1), ("changing", 2), ("leaving", 3)] {
        consumer.create_widget(name, size).await;
        world.copy_where("the copy on the provider", name, |_| true).await;
    }
    world.report_status("steady", "Ready").await;
    eventually("status down before the partition", &lines, async || {
        let obj = consumer.widget("steady").await?;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await;

    proxy.partition();
    let cut_at = std::time::Instant::now();
    consumer.disconnected("ProviderUnreachable", &lines).await;
    let disengaged_after = cut_at.elapsed();
    eventually("status-stale on every synced widget", &lines, async || {
        let originals = widgets_on(&consumer.admin).await?;
        (originals.len() == 3 && originals.values().all(is_stale)).then_some(())
    })
    .await;
    eprintln!(
        "partition: Connected=False after {disengaged_after:.1?}, status-stale on all after {:.1?}",
        cut_at.elapsed()
    );
    // The binding follows its Connection on its own reconcile: no order between it and the
    // stale marks.
    eventually("the binding not Ready while disengaged", &lines, async || {
        let binding = consumer
            .admin
            .get(&erase::<kbind_api::ClusterBinding>(), None, "widgets")
            .await
            .ok()?;
        has_condition(&binding, "Ready", "False").then_some(())
    })
    .await;

    // Changes while partitioned: an update, a new widget, a deletion (held by the syncer finalizer).
    consumer.resize_widget("changing", 20).await;
    consumer.create_widget("newcomer", 7).await;
    consumer.delete_widget("leaving").await;
    let held = consumer
        .widget("leaving")
        .await
        .expect("the finalizer holds the deleted widget");
    assert!(held.metadata.deletion_timestamp.is_some());
    let copies = widgets_on(&world.provider).await.unwrap();
    assert_eq!(
        copies.keys().collect::<Vec<_>>(),
        ["changing", "leaving", "steady"],
        "nothing is deleted on the provider while partitioned"
    );
    assert_eq!(copies["changing"].data.pointer("/spec/size"), Some(&json!(2)));
    assert!(
        consumer
            .admin
            .get_opt(&erase::<CustomResourceDefinition>(), None, "widgets.example.org")
            .await
            .unwrap()
            .is_some(),
        "the pulled CRD stays"
    );
    assert!(proxy.is_partitioned());

    proxy.heal();
    let healed_at = std::time::Instant::now();
    eventually(
        "the changes made during the partition on the provider, staleness cleared",
        &lines,
        async || {
            let copies = widgets_on(&world.provider).await?;
            let originals = widgets_on(&consumer.admin).await?;
            let converged = copies.keys().eq(["changing", "newcomer", "steady"].iter())
                && originals.keys().eq(copies.keys())
                && originals.values().all(|o| !is_stale(o))
                && originals.keys().all(|n| spec(&copies[n]) == spec(&originals[n]));
            converged.then_some(())
        },
    )
    .await;
    consumer.wait_ready(&lines).await;
    eprintln!(
        "partition: converged and Ready {:.1?} after the heal",
        healed_at.elapsed()
    );
    let copies = widgets_on(&world.provider).await.unwrap();
    let originals = widgets_on(&consumer.admin).await.unwrap();
    assert_one_copy_each(&copies, &originals);
    assert_eq!(
        originals["steady"].data.pointer("/status/phase"),
        Some(&json!("Ready")),
        "status survives the partition"
    );
    assert!(proxy.forwarded() > 0);
    summarise("partition", &lines);
}

/// Cuts every open connection, then waits until the konnector has opened a new one through the proxy.
async fn cut_watches(proxy: &FaultProxy, lines: &Lines) {
    let before = proxy.forwarded();
    proxy.drop_connections();
    eventually("the konnector to re-connect", lines, async || {
        (proxy.forwarded() > before).then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn latency_and_cut_watches_still_converge_without_duplicates() {
    let _turn = SERIAL.lock().await;
    let Some((world, proxy)) = World::start_behind_proxy("latency", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("latency", &lines).await;
    consumer.wait_ready(&lines).await;
    proxy.latency(Duration::from_millis(150));
    cut_watches(&proxy, &lines).await;

    consumer.create_widget("made", 1).await;
    cut_watches(&proxy, &lines).await;
    world
        .copy_where("the created widget on the provider", "made", |c| {
            c.data.pointer("/spec/size") == Some(&json!(1))
        })
        .await;
    world.report_status("made", "Ready").await;
    cut_watches(&proxy, &lines).await;
    eventually("status Ready down", &lines, async || {
        let obj = consumer.widget("made").await?;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await;

    consumer.resize_widget("made", 2).await;
    cut_watches(&proxy, &lines).await;
    world
        .copy_where("the update on the provider", "made", |c| {
            c.data.pointer("/spec/size") == Some(&json!(2))
                && annotation(c, "core.kbind.io/consumer-generation") == Some("2")
        })
        .await;
    world.report_status("made", "Resized").await;
    cut_watches(&proxy, &lines).await;
    eventually("status Resized for generation 2 down", &lines, async || {
        let obj = consumer.widget("made").await?;
        let answered = obj.data.pointer("/status/phase") == Some(&json!("Resized"))
            && obj.data.pointer("/status/observedGeneration") == Some(&json!(2));
        answered.then_some(())
    })
    .await;

    let copies = widgets_on(&world.provider).await.unwrap();
    let originals = widgets_on(&consumer.admin).await.unwrap();
    assert_one_copy_each(&copies, &originals);
    let managers: Vec<&str> = copies["made"]
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter(|m| m.operation.as_deref() == Some("Apply"))
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert_eq!(
        managers,
        [field_manager::KONNECTOR],
        "one applier, whatever the retries"
    );
    let leases = world
        .provider
        .list(&lease_resource(), Some(NAMESPACE), &Default::default())
        .await
        .unwrap();
    let names: Vec<String> = leases.items.iter().filter_map(|l| l.metadata.name.clone()).collect();
    assert_eq!(
        names,
        [format!("consumer-{}", consumer.uid)],
        "one heartbeat Lease per consumer"
    );
    consumer.wait_ready(&lines).await;
    eprintln!("latency: {} connections forwarded", proxy.forwarded());
    summarise("latency", &lines);
}

/// Every object on `cluster` (every listable resource) that names one of `managers` in its managedFields or
/// carries the `core.kbind.io/managed` label (the heartbeat Lease and its namespace are created without a field
/// manager, so only the label marks them), as `plural/namespace name [its managers]`.
async fn objects_managed_by(cluster: &Cluster, managers: &[&str]) -> Vec<String> {
    use kube::discovery::{Discovery, verbs};
    let client = cluster.client(User::Admin).await.unwrap();
    let discovery = Discovery::new(client.clone()).run().await.unwrap();
    let mut found = Vec::new();
    for group in discovery.groups() {
        for (res, caps) in group.recommended_resources() {
            if !caps.supports_operation(verbs::LIST) {
                continue;
            }
            let api: kube::Api<kube::api::DynamicObject> = kube::Api::all_with(client.clone(), &res);
            let list = api.list(&Default::default()).await.unwrap();
            for obj in list.items {
                let names: Vec<&str> = obj
                    .metadata
                    .managed_fields
                    .iter()
                    .flatten()
                    .filter_map(|m| m.manager.as_deref())
                    .collect();
                let labelled = obj
                    .metadata
                    .labels
                    .as_ref()
                    .is_some_and(|l| l.get(kbind_api::consts::label::MANAGED).is_some_and(|v| v == "true"));
                if labelled || names.iter().any(|name| managers.contains(name)) {
                    found.push(format!(
                        "{}/{} {} {names:?}",
                        res.plural,
                        obj.metadata.namespace.as_deref().unwrap_or_default(),
                        obj.metadata.name.as_deref().unwrap_or_default()
                    ));
                }
            }
        }
    }
    found
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_provider_rebuilt_with_another_identity_gets_no_write() {
    let _turn = SERIAL.lock().await;
    let Some(mut world) = World::start("identity_swap", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let _konnector = world.consumer().konnector("identity", &lines).await;
    world.consumer().wait_ready(&lines).await;
    world.consumer().create_widget("before", 1).await;
    world
        .copy_where("the copy on the old provider", "before", |_| true)
        .await;
    let pinned = world.consumer().connection().await.unwrap().data["status"]["remoteClusterUID"]
        .as_str()
        .unwrap()
        .to_string();
    let managers = [field_manager::KONNECTOR, field_manager::KONNECTOR_RELATED];
    let written = objects_managed_by(world._env.cluster(0), &managers).await;
    assert!(
        written.iter().any(|o| o.starts_with("widgets/default before"))
            && written.iter().any(|o| o.starts_with("leases/kbind consumer-"))
            && written.iter().any(|o| o.starts_with("namespaces/ kbind")),
        "the sweep sees what the konnector wrote on the old provider: {written:?}"
    );
    eprintln!("identity_swap: the konnector's writes on the old provider: {written:?}");

    // The provider is rebuilt behind the same address; its admin makes the same credential valid there again:
    // the CRD, the ServiceAccount and its RBAC, and a token minted there, put into the consumer's Secret.
    world._env.replace_cluster(0).await.unwrap();
    let swapped_at = std::time::Instant::now();
    let fresh = world._env.cluster(0);
    let fresh_admin = client_as(fresh, User::Admin).await;
    let fresh_uid = fresh_admin
        .get(&erase::<k8s_openapi::api::core::v1::Namespace>(), None, "kube-system")
        .await
        .unwrap()
        .metadata
        .uid
        .unwrap();
    assert_ne!(fresh_uid, pinned, "the replaced cluster has a new identity");
    let kubeconfig = prepare_provider(fresh, 1, &lines).await.remove(0);
    let consumer = world.consumer();
    consumer
        .admin
        .patch(
            &erase::<k8s_openapi::api::core::v1::Secret>(),
            Some(NAMESPACE),
            "provider",
            &Patch::Merge(json!({"stringData": {"kubeconfig": kubeconfig}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();

    let changed = consumer.disconnected("ClusterIdentityChanged", &lines).await;
    eprintln!(
        "identity_swap: ClusterIdentityChanged {:.1?} after the swap",
        swapped_at.elapsed()
    );
    assert_eq!(
        changed.data["status"]["remoteClusterUID"].as_str(),
        Some(pinned.as_str()),
        "the pin stays"
    );

    // Settle: a new generation forces one more full reconcile (connect, identity read, the writes a broken
    // guard would let through); its status shows it ran.
    let generation = consumer
        .admin
        .patch(
            &connection_resource(),
            None,
            "provider",
            &Patch::Merge(json!({"spec": {"schema": {"updatePolicy": "Once"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap()
        .metadata
        .generation
        .unwrap();
    eventually("a reconcile of the new generation", &lines, async || {
        let conn = consumer.connection().await?;
        let connected = condition(&conn, "Connected")?;
        (connected.observed_generation == Some(generation)).then_some(())
    })
    .await;
    let conn = consumer.connection().await.unwrap();
    assert!(has_reason(&conn, "Connected", "False", "ClusterIdentityChanged"));

    let copies = fresh_admin.list(&widgets(), None, &Default::default()).await.unwrap();
    assert!(copies.items.is_empty(), "no widget reached the new cluster");
    let kbind_namespace = fresh_admin
        .get_opt(&erase::<k8s_openapi::api::core::v1::Namespace>(), None, NAMESPACE)
        .await
        .unwrap();
    assert!(kbind_namespace.is_none(), "no heartbeat namespace on the new cluster");
    let leases = fresh_admin
        .list(&lease_resource(), None, &Default::default())
        .await
        .unwrap();
    let heartbeats: Vec<_> = leases
        .items
        .iter()
        .filter(|l| l.metadata.name.as_deref().is_some_and(|n| n.starts_with("consumer-")))
        .collect();
    assert!(heartbeats.is_empty(), "no heartbeat Lease on the new cluster");
    let ours = objects_managed_by(fresh, &managers).await;
    assert!(ours.is_empty(), "the konnector wrote to the new cluster: {ours:?}");

    let before = consumer
        .widget("before")
        .await
        .expect("nothing is deleted on the consumer");
    assert!(before.metadata.deletion_timestamp.is_none());
    assert!(
        consumer
            .admin
            .get_opt(&erase::<CustomResourceDefinition>(), None, "widgets.example.org")
            .await
            .unwrap()
            .is_some(),
        "the pulled CRD stays"
    );
    summarise("identity_swap", &lines);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_konnector_killed_during_a_partition_converges_after_heal_and_restart() {
    let _turn = SERIAL.lock().await;
    let Some((world, proxy)) = World::start_behind_proxy("partition_restart", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let konnector = consumer.konnector("partition-restart", &lines).await;
    consumer.wait_ready(&lines).await;
    let names: Vec<String> = (0..8).map(|i| format!("w-{i}")).collect();
    for (i, name) in names.iter().enumerate() {
        consumer.create_widget(name, i as i64).await;
    }
    eventually("every copy on the provider", &lines, async || {
        (widgets_on(&world.provider).await?.len() == names.len()).then_some(())
    })
    .await;

    proxy.partition();
    konnector.kill_hard().await;
    for name in &names[..2] {
        consumer.resize_widget(name, 100).await;
    }
    for name in &names[6..] {
        consumer.delete_widget(name).await;
    }
    consumer.create_widget("w-8", 8).await;
    consumer.create_widget("w-9", 9).await;

    let restarted = std::time::Instant::now();
    let _konnector = consumer.konnector("partition-restart", &lines).await;
    // The restarted konnector finds the provider unreachable: nothing goes, nothing is deleted.
    consumer.disconnected("ProviderUnreachable", &lines).await;
    eprintln!(
        "partition_restart: Connected=False {:.1?} after the restart",
        restarted.elapsed()
    );
    let copies = widgets_on(&world.provider).await.unwrap();
    assert_eq!(
        copies.keys().cloned().collect::<Vec<_>>(),
        names,
        "the provider keeps every copy"
    );
    let originals = widgets_on(&consumer.admin).await.unwrap();
    for name in &names[6..] {
        assert!(
            originals[name].metadata.deletion_timestamp.is_some(),
            "{name} waits for its copy"
        );
    }

    proxy.heal();
    let mut surviving: Vec<String> = names[..6].to_vec();
    surviving.extend(["w-8".to_string(), "w-9".to_string()]);
    eventually(
        "exactly the survivors with the latest spec on both sides",
        &lines,
        async || {
            let copies = widgets_on(&world.provider).await?;
            let originals = widgets_on(&consumer.admin).await?;
            let converged = copies.keys().eq(surviving.iter())
                && originals.keys().eq(surviving.iter())
                && originals
                    .values()
                    .all(|o| o.metadata.deletion_timestamp.is_none() && !is_stale(o))
                && surviving.iter().all(|n| spec(&copies[n]) == spec(&originals[n]));
            converged.then_some(())
        },
    )
    .await;
    let copies = widgets_on(&world.provider).await.unwrap();
    let originals = widgets_on(&consumer.admin).await.unwrap();
    assert_one_copy_each(&copies, &originals);
    for name in &names[..2] {
        assert_eq!(originals[name].data.pointer("/spec/size"), Some(&json!(100)), "{name}");
    }
    consumer.wait_ready(&lines).await;
    summarise("partition_restart", &lines);
}

/// Prints how often the konnectors logged each warning, error and engagement change: what the header's list of
/// differences from fakeapi was read from.
fn summarise(story: &str, lines: &Lines) {
    let mut seen = BTreeMap::<String, usize>::new();
    for line in lines.lock().iter() {
        let Some((_, text)) = line.split_once("] ") else {
            continue;
        };
        let Ok(json) = serde_json::from_str::<Value>(text) else {
            continue;
        };
        let level = json["level"].as_str().unwrap_or_default();
        let message = json["message"].as_str().unwrap_or_default();
        let engagement = message.contains("engage");
        if level != "WARN" && level != "ERROR" && !engagement {
            continue;
        }
        let detail = json["error"].as_str().or(json["reason"].as_str()).unwrap_or_default();
        *seen.entry(format!("{level} {message}: {detail}")).or_default() += 1;
    }
    for (what, count) in seen {
        eprintln!("{story}: {count}x {what}");
    }
}
