//! The HTTP stack under `kube::Client`. kube-client 5's default stack speaks HTTP/1.1 only, so
//! every open watch holds a TCP+TLS connection and hyper's buffers of its own (most of an idle
//! konnector's heap, with three watches per bound API). This stack offers HTTP/2 by ALPN:
//! a server that accepts it, as kube-apiserver does, carries every request and watch of one
//! client over one connection; a server that does not gets HTTP/1.1. The layers above
//! the connection are kube's own (base URI, credentials, extra headers), in kube's order; no
//! retry layer (see `KubeClusterClient::from_config`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use hyper_timeout::TimeoutConnector;
use parking_lot::Mutex;

use http::{Request, Response};
use http_body::Frame;
use http_body_util::BodyExt as _;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};
use kube::client::{Body, ClientBuilder, ConfigExt as _, DynBody};
use tower::util::BoxService;
use tower::{BoxError, Service, ServiceBuilder, ServiceExt as _};

use crate::token::BearerToken;

/// The boxed service every client of ours is built over.
pub type Transport = BoxService<Request<Body>, Response<Box<DynBody>>, BoxError>;

/// How long an HTTP/2 connection may stay silent before it is pinged, so a dead peer ends
/// every request and watch it carries instead of leaving them waiting on the kernel's
/// retransmissions (about 15 minutes): client-go's `ReadIdleTimeout` is 30 s too.
pub const HTTP2_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(30);

/// How long a ping may go unanswered before the connection, and every watch on it, is closed:
/// client-go's `PingTimeout` (15 s). A dead connection is thus noticed within 45 s.
pub const HTTP2_KEEP_ALIVE_TIMEOUT: Duration = Duration::from_secs(15);

/// How long a TCP connection may be idle (no unacknowledged data) before the kernel probes it.
/// The only liveness check an HTTP/1.1 connection has: a pooled connection or a quiet watch to
/// a peer that vanished would otherwise be kept (and a watch wait) for hours. 30 s as Go's and
/// so client-go's dialer; on HTTP/2 the pings above usually notice first.
pub const TCP_KEEPALIVE_IDLE: Duration = Duration::from_secs(30);

/// The pause between unanswered keepalive probes. Shorter than Go's 30 s: with
/// [`TCP_KEEPALIVE_RETRIES`] a silent peer is declared dead 60 s after the connection went
/// quiet (Go: 30 s + 9 × 30 s), within the heartbeat Lease's 60 s.
pub const TCP_KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);

/// Unanswered probes before the kernel closes the connection (Linux's default is 9).
pub const TCP_KEEPALIVE_RETRIES: u32 = 3;

/// How the transport notices a dead peer. A probe only runs on a connection with nothing in
/// flight; a request sent into a dead connection is bounded by
/// [`RequestTimeout`](crate::timeout::RequestTimeout) instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TransportOptions {
    /// Silence on an HTTP/2 connection before it is pinged.
    pub http2_keep_alive_interval: Duration,
    /// How long an HTTP/2 ping may go unanswered before the connection is closed.
    pub http2_keep_alive_timeout: Duration,
    /// Idle time before TCP keepalive probes start.
    pub tcp_keepalive_idle: Duration,
    /// Time between unanswered TCP keepalive probes.
    pub tcp_keepalive_interval: Duration,
    /// Unanswered TCP keepalive probes before the connection is dropped.
    pub tcp_keepalive_retries: u32,
}

impl Default for TransportOptions {
    fn default() -> Self {
        Self {
            http2_keep_alive_interval: HTTP2_KEEP_ALIVE_INTERVAL,
            http2_keep_alive_timeout: HTTP2_KEEP_ALIVE_TIMEOUT,
            tcp_keepalive_idle: TCP_KEEPALIVE_IDLE,
            tcp_keepalive_interval: TCP_KEEPALIVE_INTERVAL,
            tcp_keepalive_retries: TCP_KEEPALIVE_RETRIES,
        }
    }
}

/// Whether [`client_builder`] covers everything `config` asks for. A proxy, a TLS server name
/// override or an exec plugin (whose client certificates expire) are left to kube's own stack,
/// which knows them; the konnector's provider configs never carry them.
pub fn supports(config: &kube::Config) -> bool {
    config.proxy_url.is_none() && config.tls_server_name.is_none() && config.auth_info.exec.is_none()
}

/// The TCP dialer under TLS. HTTP/2 writes a request as several small frames; with Nagle on,
/// the last one waits for the peer's delayed ACK (40 ms on Linux) on every request on a quiet
/// connection (Go's `net.Dial` sets the option too). Keepalive probes end a connection whose
/// peer vanished silently (see [`TCP_KEEPALIVE_IDLE`]).
fn tcp_connector(options: &TransportOptions) -> HttpConnector {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_keepalive(Some(options.tcp_keepalive_idle));
    http.set_keepalive_interval(Some(options.tcp_keepalive_interval));
    http.set_keepalive_retries(Some(options.tcp_keepalive_retries));
    http
}

/// A `ClientBuilder` for `config` over [`Transport`] (see [`supports`]).
pub fn client_builder(config: &kube::Config) -> Result<ClientBuilder<Transport>, kube::Error> {
    client_builder_with(config, &TransportOptions::default())
}

/// [`client_builder`] with `options` instead of the defaults (tests shorten the pings).
pub fn client_builder_with(
    config: &kube::Config,
    options: &TransportOptions,
) -> Result<ClientBuilder<Transport>, kube::Error> {
    client_builder_with_bearer(config, options, None)
}

/// [`client_builder_with`], authenticating with `bearer` (read on every request, so a renewed
/// token is sent from the next request on) instead of `config`'s credentials when given.
pub fn client_builder_with_bearer(
    config: &kube::Config,
    options: &TransportOptions,
    bearer: Option<BearerToken>,
) -> Result<ClientBuilder<Transport>, kube::Error> {
    let http = tcp_connector(options);
    let tls = config.rustls_client_config()?;
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(tls)
        .https_or_http()
        .enable_all_versions()
        .wrap_connector(http);
    let mut connector = hyper_timeout::TimeoutConnector::new(https);
    connector.set_connect_timeout(config.connect_timeout);
    connector.set_read_timeout(config.read_timeout);
    connector.set_write_timeout(config.write_timeout);
    let mut builder = hyper_util::client::legacy::Builder::new(TokioExecutor::new());
    builder
        .timer(TokioTimer::new())
        .http2_keep_alive_interval(Some(options.http2_keep_alive_interval))
        .http2_keep_alive_timeout(options.http2_keep_alive_timeout)
        .http2_keep_alive_while_idle(true);
    let client = Pool {
        slots: Arc::new(Mutex::new(Vec::new())),
        builder,
        connector,
    };
    let auth = match &bearer {
        Some(_) => None,
        None => config.auth_layer()?,
    };
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(auth)
        .option_layer(bearer.map(BearerLayer))
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client)
        .boxed();
    Ok(ClientBuilder::new(service, config.default_namespace.clone()))
}

/// Sets `Authorization` from a [`BearerToken`] on every request (kube's own auth layer reads a
/// token fixed when the client was built).
#[derive(Clone)]
struct BearerLayer(BearerToken);

impl<S> tower::Layer<S> for BearerLayer {
    type Service = Bearer<S>;

    fn layer(&self, inner: S) -> Bearer<S> {
        Bearer {
            inner,
            token: self.0.clone(),
        }
    }
}

/// The service of [`BearerLayer`].
#[derive(Clone)]
struct Bearer<S> {
    inner: S,
    token: BearerToken,
}

impl<S, B> Service<Request<B>> for Bearer<S>
where
    S: Service<Request<B>, Error = BoxError>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = BoxError;
    type Future = futures::future::Either<S::Future, futures::future::Ready<Result<S::Response, BoxError>>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, mut request: Request<B>) -> Self::Future {
        match self.token.header() {
            Ok(value) => {
                request.headers_mut().insert(http::header::AUTHORIZATION, value);
                futures::future::Either::Left(self.inner.call(request))
            }
            Err(e) => futures::future::Either::Right(futures::future::ready(Err(BoxError::from(e)))),
        }
    }
}

/// The most requests one connection carries at once. kube-apiserver allows 100 concurrent
/// HTTP/2 streams per connection (since the 2023 rapid-reset fixes), and hyper, unlike Go's
/// client, queues a request beyond the server's limit on the same connection instead of
/// dialling another: a watch would wait there for another watch to end (minutes). So the pool
/// dials another connection itself once one carries this many.
const STREAMS_PER_CONNECTION: usize = 64;

type Connector = TimeoutConnector<hyper_rustls::HttpsConnector<HttpConnector>>;
type Hyper = hyper_util::client::legacy::Client<Connector, Body>;

/// One hyper client (one HTTP/2 connection, or HTTP/1.1 connections) and the requests it
/// carries now.
struct Slot {
    client: Hyper,
    open: Arc<AtomicUsize>,
}

/// hyper clients to one server, each carrying at most [`STREAMS_PER_CONNECTION`] requests at
/// once; a request goes to the first with room, and a new client is made when none has.
#[derive(Clone)]
struct Pool {
    slots: Arc<Mutex<Vec<Slot>>>,
    builder: hyper_util::client::legacy::Builder,
    connector: Connector,
}

impl Pool {
    /// A client with room for one more request, and the count that request holds.
    fn pick(&self) -> (Hyper, Arc<AtomicUsize>) {
        let mut slots = self.slots.lock();
        let slot = match slots
            .iter()
            .position(|s| s.open.load(Ordering::Acquire) < STREAMS_PER_CONNECTION)
        {
            Some(i) => &slots[i],
            None => {
                slots.push(Slot {
                    client: self.builder.build(self.connector.clone()),
                    open: Arc::new(AtomicUsize::new(0)),
                });
                &slots[slots.len() - 1]
            }
        };
        slot.open.fetch_add(1, Ordering::AcqRel);
        (slot.client.clone(), slot.open.clone())
    }
}

impl Service<Request<Body>> for Pool {
    type Response = Response<Box<DynBody>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), BoxError>> {
        // A hyper client is always ready; its connections are made per request.
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Body>) -> Self::Future {
        let (client, open) = self.pick();
        let held = Held(open);
        Box::pin(async move {
            let response = client.request(request).await?;
            Ok(response.map(|body| Box::new(Counted { body, _held: held }.map_err(BoxError::from)) as Box<DynBody>))
        })
    }
}

/// One request's place on its connection, given back when the response body is dropped (for
/// a watch: when the watch ends) or the request fails.
struct Held(Arc<AtomicUsize>);

impl Drop for Held {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A response body that holds its request's place on the connection until it is dropped.
struct Counted {
    body: hyper::body::Incoming,
    _held: Held,
}

impl http_body::Body for Counted {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tower::ServiceExt;

    #[tokio::test]
    async fn connections_are_dialled_without_nagle() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let uri: http::Uri = format!("https://127.0.0.1:{port}").parse().expect("uri");
        let stream = tcp_connector(&TransportOptions::default())
            .oneshot(uri)
            .await
            .expect("dial");
        assert!(
            stream.inner().nodelay().expect("read TCP_NODELAY"),
            "HTTP/2 frames would wait for delayed ACKs"
        );
    }

    #[tokio::test]
    async fn connections_are_dialled_with_tcp_keepalive() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let port = listener.local_addr().expect("address").port();
        let uri: http::Uri = format!("https://127.0.0.1:{port}").parse().expect("uri");
        let stream = tcp_connector(&TransportOptions::default())
            .oneshot(uri)
            .await
            .expect("dial");
        let socket = socket2::SockRef::from(stream.inner());
        assert!(
            socket.keepalive().expect("read SO_KEEPALIVE"),
            "a peer that vanished silently would hold an idle HTTP/1.1 connection for hours"
        );
        assert_eq!(
            socket.tcp_keepalive_time().expect("read TCP_KEEPIDLE"),
            TCP_KEEPALIVE_IDLE
        );
        assert_eq!(
            socket.tcp_keepalive_interval().expect("read TCP_KEEPINTVL"),
            TCP_KEEPALIVE_INTERVAL
        );
        assert_eq!(
            socket.tcp_keepalive_retries().expect("read TCP_KEEPCNT"),
            TCP_KEEPALIVE_RETRIES
        );
    }
}
