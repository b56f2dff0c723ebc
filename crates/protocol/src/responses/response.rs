//! OpenAI Responses `response` objects to and from a `ChatResponse`.

use serde::Deserialize;

use super::output::{item_id, status_of, write_response, Echo, Head, Item};
use crate::chat::{ChatResponse, Part, ResponseContext, StopReason, ToolCall, Usage};
use crate::error::TranslateError;
use crate::json::Text;
use crate::wire::prefixed;

#[derive(Deserialize)]
pub(crate) struct WireResponse<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) model: Option<Text<'a>>,
    pub(crate) created_at: Option<f64>,
    #[serde(borrow)]
    pub(crate) status: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) incomplete_details: Option<WireIncomplete<'a>>,
    #[serde(borrow, default)]
    pub(crate) output: Vec<WireItem<'a>>,
    pub(crate) usage: Option<WireUsage>,
    #[serde(borrow)]
    pub(crate) error: Option<crate::openai_chat::WireErrorDetail<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireIncomplete<'a> {
    #[serde(borrow)]
    reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireItem<'a> {
    #[serde(borrow, rename = "type")]
    pub(crate) kind: Text<'a>,
    #[serde(borrow)]
    pub(crate) call_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) name: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) arguments: Option<Text<'a>>,
    #[serde(borrow, default)]
    pub(crate) content: Vec<WirePart<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WirePart<'a> {
    #[serde(borrow)]
    text: Option<Text<'a>>,
    #[serde(borrow)]
    refusal: Option<Text<'a>>,
}

#[derive(Deserialize, Default)]
pub(crate) struct WireUsage {
    #[serde(default)]
    input_tokens: u64,
    #[serde(default)]
    output_tokens: u64,
    #[serde(default)]
    total_tokens: u64,
    input_tokens_details: Option<WireInputDetails>,
}

#[derive(Deserialize, Default)]
struct WireInputDetails {
    cached_tokens: Option<u64>,
    cache_write_tokens: Option<u64>,
}

impl WireUsage {
    pub(crate) fn to_usage(&self) -> Usage {
        Usage {
            cached_prompt_tokens: self.input_tokens_details.as_ref().and_then(|d| d.cached_tokens),
            cache_write_tokens: self.input_tokens_details.as_ref().and_then(|d| d.cache_write_tokens),
            total_tokens: self.total_tokens.max(self.input_tokens + self.output_tokens),
            ..Usage::new(self.input_tokens, self.output_tokens)
        }
    }
}

impl WireResponse<'_> {
    /// How the response ended, from its status and whether it called tools.
    pub(crate) fn stop_reason(&self, has_tool_calls: bool) -> StopReason {
        let reason = self.incomplete_details.as_ref().and_then(|d| d.reason.as_ref()).map(Text::as_str);
        match (self.status.as_ref().map(Text::as_str), reason) {
            (Some("incomplete"), Some("content_filter")) => StopReason::ContentFilter,
            (Some("incomplete"), _) => StopReason::MaxTokens,
            _ => StopReason::EndTurn.or_tool_use(has_tool_calls),
        }
    }
}

impl WireItem<'_> {
    /// The item's text (a message's parts, concatenated).
    pub(crate) fn text(&self) -> String {
        self.content.iter().filter_map(|part| part.text.as_ref().or(part.refusal.as_ref())).map(Text::as_str).collect()
    }
}

pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend's response is not valid: {e}")))?;
    let mut content = Vec::new();
    for item in &wire.output {
        match item.kind.as_str() {
            "message" => {
                let text = item.text();
                match content.last_mut() {
                    Some(Part::Text(previous)) => previous.push_str(&text),
                    _ => content.push(Part::Text(text)),
                }
            }
            "function_call" => content.push(Part::ToolCall(ToolCall {
                id: item.call_id.as_ref().map_or_else(String::new, |t| t.as_str().to_owned()),
                name: item.name.as_ref().map_or_else(String::new, |t| t.as_str().to_owned()),
                arguments: item.arguments.as_ref().map_or_else(String::new, |t| t.as_str().to_owned()),
            })),
            _ => {} // reasoning and hosted tools' items
        }
    }
    let has_tool_calls = content.iter().any(|part| matches!(part, Part::ToolCall(_)));
    Ok(ChatResponse {
        stop_reason: wire.stop_reason(has_tool_calls),
        id: wire.id.map(Text::into_owned).unwrap_or_else(|| context.id.clone()),
        model: wire.model.map(Text::into_owned).unwrap_or_default(),
        created: wire.created_at.map_or(context.created, |t| t as u64),
        content,
        stop_sequence: None,
        usage: wire.usage.map(|u| u.to_usage()).unwrap_or_default(),
    })
}

/// Output items for a response's content: each run of text one message, each tool call one
/// function call.
pub(crate) fn items_of(response_id: &str, content: &[Part]) -> Vec<Item> {
    let mut items: Vec<Item> = Vec::with_capacity(content.len());
    for part in content {
        match part {
            Part::Text(text) => match items.last_mut() {
                Some(Item::Message { text: previous, .. }) => previous.push_str(text),
                _ => items.push(Item::Message { id: item_id("msg", response_id, items.len()), text: text.clone() }),
            },
            Part::ToolCall(call) => items.push(Item::FunctionCall {
                id: item_id("fc", response_id, items.len()),
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            }),
            Part::Image(_) | Part::ToolResult(_) => {}
        }
    }
    items
}

/// The `response` object; `echo` repeats the request's settings as OpenAI does.
pub fn encode_response(response: &ChatResponse, echo: &Echo) -> Result<Vec<u8>, TranslateError> {
    let id = prefixed("resp_", &response.id);
    let items = items_of(&id, &response.content);
    let (status, incomplete_reason) = status_of(&response.stop_reason);
    let head = Head { id: &id, created: response.created, model: &response.model };
    let mut out = Vec::with_capacity(512);
    write_response(&mut out, &head, status, incomplete_reason, &items, Some(&response.usage), echo);
    Ok(out)
}
