//! The kbind-backend Helm chart rendered by a real `helm` and applied to an in-process fake provider:
//! every object is accepted, the flags are the documented ones, bad values fail with a clear
//! message, and each component's ServiceAccount can do its job and no more — the reaper is run on
//! its chart RBAC, and the issuer's RBAC is tried on the Roles it has to write. The rendered
//! Deployments of the default values and of the README's install run as the real binary on
//! `fakeapi serve` until their probes pass; `hack/image` builds the image each chart runs.
//!
//! helm comes from `KBIND_HELM`, else from the folder `hack/helm/build.sh` builds it into. Without it
//! these tests print one line and pass, unless `KBIND_REQUIRE_HELM=1` (CI), where they fail.

#[path = "../../tests/support/children.rs"]
mod children;
mod reaper_world;

use std::sync::Arc;

use fakeapi::{FakeCluster, UserInfo};
use jiff::SignedDuration;
use kbind_backend::reaper::Target;
use kbind_cluster::{ApiResource, ClusterClient, DynamicObject, Error, PostParams};
use reaper_world::chart::*;
use reaper_world::*;
use serde_json::{Value, json};

/// The served resource of an object's apiVersion and kind.
async fn resource_of(client: &Arc<dyn ClusterClient>, object: &Value) -> ApiResource {
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

async fn create(client: &Arc<dyn ClusterClient>, value: &Value) -> Result<DynamicObject, Error> {
    let res = resource_of(client, value).await;
    let namespace = value["metadata"]["namespace"].as_str();
    client
        .create(&res, namespace, &object(value.clone()), &PostParams::default())
        .await
}

/// Installs the rendered objects as `helm install -n kbind-system --create-namespace` would: CRDs
/// first (Established), then Namespaces, then everything else; fails on the first refusal.
async fn install(objects: &[Value]) -> (FakeCluster, Arc<dyn ClusterClient>) {
    let cluster = FakeCluster::builder("provider").seed(SEED).build();
    let admin: Arc<dyn ClusterClient> = Arc::new(cluster.admin_client());
    install_into(&admin, objects).await;
    (cluster, admin)
}

/// [`install`] into the cluster of `admin`.
async fn install_into(admin: &Arc<dyn ClusterClient>, objects: &[Value]) {
    let crds: Vec<Value> = objects
        .iter()
        .filter(|o| kind_of(o) == "CustomResourceDefinition")
        .cloned()
        .collect();
    assert_eq!(crds.len(), 3, "the chart renders Export, Collection and Grant");
    install_crds(admin, &crds).await;
    create_namespace(admin, NAMESPACE, json!({}), json!({})).await;
    let (namespaces, rest): (Vec<&Value>, Vec<&Value>) = objects
        .iter()
        .filter(|o| kind_of(o) != "CustomResourceDefinition")
        .partition(|o| kind_of(o) == "Namespace");
    for object in namespaces.into_iter().chain(rest) {
        // fakeapi serves neither; their selectors are checked on the render instead.
        if ["Service", "PodDisruptionBudget"].contains(&kind_of(object)) {
            continue;
        }
        create(admin, object)
            .await
            .unwrap_or_else(|err| panic!("{} {} refused: {err}", kind_of(object), name_of(object)));
    }
}

fn as_service_account(cluster: &FakeCluster, name: &str) -> Arc<dyn ClusterClient> {
    Arc::new(cluster.client(UserInfo::service_account(NAMESPACE, name)))
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
    let committed = std::fs::read_to_string(repo_root().join(kbind_api::crds::BACKEND_CRDS_YAML_PATH)).unwrap();
    let in_chart = std::fs::read_to_string(chart_dir().join("crds/kbind-backend-crds.yaml")).unwrap();
    assert!(
        committed == in_chart,
        "deploy/charts/kbind-backend/crds/kbind-backend-crds.yaml differs from deploy/crds/kbind-backend-crds.yaml; \
         from the repository root run:\n    cp deploy/crds/kbind-backend-crds.yaml deploy/charts/kbind-backend/crds/"
    );
}

#[test]
fn default_values_render_two_gateway_replicas_and_one_issuer_and_reaper_with_the_documented_flags() {
    let Some(helm) = helm() else { return };
    let objects = render(&helm, &[]);
    let gateway = named(&objects, "Deployment", GATEWAY);
    assert_eq!(gateway["spec"]["replicas"], 2);
    assert_eq!(gateway["spec"]["template"]["spec"]["serviceAccountName"], GATEWAY);
    assert_eq!(
        args_of(gateway),
        [
            "run",
            "--gateway",
            "--listen=0.0.0.0:8080",
            "--public-url=https://kbind.example.com",
            "--provider-url=https://provider.example.com:6443",
            // Defaults: the release name, and the cluster CA Kubernetes publishes in every namespace.
            "--provider-name=kbind-backend",
            "--provider-ca=/etc/kbind/provider-ca/ca.crt",
            "--token-file=/etc/kbind/tokens/tokens",
            "--grants-namespace=kbind-grants",
            "--lease-namespace=kbind",
        ]
    );
    let container = &gateway["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(container["image"], "ghcr.io/kbind/kbind-backend:0.1.0");
    assert_eq!(
        container["readinessProbe"]["httpGet"],
        json!({"path": "/readyz", "port": "http"})
    );
    assert_eq!(container["securityContext"]["readOnlyRootFilesystem"], true);
    let controller = named(&objects, "Deployment", CONTROLLER);
    assert_eq!(controller["spec"]["replicas"], 1);
    assert_eq!(controller["spec"]["strategy"]["type"], "Recreate");
    assert_eq!(
        gateway["spec"]["template"]["spec"]["volumes"][0],
        json!({"name": "provider-ca", "configMap": {"name": "kube-root-ca.crt"}})
    );
    assert_eq!(
        args_of(controller),
        [
            "run",
            "--issuer",
            "--reaper",
            "--metrics-listen=0.0.0.0:8080",
            "--grants-namespace=kbind-grants",
            "--lease-namespace=kbind",
            "--reap-ttl=7d",
        ]
    );
    let service = named(&objects, "Service", GATEWAY);
    assert_eq!(service["spec"]["selector"]["app.kubernetes.io/component"], "gateway");
    assert_eq!(service["spec"]["ports"][0]["targetPort"], "http");
    let pod_labels = gateway["spec"]["template"]["metadata"]["labels"].as_object().unwrap();
    for (key, value) in service["spec"]["selector"].as_object().unwrap() {
        assert_eq!(
            pod_labels.get(key),
            Some(value),
            "the Service selects the gateway pods by {key}"
        );
    }
    assert_eq!(gateway["spec"]["selector"]["matchLabels"], service["spec"]["selector"]);
    let pdb = named(&objects, "PodDisruptionBudget", GATEWAY);
    assert_eq!(pdb["spec"]["minAvailable"], 1);
    assert_eq!(pdb["spec"]["selector"]["matchLabels"], service["spec"]["selector"]);
    for ns in ["kbind-grants", "kbind"] {
        named(&objects, "Namespace", ns);
    }
}

#[test]
fn non_default_values_reach_the_flags() {
    let Some(helm) = helm() else { return };
    let objects = render_ci(&helm);
    assert_eq!(
        args_of(named(&objects, "Deployment", GATEWAY)),
        [
            "run",
            "--gateway",
            "--listen=0.0.0.0:8080",
            "--public-url=https://kbind.acme.example",
            "--provider-url=https://api.acme.example:6443",
            "--provider-name=acme",
            "--provider-ca=/etc/kbind/provider-ca/ca.crt",
            "--oidc-issuer-url=https://login.acme.example",
            "--oidc-client-id=kbind",
            "--oidc-client-secret-file=/etc/kbind/oidc/client-secret",
            "--session-key-file=/etc/kbind/session/session-key",
            "--trusted-proxies=1",
            "--body-read-timeout=5s",
            "--grants-namespace=kbind-system",
            "--lease-namespace=kbind-heartbeats",
        ]
    );
    assert_eq!(
        args_of(named(&objects, "Deployment", CONTROLLER)),
        [
            "run",
            "--issuer",
            "--reaper",
            "--metrics-listen=0.0.0.0:8080",
            "--grants-namespace=kbind-system",
            "--lease-namespace=kbind-heartbeats",
            "--reap-ttl=36h",
            "--reap-objects",
            "--reaper-report-only",
        ]
    );
    let ca = named(&objects, "ConfigMap", "kbind-backend-provider-ca");
    assert!(
        ca["data"]["ca.crt"]
            .as_str()
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    // The grants namespace is the release namespace here: the chart does not create it.
    let namespaces: Vec<&str> = objects
        .iter()
        .filter(|o| kind_of(o) == "Namespace")
        .map(name_of)
        .collect();
    assert_eq!(namespaces, ["kbind-heartbeats"]);
    // Only the reaper, the issuer in neither mode.
    let only_reaper = render(&helm, &["issuer.enabled=false", "gateway.enabled=false"]);
    assert_eq!(
        args_of(named(&only_reaper, "Deployment", CONTROLLER))[..4],
        [
            "run",
            "--reaper",
            "--metrics-listen=0.0.0.0:8080",
            "--grants-namespace=kbind-grants"
        ]
    );
    assert!(
        only_reaper
            .iter()
            .all(|o| !name_of(o).contains("issuer") && !name_of(o).contains("gateway"))
    );
}

#[test]
fn values_that_cannot_work_fail_to_render_with_the_reason() {
    let Some(helm) = helm() else { return };
    let cases: [(&[&str], &str); 8] = [
        (
            &["provider.name=Acme_Corp"],
            "provider.name \"Acme_Corp\" is not a DNS label",
        ),
        (
            &["provider.ca=not a certificate"],
            "provider.ca holds no PEM certificate",
        ),
        (
            &["provider.url=http://provider.example"],
            "provider.url must be an https:// URL",
        ),
        (&["auth.tokens.existingSecret="], "no authentication"),
        (
            &["auth.oidc.issuerURL=https://login.example", "auth.oidc.clientID=kbind"],
            "OIDC needs sessionKey.existingSecret",
        ),
        (&["issuer.rbacDelegation=held"], "needs issuer.delegatedGroups"),
        (
            &["issuer.rbacDelegation=admin"],
            "issuer.rbacDelegation must be escalate or held",
        ),
        (&["reaper.reapObjects.enabled=true"], "needs reaper.reapObjects.groups"),
    ];
    for (sets, reason) in cases {
        let err = template(&helm, &set_args(sets))
            .err()
            .unwrap_or_else(|| panic!("{sets:?} rendered"));
        assert!(err.contains(reason), "{sets:?}: {err}");
    }
    // The default provider name is the release name, which may hold dots a DNS label may not.
    let err = template_release(&helm, "kbind.backend", &[]).expect_err("rendered");
    assert!(
        err.contains("set provider.name (it defaults to the release name)"),
        "{err}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_object_is_accepted_with_default_and_non_default_values() {
    let Some(helm) = helm() else { return };
    // The last: one namespace for ServiceAccounts and Leases, rendered once, no names clashing.
    for objects in [
        render(&helm, &[]),
        render_ci(&helm),
        render(&helm, &["grantsNamespace.name=kbind"]),
    ] {
        install(&objects).await;
    }
}

#[tokio::test(start_paused = true)]
async fn the_gateway_can_write_grants_and_mint_tokens_and_no_more() {
    let Some(helm) = helm() else { return };
    let (cluster, admin) = install(&render(&helm, &[])).await;
    install_export(&admin).await;
    let gateway = as_service_account(&cluster, GATEWAY);
    let name = grant(&gateway, "token:alice", LIVE, &["team-a"]).await;
    assert!(grant_exists(&gateway, &name).await);
    gateway.list(&exports(), None, &Default::default()).await.unwrap();
    gateway.get(&namespaces(), None, "kube-system").await.unwrap();
    gateway
        .list(&leases(), Some(LEASE_NS), &Default::default())
        .await
        .unwrap();

    // A token for a Grant's ServiceAccount, in the grants namespace only.
    let sa = |ns: &str| {
        object(json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"namespace": ns, "name": name}}))
    };
    let sas = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
    for ns in ["kbind-grants", "default"] {
        admin
            .create(&sas, Some(ns), &sa(ns), &PostParams::default())
            .await
            .unwrap();
    }
    let request = json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}});
    gateway
        .create_subresource(&sas, Some("kbind-grants"), &name, "token", &request)
        .await
        .unwrap();
    assert_forbidden(
        gateway
            .create_subresource(&sas, Some("default"), &name, "token", &request)
            .await,
        "a token outside the grants namespace",
    );
    assert_forbidden(
        gateway
            .create(&sas, Some("kbind-grants"), &sa("kbind-grants"), &PostParams::default())
            .await,
        "creating a ServiceAccount",
    );
    let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    assert_forbidden(
        gateway.list(&secrets, None, &Default::default()).await,
        "listing Secrets",
    );
    assert_forbidden(
        gateway
            .delete(&namespaces(), None, "default", &Default::default())
            .await,
        "deleting a namespace",
    );
    assert_forbidden(
        create(&gateway, &role("default", "r", json!([]))).await,
        "creating a Role",
    );
}

/// What the issuer writes for a Grant of widgets in `team-a`: a Role on the Export's resource and
/// related Secrets, bound to the Grant's ServiceAccount.
async fn issue_role(issuer: &Arc<dyn ClusterClient>) -> Result<(), Error> {
    let rules = json!([
        {"apiGroups": ["example.org"], "resources": ["widgets", "widgets/status"],
         "verbs": ["get", "list", "watch", "create", "update", "patch", "delete"]},
        {"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]},
    ]);
    create(issuer, &role("team-a", "kbind-grant", rules)).await?;
    create(
        issuer,
        &role_binding("team-a", "kbind-grant", ("kbind-grants", "grant-1")),
    )
    .await?;
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn the_issuer_can_delegate_an_exports_resources_with_escalate_or_with_held_rights() {
    let Some(helm) = helm() else { return };
    for sets in [
        &[][..],
        &[
            "issuer.rbacDelegation=held",
            "issuer.delegatedGroups={example.org}",
            "issuer.delegateRelatedResources=true",
        ][..],
    ] {
        let (cluster, admin) = install(&render(&helm, sets)).await;
        install_export(&admin).await;
        let issuer = as_service_account(&cluster, CONTROLLER);
        let ns = json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}});
        create(&issuer, &ns)
            .await
            .unwrap_or_else(|e| panic!("{sets:?}: claiming a namespace: {e}"));
        issue_role(&issuer)
            .await
            .unwrap_or_else(|e| panic!("{sets:?}: issuing a Role: {e}"));
        let sa = json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"namespace": "kbind-grants", "name": "grant-1"}});
        create(&issuer, &sa).await.unwrap();
        lease(&issuer, LIVE).await;
        // unclaim() removes a namespace a refused attempt created (issuer_chart.rs pins the rules).
        issuer
            .delete(&namespaces(), None, "team-a", &Default::default())
            .await
            .unwrap_or_else(|e| panic!("{sets:?}: the issuer removing a namespace it claimed: {e}"));
        let sa_elsewhere =
            json!({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"namespace": "default", "name": "x"}});
        assert_forbidden(
            create(&issuer, &sa_elsewhere).await,
            "a ServiceAccount outside the grants namespace",
        );
    }
    // Held rights without the related resources: a Role handing out Secrets is refused.
    let (cluster, admin) = install(&render(
        &helm,
        &["issuer.rbacDelegation=held", "issuer.delegatedGroups={example.org}"],
    ))
    .await;
    install_export(&admin).await;
    let issuer = as_service_account(&cluster, CONTROLLER);
    create(
        &admin,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "team-a"}}),
    )
    .await
    .unwrap();
    assert_forbidden(issue_role(&issuer).await, "delegating Secrets the issuer does not hold");
    // ...and in held mode the issuer reads no Secret itself unless told to.
    let secrets = ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&());
    assert_forbidden(
        issuer.list(&secrets, None, &Default::default()).await,
        "the issuer listing Secrets",
    );
}

#[tokio::test(start_paused = true)]
async fn the_reaper_deletes_grants_on_its_chart_rbac_and_nothing_else_unless_told() {
    let Some(helm) = helm() else { return };
    // Without the issuer, whose rights the same ServiceAccount would otherwise have too.
    let (cluster, admin) = install(&render(&helm, &["issuer.enabled=false"])).await;
    install_export(&admin).await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let reaper_client = as_service_account(&cluster, CONTROLLER);
    let mut reaper = Running::start(&reaper_client, options(false, false));
    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert_eq!(actions.len(), 1, "{actions:?}");
    assert!(!grant_exists(&admin, &silent).await);
    assert_eq!(survivors(&admin).await, EVERYTHING);
    assert_forbidden(
        reaper_client
            .delete(&widgets(), Some("team-silent"), "w1", &Default::default())
            .await,
        "the reaper deleting a synced object without reapObjects",
    );
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

#[tokio::test(start_paused = true)]
async fn the_reaper_reaps_objects_and_namespaces_on_its_chart_rbac_with_reap_objects() {
    let Some(helm) = helm() else { return };
    let sets = [
        "issuer.enabled=false",
        "reaper.reapObjects.enabled=true",
        "reaper.reapObjects.groups={example.org}",
    ];
    let (cluster, admin) = install(&render(&helm, &sets)).await;
    install_export(&admin).await;
    let silent = world_with_objects(&admin).await;
    let beats = [LIVE, OTHER].map(|c| heartbeat(admin.clone(), c, SignedDuration::ZERO));
    let mut reaper = Running::start(&as_service_account(&cluster, CONTROLLER), options(true, false));
    let actions = reaper.until_grant(&silent, 2 * TTL).await;
    assert!(actions.contains(&kbind_backend::reaper::Action {
        consumer: SILENT.into(),
        target: Target::Namespace {
            name: "team-silent".into()
        },
        performed: true,
    }));
    eventually("the silent consumer's objects to go", || async {
        survivors(&admin).await
            == [
                "w3",
                "w4",
                "w5",
                "g-live",
                "c1",
                "ns/team-live",
                "ns/shared",
                "ns/carols",
                "ns/legacy",
            ]
    })
    .await;
    beats.iter().for_each(|b| b.abort());
    reaper.stop().await;
}

/// A Deployment's container run on this machine as a kubelet would run it: the real
/// `kbind-backend` binary with exactly the rendered args, but for two rewrites a pod needs no
/// rewrite for — each volume's mountPath becomes a folder holding what the kubelet would mount
/// (the ConfigMap or Secret as it is in the cluster), and each `0.0.0.0:PORT` listen address a
/// free loopback port. The ServiceAccount's token (a TokenRequest, as a projected token) reaches
/// it through `KBIND_KUBECONFIG`, the environment's stand-in for the in-cluster config.
struct Pod {
    name: String,
    child: tokio::process::Child,
    /// Where each container port is served.
    ports: std::collections::HashMap<u64, std::net::SocketAddr>,
    container: Value,
}

impl Pod {
    async fn start(
        admin: &Arc<dyn ClusterClient>,
        cluster: &children::FakeCluster,
        deployment: &Value,
        root: &std::path::Path,
        lines: &children::Lines,
    ) -> Pod {
        let name = name_of(deployment).to_string();
        let spec = &deployment["spec"]["template"]["spec"];
        let container = spec["containers"][0].clone();
        let root = root.join(&name);
        std::fs::create_dir_all(&root).unwrap();

        let sa = spec["serviceAccountName"].as_str().unwrap();
        let sas = ApiResource::erase::<k8s_openapi::api::core::v1::ServiceAccount>(&());
        let request =
            json!({"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"audiences": []}});
        let answer = admin
            .create_subresource(&sas, Some(NAMESPACE), sa, "token", &request)
            .await
            .unwrap_or_else(|e| panic!("a token for ServiceAccount {sa}: {e}"));
        let token = answer["status"]["token"].as_str().unwrap();
        let (server, ca) = cluster.server_and_ca();
        let ca_file = root.join("sa-ca.crt");
        std::fs::write(&ca_file, ca).unwrap();
        let kubeconfig = root.join("in-cluster.kubeconfig");
        let kubeconfig_yaml = json!({
            "apiVersion": "v1", "kind": "Config", "current-context": "pod",
            "clusters": [{"name": "c", "cluster": {"server": server, "certificate-authority": ca_file}}],
            "users": [{"name": "sa", "user": {"token": token}}],
            "contexts": [{"name": "pod", "context": {"cluster": "c", "user": "sa"}}],
        });
        std::fs::write(&kubeconfig, kubeconfig_yaml.to_string()).unwrap();

        // The kubelet's part: each mount holds its volume's keys as files.
        let mut mounts = Vec::new();
        for mount in container["volumeMounts"].as_array().into_iter().flatten() {
            let mount_path = mount["mountPath"].as_str().unwrap().to_string();
            let volume = spec["volumes"]
                .as_array()
                .unwrap()
                .iter()
                .find(|v| v["name"] == mount["name"])
                .unwrap_or_else(|| panic!("{name}: no volume {}", mount["name"]));
            let local = root.join(mount_path.trim_start_matches('/'));
            std::fs::create_dir_all(&local).unwrap();
            let (res, source, decode) = if let Some(cm) = volume["configMap"]["name"].as_str() {
                (configmaps(), cm, false)
            } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
                (
                    ApiResource::erase::<k8s_openapi::api::core::v1::Secret>(&()),
                    secret,
                    true,
                )
            } else {
                panic!("{name}: volume {volume} is neither a ConfigMap nor a Secret");
            };
            let found = admin
                .get(&res, Some(NAMESPACE), source)
                .await
                .unwrap_or_else(|e| panic!("{name}: the pod would wait for {} {source}: {e}", res.kind));
            let data = found.data["data"].as_object().cloned().unwrap_or_default();
            for (key, value) in data {
                let text = value.as_str().unwrap();
                let bytes = if decode {
                    use base64::Engine;
                    base64::engine::general_purpose::STANDARD.decode(text).unwrap()
                } else {
                    text.as_bytes().to_vec()
                };
                std::fs::write(local.join(key), bytes).unwrap();
            }
            mounts.push((mount_path, local));
        }

        let mut ports = std::collections::HashMap::new();
        let args: Vec<String> = container["args"]
            .as_array()
            .unwrap()
            .iter()
            .map(|arg| {
                let arg = arg.as_str().unwrap();
                if let Some((flag, port)) = arg.split_once("=0.0.0.0:") {
                    let local = children::free_addr();
                    ports.insert(port.parse().unwrap(), local);
                    return format!("{flag}={local}");
                }
                let mut arg = arg.to_string();
                for (mount_path, local) in &mounts {
                    arg = arg.replace(&format!("={mount_path}/"), &format!("={}/", local.display()));
                }
                arg
            })
            .collect();
        let mut child = tokio::process::Command::new(env!("CARGO_BIN_EXE_kbind-backend"))
            .args(&args)
            .env("KBIND_KUBECONFIG", &kubeconfig)
            .env_remove("KUBECONFIG")
            .env_remove("RUST_LOG")
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("kbind-backend starts");
        children::follow_stderr(&mut child, &name, lines.clone());
        Pod {
            name,
            child,
            ports,
            container,
        }
    }

    /// The URL of a probe (`livenessProbe`, `readinessProbe`) through its named port.
    fn probe_url(&self, probe: &str) -> String {
        let get = &self.container[probe]["httpGet"];
        assert!(
            get.is_object(),
            "{}: no {probe} with httpGet: {}",
            self.name,
            self.container
        );
        let port = self.port(get["port"].as_str().unwrap());
        format!("http://{port}{}", get["path"].as_str().unwrap())
    }

    /// Where the named container port is served.
    fn port(&self, name: &str) -> std::net::SocketAddr {
        let number = self.container["ports"]
            .as_array()
            .unwrap_or_else(|| panic!("{}: no ports", self.name))
            .iter()
            .find(|p| p["name"] == name)
            .unwrap_or_else(|| panic!("{}: no port named {name}", self.name))["containerPort"]
            .as_u64()
            .unwrap();
        *self
            .ports
            .get(&number)
            .unwrap_or_else(|| panic!("{}: nothing listens on container port {number}", self.name))
    }

    /// Waits until the kubelet would call both probes successful; a process that exits first
    /// (the crash loop) fails with its log.
    async fn until_ready(&mut self, http: &reqwest::Client, lines: &children::Lines) {
        for probe in ["livenessProbe", "readinessProbe"] {
            let url = self.probe_url(probe);
            let (name, child) = (self.name.clone(), &mut self.child);
            children::eventually(&format!("{name}'s {probe} {url}"), lines, async || {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!(
                        "{name} exited ({status}) before its {probe} passed: it would crash-loop; logs:\n{}",
                        children::dump(lines)
                    );
                }
                let response = http.get(&url).send().await.ok()?;
                response.status().is_success().then_some(())
            })
            .await;
        }
    }
}

/// What a provider's admin does before `helm install` (the chart README): the tokens Secret. The
/// ConfigMap kube-root-ca.crt the default values mount is fakeapi's, published in every namespace
/// as kube-controller-manager does.
async fn prepare(admin: &Arc<dyn ClusterClient>) {
    let tokens = json!({"apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": NAMESPACE, "name": "kbind-backend-tokens"},
        "stringData": {"tokens": "alice-secret-token-0123456789abcdef,alice\n"}});
    create(admin, &tokens).await.unwrap();
}

/// Runs each rendered Deployment's container until its probes pass; returns the running pods.
async fn run_deployments(
    objects: &[Value],
    admin: &Arc<dyn ClusterClient>,
    cluster: &children::FakeCluster,
    root: &std::path::Path,
    lines: &children::Lines,
) -> Vec<Pod> {
    let http = reqwest::Client::new();
    let mut pods = Vec::new();
    for deployment in objects.iter().filter(|o| kind_of(o) == "Deployment") {
        let mut pod = Pod::start(admin, cluster, deployment, root, lines).await;
        pod.until_ready(&http, lines).await;
        pods.push(pod);
    }
    pods
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_default_values_and_the_readme_install_run_healthy_and_the_controller_serves_reaper_metrics() {
    let Some(helm) = helm() else { return };
    let dir = tempfile::tempdir().unwrap();
    let lines = children::Lines::default();
    let cluster = children::FakeCluster::start(dir.path(), "provider", &lines).await;
    let admin: Arc<dyn ClusterClient> = Arc::new(children::client(&cluster.kubeconfig).await);

    // The chart's values as committed.
    let defaults = render(&helm, &[]);
    install_into(&admin, &defaults).await;
    prepare(&admin).await;
    let pods = run_deployments(&defaults, &admin, &cluster, &dir.path().join("defaults"), &lines).await;
    assert_eq!(pods.len(), 2, "a gateway and a controller");
    let controller = pods.iter().find(|p| p.name == CONTROLLER).unwrap();
    let metrics = reqwest::get(format!("http://{}/metrics", controller.port("http")))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains("kbind_reaper_leases"),
        "the controller's /metrics serves no kbind_reaper_*:\n{metrics}"
    );
    drop(pods);

    // The README's install: provider.url, provider.ca from a file, publicURL.
    let ca_file = dir.path().join("provider-ca.crt");
    std::fs::write(&ca_file, cluster.server_and_ca().1).unwrap();
    let readme = template(
        &helm,
        &[
            "--set",
            "provider.url=https://api.provider.example:6443",
            "--set-file",
            &format!("provider.ca={}", ca_file.display()),
            "--set",
            "publicURL=https://kbind.provider.example",
        ],
    )
    .unwrap();
    create(&admin, named(&readme, "ConfigMap", "kbind-backend-provider-ca"))
        .await
        .unwrap();
    let pods = run_deployments(&readme, &admin, &cluster, &dir.path().join("readme"), &lines).await;
    assert_eq!(pods.len(), 2);
}

#[test]
fn every_deployment_has_liveness_and_readiness_probes_on_a_declared_port() {
    let Some(helm) = helm() else { return };
    for objects in [
        render(&helm, &[]),
        render_ci(&helm),
        render(&helm, &["issuer.enabled=false"]),
    ] {
        for deployment in objects.iter().filter(|o| kind_of(o) == "Deployment") {
            let container = &deployment["spec"]["template"]["spec"]["containers"][0];
            let ports: Vec<&Value> = container["ports"]
                .as_array()
                .map(|p| p.iter().collect())
                .unwrap_or_default();
            for probe in ["livenessProbe", "readinessProbe"] {
                let port = &container[probe]["httpGet"]["port"];
                assert!(
                    ports.iter().any(|p| &p["name"] == port),
                    "{}: {probe} {} probes no declared port",
                    name_of(deployment),
                    container[probe]
                );
            }
        }
    }
}

/// `hack/image COMPONENT` builds the image each chart runs: the chart's repository and appVersion,
/// a FROM scratch image whose entrypoint is the component's binary (the charts pass only args),
/// running as the user the chart's securityContext names, from the production build of that binary.
#[test]
fn hack_image_builds_the_image_each_chart_runs() {
    let root = repo_root();
    for (component, chart) in [
        ("konnector", "deploy/charts/konnector"),
        ("kbind-backend", "deploy/charts/kbind-backend"),
    ] {
        let output = std::process::Command::new("bash")
            .arg(root.join("hack/image"))
            .args(["--dry-run", component])
            .env_remove("CARGO_TARGET_DIR")
            .output()
            .expect("bash runs hack/image");
        assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
        let plan: std::collections::HashMap<String, String> = String::from_utf8(output.stdout)
            .unwrap()
            .lines()
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let values: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(root.join(chart).join("values.yaml")).unwrap()).unwrap();
        let chart_yaml: Value =
            serde_saphyr::from_str(&std::fs::read_to_string(root.join(chart).join("Chart.yaml")).unwrap()).unwrap();
        let expected_image = format!(
            "{}:{}",
            values["image"]["repository"].as_str().unwrap(),
            chart_yaml["appVersion"].as_str().unwrap()
        );
        assert_eq!(
            plan["image"], expected_image,
            "{component}: the image the chart pulls by default"
        );
        let mut cargo = format!("-p {component} --bin {component}");
        if component == "konnector" {
            cargo.push_str(" --no-default-features");
        }
        assert!(plan["cargo"].contains(&cargo), "{component}: {}", plan["cargo"]);
        assert!(plan["cargo"].contains("--release --locked"), "{}", plan["cargo"]);
        assert!(
            plan["cargo"].ends_with("--target x86_64-unknown-linux-musl"),
            "{}",
            plan["cargo"]
        );
        assert!(plan["binary"].ends_with(&format!("x86_64-unknown-linux-musl/release/{component}")));

        let containerfile = std::fs::read_to_string(root.join(&plan["containerfile"])).unwrap();
        let instructions: Vec<&str> = containerfile
            .lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .collect();
        let security = &values["podSecurityContext"];
        let user = format!("USER {}:{}", security["runAsUser"], security["runAsGroup"]);
        for expected in [
            "FROM scratch".to_string(),
            format!("COPY {component} /{component}"),
            user,
            format!("ENTRYPOINT [\"/{component}\"]"),
        ] {
            assert!(
                instructions.contains(&expected.as_str()),
                "{}: no {expected:?} in {instructions:?}",
                plan["containerfile"]
            );
        }
        assert_eq!(
            instructions[0], "FROM scratch",
            "{component}: one stage, nothing under the binary"
        );
        assert_eq!(security["runAsNonRoot"], true);
    }
}
