//! The route table: which handler answers which method and path. Every response gets an
//! `x-request-id`, every request is counted; errors render in the shape of the API the client
//! called (OpenAI's, Anthropic's or Ollama's).

use std::sync::Arc;
use std::time::Instant;

use http::{header, HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::{full, request_id, GatewayBody};
use crate::app::App;
use crate::error::GatewayError;
use crate::metrics::Endpoint;
use crate::proxy;
use crate::translate;
use switchyard_protocol::chat::Api;
use switchyard_protocol::ollama;

pub async fn handle(app: Arc<App>, req: Request<Incoming>) -> Response<GatewayBody> {
    let started = Instant::now();
    let rid = request_id::from_request(req.headers());
    // Accept both `/v1/...` and the bare paths some clients build from a base URL without `/v1`.
    let path = req.uri().path();
    let path = path.strip_prefix("/v1").filter(|p| p.starts_with('/')).unwrap_or(path);
    let endpoint = match path {
        "/chat/completions" => Endpoint::ChatCompletions,
        "/completions" => Endpoint::Completions,
        "/embeddings" => Endpoint::Embeddings,
        "/models" => Endpoint::Models,
        "/responses" => Endpoint::Responses,
        "/messages" => Endpoint::Messages,
        "/messages/count_tokens" => Endpoint::CountTokens,
        "/api/chat" => Endpoint::OllamaChat,
        "/api/generate" => Endpoint::OllamaGenerate,
        "/api/embed" => Endpoint::OllamaEmbed,
        _ => Endpoint::Other,
    };
    let api = if path.starts_with("/api/") { Api::Ollama } else { translate::client_api(endpoint) };
    if path.starts_with("/admin") && req.uri().path().starts_with("/admin") {
        let result = admin(&app, req).await;
        let mut resp = result.unwrap_or_else(|e| {
            app.metrics.count_error(e.kind());
            error_response(&e)
        });
        resp.headers_mut().insert(request_id::HEADER, rid);
        app.metrics.count_request(Endpoint::Other, resp.status().as_u16());
        return resp;
    }
    let result = match (endpoint, req.method(), path) {
        (ep, &Method::POST, _) if ep.is_proxied() => proxy::forward(&app, endpoint, req, started, &rid).await,
        (Endpoint::Models, &Method::GET, _) => Ok(models(&app)),
        (Endpoint::Other, &Method::GET, "/api/tags" | "/api/ps" | "/api/version") => {
            ollama_catalog(&app, &req, path).await
        }
        (Endpoint::Other, &Method::GET, "/health") => Ok(json_response(StatusCode::OK, json!({"status": "ok"}))),
        (Endpoint::Other, &Method::GET, "/ready") => Ok(ready(&app)),
        (Endpoint::Other, &Method::GET, "/metrics") => Ok(metrics(&app)),
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
    resp
}

/// Ollama's `GET /api/tags`, `/api/ps` and `/api/version`, answered from the gateway's own
/// catalogue (every model a healthy backend serves, whatever its kind). Behind the same key
/// check as the proxied routes.
async fn ollama_catalog(app: &App, req: &Request<Incoming>, path: &str) -> Result<Response<GatewayBody>, GatewayError> {
    app.auth.authenticate(req.headers(), super::admin::now_unix()).await?;
    let catalogue = app.router.catalogue();
    let names: Vec<&str> = catalogue.keys().map(String::as_str).collect();
    let body = match path {
        "/api/tags" => ollama::encode_tags(&names),
        "/api/ps" => ollama::encode_ps(&names),
        _ => ollama::encode_version(OLLAMA_API_VERSION),
    };
    let mut resp = Response::new(full(body));
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    Ok(resp)
}

/// The Ollama version reported by `/api/version`: clients check it to know which API features exist.
const OLLAMA_API_VERSION: &str = "0.6.0";

pub fn error_response(e: &GatewayError) -> Response<GatewayBody> {
    error_response_in(e, Api::OpenAiChat)
}

/// An error in the shape of `api`, with the status and headers that go with it.
pub fn error_response_in(e: &GatewayError, api: Api) -> Response<GatewayBody> {
    let mut resp = Response::new(full(e.render(api)));
    *resp.status_mut() = e.status();
    let h = resp.headers_mut();
    h.insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    if let GatewayError::RateLimited { retry_after_secs, headers, .. } = e {
        if *retry_after_secs > 0 {
            h.insert(header::RETRY_AFTER, HeaderValue::from(*retry_after_secs));
        }
        h.extend((**headers).clone());
    }
    if let GatewayError::Unauthorized { .. } = e {
        h.insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
    }
    resp
}

/// `/admin/...`: master key required whenever auth is on.
async fn admin(app: &Arc<App>, req: Request<Incoming>) -> Result<Response<GatewayBody>, GatewayError> {
    if app.auth.enabled() && !app.auth.is_master(req.headers()) {
        return Err(GatewayError::Unauthorized {
            message: "the admin API needs the master key as `Authorization: Bearer`".to_owned(),
            code: "invalid_api_key",
        });
    }
    let (parts, body) = req.into_parts();
    let body = super::parse::read_body(&parts.headers, body, app.config.max_body_bytes).await?;
    super::admin::handle(app, &parts.method, parts.uri.path(), parts.uri.query(), body).await
}

fn json_response(status: StatusCode, value: serde_json::Value) -> Response<GatewayBody> {
    let mut resp = Response::new(full(serde_json::to_vec(&value).unwrap_or_default()));
    *resp.status_mut() = status;
    resp.headers_mut().insert(header::CONTENT_TYPE, HeaderValue::from_static("application/json"));
    resp
}

/// One de-duplicated catalogue of the models served by healthy backends, plus usable aliases.
fn models(app: &App) -> Response<GatewayBody> {
    let catalogue = app.router.catalogue();
    let mut data: Vec<serde_json::Value> = catalogue
        .iter()
        .map(|(id, backends)| json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard", "backends": backends}))
        .collect();
    let mut aliases: Vec<_> = app.config.aliases.iter().filter(|(_, t)| catalogue.contains_key(*t)).collect();
    aliases.sort();
    for (alias, target) in aliases {
        if !catalogue.contains_key(alias) {
            data.push(
                json!({"id": alias, "object": "model", "created": 0, "owned_by": "switchyard", "alias_of": target}),
            );
        }
    }
    json_response(StatusCode::OK, json!({"object": "list", "data": data}))
}

fn ready(app: &App) -> Response<GatewayBody> {
    let up = app.router.healthy_count();
    let total = app.router.backends.len();
    let (status, word) =
        if up > 0 { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "not_ready") };
    json_response(status, json!({"status": word, "backends_up": up, "backends": total}))
}

fn metrics(app: &App) -> Response<GatewayBody> {
    let mut text = app.metrics.render(&app.router.backends);
    if let Some(journal) = &app.journal {
        journal.counters().render(&mut text);
    }
    let mut resp = Response::new(full(text));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}
