//! One provider link per Connection, and the one owner of all of it (contract §2 "Identity",
//! "Heartbeat", §4 "connection loss"): the accepted kubeconfig, the client built from it, the
//! identity read through it, the heartbeat Lease, discovery and the engagement that syncers hang
//! off. The Connection reconciler steps a link and turns its [`LinkReport`] into status; the
//! binding reconciler and syncers only look engagements up by name ([`Links::get`]).
//!
//! Turbulence costs only time: a failed renewal (a 429, a 5xx, a timeout, a restarting
//! apiserver) keeps the engagement, its syncers, caches and watches while failures last less
//! than [`WINDOW`] (the heartbeat Lease's duration), retried with jittered backoff that never
//! comes before a 429's `Retry-After`; the Connection's `Connected` message and the konnector's
//! metrics say so meanwhile. Only then is the provider disengaged, as for any loss.

mod discovery;
mod exports;
pub(crate) mod heartbeat;
pub(crate) mod renew;
mod state;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use kbind_api::consts::{lease, reason};
use kbind_api::{Connection, ExportedApi, SchemaSource};
use kbind_cluster::backoff::Backoff;
use kbind_cluster::identity::ClusterIdentity;
use kbind_cluster::{BearerToken, ClusterClient, Error, IdentitySource};
use kube::ResourceExt;
use parking_lot::{Mutex, RwLock};
use tokio::sync::{broadcast, watch};
use tokio::time::Instant;

pub use state::LinkState;

use crate::context::Context;
use crate::planted::{Plant, planted};
use crate::provider::EngagedProvider;
use crate::remote::{Credentials, ProviderKubeconfig, provider_identity};
use discovery::{Discovered, discover};
use exports::ExportsWatch;
use state::{Effect, Event};

/// How long failures of an engaged link's requests are forgiven before the provider is
/// disengaged, at the default heartbeat interval: the heartbeat Lease's duration (the time a
/// provider itself gives a consumer), twice the interval. See [`window`].
pub const WINDOW: Duration = Duration::from_secs(lease::DURATION_SECONDS as u64);

/// The hysteresis window for a heartbeat every `interval`: two intervals, as the Lease's
/// duration is two renewals (60 s at the default 30 s). A black-holed provider is disengaged,
/// and its Connection says `ProviderUnreachable`, at most one interval (plus its jitter), one
/// window and one second after the hole opens: the next heartbeat starts then, hangs, and the
/// retries that follow are cut off at the window's end, the last try a second after it.
pub fn window(interval: Duration) -> Duration {
    interval.saturating_mul(2)
}
/// First retry after a failed request of a link.
const RETRY_INITIAL: Duration = Duration::from_secs(1);
/// Longest retry interval of a failing link (before jitter); a quarter of [`WINDOW`], so a
/// faltering link is retried several times before it is given up.
const RETRY_MAX: Duration = Duration::from_secs(15);
/// How much a failing link's retries are jittered: half of each delay spreads a herd of
/// konnectors without doubling the wait for a provider that is back.
const RETRY_JITTER: f64 = 0.5;
/// How long the last try of a faltering link, at the window's end, may take.
const LAST_TRY: Duration = Duration::from_secs(1);
/// How long a renewal whose Secret was replaced meanwhile waits for the new content to arrive
/// before it looks again.
const RETRY_INITIAL_RENEWAL_WAIT: Duration = Duration::from_secs(10);
/// Shortest requeue of a healthy link (a heartbeat due "now" after a slow pass).
const MIN_REQUEUE: Duration = Duration::from_millis(100);

/// How a provider failure is reported.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Failure {
    /// A verb was refused: `PermissionDenied=True`, reason `Forbidden`.
    Denied(String),
    /// The credentials themselves were refused (401): `Connected=False`, reason `Unauthorized`.
    Unauthorized(String),
    /// Transport, timeout, throttling or server trouble: reason `ProviderUnreachable`.
    Unreachable(String),
    /// A 401 for an issued token past its expiry: `Connected=False`, reason `CredentialExpired`.
    Expired(String),
}

/// Classifies a provider error; messages name verb, resource and HTTP status, never credentials
/// or the server's text.
pub(crate) fn classify(e: &Error) -> Failure {
    classify_at(e, None)
}

/// `host:port` of a kubeconfig's server URL (the scheme's port when it names none): where a
/// transport failure happened. Nothing else of the URL (no user info, path or query).
pub(crate) fn server_address(server: &str) -> Option<String> {
    let uri: http::Uri = server.parse().ok()?;
    let host = uri.host()?;
    let port = uri
        .port_u16()
        .unwrap_or(if uri.scheme_str() == Some("http") { 80 } else { 443 });
    Some(format!("{host}:{port}"))
}

/// [`classify`], naming the provider's `host:port` (`server`) in what a transport failure or a
/// timeout says.
pub(crate) fn classify_at(e: &Error, server: Option<&str>) -> Failure {
    let at = server.map(|s| format!(" at {s}")).unwrap_or_default();
    match e {
        Error::Forbidden { .. } => Failure::Denied(format!(
            "the provider refuses a request of the credentials ({})",
            crate::cause::http_cause(e)
        )),
        Error::Unauthorized { .. } => Failure::Unauthorized(format!(
            "the provider refuses the credentials ({}); they were revoked or have expired. Nothing is deleted \
             because of it: bind again for new credentials, or unbind with annotation {}: Orphan on the bindings \
             and the Connection (`kbind unbind --orphan`) to let go without touching the provider",
            crate::cause::http_cause(e),
            kbind_api::consts::annotation::DELETION_POLICY
        )),
        Error::Transport(cause) => Failure::Unreachable(format!(
            "the provider{at} cannot be reached: {}; retrying",
            crate::cause::transport_words(cause)
        )),
        Error::Timeout(_) => Failure::Unreachable(format!("a request to the provider{at} timed out; retrying")),
        Error::TooManyRequests { .. } => Failure::Unreachable(format!(
            "the provider throttles the konnector ({}); retrying after the wait it asks for",
            crate::cause::http_cause(e)
        )),
        Error::NotServed { .. } => Failure::Unreachable(
            "the provider answered 404 without a Kubernetes Status (a proxy or ingress in front of the API server?); \
             retrying"
                .into(),
        ),
        other => Failure::Unreachable(format!(
            "the provider answered with an error ({}); retrying",
            crate::cause::http_cause(other)
        )),
    }
}

/// What a pass found out about the link, for the Connection's `Connected` condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Health {
    /// Connected with the pinned identity.
    Connected,
    /// Engaged, but its requests have failed since `since`; kept engaged until failures last
    /// [`WINDOW`]. (No count or countdown: a condition that changed with every attempt would
    /// rewrite the status, and each write wake the reconciler again.)
    Faltering {
        /// When the first failure of this run happened (wall clock).
        since: jiff::Timestamp,
        /// The last failure, classified.
        cause: String,
        /// The hysteresis window, in seconds.
        window_secs: u64,
    },
    /// Not connected: the failure.
    Failed(Failure),
    /// The identity differs from the pinned one (`provider` or `consumer`).
    IdentityChanged(&'static str),
}

/// What one pass of a link reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct LinkReport {
    /// How the link stands.
    pub health: Health,
    /// `Some(message)` when a verb was refused on the provider.
    pub permission_denied: Option<String>,
    /// The provider's cluster UID (to pin when the status has none yet).
    pub remote_uid: Option<String>,
    /// Fresh discovery results; `None` keeps what the status has.
    pub exported: Option<(Vec<ExportedApi>, SchemaSource)>,
    /// When to look again.
    pub next: Duration,
    /// When the issued token the link runs on expires (`None`: not an issued token).
    pub credential_expires_at: Option<jiff::Timestamp>,
    /// What the last failed renewal of that token met, while it failed.
    pub renewal_failed: Option<String>,
}

impl LinkReport {
    fn failed(failure: Failure, next: Duration) -> Self {
        Self {
            permission_denied: match &failure {
                Failure::Denied(message) => Some(message.clone()),
                _ => None,
            },
            health: Health::Failed(failure),
            remote_uid: None,
            exported: None,
            next,
            credential_expires_at: None,
            renewal_failed: None,
        }
    }
}

/// When a link's Connection wants an engagement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Engage {
    /// While it is Ready: connected with the pinned identity, no verb refused.
    WhenReady,
    /// While it is connected: a deleted Connection whose bindings drain (they need the provider
    /// to delete their copies, also while a refused verb blocks one of them).
    WhenConnected,
}

/// What a pass of a link starts from.
pub(crate) struct Input<'a> {
    /// The Connection as cached.
    pub conn: &'a Connection,
    /// The kubeconfig its Secret holds, when accepted (`None`: missing or refused; nothing is
    /// sent to the provider).
    pub kubeconfig: Option<ProviderKubeconfig>,
    /// This cluster's own UID.
    pub local_uid: &'a str,
    /// When it wants an engagement.
    pub engage: Engage,
}

/// What the rest of the engine reads of one link without waiting for a pass.
#[derive(Debug, Clone)]
struct Published {
    state: LinkState,
    failed: bool,
    engaged: Option<Arc<EngagedProvider>>,
    credential_expires_at: Option<jiff::Timestamp>,
}

/// What the metrics say of one Connection's credential.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CredentialReport {
    /// The Connection.
    pub connection: String,
    /// When its issued token expires (`None`: not an issued token, or no link now).
    pub expires_at: Option<jiff::Timestamp>,
    /// Renewals that went through since the konnector started.
    pub renewed: u64,
    /// Renewal attempts that failed since the konnector started.
    pub failed: u64,
}

/// Everything the links of one engine share.
struct Inner {
    links: Mutex<BTreeMap<String, Arc<tokio::sync::Mutex<Link>>>>,
    published: RwLock<BTreeMap<String, Published>>,
    /// The heartbeat Leases, one per consumer–provider pair, shared by its Connections.
    pairs: heartbeat::Pairs,
    /// Credential renewals per Connection.
    renewals: renew::Counts,
    changes: watch::Sender<u64>,
    wakes: broadcast::Sender<String>,
}

/// The provider links of one engine, by Connection name; clones share them.
#[derive(Clone)]
pub struct Links {
    inner: Arc<Inner>,
}

impl Default for Links {
    fn default() -> Self {
        Self::new()
    }
}

impl std::fmt::Debug for Links {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Links").field("engaged", &self.engaged()).finish()
    }
}

impl Links {
    /// No link yet.
    pub fn new() -> Self {
        Self {
            inner: Arc::new(Inner {
                links: Mutex::new(BTreeMap::new()),
                published: RwLock::new(BTreeMap::new()),
                pairs: heartbeat::Pairs::default(),
                renewals: renew::Counts::default(),
                changes: watch::channel(0).0,
                wakes: broadcast::channel(256).0,
            }),
        }
    }

    /// The engaged provider of Connection `name`.
    pub fn get(&self, name: &str) -> Option<Arc<EngagedProvider>> {
        self.inner.published.read().get(name).and_then(|p| p.engaged.clone())
    }

    /// Names of the engaged Connections, sorted.
    pub fn engaged(&self) -> Vec<String> {
        self.inner
            .published
            .read()
            .iter()
            .filter(|(_, p)| p.engaged.is_some())
            .map(|(name, _)| name.clone())
            .collect()
    }

    /// Where the link of Connection `name` stands.
    pub fn state(&self, name: &str) -> LinkState {
        self.inner
            .published
            .read()
            .get(name)
            .map_or(LinkState::Unlinked, |p| p.state.clone())
    }

    /// The links whose engaged provider is faltering, with their failures in a row.
    pub fn faltering(&self) -> Vec<(String, u32)> {
        self.inner
            .published
            .read()
            .iter()
            .filter_map(|(name, p)| match p.state {
                LinkState::Faltering { failures, .. } => Some((name.clone(), failures)),
                _ => None,
            })
            .collect()
    }

    /// Every Connection's credential as its link knows it: when an issued token expires and how
    /// its renewals went, sorted by Connection.
    pub fn credentials(&self) -> Vec<CredentialReport> {
        let mut reports: BTreeMap<String, CredentialReport> = self
            .inner
            .published
            .read()
            .iter()
            .map(|(name, p)| {
                let report = CredentialReport {
                    connection: name.clone(),
                    expires_at: p.credential_expires_at,
                    renewed: 0,
                    failed: 0,
                };
                (name.clone(), report)
            })
            .collect();
        for (name, (renewed, failed)) in self.inner.renewals.all() {
            let report = reports.entry(name.clone()).or_insert_with(|| CredentialReport {
                connection: name,
                expires_at: None,
                renewed: 0,
                failed: 0,
            });
            report.renewed = renewed;
            report.failed = failed;
        }
        reports.into_values().collect()
    }

    /// Whether the provider of Connection `name` is known to be down or another cluster (not
    /// merely "not engaged yet", as right after a restart or a leader hand-over).
    pub fn is_down(&self, name: &str) -> bool {
        self.inner
            .published
            .read()
            .get(name)
            .is_some_and(|p| p.state.is_down(p.failed))
    }

    /// A receiver that changes whenever a provider is engaged or disengaged.
    pub fn changes(&self) -> watch::Receiver<u64> {
        self.inner.changes.subscribe()
    }

    /// Names of Connections whose link saw something a pass should look at (an exported CRD
    /// changed).
    pub(crate) fn wakes(&self) -> broadcast::Receiver<String> {
        self.inner.wakes.subscribe()
    }

    fn slot(&self, name: &str) -> Arc<tokio::sync::Mutex<Link>> {
        self.inner
            .links
            .lock()
            .entry(name.to_string())
            .or_insert_with(|| Arc::new(tokio::sync::Mutex::new(Link::new(name))))
            .clone()
    }

    /// One pass of Connection `input.conn`'s link: connect, prove the identity, renew the
    /// heartbeat and discover when due, engage or disengage; what it found.
    pub(crate) async fn step(&self, ctx: &Context, input: Input<'_>) -> LinkReport {
        let name = input.conn.name_any();
        let slot = self.slot(&name);
        let mut link = slot.lock().await;
        let env = Env {
            ctx,
            pairs: &self.inner.pairs,
            wakes: &self.inner.wakes,
            renewals: &self.inner.renewals,
        };
        let mut report = link.pass(&env, input).await;
        report.credential_expires_at = link.credential_expires_at();
        report.renewal_failed = link.renewal.as_ref().and_then(|r| r.failure.clone());
        self.publish(&link);
        report
    }

    /// Ends the link of a Connection that is gone (disengaged; nothing is deleted).
    pub(crate) async fn forget(&self, ctx: &Context, name: &str) {
        let slot = self.inner.links.lock().remove(name);
        if let Some(slot) = slot {
            let mut link = slot.lock().await;
            link.drop_engagement(ctx, "the Connection is gone").await;
        }
        let removed = self.inner.published.write().remove(name);
        self.inner.renewals.forget(name);
        if removed.is_some_and(|p| p.engaged.is_some()) {
            self.inner.changes.send_modify(|n| *n += 1);
        }
    }

    /// Ends every link (leadership lost, shutdown): caches stopped, clients dropped, nothing
    /// deleted; the next term starts from `Unlinked`.
    pub(crate) fn drop_all(&self) {
        let slots: Vec<_> = std::mem::take(&mut *self.inner.links.lock()).into_values().collect();
        let published = std::mem::take(&mut *self.inner.published.write());
        for provider in published.into_values().filter_map(|p| p.engaged) {
            tracing::info!(connection = %provider.name, reason = "leadership lost or shutdown", "disengaged provider");
            provider.shut_down();
        }
        drop(slots);
        self.inner.changes.send_modify(|n| *n += 1);
    }

    fn publish(&self, link: &Link) {
        let next = Published {
            state: link.state.clone(),
            failed: link.failed,
            engaged: link.engagement.clone(),
            credential_expires_at: link.credential_expires_at(),
        };
        let mut published = self.inner.published.write();
        let before = published.insert(link.name.clone(), next);
        let was_down = before.as_ref().is_some_and(|p| p.state.is_down(p.failed));
        let engagement_changed = match (before.and_then(|p| p.engaged), &link.engagement) {
            (Some(a), Some(b)) => !Arc::ptr_eq(&a, b),
            (None, None) => false,
            _ => true,
        };
        // A first failure counts as a change too: bindings mark their objects stale.
        let newly_down = !was_down && link.state.is_down(link.failed);
        drop(published);
        if engagement_changed || newly_down {
            self.inner.changes.send_modify(|n| *n += 1);
        }
    }
}

/// What a pass needs besides its link.
struct Env<'a> {
    ctx: &'a Context,
    pairs: &'a heartbeat::Pairs,
    wakes: &'a broadcast::Sender<String>,
    renewals: &'a renew::Counts,
}

/// One Connection's provider link.
struct Link {
    name: String,
    state: LinkState,
    /// The last pass failed (the provider is known down unless it is still engaged).
    failed: bool,
    kubeconfig: Option<ProviderKubeconfig>,
    client: Option<Arc<dyn ClusterClient>>,
    /// The token `client` sends, replaced in place when the token is renewed.
    bearer: BearerToken,
    /// When the issued token the link runs on is renewed (`None`: not an issued token, or not
    /// scheduled yet).
    renewal: Option<renew::Renewal>,
    /// The token a renewal of this link replaced, which the Secret store may still show until
    /// it has seen the write.
    superseded: Option<String>,
    /// The identity read through this client, standing while the Lease renewals are unbroken.
    identity: Option<ClusterIdentity>,
    /// UIDs pinned by this process, so a pass on a stale cached Connection (pin written,
    /// watch event not yet seen) still compares against the pin.
    pinned: Option<(String, String)>,
    /// The Lease as this link last wrote it (its next renewal is one update).
    lease: Option<heartbeat::Renewed>,
    last_renew: Option<Instant>,
    lease_denied: Option<String>,
    discovered: Option<Discovered>,
    last_discovery: Option<Instant>,
    discovery_denied: Option<String>,
    exports: Option<ExportsWatch>,
    engagement: Option<Arc<EngagedProvider>>,
    /// Retries of a failing link (reset by a proven pass).
    backoff: Option<Backoff>,
    /// While failing: when the next attempt is due.
    retry_at: Option<Instant>,
    /// While faltering: when the first failure happened (wall clock) and the last one's cause.
    trouble: Option<(jiff::Timestamp, String)>,
    /// What the last failed attempt found (reported again while its backoff runs).
    last_failure: Option<Failure>,
}

impl Link {
    fn new(name: &str) -> Self {
        Self {
            name: name.to_string(),
            state: LinkState::Unlinked,
            failed: false,
            kubeconfig: None,
            client: None,
            bearer: BearerToken::default(),
            renewal: None,
            superseded: None,
            identity: None,
            pinned: None,
            lease: None,
            last_renew: None,
            lease_denied: None,
            discovered: None,
            last_discovery: None,
            discovery_denied: None,
            exports: None,
            engagement: None,
            backoff: None,
            retry_at: None,
            trouble: None,
            last_failure: None,
        }
    }

    /// Takes on the kubeconfig the Secret holds now; returns the one the link runs on. A newer
    /// token of the same ServiceAccount for the same server and CA (a renewal, this link's own
    /// or a new bind's) goes into the running client: the provider stays engaged and no syncer
    /// restarts. Anything else different ends the link, which starts over on the new one.
    async fn accept(&mut self, env: &Env<'_>, offered: ProviderKubeconfig) -> ProviderKubeconfig {
        let Some(current) = self.kubeconfig.clone() else {
            self.kubeconfig = Some(offered.clone());
            return offered;
        };
        if current == offered {
            self.superseded = None;
            return offered;
        }
        let token = match &offered.credentials {
            Credentials::Token(token) => Some(token.as_str()),
            Credentials::ClientCertificate { .. } => None,
        };
        if token.is_some() && token == self.superseded.as_deref() && current.renews(&offered) {
            // The store has not seen this link's own write of the renewed token yet.
            return current;
        }
        self.superseded = None;
        if self.client.is_some()
            && current.renews(&offered)
            && let Some(token) = token
        {
            self.bearer.set(token);
            self.renewal = None;
            self.kubeconfig = Some(offered.clone());
            tracing::info!(connection = %self.name, "the Secret holds a newer token of the same ServiceAccount; the running client uses it, the provider stays engaged");
            return offered;
        }
        // New credentials, a new server or CA: the old link is over, and so is the wait its
        // failures earned.
        self.apply(env, Event::Reset).await;
        self.forget_failures();
        self.renewal = None;
        self.kubeconfig = Some(offered.clone());
        offered
    }

    /// A bearer for a new client of `kubeconfig`, holding its token (empty for certificates).
    fn fresh_bearer(&mut self, kubeconfig: &ProviderKubeconfig) -> BearerToken {
        self.bearer = match &kubeconfig.credentials {
            Credentials::Token(token) => BearerToken::new(token.clone()),
            Credentials::ClientCertificate { .. } => BearerToken::default(),
        };
        self.bearer.clone()
    }

    /// When the issued token the link runs on expires.
    fn credential_expires_at(&self) -> Option<jiff::Timestamp> {
        self.kubeconfig.as_ref()?.issued().map(|t| t.expires_at)
    }

    /// Renews the issued token the link runs on when it is due (see [`renew`]). A failure is
    /// reported and retried; it never fails the pass, and the current token is used until it
    /// expires.
    async fn renew_when_due(&mut self, env: &Env<'_>, input: &Input<'_>, client: &Arc<dyn ClusterClient>) {
        let Some(current) = self.kubeconfig.clone() else { return };
        let Some(issued) = current.issued() else {
            self.renewal = None;
            return;
        };
        if self.renewal.as_ref().is_none_or(|r| r.token != issued) {
            self.renewal = Some(renew::Renewal::new(env.ctx, &self.name, issued.clone()));
        }
        if self.renewal.as_ref().is_some_and(|r| Instant::now() < r.due) {
            return;
        }
        let renewed = match renew::request(client.as_ref(), &issued).await {
            Ok(token) => renew::write_back(env.ctx, &input.conn.spec.kubeconfig_secret_ref, &current, &token)
                .await
                .map(|kubeconfig| (token, kubeconfig)),
            Err(e) => Err(e),
        };
        match renewed {
            Ok((token, kubeconfig)) => {
                env.renewals.add(&self.name, true);
                self.bearer.set(token);
                if let Credentials::Token(old) = current.credentials {
                    self.superseded = Some(old);
                }
                let expires_at = kubeconfig.issued().map(|t| t.expires_at);
                self.renewal = kubeconfig.issued().map(|t| renew::Renewal::new(env.ctx, &self.name, t));
                self.kubeconfig = Some(kubeconfig);
                tracing::info!(connection = %self.name, expires_at = ?expires_at, "renewed the provider credential");
            }
            Err(renew::RenewError::Replaced { secret }) => {
                // Not a failure: the Secret's new kubeconfig arrives by its watch and wins.
                tracing::info!(connection = %self.name, %secret, "the kubeconfig Secret was replaced during a renewal; its new content is used");
                if let Some(renewal) = self.renewal.as_mut() {
                    renewal.due = Instant::now() + RETRY_INITIAL_RENEWAL_WAIT;
                }
            }
            Err(e) => {
                env.renewals.add(&self.name, false);
                let message = format!(
                    "{e}; the current token is used until it expires at {}",
                    kbind_cluster::clock::format_time(issued.expires_at)
                );
                tracing::warn!(connection = %self.name, error = %e, "renewing the provider credential failed");
                if let Some(renewal) = self.renewal.as_mut() {
                    renewal.failed(env.ctx, &self.name, message, &e.cause());
                }
            }
        }
    }

    /// Forgets the failures of an earlier link (a new kubeconfig starts afresh).
    fn forget_failures(&mut self) {
        self.failed = false;
        self.retry_at = None;
        self.trouble = None;
        self.last_failure = None;
        self.backoff = None;
    }

    /// Feeds `event` to the state machine and carries out its effect.
    async fn apply(&mut self, env: &Env<'_>, event: Event) {
        let (next, effect) = state::step(&self.state, event, window(env.ctx.config.heartbeat_interval));
        self.state = next;
        match effect {
            Effect::Stay => {}
            Effect::Engage => self.engage(env.ctx),
            Effect::Drop => self.drop_engagement(env.ctx, "the provider link ended").await,
        }
    }

    fn engage(&mut self, ctx: &Context) {
        let (Some(client), LinkState::Engaged { uid }) = (&self.client, &self.state) else {
            return;
        };
        tracing::info!(connection = %self.name, identity = %uid, "engaged provider");
        self.engagement = Some(Arc::new(EngagedProvider::new(
            &self.name,
            client.clone(),
            uid,
            &ctx.randomness,
            ctx.config.watch_timeout,
        )));
    }

    /// Ends the engagement and drops the client: recovery connects afresh (contract §4).
    async fn drop_engagement(&mut self, ctx: &Context, why: &str) {
        if let Some(provider) = self.engagement.take() {
            tracing::info!(connection = %self.name, reason = why, "disengaged provider");
            provider.shut_down();
            if planted(Plant::DeleteOnDisengage) {
                planted_delete_pulled_crds(ctx, &self.name).await;
            }
        }
        if !planted(Plant::ReuseClientAfterDisengage) {
            self.client = None;
        }
        self.identity = None;
        self.lease = None;
        self.last_renew = None;
        self.last_discovery = None;
        self.exports = None;
    }

    /// One pass (see [`Links::step`]).
    async fn pass(&mut self, env: &Env<'_>, input: Input<'_>) -> LinkReport {
        let now = Instant::now();
        let Some(kubeconfig) = input.kubeconfig.clone() else {
            // Nothing is run or sent to the provider for a refused or missing kubeconfig.
            self.kubeconfig = None;
            self.failed = false;
            self.apply(env, Event::Reset).await;
            self.renewal = None;
            self.superseded = None;
            return LinkReport {
                health: Health::Failed(Failure::Unreachable("waiting for a valid kubeconfig Secret".into())),
                permission_denied: None,
                remote_uid: None,
                exported: None,
                next: Duration::MAX,
                credential_expires_at: None,
                renewal_failed: None,
            };
        };
        let kubeconfig = self.accept(env, kubeconfig).await;
        let window = window(env.ctx.config.heartbeat_interval);
        // A failed link waits out its backoff: a pass woken by anything else (its own status
        // write, a Secret label) sends nothing and says what the last attempt found.
        if !self.state.is_engaged()
            && let (Some(at), Some(failure)) = (self.retry_at, &self.last_failure)
            && now < at
        {
            return LinkReport::failed(failure.clone(), at - now);
        }
        // A faltering link retries on its backoff, its last try at the window's end (never
        // later, whatever a 429 asked): a pass woken before then sends nothing.
        if matches!(self.state, LinkState::Faltering { .. })
            && let Some(at) = self.retry_at
            && now < at
        {
            return self.faltering_report(now, window);
        }
        let client = match &self.client {
            Some(client) => client.clone(),
            None => match env
                .ctx
                .connector
                .connect(&kubeconfig, &self.fresh_bearer(&kubeconfig))
                .await
            {
                Ok(client) => {
                    self.client = Some(client.clone());
                    self.apply(env, Event::Connected).await;
                    client
                }
                Err(e) => return self.failed(env, &e, now).await,
            },
        };
        if self.client.is_some() && matches!(self.state, LinkState::Unlinked | LinkState::IdentityChanged { .. }) {
            // A client kept across a drop (only ever the planted bug) counts as a new link.
            self.apply(env, Event::Connected).await;
        }
        // A faltering link's pass may not outlast the window (its last try at the window's
        // end gets a moment of its own): a provider that swallows requests (a black hole) is
        // given up on time, not a request timeout later.
        let bound = match &self.state {
            LinkState::Faltering { since, .. } => (*since + window).saturating_duration_since(now).max(LAST_TRY),
            _ => Duration::MAX,
        };
        let driven = match tokio::time::timeout(bound, self.drive(env, &input, &client, now)).await {
            Ok(driven) => driven,
            Err(_) => Err(Stop::Failed(Error::Timeout(format!(
                "no request to the provider succeeded within {} s",
                window.as_secs()
            )))),
        };
        match driven {
            Ok(report) => report,
            Err(Stop::Failed(e)) => self.failed(env, &e, now).await,
            Err(Stop::Report(report)) => report,
        }
    }

    /// Proves the identity, renews the heartbeat and discovers when due, then engages or
    /// disengages as the Connection wants.
    async fn drive(
        &mut self,
        env: &Env<'_>,
        input: &Input<'_>,
        client: &Arc<dyn ClusterClient>,
        now: Instant,
    ) -> Result<LinkReport, Stop> {
        let config = &env.ctx.config;
        let status = input.conn.status.clone().unwrap_or_default();
        let pinned_remote = status.remote_cluster_uid.or_else(|| self.pinned.clone().map(|p| p.0));
        let pinned_local = status.local_cluster_uid.or_else(|| self.pinned.clone().map(|p| p.1));
        let lease_uid = pinned_local.clone().unwrap_or_else(|| input.local_uid.to_string());
        // A faltering link retries on its backoff (never before a 429's Retry-After); a
        // healthy one renews every heartbeat interval.
        let heartbeat_due = match self.retry_at {
            Some(at) => now >= at,
            None => is_due(self.last_renew, config.heartbeat_interval, now),
        };
        if matches!(self.state, LinkState::Faltering { .. }) && !heartbeat_due {
            // Faltering and not due (a pass woken by something else): nothing is sent before
            // the backoff, or a 429's Retry-After, has passed.
            return Err(Stop::Report(
                self.faltering_report(now, window(env.ctx.config.heartbeat_interval)),
            ));
        }
        if let Some(identity) = self.identity.clone().filter(|_| heartbeat_due) {
            let pair = (identity.uid.clone(), lease_uid.clone());
            match self.beat(env, client, &pair, now).await {
                Ok(true) => self.last_renew = Some(now),
                Ok(false) => self.identity = None,
                // An engaged link's sudden 403 (an apiserver that restarts answers 403 until
                // its RBAC caches have synced) is a failure like any other within the window.
                Err(e) if e.is_forbidden() && self.state.is_engaged() => return Err(Stop::Failed(e)),
                Err(e) => match classify(&e) {
                    Failure::Denied(message) => {
                        // No Lease to prove continuity with: the identity is read every time.
                        self.lease_denied = Some(message);
                        self.lease = None;
                        self.identity = None;
                        self.last_renew = Some(now);
                    }
                    Failure::Unauthorized(_) | Failure::Unreachable(_) | Failure::Expired(_) => {
                        return Err(Stop::Failed(e));
                    }
                },
            }
        }
        let identity = match self.identity.clone() {
            Some(identity) => identity,
            None => provider_identity(client.as_ref()).await.map_err(Stop::Failed)?,
        };
        let remote_changed = pinned_remote.as_deref().is_some_and(|uid| uid != identity.uid);
        let local_changed = pinned_local.as_deref().is_some_and(|uid| uid != input.local_uid);
        if remote_changed || local_changed {
            if planted(Plant::RenewLeaseWhileDisconnected) {
                let _ = heartbeat::renew(
                    client.as_ref(),
                    &config.lease_namespace,
                    input.local_uid,
                    env.ctx.clock.now(),
                )
                .await;
            }
            self.apply(
                env,
                Event::Mismatch {
                    found: identity.uid.clone(),
                },
            )
            .await;
            self.failed = true;
            return Ok(LinkReport {
                health: Health::IdentityChanged(if remote_changed { "provider" } else { "consumer" }),
                permission_denied: None,
                remote_uid: None,
                exported: None,
                next: config.rediscovery_interval.min(RETRY_MAX),
                credential_expires_at: None,
                renewal_failed: None,
            });
        }
        self.pinned
            .get_or_insert_with(|| (identity.uid.clone(), input.local_uid.to_string()));
        self.identity = Some(identity.clone());

        self.discover(env, input, client, &identity, now).await?;
        if is_due(self.last_renew, config.heartbeat_interval, now) {
            match heartbeat::renew(
                client.as_ref(),
                &config.lease_namespace,
                &lease_uid,
                env.ctx.clock.now(),
            )
            .await
            {
                Ok(lease) => {
                    env.pairs
                        .renewed(&(identity.uid.clone(), lease_uid.clone()), &lease, now);
                    self.lease = Some(lease);
                    self.lease_denied = None;
                }
                Err(e) if e.is_forbidden() && self.state.is_engaged() => return Err(Stop::Failed(e)),
                Err(e) => match classify(&e) {
                    Failure::Denied(message) => {
                        self.lease_denied = Some(message);
                        self.lease = None;
                        self.identity = None;
                    }
                    Failure::Unauthorized(_) | Failure::Unreachable(_) | Failure::Expired(_) => {
                        return Err(Stop::Failed(e));
                    }
                },
            }
            self.last_renew = Some(now);
        }

        // Proven: whatever failed before is over.
        if matches!(self.state, LinkState::Faltering { .. }) {
            tracing::info!(connection = %self.name, "the provider answers again; it stayed engaged");
        }
        self.failed = false;
        self.retry_at = None;
        self.trouble = None;
        self.last_failure = None;
        if let Some(b) = self.backoff.as_mut() {
            b.reset();
        }
        self.apply(
            env,
            Event::Proven {
                uid: identity.uid.clone(),
            },
        )
        .await;
        let permission_denied = self.discovery_denied.clone().or_else(|| self.lease_denied.clone());
        let wanted = match input.engage {
            Engage::WhenReady => permission_denied.is_none(),
            Engage::WhenConnected => true,
        };
        self.apply(env, if wanted { Event::Wanted } else { Event::Unwanted })
            .await;
        // The identity was proven in this pass: the TokenRequest reaches the pinned cluster.
        self.renew_when_due(env, input, client).await;
        let renewal_due = self
            .renewal
            .as_ref()
            .map_or(Duration::MAX, |r| r.due.saturating_duration_since(Instant::now()));
        let next = [
            due_in(self.last_renew, config.heartbeat_interval, now),
            due_in(self.last_discovery, config.rediscovery_interval, now),
            renewal_due,
        ]
        .into_iter()
        .min()
        .unwrap_or(RETRY_MAX)
        .clamp(MIN_REQUEUE, config.heartbeat_interval);
        Ok(LinkReport {
            health: Health::Connected,
            permission_denied,
            remote_uid: Some(identity.uid.clone()),
            exported: self.discovered.as_ref().map(|d| (d.apis.clone(), d.source)),
            next,
            credential_expires_at: None,
            renewal_failed: None,
        })
    }

    /// Discovery: from the exported CRDs' watch once it has listed, else a list when due.
    async fn discover(
        &mut self,
        env: &Env<'_>,
        input: &Input<'_>,
        client: &Arc<dyn ClusterClient>,
        identity: &ClusterIdentity,
        now: Instant,
    ) -> Result<(), Stop> {
        let kcp_like = identity.source == IdentitySource::LogicalCluster;
        let source = discovery::resolve_source(kcp_like, input.conn.spec.schema.source);
        if !kcp_like && self.exports.is_none() {
            self.exports = Some(ExportsWatch::start(
                client.clone(),
                crate::context::watcher_config(
                    &env.ctx.randomness.fork(&format!("link/{}", self.name)),
                    env.ctx.config.watch_timeout,
                ),
                self.name.clone(),
                env.wakes.clone(),
            ));
        }
        if let Some(apis) = self.exports.as_ref().and_then(ExportsWatch::exported) {
            self.discovered = Some(Discovered { apis, source });
            self.discovery_denied = None;
            self.last_discovery = Some(now);
            return Ok(());
        }
        let watched = self.exports.as_ref().is_some_and(|w| !w.is_refused());
        // A watch still listing will wake the Connection; poll only when there is none.
        if (watched && self.discovered.is_some())
            || !is_due(self.last_discovery, env.ctx.config.rediscovery_interval, now)
        {
            return Ok(());
        }
        match discover(client.as_ref(), kcp_like, input.conn.spec.schema.source).await {
            Ok(discovered) => {
                self.discovered = Some(discovered);
                self.discovery_denied = None;
            }
            Err(e) if e.is_forbidden() && self.state.is_engaged() => return Err(Stop::Failed(e)),
            Err(e) => match classify(&e) {
                Failure::Denied(message) => self.discovery_denied = Some(message),
                Failure::Unauthorized(_) | Failure::Unreachable(_) | Failure::Expired(_) => {
                    return Err(Stop::Failed(e));
                }
            },
        }
        self.last_discovery = Some(now);
        Ok(())
    }

    /// The heartbeat of a verified link: renews the pair's Lease in one update when this link's
    /// turn has come, else reads it back. `Ok(false)`: this link's continuity is not proven (no
    /// Lease to go from, or the provider no longer holds it as the pair wrote it), and the
    /// identity is read before anything else.
    async fn beat(
        &mut self,
        env: &Env<'_>,
        client: &Arc<dyn ClusterClient>,
        pair: &heartbeat::PairKey,
        now: Instant,
    ) -> Result<bool, Error> {
        let namespace = &env.ctx.config.lease_namespace;
        let lease_uid = &pair.1;
        let proven = match env.pairs.turn(pair, now, env.ctx.config.heartbeat_interval) {
            heartbeat::Turn::Check(written) => {
                heartbeat::check_unbroken(client.as_ref(), namespace, lease_uid, &written).await?
            }
            heartbeat::Turn::Renew(latest) => {
                let Some(last) = latest.map(|l| *l).or_else(|| self.lease.clone()) else {
                    return Ok(false);
                };
                let renewed =
                    heartbeat::renew_unbroken(client.as_ref(), namespace, lease_uid, env.ctx.clock.now(), &last)
                        .await?;
                match &renewed {
                    Some(lease) => env.pairs.renewed(pair, lease, now),
                    None => env.pairs.broken(pair),
                }
                renewed
            }
        };
        let unbroken = proven.is_some();
        self.lease = proven;
        if unbroken {
            self.lease_denied = None;
        }
        Ok(unbroken)
    }

    /// A request of the link failed: forgiven while engaged and within [`WINDOW`], else the
    /// link ends; retried on a jittered backoff that honours `Retry-After`.
    async fn failed(&mut self, env: &Env<'_>, e: &Error, started: Instant) -> LinkReport {
        let server = self.kubeconfig.as_ref().and_then(|k| server_address(&k.server));
        let failure = match classify_at(e, server.as_deref()) {
            Failure::Unauthorized(_) if let Some(expired) = self.expired(env.ctx) => Failure::Expired(expired),
            failure => failure,
        };
        let server = server.unwrap_or_default();
        self.last_failure = Some(failure.clone());
        let now = Instant::now();
        self.apply(env, Event::Failed { started, at: now }).await;
        let backoff = self.backoff.get_or_insert_with(|| {
            env.ctx
                .backoff(&format!("link/{}", self.name), RETRY_INITIAL, RETRY_MAX)
                .jitter(RETRY_JITTER)
        });
        let delay = backoff.after(e);
        self.retry_at = Some(now + delay);
        match &self.state {
            LinkState::Faltering { failures, since, .. } => {
                // The last try comes at the window's end at the latest, so a provider that
                // answers again by then keeps its engagement.
                let end = *since + window(env.ctx.config.heartbeat_interval);
                self.retry_at = self.retry_at.map(|at| at.min(end));
                tracing::info!(connection = %self.name, %server, failures, error = %crate::cause::http_cause(e), ?delay, "a provider request failed; the provider stays engaged");
                let cause = match failure {
                    Failure::Denied(m) | Failure::Unauthorized(m) | Failure::Unreachable(m) | Failure::Expired(m) => m,
                };
                let since = self
                    .trouble
                    .take()
                    .map_or_else(|| env.ctx.clock.now(), |(since, _)| since);
                self.trouble = Some((since, cause));
                self.faltering_report(now, window(env.ctx.config.heartbeat_interval))
            }
            _ => {
                tracing::info!(connection = %self.name, %server, error = %crate::cause::http_cause(e), ?delay, "the provider link failed");
                self.failed = true;
                self.trouble = None;
                LinkReport::failed(failure, delay)
            }
        }
    }

    /// What a 401 means when the link's issued token is past its expiry (on this clock; the
    /// provider's 401 is what says it is no longer accepted): where it came from and the way
    /// out. `None` for any other credential, or a token not expired yet (then it was revoked).
    fn expired(&self, ctx: &Context) -> Option<String> {
        let token = self.kubeconfig.as_ref()?.issued()?;
        (ctx.clock.now() >= token.expires_at).then(|| {
            format!(
                "the provider refuses the credentials (HTTP 401 Unauthorized): the issued token of ServiceAccount \
                 {}/{} expired at {} and was not renewed in time (was the konnector down, or the provider \
                 unreachable, for its last third of life?). Get a new one: run `kbind bind` again, or \
                 `kbind redeem` a new pickup; nothing is deleted meanwhile",
                token.namespace,
                token.name,
                kbind_cluster::clock::format_time(token.expires_at)
            )
        })
    }

    /// What a faltering link reports: the same until its cause changes, and when to look again
    /// (the next attempt, or the end of the window if sooner).
    fn faltering_report(&self, now: Instant, window: Duration) -> LinkReport {
        let started = match &self.state {
            LinkState::Faltering { since, .. } => *since,
            _ => now,
        };
        let retry_in = self
            .retry_at
            .map_or(Duration::ZERO, |at| at.saturating_duration_since(now));
        let window_left = (started + window).saturating_duration_since(now);
        let (since, cause) = self
            .trouble
            .clone()
            .unwrap_or_else(|| (jiff::Timestamp::UNIX_EPOCH, String::new()));
        LinkReport {
            health: Health::Faltering {
                since,
                cause,
                window_secs: window.as_secs(),
            },
            permission_denied: self.discovery_denied.clone().or_else(|| self.lease_denied.clone()),
            remote_uid: self.identity.as_ref().map(|i| i.uid.clone()),
            // What was discovered stands while the link is kept (SchemaInSync does not flap).
            exported: self.discovered.as_ref().map(|d| (d.apis.clone(), d.source)),
            next: retry_in.min(window_left).max(MIN_REQUEUE),
            credential_expires_at: None,
            renewal_failed: None,
        }
    }
}

/// Why a pass stopped early.
enum Stop {
    /// A provider request failed.
    Failed(Error),
    /// Nothing more to do this pass.
    Report(LinkReport),
}

impl From<Error> for Stop {
    fn from(e: Error) -> Self {
        Stop::Failed(e)
    }
}

fn is_due(last: Option<Instant>, every: Duration, now: Instant) -> bool {
    last.is_none_or(|at| now.saturating_duration_since(at) >= every)
}

/// How long until `every` has passed since `last`; an interval too long to add (a resync of
/// "forever") is never due.
fn due_in(last: Option<Instant>, every: Duration, now: Instant) -> Duration {
    last.map_or(Duration::ZERO, |at| match at.checked_add(every) {
        Some(due) => due.saturating_duration_since(now),
        None => Duration::MAX,
    })
}

/// The `Connected` condition of a link's health: its reason and message.
pub(crate) fn connected_condition(health: &Health) -> (bool, &'static str, String) {
    match health {
        Health::Connected => (
            true,
            reason::AS_EXPECTED,
            "connected to the provider with the pinned identity".into(),
        ),
        Health::Faltering {
            since,
            cause,
            window_secs,
        } => (
            true,
            reason::AS_EXPECTED,
            format!(
                "connected with the pinned identity, but provider requests have failed since {} ({cause}). \
                 Syncing goes on; the provider is disengaged only if failures last {} s",
                kbind_cluster::clock::format_time(*since),
                window_secs
            ),
        ),
        Health::Failed(Failure::Denied(message)) => (
            false,
            reason::FORBIDDEN,
            format!("cannot verify the provider's identity: {message}"),
        ),
        Health::Failed(Failure::Unauthorized(message)) => (false, reason::UNAUTHORIZED, message.clone()),
        Health::Failed(Failure::Expired(message)) => (false, reason::CREDENTIAL_EXPIRED, message.clone()),
        Health::Failed(Failure::Unreachable(message)) => (false, reason::PROVIDER_UNREACHABLE, message.clone()),
        Health::IdentityChanged(which) => (
            false,
            reason::CLUSTER_IDENTITY_CHANGED,
            format!(
                "the {which} cluster's identity differs from the pinned one; nothing is written to the provider. \
                 To accept a rebuilt provider, delete the Connection with annotation core.kbind.io/deletion-policy=Orphan and apply it again"
            ),
        ),
    }
}

/// The planted bug: "cleans up" the consumer CRDs pulled through this Connection on
/// disengage, which §8 invariant 1 forbids.
async fn planted_delete_pulled_crds(ctx: &Context, connection: &str) {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let res = kbind_cluster::ApiResource::erase::<CustomResourceDefinition>(&());
    let Ok(list) = ctx.consumer.list(&res, None, &Default::default()).await else {
        return;
    };
    for crd in list.items {
        if crd
            .annotations()
            .get(kbind_api::consts::annotation::CONNECTION)
            .map(String::as_str)
            == Some(connection)
        {
            let _ = ctx
                .consumer
                .delete(&res, None, &crd.name_any(), &Default::default())
                .await;
        }
    }
}

#[cfg(test)]
mod tests;
