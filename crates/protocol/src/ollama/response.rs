//! Ollama `/api/chat` and `/api/generate` responses to and from a `ChatResponse`: one JSON object,
//! the same shape as a stream's last line (`done: true`, `done_reason`, token counts).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::chat_request::{decode_tool_calls, WireToolCall};
use super::time::{format_rfc3339, parse_rfc3339};
use crate::chat::{ChatResponse, Part, ResponseContext, StopReason, Usage};
use crate::error::TranslateError;
use crate::json::{push_str, push_u64, At, Text};

/// Which endpoint a response belongs to: `/api/chat` carries `message`, `/api/generate` `response`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Generate,
}

/// One response object or stream line of either endpoint.
#[derive(Deserialize)]
pub(crate) struct WireLine<'a> {
    #[serde(borrow)]
    pub(crate) model: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) created_at: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) message: Option<WireMessageIn<'a>>,
    #[serde(borrow)]
    pub(crate) response: Option<Text<'a>>,
    #[serde(default)]
    pub(crate) done: bool,
    #[serde(borrow)]
    pub(crate) done_reason: Option<Text<'a>>,
    pub(crate) prompt_eval_count: Option<u64>,
    pub(crate) eval_count: Option<u64>,
    #[serde(borrow)]
    pub(crate) error: Option<Text<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireMessageIn<'a> {
    #[serde(borrow)]
    pub(crate) content: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) tool_calls: Option<&'a RawValue>,
}

impl WireLine<'_> {
    /// The text this line adds, from either endpoint's field.
    pub(crate) fn text(&self) -> &str {
        match (&self.message, &self.response) {
            (Some(WireMessageIn { content: Some(content), .. }), _) => content.as_str(),
            (_, Some(response)) => response.as_str(),
            _ => "",
        }
    }

    pub(crate) fn created(&self, context: &ResponseContext) -> u64 {
        self.created_at.as_ref().and_then(|t| parse_rfc3339(t.as_str())).unwrap_or(context.created)
    }

    pub(crate) fn usage(&self) -> Usage {
        Usage::new(self.prompt_eval_count.unwrap_or(0), self.eval_count.unwrap_or(0))
    }
}

/// The stop reason a `done_reason` means.
pub(crate) fn stop_reason_of(done_reason: Option<&str>, has_tool_calls: bool) -> StopReason {
    match done_reason {
        Some("length") => StopReason::MaxTokens,
        Some("stop") | None => StopReason::EndTurn.or_tool_use(has_tool_calls),
        Some(other) => StopReason::Other(other.to_owned()),
    }
}

/// `done_reason` for a stop reason: Ollama knows only `stop` and `length` for generation.
pub(crate) fn done_reason(reason: &StopReason) -> &str {
    match reason {
        StopReason::MaxTokens => "length",
        StopReason::Other(other) if other == "load" || other == "unload" => other,
        _ => "stop",
    }
}

/// A response of either endpoint.
pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireLine<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend's response is not valid: {e}")))?;
    if let Some(error) = wire.error {
        return Err(TranslateError::invalid(format!("the backend answered with an error: {}", error.as_str())));
    }
    let mut content = Vec::new();
    if !wire.text().is_empty() {
        content.push(Part::Text(wire.text().to_owned()));
    }
    if let Some(calls) = wire.message.as_ref().and_then(|m| m.tool_calls) {
        let calls = decode_tool_calls(calls, &At::Root.key("message"), &format!("call_{}", context.id))?;
        content.extend(calls.into_iter().map(Part::ToolCall));
    }
    let has_tool_calls = content.iter().any(|part| matches!(part, Part::ToolCall(_)));
    Ok(ChatResponse {
        id: context.id.clone(),
        model: wire.model.as_ref().map_or_else(String::new, |m| m.as_str().to_owned()),
        created: wire.created(context),
        stop_reason: stop_reason_of(wire.done_reason.as_ref().map(Text::as_str), has_tool_calls),
        stop_sequence: None,
        usage: wire.usage(),
        content,
    })
}

/// `{"model":...,"created_at":...,` — how every object of a response starts.
pub(crate) fn write_head(out: &mut Vec<u8>, model: &str, created_at: &str) {
    out.extend_from_slice(b"{\"model\":");
    push_str(out, model);
    out.extend_from_slice(b",\"created_at\":");
    push_str(out, created_at);
    out.push(b',');
}

/// The part of an object carrying text (and tool calls, for chat), then `"done":`.
pub(crate) fn write_content(out: &mut Vec<u8>, endpoint: Endpoint, text: &str, tool_calls: &[WireToolCall<'_>]) {
    match endpoint {
        Endpoint::Chat => {
            out.extend_from_slice(b"\"message\":{\"role\":\"assistant\",\"content\":");
            push_str(out, text);
            if !tool_calls.is_empty() {
                out.extend_from_slice(b",\"tool_calls\":");
                out.extend(serde_json::to_vec(tool_calls).unwrap_or_else(|_| b"[]".to_vec()));
            }
            out.extend_from_slice(b"},\"done\":");
        }
        Endpoint::Generate => {
            out.extend_from_slice(b"\"response\":");
            push_str(out, text);
            out.extend_from_slice(b",\"done\":");
        }
    }
}

/// `true,"done_reason":...` and the counts, closing the object. Durations are unknown to a
/// translation and reported as 0.
pub(crate) fn write_done(out: &mut Vec<u8>, reason: &StopReason, usage: &Usage) {
    out.extend_from_slice(b"true,\"done_reason\":");
    push_str(out, done_reason(reason));
    out.extend_from_slice(b",\"total_duration\":0,\"load_duration\":0,\"prompt_eval_count\":");
    push_u64(out, usage.prompt_tokens);
    out.extend_from_slice(b",\"prompt_eval_duration\":0,\"eval_count\":");
    push_u64(out, usage.completion_tokens);
    out.extend_from_slice(b",\"eval_duration\":0}");
}

/// A whole response of the endpoint.
pub fn encode_response(response: &ChatResponse, endpoint: Endpoint) -> Result<Vec<u8>, TranslateError> {
    let tool_calls = super::chat_request::encode_tool_calls(&response.content);
    let tool_calls = match tool_calls {
        Ok(calls) => calls,
        // Arguments cut off by the token limit: Ollama cannot carry a call without them.
        Err(_) if response.stop_reason == StopReason::MaxTokens => Vec::new(),
        Err(e) => return Err(e),
    };
    if endpoint == Endpoint::Generate && !tool_calls.is_empty() {
        return Err(TranslateError::unsupported_by("tool calls in a /api/generate response", super::API));
    }
    let mut out = Vec::with_capacity(256);
    write_head(&mut out, &response.model, &format_rfc3339(response.created));
    write_content(&mut out, endpoint, &response.text(), &tool_calls);
    write_done(&mut out, &response.stop_reason, &response.usage);
    Ok(out)
}
