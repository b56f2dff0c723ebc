//! The pooled keep-alive client used for every upstream call: hyper-util's client over an
//! HTTP connector (TCP_NODELAY, connect timeout) wrapped in rustls for https backends.

pub mod pool;
pub mod sigv4;

use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::{connect::HttpConnector, Client};
use hyper_util::rt::{TokioExecutor, TokioTimer};

pub type UpstreamClient = Client<HttpsConnector<HttpConnector>, Full<Bytes>>;

/// The same pooled client carrying the MCP gateway's upstream requests.
pub struct McpHttp(pub UpstreamClient);

impl switchyard_mcp::http_upstream::HttpSend for McpHttp {
    fn send(
        &self,
        req: http::Request<Full<Bytes>>,
    ) -> switchyard_mcp::upstream::BoxFuture<'_, Result<http::Response<hyper::body::Incoming>, String>> {
        let sent = self.0.request(req);
        Box::pin(async move { sent.await.map_err(|e| e.to_string()) })
    }
}

pub fn build(connect_timeout: Duration) -> Result<UpstreamClient, String> {
    Ok(Client::builder(TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(90))
        .pool_max_idle_per_host(1024)
        .pool_timer(TokioTimer::new())
        .timer(TokioTimer::new())
        .build(connector(connect_timeout)?))
}

/// TCP (no Nagle, connect timeout, keep-alive) under rustls for https URLs: upstreams and the
/// telemetry exporter alike.
/// The same connector speaking HTTP/1.1 only: what a WebSocket's upgrade needs (ALPN must not
/// pick HTTP/2).
pub fn h1_connector(connect_timeout: Duration) -> Result<HttpsConnector<HttpConnector>, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    Ok(hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| format!("TLS setup: {e}"))?
        .https_or_http()
        .enable_http1()
        .wrap_connector(http))
}

pub fn connector(connect_timeout: Duration) -> Result<HttpsConnector<HttpConnector>, String> {
    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(Some(connect_timeout));
    http.set_keepalive(Some(Duration::from_secs(60)));
    let https = hyper_rustls::HttpsConnectorBuilder::new()
        .with_provider_and_webpki_roots(rustls::crypto::ring::default_provider())
        .map_err(|e| format!("TLS setup: {e}"))?
        .https_or_http()
        .enable_http1()
        .enable_http2()
        .wrap_connector(http);
    Ok(https)
}
