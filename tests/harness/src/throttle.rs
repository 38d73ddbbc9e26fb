//! API Priority and Fairness turned against chosen clients: kube-apiserver answers their requests `429 Too Many
//! Requests` with a `Retry-After`, as an overloaded apiserver does, while everyone else is served.
//!
//! How, on v1.35: a `Limited` PriorityLevelConfiguration with no concurrency of its own and none to borrow
//! (`nominalConcurrencyShares: 0`, `lendablePercent: 0`, `borrowingLimitPercent: 0`) that rejects instead of
//! queueing, and a FlowSchema that puts the chosen subjects there. That alone throttles nothing: a request asking
//! for more seats than a level has is still let through when nothing of that level is executing (the queue set's
//! guard against starving such a level), so one client's requests, one at a time, all pass — measured. So the
//! FlowSchema also matches the harness user `carol`, who holds one request of that level executing: a `POST` of
//! a SelfSubjectReview whose announced body never comes, which keeps its handler (and so its seat) busy. Every
//! other request of that level is then rejected at once, for as long as the held request lasts (at most the
//! apiserver's request timeout, 60 s).
//!
//! ```no_run
//! # async fn example(cluster: &kbind_testenv::Cluster) -> Result<(), kbind_testenv::Error> {
//! let subject = serde_json::json!({"kind": "ServiceAccount",
//!                                  "serviceAccount": {"namespace": "team", "name": "robot"}});
//! let throttle = cluster.throttle("robot", vec![subject]).await?; // robot's requests get 429 now
//! throttle.lift().await?; // and are served again
//! # Ok(())
//! # }
//! ```

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::flowcontrol::v1::{FlowSchema, PriorityLevelConfiguration};
use kube::api::{DeleteParams, PostParams};
use kube::{Api, Client};
use secrecy::ExposeSecret;
use serde_json::{Value, json};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tokio_rustls::rustls;

use crate::net::POLL;
use crate::{Cluster, Error, User};

/// How long setting a throttle up or lifting it may take before it is reported as failed.
const DEADLINE: Duration = Duration::from_secs(60);

/// The user who holds the throttled level's one executing request.
const PLUG: User = User::Carol;

/// The path of the held request: any authenticated user may create a SelfSubjectReview.
const PLUG_PATH: &str = "/apis/authentication.k8s.io/v1/selfsubjectreviews";

/// A throttle in force on one cluster; [`Throttle::lift`] ends it. Dropping it without lifting closes the held
/// request (requests pass again) but leaves the FlowSchema and the PriorityLevelConfiguration behind.
pub struct Throttle {
    name: String,
    admin: Client,
    probe: Client,
    level_uid: String,
    retry_after: Option<String>,
    plug: Option<TlsStream<TcpStream>>,
}

impl std::fmt::Debug for Throttle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Throttle")
            .field("name", &self.name)
            .field("level_uid", &self.level_uid)
            .field("retry_after", &self.retry_after)
            .field("held", &self.plug.is_some())
            .finish()
    }
}

/// What a probe request of the plug user learnt: its status and the priority level that handled it.
struct Probe {
    status: http::StatusCode,
    level_uid: Option<String>,
    retry_after: Option<String>,
}

impl Cluster {
    /// Answers the requests of `subjects` (FlowSchema subjects, e.g. `{"kind": "ServiceAccount", "serviceAccount":
    /// {"namespace": …, "name": …}}`) with 429 until [`Throttle::lift`], through a PriorityLevelConfiguration and a
    /// FlowSchema both called `name`; returns once a probe request of that level was rejected.
    pub async fn throttle(&self, name: &str, subjects: Vec<Value>) -> Result<Throttle, Error> {
        let deadline = Instant::now() + DEADLINE;
        let admin = self.client(User::Admin).await?;
        let mut probe_config = self.config(PLUG).await?;
        // Why: kube retries a 429 on its own by default, which would hide the very answer probed for.
        probe_config.default_retry = false;
        let probe = Client::try_from(probe_config)?;

        let level: PriorityLevelConfiguration = from_json(json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "PriorityLevelConfiguration",
            "metadata": {"name": name},
            "spec": {"type": "Limited", "limited": {
                "nominalConcurrencyShares": 0, "lendablePercent": 0, "borrowingLimitPercent": 0,
                "limitResponse": {"type": "Reject"}}}}))?;
        let level = Api::<PriorityLevelConfiguration>::all(admin.clone())
            .create(&PostParams::default(), &level)
            .await?;
        let level_uid = level.metadata.uid.unwrap_or_default();
        let mut matched = subjects;
        matched.push(json!({"kind": "User", "user": {"name": PLUG.name()}}));
        let schema: FlowSchema = from_json(json!({
            "apiVersion": "flowcontrol.apiserver.k8s.io/v1", "kind": "FlowSchema",
            "metadata": {"name": name},
            // Why 100: before every FlowSchema the apiserver keeps (service accounts: 9000), after `exempt` (1,
            // system:masters) and `probes` (2), so admins and health checks are never throttled.
            "spec": {"priorityLevelConfiguration": {"name": name}, "matchingPrecedence": 100,
                     "rules": [{"subjects": matched,
                                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"],
                                                   "namespaces": ["*"], "clusterScope": true}],
                                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}]}]}}))?;
        Api::<FlowSchema>::all(admin.clone())
            .create(&PostParams::default(), &schema)
            .await?;

        let mut throttle = Throttle {
            name: name.to_string(),
            admin,
            probe,
            level_uid,
            retry_after: None,
            plug: None,
        };
        // The apiserver applies new flow-control objects from an informer: wait until they classify.
        throttle
            .probe_until("the FlowSchema to classify into its level", deadline, |p| {
                p.level_uid.as_deref() == Some(throttle.level_uid.as_str())
            })
            .await?;
        throttle.plug = Some(self.hold_request().await?);
        let rejected = throttle
            .probe_until("the held request to fill its level (a probe rejected)", deadline, |p| {
                p.status == http::StatusCode::TOO_MANY_REQUESTS
            })
            .await?;
        throttle.retry_after = rejected.retry_after;
        Ok(throttle)
    }

    /// Sends the plug user's `POST` over its own HTTP/1.1 connection and keeps it open with the body unsent.
    async fn hold_request(&self) -> Result<TlsStream<TcpStream>, Error> {
        let config = self.config(PLUG).await?;
        let token = config
            .auth_info
            .token
            .as_ref()
            .map(|t| t.expose_secret().to_string())
            .ok_or_else(|| Error::Throttle(format!("the kubeconfig of {PLUG} has no token")))?;
        let mut roots = rustls::RootCertStore::empty();
        for der in config.root_cert.iter().flatten() {
            roots
                .add(rustls::pki_types::CertificateDer::from(der.clone()))
                .map_err(|e| Error::Throttle(format!("the cluster's CA: {e}")))?;
        }
        let mut tls = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
            .with_safe_default_protocol_versions()
            .map_err(|e| Error::Throttle(format!("TLS versions: {e}")))?
            .with_root_certificates(roots)
            .with_no_client_auth();
        // Why HTTP/1.1: the request is written by hand.
        tls.alpn_protocols = vec![b"http/1.1".to_vec()];
        let addr = format!("127.0.0.1:{}", self.port());
        let tcp = TcpStream::connect(&addr)
            .await
            .map_err(|e| Error::io(format!("failed to connect to {addr}"), e))?;
        let server_name = rustls::pki_types::ServerName::try_from("127.0.0.1")
            .map_err(|e| Error::Throttle(format!("server name: {e}")))?;
        let mut stream = TlsConnector::from(Arc::new(tls))
            .connect(server_name, tcp)
            .await
            .map_err(|e| Error::io(format!("TLS handshake with {addr}"), e))?;
        // A body of 4 KiB is announced and one byte of it sent: the handler waits for the rest while it holds
        // the level's seat.
        let head = format!(
            "POST {PLUG_PATH} HTTP/1.1\r\nHost: {addr}\r\nAuthorization: Bearer {token}\r\n\
             Content-Type: application/json\r\nContent-Length: 4096\r\n\r\n{{"
        );
        stream
            .write_all(head.as_bytes())
            .await
            .map_err(|e| Error::io("failed to send the held request".into(), e))?;
        stream
            .flush()
            .await
            .map_err(|e| Error::io("failed to send the held request".into(), e))?;
        Ok(stream)
    }
}

impl Throttle {
    /// The `Retry-After` the apiserver sent with the probe it rejected.
    pub fn retry_after(&self) -> Option<&str> {
        self.retry_after.as_deref()
    }

    /// Ends the throttle: the held request is dropped and the FlowSchema and PriorityLevelConfiguration deleted;
    /// returns once a probe request is handled by another level.
    pub async fn lift(mut self) -> Result<(), Error> {
        let deadline = Instant::now() + DEADLINE;
        if let Some(mut plug) = self.plug.take() {
            // Why ignore: the apiserver may already have given up on it; closing is all that matters.
            let _ = plug.shutdown().await;
        }
        let gone = |e: kube::Error| match e {
            kube::Error::Api(status) if status.code == 404 => Ok(()),
            other => Err(Error::Client(other)),
        };
        Api::<FlowSchema>::all(self.admin.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
        Api::<PriorityLevelConfiguration>::all(self.admin.clone())
            .delete(&self.name, &DeleteParams::default())
            .await
            .map(|_| ())
            .or_else(gone)?;
        let ours = self.level_uid.clone();
        self.probe_until("the FlowSchema to be gone", deadline, |p| {
            p.status.is_success() && p.level_uid.as_deref() != Some(ours.as_str())
        })
        .await?;
        Ok(())
    }

    /// Probes until `done` holds, failing past `deadline`; returns the probe that satisfied it.
    async fn probe_until(&self, what: &str, deadline: Instant, done: impl Fn(&Probe) -> bool) -> Result<Probe, Error> {
        let started = Instant::now();
        loop {
            let last = match self.probe_once().await {
                Ok(probe) if done(&probe) => return Ok(probe),
                Ok(probe) => format!(
                    "last probe: {} from level {:?}",
                    probe.status,
                    probe.level_uid.as_deref().unwrap_or("none")
                ),
                Err(e) => format!("last probe failed: {e}"),
            };
            if Instant::now() >= deadline {
                return Err(Error::NotReady {
                    what: format!("throttle {}: {what}", self.name),
                    after: started.elapsed(),
                    log: last,
                });
            }
            // Why this slowly: each rejected probe raises the level's Retry-After.
            tokio::time::sleep(POLL).await;
        }
    }

    /// One SelfSubjectReview as the plug user: its status and the level that handled it.
    async fn probe_once(&self) -> Result<Probe, Error> {
        let body = br#"{"apiVersion":"authentication.k8s.io/v1","kind":"SelfSubjectReview"}"#.to_vec();
        let request = http::Request::post(PLUG_PATH)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(kube::client::Body::from(body))
            .map_err(|e| Error::Throttle(format!("probe request: {e}")))?;
        let response = self.probe.send(request).await?;
        let header = |name: &str| {
            response
                .headers()
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        Ok(Probe {
            status: response.status(),
            level_uid: header("X-Kubernetes-PF-PriorityLevel-UID"),
            retry_after: header("Retry-After"),
        })
    }
}

fn from_json<T: k8s_openapi::serde::de::DeserializeOwned>(value: Value) -> Result<T, Error> {
    serde_json::from_value(value).map_err(|e| Error::Throttle(format!("a flow-control object: {e}")))
}
