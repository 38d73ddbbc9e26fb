//! A fault-injecting TCP proxy in front of an apiserver: partitions, latency and cut connections, switched at run time.
//!
//! TLS passes through untouched, so a kubeconfig keeps the apiserver's CA and only its `server` changes to
//! [`FaultProxy::server`]; the serving certificate names 127.0.0.1, so verification still succeeds.
//!
//! ```no_run
//! # async fn example(apiserver: std::net::SocketAddr) -> std::io::Result<()> {
//! use kbind_testenv::FaultProxy;
//! let proxy = FaultProxy::start(apiserver).await?;
//! proxy.partition(); // new connections are closed at once, open ones are cut
//! proxy.heal();
//! proxy.drop_connections(); // every watch ends; clients re-connect
//! proxy.black_hole(); // connections stay open, nothing passes either way
//! proxy.lift_black_hole();
//! # Ok(())
//! # }
//! ```

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The switches every connection of one proxy consults.
#[derive(Debug)]
struct Faults {
    upstream: SocketAddr,
    partitioned: AtomicBool,
    /// While `true` nothing is forwarded and nothing is closed (see [`FaultProxy::black_hole`]).
    black_hole: watch::Sender<bool>,
    latency: Mutex<Duration>,
    /// Bumped to cut every open connection; each connection remembers the value it started under.
    cuts: watch::Sender<u64>,
    accepted: AtomicU64,
    forwarded: AtomicU64,
    open: AtomicUsize,
}

impl Faults {
    fn latency(&self) -> Duration {
        *self.latency.lock()
    }

    fn cut_all(&self) {
        self.cuts.send_modify(|epoch| *epoch += 1);
    }

    /// Returns once no black hole is on (at once when none is).
    async fn black_hole_lifted(&self) {
        let mut black_hole = self.black_hole.subscribe();
        // The sender lives as long as `self`, so waiting cannot fail.
        let _ = black_hole.wait_for(|on| !*on).await;
    }
}

/// A running proxy on 127.0.0.1; dropping it stops accepting and cuts every open connection.
#[derive(Debug)]
pub struct FaultProxy {
    addr: SocketAddr,
    faults: Arc<Faults>,
    accept: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on a free loopback port and forwards each connection to `upstream`.
    pub async fn start(upstream: SocketAddr) -> io::Result<Self> {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let addr = listener.local_addr()?;
        let faults = Arc::new(Faults {
            upstream,
            partitioned: AtomicBool::new(false),
            black_hole: watch::Sender::new(false),
            latency: Mutex::new(Duration::ZERO),
            cuts: watch::Sender::new(0),
            accepted: AtomicU64::new(0),
            forwarded: AtomicU64::new(0),
            open: AtomicUsize::new(0),
        });
        let accept = tokio::spawn(accept_loop(listener, faults.clone()));
        Ok(Self { addr, faults, accept })
    }

    /// Where clients connect.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// The proxy as an apiserver URL, `https://127.0.0.1:<port>`.
    pub fn server(&self) -> String {
        format!("https://{}", self.addr)
    }

    /// Where connections are forwarded.
    pub fn upstream(&self) -> SocketAddr {
        self.faults.upstream
    }

    /// Cuts every open connection and closes each new one at once, until [`FaultProxy::heal`].
    pub fn partition(&self) {
        self.faults.partitioned.store(true, Ordering::SeqCst);
        self.faults.cut_all();
    }

    /// Forwards new connections again.
    pub fn heal(&self) {
        self.faults.partitioned.store(false, Ordering::SeqCst);
    }

    /// Whether the proxy is partitioned.
    pub fn is_partitioned(&self) -> bool {
        self.faults.partitioned.load(Ordering::SeqCst)
    }

    /// Makes the proxy a black hole until [`FaultProxy::lift_black_hole`]: new connections are
    /// accepted and not forwarded, open ones stop forwarding in both directions, and none is
    /// closed (no FIN, no RST), as with a route that silently drops packets. Only a client's own
    /// deadlines (HTTP/2 pings, request timeouts) notice.
    pub fn black_hole(&self) {
        self.faults.black_hole.send_replace(true);
    }

    /// Lifts the black hole: what was held is forwarded, as TCP would retransmit it once the
    /// route is back (a client that gave up has closed its side by then).
    pub fn lift_black_hole(&self) {
        self.faults.black_hole.send_replace(false);
    }

    /// Whether the proxy is a black hole.
    pub fn is_black_holed(&self) -> bool {
        *self.faults.black_hole.borrow()
    }

    /// Delays every chunk in either direction by `delay` from now on (zero turns latency off).
    pub fn latency(&self, delay: Duration) {
        *self.faults.latency.lock() = delay;
    }

    /// Cuts every open connection once (ending every watch); new connections are forwarded as before.
    pub fn drop_connections(&self) {
        self.faults.cut_all();
    }

    /// How many connections were accepted so far, refused ones included.
    pub fn accepted(&self) -> u64 {
        self.faults.accepted.load(Ordering::SeqCst)
    }

    /// How many connections reached the upstream so far.
    pub fn forwarded(&self) -> u64 {
        self.faults.forwarded.load(Ordering::SeqCst)
    }

    /// How many forwarded connections are open now.
    pub fn open_connections(&self) -> usize {
        self.faults.open.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.accept.abort();
        self.faults.cut_all();
    }
}

async fn accept_loop(listener: TcpListener, faults: Arc<Faults>) {
    loop {
        let Ok((client, _)) = listener.accept().await else {
            // Why go on: accept errors (e.g. too many open files) are per connection, not fatal to the listener.
            continue;
        };
        faults.accepted.fetch_add(1, Ordering::SeqCst);
        if faults.partitioned.load(Ordering::SeqCst) {
            drop(client);
            continue;
        }
        tokio::spawn(forward(client, faults.clone()));
    }
}

/// Counts a forwarded connection as open for as long as it lives.
struct Open(Arc<Faults>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::SeqCst);
    }
}

async fn forward(client: TcpStream, faults: Arc<Faults>) {
    let mut cuts = faults.cuts.subscribe();
    let started_under = *cuts.borrow_and_update();
    // Why hold the client open: a black hole answers nothing, not even with a close.
    tokio::select! {
        _ = faults.black_hole_lifted() => {}
        _ = cuts.wait_for(|epoch| *epoch != started_under) => return,
    }
    let Ok(upstream) = TcpStream::connect(faults.upstream).await else {
        return;
    };
    // Why check again: a partition or cut may have come while connecting.
    if faults.partitioned.load(Ordering::SeqCst) || *cuts.borrow() != started_under {
        return;
    }
    faults.forwarded.fetch_add(1, Ordering::SeqCst);
    faults.open.fetch_add(1, Ordering::SeqCst);
    let _open = Open(faults.clone());
    let _ = client.set_nodelay(true);
    let _ = upstream.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (upstream_read, upstream_write) = upstream.into_split();
    let both_ways = async {
        tokio::join!(
            pump(client_read, upstream_write, &faults),
            pump(upstream_read, client_write, &faults)
        )
    };
    tokio::select! {
        _ = both_ways => {}
        // Dropping the halves closes both sockets: the client reads EOF (or a reset) mid-stream.
        _ = cuts.wait_for(|epoch| *epoch != started_under) => {}
    }
}

/// Copies one direction chunk by chunk, each after the current latency; passes a half-close on.
/// Nothing is read or written, a half-close included, while a black hole is on.
async fn pump(mut from: OwnedReadHalf, mut to: OwnedWriteHalf, faults: &Faults) {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        faults.black_hole_lifted().await;
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        let delay = faults.latency();
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        // Why wait again: a hole that opened while this chunk was read swallows it too.
        faults.black_hole_lifted().await;
        if to.write_all(&buf[..n]).await.is_err() {
            break;
        }
    }
    faults.black_hole_lifted().await;
    let _ = to.shutdown().await;
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A local echo server: every byte read is written back, until EOF.
    async fn echo_server() -> SocketAddr {
        let listener = TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                tokio::spawn(async move {
                    let (mut read, mut write) = socket.split();
                    let _ = tokio::io::copy(&mut read, &mut write).await;
                });
            }
        });
        addr
    }

    async fn round_trip(stream: &mut TcpStream, message: &[u8]) -> Vec<u8> {
        stream.write_all(message).await.unwrap();
        let mut answer = vec![0u8; message.len()];
        stream.read_exact(&mut answer).await.unwrap();
        answer
    }

    /// Whether the peer ended the connection: EOF or a reset, never more bytes.
    async fn ended(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        matches!(stream.read(&mut byte).await, Ok(0) | Err(_))
    }

    /// A new connection through a partitioned proxy is closed before anything comes back.
    async fn refused(proxy: &FaultProxy) -> bool {
        match TcpStream::connect(proxy.addr()).await {
            Err(_) => true,
            Ok(mut stream) => {
                let _ = stream.write_all(b"ping").await;
                ended(&mut stream).await
            }
        }
    }

    #[tokio::test]
    async fn bytes_pass_both_ways_unchanged() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"hello").await, b"hello");
        let large: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
        assert_eq!(round_trip(&mut stream, &large).await, large);
        assert_eq!(proxy.forwarded(), 1);
        assert_eq!(proxy.open_connections(), 1);
        assert!(proxy.server().starts_with("https://127.0.0.1:"));
    }

    #[tokio::test]
    async fn a_partition_cuts_open_connections_and_refuses_new_ones_until_healed() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut before = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut before, b"one").await, b"one");

        proxy.partition();
        assert!(proxy.is_partitioned());
        assert!(ended(&mut before).await, "the open connection is cut");
        assert!(refused(&proxy).await, "a new connection is closed at once");
        assert_eq!(
            proxy.forwarded(),
            1,
            "nothing reached the upstream during the partition"
        );

        proxy.heal();
        let mut after = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut after, b"two").await, b"two");
        assert_eq!(proxy.forwarded(), 2);
        assert_eq!(proxy.accepted(), 3);
    }

    #[tokio::test]
    async fn dropping_connections_cuts_each_open_one_once_and_keeps_forwarding() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut first = TcpStream::connect(proxy.addr()).await.unwrap();
        let mut second = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut first, b"a").await, b"a");
        assert_eq!(round_trip(&mut second, b"b").await, b"b");

        proxy.drop_connections();
        assert!(ended(&mut first).await);
        assert!(ended(&mut second).await);

        let mut again = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut again, b"c").await, b"c");
        assert!(!proxy.is_partitioned());
    }

    #[tokio::test(start_paused = true)]
    async fn latency_delays_each_chunk_and_can_be_turned_off() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        let delay = Duration::from_secs(30);
        proxy.latency(delay);
        // The paused clock only moves by the proxy's sleeps: one on the way in, one on the way back.
        let sent = tokio::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"slow").await, b"slow");
        assert!(sent.elapsed() >= 2 * delay, "answered after {:?}", sent.elapsed());

        proxy.latency(Duration::ZERO);
        let sent = tokio::time::Instant::now();
        assert_eq!(round_trip(&mut stream, b"fast").await, b"fast");
        assert!(sent.elapsed() < delay, "answered after {:?}", sent.elapsed());
    }

    /// How long a test watches for bytes that must not come: absence cannot be awaited, so
    /// this bounds the look, it does not order anything.
    const QUIET: Duration = Duration::from_millis(300);

    /// Whether anything (bytes or an end) arrives within [`QUIET`].
    async fn silent(stream: &mut TcpStream) -> bool {
        let mut byte = [0u8; 1];
        tokio::time::timeout(QUIET, stream.read(&mut byte)).await.is_err()
    }

    #[tokio::test]
    async fn a_black_hole_holds_open_and_new_connections_silently_until_lifted() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut before = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut before, b"one").await, b"one");

        proxy.black_hole();
        assert!(proxy.is_black_holed());
        before.write_all(b"two").await.unwrap();
        assert!(silent(&mut before).await, "an open connection neither answers nor ends");
        let mut during = TcpStream::connect(proxy.addr())
            .await
            .expect("new connections are accepted");
        during.write_all(b"three").await.unwrap();
        assert!(silent(&mut during).await, "a new connection neither answers nor ends");
        assert_eq!(proxy.forwarded(), 1, "the new connection did not reach the upstream");

        proxy.lift_black_hole();
        assert!(!proxy.is_black_holed());
        let mut answer = [0u8; 3];
        before.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"two", "what the hole held is delivered once it is lifted");
        let mut answer = [0u8; 5];
        during.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"three");
        assert_eq!(proxy.forwarded(), 2);
        assert_eq!(round_trip(&mut before, b"four").await, b"four");
    }

    #[tokio::test]
    async fn a_partition_cuts_connections_held_in_a_black_hole() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut open, b"a").await, b"a");
        proxy.black_hole();
        let mut held = TcpStream::connect(proxy.addr()).await.unwrap();
        held.write_all(b"b").await.unwrap();
        proxy.partition();
        assert!(ended(&mut open).await, "the open connection is cut");
        assert!(ended(&mut held).await, "the held connection is cut");
    }

    #[tokio::test]
    async fn dropping_the_proxy_cuts_its_connections() {
        let proxy = FaultProxy::start(echo_server().await).await.unwrap();
        let mut stream = TcpStream::connect(proxy.addr()).await.unwrap();
        assert_eq!(round_trip(&mut stream, b"x").await, b"x");
        drop(proxy);
        assert!(ended(&mut stream).await);
    }
}
