//! Serving a fake cluster over a real socket: HTTPS with a generated CA (plain HTTP only on
//! request), kubeconfigs for its users, and the admin API next to the Kubernetes API.

mod admin;
mod kubeconfig;
mod listener;
pub use listener::HTTP2_MAX_STREAMS;
pub(crate) mod stall;
mod tls;
mod users;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio_rustls::TlsAcceptor;

pub use admin::{ADMIN_PREFIX, admin_router};
pub use kubeconfig::render as render_kubeconfig;
pub use tls::{Certificates, SERVING_NAMES};
pub use users::{Token, UserSpec, UserSpecError};

use crate::{FakeCluster, UserInfo};

/// How long open connections get to finish after shutdown, unless told otherwise.
pub const DEFAULT_GRACE_PERIOD: Duration = Duration::from_secs(5);

/// Why a server could not start.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The address could not be bound (in use, not local, no permission).
    #[error("failed to bind {addr}")]
    Bind {
        /// The address asked for.
        addr: SocketAddr,
        /// The operating system's reason.
        #[source]
        source: std::io::Error,
    },
    /// The bound socket's address could not be read.
    #[error("failed to read the bound address")]
    LocalAddr(#[source] std::io::Error),
    /// The CA or serving certificate could not be generated.
    #[error("failed to generate a certificate")]
    Certificate(#[source] rcgen::Error),
    /// rustls refused the generated certificate or the protocol versions.
    #[error("failed to build the TLS configuration")]
    Tls(#[source] tokio_rustls::rustls::Error),
    /// The operating system's random source failed while generating the admin token.
    #[error("failed to generate the admin token: no OS randomness")]
    Random,
    /// Two users were given the same name (their kubeconfigs would collide).
    #[error("user {user:?} is given more than once")]
    DuplicateUser {
        /// The repeated name.
        user: String,
    },
    /// Two users were given the same token.
    #[error("user {user:?} has a token that is already registered")]
    DuplicateToken {
        /// The user whose token collided.
        user: String,
    },
}

/// A `Result` with this module's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// How the server talks to clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Transport {
    /// TLS with a freshly generated CA; HTTP/2 and HTTP/1.1 negotiated through ALPN.
    #[default]
    Https,
    /// Plain HTTP (HTTP/1.1 and cleartext HTTP/2): only when explicitly asked for.
    InsecureHttp,
}

/// What to serve and where.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Address to bind; port 0 picks a free port.
    pub addr: SocketAddr,
    /// HTTPS (default) or plain HTTP.
    pub transport: Transport,
    /// The name in certificates and kubeconfigs.
    pub name: String,
    /// How long open connections get to finish after shutdown before they are closed.
    pub grace_period: Duration,
    /// The service answering every request.
    pub router: Router,
    /// Serve HTTP/1.1 only: `h2` is left out of ALPN and cleartext HTTP/2 is refused, as
    /// behind a proxy without HTTP/2 (clients fall back to HTTP/1.1).
    pub http1_only: bool,
}

impl ServeConfig {
    /// Serves `router` over HTTPS on a free loopback port.
    pub fn new(router: Router) -> Self {
        Self {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            transport: Transport::Https,
            name: "fakeapi".into(),
            grace_period: DEFAULT_GRACE_PERIOD,
            router,
            http1_only: false,
        }
    }

    /// Binds `addr` instead.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Uses `transport` instead of HTTPS.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Names the server in its certificates and kubeconfigs.
    pub fn name(mut self, name: &str) -> Self {
        self.name = name.to_string();
        self
    }

    /// Gives open connections `grace` to finish after shutdown.
    pub fn grace_period(mut self, grace: Duration) -> Self {
        self.grace_period = grace;
        self
    }

    /// Serves HTTP/1.1 only (see [`ServeConfig::http1_only`](ServeConfig#structfield.http1_only)).
    pub fn http1_only(mut self) -> Self {
        self.http1_only = true;
        self
    }
}

/// Starts serving; the server runs until [`RunningServer::shutdown`] or until it is dropped.
pub async fn serve(config: ServeConfig) -> Result<RunningServer> {
    serve_stallable(config, Arc::default()).await
}

/// [`serve`] with every connection behind `stall` (a cluster's black hole).
async fn serve_stallable(config: ServeConfig, stall: Arc<stall::StallSwitch>) -> Result<RunningServer> {
    let listener = TcpListener::bind(config.addr).await.map_err(|source| Error::Bind {
        addr: config.addr,
        source,
    })?;
    let addr = listener.local_addr().map_err(Error::LocalAddr)?;
    let certificates = match config.transport {
        Transport::Https => Some(Certificates::generate(&config.name)?),
        Transport::InsecureHttp => None,
    };
    let tls = certificates.as_ref().map(|c| {
        if config.http1_only {
            TlsAcceptor::from(Arc::new(tls::http1_only(&c.server_config)))
        } else {
            TlsAcceptor::from(c.server_config.clone())
        }
    });
    let protocol = listener::Protocol {
        tls,
        http1_only: config.http1_only,
        stall,
    };
    let url = base_url(config.transport, addr);
    let (stop, stopped) = oneshot::channel();
    let task = tokio::spawn(listener::run(
        listener,
        protocol,
        config.router,
        stopped,
        config.grace_period,
    ));
    tracing::info!(name = %config.name, %url, "serving");
    Ok(RunningServer {
        addr,
        url,
        name: config.name,
        ca_pem: certificates.map(|c| c.ca_pem),
        stop: Some(stop),
        task: Some(task),
        admin_token: None,
        users: Vec::new(),
    })
}

/// The URL clients dial: a wildcard bind is reached through loopback, which the certificate names.
fn base_url(transport: Transport, addr: SocketAddr) -> String {
    let scheme = match transport {
        Transport::Https => "https",
        Transport::InsecureHttp => "http",
    };
    let ip = match addr.ip() {
        IpAddr::V4(ip) if ip.is_unspecified() => IpAddr::V4(Ipv4Addr::LOCALHOST),
        IpAddr::V6(ip) if ip.is_unspecified() => IpAddr::V6(Ipv6Addr::LOCALHOST),
        ip => ip,
    };
    format!("{scheme}://{}", SocketAddr::new(ip, addr.port()))
}

/// How [`serve_cluster`] serves a cluster.
#[derive(Debug, Clone)]
pub struct ClusterServeOptions {
    /// Address to bind; port 0 picks a free port.
    pub addr: SocketAddr,
    /// HTTPS (default) or plain HTTP.
    pub transport: Transport,
    /// How long open connections get to finish after shutdown.
    pub grace_period: Duration,
    /// The admin's token; `None`: a random one.
    pub admin_token: Option<Token>,
    /// Users registered before the server starts.
    pub users: Vec<UserSpec>,
    /// Serve HTTP/1.1 only (see [`ServeConfig::http1_only`](ServeConfig#structfield.http1_only)).
    pub http1_only: bool,
}

impl Default for ClusterServeOptions {
    fn default() -> Self {
        Self {
            addr: SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), 0),
            transport: Transport::Https,
            grace_period: DEFAULT_GRACE_PERIOD,
            admin_token: None,
            users: Vec::new(),
            http1_only: false,
        }
    }
}

impl ClusterServeOptions {
    /// Binds `addr` instead of a free loopback port.
    pub fn addr(mut self, addr: SocketAddr) -> Self {
        self.addr = addr;
        self
    }

    /// Uses `transport` instead of HTTPS.
    pub fn transport(mut self, transport: Transport) -> Self {
        self.transport = transport;
        self
    }

    /// Registers `user` before serving.
    pub fn user(mut self, user: UserSpec) -> Self {
        self.users.push(user);
        self
    }

    /// Serves HTTP/1.1 only, so clients take their HTTP/1.1 fallback.
    pub fn http1_only(mut self) -> Self {
        self.http1_only = true;
        self
    }
}

/// The Kubernetes API of `cluster` plus its admin API, served with an admin user and `users`.
pub async fn serve_cluster(cluster: FakeCluster, options: ClusterServeOptions) -> Result<RunningServer> {
    let admin_token = match options.admin_token {
        Some(token) => token,
        None => Token::random().map_err(|_| Error::Random)?,
    };
    check_users(&cluster, &admin_token, &options.users)?;
    let router = crate::http::router(cluster.clone()).merge(admin_router(cluster.clone(), admin_token.clone()));
    let config = ServeConfig {
        addr: options.addr,
        transport: options.transport,
        name: cluster.name().to_string(),
        grace_period: options.grace_period,
        router,
        http1_only: options.http1_only,
    };
    // Behind the cluster's switch: `FakeCluster::black_hole` stalls its connections.
    let mut server = serve_stallable(config, cluster.inner.stall.clone()).await?;
    // Registered only once serving: a refused start leaves the cluster's tokens as they were.
    cluster.add_token(admin_token.expose(), UserInfo::admin());
    for user in &options.users {
        cluster.add_token(user.token.expose(), user.user_info());
    }
    server.admin_token = Some(admin_token);
    server.users = options.users;
    Ok(server)
}

/// Refuses repeated names and tokens already in use (re-pointing a token would be a takeover).
fn check_users(cluster: &FakeCluster, admin_token: &Token, users: &[UserSpec]) -> Result<()> {
    let admin = UserInfo::admin();
    if cluster
        .authenticate(admin_token.expose())
        .is_some_and(|user| user != admin)
    {
        return Err(Error::DuplicateToken { user: admin.name });
    }
    for (i, user) in users.iter().enumerate() {
        if users[..i].iter().any(|u| u.name == user.name) {
            return Err(Error::DuplicateUser {
                user: user.name.clone(),
            });
        }
        let taken_by_earlier = users[..i].iter().any(|u| u.token == user.token);
        if admin_token == &user.token || taken_by_earlier || cluster.authenticate(user.token.expose()).is_some() {
            return Err(Error::DuplicateToken {
                user: user.name.clone(),
            });
        }
    }
    Ok(())
}

/// A server that is accepting connections; dropping it starts a graceful shutdown.
#[derive(Debug)]
pub struct RunningServer {
    addr: SocketAddr,
    url: String,
    name: String,
    ca_pem: Option<String>,
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
    admin_token: Option<Token>,
    users: Vec<UserSpec>,
}

impl RunningServer {
    /// The bound address (with the real port when port 0 was asked for).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The URL clients use, e.g. `https://127.0.0.1:41234`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The PEM of the CA that signed the serving certificate; `None` for plain HTTP.
    pub fn ca_pem(&self) -> Option<&str> {
        self.ca_pem.as_deref()
    }

    /// A kubeconfig that reaches this server as `user_name` with bearer `user_token`.
    pub fn kubeconfig(&self, user_token: &str, user_name: &str) -> String {
        kubeconfig::render(&self.name, &self.url, self.ca_pem.as_deref(), user_name, user_token)
    }

    /// The admin's kubeconfig (servers started by [`serve_cluster`] only).
    pub fn admin_kubeconfig(&self) -> Option<String> {
        let token = self.admin_token.as_ref()?;
        Some(self.kubeconfig(token.expose(), &UserInfo::admin().name))
    }

    /// The users registered at start, whose kubeconfigs [`RunningServer::user_kubeconfig`] gives.
    pub fn users(&self) -> &[UserSpec] {
        &self.users
    }

    /// The kubeconfig of a user registered at start.
    pub fn user_kubeconfig(&self, name: &str) -> Option<String> {
        let user = self.users.iter().find(|u| u.name == name)?;
        Some(self.kubeconfig(user.token.expose(), &user.name))
    }

    /// Stops accepting, lets open requests finish within the grace period, then closes the rest.
    pub async fn shutdown(mut self) {
        drop(self.stop.take());
        if let Some(task) = self.task.take()
            && let Err(error) = task.await
        {
            tracing::warn!(%error, "server task failed");
        }
    }
}
