//! OpenAI Chat Completions responses (`chat.completion` objects) to and from a `ChatResponse`.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

use super::request_encode::WireToolCall;
use super::{finish_reason, stop_reason_of};
use crate::chat::{ChatResponse, Part, ResponseContext, ToolCall, Usage};
use crate::error::TranslateError;
use crate::json::{self, Text};

#[derive(Deserialize)]
struct WireResponse<'a> {
    #[serde(borrow)]
    id: Option<Text<'a>>,
    #[serde(borrow)]
    model: Option<Text<'a>>,
    created: Option<u64>,
    #[serde(borrow, default)]
    choices: Vec<WireChoice<'a>>,
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
struct WireChoice<'a> {
    #[serde(borrow)]
    message: Option<WireMessage<'a>>,
    #[serde(borrow)]
    finish_reason: Option<Text<'a>>,
    /// vLLM's: the stop string that matched (or a token id).
    #[serde(borrow)]
    stop_reason: Option<&'a RawValue>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow)]
    content: Option<Text<'a>>,
    #[serde(borrow)]
    refusal: Option<Text<'a>>,
    #[serde(borrow)]
    tool_calls: Option<Vec<WireToolCallIn<'a>>>,
}

#[derive(Deserialize)]
pub(crate) struct WireToolCallIn<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) function: Option<WireFunctionIn<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireFunctionIn<'a> {
    #[serde(borrow)]
    pub(crate) name: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) arguments: Option<Text<'a>>,
}

/// `usage`, as OpenAI and every compatible server report it.
#[derive(Deserialize, Serialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    pub(crate) prompt_tokens: u64,
    #[serde(default)]
    pub(crate) completion_tokens: u64,
    #[serde(default)]
    pub(crate) total_tokens: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(crate) prompt_tokens_details: Option<WirePromptDetails>,
}

#[derive(Deserialize, Serialize, Default)]
pub(crate) struct WirePromptDetails {
    pub(crate) cached_tokens: Option<u64>,
    /// Prompt-cache writes, spelled as the Responses API spells them (OpenAI's own caching has
    /// none; a translated Anthropic or Bedrock answer carries them here).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cache_write_tokens: Option<u64>,
}

impl WireUsage {
    pub(crate) fn to_usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.completion_tokens,
            total_tokens: if self.total_tokens > 0 {
                self.total_tokens
            } else {
                self.prompt_tokens + self.completion_tokens
            },
            cached_prompt_tokens: self.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens),
            cache_write_tokens: self.prompt_tokens_details.as_ref().and_then(|d| d.cache_write_tokens),
        }
    }

    pub(crate) fn from_usage(usage: &Usage) -> Self {
        WireUsage {
            prompt_tokens: usage.prompt_tokens,
            completion_tokens: usage.completion_tokens,
            total_tokens: usage.total_tokens,
            prompt_tokens_details: (usage.cached_prompt_tokens.is_some() || usage.cache_write_tokens.is_some())
                .then_some(WirePromptDetails {
                    cached_tokens: usage.cached_prompt_tokens,
                    cache_write_tokens: usage.cache_write_tokens,
                }),
        }
    }
}

pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend's chat completion is not valid: {e}")))?;
    let choice = wire
        .choices
        .into_iter()
        .next()
        .ok_or_else(|| TranslateError::invalid("the backend's chat completion has no choices"))?;
    let mut content = Vec::new();
    if let Some(message) = choice.message {
        if let Some(text) = message.content.filter(|t| !t.as_str().is_empty()) {
            content.push(Part::Text(text.into_owned()));
        } else if let Some(refusal) = message.refusal {
            content.push(Part::Text(refusal.into_owned()));
        }
        for (i, call) in message.tool_calls.unwrap_or_default().into_iter().enumerate() {
            let function = call.function.unwrap_or(WireFunctionIn { name: None, arguments: None });
            content.push(Part::ToolCall(ToolCall {
                id: call.id.map(Text::into_owned).unwrap_or_else(|| format!("call_{}_{i}", context.id)),
                name: function.name.map(Text::into_owned).unwrap_or_default(),
                arguments: function.arguments.map(Text::into_owned).unwrap_or_default(),
            }));
        }
    }
    let has_tool_calls = content.iter().any(|part| matches!(part, Part::ToolCall(_)));
    let (stop_reason, stop_sequence) =
        stop_reason_of(choice.finish_reason.as_ref().map(Text::as_str), choice.stop_reason, has_tool_calls);
    Ok(ChatResponse {
        id: wire.id.map(Text::into_owned).unwrap_or_else(|| context.id.clone()),
        model: wire.model.map(Text::into_owned).unwrap_or_default(),
        created: wire.created.unwrap_or(context.created),
        content,
        stop_reason,
        stop_sequence,
        usage: wire.usage.map(|u| u.to_usage()).unwrap_or_default(),
    })
}

#[derive(Serialize)]
struct WireResponseOut<'a> {
    id: &'a str,
    object: &'static str,
    created: u64,
    model: &'a str,
    choices: [WireChoiceOut<'a>; 1],
    usage: WireUsage,
}

#[derive(Serialize)]
struct WireChoiceOut<'a> {
    index: u32,
    message: WireMessageOut<'a>,
    logprobs: Option<()>,
    finish_reason: &'static str,
}

#[derive(Serialize)]
struct WireMessageOut<'a> {
    role: &'static str,
    content: Option<String>,
    refusal: Option<()>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tool_calls: Vec<WireToolCall<'a>>,
}

pub fn encode_response(response: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let text = response.text();
    let tool_calls: Vec<WireToolCall<'_>> = response.tool_calls().map(WireToolCall::new).collect();
    let wire = WireResponseOut {
        id: &response.id,
        object: "chat.completion",
        created: response.created,
        model: &response.model,
        choices: [WireChoiceOut {
            index: 0,
            message: WireMessageOut {
                role: "assistant",
                content: if text.is_empty() && !tool_calls.is_empty() { None } else { Some(text) },
                refusal: None,
                tool_calls,
            },
            logprobs: None,
            finish_reason: finish_reason(&response.stop_reason),
        }],
        usage: WireUsage::from_usage(&response.usage),
    };
    json::to_vec(&wire)
}
