//! `--once`: the CLI path, driven in process through `kbind_cli::run`, each CLI step one call,
//! with what the CLI cannot show checked on the clusters in between.

use std::io::Write;
use std::sync::Arc;

use anyhow::{bail, ensure};
use fakeapi::sample::widgets;
use kbind_api::conditions;
use kbind_api::consts::condition;
use kbind_cluster::{ApiResource, ClusterClient, ClusterClientExt};
use parking_lot::Mutex;
use serde_json::{Value, json};

use crate::support::wait_for;
use crate::world::{EXPORT, PROVIDER_NAME, TEAM, World, erase, object, step};

/// A writer the CLI's output is captured into: its own stream, and both streams in the order
/// they were written (shown under each step).
#[derive(Clone)]
struct Captured {
    own: Arc<Mutex<Vec<u8>>>,
    both: Arc<Mutex<Vec<u8>>>,
}

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        for sink in [&self.own, &self.both] {
            sink.lock().extend_from_slice(buf);
        }
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn text(buffer: &Mutex<Vec<u8>>) -> String {
    String::from_utf8_lossy(&buffer.lock()).into_owned()
}

/// Runs `kbind <args>` in process against the demo's consumer and a credential cache in its
/// folder; fails unless it exits 0. Returns what it printed on stdout.
async fn kbind(world: &World, args: &[&str]) -> anyhow::Result<String> {
    let both = Arc::new(Mutex::new(Vec::new()));
    let stream = || Captured {
        own: Arc::new(Mutex::new(Vec::new())),
        both: both.clone(),
    };
    let (stdout, stderr) = (stream(), stream());
    let ctx = kbind_cli::Context {
        stdout: Box::new(stdout.clone()),
        stderr: Box::new(stderr),
        interactive: false,
        config_dir: world.dir.join("kbind-config"),
        kubeconfig: Some(world.consumer_kubeconfig.clone()),
    };
    let argv = std::iter::once("kbind")
        .chain(args.iter().copied())
        .map(String::from)
        .collect();
    // The transcript shows the commands, not the credential.
    let shown = args.iter().map(|a| if *a == world.token { "<token>" } else { a });
    println!("  $ kbind {}", shown.collect::<Vec<_>>().join(" "));
    let code = kbind_cli::run(argv, ctx).await;
    for line in text(&both).lines() {
        println!("    {line}");
    }
    if code != 0 {
        bail!(
            "`kbind {}` exited {code}; its output is above",
            args.first().copied().unwrap_or_default()
        );
    }
    Ok(text(&stdout.own))
}

fn is_ready(obj: &kbind_cluster::DynamicObject) -> bool {
    obj.data
        .pointer("/status/conditions")
        .and_then(|c| {
            serde_json::from_value::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>(c.clone()).ok()
        })
        .is_some_and(|c| conditions::is_true(&c, condition::READY))
}

/// The Bindings in the team's namespace and the ClusterBindings on the consumer that bind widgets.
async fn widget_bindings(consumer: &dyn ClusterClient) -> Option<Vec<kbind_cluster::DynamicObject>> {
    let mut found = Vec::new();
    let kinds: [(ApiResource, Option<&str>); 2] = [
        (erase::<kbind_api::Binding>(), Some(TEAM)),
        (erase::<kbind_api::ClusterBinding>(), None),
    ];
    for (res, ns) in kinds {
        let list = consumer.list(&res, ns, &Default::default()).await.ok()?;
        found.extend(list.items.into_iter().filter(|b| {
            b.data
                .pointer("/spec/apis")
                .and_then(Value::as_array)
                .is_some_and(|apis| apis.iter().any(|a| a["name"] == "widgets.example.org"))
        }));
    }
    Some(found)
}

/// login → catalog → bind → an object synced both ways → status → unbind.
pub async fn run(world: &World) -> anyhow::Result<()> {
    let (consumer, provider) = (world.consumer.as_ref(), world.provider.as_ref());

    kbind(world, &["login", &world.gateway_url, "--token", &world.token]).await?;
    step("kbind login: signed in to the gateway with the static token");

    let catalog = kbind(world, &["catalog"]).await?;
    ensure!(
        catalog.contains(EXPORT),
        "`kbind catalog` did not list the Export {EXPORT}"
    );
    step("kbind catalog: Export widgets offered in Collection basics");

    kbind(
        world,
        &["bind", EXPORT, "--namespace", TEAM, "--wait", "--timeout", "2m"],
    )
    .await?;
    let connections = erase::<kbind_api::Connection>();
    let ready = wait_for("the Connection to be Ready", || async {
        let list = consumer.list(&connections, None, &Default::default()).await.ok()?;
        (!list.items.is_empty() && list.items.iter().all(is_ready)).then_some(())
    })
    .await;
    if let Err(e) = ready {
        // Conditions carry reasons, never credentials (contract §7): they say what went wrong.
        let list = consumer.list(&connections, None, &Default::default()).await.ok();
        let conditions: Vec<Value> = list
            .into_iter()
            .flat_map(|l| l.items)
            .filter_map(|c| c.data.pointer("/status/conditions").cloned())
            .collect();
        bail!("{e}; the Connections' conditions: {}", Value::Array(conditions));
    }
    wait_for("a Ready binding of widgets on the consumer", || async {
        let bindings = widget_bindings(consumer).await?;
        (!bindings.is_empty() && bindings.iter().all(is_ready)).then_some(())
    })
    .await?;
    step(&format!(
        "kbind bind: bundle applied; the Connection to {PROVIDER_NAME} and the binding of widgets are Ready"
    ));

    wait_for("widgets served on the consumer", || async {
        consumer
            .list(&widgets(), Some(TEAM), &Default::default())
            .await
            .ok()
            .map(|_| ())
    })
    .await?;
    let widget = json!({"apiVersion": "example.org/v1", "kind": "Widget",
        "metadata": {"name": "hello", "namespace": TEAM}, "spec": {"size": 3, "color": "blue"}});
    consumer
        .create(&widgets(), Some(TEAM), &object(widget)?, &Default::default())
        .await?;
    step("consumer: created widget team-a/hello");
    wait_for("widget team-a/hello on the provider", || async {
        let copy = provider.get_opt(&widgets(), Some(TEAM), "hello").await.ok()??;
        (copy.data.pointer("/spec/size") == Some(&json!(3))).then_some(())
    })
    .await?;
    step("provider: widget team-a/hello arrived (spec up)");
    wait_for("the provider's status on the consumer", || async {
        let obj = consumer.get_opt(&widgets(), Some(TEAM), "hello").await.ok()??;
        (obj.data.pointer("/status/phase") == Some(&json!("Ready"))).then_some(())
    })
    .await?;
    step("consumer: widget team-a/hello has status phase=Ready from the provider (status down)");

    kbind(world, &["status"]).await?;
    step("kbind status");

    // The unbind's wall time is printed so a slow unbind shows in the demo.
    let unbind_started = std::time::Instant::now();
    kbind(world, &["unbind", EXPORT, "--yes"]).await?;
    let unbind_took = unbind_started.elapsed();
    wait_for("the bindings of widgets to be gone from the consumer", || async {
        widget_bindings(consumer).await?.is_empty().then_some(())
    })
    .await?;
    step(&format!(
        "kbind unbind: the bindings of widgets are gone from the consumer (the unbind took {} ms)",
        unbind_took.as_millis()
    ));
    wait_for("the provider's copy of team-a/hello to be drained", || async {
        provider
            .get_opt(&widgets(), Some(TEAM), "hello")
            .await
            .ok()?
            .is_none()
            .then_some(())
    })
    .await?;
    step("provider: widget team-a/hello drained by the unbind");
    Ok(())
}
