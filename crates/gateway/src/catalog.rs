//! The answers the gateway gives from what it knows, without calling a backend: the model
//! catalogue (OpenAI's `GET /v1/models`; Ollama's `/api/tags`, `/api/ps`, `/api/version`),
//! liveness (`/health`), readiness (`/ready`) and Prometheus metrics (`/metrics`).

use http::{header, HeaderMap, HeaderValue, Response, StatusCode};
use serde_json::json;
use switchyard_protocol::ollama;

use crate::app::App;
use crate::error::GatewayError;
use crate::http::{full, json_response, json_value, GatewayBody};

/// The Ollama version reported by `/api/version`: clients check it to know which API features exist.
const OLLAMA_API_VERSION: &str = "0.6.0";

/// Ollama's `GET /api/tags`, `/api/ps` and `/api/version`, answered from the gateway's own
/// catalogue (every model a healthy backend serves, whatever its kind). Behind the same key
/// check as the proxied routes.
pub async fn ollama(app: &App, headers: &HeaderMap, path: &str) -> Result<Response<GatewayBody>, GatewayError> {
    app.auth.authenticate(headers, app.clock.unix_secs()).await?;
    let catalogue = app.router.catalogue();
    let names: Vec<&str> = catalogue.keys().map(String::as_str).collect();
    let body = match path {
        "/api/tags" => ollama::encode_tags(&names),
        "/api/ps" => ollama::encode_ps(&names),
        _ => ollama::encode_version(OLLAMA_API_VERSION),
    };
    Ok(json_response(StatusCode::OK, body))
}

/// `GET /v1/models`: Gemini's shape when the request is Google's (`is_google`), OpenAI's
/// otherwise — both SDKs call the same path under their default API version.
pub fn models(app: &App, headers: &HeaderMap, query: Option<&str>) -> Response<GatewayBody> {
    if is_google(headers, query) {
        gemini_models(app, None, "v1")
    } else {
        openai_models(app)
    }
}

/// `GET /v1/models/{id}` (or `/models/{id}`): one model, in Gemini's shape for Google's requests
/// and OpenAI's otherwise; `GET /v1beta/models[/{id}]` is always Gemini's.
pub fn model(
    app: &App,
    path: &str,
    headers: &HeaderMap,
    query: Option<&str>,
) -> Result<Response<GatewayBody>, GatewayError> {
    if let Some(rest) = path.strip_prefix("/v1beta/models") {
        let id = rest.trim_matches('/');
        return Ok(gemini_models(app, (!id.is_empty()).then_some(id), "v1beta"));
    }
    let id = path.strip_prefix("/models/").unwrap_or(path).trim_end_matches('/');
    if is_google(headers, query) {
        return Ok(gemini_models(app, Some(id.strip_prefix("models/").unwrap_or(id)), "v1"));
    }
    let entry = openai_entries(app).into_iter().find(|m| m["id"] == id);
    match entry {
        Some(entry) => Ok(json_value(StatusCode::OK, &entry)),
        None => Err(GatewayError::ModelNotFound { model: id.to_owned() }),
    }
}

/// A request from one of Google's SDKs: its key in `x-goog-api-key` or the `key=` query
/// parameter, as Google's API takes it. Every other client is answered as OpenAI's.
pub fn is_google(headers: &HeaderMap, query: Option<&str>) -> bool {
    headers.contains_key("x-goog-api-key") || query.is_some_and(|q| q.split('&').any(|pair| pair.starts_with("key=")))
}

/// One de-duplicated catalogue of the models served by healthy backends, plus usable aliases.
pub fn openai_models(app: &App) -> Response<GatewayBody> {
    json_value(StatusCode::OK, &json!({"object": "list", "data": openai_entries(app)}))
}

fn openai_entries(app: &App) -> Vec<serde_json::Value> {
    let catalogue = app.router.catalogue();
    let capabilities = app.router.capabilities();
    let mut data: Vec<serde_json::Value> = catalogue
        .iter()
        .map(|(id, backends)| {
            json!({"id": id, "object": "model", "created": 0, "owned_by": "switchyard", "backends": backends,
                   "capabilities": capabilities.get(id)})
        })
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
    data
}

/// Gemini's model list (the same catalogue, as `models/{id}` entries), or one model, or a 404
/// in Gemini's error shape.
fn gemini_models(app: &App, one: Option<&str>, version: &str) -> Response<GatewayBody> {
    let catalogue = app.router.catalogue();
    let mut ids: Vec<&str> = catalogue.keys().map(String::as_str).collect();
    ids.extend(app.config.aliases.iter().filter(|(_, t)| catalogue.contains_key(*t)).map(|(a, _)| a.as_str()));
    ids.sort_unstable();
    ids.dedup();
    let entry = |id: &str| {
        json!({"name": format!("models/{id}"), "displayName": id,
               "supportedGenerationMethods": ["generateContent", "streamGenerateContent"]})
    };
    match one {
        None => json_value(StatusCode::OK, &json!({ "models": ids.iter().map(|id| entry(id)).collect::<Vec<_>>() })),
        Some(id) if ids.contains(&id) => json_value(StatusCode::OK, &entry(id)),
        Some(id) => {
            let message = format!("models/{id} is not found for API version {version}");
            let body = json!({"error": {"code": 404, "message": message, "status": "NOT_FOUND"}});
            json_value(StatusCode::NOT_FOUND, &body)
        }
    }
}

pub fn health() -> Response<GatewayBody> {
    json_value(StatusCode::OK, &json!({"status": "ok"}))
}

pub fn ready(app: &App) -> Response<GatewayBody> {
    let up = app.router.healthy_count();
    let total = app.router.backends.len();
    let (status, word) =
        if up > 0 { (StatusCode::OK, "ready") } else { (StatusCode::SERVICE_UNAVAILABLE, "not_ready") };
    json_value(status, &json!({"status": word, "backends_up": up, "backends": total}))
}

/// What a soak watches for leaks besides memory and descriptors: live tasks, database connections.
fn render_process(app: &App, out: &mut String) {
    use std::fmt::Write;
    let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks();
    let _ = writeln!(
        out,
        "# HELP switchyard_runtime_tasks_alive Tasks alive on the gateway's async runtime.\n\
         # TYPE switchyard_runtime_tasks_alive gauge\nswitchyard_runtime_tasks_alive {tasks}"
    );
    if let Some((in_use, free)) = heap() {
        let _ = writeln!(
            out,
            "# HELP switchyard_heap_in_use_bytes Bytes malloc has handed out and not had back (a leak raises it).\n\
             # TYPE switchyard_heap_in_use_bytes gauge\nswitchyard_heap_in_use_bytes {in_use}\n\
             # HELP switchyard_heap_free_bytes Bytes malloc holds free for reuse (fragmentation raises it, not a leak).\n\
             # TYPE switchyard_heap_free_bytes gauge\nswitchyard_heap_free_bytes {free}"
        );
    }
    if let Some(store) = &app.store {
        let _ = writeln!(
            out,
            "# HELP switchyard_db_connections_open Database connections the pool holds open.\n\
             # TYPE switchyard_db_connections_open gauge\nswitchyard_db_connections_open {}",
            store.connections_open()
        );
        if let Some(bytes) = store.sqlite_heap_bytes() {
            let _ = writeln!(
                out,
                "# HELP switchyard_sqlite_heap_bytes Memory SQLite holds (page caches, statements), bounded by its cache size.\n\
                 # TYPE switchyard_sqlite_heap_bytes gauge\nswitchyard_sqlite_heap_bytes {bytes}"
            );
        }
    }
}

/// glibc malloc's bytes in use and bytes held free, over all its arenas: resident memory alone
/// cannot tell a leak from arenas that grew once and keep their free chunks.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)]
fn heap() -> Option<(usize, usize)> {
    // SAFETY: takes no arguments and returns a plain struct; glibc locks each arena as it reads.
    let info = unsafe { libc::mallinfo2() };
    Some((info.uordblks + info.hblkhd, info.fordblks))
}

#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn heap() -> Option<(usize, usize)> {
    None
}

pub fn metrics(app: &App) -> Response<GatewayBody> {
    let mut text = app.metrics.render(&app.router.backends);
    app.router.admission.render(&mut text);
    app.router.render_affinity(&mut text);
    if let Some(engines) = &app.router.engines {
        let names: Vec<&str> = app.router.backends.iter().map(|b| b.name()).collect();
        engines.render(&names, &mut text);
    }
    if let Some(shared) = &app.shared {
        shared.render(&mut text);
    }
    if let Some(journal) = &app.journal {
        journal.counters().render(&mut text);
    }
    if let Some(telemetry) = &app.telemetry {
        telemetry.render(&mut text);
    }
    app.exports.render(&mut text);
    if let Some(mcp) = &app.mcp {
        crate::metrics::mcp::render_server_requests(&mcp.server_requests(), &mut text);
        crate::metrics::mcp::render_forwarded(&mcp.forwarded(), &mut text);
    }
    if let Some(cache) = &app.cache {
        cache.render(&mut text);
    }
    if let Some(semantic) = &app.semantic {
        semantic.render(&mut text);
    }
    app.experiments.render(&mut text);
    render_process(app, &mut text);
    let mut resp = Response::new(full(text));
    resp.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"));
    resp
}
