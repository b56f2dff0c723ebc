//! A Bedrock `Converse` answer as a `ChatResponse`: the output message's `text` and `toolUse`
//! blocks (reasoning left out), its `stopReason`, and `usage`. Converse answers carry no id or
//! model name: the id is the request's, the model the one it was sent for.

use serde::Deserialize;
use serde_json::value::RawValue;

use super::{stop_reason_of, WireUsage};
use crate::chat::{ChatResponse, Part, ResponseContext, StopReason, ToolCall};
use crate::error::TranslateError;
use crate::json::Text;

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireResponse<'a> {
    #[serde(borrow)]
    output: Option<WireOutput<'a>>,
    #[serde(borrow)]
    stop_reason: Option<Text<'a>>,
    #[serde(default)]
    usage: WireUsage,
}

#[derive(Deserialize)]
struct WireOutput<'a> {
    #[serde(borrow)]
    message: Option<WireMessage<'a>>,
}

#[derive(Deserialize)]
struct WireMessage<'a> {
    #[serde(borrow, default)]
    content: Vec<WireBlock<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireBlock<'a> {
    #[serde(borrow)]
    text: Option<Text<'a>>,
    #[serde(borrow)]
    tool_use: Option<WireToolUse<'a>>,
}

#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct WireToolUse<'a> {
    #[serde(borrow)]
    tool_use_id: Text<'a>,
    #[serde(borrow)]
    name: Text<'a>,
    #[serde(borrow)]
    input: Option<&'a RawValue>,
}

pub fn decode_response(body: &[u8], context: &ResponseContext) -> Result<ChatResponse, TranslateError> {
    let wire: WireResponse<'_> = serde_json::from_slice(body)
        .map_err(|e| TranslateError::invalid(format!("the backend sent an invalid response: {e}")))?;
    let mut content = Vec::new();
    for block in wire.output.and_then(|o| o.message).map(|m| m.content).unwrap_or_default() {
        if let Some(call) = block.tool_use {
            content.push(Part::ToolCall(ToolCall {
                id: call.tool_use_id.into_owned(),
                name: call.name.into_owned(),
                arguments: call.input.map_or_else(|| "{}".to_owned(), |a| a.get().to_owned()),
            }));
        } else if let Some(text) = block.text {
            match content.last_mut() {
                Some(Part::Text(previous)) => previous.push_str(text.as_str()),
                _ => content.push(Part::Text(text.into_owned())),
            }
        }
    }
    let has_calls = content.iter().any(|p| matches!(p, Part::ToolCall(_)));
    let stop_reason =
        wire.stop_reason.as_ref().map_or(StopReason::EndTurn.or_tool_use(has_calls), |r| stop_reason_of(r.as_str()));
    Ok(ChatResponse {
        id: context.id.clone(),
        model: context.model.clone(),
        created: context.created,
        content,
        stop_reason,
        stop_sequence: None,
        usage: wire.usage.to_usage(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::Usage;

    fn context() -> ResponseContext {
        ResponseContext { created: 1_700_000_000, id: "req1".into(), ..ResponseContext::default() }
    }

    /// The API reference's answer shape: an output message, a stop reason, usage and metrics.
    const TOOL_ANSWER: &str = r#"{
      "output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "The user wants weather.", "signature": "abc"}}},
        {"text": "Let me check."},
        {"toolUse": {"toolUseId": "tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "name": "top_song", "input": {"sign": "WZPZ"}}}
      ]}},
      "stopReason": "tool_use",
      "usage": {"inputTokens": 375, "outputTokens": 36, "totalTokens": 411},
      "metrics": {"latencyMs": 2164}
    }"#;

    #[test]
    fn tool_answers_decode_with_their_usage_and_no_reasoning() {
        let r = decode_response(TOOL_ANSWER.as_bytes(), &context()).unwrap();
        assert_eq!(r.text(), "Let me check.");
        let calls: Vec<_> = r.tool_calls().collect();
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str(), calls[0].arguments.as_str()),
            ("tooluse_kZJMlvQmRJ6eAyJE5GIl7Q", "top_song", r#"{"sign": "WZPZ"}"#)
        );
        assert_eq!((r.stop_reason, r.id.as_str()), (StopReason::ToolUse, "req1"));
        assert_eq!(r.usage, Usage::new(375, 36));
    }

    #[test]
    fn a_guardrail_stop_is_a_content_filter() {
        let body = br#"{"output":{"message":{"role":"assistant","content":[{"text":"Sorry."}]}},"stopReason":"guardrail_intervened","usage":{"inputTokens":3,"outputTokens":2,"totalTokens":5}}"#;
        assert_eq!(decode_response(body, &context()).unwrap().stop_reason, StopReason::ContentFilter);
        assert!(decode_response(b"[1]", &context()).is_err());
    }
}
