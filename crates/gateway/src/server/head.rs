//! A client connection's first request head, read before hyper takes the connection. hyper gives
//! every connection a read buffer and a write buffer of 8 KiB each, and its connection state, from
//! the moment it is served; a client that has sent only part of a head (a slow client, or a
//! slowloris holding connections open) would hold all of that. Read here first, it holds a buffer
//! the size of what it sent (from 1 KiB) and its task; hyper then reads the head from that buffer
//! and the rest from the socket, and serves every later request on the connection itself.

use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, ReadBuf};

/// The first read's buffer; it doubles while the head is longer.
const FIRST_READ: usize = 1024;

/// Read from `io` until the first head is complete (an empty line, which also ends HTTP/2's
/// preface), `max` bytes are in (a head too long for hyper, which refuses it with 431), or the
/// client closed: the bytes read, for hyper to read first.
pub async fn first_head<T: AsyncRead + Unpin>(io: &mut T, max: usize) -> io::Result<Vec<u8>> {
    let mut buf = Vec::with_capacity(FIRST_READ);
    loop {
        if buf.len() == buf.capacity() {
            buf.reserve(buf.len());
        }
        let n = io.read_buf(&mut buf).await?;
        // Where an end of head could start among the new bytes (it may straddle two reads).
        let from = buf.len().saturating_sub(n + 3);
        if n == 0 || buf.len() >= max || ends_a_head(&buf[from..]) {
            return Ok(buf);
        }
    }
}

/// Whether `bytes` hold an empty line: `\r\n\r\n`, or bare LF line ends (`\n\n`, `\n\r\n`),
/// which HTTP/1.1 lets a server accept and hyper does.
fn ends_a_head(bytes: &[u8]) -> bool {
    memchr::memchr_iter(b'\n', bytes).any(|i| match bytes.get(i + 1) {
        Some(b'\n') => true,
        Some(b'\r') => bytes.get(i + 2) == Some(&b'\n'),
        _ => false,
    })
}

/// The connection with its first head read (see `first_head`), or None: the client sent none
/// within `limit`, the read failed, or the server is draining.
pub async fn first_request<T: AsyncRead + Unpin>(
    mut io: T,
    limit: std::time::Duration,
    max: usize,
    draining: &mut tokio::sync::watch::Receiver<bool>,
) -> Option<Prefixed<T>> {
    let head = tokio::select! {
        read = tokio::time::timeout(limit, first_head(&mut io, max)) => match read {
            Ok(Ok(head)) => head,
            Ok(Err(e)) => {
                tracing::debug!(error = %e, "reading the first head failed");
                return None;
            }
            Err(_) => {
                tracing::debug!("no request head within timeouts.header_read");
                return None;
            }
        },
        _ = draining.changed() => return None,
    };
    Some(Prefixed::new(head, io))
}

/// `io`, with `prefix` (bytes already read from it) read first.
pub struct Prefixed<T> {
    prefix: Vec<u8>,
    at: usize,
    io: T,
}

impl<T> Prefixed<T> {
    pub fn new(prefix: Vec<u8>, io: T) -> Self {
        Prefixed { prefix, at: 0, io }
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.at < this.prefix.len() {
            let n = (this.prefix.len() - this.at).min(buf.remaining());
            buf.put_slice(&this.prefix[this.at..this.at + n]);
            this.at += n;
            if this.at == this.prefix.len() {
                // Read: its memory goes back now, not when the connection ends.
                this.prefix = Vec::new();
                this.at = 0;
            }
            return Poll::Ready(Ok(()));
        }
        Pin::new(&mut this.io).poll_read(cx, buf)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_first_head_is_read_across_reads_and_then_read_again_before_the_rest() {
        let (mut client, mut server) = tokio::io::duplex(64);
        let sending = tokio::spawn(async move {
            use tokio::io::AsyncWriteExt;
            // The end of the head straddles two writes; the body follows.
            client.write_all(b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r").await.unwrap();
            client.write_all(b"\n\r\nbody").await.unwrap();
            client
        });
        let head = first_head(&mut server, 32 * 1024).await.unwrap();
        assert!(head.windows(4).any(|w| w == b"\r\n\r\n"), "{head:?}");
        let _client = sending.await.unwrap();
        let mut rest = Vec::new();
        let mut io = Prefixed::new(head, server);
        while rest.len() < 51 {
            let mut chunk = [0u8; 16];
            let n = io.read(&mut chunk).await.unwrap();
            rest.extend_from_slice(&chunk[..n]);
        }
        assert_eq!(&rest[..], &b"POST / HTTP/1.1\r\nhost: x\r\ncontent-length: 4\r\n\r\nbody"[..]);
    }

    #[test]
    fn an_empty_line_ends_a_head_however_its_lines_end() {
        for head in [&b"GET / HTTP/1.1\r\nhost: x\r\n\r\n"[..], b"GET / HTTP/1.1\nhost: x\n\n", b"GET /\r\n\n"] {
            assert!(ends_a_head(head), "{head:?}");
        }
        assert!(!ends_a_head(b"GET / HTTP/1.1\r\nhost: x\r\n"));
    }

    #[tokio::test]
    async fn a_head_past_the_limit_or_a_closed_client_stops_the_read() {
        let (mut client, mut server) = tokio::io::duplex(1 << 16);
        use tokio::io::AsyncWriteExt;
        client.write_all(&[b'a'; 5000]).await.unwrap();
        assert!(first_head(&mut server, 4096).await.unwrap().len() >= 4096);
        drop(client);
        let (client, mut server) = tokio::io::duplex(64);
        drop(client);
        assert!(first_head(&mut server, 4096).await.unwrap().is_empty());
    }
}
