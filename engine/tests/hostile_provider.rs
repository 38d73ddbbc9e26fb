//! A provider reached through the real `kube` client with something in front of it (a proxy
//! or ingress) that answers a plain-text `404 page not found` for one object: deleting the
//! consumer object must keep its finalizer, because that 404 says nothing about the copy.

use std::collections::BTreeSet;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use fakeapi::FakeCluster;
use http_body_util::{BodyExt, Full};
use kbind_api::ConflictPolicy;
use kbind_cluster::{ClusterClient, ClusterClientExt, Error, KubeClusterClient, PostParams, SharedClock, TokioClock};
use kbind_engine::mapper::Identity;
use kbind_engine::remote::{Connector, Credentials, ProviderKubeconfig};
use kbind_engine::sync::{ApiSyncerSpec, BindingKind, BindingRef, Syncers};
use parking_lot::Mutex;
use serde_json::json;
use tower::ServiceExt;

mod support;

use support::*;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// The paths the proxy answers with a plain-text 404 instead of passing them on, and how many
/// such answers it gave.
#[derive(Default)]
struct Blocking {
    paths: BTreeSet<String>,
    answered: usize,
}

type Blocked = Arc<Mutex<Blocking>>;

/// Connects to `provider` through `kube::Client` over fakeapi's router, behind a proxy that
/// answers `404 page not found` (text/plain) for the paths in `blocked`.
struct ProxiedConnector {
    provider: FakeCluster,
    blocked: Blocked,
}

#[async_trait]
impl Connector for ProxiedConnector {
    async fn connect(
        &self,
        kc: &ProviderKubeconfig,
        _: &kbind_cluster::BearerToken,
    ) -> Result<Arc<dyn ClusterClient>, Error> {
        let Credentials::Token(token) = &kc.credentials else {
            return Err(Error::Unauthorized {
                message: "Unauthorized".into(),
            });
        };
        let bearer = http::HeaderValue::from_str(&format!("Bearer {token}")).map_err(|_| Error::Unauthorized {
            message: "Unauthorized".into(),
        })?;
        let router = fakeapi::http::router(self.provider.clone());
        let blocked = self.blocked.clone();
        let service = tower::service_fn(move |mut request: http::Request<kube::client::Body>| {
            let router = router.clone();
            let bearer = bearer.clone();
            let hit = {
                let mut blocking = blocked.lock();
                let hit = blocking.paths.contains(request.uri().path());
                blocking.answered += usize::from(hit);
                hit
            };
            async move {
                if hit {
                    let text = Full::new(Bytes::from_static(b"404 page not found\n"))
                        .map_err(|never: Infallible| -> BoxError { match never {} })
                        .boxed_unsync();
                    let response = http::Response::builder()
                        .status(404)
                        .header(http::header::CONTENT_TYPE, "text/plain; charset=utf-8")
                        .body(text)
                        .expect("a static response");
                    return Ok::<_, Infallible>(response);
                }
                request.headers_mut().insert(http::header::AUTHORIZATION, bearer);
                let response = router.oneshot(request).await?;
                Ok(response.map(|body| body.map_err(BoxError::from).boxed_unsync()))
            }
        });
        Ok(Arc::new(KubeClusterClient::new(kube::Client::new(service, "default"))))
    }
}

#[tokio::test(start_paused = true)]
async fn plain_text_404_for_the_copy_keeps_the_finalizer() {
    let clock: SharedClock = Arc::new(TokioClock::fixed());
    let consumer = FakeCluster::builder("consumer")
        .seed(1)
        .clock(clock.clone())
        .garbage_collector(false)
        .build();
    let provider = FakeCluster::builder("provider").seed(2).clock(clock.clone()).build();
    let admin: Arc<dyn ClusterClient> = Arc::new(consumer.admin_client());
    let padmin: Arc<dyn ClusterClient> = Arc::new(provider.admin_client());
    install_kbind_crds(&admin).await;
    serve_widgets(&admin).await;
    serve_widgets(&padmin).await;
    for ns in ["kbind", "team-a"] {
        create_namespace(&admin, ns).await;
    }
    let blocked: Blocked = Arc::default();
    let connector = Arc::new(ProxiedConnector {
        provider: provider.clone(),
        blocked: blocked.clone(),
    });
    let Engaged {
        ctx,
        engaged,
        task: _task,
    } = Engagement {
        consumer_user: konnector(),
        provider_user: konnector(),
        secret_labels: serde_json::Value::Null,
    }
    .engage_through(&consumer, &provider, clock, connector)
    .await;
    let spec = ApiSyncerSpec {
        connection: "acme".into(),
        binding: BindingRef {
            kind: BindingKind::Cluster,
            namespace: None,
            name: "widgets".into(),
            uid: "binding-uid".into(),
        },
        api: "widgets.example.org".into(),
        resource: widgets(),
        namespaced: true,
        namespace: None,
        conflict_policy: ConflictPolicy::Fail,
        consumer_cluster_uid: consumer.identity_uid(),
        status_subresource: true,
    };
    let syncers = Syncers::new(ctx, Arc::new(Identity));
    assert!(syncers.ensure(spec, engaged));

    admin
        .create(
            &widgets(),
            Some("team-a"),
            &object(json!({"apiVersion": "example.org/v1", "kind": "Widget",
                "metadata": {"name": "w1", "namespace": "team-a"}, "spec": {"size": 1}})),
            &PostParams::default(),
        )
        .await
        .unwrap();
    let res = widgets();
    let consumer_w1 = || admin.get_opt(&res, Some("team-a"), "w1");
    let provider_w1 = || padmin.get_opt(&res, Some("team-a"), "w1");
    eventually("the copy and the finalizer", Duration::from_secs(120), || async {
        let finalized = consumer_w1()
            .await
            .unwrap()
            .is_some_and(|o| o.metadata.finalizers.is_some_and(|f| !f.is_empty()));
        finalized && provider_w1().await.unwrap().is_some()
    })
    .await;

    // From now on the proxy hides the copy behind a plain-text 404.
    blocked
        .lock()
        .paths
        .insert("/apis/example.org/v1/namespaces/team-a/widgets/w1".to_string());
    admin
        .delete(&widgets(), Some("team-a"), "w1", &Default::default())
        .await
        .unwrap();
    // The konnector has acted on the delete once the proxy answered it a few times (it retries
    // while the finalizer is held), or once it let the object go.
    eventually("the delete acted on", Duration::from_secs(300), || {
        let answered = blocked.lock().answered;
        let gone = consumer_w1();
        async move { answered >= 3 || gone.await.unwrap().is_none() }
    })
    .await;
    let held = consumer_w1().await.unwrap();
    assert!(
        held.as_ref().is_some_and(|o| o
            .metadata
            .finalizers
            .iter()
            .flatten()
            .any(|f| f == "core.kbind.io/syncer")),
        "a proxy's 404 released the finalizer: {held:?}"
    );
    assert!(
        provider_w1().await.unwrap().is_some(),
        "the copy is still there, so the finalizer must be"
    );

    // Once the provider answers again, the deletion completes as usual.
    blocked.lock().paths.clear();
    eventually(
        "the copy and then the object to go",
        Duration::from_secs(600),
        || async { consumer_w1().await.unwrap().is_none() },
    )
    .await;
    assert!(provider_w1().await.unwrap().is_none(), "the copy went first");
}
