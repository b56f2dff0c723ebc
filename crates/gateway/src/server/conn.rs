//! One client connection's socket, guarded: a client that stops reading (its writes blocked for
//! `timeouts.client_write`) gets its connection closed, which drops the response body and with
//! it the upstream request — buffering stays bounded by the socket buffers and hyper's write
//! buffer, and nothing waits on a reader that went away without closing. Each connection also
//! holds one of `limits.max_connections` slots, counted in `switchyard_connections_open`.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Instant, Sleep};

use crate::metrics::Metrics;

/// A connection's slot: open while it lives.
pub struct Slot {
    _permit: OwnedSemaphorePermit,
    metrics: Arc<Metrics>,
}

impl Slot {
    pub fn new(permit: OwnedSemaphorePermit, metrics: Arc<Metrics>) -> Slot {
        metrics.connections_open.fetch_add(1, Relaxed);
        Slot { _permit: permit, metrics }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.metrics.connections_open.fetch_sub(1, Relaxed);
    }
}

pin_project! {
    /// The socket with a timeout on blocked writes.
    pub struct Guarded<T> {
        #[pin]
        io: T,
        limit: Duration,
        // Allocated on the first blocked write, then re-armed; `armed` while writes are blocked.
        stall: Option<Pin<Box<Sleep>>>,
        armed: bool,
        slot: Slot,
    }
}

impl<T> Guarded<T> {
    pub fn new(io: T, limit: Duration, slot: Slot) -> Self {
        Guarded { io, limit, stall: None, armed: false, slot }
    }
}

/// A write that could not proceed: wait, unless the client has left it blocked too long.
fn blocked<R>(
    stall: &mut Option<Pin<Box<Sleep>>>,
    armed: &mut bool,
    limit: Duration,
    slot: &Slot,
    cx: &mut Context<'_>,
) -> Poll<io::Result<R>> {
    let deadline = Instant::now() + limit;
    let sleep = stall.get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
    if !*armed {
        sleep.as_mut().reset(deadline);
        *armed = true;
    }
    match sleep.as_mut().poll(cx) {
        Poll::Pending => Poll::Pending,
        Poll::Ready(()) => {
            slot.metrics.client_write_timeouts.fetch_add(1, Relaxed);
            Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, "the client stopped reading")))
        }
    }
}

impl<T: AsyncRead> AsyncRead for Guarded<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_read(cx, buf)
    }
}

impl<T: AsyncWrite> AsyncWrite for Guarded<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        let this = self.project();
        match this.io.poll_write(cx, buf) {
            Poll::Pending => blocked(this.stall, this.armed, *this.limit, this.slot, cx),
            ready => {
                *this.armed = false;
                ready
            }
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.project();
        match this.io.poll_write_vectored(cx, bufs) {
            Poll::Pending => blocked(this.stall, this.armed, *this.limit, this.slot, cx),
            ready => {
                *this.armed = false;
                ready
            }
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.project();
        match this.io.poll_flush(cx) {
            Poll::Pending => blocked(this.stall, this.armed, *this.limit, this.slot, cx),
            ready => {
                *this.armed = false;
                ready
            }
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().io.poll_shutdown(cx)
    }
}
