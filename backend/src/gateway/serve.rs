//! The gateway's HTTP server: an accept loop over hyper's HTTP/1 connection builder, because
//! `axum::serve` sets no timer, so a client that never finishes its request headers (or keeps
//! an idle connection open) holds its socket forever, and it accepts without bound.
//!
//! Every connection gets hyper's header-read timeout: it starts whenever the connection waits
//! for a request, so it bounds both a half-sent request and an idle keep-alive connection. A
//! request body is bounded by the router's body deadline (`--body-read-timeout`), the handlers by
//! their own timeouts (`--bind-timeout`, the provider client's), and a response the client does
//! not read by [`StallGuard`]: a write that makes no progress for the header-read timeout fails
//! and ends the connection (hyper has no write timer, and TCP keeps a zero-window peer forever).
//! So no phase of a connection can hold its slot without the client making progress. At
//! most `max_connections` are served at once; beyond that the loop stops accepting and new
//! clients wait in the kernel's backlog. Only HTTP/1.1 is served: browsers and the CLI reach
//! the gateway over TLS through a proxy that speaks HTTP/1.1 to it, and HTTP/2 version
//! detection would wait for a silent client's first bytes with no timeout.

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use hyper::body::Incoming;
use hyper_util::rt::{TokioIo, TokioTimer};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

/// What a connection may take: the bounds [`serve`] enforces.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionLimits {
    /// How long a client may take to send a request's headers, counted from when the
    /// connection starts waiting for a request (so also the longest idle keep-alive), and how
    /// long a response write may wait for the client to read.
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
    let stream = StallGuard::new(stream, limits.header_read_timeout);
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

/// A connection whose writes fail with `TimedOut` once one has waited `timeout` for the peer to
/// take data (a client that stopped reading); any progress restarts the timer.
struct StallGuard<S> {
    inner: S,
    timeout: Duration,
    stalled: Option<Pin<Box<tokio::time::Sleep>>>,
}

impl<S> StallGuard<S> {
    fn new(inner: S, timeout: Duration) -> Self {
        StallGuard {
            inner,
            timeout,
            stalled: None,
        }
    }

    fn guard<T>(&mut self, cx: &mut Context<'_>, poll: Poll<std::io::Result<T>>) -> Poll<std::io::Result<T>> {
        if poll.is_ready() {
            self.stalled = None;
            return poll;
        }
        let timeout = self.timeout;
        let stalled = self
            .stalled
            .get_or_insert_with(|| Box::pin(tokio::time::sleep(timeout)));
        if stalled.as_mut().poll(cx).is_ready() {
            self.stalled = None;
            return Poll::Ready(Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                "the client read nothing of the response for the header-read timeout",
            )));
        }
        Poll::Pending
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for StallGuard<S> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for StallGuard<S> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write(cx, buf);
        this.guard(cx, poll)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[std::io::IoSlice<'_>],
    ) -> Poll<std::io::Result<usize>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_write_vectored(cx, bufs);
        this.guard(cx, poll)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_flush(cx);
        this.guard(cx, poll)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<std::io::Result<()>> {
        let this = self.get_mut();
        let poll = Pin::new(&mut this.inner).poll_shutdown(cx);
        this.guard(cx, poll)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};

    #[tokio::test(start_paused = true)]
    async fn a_write_the_client_never_reads_times_out_and_one_it_reads_does_not() {
        let (server, mut client) = tokio::io::duplex(16);
        let mut guarded = StallGuard::new(server, Duration::from_secs(30));
        let response = vec![b'x'; 4096];
        let stuck = guarded.write_all(&response).await.expect_err("nobody reads");
        assert_eq!(stuck.kind(), std::io::ErrorKind::TimedOut);

        // A client that keeps reading, however slowly within the timeout, gets everything.
        let reader = tokio::spawn(async move {
            let mut got = Vec::new();
            let mut chunk = [0u8; 16];
            loop {
                tokio::time::sleep(Duration::from_secs(20)).await;
                match client.read(&mut chunk).await {
                    Ok(0) | Err(_) => return got.len(),
                    Ok(n) => got.extend_from_slice(&chunk[..n]),
                }
            }
        });
        guarded.write_all(&response[..64]).await.expect("read in time");
        guarded.shutdown().await.expect("shut down");
        drop(guarded);
        // 16 bytes were stuck in the pipe from the first write.
        assert_eq!(reader.await.expect("reader"), 64 + 16);
    }
}
