//! Ollama's native API of the mock: `POST /api/chat` and `/api/generate` (NDJSON streams by
//! default, `"stream": false` for one object, as Ollama does), `POST /api/embed`, `GET /api/tags`,
//! `/api/ps`, `/api/version` and `/`; everything else goes to the OpenAI-compatible `/v1` API,
//! which Ollama serves beside its own.

use std::fmt::Write as _;

use bytes::Bytes;
use http::header::HeaderValue;
use http::{Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Map, Value};

use super::body::MockBody;
use super::frames::Frames;
use super::handlers::{body_id, gate, read_logged, Model, Rejection, State};
use super::kv;
use super::render::{self, ndjson_line, CREATED_RFC3339_NANOS};
use super::reply::{self, Reply};

const NDJSON: HeaderValue = HeaderValue::from_static("application/x-ndjson");
const JSON_UTF8: HeaderValue = HeaderValue::from_static("application/json; charset=utf-8");
const TEXT: HeaderValue = HeaderValue::from_static("text/plain; charset=utf-8");
const VERSION_BODY: &[u8] = br#"{"version":"0.12.0"}"#;

/// Routes a request of the Ollama API.
pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let path = req.uri().path();
    let endpoint = match (req.method(), path) {
        (&Method::GET | &Method::HEAD, "/") => {
            return state.respond(StatusCode::OK, TEXT, MockBody::full(Bytes::from_static(b"Ollama is running")));
        }
        (&Method::GET, "/api/tags") => return state.json(StatusCode::OK, state.tags_body.clone()),
        (&Method::GET, "/api/ps") => return state.json(StatusCode::OK, state.ps_body.clone()),
        (&Method::GET, "/api/version") => return state.json(StatusCode::OK, Bytes::from_static(VERSION_BODY)),
        (&Method::POST, "/api/chat") => Endpoint::Chat,
        (&Method::POST, "/api/generate") => Endpoint::Generate,
        (&Method::POST, "/api/embed") => Endpoint::Embed,
        (_, p) if p.starts_with("/api/") || p == "/" => {
            return state.respond(
                StatusCode::NOT_FOUND,
                TEXT,
                MockBody::full(Bytes::from_static(b"404 page not found")),
            );
        }
        _ => return super::openai::handle(state, req).await,
    };
    let Some(bytes) = read_logged(state, req.into_body()).await else {
        return error(state, StatusCode::BAD_REQUEST, "could not read the request body");
    };
    let (body, model) = match checked(state, &bytes) {
        Ok(checked) => checked,
        Err(resp) => return *resp,
    };
    if let Err(resp) = gate(state, render::OLLAMA_FAIL_BODY).await {
        return *resp;
    }
    match endpoint {
        Endpoint::Embed => embed(state, &body, model),
        Endpoint::Chat | Endpoint::Generate => {
            let chat = matches!(endpoint, Endpoint::Chat);
            let reply = if chat {
                reply::openai_or_ollama(&body, state.stream_chunks)
            } else {
                Reply::chunks(state.stream_chunks)
            };
            let mut generation = Generation {
                chat,
                model,
                prompt_tokens: render::prompt_tokens(bytes.len()),
                completion_tokens: state.stream_chunks as u64,
                durations: DURATIONS,
            };
            let empty = if chat {
                body.get("messages").and_then(Value::as_array).is_none_or(Vec::is_empty)
            } else {
                body.get("prompt").and_then(Value::as_str).is_none_or(str::is_empty)
            };
            if empty {
                // Ollama answers a request without input by loading the model.
                return state.respond(StatusCode::OK, JSON_UTF8, MockBody::full(generation.loaded()));
            }
            let turn = state.kv_turn(&body, &reply).await;
            if let Some(turn) = &turn {
                // Ollama's `prompt_eval_count` counts the prompt tokens evaluated, not those
                // found in its cache; its durations are the simulated ones.
                generation.prompt_tokens = turn.prefill();
                let (prefill, decode) = (nanos(turn.ttft()), nanos(turn.decode_time()));
                generation.durations =
                    Durations { total: prefill.saturating_add(decode), load: 0, prompt_eval: prefill, eval: decode };
            }
            let resp = if body.get("stream").and_then(Value::as_bool) == Some(false) {
                if let Some(turn) = &turn {
                    turn.decode().await;
                }
                state.respond(StatusCode::OK, JSON_UTF8, MockBody::full(generation.whole(&reply, body_id(&bytes))))
            } else {
                state.stream(NDJSON, generation.stream(&reply, body_id(&bytes)), state.pace(turn.as_ref()))
            };
            kv::finish(turn, resp)
        }
    }
}

enum Endpoint {
    Chat,
    Generate,
    Embed,
}

/// `{"error":"..."}`, Ollama's error shape.
fn error(state: &State, status: StatusCode, message: &str) -> Response<MockBody> {
    let body = serde_json::to_vec(&json!({ "error": message })).unwrap_or_default();
    state.respond(status, JSON_UTF8, MockBody::full(body))
}

/// The body as JSON and the model it names, or Ollama's error.
fn checked<'s>(state: &'s State, bytes: &[u8]) -> Result<(Value, &'s Model), Rejection> {
    let reject = |status, message: &str| Box::new(error(state, status, message));
    let body: Value = serde_json::from_slice(bytes).map_err(|e| reject(StatusCode::BAD_REQUEST, &e.to_string()))?;
    let name = body.get("model").and_then(Value::as_str).unwrap_or("");
    if name.is_empty() {
        return Err(reject(StatusCode::BAD_REQUEST, "model is required"));
    }
    let model = state
        .find_model(name)
        .ok_or_else(|| reject(StatusCode::NOT_FOUND, &format!("model \"{name}\" not found, try pulling it first")))?;
    Ok((body, model))
}

/// One `/api/chat` or `/api/generate` answer.
struct Generation<'a> {
    chat: bool,
    model: &'a Model,
    prompt_tokens: u64,
    completion_tokens: u64,
    durations: Durations,
}

/// The timings of the last object, in nanoseconds.
#[derive(Clone, Copy)]
struct Durations {
    total: u64,
    load: u64,
    prompt_eval: u64,
    eval: u64,
}

/// Fixed timings, without a KV cache: every one non-zero, as Ollama's are.
const DURATIONS: Durations = Durations { total: 5_000_000, load: 1_000_000, prompt_eval: 1_000_000, eval: 3_000_000 };

fn nanos(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

impl Generation<'_> {
    /// An object's head and its content: `message` for chat, `response` for generate.
    fn object(&self, text: &str, tool_calls: Option<Value>) -> Map<String, Value> {
        let mut object = Map::new();
        object.insert("model".into(), json!(self.model.name));
        object.insert("created_at".into(), json!(CREATED_RFC3339_NANOS));
        if self.chat {
            let mut message = json!({"role": "assistant", "content": text});
            if let Some(calls) = tool_calls {
                message["tool_calls"] = calls;
            }
            object.insert("message".into(), message);
        } else {
            object.insert("response".into(), json!(text));
        }
        object
    }

    /// The last object: `done`, why, and the counts and timings (fixed, in nanoseconds).
    fn done(&self, mut object: Map<String, Value>) -> Value {
        object.insert("done".into(), json!(true));
        object.insert("done_reason".into(), json!("stop"));
        if !self.chat {
            object.insert("context".into(), json!([1, 2, 3]));
        }
        let d = self.durations;
        for (name, value) in [
            ("total_duration", d.total),
            ("load_duration", d.load),
            ("prompt_eval_count", self.prompt_tokens),
            ("prompt_eval_duration", d.prompt_eval),
            ("eval_count", self.completion_tokens),
            ("eval_duration", d.eval),
        ] {
            object.insert(name.into(), json!(value));
        }
        Value::Object(object)
    }

    fn tool_calls(name: &str, id: u64) -> Value {
        json!([{"id": format!("call_mock_{id}"), "function": {"index": 0, "name": name, "arguments": reply::tool_arguments()}}])
    }

    /// The answer to a request without messages or prompt: the model is loaded, nothing generated.
    fn loaded(&self) -> Bytes {
        let mut object = self.object("", None);
        object.insert("done_reason".into(), json!("load"));
        object.insert("done".into(), json!(true));
        Bytes::from(serde_json::to_vec(&object).unwrap_or_default())
    }

    fn whole(&self, reply: &Reply, id: u64) -> Bytes {
        let object = match reply {
            Reply::Text(_) => self.object(&reply.text(), None),
            Reply::ToolCall(name) => self.object("", Some(Self::tool_calls(name, id))),
        };
        Bytes::from(serde_json::to_vec(&self.done(object)).unwrap_or_default())
    }

    fn stream(&self, reply: &Reply, id: u64) -> Frames {
        let mut frames = Frames::default();
        match reply {
            Reply::Text(pieces) => {
                for piece in pieces {
                    let mut line = self.object(piece, None);
                    line.insert("done".into(), json!(false));
                    frames.push_content(ndjson_line(&Value::Object(line)));
                }
            }
            // Ollama sends a tool call whole, in one line.
            Reply::ToolCall(name) => {
                let mut line = self.object("", Some(Self::tool_calls(name, id)));
                line.insert("done".into(), json!(false));
                frames.push_content(ndjson_line(&Value::Object(line)));
            }
        }
        frames.push_end(ndjson_line(&self.done(self.object("", None))));
        frames
    }
}

fn embed(state: &State, body: &Value, model: &Model) -> Response<MockBody> {
    let inputs = body.get("input").map(|input| render::string_or_strings(&input.to_string()));
    let Some(Some(inputs)) = inputs else {
        return error(state, StatusCode::BAD_REQUEST, "invalid input type");
    };
    let tokens: u64 = inputs.iter().map(|s| render::prompt_tokens(s.len())).sum::<u64>().max(1);
    let mut out = format!("{{\"model\":{},\"embeddings\":[", model.json);
    for (i, text) in inputs.iter().enumerate() {
        if i > 0 {
            out.push(',');
        }
        render::embedding(&mut out, text);
    }
    let _ = write!(out, "],\"total_duration\":2000000,\"load_duration\":1000000,\"prompt_eval_count\":{tokens}}}");
    state.respond(StatusCode::OK, JSON_UTF8, MockBody::full(out))
}
