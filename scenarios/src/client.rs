//! `WorldClient`: how actors of the world reach a fake cluster — as a fixed user or by bearer
//! token (re-authenticated on every request, so revocation bites at once), behind a switch
//! that cuts this one client off (a network split between one actor and one cluster).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use async_trait::async_trait;
use fakeapi::{FakeClient, FakeCluster};
use kbind_cluster::{BearerToken, ClusterClient, Error, Layer, Request, Result, WatchStream};

/// Who the client acts as.
#[derive(Debug, Clone)]
enum Principal {
    /// A fixed user.
    User(FakeClient),
    /// Whoever the bearer token authenticates as, at the time of each request.
    Token {
        cluster: FakeCluster,
        /// Read on every request: a renewal sets a new one on the running client.
        token: BearerToken,
        /// The server's generation (bumped when the server behind the URL is rebuilt).
        server_generation: Arc<AtomicU64>,
        /// The generation this client's connection was made to.
        connected_to: Arc<AtomicU64>,
    },
}

/// A client of one world cluster with its own network switch.
#[derive(Debug, Clone)]
pub struct WorldClient {
    principal: Principal,
    cut: Arc<AtomicBool>,
}

impl WorldClient {
    /// A client acting as a fixed user.
    pub fn user(client: FakeClient, cut: Arc<AtomicBool>) -> Self {
        Self {
            principal: Principal::User(client),
            cut,
        }
    }

    /// A client authenticating with a bearer token to a server of generation `server_generation`.
    pub fn token(
        cluster: FakeCluster,
        token: BearerToken,
        server_generation: Arc<AtomicU64>,
        cut: Arc<AtomicBool>,
    ) -> Self {
        let connected_to = Arc::new(AtomicU64::new(server_generation.load(Ordering::SeqCst)));
        Self {
            principal: Principal::Token {
                cluster,
                token,
                server_generation,
                connected_to,
            },
            cut,
        }
    }

    fn resolve(&self) -> Result<FakeClient> {
        if self.cut.load(Ordering::SeqCst) {
            return Err(Error::Transport("dial tcp: connect: connection refused".into()));
        }
        match &self.principal {
            Principal::User(client) => Ok(client.clone()),
            Principal::Token {
                cluster,
                token,
                server_generation,
                connected_to,
            } => {
                // A rebuilt server resets the connections to the old one; the client redials.
                let now = server_generation.load(Ordering::SeqCst);
                if connected_to.swap(now, Ordering::SeqCst) != now {
                    return Err(Error::Transport("read tcp: connection reset by peer".into()));
                }
                Self::authenticated(cluster, &token.get())
            }
        }
    }

    fn authenticated(cluster: &FakeCluster, token: &str) -> Result<FakeClient> {
        {
            match cluster.authenticate(token) {
                Some(user) => Ok(cluster.client(user)),
                None => Err(Error::Unauthorized {
                    message: "Unauthorized".into(),
                }),
            }
        }
    }
}

#[async_trait]
impl Layer for WorldClient {
    async fn route(&self, _request: Request<'_>) -> Result<Arc<dyn ClusterClient>> {
        Ok(Arc::new(self.resolve()?))
    }

    /// A cut ends open watches too, as a broken connection would.
    fn wrap_watch(&self, stream: WatchStream) -> WatchStream {
        let cut = self.cut.clone();
        Box::pin(futures::StreamExt::take_while(stream, move |_| {
            let open = !cut.load(Ordering::SeqCst);
            async move { open }
        }))
    }
}
