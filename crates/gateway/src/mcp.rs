//! `/mcp` and `/mcp/{server}`: the MCP gateway's endpoints. What every endpoint gets applies here
//! — the key (checked on every request), its MCP permissions, its request-rate limit for tool
//! calls, a usage record and metrics per tool call — and the JSON-RPC message itself goes to
//! `switchyard_mcp::Front`, which speaks the protocol. The client's `Authorization` stops here:
//! upstreams get only the credentials configured for them.

use std::sync::Arc;

use http::{header, HeaderMap, HeaderName, HeaderValue, Request, Response, StatusCode};
use hyper::body::Incoming;
use switchyard_mcp::{Answer, Body, CallRecord, OnCall, Scope};

use crate::app::App;
use crate::error::GatewayError;
use crate::http::{full, parse::read_body, GatewayBody, SseEvents};
use crate::limit::Limits;
use crate::records::UsageRecord;

static SESSION_HEADER: HeaderName = HeaderName::from_static("mcp-session-id");
static VERSION_HEADER: HeaderName = HeaderName::from_static("mcp-protocol-version");

fn base_url(app: &App, headers: &http::HeaderMap) -> String {
    crate::http::base_url(app.config.tls.is_some(), headers)
}

/// An unauthenticated MCP request, when the gateway trusts identity providers: a 401 naming the
/// protected resource's metadata (`WWW-Authenticate: Bearer resource_metadata=…`, as MCP's
/// authorization specification and RFC 9728 ask), where an OAuth client finds whom to ask.
fn oauth_challenge(app: &App, headers: &http::HeaderMap, path: &str, e: &GatewayError) -> Response<GatewayBody> {
    app.metrics.count_error(e.kind());
    let mut resp = crate::http::error_response(e);
    let metadata = format!("{}/.well-known/oauth-protected-resource{path}", base_url(app, headers));
    let challenge = format!("Bearer resource_metadata=\"{metadata}\"");
    if let Ok(value) = HeaderValue::from_str(&challenge) {
        resp.headers_mut().insert(http::header::WWW_AUTHENTICATE, value);
    }
    resp
}

/// `GET /.well-known/oauth-protected-resource[/mcp[/{server}]]` (RFC 9728): the MCP endpoint as an
/// OAuth protected resource and the authorization servers (`auth.jwt` issuers) whose tokens it
/// accepts. 404 when none is configured.
pub fn protected_resource(
    app: &App,
    headers: &http::HeaderMap,
    path: &str,
) -> Result<Response<GatewayBody>, GatewayError> {
    let issuers: Vec<&str> = app.config.auth.jwt.iter().map(|i| i.issuer.as_str()).collect();
    let resource_path = path.strip_prefix("/.well-known/oauth-protected-resource").unwrap_or("");
    if issuers.is_empty() || app.mcp.is_none() || !(resource_path.is_empty() || resource_path.starts_with("/mcp")) {
        return Err(GatewayError::RouteNotFound);
    }
    let resource_path = if resource_path.is_empty() { "/mcp" } else { resource_path };
    let doc = serde_json::json!({
        "resource": format!("{}{resource_path}", base_url(app, headers)),
        "authorization_servers": issuers,
        "bearer_methods_supported": ["header"],
        "resource_name": "Switchyard MCP gateway",
    });
    Ok(crate::http::json_value(http::StatusCode::OK, &doc))
}

/// A tool call counts against the rpm of its key and of the key's team (this instance's
/// windows, as for every MCP call), both checked under one lock.
fn tool_call_admission(app: &App, key: Option<&crate::records::KeyRecord>) -> switchyard_mcp::SharedAdmit {
    let Some(k) = key else { return Arc::new(|| Ok(())) };
    let rpm = |rpm: Option<u32>| Limits { rpm, tpm: None, max_parallel: None };
    let mut levels: Vec<(String, Limits, &'static str)> = Vec::new();
    if k.rpm.is_some() {
        levels.push((k.id.clone(), rpm(k.rpm), "key"));
    }
    if let Some(team) = k.owners.team.as_deref().filter(|t| t.limits.rpm.is_some()) {
        levels.push((team.id.clone(), rpm(team.limits.rpm), "team"));
    }
    if levels.is_empty() {
        return Arc::new(|| Ok(()));
    }
    let limiter = app.limiter.memory().clone();
    Arc::new(move || {
        let ids: Vec<(&str, Limits)> = levels.iter().map(|(id, l, _)| (id.as_str(), *l)).collect();
        limiter.acquire_levels(&ids, 0).map(drop).map_err(|r| {
            let whose = levels.get(r.level).map_or("key", |(_, _, w)| w);
            let secs = r.retry_after.as_secs_f64().ceil().max(1.0) as u64;
            format!("rate limit reached: {} requests per minute for this {whose}; retry in {secs} s", r.limit)
        })
    })
}

/// `path` is the request path: `/mcp` or `/mcp/{server}`.
pub async fn handle(
    app: &App,
    req: Request<Incoming>,
    (path, peer): (&str, std::net::SocketAddr),
    request_id: &HeaderValue,
) -> Result<Response<GatewayBody>, GatewayError> {
    let Some(front) = &app.mcp else { return Err(GatewayError::RouteNotFound) };
    let scope = match path.strip_prefix("/mcp").map(|p| p.trim_matches('/')) {
        Some("") => Scope::All,
        Some(switchyard_mcp::code_mode::SERVER) if front.has_code_mode() => Scope::Code,
        Some(server) if !server.contains('/') => Scope::Server(server),
        _ => return Err(GatewayError::RouteNotFound),
    };
    let (parts, body) = req.into_parts();
    let principal = match app.auth.authenticate(&parts.headers, app.clock.unix_secs()).await {
        Ok(principal) => principal,
        Err(e @ GatewayError::Unauthorized { .. }) if !app.config.auth.jwt.is_empty() => {
            return Ok(oauth_challenge(app, &parts.headers, path, &e));
        }
        Err(e) => return Err(e),
    };
    let body = read_body(&parts.headers, body, app.config.max_body_bytes, app.config.timeouts.body_read).await?;
    let key = principal.key_record().cloned();
    let on_call = recorder(app, key.clone(), request_id);
    let permits: switchyard_mcp::SharedPermits = match &key {
        Some(k) => {
            let k = k.clone();
            Arc::new(move |server: &str, tool: &str| k.mcp_permits(server, tool))
        }
        None => Arc::new(|_: &str, _: &str| true),
    };
    let admit = tool_call_admission(app, principal.key());
    let policy = crate::policy::on_tool_calls(app, &principal, &parts.headers, Some(peer))
        .unwrap_or_else(switchyard_mcp::no_policy);
    // A key's and its team's own guards apply to its tool calls too (with the defaults).
    let tool_guard = key.as_ref().and_then(|k| {
        let team = k.owners.team.as_ref().map_or(&[][..], |t| &t.guardrails[..]);
        app.guards.tools_adding([&k.guardrails, team])
    });
    let header = |name: &HeaderName| parts.headers.get(name).and_then(|v| v.to_str().ok());
    let answer = front
        .handle(switchyard_mcp::Request {
            method: &parts.method,
            session: header(&SESSION_HEADER),
            version_header: header(&VERSION_HEADER),
            accepts_sse: accepts_sse(&parts.headers),
            key: key.as_ref().map(|k| k.id.as_str()),
            now_unix: app.clock.unix_secs(),
            scope,
            permits,
            admit,
            policy,
            on_call,
            tool_guard,
            body: &body,
        })
        .await;
    Ok(render(answer))
}

fn accepts_sse(headers: &HeaderMap) -> bool {
    headers.get_all(header::ACCEPT).iter().any(|v| v.to_str().is_ok_and(|v| v.contains("text/event-stream")))
}

fn render(answer: Answer) -> Response<GatewayBody> {
    let status = StatusCode::from_u16(answer.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let (body, content_type) = match answer.body {
        Body::Empty => (full(Vec::new()), None),
        Body::Json(bytes) => (full(bytes), Some("application/json")),
        Body::Events(events) => (
            http_body_util::Either::Right(http_body_util::Either::Right(SseEvents::new(events))),
            Some("text/event-stream"),
        ),
    };
    let mut resp = Response::new(body);
    *resp.status_mut() = status;
    let h = resp.headers_mut();
    if let Some(ct) = content_type {
        h.insert(header::CONTENT_TYPE, HeaderValue::from_static(ct));
    }
    if status == StatusCode::METHOD_NOT_ALLOWED {
        h.insert(header::ALLOW, HeaderValue::from_static("POST, DELETE"));
    }
    if let Some(session) = answer.session.and_then(|s| HeaderValue::from_str(&s).ok()) {
        h.insert(SESSION_HEADER.clone(), session);
    }
    resp
}

/// Journals one usage record per tool call (through the same journal and store as model
/// requests: `backend` and `model_*` name the server as `mcp:{server}`, `tool` the tool) and
/// counts it in the metrics.
fn recorder(app: &App, key: Option<Arc<crate::records::KeyRecord>>, request_id: &HeaderValue) -> OnCall {
    let journal = app.journal.clone();
    let metrics = app.metrics.clone();
    let started_unix_ms = app.clock.unix_ms();
    let id = request_id.to_str().unwrap_or_default().to_owned();
    // A Code Mode program makes many calls in one request: records after the first get `{id}.{n}`, as
    // records are keyed by id.
    let seq = std::sync::atomic::AtomicU32::new(0);
    Arc::new(move |call: CallRecord| {
        let n = seq.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let id = if n == 0 { id.clone() } else { format!("{id}.{n}") };
        // A name the client made up must not become a metric label (unbounded series).
        let tool_label = if call.status == "unknown_tool" { "(unknown)" } else { call.tool.as_str() };
        metrics.count_mcp_call(&call.server, tool_label, call.status, call.latency);
        let Some(journal) = &journal else { return };
        let server = if call.server.is_empty() { "unknown".to_owned() } else { call.server.clone() };
        let model = format!("mcp:{server}");
        let record = UsageRecord {
            backend: Some(server),
            status: http_status(call.status),
            latency_ms: call.latency.as_secs_f64() * 1e3,
            tool: Some(call.tool.clone()),
            response_bytes: Some(call.response_bytes as u64),
            ..UsageRecord::started(id, started_unix_ms, key.as_deref(), &model, &model)
        };
        if let Err(e) = journal.append(record) {
            tracing::error!(error = %e, "could not journal an MCP tool call's usage");
        }
    })
}

/// The HTTP-like status a tool call's record carries, so reports count failures alike.
fn http_status(status: &str) -> u16 {
    match status {
        "ok" => 200,
        "tool_error" => 200,
        "unknown_tool" => 404,
        "forbidden" | "policy_denied" => 403,
        "rate_limited" => 429,
        "cancelled" => 499,
        "timeout" => 504,
        // Code Mode: a program that threw or passed a limit is the tool's error, like `isError`.
        "limit_exceeded" => 200,
        "invalid" => 400,
        "sandbox_error" | "unavailable" => 500,
        _ => 502,
    }
}
