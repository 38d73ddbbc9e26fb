//! The charts' alerts and dashboards against the binaries that feed them.
//!
//! - Every rule and dashboard expression parses as PromQL (`promql-parser`), and its labels agree
//!   (`by`, `on`, both sides of a comparison, a legend's or an annotation's `{{x}}`).
//! - In a running world — `fakeapi serve` provider and consumer, `kbind-backend run --gateway
//!   --issuer --reaper`, a bind and its pickup applied, `konnector run` syncing a widget both
//!   ways, then the provider throttling the konnector's heartbeat — each binary's `/metrics`
//!   exports every metric name and label its chart's rules and dashboard use.
//! - Every alert has its section in docs/runbooks.md, which its `runbook_url` names.
//! - The charts, rendered with monitoring on, carry the rule files and dashboards as they are.

#[path = "../../tests/support/children.rs"]
mod children;
#[path = "../../tests/support/helm.rs"]
mod helm;
mod monitoring_check;

use std::collections::BTreeSet;
use std::path::Path;

use children::*;
use kbind_api::service::{BindRequest, BindResponse, path};
use kbind_cluster::{ClusterClient, ClusterClientExt, Patch, PatchParams};
use monitoring_check::*;
use serde_json::{Value, json};

const CHARTS: [(&str, &str); 2] = [("konnector", "the konnector"), ("kbind-backend", "kbind-backend")];
const RUNBOOKS: &str = "https://github.com/kbind/kbind/blob/main/docs/runbooks.md";
const TOKEN: &str = "alice-secret-token-0123456789abcdef";
const TEAM: &str = "team-a";

#[test]
fn every_rule_and_dashboard_expression_parses_and_its_labels_agree() {
    let mut errors = Vec::new();
    let mut count = 0;
    for (chart, _) in CHARTS {
        for query in queries(chart) {
            count += 1;
            match analyse(&query, &Unknown) {
                Ok(analysis) => errors.extend(analysis.errors.into_iter().map(|e| format!("{chart}: {e}"))),
                Err(e) => errors.push(format!("{chart}: {e}")),
            }
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
    assert!(count > 20, "only {count} expressions found");
}

#[test]
fn every_alert_is_complete_and_has_the_runbook_section_its_runbook_url_names() {
    let runbooks_path = repo_root().join("docs/runbooks.md");
    let text = std::fs::read_to_string(&runbooks_path).expect("docs/runbooks.md");
    let sections = sections(&text);
    let mut errors = Vec::new();
    let mut alerts = BTreeSet::new();
    for (chart, _) in CHARTS {
        for alert in rules(chart).alerts {
            let place = format!("{chart}: rule {}", alert.name);
            if !alerts.insert(alert.name.clone()) {
                errors.push(format!("{place}: a second alert of that name"));
            }
            let rule = &alert.rule;
            if !matches!(
                rule["labels"]["severity"].as_str(),
                Some("critical" | "warning" | "info")
            ) {
                errors.push(format!("{place}: severity is not critical, warning or info"));
            }
            for annotation in ["summary", "description"] {
                if rule["annotations"][annotation].as_str().is_none_or(str::is_empty) {
                    errors.push(format!("{place}: no {annotation}"));
                }
            }
            if let Some(duration) = rule["for"].as_str()
                && !is_duration(duration)
            {
                errors.push(format!("{place}: for {duration:?} is not a Prometheus duration"));
            }
            let anchor = alert.name.to_lowercase();
            let want = format!("{RUNBOOKS}#{anchor}");
            if rule["annotations"]["runbook_url"].as_str() != Some(want.as_str()) {
                errors.push(format!("{place}: runbook_url is not {want}"));
            }
            match sections.get(&anchor) {
                None => errors.push(format!(
                    "{place}: docs/runbooks.md has no section \"## {}\"",
                    alert.name
                )),
                Some(section) => {
                    for part in ["**What it means.**", "**What to check.**", "**What to do.**"] {
                        if !section.contains(part) {
                            errors.push(format!("{place}: its runbook section has no {part}"));
                        }
                    }
                }
            }
        }
    }
    for anchor in sections.keys().filter(|a| a.starts_with("kbind")) {
        if !alerts.iter().any(|a| a.to_lowercase() == *anchor) {
            errors.push(format!("docs/runbooks.md: section #{anchor} belongs to no alert"));
        }
    }
    assert!(errors.is_empty(), "{}", errors.join("\n"));
}

/// A Prometheus duration such as `5m` or `1h30m`.
fn is_duration(text: &str) -> bool {
    let mut digits = false;
    let mut rest = text;
    while !rest.is_empty() {
        let number = rest.len() - rest.trim_start_matches(|c: char| c.is_ascii_digit()).len();
        if number == 0 {
            return false;
        }
        rest = &rest[number..];
        let unit = ["ms", "s", "m", "h", "d", "w", "y"]
            .into_iter()
            .find(|u| rest.starts_with(u));
        let Some(unit) = unit else { return false };
        rest = &rest[unit.len()..];
        digits = true;
    }
    digits
}

#[test]
fn the_check_catches_misspelled_metrics_missing_labels_and_sides_that_cannot_match() {
    let text = "\
# TYPE kbind_api_errors counter
kbind_api_errors_total{cluster=\"provider\",code=\"404\"} 1
# TYPE kbind_spec_up_seconds histogram
kbind_spec_up_seconds_bucket{le=\"0.5\",api=\"w.example.org\"} 1
kbind_spec_up_seconds_sum{api=\"w.example.org\"} 0.1
kbind_spec_up_seconds_count{api=\"w.example.org\"} 1
# TYPE kbind_conflicts gauge
kbind_conflicts{api=\"w.example.org\"} 0
# TYPE kbind_provider_failed_requests gauge
# EOF
";
    let exposition = Exposition::parse(text).unwrap();
    let query = |expr: &str, uses: &[&str]| Query {
        place: "test".into(),
        expr: expr.into(),
        uses: uses.iter().map(|u| u.to_string()).collect(),
    };
    let errors = |q: Query| check("the konnector", &[q], &exposition, &[]).0;
    // Right: suffixes of counters and histograms, `le` on buckets.
    for ok in [
        query(
            "sum by (cluster, code) (rate(kbind_api_errors_total{code=\"429\"}[5m])) > 0",
            &["code"],
        ),
        query(
            "histogram_quantile(0.99, sum by (api, le) (rate(kbind_spec_up_seconds_bucket[5m])))",
            &["api"],
        ),
        query(
            "sum by (api) (rate(kbind_spec_up_seconds_count[5m])) / sum by (api) (rate(kbind_spec_up_seconds_sum[5m]))",
            &[],
        ),
        query(
            "max by (api) (kbind_conflicts) > 0 unless on (api) max by (api) (kbind_conflicts) > 5",
            &["api"],
        ),
    ] {
        assert_eq!(errors(ok.clone()), Vec::<String>::new(), "{}", ok.expr);
    }
    for (bad, says) in [
        (
            query("max(kbind_conflict) > 0", &[]),
            "kbind_conflict is not exported by the konnector (it exports kbind_conflicts)",
        ),
        (
            query("rate(kbind_api_errors[5m])", &[]),
            "kbind_api_errors is not exported",
        ),
        (
            query("kbind_spec_up_seconds > 1", &[]),
            "kbind_spec_up_seconds is not exported",
        ),
        (
            query("max(kbind_conflicts{kind=\"x\"})", &[]),
            "kbind_conflicts has no label \"kind\"",
        ),
        (
            query("max by (connection) (kbind_conflicts)", &[]),
            "by names the label \"connection\"",
        ),
        (query("max(kbind_conflicts) > 0", &["api"]), "uses the label \"api\""),
        (
            query(
                "histogram_quantile(0.9, sum by (api) (rate(kbind_spec_up_seconds_bucket[5m])))",
                &[],
            ),
            "without the label \"le\"",
        ),
        (
            query("sum by (api) (kbind_conflicts) / sum(kbind_conflicts)", &[]),
            "carry different labels",
        ),
        (
            query("max(kbind_provider_failed_requests)", &[]),
            "exported no series of it",
        ),
        (query("max(kbind_conflicts[5m]", &[]), "does not parse"),
    ] {
        let found = errors(bad.clone());
        assert!(
            found.iter().any(|e| e.contains(says)),
            "{}: {found:#?}, not {says:?}",
            bad.expr
        );
    }
    // A name another change will export is taken as declared, and reported as used.
    let assumed: &[(&str, &[&str])] = &[("kbind_new_total", &["connection"])];
    let (found, used) = check(
        "the konnector",
        &[query(
            "sum by (connection) (rate(kbind_new_total[5m]))",
            &["connection"],
        )],
        &exposition,
        assumed,
    );
    assert_eq!(
        (found, used),
        (Vec::<String>::new(), vec!["kbind_new_total".to_string()])
    );
    assert_eq!(
        grafana_expr("rate(x[$__rate_interval]) + rate(y[${__interval}])"),
        "rate(x[5m]) + rate(y[5m])"
    );
    assert_eq!(
        legend_labels("{{kind}} {{ state }}"),
        ["kind", "state"].map(String::from).into()
    );
}

/// `helm template` of `chart` with `sets`, one JSON value per document.
fn render(helm: &Path, chart: &str, sets: &[&str]) -> Vec<Value> {
    let mut command = std::process::Command::new(helm);
    command
        .arg("template")
        .arg(chart)
        .arg(repo_root().join("deploy/charts").join(chart))
        .args(["--namespace", "monitoring-test"]);
    for set in sets {
        command.args(["--set", set]);
    }
    let output = command.output().expect("helm runs");
    assert!(
        output.status.success(),
        "helm template {chart} {sets:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    let text = String::from_utf8(output.stdout).expect("UTF-8");
    let documents: Vec<Value> = serde_saphyr::from_multiple(&text).expect("helm renders YAML");
    documents.into_iter().filter(|d| !d.is_null()).collect()
}

fn of_kind<'a>(documents: &'a [Value], kind: &str) -> Vec<&'a Value> {
    documents.iter().filter(|d| d["kind"] == kind).collect()
}

#[test]
fn the_charts_render_their_rule_files_and_dashboards_as_they_are_only_when_asked() {
    let Some(helm) = helm::helm() else { return };
    let on = [
        "monitoring.podMonitor.enabled=true",
        "monitoring.prometheusRule.enabled=true",
        "monitoring.dashboard.enabled=true",
    ];
    for (chart, _) in CHARTS {
        let off = render(&helm, chart, &[]);
        for kind in ["PrometheusRule", "PodMonitor"] {
            assert!(of_kind(&off, kind).is_empty(), "{chart} renders a {kind} by default");
        }
        assert!(
            !serde_json::to_string(&off).unwrap().contains("grafana_dashboard"),
            "{chart} renders a dashboard by default"
        );

        let rendered = render(&helm, chart, &on);
        let rule = of_kind(&rendered, "PrometheusRule");
        assert_eq!(rule.len(), 1, "{chart}: one PrometheusRule");
        assert_eq!(rule[0]["apiVersion"], "monitoring.coreos.com/v1");
        assert_eq!(
            rule[0]["spec"],
            rules(chart).spec,
            "{chart}: the PrometheusRule is not the rule file"
        );

        let dashboards: Vec<&Value> = of_kind(&rendered, "ConfigMap")
            .into_iter()
            .filter(|c| c["metadata"]["labels"]["grafana_dashboard"] == "1")
            .collect();
        assert_eq!(dashboards.len(), 1, "{chart}: one dashboard ConfigMap");
        let data = dashboards[0]["data"].as_object().expect("data");
        assert_eq!(data.len(), 1);
        let (key, json) = data.iter().next().unwrap();
        assert!(key.ends_with(".json"), "{key}");
        let parsed: Value = serde_json::from_str(json.as_str().unwrap()).expect("the dashboard is JSON");
        assert_eq!(
            parsed,
            dashboard(chart),
            "{chart}: the ConfigMap's dashboard is not the file"
        );

        // The PodMonitor scrapes a named port of the pods it selects.
        let monitor = of_kind(&rendered, "PodMonitor");
        assert_eq!(monitor.len(), 1, "{chart}: one PodMonitor");
        let port = monitor[0]["spec"]["podMetricsEndpoints"][0]["port"]
            .as_str()
            .expect("a port name");
        let selector = monitor[0]["spec"]["selector"]["matchLabels"]
            .as_object()
            .expect("matchLabels");
        let deployments = of_kind(&rendered, "Deployment");
        assert!(!deployments.is_empty());
        for deployment in deployments {
            let pod = &deployment["spec"]["template"];
            let name = deployment["metadata"]["name"].as_str().unwrap_or_default();
            for (key, value) in selector {
                assert_eq!(
                    &pod["metadata"]["labels"][key], value,
                    "{chart}: {name} is not selected"
                );
            }
            let ports: Vec<&str> = pod["spec"]["containers"][0]["ports"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|p| p["name"].as_str())
                .collect();
            assert!(
                ports.contains(&port),
                "{chart}: {name} has no port {port:?} ({ports:?})"
            );
        }

        // Runbook links follow the value; nothing else changes.
        let wiki = "https://wiki.example.com/kbind/runbooks";
        let moved = render(
            &helm,
            chart,
            &[on[1], &format!("monitoring.prometheusRule.runbookBaseURL={wiki}")],
        );
        let moved = of_kind(&moved, "PrometheusRule")[0]["spec"].to_string();
        assert_eq!(moved, rules(chart).spec.to_string().replace(RUNBOOKS, wiki));
        assert!(!moved.contains(RUNBOOKS));
    }
}

/// A plain HTTP/1.1 GET of `path` at `addr`: the body of a 200 answer.
async fn get(addr: std::net::SocketAddr, path: &str) -> Option<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.ok()?;
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
    stream.write_all(request.as_bytes()).await.ok()?;
    let mut response = String::new();
    stream.read_to_string(&mut response).await.ok()?;
    let (head, body) = response.split_once("\r\n\r\n")?;
    head.starts_with("HTTP/1.1 200").then(|| body.to_string())
}

/// The body of a chunked HTTP/1.1 answer, or the body as it is.
fn unchunk(body: &str) -> String {
    let mut out = String::new();
    let mut rest = body;
    loop {
        let Some((size, after)) = rest.split_once("\r\n") else {
            return body.to_string();
        };
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else {
            return body.to_string();
        };
        if size == 0 {
            return out;
        }
        let Some(chunk) = after.get(..size) else {
            return body.to_string();
        };
        out.push_str(chunk);
        rest = after.get(size + 2..).unwrap_or_default();
    }
}

/// `/metrics` of `addr`, read.
async fn scrape(addr: std::net::SocketAddr) -> Option<Exposition> {
    let body = unchunk(&get(addr, "/metrics").await?);
    Some(Exposition::parse(&body).unwrap_or_else(|e| panic!("/metrics of {addr}: {e}\n{body}")))
}

/// Whether `exposition` has a series of `sample`.
fn has_series(exposition: &Exposition, sample: &str) -> bool {
    exposition.selectable().get(sample).is_some_and(Option::is_some)
}

/// The admin token and CA of a `fakeapi serve` kubeconfig: what its fault API needs.
fn admin_http(cluster: &FakeCluster) -> (reqwest::Client, String, String) {
    let text = std::fs::read_to_string(&cluster.kubeconfig).expect("kubeconfig");
    let kubeconfig: Value = serde_saphyr::from_str(&text).expect("kubeconfig parses");
    let token = kubeconfig["users"][0]["user"]["token"]
        .as_str()
        .expect("an admin token")
        .to_string();
    let (server, ca) = cluster.server_and_ca();
    let client = reqwest::Client::builder()
        .add_root_certificate(reqwest::Certificate::from_pem(ca.as_bytes()).expect("PEM"))
        .build()
        .expect("client");
    (client, server, token)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_running_binaries_export_every_metric_and_label_the_alerts_and_dashboards_use() {
    let dir = tempfile::tempdir().expect("temp dir");
    let lines = Lines::default();
    let provider = FakeCluster::start(dir.path(), "provider", &lines).await;
    let consumer = FakeCluster::start(dir.path(), "consumer", &lines).await;
    offer_widgets(&provider.client, &lines).await;
    install_kbind(&consumer.client, &["kbind", TEAM], &lines).await;
    let (p, c) = (&provider.client, &consumer.client);

    // kbind-backend with every module; one bind and its pickup, applied as `kbind` would.
    let backend = start_backend(
        Path::new(env!("CARGO_BIN_EXE_kbind-backend")),
        &provider,
        dir.path(),
        &format!("{TOKEN},alice\n"),
        &["--claimable-namespaces=*", "--reaper", "--reap-ttl=1h"],
        &lines,
    )
    .await;
    let http = reqwest::Client::new();
    let kube_system: k8s_openapi::api::core::v1::Namespace =
        c.get_typed(None, "kube-system").await.expect("kube-system");
    let request = BindRequest {
        export: "widgets".into(),
        consumer_cluster_uid: kube_system.metadata.uid.expect("a uid"),
        namespaces: vec![TEAM.into()],
        konnector_namespace: None,
    };
    let bound: BindResponse = eventually("a bind", &lines, async || {
        let response = http
            .post(format!("{}{}", backend.url, path::BIND))
            .bearer_auth(TOKEN)
            .json(&request)
            .send()
            .await
            .ok()?;
        (response.status().as_u16() == 201).then_some(())?;
        response.json().await.ok()
    })
    .await;
    let bundle = http.get(&bound.pickup_url).send().await.expect("pickup answers");
    assert_eq!(bundle.status().as_u16(), 200, "pickup failed\n{}", dump(&lines));
    let documents: Vec<Value> = serde_saphyr::from_multiple(&bundle.text().await.expect("a bundle")).expect("YAML");
    let mut connection = String::new();
    for doc in &documents {
        let kind = doc["kind"].as_str().unwrap_or_default();
        let res = match kind {
            "Secret" => erase::<k8s_openapi::api::core::v1::Secret>(),
            "Connection" => erase::<kbind_api::Connection>(),
            "ClusterBinding" => erase::<kbind_api::ClusterBinding>(),
            "Binding" => erase::<kbind_api::Binding>(),
            other => panic!("the bundle carries a {other}"),
        };
        let name = doc["metadata"]["name"].as_str().expect("named");
        if kind == "Connection" {
            connection = name.to_string();
        }
        c.apply(
            &res,
            doc["metadata"]["namespace"].as_str(),
            name,
            doc.clone(),
            "kbind-test",
            true,
        )
        .await
        .unwrap_or_else(|e| panic!("applying {kind} {name}: {e}"));
    }

    // The konnector, with a heartbeat short enough for a throttled provider to be given up soon.
    let metrics = free_addr();
    let konnector = Process::start(
        &sibling_binary("konnector", "konnector"),
        &[
            "run".into(),
            format!("--kubeconfig={}", consumer.kubeconfig.display()),
            "--namespace=kbind".into(),
            format!("--metrics-addr={metrics}"),
            "--health-addr=127.0.0.1:0".into(),
            "--log-format=json".into(),
            "--heartbeat-interval=3s".into(),
            "--identity=konnector".into(),
        ],
        "konnector",
        &lines,
    );
    eventually("the Connection Ready", &lines, async || {
        let ready = condition(c, &erase::<kbind_api::Connection>(), None, &connection, "Ready").await?;
        (ready.status == "True").then_some(())
    })
    .await;
    eventually("widgets served on the consumer", &lines, async || {
        c.list(&widgets(), Some(TEAM), &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await;
    let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "w1", "namespace": TEAM}, "spec": {"size": 1}});
    c.create(&widgets(), Some(TEAM), &object(widget), &Default::default())
        .await
        .expect("widget created");
    eventually("w1 on the provider", &lines, async || {
        p.get_opt(&widgets(), Some(TEAM), "w1").await.ok()?.map(|_| ())
    })
    .await;
    p.patch_status(
        &widgets(),
        Some(TEAM),
        "w1",
        &Patch::Merge(json!({"status": {"phase": "Ready"}})),
        &PatchParams::default(),
    )
    .await
    .expect("provider status written");
    let mut konnector_metrics = eventually("a sync both ways in the konnector's /metrics", &lines, async || {
        let exposition = scrape(metrics).await?;
        (has_series(&exposition, "kbind_spec_up_seconds_bucket")
            && has_series(&exposition, "kbind_status_down_seconds_bucket"))
        .then_some(exposition)
    })
    .await;

    // The provider throttles the heartbeat: the link falters (failures in a row, by Connection)
    // and 429s are counted.
    let (admin, server, token) = admin_http(&provider);
    let inject = admin
        .post(format!("{server}/fakeapi/v1/errors"))
        .bearer_auth(&token)
        .json(&json!({"resource": "leases", "code": 429}))
        .send()
        .await
        .expect("the fault API answers");
    assert_eq!(inject.status().as_u16(), 204);
    let throttled = eventually("the throttled link faltering in /metrics", &lines, async || {
        let exposition = scrape(metrics).await?;
        has_series(&exposition, "kbind_provider_failed_requests").then_some(exposition)
    })
    .await;
    konnector_metrics.merge(&throttled);
    let healed = admin
        .delete(format!("{server}/fakeapi/v1/errors"))
        .bearer_auth(&token)
        .send()
        .await
        .expect("the fault API answers");
    assert_eq!(healed.status().as_u16(), 204);
    // A late scrape: counters of the throttling (429s) are in by now.
    konnector_metrics.merge(&eventually("a scrape", &lines, async || scrape(metrics).await).await);
    let backend_metrics = eventually("the backend's /metrics", &lines, async || scrape(backend.addr).await).await;

    let mut failures = Vec::new();
    for (chart, binary) in CHARTS {
        let exposition = if chart == "konnector" {
            &konnector_metrics
        } else {
            &backend_metrics
        };
        let (errors, _) = check(binary, &queries(chart), exposition, &[]);
        failures.extend(errors.into_iter().map(|e| format!("{chart} chart: {e}")));
    }
    assert!(
        failures.is_empty(),
        "{}\n\nthe konnector's /metrics:\n{konnector_metrics:#?}\n\nkbind-backend's /metrics:\n{backend_metrics:#?}",
        failures.join("\n")
    );
    konnector.stop().await;
    backend.process.stop().await;
}
