//! The OpenAI-compatible API of the mock (also Ollama's `/v1`): models, chat completions (with tool
//! calls), completions and embeddings. The default reply takes a fast hand-rendered path; tool
//! calls and replies to tool results are rendered from a parsed body. Rerank, score, moderations,
//! images, tokenize and audio are routed to [`super::extra_api`].

use bytes::Bytes;
use http::header::{HeaderValue, AUTHORIZATION, CACHE_CONTROL};
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde::Deserialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::body::MockBody;
use super::extra_api;
use super::frames::Frames;
use super::handlers::{body_id, gate, raw_str, read_logged, Model, Rejection, State};
use super::kv;
use super::render::{self, Usage, CREATED};
use super::reply::{self, Reply, TOOL_ARGUMENTS, TOOL_ARGUMENT_FRAGMENTS};
use super::stream::{Kind, SseStream};
use super::MockApi;

const SSE: HeaderValue = HeaderValue::from_static("text/event-stream");
const NO_CACHE: HeaderValue = HeaderValue::from_static("no-cache");

/// Routes a request of the OpenAI-compatible API; with per-key limits set (a provider's key
/// pool, `MockControl::set_key_limits`), each key is limited and the answer says what it has left.
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    if let Err(resp) = check_key(state, &parts.headers) {
        return *resp;
    }
    let bearer = parts.headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    let limited = match (parts.method == Method::POST).then(|| state.control.take_key_request(bearer.unwrap_or(""))) {
        Some(Err(refusal)) => return refusal_answer(state, refusal),
        limited => limited.and_then(Result::ok),
    };
    let mut answer = route(state, parts, body).await;
    for (name, value) in limited.into_iter().flatten() {
        answer.headers_mut().insert(name, value);
    }
    answer
}

/// A key's request refused by its limits (429, with what OpenAI sends) or as revoked (401).
fn refusal_answer(state: &State, refusal: super::KeyRefusal) -> Response<MockBody> {
    match refusal {
        super::KeyRefusal::Revoked => {
            let msg = "Incorrect API key provided.";
            error(state, StatusCode::UNAUTHORIZED, msg, "invalid_request_error", None, Some("invalid_api_key"))
        }
        super::KeyRefusal::Limited(headers) => {
            let msg = "Rate limit reached for requests.";
            let mut answer =
                error(state, StatusCode::TOO_MANY_REQUESTS, msg, "requests", None, Some("rate_limit_exceeded"));
            for (name, value) in headers {
                answer.headers_mut().insert(name, value);
            }
            answer
        }
    }
}

async fn route(state: &State, parts: http::request::Parts, body: Incoming) -> Response<MockBody> {
    let path = parts.uri.path();
    match parts.method {
        Method::GET if path == "/v1/models" => state.json(StatusCode::OK, state.models_body.clone()),
        Method::POST => {
            if let Some(extra) = extra_api::route(path) {
                let Some(bytes) = read_logged(state, body).await else {
                    return bad_request(state, "could not read request body", None);
                };
                return extra_api::serve(state, extra, &parts.headers, &bytes).await;
            }
            let endpoint = match path {
                "/v1/chat/completions" => Endpoint::Chat,
                "/v1/completions" => Endpoint::Completion,
                "/v1/embeddings" => Endpoint::Embeddings,
                _ => return not_found(state, &parts.method, path),
            };
            let Some(bytes) = read_logged(state, body).await else {
                return bad_request(state, "could not read request body", None);
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

/// With a configured key (OpenAI kind only: Ollama has no authentication), every request must
/// carry `Authorization: Bearer KEY`.
fn check_key(state: &State, headers: &http::HeaderMap) -> Result<(), Rejection> {
    let Some(key) = state.api_key.as_deref().filter(|_| state.api == MockApi::OpenAi) else {
        return Ok(());
    };
    let sent = headers.get(AUTHORIZATION).and_then(|v| v.to_str().ok()).and_then(|v| v.strip_prefix("Bearer "));
    if sent == Some(key) {
        return Ok(());
    }
    let msg = "Incorrect API key provided.";
    Err(Box::new(error(state, StatusCode::UNAUTHORIZED, msg, "invalid_request_error", None, Some("invalid_api_key"))))
}

fn error(
    state: &State,
    status: StatusCode,
    message: &str,
    kind: &str,
    param: Option<&str>,
    code: Option<&str>,
) -> Response<MockBody> {
    state.json(status, render::error_body(message, kind, param, code))
}

pub(super) fn bad_request(state: &State, message: &str, param: Option<&str>) -> Response<MockBody> {
    error(state, StatusCode::BAD_REQUEST, message, "invalid_request_error", param, None)
}

fn not_found(state: &State, method: &Method, path: &str) -> Response<MockBody> {
    let msg = format!("Unknown request URL: {method} {path}");
    error(state, StatusCode::NOT_FOUND, &msg, "invalid_request_error", None, Some("unknown_url"))
}

#[derive(Deserialize)]
struct CompletionReq<'a> {
    #[serde(borrow, default)]
    model: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream: Option<&'a RawValue>,
    #[serde(borrow, default)]
    stream_options: Option<&'a RawValue>,
    #[serde(borrow, default)]
    tools: Option<&'a RawValue>,
    #[serde(borrow, default)]
    messages: Option<Vec<MessageRole<'a>>>,
    /// vLLM's and SGLang's switch for continuing a final assistant message.
    #[serde(default)]
    continue_final_message: Option<bool>,
}

/// Only a message's role: enough to tell whether the fast path applies.
#[derive(Deserialize)]
struct MessageRole<'a> {
    #[serde(borrow, default)]
    role: Option<&'a RawValue>,
}

impl CompletionReq<'_> {
    /// Whether the reply may differ from the default text: tools offered, a tool result last,
    /// or a final assistant message to continue.
    fn may_need_tools(&self) -> bool {
        let tools = self.tools.is_some_and(|t| !matches!(t.get().trim(), "null" | "[]"));
        let last = self.messages.as_ref().and_then(|m| m.last()).and_then(|m| m.role).and_then(raw_str);
        tools || last.is_some_and(|role| role == "tool" || role == "assistant")
    }
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

/// Validates the requested model.
pub(super) fn resolve_model<'s>(state: &'s State, model: Option<&RawValue>) -> Result<&'s Model, Rejection> {
    let Some(name) = model.and_then(raw_str) else {
        return Err(Box::new(bad_request(state, "you must provide a model parameter (a string)", Some("model"))));
    };
    let Some(m) = state.find_model(&name) else {
        let msg = format!("The model `{name}` does not exist or you do not have access to it.");
        let code = Some("model_not_found");
        return Err(Box::new(error(state, StatusCode::NOT_FOUND, &msg, "invalid_request_error", Some("model"), code)));
    };
    Ok(m)
}

async fn completion(state: &State, bytes: &Bytes, kind: Kind) -> Response<MockBody> {
    let Ok(req) = serde_json::from_slice::<CompletionReq<'_>>(bytes) else {
        return bad_request(state, "request body is not a valid JSON object", None);
    };
    let stream = req.stream.is_some_and(|r| r.get() == "true");
    let include_usage = req
        .stream_options
        .and_then(|r| serde_json::from_str::<StreamOptions>(r.get()).ok())
        .and_then(|o| o.include_usage)
        .unwrap_or(false);
    let model = match resolve_model(state, req.model) {
        Ok(m) => m,
        Err(resp) => return *resp,
    };
    let reply = match kind {
        Kind::Chat if req.may_need_tools() => match serde_json::from_slice::<Value>(bytes) {
            // As vLLM does, the OpenAI kind continues a final assistant message only when asked
            // (`continue_final_message`); Ollama's /v1 always does.
            Ok(mut body) if state.api == MockApi::OpenAi && req.continue_final_message != Some(true) => {
                if let Some(messages) = body.get_mut("messages").and_then(Value::as_array_mut) {
                    if messages.last().and_then(|m| m.get("role")).and_then(Value::as_str) == Some("assistant") {
                        messages.push(json!({"role": "user", "content": ""}));
                    }
                }
                Some(reply::openai_or_ollama(&body, state.stream_chunks))
            }
            Ok(body) => Some(reply::openai_or_ollama(&body, state.stream_chunks)),
            Err(_) => return bad_request(state, "request body is not a valid JSON object", None),
        },
        _ => None,
    };
    if let Err(resp) = gate(state, render::FAIL_BODY).await {
        return *resp;
    }
    // Only a KV-cache mock reads the whole body: the fast path stays free of parsing.
    let turn = if state.control.kv.is_some() {
        let body = serde_json::from_slice::<Value>(bytes).unwrap_or(Value::Null);
        let default_reply;
        let kv_reply = match &reply {
            Some(reply) => reply,
            None => {
                default_reply = Reply::chunks(state.stream_chunks);
                &default_reply
            }
        };
        state.kv_turn(&body, kv_reply).await
    } else {
        None
    };
    let id = body_id(bytes);
    let completion = state.stream_chunks as u64;
    let usage = match &turn {
        Some(turn) => Usage { prompt: turn.prompt_tokens, completion, cached: Some(turn.cached) },
        None => Usage { prompt: render::prompt_tokens(bytes.len()), completion, cached: None },
    };
    let delay = state.pace(turn.as_ref());
    if let (false, Some(turn)) = (stream, &turn) {
        turn.decode().await;
    }
    let resp = 'resp: {
        if let Some(reply) = reply {
            let chat = Chat { id, model, usage };
            break 'resp if stream {
                state.stream(SSE, chat.stream(&reply, include_usage), delay)
            } else {
                state.json(StatusCode::OK, chat.whole(&reply))
            };
        }
        if stream {
            let usage = include_usage.then_some(usage);
            let sse = SseStream::new(kind, id, &model.json, state.stream_chunks, usage, delay);
            let mut resp = state.respond(StatusCode::OK, SSE, MockBody::Stream(Box::new(sse)));
            resp.headers_mut().insert(CACHE_CONTROL, NO_CACHE);
            break 'resp resp;
        }
        let body = match kind {
            Kind::Chat => render::chat_completion(id, &model.json, &state.content_json, usage),
            Kind::Completion => render::text_completion(id, &model.json, &state.content_json, usage),
        };
        state.json(StatusCode::OK, body)
    };
    kv::finish(turn, resp)
}

/// A chat completion whose reply is not the default text.
struct Chat<'a> {
    id: u64,
    model: &'a Model,
    usage: Usage,
}

impl Chat<'_> {
    fn usage_json(&self) -> Value {
        let Usage { prompt, completion, cached } = self.usage;
        let mut usage =
            json!({"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion});
        if let Some(cached) = cached {
            usage["prompt_tokens_details"] = json!({ "cached_tokens": cached });
        }
        usage
    }

    fn whole(&self, reply: &Reply) -> Vec<u8> {
        let (message, finish) = match reply {
            Reply::Text(_) => (json!({"role": "assistant", "content": reply.text()}), "stop"),
            Reply::ToolCall(name) => (
                json!({"role": "assistant", "content": null, "tool_calls": [{
                    "id": format!("call_mock_{}", self.id),
                    "type": "function",
                    "function": {"name": name, "arguments": TOOL_ARGUMENTS},
                }]}),
                "tool_calls",
            ),
        };
        let body = json!({
            "id": format!("chatcmpl-mock-{}", self.id),
            "object": "chat.completion",
            "created": CREATED,
            "model": self.model.name,
            "choices": [{"index": 0, "message": message, "logprobs": null, "finish_reason": finish}],
            "usage": self.usage_json(),
        });
        serde_json::to_vec(&body).unwrap_or_default()
    }

    fn chunk(&self, choices: Value, usage: Option<Value>) -> Bytes {
        let mut chunk = json!({
            "id": format!("chatcmpl-mock-{}", self.id),
            "object": "chat.completion.chunk",
            "created": CREATED,
            "model": self.model.name,
            "choices": choices,
        });
        if let Some(usage) = usage {
            chunk["usage"] = usage;
        }
        render::sse_data(&chunk)
    }

    fn delta(&self, delta: Value, finish: Option<&str>) -> Bytes {
        self.chunk(json!([{"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish}]), None)
    }

    fn stream(&self, reply: &Reply, include_usage: bool) -> Frames {
        let mut frames = Frames::default();
        let finish = match reply {
            Reply::Text(pieces) => {
                frames.push(self.delta(json!({"role": "assistant", "content": ""}), None));
                for piece in pieces {
                    frames.push_content(self.delta(json!({"content": piece}), None));
                }
                "stop"
            }
            Reply::ToolCall(name) => {
                let call = json!({"index": 0, "id": format!("call_mock_{}", self.id), "type": "function",
                    "function": {"name": name, "arguments": ""}});
                frames.push(self.delta(json!({"role": "assistant", "content": null, "tool_calls": [call]}), None));
                for fragment in TOOL_ARGUMENT_FRAGMENTS {
                    let call = json!({"index": 0, "function": {"arguments": fragment}});
                    frames.push_content(self.delta(json!({"tool_calls": [call]}), None));
                }
                "tool_calls"
            }
        };
        frames.push_end(self.delta(json!({}), Some(finish)));
        if include_usage {
            frames.push(self.chunk(json!([]), Some(self.usage_json())));
        }
        frames.push(Bytes::from_static(b"data: [DONE]\n\n"));
        frames
    }
}

async fn embeddings(state: &State, bytes: &Bytes) -> Response<MockBody> {
    let Ok(req) = serde_json::from_slice::<EmbeddingsReq<'_>>(bytes) else {
        return bad_request(state, "request body is not a valid JSON object", None);
    };
    let model = match resolve_model(state, req.model) {
        Ok(m) => m,
        Err(resp) => return *resp,
    };
    let Some(inputs) = req.input.and_then(|raw| render::string_or_strings(raw.get())) else {
        return bad_request(state, "input must be a string or an array of strings", Some("input"));
    };
    if let Err(resp) = gate(state, render::FAIL_BODY).await {
        return *resp;
    }
    let tokens: u64 = inputs.iter().map(|s| render::prompt_tokens(s.len())).sum::<u64>().max(1);
    state.json(StatusCode::OK, render::embeddings(&inputs, &model.json, tokens))
}
