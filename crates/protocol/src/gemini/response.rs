//! A Gemini `GenerateContentResponse` as a `ChatResponse`: the first candidate's text and
//! `functionCall` parts (thought summaries left out), its `finishReason`, and `usageMetadata`
//! (thinking tokens count as output, `cachedContentTokenCount` as cached prompt tokens).

use serde::Deserialize;
use serde_json::value::RawValue;

use super::stop_reason_of;
use crate::chat::{ChatResponse, Part, ResponseContext, StopReason, ToolCall, Usage};
use crate::error::TranslateError;
use crate::json::Text;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireResponse<'a> {
    #[serde(borrow, default)]
    pub(crate) candidates: Vec<WireCandidate<'a>>,
    pub(crate) usage_metadata: Option<WireUsage>,
    #[serde(borrow)]
    pub(crate) model_version: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) response_id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) prompt_feedback: Option<WirePromptFeedback<'a>>,
    #[serde(borrow)]
    pub(crate) error: Option<super::WireErrorDetail<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WirePromptFeedback<'a> {
    #[serde(borrow)]
    pub(crate) block_reason: Option<Text<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireCandidate<'a> {
    #[serde(borrow)]
    pub(crate) content: Option<WireContent<'a>>,
    #[serde(borrow)]
    pub(crate) finish_reason: Option<Text<'a>>,
    #[serde(default)]
    pub(crate) index: u32,
}

#[derive(Deserialize)]
pub(crate) struct WireContent<'a> {
    #[serde(borrow, default)]
    pub(crate) parts: Vec<WirePart<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WirePart<'a> {
    #[serde(borrow)]
    pub(crate) text: Option<Text<'a>>,
    #[serde(default)]
    pub(crate) thought: bool,
    #[serde(borrow)]
    pub(crate) function_call: Option<WireFunctionCall<'a>>,
}

#[derive(Deserialize)]
pub(crate) struct WireFunctionCall<'a> {
    #[serde(borrow)]
    pub(crate) id: Option<Text<'a>>,
    #[serde(borrow)]
    pub(crate) name: Text<'a>,
    #[serde(borrow)]
    pub(crate) args: Option<&'a RawValue>,
}

impl WireFunctionCall<'_> {
    /// The call in the internal model; Gemini's ids are optional, so one is made from the
    /// response's id and the call's position when it has none.
    pub(crate) fn to_tool_call(&self, context: &ResponseContext, n: usize) -> ToolCall {
        ToolCall {
            id: self.id.as_ref().map_or_else(|| format!("call_{}_{n}", context.id), |id| id.as_str().to_owned()),
            name: self.name.as_str().to_owned(),
            arguments: self.args.map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
        }
    }
}

#[derive(Deserialize, Default, Clone, Copy)]
#[serde(rename_all = "camelCase")]
pub(crate) struct WireUsage {
    #[serde(default)]
    prompt_token_count: u64,
    #[serde(default)]
    candidates_token_count: u64,
    #[serde(default)]
    thoughts_token_count: u64,
    cached_content_token_count: Option<u64>,
}

impl WireUsage {
    pub(crate) fn to_usage(self) -> Usage {
        let usage = Usage::new(self.prompt_token_count, self.candidates_token_count + self.thoughts_token_count);
        Usage { cached_prompt_tokens: self.cached_content_token_count, ..usage }
    }
}

pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid response: {e}")))?;
    let mut content = Vec::new();
    let mut finish = None;
    if let Some(candidate) = wire.candidates.into_iter().find(|c| c.index == 0) {
        let mut calls = 0;
        for part in candidate.content.map(|c| c.parts).unwrap_or_default() {
            if let Some(call) = &part.function_call {
                content.push(Part::ToolCall(call.to_tool_call(context, calls)));
                calls += 1;
            } else if let Some(text) = part.text.filter(|_| !part.thought) {
                match content.last_mut() {
                    Some(Part::Text(previous)) => previous.push_str(text.as_str()),
                    _ => content.push(Part::Text(text.into_owned())),
                }
            }
        }
        finish = candidate.finish_reason.map(Text::into_owned);
    }
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall(_)));
    let stop_reason = match (finish, wire.prompt_feedback.and_then(|f| f.block_reason)) {
        (Some(finish), _) => stop_reason_of(&finish, has_calls),
        // No candidate: the prompt itself was blocked.
        (None, Some(_)) => StopReason::ContentFilter,
        (None, None) => StopReason::EndTurn.or_tool_use(has_calls),
    };
    Ok(ChatResponse {
        id: wire.response_id.map_or_else(|| context.id.clone(), Text::into_owned),
        model: wire.model_version.map_or_else(|| context.model.clone(), Text::into_owned),
        created: context.created,
        content,
        stop_reason,
        stop_sequence: None,
        usage: wire.usage_metadata.unwrap_or_default().to_usage(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of the API reference's example answers: text in parts, a finish reason, usage.
    const TEXT_ANSWER: &str = r#"{
      "candidates": [{"content": {"parts": [{"text": "AI learns patterns"}, {"text": " from data."}], "role": "model"},
                      "finishReason": "STOP", "avgLogprobs": -0.1, "index": 0}],
      "usageMetadata": {"promptTokenCount": 8, "candidatesTokenCount": 6, "totalTokenCount": 30,
                        "thoughtsTokenCount": 16, "cachedContentTokenCount": 4,
                        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": 8}]},
      "modelVersion": "gemini-2.5-flash", "responseId": "mAitaLmkHPPlz7IPvtfUqQ4"
    }"#;

    const CALL_ANSWER: &str = r#"{
      "candidates": [{"content": {"role": "model", "parts": [
          {"text": "Thinking about the tool", "thought": true},
          {"functionCall": {"name": "get_weather", "args": {"location": "Paris"}}}]},
        "finishReason": "STOP", "index": 0}],
      "usageMetadata": {"promptTokenCount": 40, "candidatesTokenCount": 7, "totalTokenCount": 47},
      "modelVersion": "gemini-2.5-flash"
    }"#;

    fn context() -> ResponseContext {
        ResponseContext { created: 1_700_000_000, id: "req1".into(), ..ResponseContext::default() }
    }

    #[test]
    fn text_answers_decode_with_their_usage() {
        let r = decode_response(TEXT_ANSWER.as_bytes(), &context()).unwrap();
        assert_eq!(r.text(), "AI learns patterns from data.");
        assert_eq!((r.id.as_str(), r.model.as_str()), ("mAitaLmkHPPlz7IPvtfUqQ4", "gemini-2.5-flash"));
        assert_eq!(r.stop_reason, StopReason::EndTurn);
        assert_eq!(r.usage, Usage { cached_prompt_tokens: Some(4), ..Usage::new(8, 22) });
    }

    #[test]
    fn function_calls_decode_with_made_up_ids_and_no_thoughts() {
        let r = decode_response(CALL_ANSWER.as_bytes(), &context()).unwrap();
        assert_eq!(r.text(), "");
        let calls: Vec<_> = r.tool_calls().collect();
        assert_eq!(calls.len(), 1);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("call_req1_0", "get_weather", r#"{"location": "Paris"}"#)
        );
        assert_eq!(r.stop_reason, StopReason::ToolUse);
    }

    #[test]
    fn a_blocked_prompt_is_a_content_filter_stop() {
        let body = br#"{"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {"promptTokenCount": 5}}"#;
        let r = decode_response(body, &context()).unwrap();
        assert_eq!((r.stop_reason, r.content.len()), (StopReason::ContentFilter, 0));
    }
}
