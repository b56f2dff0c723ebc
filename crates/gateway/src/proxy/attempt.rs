//! One upstream attempt: the request to a backend (its auth headers, the request id, the
//! attempt's `traceparent`) and its answer up to the first body frame, within a time limit.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{header, HeaderMap, HeaderName, HeaderValue, Request};
use http_body::Frame;
use http_body_util::{BodyExt, Full};

use super::headers::{REQUEST_ID, TRACEPARENT, TRACESTATE};
use crate::app::App;
use crate::route::backend::Backend;
use crate::translate::Wire;
use crate::upstream::pool::{PoolError, UpstreamBody};

pub enum AttemptError {
    Transport,
    Timeout,
    /// An upload already went (in part) to an earlier attempt: it cannot be sent again.
    Spent,
    /// An upload passed `limits.max_upload_bytes` on its way through.
    TooLarge,
    /// No key of the backend's pool has headroom: the first is back after this long (None: every
    /// key was refused).
    NoKey(Option<Duration>),
}

/// What an attempt's request carries besides the body.
#[derive(Clone)]
pub struct Headers<'a> {
    /// The model asked for, and whether the answer streams (Gemini's and Azure deployments' URLs
    /// say so).
    pub model: &'a str,
    pub stream: bool,
    pub client: &'a HeaderMap,
    pub request_id: &'a HeaderValue,
    /// `traceparent` naming the attempt's span, and the caller's `tracestate` (telemetry on).
    pub trace: Option<(HeaderValue, Option<HeaderValue>)>,
    /// The credentials to send instead of the backend's own: a key of its pool.
    pub credentials: Option<&'a [(HeaderName, HeaderValue)]>,
    /// Headers a policy's `set` rule sends the backend.
    pub extra: &'a [(HeaderName, HeaderValue)],
}

pub async fn attempt_once(
    app: &App,
    backend: &Arc<Backend>,
    wire: Wire,
    body: Bytes,
    headers: Headers<'_>,
    limit: Duration,
) -> Result<(http::response::Parts, UpstreamBody, Option<Frame<Bytes>>), AttemptError> {
    let uri = backend.target_for(wire, headers.model, headers.stream).ok_or(AttemptError::Transport)?;
    let req = request(backend, uri, &body, &headers)?;
    let exchange = async {
        let failed = |e: &dyn std::fmt::Display| {
            tracing::debug!(backend = backend.name(), error = %e, "upstream request failed");
            AttemptError::Transport
        };
        let resp = match &backend.pool {
            Some(pool) => match pool.send(req).await {
                // The idle connection was closed by the backend as the request went out (its
                // keep-alive timeout): nothing was answered, so it goes again on a new one.
                Err(PoolError::Stale(e)) => {
                    tracing::debug!(backend = backend.name(), error = %e, "idle upstream connection closed under the request; sending it on a new one");
                    let uri = backend.target_for(wire, headers.model, headers.stream).ok_or(AttemptError::Transport)?;
                    pool.send_fresh(request(backend, uri, &body, &headers)?).await.map_err(|e| failed(&e))?
                }
                sent => sent.map_err(|e| failed(&e))?,
            },
            None => app.client.request(req).await.map_err(|e| failed(&e))?.map(UpstreamBody::unpooled),
        };
        let (parts, mut body) = resp.into_parts();
        let first = match body.frame().await {
            None => None,
            Some(Ok(frame)) => Some(frame),
            Some(Err(e)) => {
                tracing::debug!(backend = backend.name(), error = %e, "upstream body failed before first byte");
                return Err(AttemptError::Transport);
            }
        };
        Ok((parts, body, first))
    };
    tokio::time::timeout(limit, exchange).await.map_err(|_| AttemptError::Timeout)?
}

/// An upstream request's head: its content type, the request id, the client's `accept`, the
/// attempt's trace context, the backend's credentials.
pub fn request_head(
    backend: &Backend,
    uri: http::Uri,
    content_type: HeaderValue,
    headers: &Headers<'_>,
) -> http::request::Builder {
    let mut req =
        Request::post(uri).header(header::CONTENT_TYPE, content_type).header(&REQUEST_ID, headers.request_id.clone());
    if let Some(accept) = headers.client.get(header::ACCEPT) {
        req = req.header(header::ACCEPT, accept.clone());
    }
    if let Some((traceparent, tracestate)) = &headers.trace {
        req = req.header(&TRACEPARENT, traceparent.clone());
        if let Some(state) = tracestate {
            req = req.header(&TRACESTATE, state.clone());
        }
    }
    for (name, value) in headers.extra {
        req = req.header(name, value.clone());
    }
    for (name, value) in headers.credentials.unwrap_or(&backend.auth_headers) {
        req = req.header(name, value.clone());
    }
    req
}

/// The upstream request: the body, its content type, the request id, the client's `accept`, the
/// attempt's trace context, the backend's credentials (and signature).
fn request(
    backend: &Backend,
    uri: http::Uri,
    body: &Bytes,
    headers: &Headers<'_>,
) -> Result<Request<Full<Bytes>>, AttemptError> {
    let req = request_head(backend, uri, HeaderValue::from_static("application/json"), headers);
    let mut req = req.body(Full::new(body.clone())).map_err(|_| AttemptError::Transport)?;
    backend.sign(&mut req, body).map_err(|e| {
        tracing::warn!(backend = backend.name(), error = %e, "could not sign the upstream request");
        AttemptError::Transport
    })?;
    Ok(req)
}
