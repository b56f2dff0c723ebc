//! Anthropic Messages responses (`message` objects) to and from a `ChatResponse`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::request::WireBlock;
use super::{stop_reason_name, stop_reason_of};
use crate::chat::{ChatResponse, Part, ResponseContext, StopReason, ToolCall, Usage};
use crate::error::TranslateError;
use crate::json::{self, Text};
use crate::wire::{arguments_object, empty_object, prefixed};

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    #[serde(borrow, default)]
    content: Vec<WireBlockIn<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
    #[serde(borrow)]
    stop_sequence: Option<Text<'a>>,
    #[serde(default)]
    usage: WireUsage,
}

#[derive(Deserialize)]
pub(crate) struct WireBlockIn<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: Text<'a>,
    #[serde(borrow)]
    pub(crate) text: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) name: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) input: Option<&'a RawValue>,
}

/// `usage` of a message, or of a `message_start`/`message_delta` event (where any may be absent).
#[derive(Debug, Deserialize, Default, Clone, Copy)]
pub(crate) struct WireUsage {
    pub(crate) input_tokens: Option<u64>,
    pub(crate) output_tokens: Option<u64>,
    pub(crate) cache_read_input_tokens: Option<u64>,
    pub(crate) cache_creation_input_tokens: Option<u64>,
}

impl WireUsage {
    /// Anthropic counts cached prompt tokens apart from `input_tokens`; the internal model counts
    /// every prompt token in `prompt_tokens`.
    pub(crate) fn to_usage(self) -> Usage {
        let cached = self.cache_read_input_tokens;
        let prompt =
            self.input_tokens.unwrap_or(0) + cached.unwrap_or(0) + self.cache_creation_input_tokens.unwrap_or(0);
        Usage {
            cached_prompt_tokens: cached,
            cache_write_tokens: self.cache_creation_input_tokens,
            ..Usage::new(prompt, self.output_tokens.unwrap_or(0))
        }
    }

    /// Fields present in `later` replace those here (`message_delta` usage is cumulative).
    pub(crate) fn update(&mut self, later: WireUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
        self.cache_creation_input_tokens = later.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
    }
}

pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireMessage<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend's message is not valid: {e}")))?;
    let mut content = Vec::with_capacity(wire.content.len());
    for block in wire.content {
        match block.kind.as_str() {
            "text" => content.push(Part::Text(block.text.map(Text::into_owned).unwrap_or_default())),
            "tool_use" => content.push(Part::ToolCall(ToolCall {
                id: block.id.map(Text::into_owned).unwrap_or_default(),
                name: block.name.map(Text::into_owned).unwrap_or_default(),
                arguments: block.input.map_or_else(|| "{}".to_owned(), |raw| raw.get().to_owned()),
            })),
            // Thinking and server-side tool blocks have no place in other APIs' responses.
            _ => {}
        }
    }
    let (stop_reason, stop_sequence) =
        stop_reason_of(wire.stop_reason.as_ref().map(Text::as_str), wire.stop_sequence.map(Text::into_owned));
    Ok(ChatResponse {
        id: wire.id.map(Text::into_owned).unwrap_or_else(|| context.id.clone()),
        model: wire.model.map(Text::into_owned).unwrap_or_default(),
        created: context.created,
        content,
        stop_reason,
        stop_sequence,
        usage: wire.usage.to_usage(),
    })
}

#[derive(Serialize)]
struct WireMessageOut<'a> {
    id: String,
    #[serde(rename = "type")]
    kind: &'static str,
    role: &'static str,
    model: &'a str,
    content: Vec<WireBlock<'a>>,
    stop_reason: &'a str,
    stop_sequence: Option<&'a str>,
    usage: WireUsageOut,
}

/// Anthropic's `usage`: cached prompt tokens apart from `input_tokens`.
#[derive(Serialize)]
pub(crate) struct WireUsageOut {
    pub(crate) input_tokens: u64,
    pub(crate) output_tokens: u64,
    pub(crate) cache_creation_input_tokens: u64,
    pub(crate) cache_read_input_tokens: u64,
}

impl WireUsageOut {
    pub(crate) fn new(usage: &Usage) -> Self {
        let (read, written) = (usage.cached_prompt_tokens.unwrap_or(0), usage.cache_write_tokens.unwrap_or(0));
        WireUsageOut {
            input_tokens: usage.prompt_tokens.saturating_sub(read + written),
            output_tokens: usage.completion_tokens,
            cache_creation_input_tokens: written,
            cache_read_input_tokens: read,
        }
    }
}

pub fn encode_response(response: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let mut content = Vec::with_capacity(response.content.len());
    for part in &response.content {
        match part {
            Part::Text(text) => content.push(WireBlock::Text { text }),
            Part::ToolCall(call) => {
                let input = match arguments_object(call) {
                    Ok(input) => input,
                    // Arguments cut off by the token limit: the call is there, its input is not.
                    Err(_) if response.stop_reason == StopReason::MaxTokens => empty_object(),
                    Err(e) => return Err(e),
                };
                content.push(WireBlock::ToolUse { id: &call.id, name: &call.name, input });
            }
            Part::Image(_) | Part::ToolResult(_) => {}
        }
    }
    let stop_reason = response.stop_reason.clone().or_tool_use(response.tool_calls().next().is_some());
    let wire = WireMessageOut {
        id: prefixed("msg_", &response.id),
        kind: "message",
        role: "assistant",
        model: &response.model,
        content,
        stop_reason: stop_reason_name(&stop_reason),
        stop_sequence: response.stop_sequence.as_deref(),
        usage: WireUsageOut::new(&response.usage),
    };
    json::to_vec(&wire)
}
