//! The gateway's HTTP server: an accept loop over hyper's HTTP/1 connection builder, because
//! `axum::serve` sets no timer, so a client that never finishes its request headers (or keeps
//! an idle connection open) holds its socket forever, and it accepts without bound.
//!
//! Every connection gets hyper's header-read timeout: it starts whenever the connection waits
//! for a request, so it bounds both a half-sent request and an idle keep-alive connection. At
//! most `max_connections` are served at once; beyond that the loop stops accepting and new
//! clients wait in the kernel's backlog. Only HTTP/1.1 is served: browsers and the CLI reach
//! the gateway over TLS through a proxy that speaks HTTP/1.1 to it, and HTTP/2 version
//! detection would wait for a silent client's first bytes with no timeout.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a connection may take: the bounds [`serve`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's headers, counted from when the
    /// connection starts waiting for a request (so also the longest idle keep-alive).
    pub header_read_timeout: Duration,
    /// How many connections are served at once.
    pub max_connections: usize,
}

/// How long the loop pauses after a failed accept (out of file descriptors, mostly): accepting
/// again at once would spin on the same error.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Serves `app` on `listener` until `shutdown` is cancelled, then lets the open connections
/// finish their current request. Each request carries the peer address as
/// `ConnectInfo<SocketAddr>`, which the per-client limits key on.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) -> std::io::Result<()> {
    let slots = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    let mut connections = JoinSet::new();
    loop {
        // A slot first: at the limit, the loop stops accepting instead of accepting and dropping.
        let slot = tokio::select! {
            () = shutdown.cancelled() => break,
            slot = slots.clone().acquire_owned() => match slot {
                Ok(slot) => slot,
                Err(_) => break,
            },
        };
        let accepted = tokio::select! {
            () = shutdown.cancelled() => break,
            accepted = listener.accept() => accepted,
        };
        // Reap finished connection tasks so the set holds only open ones.
        while connections.try_join_next().is_some() {}
        let (stream, peer) = match accepted {
            Ok(accepted) => accepted,
            Err(e) => {
                tracing::warn!(error = %e, "the gateway failed to accept a connection");
                tokio::time::sleep(ACCEPT_RETRY).await;
                continue;
            }
        };
        let app = app.clone();
        let stop = shutdown.clone();
        connections.spawn(async move {
            let _slot = slot;
            serve_connection(stream, peer, app, limits, stop).await;
        });
    }
    while connections.join_next().await.is_some() {}
    Ok(())
}

async fn serve_connection(
    stream: tokio::net::TcpStream,
    peer: SocketAddr,
    app: Router,
    limits: ConnectionLimits,
    shutdown: CancellationToken,
) {
    let service = hyper::service::service_fn(move |mut request: http::Request<Incoming>| {
        request.extensions_mut().insert(ConnectInfo(peer));
        tower::Service::call(&mut app.clone(), request)
    });
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout);
    let connection = builder.serve_connection(TokioIo::new(stream), service);
    let mut connection = std::pin::pin!(connection);
    let result = tokio::select! {
        result = connection.as_mut() => result,
        () = shutdown.cancelled() => {
            connection.as_mut().graceful_shutdown();
            connection.await
        }
    };
    if let Err(e) = result {
        // Timeouts and clients that hang up are routine; the address is not logged (a client's).
        tracing::debug!(error = %e, "a gateway connection ended with an error");
    }
}
