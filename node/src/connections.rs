//! What a node's port takes from whoever reaches it: a bounded number of connections at
//! once, and none that stays silent. Without the bound a flood of connections takes every
//! file descriptor the process has, which RocksDB and the connections to peers need too;
//! without the deadline a connection that sends nothing holds one for good (HTTP/2 pings
//! begin only once a connection has said something).
//!
//! The next connection is accepted when one closes (until then the kernel's backlog holds
//! it), and a connection that has not sent the [`PREFACE_BYTES`] that open an HTTP/2
//! connection within [`SILENCE_TIMEOUT`] of its acceptance is closed (hyper's server waits
//! for them without a deadline, and its pings start only after them). With TLS the slot is
//! taken before the handshake, which has a deadline of its own, and the preface is awaited
//! again, decrypted, after it.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{ready, Context, Poll};
use std::time::Duration;

use futures::Stream;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::Sleep;
use tonic::transport::server::Connected;

/// How long a new connection may take to send its first [`PREFACE_BYTES`].
pub const SILENCE_TIMEOUT: Duration = Duration::from_secs(10);

/// The length of the client preface that opens every HTTP/2 connection
/// (`PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n`); a TLS ClientHello is longer.
pub const PREFACE_BYTES: usize = 24;

/// The pause after a failed accept (out of file descriptors, say) before the next: the
/// error would otherwise repeat at once, in a loop that only logs.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// A connection holding one of the node's connection slots (if given one) until it is
/// dropped, and failing its reads if its first [`PREFACE_BYTES`] have not arrived by its
/// deadline.
pub struct Limited<IO> {
    io: IO,
    _slot: Option<OwnedSemaphorePermit>,
    /// Until the first [`PREFACE_BYTES`] have arrived.
    silent_until: Option<Pin<Box<Sleep>>>,
    /// Bytes still to arrive before the deadline no longer applies.
    awaited: usize,
}

impl<IO> Limited<IO> {
    /// `io`, in `slot` if given one, to send its first [`PREFACE_BYTES`] within `silence`.
    pub fn new(io: IO, slot: Option<OwnedSemaphorePermit>, silence: Duration) -> Self {
        Limited {
            io,
            _slot: slot,
            silent_until: Some(Box::pin(tokio::time::sleep(silence))),
            awaited: PREFACE_BYTES,
        }
    }
}

impl<IO: AsyncRead + Unpin> AsyncRead for Limited<IO> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = &mut *self;
        let before = buf.filled().len();
        let read = Pin::new(&mut this.io).poll_read(cx, buf);
        match &read {
            Poll::Ready(Ok(())) if this.silent_until.is_some() => {
                this.awaited = this.awaited.saturating_sub(buf.filled().len() - before);
                if this.awaited == 0 {
                    this.silent_until = None;
                }
            }
            Poll::Pending => {
                if let Some(deadline) = &mut this.silent_until {
                    ready!(deadline.as_mut().poll(cx));
                    return Poll::Ready(Err(io::Error::new(
                        io::ErrorKind::TimedOut,
                        "the connection sent nothing in time",
                    )));
                }
            }
            _ => {}
        }
        read
    }
}

impl<IO: AsyncWrite + Unpin> AsyncWrite for Limited<IO> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

impl<IO: Connected> Connected for Limited<IO> {
    type ConnectInfo = IO::ConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.io.connect_info()
    }
}

/// The node's connection slots: `max` connections at once.
#[derive(Clone)]
pub struct Slots(Arc<Semaphore>);

impl Slots {
    /// `max` slots (at least one).
    pub fn new(max: usize) -> Self {
        Slots(Arc::new(Semaphore::new(max.max(1))))
    }

    /// The next connection on `listener`, once a slot is free, in that slot; waits out
    /// failed accepts. `None` once the slots are closed (never, as the node uses them).
    pub async fn accept(
        &self,
        listener: &TcpListener,
    ) -> Option<(TcpStream, OwnedSemaphorePermit)> {
        let slot = self.0.clone().acquire_owned().await.ok()?;
        loop {
            match listener.accept().await {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    return Some((tcp, slot));
                }
                Err(e) => {
                    tracing::warn!("accept failed: {e}");
                    tokio::time::sleep(ACCEPT_RETRY).await;
                }
            }
        }
    }
}

/// The plain TCP connections accepted on `listener`, each in one of `slots` and closed if
/// silent for `silence`.
pub fn incoming(
    listener: TcpListener,
    slots: Slots,
    silence: Duration,
) -> impl Stream<Item = Result<Limited<TcpStream>, io::Error>> {
    futures::stream::unfold((listener, slots), move |(listener, slots)| async move {
        let (tcp, slot) = slots.accept(&listener).await?;
        Some((
            Ok(Limited::new(tcp, Some(slot), silence)),
            (listener, slots),
        ))
    })
}

#[cfg(test)]
mod tests {
    use futures::StreamExt;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    async fn listener() -> (TcpListener, std::net::SocketAddr) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        (listener, addr)
    }

    #[tokio::test]
    async fn a_connection_that_does_not_open_in_time_is_failed_and_one_that_does_is_not() {
        let (listener, addr) = listener().await;
        let silence = Duration::from_millis(200);
        let mut accepted = Box::pin(incoming(listener, Slots::new(4), silence));

        let _silent = TcpStream::connect(addr).await.expect("connect");
        let mut conn = accepted.next().await.expect("accepted").expect("ok");
        let mut buf = [0_u8; 8];
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("the read ends");
        assert_eq!(
            read.expect_err("silence fails the read").kind(),
            io::ErrorKind::TimedOut
        );

        // A few bytes, then silence: not a preface, so the deadline still holds.
        let mut mumbling = TcpStream::connect(addr).await.expect("connect");
        let mut conn = accepted.next().await.expect("accepted").expect("ok");
        mumbling.write_all(b"PRI").await.expect("write");
        let mut buf = [0_u8; 64];
        assert_eq!(conn.read(&mut buf).await.expect("read"), 3);
        let read = tokio::time::timeout(Duration::from_secs(5), conn.read(&mut buf))
            .await
            .expect("the read ends");
        assert_eq!(read.expect_err("fails").kind(), io::ErrorKind::TimedOut);

        let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        assert_eq!(preface.len(), PREFACE_BYTES);
        let mut speaking = TcpStream::connect(addr).await.expect("connect");
        let mut conn = accepted.next().await.expect("accepted").expect("ok");
        speaking.write_all(preface).await.expect("write");
        let mut read = 0;
        while read < PREFACE_BYTES {
            read += conn.read(&mut buf[read..]).await.expect("read");
        }
        // Past the deadline, a connection that has opened may pause as long as it likes.
        tokio::time::sleep(silence * 2).await;
        speaking.write_all(b"again").await.expect("write");
        assert_eq!(conn.read(&mut buf).await.expect("read"), 5);
    }

    #[tokio::test]
    async fn a_connection_beyond_the_slots_waits_until_one_closes() {
        let (listener, addr) = listener().await;
        let mut accepted = Box::pin(incoming(listener, Slots::new(1), SILENCE_TIMEOUT));

        let _first = TcpStream::connect(addr).await.expect("connect");
        let first = accepted.next().await.expect("accepted").expect("ok");
        let _second = TcpStream::connect(addr)
            .await
            .expect("connect (the backlog takes it)");
        let waited = tokio::time::timeout(Duration::from_millis(300), accepted.next()).await;
        assert!(waited.is_err(), "accepted a connection beyond the slots");
        drop(first);
        let second = tokio::time::timeout(Duration::from_secs(5), accepted.next())
            .await
            .expect("accepted once a slot is free");
        assert!(second.expect("a connection").is_ok());
    }
}
