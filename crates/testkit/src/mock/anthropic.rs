//! The Anthropic Messages API of the mock: `POST /v1/messages` (plain and SSE, event for event as
//! Anthropic sends it), `POST /v1/messages/count_tokens` and `GET /v1/models`, behind Anthropic's
//! required `x-api-key` and `anthropic-version` headers and with its request validation, so tests
//! prove a translating gateway sends what Anthropic accepts.

use bytes::Bytes;
use http::header::HeaderValue;
use http::{HeaderMap, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::MockBody;
use super::frames::Frames;
use super::handlers::{body_id, gate, read_logged, Model, Rejection, State};
use super::kv;
use super::render::{self, sse_event};
use super::reply::{self, Reply, TOOL_ARGUMENT_FRAGMENTS};

const SSE: HeaderValue = HeaderValue::from_static("text/event-stream; charset=utf-8");

/// Routes a request of the Anthropic API.
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    let endpoint = match (&parts.method, parts.uri.path()) {
        (&Method::GET, "/v1/models") => Endpoint::Models,
        (&Method::POST, "/v1/messages") => Endpoint::Messages,
        (&Method::POST, "/v1/messages/count_tokens") => Endpoint::CountTokens,
        _ => return error(state, StatusCode::NOT_FOUND, "not_found_error", "Not found"),
    };
    if let Err(resp) = check_headers(state, &parts.headers) {
        return *resp;
    }
    if let Endpoint::Models = endpoint {
        return state.json(StatusCode::OK, state.anthropic_models_body.clone());
    }
    let Some(bytes) = read_logged(state, body).await else {
        return error(state, StatusCode::BAD_REQUEST, "invalid_request_error", "could not read the request body");
    };
    let request = match Checked::new(state, &bytes, matches!(endpoint, Endpoint::Messages)) {
        Ok(request) => request,
        Err(resp) => return *resp,
    };
    if let Err(resp) = gate(state, render::ANTHROPIC_FAIL_BODY).await {
        return *resp;
    }
    match endpoint {
        Endpoint::CountTokens => {
            state.json(StatusCode::OK, format!(r#"{{"input_tokens":{}}}"#, count_characters(&request.body)))
        }
        _ => messages(state, &bytes, &request).await,
    }
}

enum Endpoint {
    Models,
    Messages,
    CountTokens,
}

/// `{"type":"error","error":{"type":..,"message":..}}`, Anthropic's error shape.
fn error(state: &State, status: StatusCode, kind: &str, message: &str) -> Response<MockBody> {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    state.json(status, serde_json::to_vec(&body).unwrap_or_default())
}

fn invalid(state: &State, message: &str) -> Rejection {
    Box::new(error(state, StatusCode::BAD_REQUEST, "invalid_request_error", message))
}

/// Anthropic answers every endpoint only with an API key (the configured one, if any) and a version.
fn check_headers(state: &State, headers: &HeaderMap) -> Result<(), Rejection> {
    let header = |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).filter(|v| !v.is_empty());
    let unauthorized =
        |message: &str| Box::new(error(state, StatusCode::UNAUTHORIZED, "authentication_error", message));
    // The official SDKs send the key as `Authorization: Bearer` (anthropic-python 2.x), older
    // ones and most tools as `x-api-key`; Anthropic takes either. With a configured key, every key
    // sent must be it: a gateway that also forwarded its client's key would be caught here.
    let bearer = header("authorization").and_then(|v| v.strip_prefix("Bearer ")).filter(|k| !k.is_empty());
    let sent: Vec<&str> = header("x-api-key").into_iter().chain(bearer).collect();
    if sent.is_empty() {
        return Err(unauthorized("x-api-key header is required"));
    }
    if let Some(key) = state.api_key.as_deref() {
        if sent.iter().any(|k| *k != key) {
            return Err(unauthorized("invalid x-api-key"));
        }
    }
    if header("anthropic-version").is_none() {
        return Err(invalid(state, "anthropic-version: header is required"));
    }
    Ok(())
}

/// A request body that passed the checks Anthropic makes.
struct Checked<'s> {
    body: Value,
    model: &'s Model,
}

impl<'s> Checked<'s> {
    /// `needs_max_tokens`: `/v1/messages` requires it, count_tokens does not.
    fn new(state: &'s State, bytes: &[u8], needs_max_tokens: bool) -> Result<Self, Rejection> {
        let body: Value = serde_json::from_slice(bytes).map_err(|e| invalid(state, &format!("invalid JSON: {e}")))?;
        let Some(name) = body.get("model").and_then(Value::as_str) else {
            return Err(invalid(state, "model: Field required"));
        };
        let max_tokens = body.get("max_tokens").and_then(Value::as_u64).unwrap_or(0);
        if needs_max_tokens && max_tokens == 0 {
            return Err(invalid(state, "max_tokens: Field required"));
        }
        let Some(messages) = body.get("messages").and_then(Value::as_array) else {
            return Err(invalid(state, "messages: Field required"));
        };
        validate_messages(messages).map_err(|message| invalid(state, &message))?;
        if body.get("system").is_some_and(|s| !(s.is_string() || s.is_array())) {
            return Err(invalid(state, "system: Input should be a valid string or list of text blocks"));
        }
        let Some(model) = state.find_model(name) else {
            let message = format!("model: {name}");
            return Err(Box::new(error(state, StatusCode::NOT_FOUND, "not_found_error", &message)));
        };
        Ok(Checked { body, model })
    }
}

/// Roles are `user` and `assistant` only (the system prompt is top-level), tool_use ids are
/// `[a-zA-Z0-9_-]+`, and tool results answer tool_use blocks of the message right before.
fn validate_messages(messages: &[Value]) -> Result<(), String> {
    if messages.is_empty() {
        return Err("messages: at least one message is required".to_owned());
    }
    let mut previous_calls: Vec<&str> = Vec::new();
    for (i, message) in messages.iter().enumerate() {
        let role = message.get("role").and_then(Value::as_str).unwrap_or("");
        if role != "user" && role != "assistant" {
            return Err(format!("messages.{i}.role: Input should be 'user' or 'assistant' (got {role:?})"));
        }
        let blocks = match message.get("content") {
            Some(Value::String(_)) => &[][..],
            Some(Value::Array(blocks)) => blocks.as_slice(),
            _ => return Err(format!("messages.{i}.content: Field required")),
        };
        let block_ids = |kind: &str, field: &str| -> Vec<&str> {
            blocks
                .iter()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
                .map(|b| b.get(field).and_then(Value::as_str).unwrap_or(""))
                .collect()
        };
        for id in block_ids("tool_result", "tool_use_id") {
            if !previous_calls.contains(&id) {
                return Err(format!(
                    "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` blocks: {id}. Each \
                     `tool_result` block must have a corresponding `tool_use` block in the previous message."
                ));
            }
        }
        let calls = block_ids("tool_use", "id");
        if let Some(bad) = calls.iter().find(|id| id.is_empty() || !id.bytes().all(is_id_byte)) {
            return Err(format!(
                "messages.{i}.content: tool_use.id: String should match pattern '^[a-zA-Z0-9_-]+$' ({bad:?})"
            ));
        }
        previous_calls = calls;
    }
    Ok(())
}

fn is_id_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_' || b == b'-'
}

/// The mock's token count: one token per character of text (system prompt, text blocks, tool
/// results). Deliberately not the gateway's estimate (characters / 4), so a test can tell a count
/// the backend made from one the gateway made.
fn count_characters(body: &Value) -> usize {
    fn text(value: &Value) -> usize {
        match value {
            Value::String(s) => s.chars().count(),
            Value::Array(blocks) => blocks
                .iter()
                .map(|b| match b.get("type").and_then(Value::as_str) {
                    Some("text") => b.get("text").map_or(0, text),
                    Some("tool_result") => b.get("content").map_or(0, text),
                    _ => 0,
                })
                .sum(),
            _ => 0,
        }
    }
    let messages = body.get("messages").and_then(Value::as_array).map_or(&[][..], Vec::as_slice);
    body.get("system").map_or(0, text) + messages.iter().map(|m| m.get("content").map_or(0, text)).sum::<usize>()
}

async fn messages(state: &State, bytes: &Bytes, request: &Checked<'_>) -> Response<MockBody> {
    let id = body_id(bytes);
    let reply = reply::anthropic(&request.body, state.stream_chunks);
    let turn = state.kv_turn(&request.body, &reply).await;
    // Anthropic counts cache reads apart: `input_tokens` are the prompt tokens computed.
    let (input_tokens, cache_read) = match &turn {
        Some(turn) => (turn.prefill(), turn.cached),
        None => (render::prompt_tokens(bytes.len()), 0),
    };
    let output_tokens = state.stream_chunks as u64;
    let message_id = format!("msg_mock_{id}");
    let tool_id = format!("toolu_mock_{id}");
    let model = request.model.name.as_str();
    let stop_reason = match reply {
        Reply::Text(_) => "end_turn",
        Reply::ToolCall(_) => "tool_use",
    };
    let usage = |output: u64| {
        json!({"input_tokens": input_tokens, "cache_creation_input_tokens": 0, "cache_read_input_tokens": cache_read,
            "output_tokens": output})
    };
    let mut resp = if request.body.get("stream").and_then(Value::as_bool) == Some(true) {
        let mut frames = Frames::default();
        let message = json!({"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": null, "stop_sequence": null, "usage": usage(1)});
        frames.push(sse_event("message_start", &json!({"type": "message_start", "message": message})));
        let block = match &reply {
            Reply::Text(_) => json!({"type": "text", "text": ""}),
            Reply::ToolCall(name) => json!({"type": "tool_use", "id": tool_id, "name": name, "input": {}}),
        };
        let start = json!({"type": "content_block_start", "index": 0, "content_block": block});
        frames.push(sse_event("content_block_start", &start));
        frames.push(sse_event("ping", &json!({"type": "ping"})));
        let deltas: Vec<Value> = match &reply {
            Reply::Text(pieces) => pieces.iter().map(|text| json!({"type": "text_delta", "text": text})).collect(),
            Reply::ToolCall(_) => TOOL_ARGUMENT_FRAGMENTS
                .iter()
                .map(|partial| json!({"type": "input_json_delta", "partial_json": partial}))
                .collect(),
        };
        for delta in deltas {
            let event = json!({"type": "content_block_delta", "index": 0, "delta": delta});
            frames.push_content(sse_event("content_block_delta", &event));
        }
        frames.push_end(sse_event("content_block_stop", &json!({"type": "content_block_stop", "index": 0})));
        let delta = json!({"type": "message_delta", "delta": {"stop_reason": stop_reason, "stop_sequence": null},
            "usage": {"output_tokens": output_tokens}});
        frames.push(sse_event("message_delta", &delta));
        frames.push(sse_event("message_stop", &json!({"type": "message_stop"})));
        state.stream(SSE, frames, state.pace(turn.as_ref()))
    } else {
        if let Some(turn) = &turn {
            turn.decode().await;
        }
        let content = match &reply {
            Reply::Text(_) => json!([{"type": "text", "text": reply.text()}]),
            Reply::ToolCall(name) => {
                json!([{"type": "tool_use", "id": tool_id, "name": name, "input": reply::tool_arguments()}])
            }
        };
        let message = json!({"id": message_id, "type": "message", "role": "assistant", "model": model,
            "content": content, "stop_reason": stop_reason, "stop_sequence": null, "usage": usage(output_tokens)});
        state.json(StatusCode::OK, serde_json::to_vec(&message).unwrap_or_default())
    };
    if let Ok(value) = HeaderValue::from_str(&format!("req_mock_{id}")) {
        resp.headers_mut().insert("request-id", value);
    }
    kv::finish(turn, resp)
}
