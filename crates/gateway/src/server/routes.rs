//! The route table: which handler answers which method and path. Every response gets an
//! `x-request-id`, every request is counted; errors render in the shape of the API the client
//! called (OpenAI's, Anthropic's or Ollama's).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use http::{Method, Request, Response};
use hyper::body::Incoming;

use crate::app::App;
use crate::endpoint::Endpoint;
use crate::error::GatewayError;
use crate::http::{error_response, error_response_in, parse, request_id, GatewayBody};
use crate::{admin, catalog, console, mcp, proxy, translate};
use switchyard_protocol::chat::Api;

/// Answer one request; `peer` is the client's address (what the audit log records).
pub async fn handle(app: Arc<App>, req: Request<Incoming>, peer: SocketAddr) -> Response<GatewayBody> {
    let started = Instant::now();
    let rid = request_id::from_request(req.headers());
    let limit = app.config.listener.max_uri_bytes;
    if req.uri().path_and_query().map_or(0, |p| p.as_str().len()) > limit {
        let e = GatewayError::UriTooLong { limit };
        app.metrics.count_error(e.kind());
        let mut resp = error_response(&e);
        resp.headers_mut().insert(request_id::HEADER, rid);
        app.metrics.count_request(Endpoint::Other, resp.status().as_u16());
        return resp;
    }
    // Accept both `/v1/...` and the bare paths some clients build from a base URL without `/v1`.
    let path = req.uri().path();
    let path = path.strip_prefix("/v1").filter(|p| p.starts_with('/')).unwrap_or(path);
    let endpoint = Endpoint::from_path(path);
    let api = if path.starts_with("/api/") { Api::Ollama } else { translate::client_api(endpoint) };
    let mut trace = app.telemetry.as_ref().map(|t| t.begin(req.headers(), req.method(), endpoint, path, &rid, started));
    if let Some(area) = BrowserReachable::of(req.uri().path()) {
        let result = match super::origin::check(&app.config.security, &req) {
            Ok(()) => Box::pin(browser_reachable(&app, area, req, started, &rid, &mut trace, peer)).await,
            Err(e) => Err(e),
        };
        return answer_other(&app, result, rid, trace);
    }
    // Each handler's future is boxed: they are kilobytes (the proxy's ~10 KB), and hyper moves
    // this future into place for every request; inline, every such move copied all of them.
    let result = match (endpoint, req.method(), path) {
        (Endpoint::Other, _, p) if p.starts_with("/files") || p.starts_with("/batches") => {
            let path = p.to_owned();
            Box::pin(crate::batch::handle(&app, req, &path)).await
        }
        (Endpoint::Realtime, &Method::GET, _) => Box::pin(proxy::realtime::forward(&app, req, started, &rid)).await,
        (Endpoint::Passthrough, _, _) => {
            Box::pin(proxy::passthrough::forward(&app, req, started, &rid, &mut trace)).await
        }
        (ep, &Method::POST, _) if ep.is_upload() => {
            Box::pin(proxy::forward_upload(&app, (endpoint, Some(peer)), req, started, &rid, &mut trace)).await
        }
        (ep, &Method::POST, _) if ep.is_proxied() => {
            Box::pin(proxy::forward(&app, (endpoint, Some(peer)), req, started, &rid, &mut trace)).await
        }
        (Endpoint::Other, &Method::POST, "/feedback") => Box::pin(proxy::feedback::post(&app, req)).await,
        (Endpoint::Models, &Method::GET, _) => Ok(catalog::models(&app, req.headers(), req.uri().query())),
        (Endpoint::Other, &Method::GET, "/api/tags" | "/api/ps" | "/api/version") => {
            catalog::ollama(&app, req.headers(), path).await
        }
        (Endpoint::Other, &Method::GET, p)
            if p.starts_with("/models/") || p == "/v1beta/models" || p.starts_with("/v1beta/models/") =>
        {
            catalog::model(&app, p, req.headers(), req.uri().query())
        }
        (Endpoint::Other, &Method::GET, p) if p.starts_with("/.well-known/oauth-protected-resource") => {
            mcp::protected_resource(&app, req.headers(), p)
        }
        (Endpoint::Other, _, p) if p == "/a2a" || p.starts_with("/a2a/") => {
            let path = p.to_owned();
            Box::pin(crate::a2a::handle(&app, req, &path, &rid, &mut trace)).await
        }
        (Endpoint::Other, &Method::GET, "/health") => Ok(catalog::health()),
        (Endpoint::Other, &Method::GET, "/ready") => Ok(catalog::ready(&app)),
        (Endpoint::Other, &Method::GET, "/metrics") => Ok(catalog::metrics(&app)),
        (Endpoint::Other, _, "/health" | "/ready" | "/metrics") => Err(GatewayError::MethodNotAllowed),
        (Endpoint::Other, _, _) => Err(GatewayError::RouteNotFound),
        _ => Err(GatewayError::MethodNotAllowed),
    };
    let mut resp = result.unwrap_or_else(|e| {
        app.metrics.count_error(e.kind());
        error_response_in(&e, api)
    });
    resp.headers_mut().insert(request_id::HEADER, rid);
    app.metrics.count_request(endpoint, resp.status().as_u16());
    // A proxied request's trace ends with its answer (its meter has it); any other ends here.
    finish_trace(&app, trace, resp.status().as_u16());
    resp
}

/// The routes a browser page could be made to call on the user's behalf: their `Origin` and
/// `Host` are checked first (`server/origin.rs`).
#[derive(Clone, Copy)]
enum BrowserReachable {
    Admin,
    Console,
    Mcp,
}

impl BrowserReachable {
    fn of(path: &str) -> Option<BrowserReachable> {
        let under =
            |prefix: &str| path == prefix || path.strip_prefix(prefix).is_some_and(|rest| rest.starts_with('/'));
        if path.starts_with("/admin") {
            Some(BrowserReachable::Admin)
        } else if under("/ui") {
            Some(BrowserReachable::Console)
        } else if under("/mcp") {
            Some(BrowserReachable::Mcp)
        } else {
            None
        }
    }
}

async fn browser_reachable(
    app: &Arc<App>,
    area: BrowserReachable,
    req: Request<Incoming>,
    started: Instant,
    rid: &http::HeaderValue,
    trace: &mut Option<crate::telemetry::Tracing>,
    peer: SocketAddr,
) -> Result<Response<GatewayBody>, GatewayError> {
    match area {
        BrowserReachable::Admin => Box::pin(admin_gate(app, req, peer)).await,
        BrowserReachable::Console => Box::pin(console::handle(app, req, started, rid, trace, peer)).await,
        BrowserReachable::Mcp => {
            let path = req.uri().path().to_owned();
            mcp::handle(app, req, (&path, peer), rid).await
        }
    }
}

/// The answer of a handler outside the model APIs (admin, console, MCP): errors in OpenAI's shape,
/// counted under `other`, its trace ended here.
fn answer_other(
    app: &App,
    result: Result<Response<GatewayBody>, GatewayError>,
    rid: http::HeaderValue,
    trace: Option<crate::telemetry::Tracing>,
) -> Response<GatewayBody> {
    let mut resp = result.unwrap_or_else(|e| {
        app.metrics.count_error(e.kind());
        error_response(&e)
    });
    resp.headers_mut().insert(request_id::HEADER, rid);
    app.metrics.count_request(Endpoint::Other, resp.status().as_u16());
    finish_trace(app, trace, resp.status().as_u16());
    resp
}

fn finish_trace(app: &App, trace: Option<crate::telemetry::Tracing>, status: u16) {
    if let (Some(crate::telemetry::Tracing::Recorded(trace)), Some(telemetry)) = (trace, &app.telemetry) {
        telemetry.finish(trace, crate::telemetry::Outcome { status, ..Default::default() });
    }
}

/// `/admin/...`: the master key, or a user's token whose role allows the call.
async fn admin_gate(
    app: &Arc<App>,
    req: Request<Incoming>,
    peer: SocketAddr,
) -> Result<Response<GatewayBody>, GatewayError> {
    let operator = admin::access::from_bearer(app, req.headers(), peer).await?;
    let (parts, body) = req.into_parts();
    let body = parse::read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    admin::handle(app, &operator, &parts.method, parts.uri.path(), parts.uri.query(), body).await
}
