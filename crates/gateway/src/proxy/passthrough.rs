//! `/passthrough/{backend}/{path}`: any request, sent as it is to one named backend — for what has
//! no shape here (a server's own admin or metrics API, an endpoint too new to have a row). The
//! caller is authenticated; a key must name the backend in its `passthrough` allow-list (the
//! master key may use any); its rate limits and budget apply; each request is one usage record
//! (status and latency, and tokens where the answer carries an OpenAI-style `usage`). The client's
//! credentials never go upstream: the backend's own do.

use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use http::header::{AUTHORIZATION, COOKIE, HOST};
use http::{HeaderValue, Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;

use super::headers::is_hop_by_hop;
use super::settle::Settlement;
use super::{permits, Call};
use crate::app::App;
use crate::auth::Identity;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::parse::{read_body, RoutedRequest};
use crate::http::relay::{Completion, RelayBody};
use crate::http::GatewayBody;
use crate::route::backend::Backend;
use crate::telemetry::Tracing;
use crate::upstream::pool::UpstreamBody;

/// Client headers that carry credentials: never sent on.
const CREDENTIALS: [&str; 4] = ["x-api-key", "api-key", "x-goog-api-key", "proxy-authorization"];

pub async fn forward(
    app: &Arc<App>,
    req: Request<Incoming>,
    started: Instant,
    request_id: &HeaderValue,
    trace: &mut Option<Tracing>,
) -> Result<Response<GatewayBody>, GatewayError> {
    let (parts, body) = req.into_parts();
    let identity = app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await?;
    let path = parts.uri.path();
    let rest = path.strip_prefix("/v1").unwrap_or(path).strip_prefix("/passthrough/").unwrap_or_default();
    let (name, rest) = rest.split_once('/').unwrap_or((rest, ""));
    let backend = allowed_backend(app, &identity, name)?;
    let body = read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    let routed = routed(name, body);
    let deadline = started + app.config.timeouts.request;
    let admitted = permits::take_allowed(app, &identity, &routed, deadline).await?;
    let call = Call {
        app,
        endpoint: Endpoint::Passthrough,
        headers: &parts.headers,
        request_id,
        started,
        deadline,
        stream: false,
        guard_call: None,
        batch: None,
        experiment: None,
    };
    let mut settlement = Settlement::open(&call, &identity, &routed, admitted, trace);
    let query = parts.uri.query().map(|q| format!("?{q}")).unwrap_or_default();
    let upstream = upstream_request(&backend, &parts, &format!("/{rest}{query}"), routed.body, request_id)?;
    let sent = tokio::time::timeout(deadline.saturating_duration_since(Instant::now()), app.client.request(upstream));
    let answer = match sent.await {
        Ok(Ok(answer)) => answer,
        Ok(Err(e)) => {
            tracing::debug!(backend = backend.name(), error = %e, "passthrough request failed");
            settlement.fail(502);
            return Err(GatewayError::NoHealthyBackend { model: format!("passthrough/{name}") });
        }
        Err(_) => {
            settlement.fail(504);
            return Err(GatewayError::UpstreamTimeout);
        }
    };
    Ok(relay(&call, &backend, answer, &mut settlement).await)
}

/// The backend a passthrough names, if the caller may reach it.
fn allowed_backend(app: &App, identity: &Identity, name: &str) -> Result<Arc<Backend>, GatewayError> {
    let backend = app.router.backends.iter().find(|b| b.name() == name).cloned();
    let Some(backend) = backend else { return Err(GatewayError::RouteNotFound) };
    match identity.key() {
        Some(key) if !crate::glob::any(&key.passthrough, name) => Err(GatewayError::Forbidden {
            message: format!("this key may not use passthrough to the backend `{name}`"),
            code: "passthrough_not_allowed",
        }),
        _ => Ok(backend),
    }
}

/// What the record names the request by: its body's `model`, else the backend.
fn routed(backend: &str, body: Bytes) -> RoutedRequest {
    #[derive(serde::Deserialize)]
    struct Named {
        model: Option<String>,
    }
    let named = serde_json::from_slice::<Named>(&body).ok().and_then(|n| n.model).filter(|m| m.len() <= 256);
    let model = named.unwrap_or_else(|| format!("passthrough/{backend}"));
    RoutedRequest {
        model: model.clone(),
        requested: model,
        max_tokens: None,
        stream: false,
        body,
        session: None,
        chain: Vec::new(),
        root: None,
    }
}

/// The client's request for the backend: its method, path and headers but none of its
/// credentials, hop-by-hop headers or host; the backend's credentials and the request id added.
fn upstream_request(
    backend: &Backend,
    parts: &http::request::Parts,
    path_and_query: &str,
    body: Bytes,
    request_id: &HeaderValue,
) -> Result<Request<Full<Bytes>>, GatewayError> {
    let base = backend.cfg.url.trim_end_matches('/');
    let uri: http::Uri = format!("{base}{path_and_query}")
        .parse()
        .map_err(|_| GatewayError::bad_request("the passthrough path is not a valid URL path", None))?;
    let mut req = Request::builder().method(parts.method.clone()).uri(uri);
    for (name, value) in &parts.headers {
        let credential = name == AUTHORIZATION || name == COOKIE || CREDENTIALS.contains(&name.as_str());
        if !(credential || name == HOST || is_hop_by_hop(name) || name == http::header::CONTENT_LENGTH) {
            req = req.header(name, value.clone());
        }
    }
    req = req.header(&super::headers::REQUEST_ID, request_id.clone());
    for (name, value) in &backend.auth_headers {
        req = req.header(name, value.clone());
    }
    req.body(Full::new(body)).map_err(|_| GatewayError::bad_request("the passthrough request is not valid", None))
}

/// The backend's answer, relayed as it comes, with the request's accounting riding on it.
async fn relay(
    call: &Call<'_>,
    backend: &Arc<Backend>,
    answer: Response<Incoming>,
    settlement: &mut Settlement,
) -> Response<GatewayBody> {
    let (parts, body) = answer.into_parts();
    let mut body = UpstreamBody::unpooled(body);
    let first = body.frame().await.and_then(Result::ok);
    let sse =
        parts.headers.get(http::header::CONTENT_TYPE).is_some_and(|v| v.as_bytes().starts_with(b"text/event-stream"));
    if let Some(m) = settlement.meter() {
        m.answered(backend.name(), parts.status.as_u16(), sse, false, true);
    }
    let relayed = settlement.hand_over();
    let app = call.app;
    let completion = Completion {
        guard: backend.start(),
        metrics: app.metrics.clone(),
        started: call.started,
        permit: relayed.permit,
        meter: relayed.meter,
        cache: None,
    };
    let body = RelayBody::new(body, first, app.config.timeouts.stream_idle, sse, completion);
    let mut resp = Response::new(crate::http::relayed(body));
    *resp.status_mut() = parts.status;
    for (name, value) in &parts.headers {
        if !(is_hop_by_hop(name) || sse && name == http::header::CONTENT_LENGTH) {
            resp.headers_mut().append(name, value.clone());
        }
    }
    resp
}
