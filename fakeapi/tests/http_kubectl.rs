//! The real kubectl against the router over plain HTTP on 127.0.0.1 (a random port).
//!
//! Run with `cargo test -p fakeapi --test http_kubectl -- --ignored` on a machine with kubectl.

use std::path::{Path, PathBuf};
use std::process::Command;

use fakeapi::{FakeCluster, UserInfo};

const TOKEN: &str = "kubectl-admin";

/// A fake cluster served on a random local port, and a kubeconfig pointing at it.
struct Served {
    _runtime: tokio::runtime::Runtime,
    dir: tempfile::TempDir,
    kubeconfig: PathBuf,
}

fn serve() -> Served {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let port = runtime.block_on(async {
        let cluster = FakeCluster::builder("kubectl")
            .clock(std::sync::Arc::new(kbind_cluster::SystemClock))
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        // kubectl sends kubeconfig credentials only to TLS servers; here an outer layer plays
        // the part TLS client-certificate authentication plays in front of the router.
        let app = fakeapi::http::router(cluster).layer(axum::middleware::map_request(
            |mut request: axum::extract::Request| async move {
                request.extensions_mut().insert(UserInfo::admin());
                request
            },
        ));
        tokio::spawn(async move { axum::serve(listener, app).await });
        port
    });
    let dir = tempfile::tempdir().unwrap();
    let kubeconfig = dir.path().join("kubeconfig");
    std::fs::write(
        &kubeconfig,
        format!(
            "apiVersion: v1\nkind: Config\nclusters:\n- name: fake\n  cluster:\n    server: http://127.0.0.1:{port}\n\
             users:\n- name: admin\n  user:\n    token: {TOKEN}\ncontexts:\n- name: fake\n  context:\n    cluster: fake\n    user: admin\n    namespace: default\n\
             current-context: fake\n"
        ),
    )
    .unwrap();
    Served {
        _runtime: runtime,
        dir,
        kubeconfig,
    }
}

impl Served {
    /// Runs kubectl; its stdout on success, its stderr (as `Err`) on failure.
    fn kubectl(&self, args: &[&str]) -> Result<String, String> {
        let out = Command::new("kubectl")
            .args(args)
            .env("KUBECONFIG", &self.kubeconfig)
            .env("HOME", self.dir.path())
            .output()
            .expect("kubectl on PATH");
        let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
        let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
        if out.status.success() {
            if !stderr.is_empty() {
                eprintln!("kubectl {args:?} warned:\n{stderr}");
            }
            Ok(stdout)
        } else {
            Err(format!("{stderr}{stdout}"))
        }
    }

    fn ok(&self, args: &[&str]) -> String {
        self.kubectl(args)
            .unwrap_or_else(|e| panic!("kubectl {args:?} failed:\n{e}"))
    }

    fn file(&self, name: &str, content: &str) -> String {
        let path: &Path = &self.dir.path().join(name);
        std::fs::write(path, content).unwrap();
        path.display().to_string()
    }
}

/// The whitespace-separated cells of the output line whose first cell is `first`.
fn row<'a>(output: &'a str, first: &str) -> Vec<&'a str> {
    output
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .find(|cells| cells.first() == Some(&first))
        .unwrap_or_else(|| panic!("no row {first} in:\n{output}"))
}

const DEPLOYMENT: &str = "apiVersion: apps/v1
kind: Deployment
metadata:
  name: web
  labels:
    app: web
spec:
  replicas: 2
  selector:
    matchLabels:
      app: web
  template:
    metadata:
      labels:
        app: web
    spec:
      containers:
      - name: nginx
        image: nginx:1.27
        ports:
        - containerPort: 80
      - name: sidecar
        image: busybox
";

const WIDGET_CRD: &str = r#"apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.example.org
spec:
  group: example.org
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList, shortNames: [wd]}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size: {type: integer}
    additionalPrinterColumns:
    - {name: Size, type: integer, jsonPath: .spec.size}
    - {name: Age, type: date, jsonPath: .metadata.creationTimestamp}
"#;

#[test]
#[ignore = "needs kubectl on PATH"]
fn kubectl_works_against_the_router() {
    let s = serve();
    assert!(s.ok(&["version", "-o", "json"]).contains("\"minor\": \"35\""));

    let resources = s.ok(&["api-resources"]);
    assert!(resources.contains("deployments"), "{resources}");
    assert!(resources.contains("deploy"), "{resources}");

    let namespaces = s.ok(&["get", "namespaces"]);
    assert!(namespaces.starts_with("NAME"), "{namespaces}");
    assert_eq!(row(&namespaces, "kube-system")[1], "Active", "{namespaces}");

    let a = s.file(
        "a.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: a\ndata:\n  x: \"1\"\n  w: \"2\"\n",
    );
    s.ok(&["create", "-f", &a]);
    // Typed clients send protobuf bodies.
    s.ok(&["create", "configmap", "literal", "--from-literal=k=v"]);
    assert_eq!(s.ok(&["get", "cm", "literal", "-o", "jsonpath={.data.k}"]), "v");
    s.ok(&["create", "secret", "generic", "s", "--from-literal=password=hunter2"]);
    assert_eq!(
        s.ok(&["get", "secret", "s", "-o", "jsonpath={.data.password}"]),
        "aHVudGVyMg=="
    );
    s.ok(&["create", "namespace", "team-a"]);
    s.ok(&["create", "serviceaccount", "robot", "-n", "team-a"]);
    s.ok(&[
        "create",
        "role",
        "reader",
        "--verb=get,list",
        "--resource=configmaps",
        "-n",
        "team-a",
    ]);
    s.ok(&[
        "create",
        "rolebinding",
        "robot-reads",
        "--role=reader",
        "--serviceaccount=team-a:robot",
        "-n",
        "team-a",
    ]);
    let token = s.ok(&["create", "token", "robot", "-n", "team-a"]);
    assert_eq!(token.split('.').count(), 3, "a JWT: {token}");
    let bindings = s.ok(&["get", "rolebindings", "-n", "team-a", "-o", "wide"]);
    assert_eq!(row(&bindings, "robot-reads")[1], "Role/reader", "{bindings}");
    let cms = s.ok(&["get", "configmaps"]);
    assert_eq!(row(&cms, "a")[1], "2", "{cms}");
    assert!(s.ok(&["get", "cm", "a", "-o", "jsonpath={.data.x}"]) == "1");

    s.ok(&["patch", "cm", "a", "--type", "merge", "-p", r#"{"data":{"z":"3"}}"#]);
    s.ok(&[
        "patch",
        "cm",
        "a",
        "--type",
        "json",
        "-p",
        r#"[{"op":"remove","path":"/data/w"}]"#,
    ]);
    s.ok(&["patch", "cm", "a", "-p", r#"{"data":{"v":"4"}}"#]);
    assert_eq!(
        s.ok(&["get", "cm", "a", "-o", "jsonpath={.data}"]),
        r#"{"v":"4","x":"1","z":"3"}"#
    );

    // Client-side apply: create, then a strategic-merge three-way patch keyed by container name.
    let deploy = s.file("deploy.yaml", DEPLOYMENT);
    s.ok(&["apply", "-f", &deploy]);
    let edited = s.file("deploy2.yaml", &DEPLOYMENT.replace("nginx:1.27", "nginx:1.28"));
    s.ok(&["apply", "-f", &edited]);
    let images = s.ok(&[
        "get",
        "deploy",
        "web",
        "-o",
        "jsonpath={.spec.template.spec.containers[*].image}",
    ]);
    assert_eq!(images, "nginx:1.28 busybox");
    let deploys = s.ok(&["get", "deployments", "-o", "wide"]);
    assert!(
        deploys.contains("READY") && deploys.contains("nginx,sidecar"),
        "{deploys}"
    );

    // Server-side apply from YAML, then a conflict with another manager.
    let cm = s.file(
        "cm.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: v\n",
    );
    s.ok(&["apply", "--server-side", "-f", &cm]);
    let other = s.file(
        "cm2.yaml",
        "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ssa\ndata:\n  k: other\n",
    );
    let conflict = s
        .kubectl(&["apply", "--server-side", "--field-manager=other", "-f", &other])
        .unwrap_err();
    assert!(conflict.contains("conflict"), "{conflict}");
    s.ok(&[
        "apply",
        "--server-side",
        "--field-manager=other",
        "--force-conflicts",
        "-f",
        &other,
    ]);
    assert_eq!(s.ok(&["get", "cm", "ssa", "-o", "jsonpath={.data.k}"]), "other");

    // CRDs: printer columns, short names, explain from OpenAPI v3.
    let crd = s.file("crd.yaml", WIDGET_CRD);
    s.ok(&["apply", "-f", &crd]);
    s.ok(&[
        "wait",
        "--for=condition=Established",
        "crd/widgets.example.org",
        "--timeout=30s",
    ]);
    let widget = s.file(
        "w.yaml",
        "apiVersion: example.org/v1\nkind: Widget\nmetadata:\n  name: w1\nspec:\n  size: 3\n",
    );
    s.ok(&["apply", "-f", &widget]);
    let widgets = s.ok(&["get", "wd"]);
    assert_eq!(row(&widgets, "NAME"), ["NAME", "SIZE", "AGE"], "{widgets}");
    assert_eq!(row(&widgets, "w1")[1], "3", "{widgets}");
    let explained = s.ok(&["explain", "widgets.spec"]);
    assert!(explained.contains("size"), "{explained}");

    s.ok(&["delete", "cm", "a"]);
    assert!(s.kubectl(&["get", "cm", "a"]).unwrap_err().contains("NotFound"));
    s.ok(&["delete", "-f", &widget]);
    s.ok(&["delete", "-f", &deploy]);

    // A kind with no CRD: kubectl reads /openapi/v2 to validate, and must then say what a real
    // server makes it say (a wrong content type there gave "mime: unexpected content after
    // media subtype" instead).
    let gizmo = s.file(
        "gizmo.yaml",
        "apiVersion: example.org/v1\nkind: Gizmo\nmetadata: {name: g1, namespace: default}\n",
    );
    let refused = s.kubectl(&["apply", "-f", &gizmo]).unwrap_err();
    assert!(
        refused.contains("resource mapping not found") && refused.contains("ensure CRDs are installed first"),
        "{refused}"
    );
}
