//! The accept loop: TLS (or plain HTTP when asked), HTTP/1.1 and HTTP/2, graceful shutdown.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use hyper_util::server::graceful::{GracefulShutdown, Watcher};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;

use super::stall::{StallSwitch, Stallable};

/// How long a client may take to complete the TLS handshake.
const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);
/// Pause after a failed accept (e.g. out of file descriptors) so the loop does not spin.
const ACCEPT_BACKOFF: Duration = Duration::from_millis(50);
/// kube-apiserver's limit of concurrent HTTP/2 streams per connection (100 since the 2023
/// rapid-reset fixes), so a client that opens more watches than that meets it here too.
pub const HTTP2_MAX_STREAMS: u32 = 100;
/// What Go's net/http answers a plain HTTP request on a TLS port, as kube-apiserver does.
const PLAIN_HTTP_ANSWER: &[u8] = b"HTTP/1.0 400 Bad Request\r\n\r\nClient sent an HTTP request to an HTTPS server.\n";

/// How each connection is served.
#[derive(Clone)]
pub(crate) struct Protocol {
    /// TLS, or plain HTTP when `None`.
    pub(crate) tls: Option<TlsAcceptor>,
    /// HTTP/1.1 only: no cleartext HTTP/2 either (TLS leaves `h2` out of ALPN already).
    pub(crate) http1_only: bool,
    /// Stalls every connection while on (the black hole).
    pub(crate) stall: Arc<StallSwitch>,
}

/// Serves `router` on `listener` until `shutdown` fires or its sender is dropped, then lets
/// open connections finish for up to `grace` and closes the rest (watches never finish).
pub(crate) async fn run(
    listener: TcpListener,
    protocol: Protocol,
    router: Router,
    mut shutdown: oneshot::Receiver<()>,
    grace: Duration,
) {
    let graceful = GracefulShutdown::new();
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((stream, peer)) => {
                    let conn = serve_connection(stream, peer, protocol.clone(), router.clone(), graceful.watcher());
                    connections.spawn(conn);
                }
                Err(error) => {
                    tracing::warn!(%error, "failed to accept a connection");
                    tokio::time::sleep(ACCEPT_BACKOFF).await;
                }
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
    drop(listener);
    tracing::debug!(open = graceful.count(), "shutting down");
    if tokio::time::timeout(grace, graceful.shutdown()).await.is_err() {
        tracing::debug!("connections still open after the grace period; closing them");
    }
    connections.shutdown().await;
}

async fn serve_connection(stream: TcpStream, peer: SocketAddr, protocol: Protocol, router: Router, watcher: Watcher) {
    // Small answers and watch events should not wait for Nagle.
    let _ = stream.set_nodelay(true);
    // A connection accepted into the black hole is left open and unread (the peek below and
    // the handshake's deadline would otherwise answer or close it) until the hole is lifted.
    protocol.stall.flowing().await;
    let Protocol { tls, http1_only, stall } = protocol;
    let Some(acceptor) = tls else {
        return serve_http(Stallable::new(stream, stall), peer, router, watcher, http1_only).await;
    };
    if sends_plain_http(&stream).await {
        tracing::debug!(%peer, "refused a plain HTTP request on the TLS port");
        let mut stream = stream;
        let _ = stream.write_all(PLAIN_HTTP_ANSWER).await;
        let _ = stream.shutdown().await;
        return;
    }
    // Stalled under TLS: the black hole swallows records, handshake included. A hole that
    // opens mid-handshake still lets the handshake's deadline close the connection (a FIN):
    // a corner left as it is, since what it models is a client that finished its handshake.
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, acceptor.accept(Stallable::new(stream, stall))).await {
        Ok(Ok(tls_stream)) => serve_http(tls_stream, peer, router, watcher, http1_only).await,
        Ok(Err(error)) => tracing::debug!(%peer, %error, "TLS handshake failed"),
        Err(_) => tracing::debug!(%peer, "TLS handshake timed out"),
    }
}

/// Whether the first bytes are an HTTP request line rather than a TLS record (Go's check).
async fn sends_plain_http(stream: &TcpStream) -> bool {
    let mut head = [0u8; 5];
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, stream.peek(&mut head)).await {
        Ok(Ok(5)) => [b"GET /", b"HEAD ", b"POST ", b"PUT /", b"OPTIO"].contains(&&head),
        _ => false,
    }
}

async fn serve_http<I>(io: I, peer: SocketAddr, router: Router, watcher: Watcher, http1_only: bool)
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let service = TowerToHyperService::new(router);
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder.http2().max_concurrent_streams(HTTP2_MAX_STREAMS);
    if http1_only {
        builder = builder.http1_only();
    }
    let conn = builder.serve_connection_with_upgrades(TokioIo::new(io), service);
    if let Err(error) = watcher.watch(conn.into_owned()).await {
        tracing::debug!(%peer, %error, "connection ended with an error");
    }
}
