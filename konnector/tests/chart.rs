//! The Helm chart rendered by a real `helm` and applied to an in-process fake cluster: every object is accepted,
//! and the konnector's ServiceAccount can do what it needs on the consumer and no more.
//!
//! helm comes from `KBIND_HELM`, else from the folder `hack/helm/build.sh` builds it into. Without it these tests
//! print one line and pass, unless `KBIND_REQUIRE_HELM=1` (CI), where they fail.

mod child;

use child::helm;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use fakeapi::{FakeClient, FakeCluster, UserInfo};
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Error, Patch, PatchParams, PostParams};
use serde_json::{Value, json};

const RELEASE: &str = "konnector";
const NAMESPACE: &str = "kbind";
/// The release's full name, which names the ServiceAccount, the roles and the Deployment.
const FULLNAME: &str = "konnector";
/// What the bound-API rule grants; the konnector's other rules are narrower.
const BOUND_VERBS: [&str; 7] = ["get", "list", "watch", "create", "update", "patch", "delete"];
/// What a related-kind rule grants: read FromConsumer sources, write FromProvider copies (server-side
/// apply creates and patches), delete them; never update (PUT).
const RELATED_VERBS: [&str; 6] = ["get", "list", "watch", "create", "patch", "delete"];
/// What a `readOnly` related-kind rule grants.
const READ_VERBS: [&str; 3] = ["get", "list", "watch"];
/// Extra related kinds: Ingresses read and written, with their status, and a read-only custom kind.
const EXTRA_KINDS: &str = r#"relatedResources.extraKinds=[{"group": "networking.k8s.io", "resource": "ingresses"},
    {"group": "networking.k8s.io", "resource": "ingresses/status"},
    {"group": "net.example.com", "resource": "subnets", "readOnly": true}]"#;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn chart_dir() -> PathBuf {
    repo_root().join("deploy/charts/konnector")
}

/// `helm template` of the chart with `--set` values, as one JSON value per non-empty document.
fn render(helm: &Path, sets: &[&str]) -> Vec<Value> {
    let mut command = Command::new(helm);
    command
        .arg("template")
        .arg(RELEASE)
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--include-crds"]);
    for set in sets {
        // A value that holds a JSON list of objects goes through --set-json.
        let flag = if set.contains("=[{") { "--set-json" } else { "--set" };
        command.args([flag, set]);
    }
    let output = command.output().unwrap();
    assert!(
        output.status.success(),
        "helm template {sets:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let documents: Vec<Value> = serde_saphyr::from_multiple(&String::from_utf8(output.stdout).unwrap()).unwrap();
    documents.into_iter().filter(|doc| !doc.is_null()).collect()
}

fn kind_of(object: &Value) -> &str {
    object["kind"].as_str().unwrap()
}

fn name_of(object: &Value) -> &str {
    object["metadata"]["name"].as_str().unwrap()
}

/// The one rendered object of `kind`.
fn the<'a>(objects: &'a [Value], kind: &str) -> &'a Value {
    let mut found = objects.iter().filter(|o| kind_of(o) == kind);
    let object = found.next().unwrap_or_else(|| panic!("no {kind} rendered"));
    assert!(found.next().is_none(), "more than one {kind} rendered");
    object
}

fn strings(value: &Value) -> Vec<&str> {
    value
        .as_array()
        .map(|items| items.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default()
}

/// Whether an RBAC rule reaches Secrets (by name or by wildcard, in the core group or every group).
fn reaches_secrets(rule: &Value) -> bool {
    let groups = strings(&rule["apiGroups"]);
    let resources = strings(&rule["resources"]);
    groups.iter().any(|g| g.is_empty() || *g == "*") && resources.iter().any(|r| *r == "secrets" || *r == "*")
}

/// The ClusterRole rule for the bound APIs: the one on every resource of its groups.
fn bound_api_rule(cluster_role: &Value) -> &Value {
    let rules = cluster_role["rules"].as_array().unwrap();
    let mut found = rules.iter().filter(|r| strings(&r["resources"]) == ["*"]);
    let rule = found.next().expect("a bound-API rule");
    assert!(found.next().is_none(), "one bound-API rule");
    rule
}

/// Waits until `check` holds, polling on the paused tokio clock; fails after `limit`.
async fn eventually<F, Fut>(what: &str, limit: Duration, mut check: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + limit;
    loop {
        if check().await {
            return;
        }
        assert!(tokio::time::Instant::now() < deadline, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The served resource of an object's apiVersion and kind.
async fn resource_of(client: &FakeClient, object: &Value) -> ApiResource {
    let api_version = object["apiVersion"].as_str().unwrap();
    let (group, version) = api_version.rsplit_once('/').unwrap_or(("", api_version));
    let kind = kind_of(object);
    let discovery = client.discovery().await.unwrap();
    discovery
        .resources
        .iter()
        .find(|r| r.group == group && r.version == version && r.kind == kind)
        .unwrap_or_else(|| panic!("{api_version} {kind} is not served"))
        .api_resource()
}

async fn create(client: &FakeClient, object: &Value) -> Result<DynamicObject, Error> {
    let res = resource_of(client, object).await;
    let namespace = object["metadata"]["namespace"].as_str();
    let dynamic: DynamicObject = serde_json::from_value(object.clone()).unwrap();
    client.create(&res, namespace, &dynamic, &PostParams::default()).await
}

fn crd_resource() -> ApiResource {
    ApiResource {
        group: "apiextensions.k8s.io".into(),
        version: "v1".into(),
        api_version: "apiextensions.k8s.io/v1".into(),
        kind: "CustomResourceDefinition".into(),
        plural: "customresourcedefinitions".into(),
    }
}

fn core_resource(kind: &str, plural: &str) -> ApiResource {
    ApiResource {
        group: String::new(),
        version: "v1".into(),
        api_version: "v1".into(),
        kind: kind.into(),
        plural: plural.into(),
    }
}

fn connection_resource() -> ApiResource {
    ApiResource {
        group: "core.kbind.io".into(),
        version: "v1alpha1".into(),
        api_version: "core.kbind.io/v1alpha1".into(),
        kind: "Connection".into(),
        plural: "connections".into(),
    }
}

fn lease_resource() -> ApiResource {
    ApiResource {
        group: "coordination.k8s.io".into(),
        version: "v1".into(),
        api_version: "coordination.k8s.io/v1".into(),
        kind: "Lease".into(),
        plural: "leases".into(),
    }
}

/// Installs the rendered objects the way `helm install -n kbind --create-namespace` would: CRDs first (and waits
/// until they are Established), then the namespace, then everything else. Fails on the first refused object.
async fn install(objects: &[Value]) -> FakeCluster {
    let cluster = FakeCluster::builder("consumer").seed(1).build();
    let admin = cluster.admin_client();
    let (crds, rest): (Vec<&Value>, Vec<&Value>) =
        objects.iter().partition(|o| kind_of(o) == "CustomResourceDefinition");
    assert!(!crds.is_empty(), "the chart renders its CRDs");
    for crd in &crds {
        create(&admin, crd)
            .await
            .unwrap_or_else(|err| panic!("CRD {} refused: {err}", name_of(crd)));
    }
    for crd in &crds {
        let name = name_of(crd);
        eventually(
            &format!("{name} to be Established"),
            Duration::from_secs(10),
            || async {
                let served = admin.get(&crd_resource(), None, name).await.unwrap();
                let conditions = serde_json::to_value(&served).unwrap()["status"]["conditions"].clone();
                conditions
                    .as_array()
                    .is_some_and(|c| c.iter().any(|c| c["type"] == "Established" && c["status"] == "True"))
            },
        )
        .await;
    }
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}});
    create(&admin, &namespace).await.unwrap();
    for object in rest {
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, NAMESPACE, "{} {}", kind_of(object), name_of(object));
        }
        create(&admin, object)
            .await
            .unwrap_or_else(|err| panic!("{} {} refused: {err}", kind_of(object), name_of(object)));
    }
    cluster
}

/// The konnector's ServiceAccount, as the token authenticator would present it.
fn konnector(cluster: &FakeCluster) -> FakeClient {
    cluster.client(UserInfo::service_account(NAMESPACE, FULLNAME))
}

fn secret(namespace: &str, name: &str) -> DynamicObject {
    serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": namespace, "name": name},
        "stringData": {"kubeconfig": "apiVersion: v1\nkind: Config\n"},
    }))
    .unwrap()
}

fn assert_forbidden<T: std::fmt::Debug>(result: Result<T, Error>, what: &str) {
    assert!(
        matches!(result, Err(Error::Forbidden { .. })),
        "{what}: expected Forbidden, got {result:?}"
    );
}

#[test]
fn chart_crds_are_the_committed_crds() {
    // kbind-api's own test keeps this file equal to the generated CRDs.
    let committed = std::fs::read_to_string(repo_root().join(kbind_api::crds::CRDS_YAML_PATH)).unwrap();
    let in_chart = std::fs::read_to_string(chart_dir().join("crds/kbind-crds.yaml")).unwrap();
    assert!(
        committed == in_chart,
        "deploy/charts/konnector/crds/kbind-crds.yaml differs from deploy/crds/kbind-crds.yaml; from the \
         repository root run:\n    cp deploy/crds/kbind-crds.yaml deploy/charts/konnector/crds/kbind-crds.yaml"
    );
}

#[test]
fn default_values_render_a_two_replica_hardened_deployment_with_the_documented_flags() {
    let Some(helm) = helm() else { return };
    let objects = render(&helm, &[]);
    let deployment = the(&objects, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 2);
    let pod = &deployment["spec"]["template"]["spec"];
    assert_eq!(pod["serviceAccountName"], FULLNAME);
    let container = &pod["containers"][0];
    assert_eq!(container["image"], "ghcr.io/kbind/konnector:0.1.0");
    let args = strings(&container["args"]);
    assert_eq!(
        args,
        [
            "run",
            "--namespace=kbind",
            "--lease-namespace=kbind",
            "--heartbeat-interval=30s",
            "--leader-elect=true",
            "--leader-election-lease=kbind-konnector",
            "--leader-election-namespace=kbind",
            "--lease-duration=15s",
            "--renew-deadline=10s",
            "--retry-period=2s",
            "--resync=10m",
            "--metrics-addr=0.0.0.0:8080",
            "--health-addr=0.0.0.0:8081",
            "--log-format=json",
            "--log-level=info",
        ]
    );
    assert_eq!(
        container["livenessProbe"]["httpGet"],
        json!({"path": "/healthz", "port": "health"})
    );
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "health"})
    );
    let ports: Vec<(&Value, &Value)> = container["ports"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (&p["name"], &p["containerPort"]))
        .collect();
    assert_eq!(
        ports,
        [(&json!("metrics"), &json!(8080)), (&json!("health"), &json!(8081))]
    );
    let security = &container["securityContext"];
    assert_eq!(security["runAsNonRoot"], true);
    assert_eq!(security["readOnlyRootFilesystem"], true);
    assert_eq!(security["allowPrivilegeEscalation"], false);
    assert_eq!(security["capabilities"]["drop"], json!(["ALL"]));
    assert!(
        container["resources"]["requests"].is_object(),
        "resource requests are set"
    );
}

#[test]
fn values_reach_the_image_and_the_flags() {
    let Some(helm) = helm() else { return };
    let objects = render(
        &helm,
        &[
            "image.tag=v9",
            "image.repository=registry.example/konnector",
            // Without leader election one replica (the chart refuses more).
            "leaderElection.enabled=false",
            "replicas=1",
            "log.level=debug",
            "heartbeat.leaseNamespace=kbind-heartbeats",
        ],
    );
    let container = &the(&objects, "Deployment")["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "registry.example/konnector:v9");
    let args = strings(&container["args"]);
    for expected in [
        "--leader-elect=false",
        "--log-level=debug",
        "--lease-namespace=kbind-heartbeats",
    ] {
        assert!(args.contains(&expected), "{expected} missing from {args:?}");
    }
    let role = the(&objects, "Role");
    let lease_rules = role["rules"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| strings(&r["apiGroups"]) == ["coordination.k8s.io"]);
    assert_eq!(lease_rules.count(), 0, "no Lease access without leader election");
}

/// The rule a related kind renders.
fn related_rule(group: &str, resource: &str, verbs: &[&str]) -> Value {
    json!({"apiGroups": [group], "resources": [resource], "verbs": verbs})
}

#[test]
fn cluster_role_grants_no_wildcard_verb_and_reaches_secrets_only_through_the_bound_groups_or_the_related_kinds() {
    let Some(helm) = helm() else { return };
    let secrets_rule = related_rule("", "secrets", &RELATED_VERBS);
    for sets in [&[][..], &["boundGroups={example.org}"][..]] {
        let objects = render(&helm, sets);
        let cluster_role = the(&objects, "ClusterRole");
        let bound = bound_api_rule(cluster_role);
        for rule in cluster_role["rules"].as_array().unwrap() {
            assert!(
                !strings(&rule["verbs"]).contains(&"*"),
                "{sets:?}: wildcard verb in {rule}"
            );
            if rule != bound && *rule != secrets_rule {
                assert!(
                    !reaches_secrets(rule),
                    "{sets:?}: cluster-wide Secrets access in {rule}"
                );
            }
        }
        assert_eq!(strings(&bound["verbs"]), BOUND_VERBS, "{sets:?}");
    }
    // The default `*` is every group, the core one included: RBAC cannot subtract, which is why the README says to
    // narrow it. Narrowed, and without related kinds, nothing in the ClusterRole reaches Secrets.
    let narrowed = render(&helm, &["boundGroups={example.org}", "relatedResources.kinds=null"]);
    let cluster_role = the(&narrowed, "ClusterRole");
    assert_eq!(strings(&bound_api_rule(cluster_role)["apiGroups"]), ["example.org"]);
    for rule in cluster_role["rules"].as_array().unwrap() {
        assert!(!reaches_secrets(rule), "cluster-wide Secrets access in {rule}");
    }
}

#[test]
fn related_kinds_render_one_rule_each_and_nothing_more() {
    let Some(helm) = helm() else { return };
    let rules = |sets: &[&str]| {
        the(&render(&helm, sets), "ClusterRole")["rules"]
            .as_array()
            .unwrap()
            .clone()
    };
    let without = rules(&["relatedResources.kinds=null"]);
    let defaults = [
        related_rule("", "secrets", &RELATED_VERBS),
        related_rule("", "configmaps", &RELATED_VERBS),
    ];
    let with = |added: &[Value]| [without.clone(), added.to_vec()].concat();
    assert_eq!(rules(&[]), with(&defaults), "Secrets and ConfigMaps by default");
    let extra = [
        related_rule("networking.k8s.io", "ingresses", &RELATED_VERBS),
        related_rule("networking.k8s.io", "ingresses/status", &RELATED_VERBS),
        related_rule("net.example.com", "subnets", &READ_VERBS),
    ];
    assert_eq!(
        rules(&[EXTRA_KINDS]),
        with(&[defaults.to_vec(), extra.to_vec()].concat())
    );
    assert_eq!(
        rules(&["relatedResources.kinds=null", EXTRA_KINDS]),
        with(&extra),
        "extraKinds without the defaults"
    );
    // An entry that is not {group, resource} fails to render, naming it.
    for bad in [
        r#"relatedResources.extraKinds=[{"resource": "ingresses"}]"#,
        r#"relatedResources.extraKinds=[{"group": "networking.k8s.io"}]"#,
    ] {
        let output = Command::new(&helm)
            .arg("template")
            .arg(RELEASE)
            .arg(chart_dir())
            .args(["--namespace", NAMESPACE, "--set-json", bad])
            .output()
            .unwrap();
        assert!(!output.status.success(), "{bad} rendered");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains("relatedResources.extraKinds[0] needs a group"),
            "{bad}: {stderr}"
        );
    }
}

#[test]
fn empty_bound_groups_fail_to_render() {
    let Some(helm) = helm() else { return };
    let output = Command::new(&helm)
        .arg("template")
        .arg(RELEASE)
        .arg(chart_dir())
        .args(["--namespace", NAMESPACE, "--set", "boundGroups=null"])
        .output()
        .unwrap();
    assert!(!output.status.success(), "an empty boundGroups rendered");
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("boundGroups must name at least one API group"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
}

#[test]
fn several_replicas_without_leader_election_fail_to_render() {
    let Some(helm) = helm() else { return };
    let template = |sets: &[&str]| {
        let mut command = Command::new(&helm);
        command
            .arg("template")
            .arg(RELEASE)
            .arg(chart_dir())
            .args(["--namespace", NAMESPACE]);
        for set in sets {
            command.args(["--set", set]);
        }
        command.output().unwrap()
    };
    let output = template(&["leaderElection.enabled=false", "replicas=2"]);
    assert!(
        !output.status.success(),
        "two replicas without leader election rendered"
    );
    assert!(
        String::from_utf8_lossy(&output.stderr).contains("replicas > 1 needs leaderElection.enabled=true"),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let single = render(&helm, &["leaderElection.enabled=false", "replicas=1"]);
    let deployment = the(&single, "Deployment");
    assert_eq!(deployment["spec"]["replicas"], 1);
    assert!(
        strings(&deployment["spec"]["template"]["spec"]["containers"][0]["args"]).contains(&"--leader-elect=false")
    );
}

#[tokio::test(start_paused = true)]
async fn every_rendered_object_is_accepted_with_default_values() {
    let Some(helm) = helm() else { return };
    let objects = render(&helm, &[]);
    let kinds: Vec<&str> = objects.iter().map(kind_of).collect();
    for kind in [
        "CustomResourceDefinition",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "Role",
        "RoleBinding",
        "Deployment",
    ] {
        assert!(kinds.contains(&kind), "no {kind} in {kinds:?}");
    }
    let cluster = install(&objects).await;
    let konnector = konnector(&cluster);
    // The default `*` is every group, the core group included (RBAC cannot subtract; the README says to narrow it).
    let configmaps = core_resource("ConfigMap", "configmaps");
    konnector.list(&configmaps, None, &Default::default()).await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn konnector_service_account_can_do_its_job_and_no_more() {
    let Some(helm) = helm() else { return };
    let cluster = install(&render(
        &helm,
        &["boundGroups={example.org}", "relatedResources.kinds=null"],
    ))
    .await;
    let admin = cluster.admin_client();
    let konnector = konnector(&cluster);
    let params = PostParams::default();

    // Connections: list, and patch status (conditions are how the konnector reports).
    let connection: DynamicObject = serde_json::from_value(json!({
        "apiVersion": "core.kbind.io/v1alpha1", "kind": "Connection",
        "metadata": {"name": "acme"},
        "spec": {"kubeconfigSecretRef": {"namespace": NAMESPACE, "name": "acme", "key": "kubeconfig"}},
    }))
    .unwrap();
    admin
        .create(&connection_resource(), None, &connection, &params)
        .await
        .unwrap();
    let listed = konnector
        .list(&connection_resource(), None, &Default::default())
        .await
        .unwrap();
    assert_eq!(listed.items.len(), 1);
    let status = json!({"status": {"conditions": [{
        "type": "Ready", "status": "False", "reason": "Pending", "message": "waiting for the Secret",
        "lastTransitionTime": "2026-01-01T00:00:00Z",
    }]}});
    let patched = konnector
        .patch_status(
            &connection_resource(),
            None,
            "acme",
            &Patch::Merge(status),
            &PatchParams::default(),
        )
        .await
        .unwrap();
    assert_eq!(patched.data["status"]["conditions"][0]["reason"], "Pending");
    assert_forbidden(
        konnector
            .delete(&connection_resource(), None, "acme", &Default::default())
            .await,
        "deleting a Connection",
    );

    // Secrets: its own namespace only.
    let secrets = core_resource("Secret", "secrets");
    admin
        .create(&secrets, Some(NAMESPACE), &secret(NAMESPACE, "acme"), &params)
        .await
        .unwrap();
    admin
        .create(&secrets, Some("default"), &secret("default", "other"), &params)
        .await
        .unwrap();
    konnector.get(&secrets, Some(NAMESPACE), "acme").await.unwrap();
    assert_forbidden(
        konnector.get(&secrets, Some("default"), "other").await,
        "reading a Secret in default",
    );
    assert_forbidden(
        konnector.list(&secrets, None, &Default::default()).await,
        "listing Secrets everywhere",
    );
    assert_forbidden(
        konnector
            .create(&secrets, Some(NAMESPACE), &secret(NAMESPACE, "mine"), &params)
            .await,
        "creating a Secret",
    );

    // Leader election: a Lease in its namespace, not elsewhere.
    let lease = |namespace: &str| -> DynamicObject {
        serde_json::from_value(json!({
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"namespace": namespace, "name": "kbind-konnector"},
            "spec": {"holderIdentity": "konnector-0", "leaseDurationSeconds": 15},
        }))
        .unwrap()
    };
    konnector
        .create(&lease_resource(), Some(NAMESPACE), &lease(NAMESPACE), &params)
        .await
        .unwrap();
    konnector
        .get(&lease_resource(), Some(NAMESPACE), "kbind-konnector")
        .await
        .unwrap();
    assert_forbidden(
        konnector
            .create(&lease_resource(), Some("default"), &lease("default"), &params)
            .await,
        "creating a Lease in default",
    );

    // Identity and the bound group, but no other group.
    konnector
        .get(&core_resource("Namespace", "namespaces"), None, "kube-system")
        .await
        .unwrap();
    let configmaps = core_resource("ConfigMap", "configmaps");
    assert_forbidden(
        konnector.list(&configmaps, None, &Default::default()).await,
        "listing ConfigMaps",
    );
}

/// A namespaced CRD of `plural.group`, served at v1.
fn crd(group: &str, plural: &str, kind: &str) -> Value {
    json!({"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": format!("{plural}.{group}")},
        "spec": {"group": group, "scope": "Namespaced",
            "names": {"plural": plural, "singular": kind.to_lowercase(), "kind": kind, "listKind": format!("{kind}List")},
            "versions": [{"name": "v1", "served": true, "storage": true, "subresources": {"status": {}},
                "schema": {"openAPIV3Schema": {"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}]}})
}

#[tokio::test(start_paused = true)]
async fn related_kinds_let_the_konnector_read_and_write_exactly_those_kinds_in_every_namespace() {
    let Some(helm) = helm() else { return };
    let cluster = install(&render(&helm, &["boundGroups={example.org}", EXTRA_KINDS])).await;
    let admin = cluster.admin_client();
    let konnector = konnector(&cluster);
    let params = PostParams::default();
    for (group, plural, kind) in [
        ("networking.k8s.io", "ingresses", "Ingress"),
        ("net.example.com", "subnets", "Subnet"),
    ] {
        create(&admin, &crd(group, plural, kind)).await.unwrap();
        let name = format!("{plural}.{group}");
        eventually(&format!("{name} served"), Duration::from_secs(10), || async {
            admin
                .discovery()
                .await
                .unwrap()
                .resources
                .iter()
                .any(|r| r.plural == plural && r.group == group)
        })
        .await;
    }
    let namespace = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
    create(&admin, &namespace).await.unwrap();
    let typed = |api_version: &str, kind: &str, name: &str| -> Value {
        json!({"apiVersion": api_version, "kind": kind, "metadata": {"namespace": "team-a", "name": name}})
    };
    let label = Patch::Merge(json!({"metadata": {"labels": {"kbind": "copy"}}}));

    // The default kinds and Ingresses: read everywhere, create, patch and delete; never update (PUT).
    for object in [
        typed("v1", "Secret", "db-password"),
        typed("v1", "ConfigMap", "endpoints"),
        typed("networking.k8s.io/v1", "Ingress", "shop"),
    ] {
        let what = format!("{} {}", kind_of(&object), name_of(&object));
        let res = resource_of(&admin, &object).await;
        create(&konnector, &object)
            .await
            .unwrap_or_else(|e| panic!("create {what}: {e}"));
        konnector
            .list(&res, None, &Default::default())
            .await
            .unwrap_or_else(|e| panic!("list every {what}: {e}"));
        let current = konnector.get(&res, Some("team-a"), name_of(&object)).await.unwrap();
        konnector
            .patch(&res, Some("team-a"), name_of(&object), &label, &PatchParams::default())
            .await
            .unwrap_or_else(|e| panic!("patch {what}: {e}"));
        assert_forbidden(
            konnector
                .replace(&res, Some("team-a"), name_of(&object), &current, &params)
                .await,
            &format!("update {what}"),
        );
        konnector
            .delete(&res, Some("team-a"), name_of(&object), &Default::default())
            .await
            .unwrap_or_else(|e| panic!("delete {what}: {e}"));
    }
    // Ingress status, listed as its own kind: the provider's status can be written back.
    let ingress = typed("networking.k8s.io/v1", "Ingress", "shop");
    let ingresses = resource_of(&admin, &ingress).await;
    create(&admin, &ingress).await.unwrap();
    konnector
        .patch_status(
            &ingresses,
            Some("team-a"),
            "shop",
            &Patch::Merge(json!({"status": {"loadBalancer": {"ingress": [{"ip": "192.0.2.1"}]}}})),
            &PatchParams::default(),
        )
        .await
        .unwrap();

    // A read-only kind: read, never written.
    let subnet = typed("net.example.com/v1", "Subnet", "s");
    let subnets = resource_of(&admin, &subnet).await;
    create(&admin, &subnet).await.unwrap();
    konnector.list(&subnets, None, &Default::default()).await.unwrap();
    konnector.get(&subnets, Some("team-a"), "s").await.unwrap();
    assert_forbidden(
        create(&konnector, &typed("net.example.com/v1", "Subnet", "t")).await,
        "create a Subnet",
    );
    assert_forbidden(
        konnector
            .patch(&subnets, Some("team-a"), "s", &label, &PatchParams::default())
            .await,
        "patch a Subnet",
    );

    // A kind listed nowhere: nothing.
    let services = core_resource("Service", "services");
    assert_forbidden(
        konnector.list(&services, None, &Default::default()).await,
        "list Services",
    );
    assert_forbidden(
        konnector.list(&services, Some("team-a"), &Default::default()).await,
        "list Services in team-a",
    );
}
