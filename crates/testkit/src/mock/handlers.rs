//! Request routing and endpoint handlers of the mock backend (models, chat/completions, embeddings, health, Ollama).

use std::borrow::Cow;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, CACHE_CONTROL, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::value::RawValue;

use super::body::MockBody;
use super::render::{self, Usage};
use super::stream::{Kind, SseStream};
use super::{MockConfig, MockControl};

static X_MOCK_PORT: HeaderName = HeaderName::from_static("x-mock-port");
const JSON: HeaderValue = HeaderValue::from_static("application/json");
const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");

/// A served model: its id and its JSON string literal.
struct Model {
    name: String,
    json: String,
}

/// Everything handlers need, precomputed once per server.
pub(crate) struct State {
    pub(crate) control: Arc<MockControl>,
    models: Vec<Model>,
    models_body: Bytes,
    tags_body: Option<Bytes>,
    content_json: String,
    stream_chunks: usize,
    port_header: HeaderValue,
}

impl State {
    pub(crate) fn new(cfg: &MockConfig, control: Arc<MockControl>, port: u16) -> Self {
        State {
            control,
            models: cfg.models.iter().map(|m| Model { name: m.clone(), json: render::json_str(m) }).collect(),
            models_body: render::models_body(&cfg.models),
            tags_body: cfg.ollama.then(|| render::ollama_tags_body(&cfg.models)),
            content_json: render::full_content_json(cfg.stream_chunks),
            stream_chunks: cfg.stream_chunks,
            port_header: HeaderValue::from(port),
        }
    }

    fn respond(&self, status: StatusCode, content_type: HeaderValue, body: MockBody) -> Response<MockBody> {
        let mut resp = Response::new(body);
        *resp.status_mut() = status;
        let h = resp.headers_mut();
        h.insert(CONTENT_TYPE, content_type);
        h.insert(X_MOCK_PORT.clone(), self.port_header.clone());
        resp
    }

    fn json(&self, status: StatusCode, body: impl Into<Bytes>) -> Response<MockBody> {
        self.respond(status, JSON, MockBody::full(body))
    }

    fn error(
        &self,
        status: StatusCode,
        message: &str,
        kind: &str,
        param: Option<&str>,
        code: Option<&str>,
    ) -> Response<MockBody> {
        self.json(status, render::error_body(message, kind, param, code))
    }

    fn bad_request(&self, message: &str, param: Option<&str>) -> Response<MockBody> {
        self.error(StatusCode::BAD_REQUEST, message, "invalid_request_error", param, None)
    }
}

/// Entry point of every request.
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    let path = parts.uri.path();
    match parts.method {
        Method::GET => match path {
            "/v1/models" => state.json(StatusCode::OK, state.models_body.clone()),
            "/health" => state.json(StatusCode::OK, Bytes::from_static(render::HEALTH_BODY)),
            "/api/tags" if state.tags_body.is_some() => {
                state.json(StatusCode::OK, state.tags_body.clone().unwrap_or_default())
            }
            "/api/version" if state.tags_body.is_some() => {
                state.json(StatusCode::OK, Bytes::from_static(render::OLLAMA_VERSION_BODY))
            }
            _ => not_found(state, &parts.method, path),
        },
        Method::POST => {
            state.control.requests.fetch_add(1, Ordering::Relaxed);
            let endpoint = match path {
                "/v1/chat/completions" => Endpoint::Chat,
                "/v1/completions" => Endpoint::Completion,
                "/v1/embeddings" => Endpoint::Embeddings,
                _ => return not_found(state, &parts.method, path),
            };
            let bytes = match body.collect().await {
                Ok(c) => c.to_bytes(),
                Err(_) => return state.bad_request("could not read request body", None),
            };
            match endpoint {
                Endpoint::Chat => completion(state, &bytes, Kind::Chat).await,
                Endpoint::Completion => completion(state, &bytes, Kind::Completion).await,
                Endpoint::Embeddings => embeddings(state, &bytes).await,
            }
        }
        _ => not_found(state, &parts.method, path),
    }
}

enum Endpoint {
    Chat,
    Completion,
    Embeddings,
}

fn not_found(state: &State, method: &Method, path: &str) -> Response<MockBody> {
    let msg = format!("Unknown request URL: {method} {path}");
    state.error(StatusCode::NOT_FOUND, &msg, "invalid_request_error", None, Some("unknown_url"))
}

#[derive(Deserialize)]
struct CompletionReq<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct StreamOptions {
    #[serde(default)]
    include_usage: Option<bool>,
}

#[derive(Deserialize)]
struct EmbeddingsReq<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    input: Option<&'a RawValue>,
}

/// A JSON string value, borrowed when it has no escapes.
fn raw_str(raw: &RawValue) -> Option<Cow<'_, str>> {
    match serde_json::from_str::<&str>(raw.get()) {
        Ok(s) => Some(Cow::Borrowed(s)),
        Err(_) => serde_json::from_str::<String>(raw.get()).ok().map(Cow::Owned),
    }
}

/// Deterministic per-body id, so identical requests yield byte-identical responses.
fn body_id(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0000_0100_0000_01b3);
    }
    h % 1_000_000_000
}

/// An early (error) response; boxed to keep `Result` small.
type Rejection = Box<Response<MockBody>>;

/// Validates the requested model; returns the served model's JSON literal.
fn resolve_model<'s>(state: &'s State, model: Option<&RawValue>) -> Result<&'s str, Rejection> {
    let Some(name) = model.and_then(raw_str) else {
        return Err(Box::new(state.bad_request("you must provide a model parameter (a string)", Some("model"))));
    };
    let Some(m) = state.models.iter().find(|m| m.name == name) else {
        let msg = format!("The model `{name}` does not exist or you do not have access to it.");
        return Err(Box::new(state.error(
            StatusCode::NOT_FOUND,
            &msg,
            "invalid_request_error",
            Some("model"),
            Some("model_not_found"),
        )));
    };
    Ok(&m.json)
}

/// Failure injection then added latency, shared by every POST endpoint.
async fn gate(state: &State) -> Result<(), Rejection> {
    let control = &state.control;
    if control.should_fail() {
        control.failures.fetch_add(1, Ordering::Relaxed);
        let status = StatusCode::from_u16(control.fail_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        return Err(Box::new(state.json(status, Bytes::from_static(render::FAIL_BODY))));
    }
    let latency = control.latency();
    if !latency.is_zero() {
        tokio::time::sleep(latency).await;
    }
    Ok(())
}

async fn completion(state: &State, bytes: &Bytes, kind: Kind) -> Response<MockBody> {
    let Ok(req) = serde_json::from_slice::<CompletionReq<'_>>(bytes) else {
        return state.bad_request("request body is not a valid JSON object", None);
    };
    let stream = req.stream.is_some_and(|r| r.get() == "true");
    let include_usage = req
        .stream_options
        .and_then(|r| serde_json::from_str::<StreamOptions>(r.get()).ok())
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let model_json = match resolve_model(state, req.model) {
        Ok(m) => m,
        Err(resp) => return *resp,
    };
    if let Err(resp) = gate(state).await {
        return *resp;
    }
    let id = body_id(bytes);
    let usage = Usage { prompt: render::prompt_tokens(bytes.len()), completion: state.stream_chunks as u64 };
    if stream {
        let sse = SseStream::new(
            kind,
            id,
            model_json,
            state.stream_chunks,
            include_usage.then_some(usage),
            state.control.chunk_delay(),
        );
        let mut resp = state.respond(StatusCode::OK, SSE, MockBody::Stream(Box::new(sse)));
        resp.headers_mut().insert(CACHE_CONTROL, NO_CACHE);
        return resp;
    }
    let body = match kind {
        Kind::Chat => render::chat_completion(id, model_json, &state.content_json, usage),
        Kind::Completion => render::text_completion(id, model_json, &state.content_json, usage),
    };
    state.json(StatusCode::OK, body)
}

async fn embeddings(state: &State, bytes: &Bytes) -> Response<MockBody> {
    let Ok(req) = serde_json::from_slice::<EmbeddingsReq<'_>>(bytes) else {
        return state.bad_request("request body is not a valid JSON object", None);
    };
    let model_json = match resolve_model(state, req.model) {
        Ok(m) => m,
        Err(resp) => return *resp,
    };
    let inputs: Option<Vec<String>> = req.input.and_then(|raw| {
        serde_json::from_str::<String>(raw.get())
            .map(|s| vec![s])
            .or_else(|_| serde_json::from_str::<Vec<String>>(raw.get()))
            .ok()
    });
    let Some(inputs) = inputs else {
        return state.bad_request("input must be a string or an array of strings", Some("input"));
    };
    if let Err(resp) = gate(state).await {
        return *resp;
    }
    let tokens: u64 = inputs.iter().map(|s| render::prompt_tokens(s.len())).sum::<u64>().max(1);
    state.json(StatusCode::OK, render::embeddings(&inputs, model_json, tokens))
}
