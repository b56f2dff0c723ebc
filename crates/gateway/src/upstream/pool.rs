//! Keep-alive HTTP/1.1 connections to one plain-`http` backend, the LLM path's own pool.
//!
//! hyper-util's pool, which https backends keep (TLS, HTTP/2), hashes its (scheme, authority)
//! key with SipHash a byte at a time on every checkout and return, boxes a request future of
//! several kilobytes, and spawns a task per request to wait until the connection is free again;
//! a pool owned by one backend needs none of it (callgrind: 76,158 → 64,889 instructions per
//! proxied request). Here a connection goes back on the backend's idle stack when its answer has
//! been read to the end, and comes off it (last in, first out) for the next request.

use std::fmt;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::{header, HeaderValue, Request, Response, Uri};
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper::client::conn::TrySendError;
use hyper_util::rt::TokioIo;
use tokio::net::TcpStream;

type Sender = SendRequest<Full<Bytes>>;

/// How a backend's connections are made and kept.
#[derive(Debug, Clone, Copy)]
pub struct PoolSettings {
    pub connect_timeout: Duration,
    /// A connection idle this long is closed (`timeouts.upstream_idle`, 90 s as hyper-util's pool).
    pub idle_timeout: Duration,
    /// Idle connections kept; one coming back past this is closed
    /// (`limits.max_idle_upstream_connections`).
    pub max_idle: usize,
}

impl PoolSettings {
    pub fn of(config: &crate::config::Config) -> PoolSettings {
        PoolSettings {
            connect_timeout: config.timeouts.connect,
            idle_timeout: config.timeouts.upstream_idle,
            max_idle: config.max_idle_upstream_connections,
        }
    }
}
/// Idle connections always kept for the idle timeout (`evict_idle`).
const KEEP_IDLE: usize = 16;
/// Beyond `KEEP_IDLE`, an idle connection unused this long is surplus.
const SURPLUS_AFTER: Duration = Duration::from_secs(10);

/// TCP keep-alive probes after this much silence, so a backend host that vanished is noticed.
const TCP_KEEPALIVE: Duration = Duration::from_secs(60);

pub struct H1Pool {
    host: String,
    port: u16,
    /// The address itself when the URL names an IP: no lookup per connection.
    addr: Option<SocketAddr>,
    /// `host[:port]`, the port only when it is not 80 (as hyper-util wrote it).
    host_header: HeaderValue,
    settings: PoolSettings,
    idle: Mutex<Vec<Idle>>,
}

struct Idle {
    sender: Sender,
    since: Instant,
}

#[derive(Debug)]
pub enum PoolError {
    Connect(io::Error),
    ConnectTimeout,
    Http(hyper::Error),
    /// The request went out on an idle connection the backend closed at that moment (its
    /// keep-alive timeout), with nothing answered: safe to send again on a new connection.
    Stale(hyper::Error),
}

impl fmt::Display for PoolError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PoolError::Connect(e) => write!(f, "connect: {e}"),
            PoolError::ConnectTimeout => f.write_str("connect timed out"),
            PoolError::Http(e) => write!(f, "{e}"),
            PoolError::Stale(e) => write!(f, "idle connection closed: {e}"),
        }
    }
}

impl H1Pool {
    /// A pool for the backend at `url` when it is plain `http`; `None` for https and the rest.
    pub fn for_url(url: &Uri, settings: PoolSettings) -> Option<Arc<H1Pool>> {
        if url.scheme() != Some(&http::uri::Scheme::HTTP) {
            return None;
        }
        let host = url.host()?;
        let port = url.port_u16().unwrap_or(80);
        let bare = host.trim_start_matches('[').trim_end_matches(']');
        let host_header = match url.port_u16() {
            Some(p) if p != 80 => HeaderValue::from_str(&format!("{host}:{p}")).ok()?,
            _ => HeaderValue::from_str(host).ok()?,
        };
        Some(Arc::new(H1Pool {
            host: bare.to_owned(),
            port,
            addr: bare.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, port)),
            host_header,
            settings,
            idle: Mutex::new(Vec::new()),
        }))
    }

    /// Send `req` (its URI absolute, as a backend's targets are) on an idle connection, else a
    /// new one.
    pub fn send(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> impl Future<Output = Result<Response<UpstreamBody>, PoolError>> + '_ {
        self.prepare(&mut req);
        // Not rebound inside the future, so the request is held once in it, not twice.
        self.exchange(req)
    }

    /// `send` on a new connection, never an idle one (after `PoolError::Stale`).
    pub async fn send_fresh(
        self: &Arc<Self>,
        mut req: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, PoolError> {
        self.prepare(&mut req);
        let sender = Box::pin(self.connect()).await?;
        self.send_on(sender, req).await.map_err(|e| PoolError::Http(e.into_error()))
    }

    /// HTTP/1.1 to a backend: the target in origin form, and a `Host`.
    fn prepare(&self, req: &mut Request<Full<Bytes>>) {
        if let Some(origin) = req.uri().path_and_query().cloned() {
            *req.uri_mut() = Uri::from(origin);
        }
        if !req.headers().contains_key(header::HOST) {
            req.headers_mut().insert(header::HOST, self.host_header.clone());
        }
    }

    /// A request that never left because its idle connection had just closed is sent again on
    /// a new one. One written on an idle connection the backend closed before answering anything
    /// is `PoolError::Stale`: the caller may send it again (browsers and Envoy do the same);
    /// otherwise a written request is never sent twice.
    async fn exchange(self: &Arc<Self>, req: Request<Full<Bytes>>) -> Result<Response<UpstreamBody>, PoolError> {
        let (sender, fresh) = match self.take_idle().await {
            Some(sender) => (sender, false),
            // Boxed: connecting is rare, and its future would triple the size of every request's.
            None => (Box::pin(self.connect()).await?, true),
        };
        let unsent = match self.send_on(sender, req).await {
            Ok(resp) => return Ok(resp),
            Err(mut e) => match e.take_message() {
                Some(unsent) if !fresh => unsent,
                None if !fresh && closed_unanswered(e.error()) => return Err(PoolError::Stale(e.into_error())),
                _ => return Err(PoolError::Http(e.into_error())),
            },
        };
        let sender = Box::pin(self.connect()).await?;
        self.send_on(sender, unsent).await.map_err(|e| PoolError::Http(e.into_error()))
    }

    async fn send_on(
        self: &Arc<Self>,
        mut sender: Sender,
        req: Request<Full<Bytes>>,
    ) -> Result<Response<UpstreamBody>, TrySendError<Request<Full<Bytes>>>> {
        let resp = sender.try_send_request(req).await?;
        let lease = Some(Lease { pool: self.clone(), sender });
        Ok(resp.map(|inner| UpstreamBody { inner, lease }))
    }

    /// Close the connections idle past the idle timeout, those the backend closed, and a burst's
    /// leftovers (the health loop calls this, so a quiet backend's connections do not stay open
    /// forever). Connections are reused last in, first out, so the bottom of the idle stack holds
    /// the ones no request needed lately: beyond `KEEP_IDLE`, one unused for `SURPLUS_AFTER` is
    /// closed, and its buffers go back (after a burst of 10,000 requests, 1,024 kept idle for the
    /// full timeout held 12.7 MB).
    pub fn evict_idle(&self) {
        let now = Instant::now();
        let timeout = self.settings.idle_timeout;
        let mut idle = self.lock();
        idle.retain(|i| now.duration_since(i.since) < timeout && !i.sender.is_closed());
        let unused = surplus(idle.iter().map(|i| i.since), idle.len(), now);
        idle.drain(..unused);
    }

    /// Connections waiting for a request.
    pub fn idle_count(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Vec<Idle>> {
        self.idle.lock().unwrap_or_else(PoisonError::into_inner)
    }

    async fn take_idle(&self) -> Option<Sender> {
        loop {
            let Idle { mut sender, .. } = self.lock().pop()?;
            if sender.is_closed() {
                continue;
            }
            // Handed back when its answer was read to the end; the connection's own task may
            // not yet have turned round to take the next request, which takes one poll.
            if sender.is_ready() || sender.ready().await.is_ok() {
                return Some(sender);
            }
        }
    }

    fn put(&self, sender: Sender) {
        if sender.is_closed() {
            return;
        }
        let mut idle = self.lock();
        if idle.len() < self.settings.max_idle {
            idle.push(Idle { sender, since: Instant::now() });
        }
    }

    async fn connect(&self) -> Result<Sender, PoolError> {
        let connecting = async {
            match self.addr {
                Some(addr) => TcpStream::connect(addr).await,
                None => TcpStream::connect((self.host.as_str(), self.port)).await,
            }
        };
        let stream = tokio::time::timeout(self.settings.connect_timeout, connecting)
            .await
            .map_err(|_| PoolError::ConnectTimeout)?
            .map_err(PoolError::Connect)?;
        stream.set_nodelay(true).map_err(PoolError::Connect)?;
        let keepalive = socket2::TcpKeepalive::new().with_time(TCP_KEEPALIVE);
        socket2::SockRef::from(&stream).set_tcp_keepalive(&keepalive).map_err(PoolError::Connect)?;
        let (sender, connection) = http1::handshake(TokioIo::new(stream)).await.map_err(PoolError::Http)?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream connection ended");
            }
        });
        Ok(sender)
    }
}

/// How many of the idle connections (`since`: when each went idle, oldest first) are surplus:
/// from the bottom, those unused for `SURPLUS_AFTER`, leaving at least `KEEP_IDLE`.
fn surplus(since: impl Iterator<Item = Instant>, len: usize, now: Instant) -> usize {
    since.take(len.saturating_sub(KEEP_IDLE)).take_while(|&t| now.duration_since(t) >= SURPLUS_AFTER).count()
}

/// Whether the backend closed the connection without answering: end of stream before any
/// response, or a reset.
fn closed_unanswered(e: &hyper::Error) -> bool {
    use std::error::Error as _;
    let reset = e.source().and_then(|s| s.downcast_ref::<io::Error>()).is_some_and(|io| {
        matches!(
            io.kind(),
            io::ErrorKind::ConnectionReset | io::ErrorKind::BrokenPipe | io::ErrorKind::ConnectionAborted
        )
    });
    e.is_incomplete_message() || reset
}

/// The connection an answer came on, going back to its pool once the answer is read.
struct Lease {
    pool: Arc<H1Pool>,
    sender: Sender,
}

/// An upstream answer's body. From a pooled connection, it hands the connection back the
/// moment the last frame is read; dropped before that, the connection closes with it.
pub struct UpstreamBody {
    inner: Incoming,
    lease: Option<Lease>,
}

impl UpstreamBody {
    /// A body from hyper-util's client, which pools its connections itself.
    pub fn unpooled(inner: Incoming) -> UpstreamBody {
        UpstreamBody { inner, lease: None }
    }

    fn release(&mut self) {
        if let Some(Lease { pool, sender }) = self.lease.take() {
            pool.put(sender);
        }
    }
}

impl Body for UpstreamBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.release(),
            // With a Content-Length the last frame is known as such: a reader may stop there.
            Poll::Ready(Some(Ok(_))) if self.inner.is_end_stream() => self.release(),
            Poll::Ready(Some(Err(_))) => self.lease = None,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bursts_leftovers_are_surplus_once_unused_and_a_few_are_always_kept() {
        let now = Instant::now() + Duration::from_secs(60);
        let ago = |s: u64| now - Duration::from_secs(s);
        // 40 idle: 30 unused for 20 s (the bottom of the stack), 10 used a moment ago.
        let since: Vec<Instant> = (0..40).map(|i| if i < 30 { ago(20) } else { ago(1) }).collect();
        assert_eq!(surplus(since.iter().copied(), since.len(), now), 24, "all but KEEP_IDLE (16)");
        // 30 idle, all recent: none is surplus.
        let recent: Vec<Instant> = (0..30).map(|_| ago(2)).collect();
        assert_eq!(surplus(recent.iter().copied(), recent.len(), now), 0);
        // A few idle, however long: kept (until the idle timeout).
        let few: Vec<Instant> = (0..KEEP_IDLE).map(|_| ago(50)).collect();
        assert_eq!(surplus(few.iter().copied(), few.len(), now), 0);
    }
}
