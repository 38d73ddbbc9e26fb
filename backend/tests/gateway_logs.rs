//! Pickup ids, credentials and bearer tokens never reach the gateway's logs or metrics; requests
//! are logged by route template. Its own test binary: the capturing subscriber is the process's
//! global one, so no other test's threads race its callsite registration.

mod gateway_support;

use std::sync::Arc;

use gateway_support::world::*;
use http::{Method, StatusCode};
use kbind_api::service::BindResponse;
use parking_lot::Mutex;

/// A `MakeWriter` collecting every log line.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Self::Writer {
        self.clone()
    }
}

#[tokio::test(start_paused = true)]
async fn pickup_ids_never_reach_logs_or_metrics() {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(logs.clone())
        .with_ansi(false)
        .finish();
    tracing::subscriber::set_global_default(subscriber).expect("the only subscriber of this test binary");

    let world = world().await;
    let bound: BindResponse = bind(&world.app, "alice-token", widgets_bind()).await.json();
    let path = pickup_path(&bound.pickup_url);
    assert_eq!(pickup(&world.app, &path, None).await.status, StatusCode::OK);
    assert_eq!(pickup(&world.app, &path, None).await.status, StatusCode::GONE);
    assert_eq!(
        pickup(&world.app, &format!("{path}x"), None).await.status,
        StatusCode::NOT_FOUND
    );
    let metrics = send(&world.app, request(Method::GET, "/metrics", None, None))
        .await
        .text();

    let secret = bound.pickup_url.rsplit('.').next().unwrap();
    let token = format!("token-for-{}", bound.grant);
    let logs = String::from_utf8(logs.0.lock().clone()).unwrap();
    assert!(
        logs.contains("/api/v1/pickup/{id}"),
        "requests are logged by route template:\n{logs}"
    );
    for (what, text) in [("logs", &logs), ("metrics", &metrics)] {
        assert!(!text.contains(secret), "the pickup secret is in the {what}:\n{text}");
        assert!(!text.contains(&token), "the credential is in the {what}:\n{text}");
        assert!(
            !text.contains("alice-token"),
            "the bearer token is in the {what}:\n{text}"
        );
    }
    assert!(
        metrics.contains(r#"kbind_gateway_requests_total{method="GET",route="/api/v1/pickup/{id}",status="410"} 1"#),
        "{metrics}"
    );
    assert!(
        metrics.contains(r#"kbind_gateway_pickups_total{outcome="delivered"} 1"#),
        "{metrics}"
    );
}
