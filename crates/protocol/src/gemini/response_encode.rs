//! A `ChatResponse` as a Gemini `GenerateContentResponse`, for Gemini clients, and errors in
//! the `google.rpc` shape they expect.

use serde_json::{json, Value};

use crate::chat::{ChatResponse, Part, StopReason, Usage};
use crate::error::{ApiError, ErrorKind, TranslateError};

/// `finishReason` for a stop reason.
pub(crate) fn finish_reason(reason: &StopReason) -> &'static str {
    match reason {
        StopReason::EndTurn | StopReason::ToolUse | StopReason::StopSequence => "STOP",
        StopReason::MaxTokens => "MAX_TOKENS",
        StopReason::ContentFilter => "SAFETY",
        StopReason::Other(_) => "OTHER",
    }
}

pub(crate) fn usage_metadata(usage: &Usage) -> Value {
    let mut u = json!({
        "promptTokenCount": usage.prompt_tokens,
        "candidatesTokenCount": usage.completion_tokens,
        "totalTokenCount": usage.total_tokens.max(usage.prompt_tokens + usage.completion_tokens),
    });
    if let Some(cached) = usage.cached_prompt_tokens {
        u["cachedContentTokenCount"] = json!(cached);
    }
    u
}

/// A `functionCall` part; arguments that are not a JSON object become `{}`.
pub(crate) fn function_call(id: &str, name: &str, arguments: &str) -> Value {
    let args = serde_json::from_str::<Value>(arguments).ok().filter(Value::is_object).unwrap_or_else(|| json!({}));
    json!({"functionCall": {"id": id, "name": name, "args": args}})
}

pub fn encode_response(response: &ChatResponse) -> Result<Vec<u8>, TranslateError> {
    let mut parts = Vec::new();
    for part in &response.content {
        match part {
            Part::Text(text) => parts.push(json!({ "text": text })),
            Part::ToolCall(call) => parts.push(function_call(&call.id, &call.name, &call.arguments)),
            Part::Image(_) | Part::ToolResult(_) => {}
        }
    }
    let body = json!({
        "candidates": [{
            "content": {"role": "model", "parts": parts},
            "finishReason": finish_reason(&response.stop_reason),
            "index": 0,
        }],
        "usageMetadata": usage_metadata(&response.usage),
        "modelVersion": response.model,
        "responseId": response.id,
    });
    serde_json::to_vec(&body).map_err(|e| TranslateError::invalid(format!("the response could not be encoded: {e}")))
}

/// The `google.rpc` status name of an error kind.
pub(crate) fn rpc_status(kind: ErrorKind) -> &'static str {
    match kind {
        ErrorKind::InvalidRequest | ErrorKind::RequestTooLarge => "INVALID_ARGUMENT",
        ErrorKind::Authentication => "UNAUTHENTICATED",
        ErrorKind::PermissionDenied => "PERMISSION_DENIED",
        ErrorKind::NotFound => "NOT_FOUND",
        ErrorKind::RateLimited => "RESOURCE_EXHAUSTED",
        ErrorKind::Overloaded => "UNAVAILABLE",
        ErrorKind::Timeout => "DEADLINE_EXCEEDED",
        ErrorKind::Server => "INTERNAL",
    }
}

/// `{"error":{"code":400,"message":"...","status":"INVALID_ARGUMENT"}}`: the body of an error
/// answer, and the data of a stream's error event.
pub fn encode_error(error: &ApiError) -> Vec<u8> {
    serde_json::to_vec(&error_object(error)).unwrap_or_default()
}

/// Where the error has a code (`content_blocked`), it is machine-readable the way Google's APIs
/// make one so: a `google.rpc.ErrorInfo` in `details`, its reason the code in upper case, its
/// metadata the error's (the guard, the kind).
fn error_object(error: &ApiError) -> Value {
    let mut body = json!({"code": error.kind.status(), "message": error.message, "status": rpc_status(error.kind)});
    if let Some(code) = &error.code {
        let metadata: serde_json::Map<String, Value> =
            error.metadata.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        body["details"] = json!([{
            "@type": "type.googleapis.com/google.rpc.ErrorInfo",
            "reason": code.to_ascii_uppercase(),
            "domain": ERROR_DOMAIN,
            "metadata": metadata,
        }]);
    }
    json!({ "error": body })
}

/// `ErrorInfo.domain`: who defines the reasons (Google's own say `googleapis.com`).
const ERROR_DOMAIN: &str = "switchyard.gateway";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ResponseContext, ToolCall};

    #[test]
    fn responses_and_errors_round_trip_through_the_decoders() {
        let response = ChatResponse {
            id: "r1".into(),
            model: "m".into(),
            created: 1,
            content: vec![
                Part::Text("hi".into()),
                Part::ToolCall(ToolCall { id: "c1".into(), name: "f".into(), arguments: r#"{"a":1}"#.into() }),
            ],
            stop_reason: StopReason::ToolUse,
            stop_sequence: None,
            usage: Usage::new(3, 4),
        };
        let body = encode_response(&response).unwrap();
        let back = super::super::decode_response(
            &body,
            &ResponseContext { created: 1, id: String::new(), ..ResponseContext::default() },
        )
        .unwrap();
        assert_eq!(back, response);
        let error = ApiError::new(ErrorKind::RateLimited, "slow down");
        assert_eq!(super::super::decode_error(&encode_error(&error)), Some(error));
    }
}
