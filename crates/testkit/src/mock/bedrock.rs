//! Amazon Bedrock, from its API reference: `GET /foundation-models` (ListFoundationModels, on the
//! control-plane endpoint, served here too), and `POST /model/{modelId}/converse` /
//! `/converse-stream` with a `Converse` request (checked: known top-level fields only, `user` and
//! `assistant` turns alternating from `user`, one member per content block, no blank text,
//! `toolUse`/`toolResult` only with a `toolConfig`), answered with a `ConverseResponse` (the
//! stream: AWS event-stream frames, `messageStart`, a `contentBlockDelta` per token or a tool call,
//! `contentBlockStop`, `messageStop`, `metadata`). Requests authenticate with a Bedrock API key
//! (`Authorization: Bearer`), checked against the mock's key, or a SigV4 `Authorization` header
//! (its shape checked here; its signature is checked against botocore by the conformance suite).
//! Errors are `{"message": ...}` with `x-amzn-ErrorType`.

use aws_smithy_eventstream::frame::write_message_to;
use aws_smithy_types::event_stream::{Header, HeaderValue as EventHeader, Message};
use bytes::Bytes;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::{json, Value};

use super::body::MockBody;
use super::handlers::{gate, read_logged, State};
use super::reply::{tool_arguments, Reply, TOOL_ARGUMENT_FRAGMENTS};

const EVENT_STREAM: HeaderValue = HeaderValue::from_static("application/vnd.amazon.eventstream");
const TOKENS: usize = 5;
const FIELDS: [&str; 10] = [
    "messages",
    "system",
    "inferenceConfig",
    "toolConfig",
    "additionalModelRequestFields",
    "guardrailConfig",
    "promptVariables",
    "additionalModelResponseFieldPaths",
    "requestMetadata",
    "performanceConfig",
];
const BLOCKS: [&str; 9] =
    ["text", "image", "document", "video", "toolUse", "toolResult", "guardContent", "cachePoint", "reasoningContent"];

/// A request's prompt tokens as Bedrock counts them with prompt caching: the prefix up to its last
/// `cachePoint` (tools, then system, then messages, in that order) is read from the cache when an
/// earlier request wrote the same prefix, else written to it; the rest is input.
struct CacheUsage {
    input: usize,
    read: usize,
    write: usize,
}

impl CacheUsage {
    /// Converse's `usage`, with `output` tokens generated.
    fn usage(&self, output: usize) -> Value {
        let total = self.input + self.read + self.write + output;
        json!({"inputTokens": self.input, "outputTokens": output, "totalTokens": total,
               "cacheReadInputTokens": self.read, "cacheWriteInputTokens": self.write})
    }
}

fn prompt_cache(state: &State, request: &Value, tokens: usize) -> CacheUsage {
    let mut prefix = String::new();
    let mut cached_up_to = None;
    let tools = request.pointer("/toolConfig/tools").and_then(Value::as_array).into_iter().flatten();
    let system = request.get("system").and_then(Value::as_array).into_iter().flatten();
    let messages = request.get("messages").and_then(Value::as_array).into_iter().flatten();
    let blocks = messages.flat_map(|m| m.get("content").and_then(Value::as_array).into_iter().flatten());
    for block in tools.chain(system).chain(blocks) {
        if block.get("cachePoint").is_some() {
            cached_up_to = Some(prefix.clone());
        } else {
            prefix.push_str(&block.to_string());
        }
    }
    let Some(cached) = cached_up_to else { return CacheUsage { input: tokens, read: 0, write: 0 } };
    let cached_tokens = (cached.len() / 4).min(tokens);
    let input = tokens - cached_tokens;
    match state.control.remember_prompt_prefix(&cached) {
        true => CacheUsage { input, read: 0, write: cached_tokens },
        false => CacheUsage { input, read: cached_tokens, write: 0 },
    }
}

fn error(state: &State, status: StatusCode, exception: &'static str, message: &str) -> Response<MockBody> {
    let mut resp = state.json(status, json!({ "message": message }).to_string());
    resp.headers_mut().insert("x-amzn-errortype", HeaderValue::from_static(exception));
    resp
}

/// The request's credentials, as Bedrock checks them: a bearer API key, or SigV4's header.
fn authenticated(state: &State, headers: &http::HeaderMap) -> Result<(), (StatusCode, &'static str, &'static str)> {
    let auth = headers.get(http::header::AUTHORIZATION).and_then(|v| v.to_str().ok());
    match auth {
        Some(bearer) if bearer.starts_with("Bearer ") => {
            if state.api_key.as_deref().is_some_and(|k| bearer.strip_prefix("Bearer ") != Some(k)) {
                return Err((
                    StatusCode::FORBIDDEN,
                    "UnrecognizedClientException",
                    "Invalid API Key format: Must start with pre-defined prefix",
                ));
            }
            Ok(())
        }
        Some(sigv4) if sigv4.starts_with("AWS4-HMAC-SHA256 ") => {
            let scoped = sigv4.contains("/bedrock/aws4_request")
                && sigv4.contains("SignedHeaders=")
                && sigv4.contains("Signature=");
            if !scoped || !headers.contains_key("x-amz-date") {
                return Err((
                    StatusCode::FORBIDDEN,
                    "InvalidSignatureException",
                    "The request signature we calculated does not match the signature you provided.",
                ));
            }
            Ok(())
        }
        _ => Err((StatusCode::FORBIDDEN, "MissingAuthenticationTokenException", "Missing Authentication Token")),
    }
}

pub(crate) async fn handle(state: &State, req: Request<Incoming>) -> Response<MockBody> {
    let (parts, body) = req.into_parts();
    if let Err((status, exception, message)) = authenticated(state, &parts.headers) {
        return error(state, status, exception, message);
    }
    let path = parts.uri.path().to_owned();
    if parts.method == Method::GET && path == "/foundation-models" {
        let models: Vec<Value> = state
            .models
            .iter()
            .map(|m| json!({"modelId": m.name, "modelArn": format!("arn:aws:bedrock:us-east-1::foundation-model/{}", m.name),
                            "inputModalities": ["TEXT"], "outputModalities": ["TEXT"], "responseStreamingSupported": true}))
            .collect();
        return state.json(StatusCode::OK, json!({ "modelSummaries": models }).to_string());
    }
    let Some((model, operation)) = path.strip_prefix("/model/").and_then(|rest| rest.rsplit_once('/')) else {
        return error(state, StatusCode::NOT_FOUND, "UnknownOperationException", "Unknown operation");
    };
    let stream = match operation {
        "converse" => false,
        "converse-stream" => true,
        _ => return error(state, StatusCode::NOT_FOUND, "UnknownOperationException", "Unknown operation"),
    };
    if parts.method != Method::POST {
        return error(state, StatusCode::NOT_FOUND, "UnknownOperationException", "Unknown operation");
    }
    state.control.saw_posted_path(path.clone());
    let model = percent_encoding::percent_decode_str(model).decode_utf8_lossy();
    if !state.models.iter().any(|m| m.name == model) {
        return error(
            state,
            StatusCode::NOT_FOUND,
            "ResourceNotFoundException",
            "The provided model identifier is invalid.",
        );
    }
    let fail = br#"{"message":"Too many requests, please wait before trying again."}"#;
    if let Err(resp) = gate(state, fail).await {
        return *resp;
    }
    let Some(bytes) = read_logged(state, body).await else {
        return error(state, StatusCode::BAD_REQUEST, "ValidationException", "could not read the request body");
    };
    let request: Value = match serde_json::from_slice(&bytes) {
        Ok(Value::Object(m)) => Value::Object(m),
        _ => return error(state, StatusCode::BAD_REQUEST, "SerializationException", "Malformed input request"),
    };
    if let Err(message) = check(&request) {
        return error(state, StatusCode::BAD_REQUEST, "ValidationException", &message);
    }
    let cache = prompt_cache(state, &request, (bytes.len() / 4).max(1));
    let usage = |output: usize| cache.usage(output);
    match (reply(&request), stream) {
        (Reply::ToolCall(name), false) => {
            let call = json!({"toolUse": {"toolUseId": "tooluse_mock1", "name": name, "input": tool_arguments()}});
            let answer = json!({"output": {"message": {"role": "assistant", "content": [call]}}, "stopReason": "tool_use",
                                "usage": usage(TOKENS), "metrics": {"latencyMs": 1}});
            state.json(StatusCode::OK, answer.to_string())
        }
        (Reply::Text(pieces), false) => {
            let answer = json!({"output": {"message": {"role": "assistant", "content": [{"text": pieces.concat()}]}}, "stopReason": "end_turn",
                                "usage": usage(TOKENS), "metrics": {"latencyMs": 1}});
            state.json(StatusCode::OK, answer.to_string())
        }
        (reply, true) => {
            let mut out = Vec::new();
            event(&mut out, "messageStart", json!({"role": "assistant"}));
            let stop = match reply {
                Reply::ToolCall(name) => {
                    event(
                        &mut out,
                        "contentBlockStart",
                        json!({"contentBlockIndex": 0, "start": {"toolUse": {"toolUseId": "tooluse_mock1", "name": name}}}),
                    );
                    for piece in TOOL_ARGUMENT_FRAGMENTS {
                        event(
                            &mut out,
                            "contentBlockDelta",
                            json!({"contentBlockIndex": 0, "delta": {"toolUse": {"input": piece}}}),
                        );
                    }
                    "tool_use"
                }
                Reply::Text(pieces) => {
                    for piece in pieces {
                        event(&mut out, "contentBlockDelta", json!({"contentBlockIndex": 0, "delta": {"text": piece}}));
                    }
                    "end_turn"
                }
            };
            event(&mut out, "contentBlockStop", json!({"contentBlockIndex": 0}));
            event(&mut out, "messageStop", json!({ "stopReason": stop }));
            event(&mut out, "metadata", json!({"usage": usage(TOKENS), "metrics": {"latencyMs": 1}}));
            state.respond(StatusCode::OK, EVENT_STREAM, MockBody::full(Bytes::from(out)))
        }
    }
}

/// One event-stream frame, with the padding field Bedrock adds to every payload.
fn event(out: &mut Vec<u8>, event_type: &str, mut payload: Value) {
    payload["p"] = json!("abcdefghijklmnop"[..event_type.len() % 16].to_owned());
    let message = Message::new(payload.to_string().into_bytes())
        .add_header(Header::new(":event-type", EventHeader::String(event_type.to_owned().into())))
        .add_header(Header::new(":content-type", EventHeader::String("application/json".into())))
        .add_header(Header::new(":message-type", EventHeader::String("event".into())));
    if let Err(e) = write_message_to(&message, out) {
        tracing::error!(error = %e, "mock bedrock could not encode an event");
    }
}

/// The mock's usual reply (`reply.rs`), from what a Converse request offers and ends with: the
/// first declared tool, and a `toolResult` in the last message (its text, or its JSON).
fn reply(request: &Value) -> Reply {
    let last = request["messages"].as_array().and_then(|m| m.last());
    let result = last.and_then(|m| m["content"].as_array()).and_then(|blocks| {
        blocks.iter().find_map(|b| {
            let content = b.get("toolResult")?.get("content")?.as_array()?.first()?;
            Some(content.get("text").and_then(Value::as_str).map_or_else(|| content["json"].to_string(), str::to_owned))
        })
    });
    let declared = request["toolConfig"]["tools"].as_array().and_then(|t| t.first()?["toolSpec"]["name"].as_str());
    Reply::decide(declared.map(str::to_owned), result, TOKENS)
}

/// The reference's rules a request breaks, as Bedrock words them.
fn check(request: &Value) -> Result<(), String> {
    let fields = request.as_object().map(|m| m.keys().cloned().collect::<Vec<_>>()).unwrap_or_default();
    if let Some(unknown) = fields.iter().find(|f| !FIELDS.contains(&f.as_str())) {
        return Err(format!("Malformed input request: extraneous key [{unknown}] is not permitted, please reformat your input and try again."));
    }
    let messages = request["messages"].as_array().filter(|m| !m.is_empty()).ok_or(
        "A conversation must start with a user message. Try again with a conversation that starts with a user message.",
    )?;
    let has_tools = request["toolConfig"]["tools"].as_array().is_some_and(|t| !t.is_empty());
    let mut expected = "user";
    for (i, message) in messages.iter().enumerate() {
        let role = message["role"].as_str().unwrap_or_default();
        if role != expected {
            return Err(if i == 0 {
                "A conversation must start with a user message. Try again with a conversation that starts with a user message.".to_owned()
            } else {
                "A conversation must alternate between user and assistant roles. Make sure the conversation alternates between user and assistant roles and try again.".to_owned()
            });
        }
        expected = if role == "user" { "assistant" } else { "user" };
        let blocks = message["content"].as_array().filter(|c| !c.is_empty()).ok_or(format!("The content field in the Message object at messages.{i} is empty. Add a ContentBlock object to the content field and try again."))?;
        for block in blocks {
            if BLOCKS.iter().filter(|k| block.get(**k).is_some()).count() != 1 {
                return Err(format!(
                    "Malformed input request: messages.{i}.content: a content block must have exactly one member"
                ));
            }
            if block.get("text").and_then(Value::as_str).is_some_and(|t| t.trim().is_empty()) {
                return Err(format!("The text field in the ContentBlock object at messages.{i}.content is blank. Add text to the text field, and try again."));
            }
            if (block.get("toolUse").is_some() || block.get("toolResult").is_some()) && !has_tools {
                return Err(
                    "The toolConfig field must be defined when using toolUse and toolResult content blocks.".to_owned()
                );
            }
            if let Some(result) = block.get("toolResult") {
                if result["toolUseId"].as_str().is_none_or(str::is_empty) || !result["content"].is_array() {
                    return Err(format!(
                        "Malformed input request: messages.{i}: toolResult needs toolUseId and content"
                    ));
                }
            }
        }
    }
    if let Some(config) = request.get("inferenceConfig") {
        if config["temperature"].as_f64().is_some_and(|t| !(0.0..=1.0).contains(&t)) {
            return Err("inferenceConfig.temperature: must be between 0 and 1".to_owned());
        }
    }
    Ok(())
}
