//! More of the scenario stories on real kube-apiservers, with the `konnector` binary under the chart's
//! least-privilege RBAC and a TokenRequest-minted provider credential, driven only through the Kubernetes API.
//!
//! Each story is the real-cluster twin of a fakeapi story in scenarios/tests/stories: the bundle applied in other
//! orders (order_independent_apply.rs); a second Connection for an API already served (conflicts.rs); Orphan on an
//! object and on a binding (orphan.rs, deletion.rs); related Secrets and ConfigMaps (related_resources.rs); a schema
//! synthesized from the real `/openapi/v3` (schema_sources.rs); a kcp-like provider's LogicalCluster identity
//! (identity_changes.rs); namespace-scoped provider credentials (namespace_scoped_credentials.rs).
//!
//! Skips like real_clusters.rs without the Go-built binaries or helm, unless `KBIND_REQUIRE_REAL_K8S=1` /
//! `KBIND_REQUIRE_HELM=1`. The tests take turns (one lock).
//!
//! What real kube-apiservers did differently from fakeapi in these stories, and what was checked to be the same:
//! - The 429 TooManyRequests on the first list of a just-created CRD (see real_clusters.rs) costs one binding
//!   pass, retried; deliberately not read as fakeapi's 404 (a 429 may be throttling of a busy API).
//! - Orphan unbind deletes nothing on either side (contract §4): the consumer CRD and objects stay, the provider
//!   copies are untouched. (Were the CRD to go with its last binding, the real apiserver's CRD finalizer would
//!   delete every consumer object.)
//! - OpenAPI source: the real `/openapi/v3/apis/example.org/v1` publishes defaults, enums,
//!   `x-kubernetes-int-or-string` (with its `anyOf`), `x-kubernetes-preserve-unknown-fields` and
//!   `x-kubernetes-validations`, and the synthesized consumer CRD keeps all of them; the consumer's apiserver
//!   enforces the CEL rule (422). A `minimum: 0` reads back as `0.0` through k8s-openapi's `f64` (same JSON number).
//! - The same as fakeapi: every bundle order converges (a binding before its Connection is `Connected=False,
//!   Pending`; a Connection before its Secret is `SecretValid=False, SecretNotFound`); a second Connection's binding
//!   of a served API gets `Synced`/`Ready=False, BoundThroughAnotherConnection` and deleting it deletes nothing;
//!   related copies both ways with the chart narrowed to `example.org` plus the Role the chart's README tells users
//!   to add; the user's own Secret gives `Conflicts=True, OwnedByAnother`; a plain CRD named
//!   `logicalclusters.core.kcp.io` makes the provider kcp-like (identity = its `cluster` object's UID, Auto schema
//!   source = OpenAPI); namespace-scoped provider credentials give the binding `PermissionDenied=True, Forbidden`
//!   ("may not: get widgets.example.org") while team-a syncs both ways and the Connection stays Ready.

mod child;
mod real;

use kbind_api::consts::{DELETION_POLICY_ORPHAN, annotation as kbind_annotation, condition, reason};
use real::*;

fn connections() -> ApiResource {
    erase::<kbind_api::Connection>()
}

fn cluster_bindings() -> ApiResource {
    erase::<kbind_api::ClusterBinding>()
}

fn crds() -> ApiResource {
    erase::<CustomResourceDefinition>()
}

/// `(status, reason)` of condition `type_` on `obj`.
fn condition_of(obj: &DynamicObject, type_: &str) -> Option<(String, String)> {
    conditions(obj)
        .into_iter()
        .find(|c| c.type_ == type_)
        .map(|c| (c.status, c.reason))
}

/// The reasons of the per-API conditions of `api` in a binding's `status.boundAPIs`.
fn api_reasons(binding: &DynamicObject, api: &str) -> Vec<String> {
    let apis = binding.data.pointer("/status/boundAPIs").and_then(Value::as_array);
    apis.into_iter()
        .flatten()
        .filter(|a| a["name"] == api)
        .flat_map(|a| a["conditions"].as_array().cloned().unwrap_or_default())
        .filter_map(|c| c["reason"].as_str().map(str::to_string))
        .collect()
}

async fn get(
    client: &KubeClusterClient,
    res: &ApiResource,
    namespace: Option<&str>,
    name: &str,
) -> Option<DynamicObject> {
    client.get_opt(res, namespace, name).await.ok()?
}

/// Waits until `name` of `res` on the consumer has condition `type_` = `status`.
async fn wait_condition(
    consumer: &Consumer,
    res: &ApiResource,
    name: &str,
    type_: &str,
    status: &str,
    lines: &Lines,
) -> DynamicObject {
    eventually(&format!("{} {name} {type_}={status}", res.kind), lines, async || {
        let obj = get(&consumer.admin, res, None, name).await?;
        has_condition(&obj, type_, status).then_some(obj)
    })
    .await
}

fn orphan_patch() -> Patch<Value> {
    Patch::Merge(json!({"metadata": {"annotations": {kbind_annotation::DELETION_POLICY: DELETION_POLICY_ORPHAN}}}))
}

/// Applies the bundle's items in `order` with the konnector already running, checking the partial states.
async fn apply_in_order(order: [usize; 3]) {
    const KINDS: [&str; 3] = ["Secret", "Connection", "ClusterBinding"];
    let names: Vec<&str> = order.iter().map(|i| KINDS[*i]).collect();
    eprintln!("order: {}", names.join(", "));
    let Some(world) = World::start_bare("order_independent_apply", 1, true).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("order", &lines).await;
    let items = bundle(&world.provider_kubeconfigs[0], "Fail");
    let mut applied = Vec::new();
    for i in order {
        create(&consumer.admin, items[i].clone()).await;
        applied.push(KINDS[i]);
        if applied.contains(&"Secret") {
            continue;
        }
        // A missing piece is a condition that resolves, never an error.
        if applied.contains(&"Connection") {
            let conn = eventually("SecretValid=False SecretNotFound", &lines, async || {
                let conn = get(&consumer.admin, &connections(), None, "provider").await?;
                (condition_of(&conn, condition::SECRET_VALID)
                    == Some(("False".into(), reason::SECRET_NOT_FOUND.into())))
                .then_some(conn)
            })
            .await;
            assert!(
                !has_condition(&conn, condition::READY, "True"),
                "Ready without a Secret"
            );
        }
        if applied.contains(&"ClusterBinding") {
            let binding = eventually("the ClusterBinding's Ready=False", &lines, async || {
                let b = get(&consumer.admin, &cluster_bindings(), None, "widgets").await?;
                has_condition(&b, condition::READY, "False").then_some(b)
            })
            .await;
            eprintln!("  binding before the Secret: {:?}", conditions(&binding));
        }
    }
    consumer.wait_ready(&lines).await;
    let conn = get(&consumer.admin, &connections(), None, "provider").await.unwrap();
    assert_eq!(
        conn.data.pointer("/status/localClusterUID"),
        Some(&json!(consumer.uid)),
        "pinned to this consumer"
    );
    let provider_uid = world
        .provider
        .get(&erase::<k8s_openapi::api::core::v1::Namespace>(), None, "kube-system")
        .await
        .unwrap()
        .metadata
        .uid;
    assert_eq!(
        conn.data.pointer("/status/remoteClusterUID"),
        provider_uid.map(Value::from).as_ref()
    );
    consumer.create_widget("ordered", 4).await;
    let copy = world.copy_where("the copy on the provider", "ordered", |_| true).await;
    assert_eq!(spec(&copy), &json!({"size": 4, "color": "blue"}));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_bundle_applied_binding_first_and_secret_last_converges() {
    let _turn = SERIAL.lock().await;
    apply_in_order([2, 1, 0]).await;
    apply_in_order([1, 2, 0]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_connection_for_a_served_api_syncs_nothing_and_deleting_it_deletes_nothing() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("second_connection", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("second", &lines).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("w1", 1).await;
    let w1 = world.copy_where("w1 on the provider", "w1", |_| true).await;

    // The same provider through a second Connection of its own, binding the same API.
    for item in named_bundle("other", "widgets-again", &world.provider_kubeconfigs[0], "Fail") {
        create(&consumer.admin, item).await;
    }
    let api = "widgets.example.org";
    let second = eventually("BoundThroughAnotherConnection on widgets-again", &lines, async || {
        let b = get(&consumer.admin, &cluster_bindings(), None, "widgets-again").await?;
        api_reasons(&b, api)
            .iter()
            .any(|r| r == reason::BOUND_THROUGH_ANOTHER_CONNECTION)
            .then_some(b)
    })
    .await;
    eprintln!("second binding: {:?}", conditions(&second));
    let crd = get(&consumer.admin, &crds(), None, api).await.unwrap();
    assert_eq!(annotation(&crd, kbind_annotation::CONNECTION), Some("provider"));
    consumer.create_widget("w2", 2).await;
    world.copy_where("w2 on the provider", "w2", |_| true).await;

    consumer
        .admin
        .delete(&cluster_bindings(), None, "widgets-again", &DeleteParams::default())
        .await
        .unwrap();
    eventually("widgets-again gone", &lines, async || {
        let gone = consumer
            .admin
            .get_opt(&cluster_bindings(), None, "widgets-again")
            .await
            .ok()?
            .is_none();
        gone.then_some(())
    })
    .await;
    let crd_after = get(&consumer.admin, &crds(), None, api)
        .await
        .expect("the first binding's CRD stays");
    assert_eq!(crd_after.metadata.uid, crd.metadata.uid);
    for name in ["w1", "w2"] {
        let mine = consumer.widget(name).await.expect("the consumer object stays");
        assert!(mine.metadata.deletion_timestamp.is_none(), "{name}");
        assert!(world.copy(name).await.is_some(), "{name}'s copy stays");
    }
    assert_eq!(world.copy("w1").await.unwrap().metadata.uid, w1.metadata.uid);
    consumer.resize_widget("w1", 6).await;
    world
        .copy_where("the first Connection keeps syncing", "w1", |c| {
            c.data.pointer("/spec/size") == Some(&json!(6))
        })
        .await;
    assert!(has_condition(
        &get(&consumer.admin, &cluster_bindings(), None, "widgets")
            .await
            .unwrap(),
        condition::READY,
        "True"
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn orphan_on_an_object_and_on_a_binding_leaves_the_provider_copies() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("orphan", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("orphan", &lines).await;
    consumer.wait_ready(&lines).await;
    for (name, size) in [("kept", 1), ("w1", 2), ("w2", 3)] {
        consumer.create_widget(name, size).await;
        world
            .copy_where(&format!("{name} on the provider"), name, |_| true)
            .await;
    }

    // Orphan on one object: deleting it leaves its copy.
    consumer
        .admin
        .patch(
            &widgets(),
            Some("default"),
            "kept",
            &orphan_patch(),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    let kept = world.copy("kept").await.unwrap();
    consumer.delete_widget("kept").await;
    eventually("the orphaned widget gone from the consumer", &lines, async || {
        consumer
            .admin
            .get_opt(&widgets(), Some("default"), "kept")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    let left = world.copy("kept").await.expect("the Orphan object's copy stays");
    assert_eq!(left.metadata.uid, kept.metadata.uid);
    assert!(left.metadata.deletion_timestamp.is_none());
    assert_eq!(spec(&left), &json!({"size": 1, "color": "blue"}));

    // Orphan on the binding: unbinding releases at once and leaves every copy untouched.
    let before: BTreeMap<String, Option<String>> = widgets_on(&world.provider)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, w)| (n, w.metadata.resource_version))
        .collect();
    assert_eq!(before.keys().collect::<Vec<_>>(), ["kept", "w1", "w2"]);
    consumer
        .admin
        .patch(
            &cluster_bindings(),
            None,
            "widgets",
            &orphan_patch(),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    consumer
        .admin
        .delete(&cluster_bindings(), None, "widgets", &DeleteParams::default())
        .await
        .unwrap();
    eventually("the orphaned binding released", &lines, async || {
        consumer
            .admin
            .get_opt(&cluster_bindings(), None, "widgets")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    // Orphan deletes nothing on either side (contract §4 "unbind"): the consumer CRD stays, and with it every
    // consumer object (were the CRD to go with its last binding, the apiserver would delete the objects).
    let consumer_before: BTreeMap<String, Option<String>> = widgets_on(&consumer.admin)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, w)| (n, w.metadata.uid))
        .collect();
    assert!(
        consumer
            .admin
            .get_opt(&crds(), None, "widgets.example.org")
            .await
            .unwrap()
            .is_some_and(|crd| crd.metadata.deletion_timestamp.is_none()),
        "Orphan keeps the consumer CRD"
    );
    assert_eq!(
        consumer_before.keys().collect::<Vec<_>>(),
        ["w1", "w2"],
        "Orphan keeps the consumer objects"
    );
    let after: BTreeMap<String, Option<String>> = widgets_on(&world.provider)
        .await
        .unwrap()
        .into_iter()
        .map(|(n, w)| (n, w.metadata.resource_version))
        .collect();
    assert_eq!(after, before, "the provider copies were not touched");
    let conn = get(&consumer.admin, &connections(), None, "provider").await.unwrap();
    assert!(has_condition(&conn, condition::READY, "True"), "the Connection stays");
}

fn secrets() -> ApiResource {
    erase::<k8s_openapi::api::core::v1::Secret>()
}

fn configmaps() -> ApiResource {
    erase::<k8s_openapi::api::core::v1::ConfigMap>()
}

/// Read and write of Secrets and ConfigMaps, what related resources need on each side.
fn related_rules() -> Value {
    json!([{"apiGroups": [""], "resources": ["secrets", "configmaps"],
            "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn related_secrets_and_configmaps_are_copied_both_ways_and_a_users_own_secret_is_left_alone() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start("related", &["Fail"]).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    // What the chart's README tells a user: a narrowed install does not reach the core group, so add a Role where
    // related resources are used; the provider's platform team does the same for the tenant.
    for rbac in grant("kbind-related", Some("default"), konnector_subject(), related_rules()) {
        create(&consumer.admin, rbac).await;
    }
    for rbac in grant("kbind-related", Some("default"), provider_subject(1), related_rules()) {
        create(&world.provider, rbac).await;
    }
    let _konnector = consumer.konnector("related", &lines).await;
    consumer.wait_ready(&lines).await;
    consumer.create_widget("w1", 1).await;
    const PASSWORD: &str = "hunter2-do-not-log";
    create(
        &consumer.admin,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "db-creds", "namespace": "default", "labels": {"share": "yes"}},
               "stringData": {"password": PASSWORD}}),
    )
    .await;
    create(
        &consumer.admin,
        json!({"apiVersion": "v1", "kind": "Secret",
               "metadata": {"name": "private", "namespace": "default", "labels": {"share": "no"}},
               "stringData": {"password": "x"}}),
    )
    .await;
    let users_secret = create(
        &consumer.admin,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-token", "namespace": "default"},
               "stringData": {"token": "the-users-own"}}),
    )
    .await;
    create(
        &world.provider,
        json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "endpoints", "namespace": "default"},
               "data": {"url": "https://db.acme"}}),
    )
    .await;
    create(
        &world.provider,
        json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "provider-token", "namespace": "default"},
               "stringData": {"token": "from-acme"}}),
    )
    .await;
    consumer
        .admin
        .patch(
            &cluster_bindings(),
            None,
            "widgets",
            &Patch::Merge(json!({"spec": {"relatedResources": [
                {"group": "", "resource": "secrets", "direction": "FromConsumer",
                 "selector": {"labelSelector": {"matchLabels": {"share": "yes"}}}},
                {"group": "", "resource": "configmaps", "direction": "FromProvider", "selector": {"names": ["endpoints"]}},
                {"group": "", "resource": "secrets", "direction": "FromProvider", "selector": {"names": ["provider-token"]}},
            ]}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();

    let up = eventually("db-creds up on the provider", &lines, async || {
        get(&world.provider, &secrets(), Some("default"), "db-creds").await
    })
    .await;
    let down = eventually("endpoints down on the consumer", &lines, async || {
        get(&consumer.admin, &configmaps(), Some("default"), "endpoints").await
    })
    .await;
    let source = get(&consumer.admin, &secrets(), Some("default"), "db-creds")
        .await
        .unwrap();
    assert_eq!(up.data["data"], source.data["data"]);
    assert_eq!(down.data["data"], json!({"url": "https://db.acme"}));
    let binding_uid = get(&consumer.admin, &cluster_bindings(), None, "widgets")
        .await
        .and_then(|b| b.metadata.uid)
        .unwrap();
    for copy in [&up, &down] {
        assert_eq!(
            annotation(copy, kbind_annotation::RELATED_BINDING),
            Some(binding_uid.as_str())
        );
        assert_eq!(
            copy.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("core.kbind.io/managed"))
                .map(String::as_str),
            Some("true")
        );
    }
    assert_eq!(
        annotation(&up, kbind_annotation::CONSUMER_CLUSTER_UID),
        Some(consumer.uid.as_str())
    );
    let managers: Vec<&str> = up
        .metadata
        .managed_fields
        .iter()
        .flatten()
        .filter_map(|m| m.manager.as_deref())
        .collect();
    assert!(managers.contains(&"kbind-konnector-related"), "{managers:?}");
    assert!(
        get(&world.provider, &secrets(), Some("default"), "private")
            .await
            .is_none()
    );

    // The user's own Secret of the same name is left alone, and the binding says so.
    let binding = wait_condition(
        consumer,
        &cluster_bindings(),
        "widgets",
        condition::CONFLICTS,
        "True",
        &lines,
    )
    .await;
    eprintln!("related: Conflicts {:?}", condition_of(&binding, condition::CONFLICTS));
    let still = get(&consumer.admin, &secrets(), Some("default"), "provider-token")
        .await
        .unwrap();
    assert_eq!(still.metadata.resource_version, users_secret.metadata.resource_version);
    assert_eq!(still.data["data"], users_secret.data["data"]);

    // The source stops matching: the provider copy is collected, the source stays.
    consumer
        .admin
        .patch(
            &secrets(),
            Some("default"),
            "db-creds",
            &Patch::Merge(json!({"metadata": {"labels": {"share": "no"}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("the unmatched copy collected", &lines, async || {
        world
            .provider
            .get_opt(&secrets(), Some("default"), "db-creds")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await;
    assert!(
        get(&consumer.admin, &secrets(), Some("default"), "db-creds")
            .await
            .is_some()
    );
    assert!(
        get(&consumer.admin, &configmaps(), Some("default"), "endpoints")
            .await
            .is_some()
    );
    let binding = get(&consumer.admin, &cluster_bindings(), None, "widgets")
        .await
        .unwrap();
    assert!(!serde_json::to_string(&binding.data).unwrap().contains(PASSWORD));
    assert!(
        !lines.lock().iter().any(|l| l.contains(PASSWORD)),
        "the password reached the log"
    );
}

fn gizmos() -> ApiResource {
    ApiResource {
        group: "example.org".into(),
        version: "v1".into(),
        api_version: "example.org/v1".into(),
        kind: "Gizmo".into(),
        plural: "gizmos".into(),
    }
}

/// The spec schema of the Gizmo: the extensions an OpenAPI-sourced schema must keep.
fn gizmo_spec_schema() -> Value {
    json!({
        "type": "object",
        "x-kubernetes-validations": [{"rule": "self.replicas <= self.maxReplicas", "message": "replicas above maxReplicas"}],
        "properties": {
            "replicas": {"type": "integer", "minimum": 0},
            "maxReplicas": {"type": "integer", "default": 10},
            "mode": {"type": "string", "enum": ["fast", "slow"], "default": "fast"},
            "port": {"x-kubernetes-int-or-string": true, "anyOf": [{"type": "integer"}, {"type": "string"}]},
            "config": {"type": "object", "x-kubernetes-preserve-unknown-fields": true},
        },
    })
}

fn gizmos_crd() -> Value {
    json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "gizmos.example.org", "labels": {"core.kbind.io/exported": "true"}},
        "spec": {
            "group": "example.org", "scope": "Namespaced",
            "names": {"plural": "gizmos", "singular": "gizmo", "kind": "Gizmo", "listKind": "GizmoList"},
            "versions": [{
                "name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                    "spec": gizmo_spec_schema(),
                    "status": {"type": "object", "properties": {
                        "phase": {"type": "string"}, "observedGeneration": {"type": "integer"}}},
                }}},
            }],
        },
    })
}

/// A small deterministic generator (xorshift64*), so the generated objects are the same on every run.
struct Seeded(u64);

impl Seeded {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }

    /// Free-form JSON for the preserve-unknown-fields `config`.
    fn config(&mut self, depth: u32) -> Value {
        match self.below(if depth == 0 { 3 } else { 5 }) {
            0 => json!(self.below(1000)),
            1 => json!(format!("s{}", self.below(1000))),
            2 => json!(self.below(2) == 0),
            3 => Value::Array((0..self.below(3)).map(|_| self.config(depth - 1)).collect()),
            _ => Value::Object(
                (0..1 + self.below(3))
                    .map(|i| (format!("k{i}"), self.config(depth - 1)))
                    .collect(),
            ),
        }
    }

    /// A valid Gizmo spec; fields with defaults left out at random.
    fn gizmo_spec(&mut self) -> Value {
        let max = 1 + self.below(20);
        let mut spec = json!({"replicas": self.below(max + 1), "config": {"tree": self.config(3)}});
        if self.below(2) == 0 {
            spec["maxReplicas"] = json!(max);
        } else {
            spec["replicas"] = json!(self.below(11));
        }
        if self.below(2) == 0 {
            let mode = ["fast", "slow"][self.below(2) as usize];
            spec["mode"] = json!(mode);
        }
        spec["port"] = if self.below(2) == 0 {
            json!(1 + self.below(65535))
        } else {
            json!(format!("p{}", self.below(99)))
        };
        spec
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_openapi_sourced_schema_keeps_the_extensions_and_generated_objects_round_trip() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start_bare("openapi", 1, true).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    create(&world.provider, gizmos_crd()).await;
    let rules = json!([{"apiGroups": ["example.org"], "resources": ["gizmos", "gizmos/status"],
                        "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
    for rbac in grant("kbind-gizmos", None, provider_subject(1), rules) {
        create(&world.provider, rbac).await;
    }
    served(&world.provider, &gizmos(), &lines).await;
    let mut items = named_bundle("provider", "gizmos", &world.provider_kubeconfigs[0], "Fail");
    items[1]["spec"]["schema"] = json!({"source": "OpenAPI"});
    items[2]["spec"]["apis"] = json!([{"name": "gizmos.example.org"}]);
    for item in items {
        create(&consumer.admin, item).await;
    }
    let _konnector = consumer.konnector("openapi", &lines).await;
    let conn = wait_condition(consumer, &connections(), "provider", condition::READY, "True", &lines).await;
    assert_eq!(conn.data.pointer("/status/activeSchemaSource"), Some(&json!("OpenAPI")));
    wait_condition(
        consumer,
        &cluster_bindings(),
        "gizmos",
        condition::READY,
        "True",
        &lines,
    )
    .await;
    served(&consumer.admin, &gizmos(), &lines).await;

    let pulled: CustomResourceDefinition =
        kbind_cluster::from_dynamic(get(&consumer.admin, &crds(), None, "gizmos.example.org").await.unwrap()).unwrap();
    let version = &pulled.spec.versions[0];
    let schema = serde_json::to_value(version.schema.as_ref().and_then(|s| s.open_api_v3_schema.as_ref())).unwrap();
    eprintln!("openapi: the consumer's spec schema: {}", schema["properties"]["spec"]);
    let spec_schema = &schema["properties"]["spec"];
    assert_eq!(
        spec_schema["properties"]["config"]["x-kubernetes-preserve-unknown-fields"],
        json!(true)
    );
    assert_eq!(
        spec_schema["properties"]["port"]["x-kubernetes-int-or-string"],
        json!(true)
    );
    assert_eq!(spec_schema["properties"]["maxReplicas"]["default"], json!(10));
    assert_eq!(spec_schema["properties"]["mode"]["default"], json!("fast"));
    assert_eq!(spec_schema["properties"]["mode"]["enum"], json!(["fast", "slow"]));
    assert_eq!(
        spec_schema["x-kubernetes-validations"],
        gizmo_spec_schema()["x-kubernetes-validations"],
        "the CEL rule is kept"
    );
    assert!(version.subresources.as_ref().is_some_and(|s| s.status.is_some()));
    // The CEL rule is enforced on the consumer too.
    let invalid = json!({"apiVersion": "example.org/v1", "kind": "Gizmo",
                         "metadata": {"name": "invalid", "namespace": "default"},
                         "spec": {"replicas": 50, "maxReplicas": 5}});
    let refused = consumer
        .admin
        .create(&gizmos(), Some("default"), &object(invalid), &PostParams::default())
        .await;
    assert!(refused.as_ref().is_err_and(|e| e.code() == 422), "{refused:?}");

    let seed = std::env::var("KBIND_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(0x5eed_u64);
    eprintln!("openapi: seed {seed}");
    let mut rng = Seeded(seed);
    let names: Vec<String> = (0..6).map(|i| format!("g-{i}")).collect();
    for name in &names {
        let spec = rng.gizmo_spec();
        eprintln!("openapi: {name} {spec}");
        let gizmo = json!({"apiVersion": "example.org/v1", "kind": "Gizmo",
                           "metadata": {"name": name, "namespace": "default"}, "spec": spec});
        consumer
            .admin
            .create(&gizmos(), Some("default"), &object(gizmo), &PostParams::default())
            .await
            .unwrap();
    }
    for (i, name) in names.iter().enumerate() {
        let mine = get(&consumer.admin, &gizmos(), Some("default"), name).await.unwrap();
        let copy = eventually(&format!("{name} on the provider"), &lines, async || {
            get(&world.provider, &gizmos(), Some("default"), name).await
        })
        .await;
        assert_eq!(spec(&copy), spec(&mine), "{name}: the spec went up unchanged");
        let status = json!({"phase": format!("phase-{i}"), "observedGeneration": copy.metadata.generation});
        world
            .provider
            .patch_status(
                &gizmos(),
                Some("default"),
                name,
                &Patch::Merge(json!({"status": status})),
                &PatchParams::default(),
            )
            .await
            .unwrap();
        let down = eventually(&format!("{name}'s status on the consumer"), &lines, async || {
            let obj = get(&consumer.admin, &gizmos(), Some("default"), name).await?;
            (obj.data.pointer("/status/phase") == Some(&json!(format!("phase-{i}")))).then_some(obj)
        })
        .await;
        assert_eq!(
            down.data["status"],
            json!({"phase": format!("phase-{i}"), "observedGeneration": 1}),
            "{name}"
        );
        assert_eq!(spec(&down), spec(&mine), "{name}: the consumer spec untouched");
    }
}

fn logical_clusters() -> ApiResource {
    ApiResource {
        group: "core.kcp.io".into(),
        version: "v1alpha1".into(),
        api_version: "core.kcp.io/v1alpha1".into(),
        kind: "LogicalCluster".into(),
        plural: "logicalclusters".into(),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_kcp_like_provider_is_pinned_to_its_logical_cluster() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start_bare("kcp_like", 1, true).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let crd = json!({
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": "logicalclusters.core.kcp.io"},
        "spec": {
            "group": "core.kcp.io", "scope": "Cluster",
            "names": {"plural": "logicalclusters", "singular": "logicalcluster", "kind": "LogicalCluster",
                      "listKind": "LogicalClusterList"},
            "versions": [{"name": "v1alpha1", "served": true, "storage": true,
                          "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}],
        },
    });
    create(&world.provider, crd).await;
    served(&world.provider, &logical_clusters(), &lines).await;
    let cluster = world
        .provider
        .create(
            &logical_clusters(),
            None,
            &object(json!({"apiVersion": "core.kcp.io/v1alpha1", "kind": "LogicalCluster", "metadata": {"name": "cluster"}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let rules =
        json!([{"apiGroups": ["core.kcp.io"], "resources": ["logicalclusters"], "verbs": ["get", "list", "watch"]}]);
    for rbac in grant("kbind-identity", None, provider_subject(1), rules) {
        create(&world.provider, rbac).await;
    }
    for item in bundle(&world.provider_kubeconfigs[0], "Fail") {
        create(&consumer.admin, item).await;
    }
    let _konnector = consumer.konnector("kcp-like", &lines).await;
    consumer.wait_ready(&lines).await;
    let conn = get(&consumer.admin, &connections(), None, "provider").await.unwrap();
    let kube_system = world
        .provider
        .get(&erase::<k8s_openapi::api::core::v1::Namespace>(), None, "kube-system")
        .await
        .unwrap();
    assert_eq!(
        conn.data.pointer("/status/remoteClusterUID"),
        cluster.metadata.uid.as_ref().map(|u| json!(u)).as_ref(),
        "pinned to the LogicalCluster, not kube-system {:?}",
        kube_system.metadata.uid
    );
    eprintln!(
        "kcp_like: activeSchemaSource {:?}",
        conn.data.pointer("/status/activeSchemaSource")
    );
    consumer.create_widget("pinned", 2).await;
    let copy = world.copy_where("the copy on the provider", "pinned", |_| true).await;
    assert_eq!(spec(&copy), &json!({"size": 2, "color": "blue"}));
}

/// A client acting with consumer 1's provider credential.
async fn provider_tenant(world: &World) -> KubeClusterClient {
    let kubeconfig = kube::config::Kubeconfig::from_yaml(&world.provider_kubeconfigs[0]).unwrap();
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .unwrap();
    KubeClusterClient::from_config(config).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_scoped_provider_credentials_sync_their_namespace_and_report_the_other() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start_bare("namespace_scoped", 1, false).await else {
        return;
    };
    let lines = world.lines.clone();
    let consumer = world.consumer();
    for ns in ["team-a", "team-b", "kbind"] {
        create(&world.provider, namespace(ns)).await;
    }
    for ns in ["team-a", "team-b"] {
        create(&consumer.admin, namespace(ns)).await;
    }
    // What a provider's platform team grants a tenant: the cluster reads kbind needs, and widgets in team-a only.
    let base = json!([
        {"apiGroups": ["apiextensions.k8s.io"], "resources": ["customresourcedefinitions"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": [""], "resources": ["namespaces"], "verbs": ["get", "list", "watch"]},
        {"apiGroups": ["coordination.k8s.io"], "resources": ["leases"], "verbs": ["get", "create", "update"]},
    ]);
    for rbac in grant("kbind-tenant-base", None, provider_subject(1), base) {
        create(&world.provider, rbac).await;
    }
    let widgets_rule = json!([{"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"],
                               "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]}]);
    for rbac in grant("widgets", Some("team-a"), provider_subject(1), widgets_rule) {
        create(&world.provider, rbac).await;
    }
    let everywhere = provider_tenant(&world)
        .await
        .list(&widgets(), None, &Default::default())
        .await;
    assert!(
        everywhere.as_ref().is_err_and(|e| e.is_forbidden()),
        "the tenant may not list widgets cluster-wide: {everywhere:?}"
    );
    for item in bundle(&world.provider_kubeconfigs[0], "Fail") {
        create(&consumer.admin, item).await;
    }
    let _konnector = consumer.konnector("tenant", &lines).await;
    wait_condition(consumer, &connections(), "provider", condition::READY, "True", &lines).await;
    served(&consumer.admin, &widgets(), &lines).await;
    for ns in ["team-a", "team-b"] {
        let mut w = widget("w1", 1);
        w["metadata"]["namespace"] = json!(ns);
        create(&consumer.admin, w).await;
    }
    eventually("team-a's copy on the provider", &lines, async || {
        get(&world.provider, &widgets(), Some("team-a"), "w1").await
    })
    .await;
    let binding = eventually("PermissionDenied naming widgets on the binding", &lines, async || {
        let b = get(&consumer.admin, &cluster_bindings(), None, "widgets").await?;
        conditions(&b)
            .iter()
            .any(|c| {
                c.type_ == condition::PERMISSION_DENIED
                    && c.status == "True"
                    && c.message.contains("widgets.example.org")
            })
            .then_some(b)
    })
    .await;
    let denied = conditions(&binding)
        .into_iter()
        .find(|c| c.type_ == condition::PERMISSION_DENIED)
        .unwrap();
    assert_eq!(denied.reason, reason::FORBIDDEN);
    assert!(denied.message.contains("get"), "names the verb: {}", denied.message);
    // The Connection's own requests are allowed: its PermissionDenied stays False and it stays Ready.
    let conn = get(&consumer.admin, &connections(), None, "provider").await.unwrap();
    assert_eq!(
        condition_of(&conn, condition::PERMISSION_DENIED),
        Some(("False".into(), reason::AS_EXPECTED.into()))
    );
    assert!(has_condition(&conn, condition::READY, "True"));

    // The allowed namespace keeps syncing both ways.
    world
        .provider
        .patch_status(
            &widgets(),
            Some("team-a"),
            "w1",
            &Patch::Merge(json!({"status": {"phase": "Ready"}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("team-a's status on the consumer", &lines, async || {
        let obj = consumer.admin.get_opt(&widgets(), Some("team-a"), "w1").await.ok()??;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await;
    consumer
        .admin
        .patch(
            &widgets(),
            Some("team-a"),
            "w1",
            &Patch::Merge(json!({"spec": {"size": 9}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("team-a's resize on the provider", &lines, async || {
        let copy = get(&world.provider, &widgets(), Some("team-a"), "w1").await?;
        (copy.data.pointer("/spec/size") == Some(&json!(9))).then_some(())
    })
    .await;
    assert!(
        get(&world.provider, &widgets(), Some("team-b"), "w1").await.is_none(),
        "nothing reached team-b"
    );
}

/// On real kube-apiservers: a Connection named with 253 characters (the most a name may have)
/// syncs both ways. kube-apiserver refuses a label value over 63 characters, so the consumer object's
/// `core.kbind.io/connection` label holds the hash form and the full name is in the annotation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_named_with_253_characters_syncs_both_ways() {
    let _turn = SERIAL.lock().await;
    let Some(world) = World::start_bare("connection_named_with_253_characters", 1, true).await else {
        return;
    };
    let name = format!("{}.x", vec!["c".repeat(62); 4].join("."));
    assert_eq!(name.len(), 253);
    let lines = world.lines.clone();
    let consumer = world.consumer();
    let _konnector = consumer.konnector("long", &lines).await;
    for item in named_bundle(&name, "widgets", &world.provider_kubeconfigs[0], "Fail") {
        create(&consumer.admin, item).await;
    }
    for res in [connections(), cluster_bindings()] {
        let n = if res.kind == "Connection" {
            name.as_str()
        } else {
            "widgets"
        };
        wait_condition(consumer, &res, n, condition::READY, "True", &lines).await;
    }
    consumer.create_widget("long", 3).await;
    let copy = world.copy_where("the copy on the provider", "long", |_| true).await;
    assert_eq!(spec(&copy), &json!({"size": 3, "color": "blue"}));
    let mine = consumer.widget("long").await.expect("the consumer object");
    let label = mine
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(kbind_api::consts::label::CONNECTION));
    assert_eq!(label, Some(&kbind_api::consts::connection_label_value(&name)));
    assert!(label.is_some_and(|l| l.len() <= 63), "{label:?}");
    assert_eq!(annotation(&mine, kbind_annotation::CONNECTION), Some(name.as_str()));
    world
        .provider
        .patch_status(
            &widgets(),
            Some("default"),
            "long",
            &Patch::Merge(json!({"status": {"phase": "Ready", "observedGeneration": copy.metadata.generation}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    eventually("the status on the consumer", &lines, async || {
        let obj = consumer.widget("long").await?;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await;
}
