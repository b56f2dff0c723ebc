//! The floor a gateway is measured against: a bare hyper reverse proxy that forwards each
//! request to one upstream as it came and streams the answer back, doing nothing else (no
//! parsing, keys, limits, routing, usage or metrics). Each client connection gets one upstream
//! connection of its own, so not even a pool lookup is paid: what it costs per request is what
//! any HTTP/1 proxy on hyper must spend. `switchyard-bench bench-bare-proxy` runs it (`bench floor` starts it).

use std::net::SocketAddr;
use std::sync::Arc;

use http::{header, Request, Response, Uri};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use hyper_util::rt::TokioIo;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Mutex;

type Boxed = http_body_util::combinators::BoxBody<bytes::Bytes, hyper::Error>;

/// Serve on `listen`, forwarding to `upstream` (`http://host:port`), until the process ends.
pub async fn run(listen: SocketAddr, upstream: &str) -> Result<(), String> {
    let upstream: Uri = upstream.parse().map_err(|e| format!("bad upstream URL {upstream}: {e}"))?;
    let authority = upstream.authority().ok_or("the upstream URL names no host")?.to_string();
    let listener = TcpListener::bind(listen).await.map_err(|e| format!("cannot listen on {listen}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    println!("listening on http://{local}");
    let authority: Arc<str> = authority.into();
    // SIGTERM ends the process the normal way (`main` returns), as the gateway's does: an
    // instrumented build (`scripts/pgo`) writes its profile only then.
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .map_err(|e| format!("cannot handle SIGTERM: {e}"))?;
    loop {
        let accepted = tokio::select! {
            accepted = listener.accept() => accepted,
            _ = terminate.recv() => return Ok(()),
        };
        let Ok((stream, _)) = accepted else { continue };
        let _ = stream.set_nodelay(true);
        tokio::spawn(serve(stream, authority.clone()));
    }
}

/// One client connection and the upstream connection that serves it.
async fn serve(stream: TcpStream, authority: Arc<str>) {
    let upstream: Arc<Mutex<Option<SendRequest<Incoming>>>> = Arc::default();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let (upstream, authority) = (upstream.clone(), authority.clone());
        async move { forward(&upstream, &authority, req).await }
    });
    let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
}

/// The request upstream as it came (its path, headers and body), and the answer back.
async fn forward(
    upstream: &Mutex<Option<SendRequest<Incoming>>>,
    authority: &str,
    req: Request<Incoming>,
) -> Result<Response<Boxed>, hyper::Error> {
    use http_body_util::BodyExt;
    let (mut parts, body) = req.into_parts();
    if let Ok(host) = header::HeaderValue::from_str(authority) {
        parts.headers.insert(header::HOST, host);
    }
    let mut sender = upstream.lock().await;
    if sender.as_ref().is_none_or(SendRequest::is_closed) {
        *sender = connect(authority).await;
    }
    let Some(send) = sender.as_mut() else { return Ok(bad_gateway()) };
    if send.ready().await.is_err() {
        *sender = None;
        return Ok(bad_gateway());
    }
    let resp = send.send_request(Request::from_parts(parts, body)).await?;
    Ok(resp.map(BodyExt::boxed))
}

async fn connect(authority: &str) -> Option<SendRequest<Incoming>> {
    let stream = TcpStream::connect(authority).await.ok()?;
    let _ = stream.set_nodelay(true);
    let (sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream)).await.ok()?;
    tokio::spawn(conn);
    Some(sender)
}

fn bad_gateway() -> Response<Boxed> {
    use http_body_util::{BodyExt, Empty};
    let mut resp = Response::new(Empty::new().map_err(|never| match never {}).boxed());
    *resp.status_mut() = http::StatusCode::BAD_GATEWAY;
    resp
}
