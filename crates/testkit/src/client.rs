//! A small keep-alive HTTP test client (HTTP/1.1 or h2c) over hyper-util's legacy client.

use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CONTENT_TYPE};
use http::{HeaderMap, Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;

/// Boxed error of every client call.
pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// A fully collected response.
#[derive(Debug, Clone)]
pub struct TestResponse {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Bytes,
}

impl TestResponse {
    /// The body parsed as JSON, or `Value::Null` when it is not valid JSON.
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body).unwrap_or(serde_json::Value::Null)
    }

    /// The body as (lossy) UTF-8 text.
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// A header value as a string, if present and visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// Keep-alive HTTP client for tests, demos and benchmarks.
#[derive(Clone, Debug)]
pub struct TestClient {
    inner: Client<HttpConnector, Full<Bytes>>,
}

impl Default for TestClient {
    fn default() -> Self {
        Self::new()
    }
}

impl TestClient {
    /// HTTP/1.1 client with connection pooling and TCP_NODELAY.
    pub fn new() -> Self {
        Self::build(false)
    }

    /// h2c (prior knowledge) client with TCP_NODELAY.
    pub fn http2() -> Self {
        Self::build(true)
    }

    fn build(http2: bool) -> Self {
        let mut connector = HttpConnector::new();
        connector.set_nodelay(true);
        let inner = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_max_idle_per_host(usize::MAX)
            .http2_only(http2)
            .build(connector);
        TestClient { inner }
    }

    /// The underlying hyper client, for requests the helpers do not cover.
    pub fn inner(&self) -> &Client<HttpConnector, Full<Bytes>> {
        &self.inner
    }

    /// Sends a request and returns the response with its body still streaming.
    /// A non-empty body gets `content-type: application/json` unless `headers` sets one.
    pub async fn send(
        &self,
        method: Method,
        url: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Result<Response<Incoming>, Error> {
        let wants_json = !body.is_empty() && !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("content-type"));
        let mut req = Request::builder().method(method).uri(url).body(Full::new(body))?;
        let h = req.headers_mut();
        if wants_json {
            h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        }
        for (k, v) in headers {
            h.append(HeaderName::from_bytes(k.as_bytes())?, HeaderValue::from_str(v)?);
        }
        Ok(self.inner.request(req).await?)
    }

    /// Sends any request and collects the whole response.
    pub async fn request(
        &self,
        method: Method,
        url: &str,
        body: Bytes,
        headers: &[(&str, &str)],
    ) -> Result<TestResponse, Error> {
        let resp = self.send(method, url, body, headers).await?;
        let (parts, body) = resp.into_parts();
        let body = body.collect().await?.to_bytes();
        Ok(TestResponse { status: parts.status, headers: parts.headers, body })
    }

    /// POSTs a JSON body (content-type defaults to `application/json`) and collects the response.
    pub async fn post_json(&self, url: &str, body: &[u8], headers: &[(&str, &str)]) -> Result<TestResponse, Error> {
        self.request(Method::POST, url, Bytes::copy_from_slice(body), headers).await
    }

    /// GETs `url` and collects the response.
    pub async fn get(&self, url: &str) -> Result<TestResponse, Error> {
        self.request(Method::GET, url, Bytes::new(), &[]).await
    }

    /// POSTs a JSON body and returns the data frames in arrival order
    /// (frame boundaries are as received; several events may share one frame).
    pub async fn post_stream(
        &self,
        url: &str,
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, HeaderMap, Vec<Bytes>), Error> {
        let resp = self.send(Method::POST, url, Bytes::copy_from_slice(body), headers).await?;
        let (parts, mut body) = resp.into_parts();
        let mut frames = Vec::new();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame?.into_data() {
                frames.push(data);
            }
        }
        Ok((parts.status, parts.headers, frames))
    }
}
