//! The black hole on the wire: a switch that stops every byte of the server's connections in
//! both directions without closing them (no RST, no FIN), as a dropped route or a firewall that
//! silently discards packets would. HTTP/2 pings go unanswered; only a client's own deadlines
//! can tell the connection is dead. Lifting it lets the bytes flow again, as TCP's
//! retransmissions would once the route is back.

use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker, ready};

use parking_lot::Mutex;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// Whether connections are stalled, and who waits for them to flow again.
#[derive(Debug, Default)]
pub(crate) struct StallSwitch {
    /// Read without the lock on every poll: a server that is never stalled pays one load.
    on: AtomicBool,
    waiting: Mutex<Vec<Waker>>,
}

impl StallSwitch {
    /// Stalls (`true`) or releases (`false`) every connection using this switch.
    pub(crate) fn set(&self, on: bool) {
        let mut waiting = self.waiting.lock();
        self.on.store(on, Ordering::SeqCst);
        if !on {
            for waker in waiting.drain(..) {
                waker.wake();
            }
        }
    }

    /// Ready while the switch is off; otherwise wakes `cx` once it is turned off.
    fn poll_flowing(&self, cx: &mut Context<'_>) -> Poll<()> {
        if !self.on.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        let mut waiting = self.waiting.lock();
        // Checked again under the lock: `set(false)` may have drained the wakers meanwhile.
        if !self.on.load(Ordering::SeqCst) {
            return Poll::Ready(());
        }
        if !waiting.iter().any(|w| w.will_wake(cx.waker())) {
            waiting.push(cx.waker().clone());
        }
        Poll::Pending
    }

    /// Waits until the switch is off.
    pub(crate) async fn flowing(&self) {
        std::future::poll_fn(|cx| self.poll_flowing(cx)).await;
    }
}

/// A connection that reads and writes nothing while its switch is on.
pub(crate) struct Stallable<IO> {
    io: IO,
    switch: std::sync::Arc<StallSwitch>,
}

impl<IO> Stallable<IO> {
    /// Puts `io` behind `switch`.
    pub(crate) fn new(io: IO, switch: std::sync::Arc<StallSwitch>) -> Self {
        Self { io, switch }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Stallable<IO> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        ready!(self.switch.poll_flowing(cx));
        Pin::new(&mut self.io).poll_read(cx, buf)
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Stallable<IO> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        ready!(self.switch.poll_flowing(cx));
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        ready!(self.switch.poll_flowing(cx));
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        ready!(self.switch.poll_flowing(cx));
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // Not even a FIN leaves a stalled connection.
        ready!(self.switch.poll_flowing(cx));
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    #[tokio::test]
    async fn a_stalled_connection_moves_no_byte_until_released() {
        let switch = Arc::new(StallSwitch::default());
        let (ours, mut theirs) = tokio::io::duplex(64);
        let mut stalled = Stallable::new(ours, switch.clone());
        theirs.write_all(b"ping").await.unwrap();
        switch.set(true);

        let mut buf = [0u8; 4];
        let mut read = std::pin::pin!(stalled.read_exact(&mut buf));
        assert!(
            futures::poll!(read.as_mut()).is_pending(),
            "the byte waiting in the pipe is not read"
        );
        switch.set(false);
        read.await.unwrap();
        assert_eq!(&buf, b"ping");

        switch.set(true);
        let mut write = std::pin::pin!(stalled.write_all(b"pong"));
        assert!(futures::poll!(write.as_mut()).is_pending(), "nothing is written");
        let mut shutdown_buf = [0u8; 1];
        assert!(
            futures::poll!(std::pin::pin!(theirs.read(&mut shutdown_buf))).is_pending(),
            "the peer sees neither bytes nor an end"
        );
        switch.set(false);
        write.await.unwrap();
        let mut answer = [0u8; 4];
        theirs.read_exact(&mut answer).await.unwrap();
        assert_eq!(&answer, b"pong");
    }
}
